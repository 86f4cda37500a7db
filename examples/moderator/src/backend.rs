//! Which store the app and the benchmark run on, and connecting to it with errors a user
//! can act on (a malformed URL, an unreachable server).
//!
//! It only builds stores; it never creates, flushes or deletes a server's data beyond the
//! namespace it is given.

use autoshard::prelude::*;
use autoshard::store::LatencyStore;
use autoshard::store::postgres::{PostgresOptions, PostgresStore};
use redis::IntoConnectionInfo;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The store to run on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded [`MemoryStore`], answering at memory speed.
    Memory,
    /// A [`MemoryStore`] behind a [`LatencyStore`]: each write to an entity group holds
    /// it for `commit`, each read takes `read` (see [`ModelledLatency`]).
    Modelled(ModelledLatency),
    /// A standalone Redis server.
    Redis(String),
    /// A Redis Cluster, reached through any of these nodes.
    RedisCluster(Vec<String>),
    /// A PostgreSQL database at this URL (`postgres://user:password@host:port/dbname`).
    Postgres(String),
}

/// The commit and read latency of the modelled store.
///
/// The default, 100 ms per commit and 20 ms per read, is the low end of what the paper's
/// store reports: Cloud Datastore's High Replication Datastore runs on Megastore, whose
/// paper (the AutoShard paper's reference \[1\]) gives average reads of tens of
/// milliseconds and average writes of 100 to 400 ms; the low end fits clients in the same
/// region as the store, as App Engine apps are. With a 100 ms commit one entity group
/// takes at most 10 writes per second; the paper's 75 votes per second over 16 questions
/// put about 4.7 votes per second on each question, so a question's document is busy
/// about half the time (visible contention, yet a stable queue), while each of its 10
/// shards is busy about 5% of the time. Datastore's advice of about one sustained write
/// per second per entity group is a budget for safety, not the latency, so it is not used
/// as the commit time (at 1 s the naive variant with retries would queue without bound).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelledLatency {
    /// How long one write holds its entity group.
    pub commit: Duration,
    /// How long one read takes.
    pub read: Duration,
}

/// [`ModelledLatency::default`]'s commit latency in ms (the CLI's default too).
pub const DEFAULT_COMMIT_MS: u64 = 100;
/// [`ModelledLatency::default`]'s read latency in ms.
pub const DEFAULT_READ_MS: u64 = 20;

impl Default for ModelledLatency {
    fn default() -> Self {
        ModelledLatency {
            commit: Duration::from_millis(DEFAULT_COMMIT_MS),
            read: Duration::from_millis(DEFAULT_READ_MS),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Memory => write!(f, "MemoryStore"),
            Backend::Modelled(m) => write!(
                f,
                "MemoryStore, modelled latency: commit {} ms per entity group, read {} ms",
                m.commit.as_millis(),
                m.read.as_millis()
            ),
            Backend::Redis(url) => write!(f, "Redis at {}", redis_target(url)),
            Backend::RedisCluster(urls) => {
                let targets: Vec<String> = urls.iter().map(|u| redis_target(u)).collect();
                write!(f, "Redis Cluster at {}", targets.join(", "))
            }
            Backend::Postgres(url) => write!(f, "PostgreSQL at {}", postgres_target(url)),
        }
    }
}

impl Backend {
    /// Whether this is a Redis server or cluster.
    #[must_use]
    pub fn is_redis(&self) -> bool {
        matches!(self, Backend::Redis(_) | Backend::RedisCluster(_))
    }

    /// The URL of a standalone Redis server ("" for other stores).
    fn redis_url(&self) -> &str {
        match self {
            Backend::Redis(url) => url,
            _ => "",
        }
    }

    /// Checks that every URL parses, so a typo fails before any work starts.
    pub fn validate(&self) -> Result<()> {
        match self {
            Backend::Memory | Backend::Modelled(_) => Ok(()),
            Backend::Postgres(url) => postgres_config(url).map(|_| ()),
            Backend::Redis(url) => check_url(url),
            Backend::RedisCluster(urls) if urls.is_empty() => Err(Error::Invalid(
                "--redis-cluster needs at least one node URL".into(),
            )),
            Backend::RedisCluster(urls) => urls.iter().try_for_each(|u| check_url(u)),
        }
    }

    /// The command-line flags that name this store to another process (`--redis URL`,
    /// ...); `None` for the embedded stores, which live in one process.
    #[must_use]
    pub fn flags(&self) -> Option<Vec<String>> {
        match self {
            Backend::Memory | Backend::Modelled(_) => None,
            Backend::Redis(url) => Some(vec!["--redis".into(), url.clone()]),
            Backend::RedisCluster(urls) => Some(
                std::iter::once("--redis-cluster".to_owned())
                    .chain(urls.iter().cloned())
                    .collect(),
            ),
            Backend::Postgres(url) => Some(vec!["--postgres".into(), url.clone()]),
        }
    }

    /// A fresh store. On Redis every key lives under `namespace`, on PostgreSQL every
    /// document in a schema named after it, so runs never see each other's data; the
    /// embedded stores are new and empty.
    pub async fn connect(&self, namespace: &str) -> Result<Arc<dyn DocumentStore>> {
        self.validate()?;
        let options = RedisOptions::default().namespace(namespace);
        Ok(match self {
            Backend::Memory => Arc::new(MemoryStore::new()),
            Backend::Modelled(m) => {
                Arc::new(LatencyStore::new(MemoryStore::new(), m.commit).with_read_latency(m.read))
            }
            Backend::Redis(_) => Arc::new(
                RedisStore::connect_with(self.redis_url(), options)
                    .await
                    .map_err(|e| connect_error(self, e))?,
            ),
            Backend::RedisCluster(urls) => Arc::new(
                RedisStore::connect_cluster_with(urls, options)
                    .await
                    .map_err(|e| connect_error(self, e))?,
            ),
            Backend::Postgres(url) => {
                let options = PostgresOptions::default().schema(schema_of(namespace));
                Arc::new(PostgresStore::connect_with(url, options).await?)
            }
        })
    }
}

impl Backend {
    /// Deletes what runs under `namespace` stored (commands that need several stores
    /// name them `namespace-...`): on Redis every key under `namespace:` or
    /// `namespace-` (on a cluster, on every node listed), on PostgreSQL the schemas named
    /// after them. Nothing for the embedded stores, which vanish with the process.
    /// Returns the keys and schemas deleted.
    pub async fn clean(&self, namespace: &str) -> Result<u64> {
        self.validate()?;
        match self {
            Backend::Memory | Backend::Modelled(_) => Ok(0),
            Backend::Redis(url) => clean_redis(url, namespace).await,
            Backend::RedisCluster(urls) => {
                let mut deleted = 0;
                for url in urls {
                    deleted += clean_redis(url, namespace).await?;
                }
                Ok(deleted)
            }
            Backend::Postgres(url) => {
                let fail = |e| connect_error(self, Error::backend("cleaning", e));
                let (client, connection) = postgres_config(url)?
                    .connect(tokio_postgres::NoTls)
                    .await
                    .map_err(fail)?;
                let task = tokio::spawn(connection);
                let dropped = drop_schemas(&client, &schema_of(namespace)).await;
                drop(client);
                let _ = task.await;
                dropped
                    .map_err(|e| Error::backend(format!("dropping the schemas of {namespace}"), e))
            }
        }
    }
}

/// Drops the schema `schema` and the schemas `schema_...`; returns how many.
async fn drop_schemas(
    client: &tokio_postgres::Client,
    schema: &str,
) -> std::result::Result<u64, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT nspname::text FROM pg_namespace \
             WHERE nspname = $1 OR left(nspname, length($1) + 1) = $1 || '_'",
            &[&schema],
        )
        .await?;
    for row in &rows {
        let name: String = row.get(0);
        let quoted = name.replace('"', "\"\"");
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{quoted}\" CASCADE"))
            .await?;
    }
    Ok(rows.len() as u64)
}

/// Deletes the keys of one Redis server under the prefixes `namespace:` and
/// `namespace-` (on a cluster node, the ones it holds), one `UNLINK` per key so that no
/// two keys of one command need to share a slot.
async fn clean_redis(url: &str, namespace: &str) -> Result<u64> {
    let fail = |e: redis::RedisError| {
        Error::backend(
            format!("cleaning {namespace} on Redis at {}", redis_target(url)),
            e,
        )
    };
    let client = redis::Client::open(url).map_err(fail)?;
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .map_err(fail)?;
    let pattern: String = namespace
        .chars()
        .flat_map(|c| match c {
            '*' | '?' | '[' | ']' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .chain("[-:]*".chars())
        .collect();
    let (mut cursor, mut deleted) = (0_u64, 0_u64);
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut con)
            .await
            .map_err(fail)?;
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("UNLINK").arg(key);
            }
            let counts: Vec<u64> = pipe.query_async(&mut con).await.map_err(fail)?;
            deleted += counts.iter().sum::<u64>();
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}

/// The PostgreSQL schema that holds a namespace's documents: its letters, digits and
/// `_` (anything else becomes `_`), prefixed when it starts with a digit, shortened with
/// a hash of the whole when longer than PostgreSQL's 63-byte identifiers.
#[must_use]
pub fn schema_of(namespace: &str) -> String {
    let mut schema: String = namespace
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if !schema.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        schema.insert_str(0, "ns_");
    }
    if schema.len() > 63 {
        use std::fmt::Write;
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        namespace.hash(&mut hasher);
        schema.truncate(46);
        let _ = write!(schema, "_{:016x}", hasher.finish());
    }
    schema
}

/// The parsed PostgreSQL URL, or an error that does not repeat it (it may hold a
/// password).
pub fn postgres_config(url: &str) -> Result<tokio_postgres::Config> {
    url.parse().map_err(|_| {
        Error::Invalid(
            "bad PostgreSQL URL (not shown: it may hold a password); \
             expected postgres://USER:PASSWORD@HOST:PORT/DBNAME"
                .into(),
        )
    })
}

/// `host:port/dbname` of a PostgreSQL URL, without user or password.
fn postgres_target(url: &str) -> String {
    let Ok(config) = postgres_config(url) else {
        return "(a bad URL)".into();
    };
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", config.get_dbname().unwrap_or(""))
}

fn check_url(url: &str) -> Result<()> {
    url.into_connection_info().map(|_| ()).map_err(|e| {
        Error::Invalid(format!(
            "bad Redis URL (not shown: it may hold a password): {e}; expected \
             redis://[:PASSWORD@]HOST:PORT/[DB]"
        ))
    })
}

/// `redis://host:port/db` of a Redis URL, without user or password.
pub(crate) fn redis_target(url: &str) -> String {
    match url.into_connection_info() {
        Ok(info) => format!("redis://{}/{}", info.addr(), info.redis_settings().db()),
        Err(_) => "(a bad URL)".into(),
    }
}

/// Says which server a connection failed to, and why: "cannot reach" only when the
/// server could not be reached (refused, timed out, I/O), else the server's answer
/// (a wrong password, a database index out of range...).
fn connect_error(backend: &Backend, e: Error) -> Error {
    let Error::Backend { source, .. } = e else {
        return e;
    };
    let unreachable = source
        .downcast_ref::<redis::RedisError>()
        .is_some_and(|r| r.is_io_error() || r.is_connection_refusal() || r.is_timeout());
    let context = if unreachable {
        format!("cannot reach {backend}; is a server running there?")
    } else {
        format!("connecting to {backend}")
    };
    Error::Backend { context, source }
}
