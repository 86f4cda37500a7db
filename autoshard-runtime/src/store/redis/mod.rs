//! [`RedisStore`]: the [`DocumentStore`] on a standalone Redis server or a Redis Cluster. It
//! maps the store's operations onto Redis hashes and server-side Lua scripts and knows
//! nothing of entities, shards or retries (the mapper does).
//!
//! - A document is a hash (`v`: its version, `p:<name>`: each property's JSON) at the
//!   namespace followed by [`Key::encode`], whose `{…}` is the entity group: one group, one
//!   cluster slot. Its write record lives apart, in its record hash (`<key>/~w`, same slot),
//!   so a load reads values only. Versions count up per document (a merge) and past a
//!   counter per group (a put), never reused.
//! - Invariant: every write (`commit`, `insert`, `put`, `delete`: `lua/commit.lua`; `merge`:
//!   `lua/merge_common.lua`, or `lua/merge.lua` for what that one leaves) is one script
//!   that checks every expectation and that every key it touches is ours before its first
//!   write, so it applies all or nothing, atomically, without WATCH (on a cluster, one
//!   call of `lua/own.lua` carries several owner-alone commits, each one document's,
//!   each decided and applied whole on its own: `own_batch`). Scan indexes in another
//!   slot are kept around the script in an order that never hides a live document.
//! - Limits: Redis's own (512 MB per key and per property's JSON text); keep ids short and
//!   hot documents small.
//!
//! Files: `options`, `connection`, `call` (one script call), `durability` (write scripts,
//! waiting for replicas),
//! `names` (key names and slots), `read`, `cluster_read` (reads on a cluster, sent to
//! each master as one pipeline), `slots` (which master serves a slot), `decode` (replies
//! into documents), `commit`, `own_batch` (owner-alone commits on a cluster, batched per
//! master),
//! `merge`, `index`, `reply`. The full layout,
//! the scan-index protocol and the round trips of each call: the repository's
//! `docs/design/redis.md`.

mod call;
mod cluster_read;
mod commit;
mod connection;
mod decode;
mod durability;
mod index;
mod merge;
mod names;
mod options;
mod own_batch;
mod read;
mod reply;
mod slots;

pub use options::RedisOptions;

use crate::document::{Document, Version, Versioned};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::clock::ServerClock;
use crate::store::{
    Commit, CommitReply, DocumentStore, Found, Lookup, Merge, Merged, Scan, ScanPage, Transaction,
};
use ::redis::Script;
use async_trait::async_trait;
use commit::Applied;
use connection::{Conn, Connections};
use names::Names;
use read::Records;
use std::fmt;
use std::sync::Arc;

// The scripts that write check owners with the one copy of the rule in `owner.lua`, and
// compare and count integers with the helpers of `digits.lua`.
const COMMIT_LUA: &str = concat!(
    include_str!("lua/digits.lua"),
    include_str!("lua/owner.lua"),
    include_str!("lua/commit.lua")
);
const OWN_LUA: &str = concat!(
    include_str!("lua/digits.lua"),
    include_str!("lua/owner.lua"),
    include_str!("lua/own.lua")
);
const READ_LUA: &str = include_str!("lua/read.lua");
const MERGE_LUA: &str = concat!(
    include_str!("lua/digits.lua"),
    include_str!("lua/owner.lua"),
    include_str!("lua/merge.lua")
);
const MERGE_COMMON_LUA: &str = include_str!("lua/merge_common.lua");

/// A [`DocumentStore`] on Redis: one type, two constructors, [`RedisStore::connect`] for
/// a standalone server and [`RedisStore::connect_cluster`] for a Redis Cluster. See the
/// [module docs](self) for the layout and the consistency of scans on a cluster.
///
/// A `RedisStore` is a cheap handle, as redis-rs's `MultiplexedConnection` is: clones
/// share its connections, so `Mapper<RedisStore>` clones into tasks.
///
/// An unreachable server fails at connect, naming its address:
/// ```
/// use autoshard::store::redis::{RedisOptions, RedisStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let options = RedisOptions::default().reconnect_retries(0);
/// let err = RedisStore::connect_with("redis://127.0.0.1:1/", options).await.unwrap_err();
/// assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
/// # }
/// ```
///
/// Typical use (needs a server):
/// ```no_run
/// use autoshard::store::redis::RedisStore;
/// use autoshard::Key;
/// use autoshard::store::DocumentStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> autoshard::Result<()> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379/").await?;
/// let key = Key::new("Question", "42");
/// store.put(&key, [("text".to_owned(), "Why?".into())].into()).await?;
/// assert!(store.get(&key).await?.is_some());
///
/// let cluster = RedisStore::connect_cluster(&["redis://127.0.0.1:7000/"]).await?;
/// assert!(!cluster.cross_group_transactions());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    conns: Arc<Connections>,
    names: Arc<Names>,
    scripts: Arc<Scripts>,
    /// Owner-alone commits waiting for their master's next call (cluster only).
    own_batches: Arc<own_batch::OwnBatches>,
    /// The replicas every write waits for (see `durability`).
    replicas: Option<durability::Replicas>,
    /// The server's clock, read at most once per half second (`store::clock`).
    clock: Arc<ServerClock>,
}

/// The store's Lua scripts, loaded into a server at their first use.
struct Scripts {
    commit: Script,
    own: Script,
    read: Script,
    merge: Script,
    merge_common: Script,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("connections", &self.conns)
            .field("namespace", &self.names.prefix())
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to a standalone server with default options.
    ///
    /// The URL is redis-rs's: `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]`, e.g.
    /// `redis://:s3cret@127.0.0.1:6379/2` for a password and database 2 (or
    /// `redis+unix:///path/to/socket?db=2&pass=s3cret`). The connection is checked with a
    /// `PING`, so a wrong password, a database out of range or an unreachable server fails
    /// here, saying which. Error messages show the server's address, never the URL (it
    /// may hold a password).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connects to a standalone server with `options`.
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<Self> {
        let names = options.names()?;
        let conns = Connections::standalone(url, &options).await?;
        Ok(Self::new(conns, names, &options))
    }

    /// Connects to a standalone server through a `redis::Client` built elsewhere (from
    /// a `redis::ConnectionInfo`, say), with `options`.
    ///
    /// ```no_run
    /// # async fn run() -> autoshard::Result<()> {
    /// use autoshard::store::{RedisOptions, RedisStore};
    ///
    /// let client = autoshard::redis::Client::open("redis://127.0.0.1:6379/0").expect("a valid URL");
    /// let store = RedisStore::from_client(client, RedisOptions::default()).await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg_attr(
        feature = "tls",
        doc = r#"
Over TLS with a private certificate authority (feature `tls`):

```no_run
# async fn run() -> autoshard::Result<()> {
use autoshard::redis::{Client, TlsCertificates};
use autoshard::store::{RedisOptions, RedisStore};

let ca = std::fs::read("ca.pem").expect("the CA's certificate, PEM");
let certs = TlsCertificates { client_tls: None, root_cert: Some(ca) };
let client = Client::build_with_tls("rediss://redis.internal:6380/0", certs).expect("a valid URL");
let store = RedisStore::from_client(client, RedisOptions::default()).await?;
# let _ = store;
# Ok(())
# }
```
"#
    )]
    pub async fn from_client(client: ::redis::Client, options: RedisOptions) -> Result<Self> {
        let names = options.names()?;
        let conns = Connections::standalone_client(client, &options).await?;
        Ok(Self::new(conns, names, &options))
    }

    /// Connects to a Redis Cluster through any of its nodes, with default options.
    /// Transactions must then stay within one entity group
    /// ([`DocumentStore::cross_group_transactions`] is `false`).
    pub async fn connect_cluster<S: AsRef<str>>(urls: &[S]) -> Result<Self> {
        Self::connect_cluster_with(urls, RedisOptions::default()).await
    }

    /// Connects to a Redis Cluster with `options`.
    pub async fn connect_cluster_with<S: AsRef<str>>(
        urls: &[S],
        options: RedisOptions,
    ) -> Result<Self> {
        let names = options.names()?;
        let urls: Vec<&str> = urls.iter().map(AsRef::as_ref).collect();
        let conns = Connections::cluster(&urls, &options).await?;
        Ok(Self::new(conns, names, &options))
    }

    /// Connects to a Redis Cluster through a `redis::cluster::ClusterClient` built
    /// elsewhere (TLS certificates, ACL user, read-from-replicas, ...). The client's own
    /// timeouts and retries apply; `options` gives the rest (namespace).
    ///
    /// ```no_run
    /// # async fn run() -> autoshard::Result<()> {
    /// use autoshard::redis::cluster::ClusterClientBuilder;
    /// use autoshard::store::{RedisOptions, RedisStore};
    ///
    /// let client = ClusterClientBuilder::new(vec!["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"])
    ///     .username("app".to_owned())
    ///     .password("s3cret".to_owned())
    ///     .build()
    ///     .expect("valid node URLs");
    /// let store = RedisStore::from_cluster_client(&client, RedisOptions::default()).await?;
    /// assert!(store.is_cluster());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_cluster_client(
        client: &::redis::cluster::ClusterClient,
        options: RedisOptions,
    ) -> Result<Self> {
        let names = options.names()?;
        let (connect, _) = RedisOptions::default().cluster_bounds();
        let endpoint = "the nodes of the given client".into();
        let conns = Connections::cluster_client(client, endpoint, connect, None).await?;
        Ok(Self::new(conns, names, &options))
    }

    fn new(conns: Connections, names: Names, options: &RedisOptions) -> Self {
        RedisStore {
            conns: Arc::new(conns),
            names: Arc::new(names),
            scripts: Arc::new(Scripts {
                commit: Script::new(COMMIT_LUA),
                own: Script::new(OWN_LUA),
                read: Script::new(READ_LUA),
                merge: Script::new(MERGE_LUA),
                merge_common: Script::new(MERGE_COMMON_LUA),
            }),
            own_batches: Arc::default(),
            clock: Arc::default(),
            replicas: durability::Replicas::from_options(options),
        }
    }

    /// Whether this store talks to a Redis Cluster.
    #[must_use]
    pub fn is_cluster(&self) -> bool {
        self.conns.is_cluster()
    }

    pub(super) fn backend(
        &self,
        what: impl fmt::Display,
        err: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Error {
        Error::backend(format!("Redis {what} at {}", self.conns.endpoint()), err)
    }

    pub(super) async fn query<T: ::redis::FromRedisValue>(
        &self,
        cmd: &::redis::Cmd,
        what: &str,
    ) -> Result<T> {
        let mut conn: Conn = self.conns.get();
        cmd.query_async(&mut conn)
            .await
            .map_err(|e| self.backend(what, e))
    }
}

#[async_trait]
impl DocumentStore for RedisStore {
    async fn get(&self, key: &Key) -> Result<Option<Versioned>> {
        let mut docs = self.read(std::slice::from_ref(key), Records::All).await?;
        Ok(docs.pop().flatten())
    }

    async fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.read(keys, Records::All).await
    }

    async fn insert(&self, key: &Key, doc: Document) -> Result<Version> {
        let txn = Transaction::new()
            .expect(key.clone(), None)
            .put(key.clone(), doc);
        match self.run_commit(&txn, "insert").await? {
            Applied::Committed(outcomes) => Ok(Version(self.single(&outcomes, "insert")?.version)),
            Applied::Conflict(_) => Err(Error::AlreadyExists { key: key.clone() }),
        }
    }

    async fn put(&self, key: &Key, doc: Document) -> Result<Version> {
        let txn = Transaction::new().put(key.clone(), doc);
        match self.run_commit(&txn, "put").await? {
            Applied::Committed(outcomes) => Ok(Version(self.single(&outcomes, "put")?.version)),
            Applied::Conflict(key) => {
                Err(self.backend("put", format!("unexpected conflict on `{key}`")))
            }
        }
    }

    async fn delete(&self, key: &Key) -> Result<bool> {
        let txn = Transaction::new().delete(key.clone());
        match self.run_commit(&txn, "delete").await? {
            Applied::Committed(outcomes) => Ok(self.single(&outcomes, "delete")?.existed),
            Applied::Conflict(key) => {
                Err(self.backend("delete", format!("unexpected conflict on `{key}`")))
            }
        }
    }

    async fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        self.scan_page(scan, Records::All).await
    }

    async fn lookup(&self, lookup: &Lookup) -> Result<Found> {
        self.lookup_all(lookup).await
    }

    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        Ok(self.commit_versioned(txn).await?.outcome)
    }

    async fn commit_versioned(&self, txn: &Transaction) -> Result<CommitReply> {
        match self.run_commit(txn, "commit").await? {
            Applied::Committed(outcomes) => Ok(CommitReply {
                outcome: Commit::Committed,
                // The script answers 0 for a write that leaves no document.
                versions: Some(
                    outcomes
                        .iter()
                        .map(|w| (w.version > 0).then_some(Version(w.version)))
                        .collect(),
                ),
            }),
            Applied::Conflict(key) => Ok(CommitReply::untold(Commit::Conflict { key })),
        }
    }

    async fn merge(&self, merge: &Merge) -> Result<Merged> {
        self.run_merge(merge).await
    }

    async fn make_durable(&self, keys: &[Key]) -> Result<()> {
        RedisStore::make_durable(self, keys).await
    }

    fn cross_group_transactions(&self) -> bool {
        !self.is_cluster()
    }

    /// On a standalone server a lookup is one `MULTI` or one read script; a cluster reads
    /// each slot on its own.
    fn snapshot_lookups(&self) -> bool {
        !self.is_cluster()
    }

    /// The server's clock (`TIME`; on a cluster, the clock of the node that answers),
    /// read at most once per half second and counted on in between, never ahead of it
    /// (`store::clock`).
    async fn now_ms(&self) -> Result<u64> {
        let read = async {
            let (secs, micros): (u64, u64) = self.query(&::redis::cmd("TIME"), "clock").await?;
            Ok(secs.saturating_mul(1000).saturating_add(micros / 1000))
        };
        self.clock.now_ms(read).await
    }
}
