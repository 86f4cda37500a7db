//! [`PostgresStore`]: documents as JSONB rows of one PostgreSQL table (feature
//! `postgres`).
//!
//! # Driver and pool
//! `tokio-postgres` with a `deadpool-postgres` pool: the asynchronous driver most of the
//! Rust PostgreSQL ecosystem builds on (sqlx and diesel-async aside), with prepared
//! statements and explicit transactions, and a small pool that hands out its
//! connections without a background task. sqlx would bring its macros, migrations and
//! drivers for other databases, none of which a store of four statements needs.
//!
//! # Layout
//! One table, `<schema>.documents` (schema `autoshard` unless
//! [`PostgresOptions::schema`] says otherwise), created on first use or by
//! [`PostgresStore::migrate`]:
//! - `key`: the document's [`Key::encode`] text, the primary key (`COLLATE "C"`, so that
//!   keys compare byte by byte);
//! - `parent` and `kind`: the encoded parent key (`''` for a root) and the kind, indexed
//!   with `key` for scans, which page by key (`key > cursor ORDER BY key LIMIT n`);
//! - `version`: from one sequence of the schema, so a version is never handed out twice,
//!   also not after a delete and re-insert;
//! - `doc`: the document as JSONB.
//!
//! # Why commits are atomic and optimistic
//! Every write runs in a transaction that first takes a transaction-scoped advisory lock
//! for each key it touches or expects (`pg_advisory_xact_lock` on the key's hash:
//! exclusive for a key it writes, shared for one it only expects), in key order (so two
//! writers never deadlock); reads take none. Under these locks the versions
//! it reads are the latest committed ones and stay so until it commits: it checks every
//! expectation (an expected version, or an absent key, whose creation also takes the
//! lock), and either writes everything and commits, or rolls back and answers a
//! conflict. A merge does the same for its one document and folds with
//! [`merge::apply`], so it is exact by construction. Any entity group, one or several,
//! commits this way: the store commits across groups.

use crate::document::{Document, Version, Versioned};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::merge::{self, Merge, Merged};
use crate::store::{Commit, DocumentStore, Scan, ScanPage, Transaction, Write};
use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use std::fmt;
use std::str::FromStr;
use tokio_postgres::types::Json;
use tokio_postgres::NoTls;

/// Options of a [`PostgresStore`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresOptions {
    schema: String,
    pool_size: usize,
}

impl Default for PostgresOptions {
    /// Schema `autoshard`, a pool of 16 connections.
    fn default() -> Self {
        PostgresOptions {
            schema: "autoshard".to_owned(),
            pool_size: 16,
        }
    }
}

impl PostgresOptions {
    /// The schema that holds the table (created when missing). Letters, digits and `_`,
    /// not starting with a digit; anything else fails at connect with
    /// [`Error::Invalid`].
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The most connections the pool opens (at least 1).
    #[must_use]
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }
}

/// A [`DocumentStore`] on PostgreSQL (module docs: layout, and why commits are atomic).
///
/// ```no_run
/// use autoshard::store::postgres::{PostgresOptions, PostgresStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> autoshard::Result<()> {
/// let options = PostgresOptions::default().schema("votes");
/// let store = PostgresStore::connect_with("postgres://app@127.0.0.1:5432/app", options).await?;
/// let db = autoshard::Mapper::new(store);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    sql: std::sync::Arc<Sql>,
    /// `host:port/dbname`, for messages (never the password).
    target: String,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.target)
            .field("schema", &self.sql.schema)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/dbname`)
    /// with the default options; see [`PostgresStore::connect_with`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects to the database at `url`, checks the connection, and creates the schema,
    /// table, index and sequence when missing ([`PostgresStore::migrate`]).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a URL that does not parse or a bad schema name;
    /// [`Error::Backend`] naming the server (never the password) when it cannot be
    /// reached or refuses the login.
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Self> {
        let config = tokio_postgres::Config::from_str(url).map_err(|_| {
            Error::Invalid("invalid PostgreSQL URL (not shown: it may hold a password)".into())
        })?;
        let target = target_of(&config);
        Self::from_config(config, options, target).await
    }

    async fn from_config(
        config: tokio_postgres::Config,
        options: PostgresOptions,
        target: String,
    ) -> Result<Self> {
        let schema = &options.schema;
        let valid = schema
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && schema
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(Error::Invalid(format!(
                "PostgreSQL schema `{schema}`: use letters, digits and `_`, not starting with a digit"
            )));
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .build()
            .map_err(|e| Error::backend(format!("PostgreSQL pool for {target}"), e.to_string()))?;
        let store = PostgresStore {
            pool,
            sql: std::sync::Arc::new(Sql::new(schema)),
            target,
        };
        store.migrate().await?;
        Ok(store)
    }

    /// Creates the schema, the table, its scan index and the version sequence when
    /// missing (every connect does it; idempotent).
    pub async fn migrate(&self) -> Result<()> {
        let client = self.client().await?;
        client
            .batch_execute(&self.sql.migrate)
            .await
            .map_err(|e| self.error("creating the schema", &e))
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(|e| {
            Error::backend(
                format!("connecting to PostgreSQL at {}", self.target),
                e.to_string(),
            )
        })
    }

    fn error(&self, what: &str, e: &tokio_postgres::Error) -> Error {
        Error::backend(
            format!("{what} on PostgreSQL at {}", self.target),
            e.to_string(),
        )
    }

    /// Runs `body` in a transaction holding the advisory locks of `keys` (module docs):
    /// exclusive for a key it may write (`true`), shared for one it only expects.
    /// Commits when `body` answers `Ok((true, value))`, rolls back otherwise.
    async fn locked<T, F>(&self, what: &str, keys: &[(&Key, bool)], body: F) -> Result<T>
    where
        F: for<'t> FnOnce(
            &'t tokio_postgres::Transaction<'t>,
        ) -> futures::future::BoxFuture<'t, Result<(bool, T)>>,
    {
        let mut client = self.client().await?;
        let txn = client
            .transaction()
            .await
            .map_err(|e| self.error(what, &e))?;
        let mut locks: std::collections::BTreeMap<String, bool> = std::collections::BTreeMap::new();
        for (key, write) in keys {
            *locks.entry(key.encode()).or_default() |= write;
        }
        let (encoded, writes): (Vec<String>, Vec<bool>) = locks.into_iter().unzip();
        txn.execute(&self.sql.lock, &[&encoded, &writes])
            .await
            .map_err(|e| self.error(what, &e))?;
        let (commit, value) = body(&txn).await?;
        let done = if commit {
            txn.commit().await
        } else {
            txn.rollback().await
        };
        done.map_err(|e| self.error(what, &e))?;
        Ok(value)
    }
}

impl PostgresStore {
    /// The key of one of `reads` whose version is not the one expected, read without a
    /// lock (so only a hint that a locked check would fail too: versions never come back).
    async fn failed_expectation(
        &self,
        reads: &[(String, Option<Version>, Key)],
    ) -> Result<Option<Key>> {
        if reads.is_empty() {
            return Ok(None);
        }
        let wanted: Vec<&String> = reads.iter().map(|(k, _, _)| k).collect();
        let client = self.client().await?;
        let rows = client
            .query(&self.sql.versions, &[&wanted])
            .await
            .map_err(|e| self.error("commit", &e))?;
        let stored: std::collections::HashMap<String, Version> = rows
            .iter()
            .map(|row| (row.get::<_, String>(0), version_of(row.get(1))))
            .collect();
        Ok(reads
            .iter()
            .find(|(encoded, expected, _)| stored.get(encoded).copied() != *expected)
            .map(|(_, _, key)| key.clone()))
    }
}

/// The statements, for one schema.
struct Sql {
    schema: String,
    migrate: String,
    lock: String,
    get: String,
    get_many: String,
    versions: String,
    insert: String,
    upsert: String,
    delete: String,
    scan: String,
    scan_roots: String,
}

impl Sql {
    fn new(schema: &str) -> Self {
        let t = format!("\"{schema}\".documents");
        let seq = format!("\"{schema}\".versions");
        Sql {
            schema: schema.to_owned(),
            migrate: format!(
                "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
                 CREATE TABLE IF NOT EXISTS {t} (
                     key text COLLATE \"C\" PRIMARY KEY,
                     parent text COLLATE \"C\" NOT NULL,
                     kind text COLLATE \"C\" NOT NULL,
                     version bigint NOT NULL,
                     doc jsonb NOT NULL
                 );
                 CREATE INDEX IF NOT EXISTS documents_scan ON {t} (parent, kind, key);
                 CREATE SEQUENCE IF NOT EXISTS {seq};"
            ),
            lock: "SELECT CASE WHEN w THEN pg_advisory_xact_lock(hashtextextended(k, 0)) \
                   ELSE pg_advisory_xact_lock_shared(hashtextextended(k, 0)) END \
                   FROM unnest($1::text[], $2::bool[]) AS t(k, w) ORDER BY k"
                .to_owned(),
            get: format!("SELECT version, doc FROM {t} WHERE key = $1"),
            get_many: format!("SELECT key, version, doc FROM {t} WHERE key = ANY($1)"),
            versions: format!("SELECT key, version FROM {t} WHERE key = ANY($1)"),
            insert: format!(
                "INSERT INTO {t} (key, parent, kind, version, doc) \
                 VALUES ($1, $2, $3, nextval('{seq}'), $4) \
                 ON CONFLICT (key) DO NOTHING RETURNING version"
            ),
            upsert: format!(
                "INSERT INTO {t} (key, parent, kind, version, doc) \
                 VALUES ($1, $2, $3, nextval('{seq}'), $4) \
                 ON CONFLICT (key) DO UPDATE SET version = EXCLUDED.version, doc = EXCLUDED.doc \
                 RETURNING version"
            ),
            delete: format!("DELETE FROM {t} WHERE key = $1"),
            scan: format!(
                "SELECT key, version, doc FROM {t} \
                 WHERE parent = $1 AND kind = $2 AND key > $3 ORDER BY key LIMIT $4"
            ),
            scan_roots: format!(
                "SELECT key, version, doc FROM {t} \
                 WHERE parent = '' AND kind = $1 AND key > $2 ORDER BY key LIMIT $3"
            ),
        }
    }
}

/// `host:port/dbname` of a connection config.
fn target_of(config: &tokio_postgres::Config) -> String {
    let host = config.get_hosts().first().map_or_else(
        || "localhost".to_owned(),
        |h| match h {
            tokio_postgres::config::Host::Tcp(host) => host.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        },
    );
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", config.get_dbname().unwrap_or(""))
}

fn version_of(v: i64) -> Version {
    Version(u64::try_from(v).unwrap_or(0))
}

fn parent_of(key: &Key) -> String {
    key.parent().map(|p| p.encode()).unwrap_or_default()
}

fn versioned(row: &tokio_postgres::Row, first: usize) -> Versioned {
    let Json(doc): Json<Document> = row.get(first + 1);
    Versioned {
        doc,
        version: version_of(row.get(first)),
    }
}

#[async_trait]
impl DocumentStore for PostgresStore {
    async fn get(&self, key: &Key) -> Result<Option<Versioned>> {
        let client = self.client().await?;
        let row = client
            .query_opt(&self.sql.get, &[&key.encode()])
            .await
            .map_err(|e| self.error("get", &e))?;
        Ok(row.map(|row| versioned(&row, 0)))
    }

    async fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let encoded: Vec<String> = keys.iter().map(Key::encode).collect();
        let client = self.client().await?;
        let rows = client
            .query(&self.sql.get_many, &[&encoded])
            .await
            .map_err(|e| self.error("get_many", &e))?;
        let found: std::collections::HashMap<String, Versioned> = rows
            .iter()
            .map(|row| (row.get::<_, String>(0), versioned(row, 1)))
            .collect();
        Ok(encoded.iter().map(|k| found.get(k).cloned()).collect())
    }

    async fn insert(&self, key: &Key, doc: Document) -> Result<Version> {
        let sql = self.sql.clone();
        let (encoded, parent, kind) = (key.encode(), parent_of(key), key.kind().to_owned());
        let version = self
            .locked("insert", &[(key, true)], move |txn| {
                Box::pin(async move {
                    let row = txn
                        .query_opt(&sql.insert, &[&encoded, &parent, &kind, &Json(&doc)])
                        .await
                        .map_err(|e| Error::backend("insert on PostgreSQL", e.to_string()))?;
                    Ok((true, row.map(|row| version_of(row.get(0)))))
                })
            })
            .await?;
        version.ok_or_else(|| Error::AlreadyExists { key: key.clone() })
    }

    async fn put(&self, key: &Key, doc: Document) -> Result<Version> {
        let sql = self.sql.clone();
        let (encoded, parent, kind) = (key.encode(), parent_of(key), key.kind().to_owned());
        self.locked("put", &[(key, true)], move |txn| {
            Box::pin(async move {
                let row = txn
                    .query_one(&sql.upsert, &[&encoded, &parent, &kind, &Json(&doc)])
                    .await
                    .map_err(|e| Error::backend("put on PostgreSQL", e.to_string()))?;
                Ok((true, version_of(row.get(0))))
            })
        })
        .await
    }

    async fn delete(&self, key: &Key) -> Result<bool> {
        let sql = self.sql.clone();
        let encoded = key.encode();
        self.locked("delete", &[(key, true)], move |txn| {
            Box::pin(async move {
                let n = txn
                    .execute(&sql.delete, &[&encoded])
                    .await
                    .map_err(|e| Error::backend("delete on PostgreSQL", e.to_string()))?;
                Ok((true, n > 0))
            })
        })
        .await
    }

    async fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        let client = self.client().await?;
        let after = scan.cursor.clone().unwrap_or_default();
        let limit = i64::try_from(scan.limit.max(1)).unwrap_or(i64::MAX);
        let rows = match &scan.parent {
            Some(parent) => {
                client
                    .query(
                        &self.sql.scan,
                        &[&parent.encode(), &scan.kind, &after, &limit],
                    )
                    .await
            }
            None => {
                client
                    .query(&self.sql.scan_roots, &[&scan.kind, &after, &limit])
                    .await
            }
        }
        .map_err(|e| self.error("scan", &e))?;
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            let encoded: String = row.get(0);
            let key = Key::decode(&encoded).map_err(|e| {
                Error::backend(
                    "scan on PostgreSQL",
                    format!("a stored key does not decode: {e}"),
                )
            })?;
            items.push((key, versioned(row, 1)));
        }
        let next = (rows.len() == scan.limit.max(1))
            .then(|| rows.last().map(|row| row.get::<_, String>(0)))
            .flatten();
        Ok(ScanPage { items, next })
    }

    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        if txn.reads().is_empty() && txn.writes().is_empty() {
            return Ok(Commit::Committed);
        }
        let keys: Vec<(&Key, bool)> = txn
            .reads()
            .iter()
            .map(|(key, _)| (key, false))
            .chain(txn.writes().iter().map(|(key, _)| (key, true)))
            .collect();
        let sql = self.sql.clone();
        let reads: Vec<(String, Option<Version>, Key)> = txn
            .reads()
            .iter()
            .map(|(k, v)| (k.encode(), *v, k.clone()))
            .collect();
        let writes: Vec<(Key, Write)> = txn.writes().to_vec();
        // An expectation that fails already fails without a lock: losers of a race on a
        // hot document do not queue behind its lock only to give up.
        if let Some(key) = self.failed_expectation(&reads).await? {
            return Ok(Commit::Conflict { key });
        }
        self.locked("commit", &keys, move |t| {
            Box::pin(async move {
                let wanted: Vec<String> = reads.iter().map(|(k, _, _)| k.clone()).collect();
                let rows = t
                    .query(&sql.versions, &[&wanted])
                    .await
                    .map_err(|e| Error::backend("commit on PostgreSQL", e.to_string()))?;
                let stored: std::collections::HashMap<String, Version> = rows
                    .iter()
                    .map(|row| (row.get::<_, String>(0), version_of(row.get(1))))
                    .collect();
                for (encoded, expected, key) in &reads {
                    if stored.get(encoded).copied() != *expected {
                        return Ok((false, Commit::Conflict { key: key.clone() }));
                    }
                }
                for (key, write) in &writes {
                    let encoded = key.encode();
                    let result = match write {
                        Write::Put(doc) => {
                            let (parent, kind) = (parent_of(key), key.kind().to_owned());
                            t.execute(&sql.upsert, &[&encoded, &parent, &kind, &Json(doc)])
                                .await
                        }
                        Write::Delete => t.execute(&sql.delete, &[&encoded]).await,
                    };
                    result.map_err(|e| Error::backend("commit on PostgreSQL", e.to_string()))?;
                }
                Ok((true, Commit::Committed))
            })
        })
        .await
    }

    async fn merge(&self, merge: &Merge) -> Result<Merged> {
        let sql = self.sql.clone();
        let merge_owned = merge.clone();
        self.locked("merge", &[(&merge.key, true)], move |t| {
            Box::pin(async move {
                let merge = merge_owned;
                let encoded = merge.key.encode();
                let row = t
                    .query_opt(&sql.get, &[&encoded])
                    .await
                    .map_err(|e| Error::backend("merge on PostgreSQL", e.to_string()))?;
                let current = row.map(|row| versioned(&row, 0));
                match merge::apply(current.as_ref().map(|c| &c.doc), &merge)? {
                    merge::Step::Answer(answer) => Ok((false, answer)),
                    merge::Step::Write(doc) => {
                        let (parent, kind) = (parent_of(&merge.key), merge.key.kind().to_owned());
                        t.execute(&sql.upsert, &[&encoded, &parent, &kind, &Json(&doc)])
                            .await
                            .map_err(|e| Error::backend("merge on PostgreSQL", e.to_string()))?;
                        Ok((true, Merged::Applied))
                    }
                }
            })
        })
        .await
    }
}
