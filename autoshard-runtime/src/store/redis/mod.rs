//! [`RedisStore`]: the [`DocumentStore`] on a standalone Redis server or a Redis Cluster.
//!
//! This module maps the trait's operations onto Redis data structures and server-side Lua
//! scripts. It does not know about entities, shards or retries (the mapper does).
//!
//! # Layout
//! - A document is a Redis **hash**: field `v` holds its version (decimal) and each
//!   property `name` is a field `p:name` holding that property's JSON. Its write record
//!   `~w` (see [`crate::store::merge`]) lives apart, in the document's *record hash*
//!   (`<document key>/~w`, same slot): a field `w:<writer>` holding `[seq,at_ms]` per
//!   writer. A load without records reads the document's hash alone, however many
//!   writers its record remembers. A script reads and compares the version with one
//!   `HGET` and never decodes a document in Lua (whose numbers are doubles: it would
//!   round large integers); a merge (`lua/merge.lua`) touches only the property it folds
//!   and its writer's record entry, on Lua numbers for integers of up to 15 characters
//!   and decimal text beyond, whatever the number of writers the document records. The
//!   scripts name a document's record hash from the document's key rather than taking it
//!   in `KEYS` (as a scan page reads the documents its index lists): Redis lets a script
//!   touch keys of its own slot that it was not given; a proxy that insists on declared
//!   keys is not supported. A foreign value at one of our keys is easy to tell apart (another type,
//!   or a hash with other fields) and is reported as [`Error::Malformed`] naming the key,
//!   never overwritten.
//! - The Redis key of a document is the namespace prefix followed by [`Key::encode`]:
//!   `autoshard:{Question:42}`, `autoshard:{Question:42/~shard:votes.3}`. The `{…}` is the
//!   key's entity group, so on a cluster one group lives in one slot (a group transaction
//!   is one script on one node) while the static shards of a hot entity, each a group of
//!   its own, spread over slots and nodes. Escaping in [`Key::encode`] keeps any id from
//!   moving the hash tag or colliding with another key.
//! - Versions come from one counter per entity group, `prefix{group}#v`, `INCR`ed by the
//!   script that writes. A counter only grows and is never deleted, so a version is never
//!   handed out twice for a key, even across delete and re-insert (no ABA). The cost is
//!   one small key per entity group ever written.
//! - Scans read a sorted set per (parent, kind), all scores 0, members the encoded keys,
//!   paged with `ZRANGEBYLEX` from an exclusive cursor (the last member returned): a
//!   document listed for the whole scan is returned exactly once. Children's index lives
//!   under the parent's key, in the parent's entity group. Root documents' index is
//!   `prefix{#root:Kind}#i`, a hash tag of its own.
//!
//! # Writes are scripts, not WATCH
//! `commit`, `insert`, `put` and `delete` all run one Lua script (`lua/commit.lua`), and
//! `merge` runs `lua/merge.lua` (one round trip, in the document's slot, no conflict): it
//! checks every expected version and that every key it touches is ours, and only then
//! writes (a script error does not roll back earlier writes, so nothing may fail after the
//! first write). A script runs atomically on the server, so it needs no WATCH, cannot lose
//! its guard to a reconnect or to another task's `EXEC` on a shared connection, and has no
//! nil `EXEC` reply to misread. Therefore requests of any number of tasks share a small
//! pool of multiplexed connections (standalone) or one cluster connection.
//!
//! # Scan indexes on a cluster
//! On a standalone server the script also updates the scan index, atomically. On a
//! cluster it does so whenever the index shares the document's entity group (children,
//! dynamic shards). The index of a document that starts an entity group (root documents,
//! static shards, sub-group anchors) lives in another slot, so it is updated around the
//! script, in this order:
//! 1. a write that may create the document: `ZADD` before the script, and `ZADD` again
//!    after it if the script created the document;
//! 2. a delete: after the script, `ZREM`, then `EXISTS`, and `ZADD` back if the document
//!    was re-created meanwhile.
//!
//! So a live document always has its index entry, except for one round trip after a
//! concurrent delete of the same key when it was re-created at once; index entries whose
//! document is gone (a crash between the steps, a conflicting transaction) are skipped by
//! the scan. An update of a document that the transaction expects to exist (the hot path
//! of a sharded save) touches no index at all.
//!
//! # Round trips
//! `get`, `insert`, `put`, `delete` and `commit` are one script call each (plus the index
//! steps above on a cluster); on a standalone server `get` is one `HGETALL` and `get_many`
//! one `HGETALL` per document inside `MULTI`/`EXEC` (atomic, and several times cheaper for
//! the server than the same reads inside a script); on a cluster `get_many` is one read
//! script per slot, in parallel. A lookup on a standalone server lists its scan pages in
//! the same `MULTI`, with the documents it asks to prefetch, and is answered from that
//! one step when every listed document was read in it (a load's dynamic-shard scan
//! mostly lists just the compacted document, which it prefetches); otherwise, and on a
//! cluster, the read script reads it. A scan page is one read script that lists the
//! page and reads its documents in one atomic step; on a cluster it reads there only the
//! documents in the index's own entity group (children of the parent's group, dynamic
//! shards), and those in groups of their own (root documents, static shards) with a
//! `get_many` after it, which is not atomic with the listing (the store contract promises
//! a snapshot only for the former).
//!
//! # Limits
//! Redis's own: a key (the namespace and [`Key::encode`]) and each property's JSON text
//! are at most 512 MB; no limit of the store's own comes first. Large keys and documents
//! still cost every call that reads them: keep ids short and hot documents small.
//!
//! # Where things are
//! `options` ([`RedisOptions`]), `connection` (pooled standalone and cluster
//! connections), `durability` (running a write script, and waiting for replicas when
//! asked), `layout` (the names of documents, counters and indexes; slots), `read`
//! (`get_many`, lookups and scan pages: `MULTI` reads and `lua/read.lua`), `commit` (planning and running
//! `lua/commit.lua`), `merge` (`lua/merge.lua`), `index` (scan-index upkeep around the script on a cluster), `reply`
//! (decoding script replies).

mod commit;
mod connection;
mod durability;
mod index;
mod layout;
mod merge;
mod options;
mod read;
mod reply;

pub use options::RedisOptions;

use crate::document::{Document, Version, Versioned};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::{
    Commit, DocumentStore, Found, Lookup, Merge, Merged, Scan, ScanPage, Transaction,
};
use ::redis::Script;
use async_trait::async_trait;
use commit::Applied;
use connection::{Conn, Connections};
use layout::Layout;
use std::fmt;
use std::sync::Arc;

const COMMIT_LUA: &str = include_str!("lua/commit.lua");
const READ_LUA: &str = include_str!("lua/read.lua");
const MERGE_LUA: &str = include_str!("lua/merge.lua");

/// The field name reported in [`Error::Malformed`] when a whole stored value is wrong.
const WHOLE_DOCUMENT: &str = "(document)";

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
    layout: Arc<Layout>,
    scripts: Arc<Scripts>,
    /// The replicas every write waits for (see `durability`).
    replicas: Option<durability::Replicas>,
}

/// The store's Lua scripts, loaded into a server at their first use.
struct Scripts {
    commit: Script,
    read: Script,
    merge: Script,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("connections", &self.conns)
            .field("namespace", &self.layout.prefix())
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
        let layout = options.layout()?;
        let conns = Connections::standalone(url, &options).await?;
        Ok(Self::new(conns, layout, &options))
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
        let layout = options.layout()?;
        let conns = Connections::standalone_client(client, &options).await?;
        Ok(Self::new(conns, layout, &options))
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
        let layout = options.layout()?;
        let urls: Vec<&str> = urls.iter().map(AsRef::as_ref).collect();
        let conns = Connections::cluster(&urls, &options).await?;
        Ok(Self::new(conns, layout, &options))
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
        let layout = options.layout()?;
        let conns =
            Connections::cluster_client(client, "the nodes of the given client".into()).await?;
        Ok(Self::new(conns, layout, &options))
    }

    fn new(conns: Connections, layout: Layout, options: &RedisOptions) -> Self {
        RedisStore {
            conns: Arc::new(conns),
            layout: Arc::new(layout),
            scripts: Arc::new(Scripts {
                commit: Script::new(COMMIT_LUA),
                read: Script::new(READ_LUA),
                merge: Script::new(MERGE_LUA),
            }),
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
        let mut docs = self.read(std::slice::from_ref(key), true).await?;
        Ok(docs.pop().flatten())
    }

    async fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.read(keys, true).await
    }

    async fn insert(&self, key: &Key, doc: Document) -> Result<Version> {
        let txn = Transaction::new()
            .expect(key.clone(), None)
            .put(key.clone(), doc);
        match self.apply(&txn, "insert").await? {
            Applied::Committed(outcomes) => Ok(Version(self.single(&outcomes, "insert")?.version)),
            Applied::Conflict(_) => Err(Error::AlreadyExists { key: key.clone() }),
        }
    }

    async fn put(&self, key: &Key, doc: Document) -> Result<Version> {
        let txn = Transaction::new().put(key.clone(), doc);
        match self.apply(&txn, "put").await? {
            Applied::Committed(outcomes) => Ok(Version(self.single(&outcomes, "put")?.version)),
            Applied::Conflict(key) => {
                Err(self.backend("put", format!("unexpected conflict on `{key}`")))
            }
        }
    }

    async fn delete(&self, key: &Key) -> Result<bool> {
        let txn = Transaction::new().delete(key.clone());
        match self.apply(&txn, "delete").await? {
            Applied::Committed(outcomes) => Ok(self.single(&outcomes, "delete")?.existed),
            Applied::Conflict(key) => {
                Err(self.backend("delete", format!("unexpected conflict on `{key}`")))
            }
        }
    }

    async fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        self.scan_page(scan, true).await
    }

    async fn lookup(&self, lookup: &Lookup) -> Result<Found> {
        self.lookup_all(lookup).await
    }

    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        match self.apply(txn, "commit").await? {
            Applied::Committed(_) => Ok(Commit::Committed),
            Applied::Conflict(key) => Ok(Commit::Conflict { key }),
        }
    }

    async fn merge(&self, merge: &Merge) -> Result<Merged> {
        self.run_merge(merge).await
    }

    fn cross_group_transactions(&self) -> bool {
        !self.is_cluster()
    }
}
