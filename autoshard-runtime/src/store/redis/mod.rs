//! [`RedisStore`]: the [`DocumentStore`] on a standalone Redis server or a Redis Cluster.
//!
//! This module maps the trait's operations onto Redis data structures and server-side Lua
//! scripts. It does not know about entities, shards or retries (the mapper does).
//!
//! # Layout
//! - A document is a Redis **hash** with two fields: `v`, its version (decimal), and `d`,
//!   the document as one JSON object. A hash lets a script read and compare the version
//!   with one `HGET` and never decode JSON in Lua (whose numbers are doubles: it would
//!   round large integers and reorder maps); a foreign value at one of our keys is easy to
//!   tell apart (another type, or a hash without `v`/`d`) and is reported as
//!   [`Error::Malformed`] naming the key, never overwritten.
//! - The Redis key of a document is the namespace prefix followed by [`Key::encode`]:
//!   `autoshard:{Question:42}`, `autoshard:{Question:42/~shard:3}`. The `{…}` is the
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
//! `commit`, `insert`, `put` and `delete` all run one Lua script (`lua/commit.lua`): it
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
//! steps above on a cluster); `get_many` is one read script on a standalone server and one
//! per slot, in parallel, on a cluster. A scan page is one read script that lists the
//! page and reads its documents in one atomic step; on a cluster it reads there only the
//! documents in the index's own entity group (children of the parent's group, dynamic
//! shards), and those in groups of their own (root documents, static shards) with a
//! `get_many` after it, which is not atomic with the listing (the store contract promises
//! a snapshot only for the former).

mod connection;
mod layout;
mod reply;

use crate::document::{Document, Version, Versioned};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::{Commit, DocumentStore, Scan, ScanPage, Transaction, Write};
use ::redis::{Script, Value};
use async_trait::async_trait;
use connection::{Conn, Connections};
use layout::Layout;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

const COMMIT_LUA: &str = include_str!("lua/commit.lua");
const READ_LUA: &str = include_str!("lua/read.lua");

/// The field name reported in [`Error::Malformed`] when a whole stored value is wrong.
const WHOLE_DOCUMENT: &str = "(document)";

/// Options of a [`RedisStore`]; start from [`RedisOptions::default`].
///
/// ```
/// use autoshard_runtime::store::redis::RedisOptions;
/// use std::time::Duration;
///
/// let options = RedisOptions::default()
///     .namespace("votes-app")
///     .pool_size(4)
///     .response_timeout(Duration::from_secs(2));
/// assert_eq!(options.namespace, "votes-app");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedisOptions {
    /// Prefix of every Redis key the store uses, followed by `:` (none when empty).
    /// Must not contain `{` or `}`. Default `autoshard`.
    pub namespace: String,
    /// Multiplexed connections to a standalone server, used round-robin. Default 2.
    /// (A cluster connection multiplexes over one connection per node.)
    pub pool_size: usize,
    /// Timeout of each connection attempt. Default 2 s.
    pub connect_timeout: Duration,
    /// Timeout of each request. Default 5 s.
    pub response_timeout: Duration,
    /// Reconnection attempts after a connection drops (and at connect). Default 2.
    pub reconnect_retries: usize,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            namespace: "autoshard".to_owned(),
            pool_size: 2,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(5),
            reconnect_retries: 2,
        }
    }
}

impl RedisOptions {
    /// Sets [`RedisOptions::namespace`].
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Sets [`RedisOptions::pool_size`] (at least 1).
    #[must_use]
    pub fn pool_size(mut self, pool_size: usize) -> Self {
        self.pool_size = pool_size.max(1);
        self
    }

    /// Sets [`RedisOptions::connect_timeout`].
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`RedisOptions::response_timeout`].
    #[must_use]
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Sets [`RedisOptions::reconnect_retries`].
    #[must_use]
    pub fn reconnect_retries(mut self, retries: usize) -> Self {
        self.reconnect_retries = retries;
        self
    }

    fn layout(&self) -> Result<Layout> {
        let prefix = if self.namespace.is_empty() {
            String::new()
        } else {
            format!("{}:", self.namespace)
        };
        Layout::new(&prefix).ok_or_else(|| {
            Error::Invalid(format!(
                "Redis namespace `{}` must not contain `{{` or `}}` (it would move hash tags)",
                self.namespace
            ))
        })
    }
}

/// A [`DocumentStore`] on Redis: one type, two constructors, [`RedisStore::connect`] for
/// a standalone server and [`RedisStore::connect_cluster`] for a Redis Cluster. See the
/// [module docs](self) for the layout and the consistency of scans on a cluster.
///
/// An unreachable server fails at connect, naming its address:
/// ```
/// use autoshard_runtime::store::redis::{RedisOptions, RedisStore};
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
/// use autoshard_runtime::store::redis::RedisStore;
/// use autoshard_runtime::{DocumentStore, Key};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> autoshard_runtime::Result<()> {
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
pub struct RedisStore {
    conns: Connections,
    layout: Layout,
    commit_script: Script,
    read_script: Script,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("connections", &self.conns)
            .field("namespace", &self.layout.prefix())
            .finish_non_exhaustive()
    }
}

/// What the commit script did to one write.
#[derive(Clone, Copy, Debug)]
struct WriteOutcome {
    version: u64,
    existed: bool,
}

enum Applied {
    Committed(Vec<WriteOutcome>),
    Conflict(Key),
}

/// What a position in a script's KEYS holds, to name it in errors.
enum Role {
    Doc(Key),
    Counter(Key),
    Index,
}

/// The KEYS and ARGV of one commit script call.
#[derive(Default)]
struct Call {
    keys: Vec<String>,
    roles: Vec<Role>,
    positions: HashMap<String, usize>,
    args: Vec<String>,
}

impl Call {
    /// The 1-based KEYS position of `name`, adding it when new.
    fn key(&mut self, name: String, role: Role) -> usize {
        if let Some(&pos) = self.positions.get(&name) {
            return pos;
        }
        self.keys.push(name.clone());
        self.roles.push(role);
        let pos = self.keys.len();
        self.positions.insert(name, pos);
        pos
    }
}

/// A scan-index update the script cannot make on a cluster (another slot).
struct OutOfSlotIndex {
    write: usize,
    index: String,
    member: String,
    doc: String,
    put: bool,
    may_create: bool,
}

impl RedisStore {
    /// Connects to a standalone server (`redis://host:port/db`) with default options.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connects to a standalone server with `options`.
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<Self> {
        let layout = options.layout()?;
        let conns = Connections::standalone(url, &options).await?;
        Ok(Self::new(conns, layout))
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
        Ok(Self::new(conns, layout))
    }

    fn new(conns: Connections, layout: Layout) -> Self {
        RedisStore {
            conns,
            layout,
            commit_script: Script::new(COMMIT_LUA),
            read_script: Script::new(READ_LUA),
        }
    }

    /// Whether this store talks to a Redis Cluster.
    #[must_use]
    pub fn is_cluster(&self) -> bool {
        self.conns.is_cluster()
    }

    fn backend(
        &self,
        what: impl fmt::Display,
        err: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Error {
        Error::backend(format!("Redis {what} at {}", self.conns.endpoint()), err)
    }

    async fn query<T: ::redis::FromRedisValue>(&self, cmd: &::redis::Cmd, what: &str) -> Result<T> {
        let mut conn: Conn = self.conns.get();
        cmd.query_async(&mut conn)
            .await
            .map_err(|e| self.backend(what, e))
    }

    /// Reads documents with one read script per slot (one in all on a standalone server).
    async fn read(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        let names: Vec<String> = keys.iter().map(|k| self.layout.doc(k)).collect();
        let mut batches: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, name) in names.iter().enumerate() {
            let slot = if self.is_cluster() {
                layout::slot(name)
            } else {
                0
            };
            batches.entry(slot).or_default().push(i);
        }
        let calls = batches.into_values().map(|positions| {
            let mut invocation = self.read_script.prepare_invoke();
            for &i in &positions {
                invocation.key(&names[i]);
            }
            let mut conn = self.conns.get();
            let first = &names[positions[0]];
            async move {
                let reply: Value = invocation
                    .invoke_async(&mut conn)
                    .await
                    .map_err(|e| self.backend(format_args!("read of `{first}`"), e))?;
                Ok::<_, Error>((positions, reply))
            }
        });
        let mut out = vec![None; keys.len()];
        for (positions, reply) in futures::future::try_join_all(calls).await? {
            let entries = reply::array(&reply)
                .filter(|entries| entries.len() == positions.len())
                .ok_or_else(|| {
                    self.backend("read", reply::unexpected("the read script", &reply))
                })?;
            for (&i, entry) in positions.iter().zip(entries) {
                out[i] = self.decode_entry(&keys[i], entry)?;
            }
        }
        Ok(out)
    }

    fn decode_entry(&self, key: &Key, entry: &Value) -> Result<Option<Versioned>> {
        let bad = || self.backend("read", reply::unexpected("the read script", entry));
        let items = reply::array(entry).ok_or_else(bad)?;
        match items.first().and_then(reply::int) {
            Some(0) => Ok(None),
            Some(1) if items.len() == 3 => {
                let version = reply::uint(&items[1]).ok_or_else(bad)?;
                let json = match &items[2] {
                    Value::BulkString(bytes) => bytes.as_slice(),
                    _ => return Err(bad()),
                };
                let doc: Document = serde_json::from_slice(json).map_err(|e| Error::Malformed {
                    key: key.clone(),
                    field: WHOLE_DOCUMENT.to_owned(),
                    reason: format!("field `d` is not a JSON object: {e}"),
                })?;
                Ok(Some(Versioned {
                    doc,
                    version: Version(version),
                }))
            }
            Some(2) => Err(Error::Malformed {
                key: key.clone(),
                field: WHOLE_DOCUMENT.to_owned(),
                reason: items
                    .get(1)
                    .and_then(reply::text)
                    .unwrap_or("not ours")
                    .to_owned(),
            }),
            _ => Err(bad()),
        }
    }

    /// The commit script call for `txn`, and the index updates it leaves to the caller
    /// (out-of-slot indexes on a cluster).
    fn plan(&self, txn: &Transaction) -> Result<(Call, Vec<OutOfSlotIndex>)> {
        let cluster = self.is_cluster();
        let mut call = Call::default();
        let mut checked = HashSet::new();
        let mut expects_existing = HashSet::new();
        let mut checks = Vec::new();
        for (key, expected) in txn.reads() {
            let pos = call.key(self.layout.doc(key), Role::Doc(key.clone()));
            checked.insert(pos);
            if expected.is_some() {
                expects_existing.insert(key);
            }
            checks.push((
                pos,
                expected.map_or_else(|| "-".to_owned(), |v| v.0.to_string()),
            ));
        }
        for (key, _) in txn.writes() {
            let pos = call.key(self.layout.doc(key), Role::Doc(key.clone()));
            if checked.insert(pos) {
                checks.push((pos, "*".to_owned()));
            }
        }
        call.args.push(checks.len().to_string());
        for (pos, expected) in checks {
            call.args.push(pos.to_string());
            call.args.push(expected);
        }
        call.args.push(txn.writes().len().to_string());
        let mut out_of_slot = Vec::new();
        for (i, (key, write)) in txn.writes().iter().enumerate() {
            let doc = self.layout.doc(key);
            let pos = call.key(doc.clone(), Role::Doc(key.clone()));
            let counter = call.key(self.layout.counter(key), Role::Counter(key.group()));
            let (index, same_group) = self.layout.index_of(key);
            let (op, body) = match write {
                Write::Put(doc) => (
                    "p",
                    serde_json::to_string(doc).map_err(|e| Error::Malformed {
                        key: key.clone(),
                        field: WHOLE_DOCUMENT.to_owned(),
                        reason: format!("cannot be encoded as JSON: {e}"),
                    })?,
                ),
                Write::Delete => ("d", String::new()),
            };
            let index_pos = if cluster && !same_group {
                out_of_slot.push(OutOfSlotIndex {
                    write: i,
                    index,
                    member: key.encode(),
                    doc,
                    put: op == "p",
                    may_create: !expects_existing.contains(key),
                });
                0
            } else {
                call.key(index, Role::Index)
            };
            call.args.extend([
                pos.to_string(),
                counter.to_string(),
                op.to_owned(),
                body,
                index_pos.to_string(),
            ]);
        }
        call.args.push(self.layout.prefix().len().to_string());
        Ok((call, out_of_slot))
    }

    /// Runs `txn` through the commit script, with the out-of-slot index steps on a
    /// cluster (module docs).
    async fn apply(&self, txn: &Transaction, what: &str) -> Result<Applied> {
        if self.is_cluster() && !txn.single_group() {
            return Err(Error::Invalid(format!(
                "a Redis Cluster commits within one entity group only; this transaction \
                 spans several: {}",
                txn.keys().map(Key::encode).collect::<Vec<_>>().join(", ")
            )));
        }
        if txn.reads().is_empty() && txn.writes().is_empty() {
            return Ok(Applied::Committed(Vec::new()));
        }
        let (call, out_of_slot) = self.plan(txn)?;

        // Step 1 on a cluster: index entries of documents this write may create.
        let pre = out_of_slot
            .iter()
            .filter(|o| o.put && o.may_create)
            .map(|o| self.index_add(o));
        futures::future::try_join_all(pre).await?;

        let mut invocation = self.commit_script.prepare_invoke();
        for name in &call.keys {
            invocation.key(name);
        }
        for arg in &call.args {
            invocation.arg(arg);
        }
        let mut conn = self.conns.get();
        let first = &call.keys[0];
        let reply: Value = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.backend(format_args!("{what} of `{first}`"), e))?;
        let applied = self.decode_commit(&call, txn.writes().len(), &reply, what)?;

        // Step 2 on a cluster: entries of created documents again, deleted ones out.
        if let Applied::Committed(outcomes) = &applied {
            let post = out_of_slot.iter().filter_map(|o| {
                let existed = outcomes.get(o.write).is_some_and(|w| w.existed);
                match (o.put, existed) {
                    (true, false) => Some(futures::future::Either::Left(self.index_add(o))),
                    (false, true) => Some(futures::future::Either::Right(self.index_remove(o))),
                    _ => None,
                }
            });
            futures::future::try_join_all(post).await?;
        }
        Ok(applied)
    }

    async fn index_add(&self, o: &OutOfSlotIndex) -> Result<()> {
        let mut cmd = ::redis::cmd("ZADD");
        cmd.arg(&o.index).arg(0).arg(&o.member);
        self.query::<i64>(&cmd, &format!("index update of `{}`", o.index))
            .await?;
        Ok(())
    }

    async fn index_remove(&self, o: &OutOfSlotIndex) -> Result<()> {
        let mut cmd = ::redis::cmd("ZREM");
        cmd.arg(&o.index).arg(&o.member);
        let what = format!("index update of `{}`", o.index);
        self.query::<i64>(&cmd, &what).await?;
        let mut exists = ::redis::cmd("EXISTS");
        exists.arg(&o.doc);
        if self.query::<i64>(&exists, &what).await? > 0 {
            self.index_add(o).await?;
        }
        Ok(())
    }

    fn decode_commit(
        &self,
        call: &Call,
        writes: usize,
        reply: &Value,
        what: &str,
    ) -> Result<Applied> {
        let bad = || self.backend(what, reply::unexpected("the commit script", reply));
        let items = reply::array(reply).ok_or_else(bad)?;
        match items.first().and_then(reply::text) {
            Some("ok") if items.len() == 1 + 2 * writes => {
                let mut outcomes = Vec::with_capacity(writes);
                for pair in items[1..].chunks_exact(2) {
                    outcomes.push(WriteOutcome {
                        version: reply::uint(&pair[0]).ok_or_else(bad)?,
                        existed: reply::int(&pair[1]).ok_or_else(bad)? != 0,
                    });
                }
                Ok(Applied::Committed(outcomes))
            }
            Some("conflict") if items.len() == 2 => {
                let pos = reply::position(&items[1], call.keys.len()).ok_or_else(bad)?;
                match &call.roles[pos] {
                    Role::Doc(key) => Ok(Applied::Conflict(key.clone())),
                    _ => Err(bad()),
                }
            }
            Some("malformed") if items.len() == 3 => {
                let pos = reply::position(&items[1], call.keys.len()).ok_or_else(bad)?;
                let reason = reply::text(&items[2]).unwrap_or("not ours").to_owned();
                match &call.roles[pos] {
                    Role::Doc(key) => Err(Error::Malformed {
                        key: key.clone(),
                        field: WHOLE_DOCUMENT.to_owned(),
                        reason,
                    }),
                    Role::Counter(group) => Err(Error::Malformed {
                        key: group.clone(),
                        field: "(version counter)".to_owned(),
                        reason: format!("`{}`: {reason}", call.keys[pos]),
                    }),
                    Role::Index => Err(bad()),
                }
            }
            _ => Err(bad()),
        }
    }

    /// The outcome of the one write of a single-write transaction.
    fn single(&self, outcomes: &[WriteOutcome], what: &str) -> Result<WriteOutcome> {
        outcomes
            .first()
            .copied()
            .ok_or_else(|| self.backend(what, "the commit script reported no write"))
    }
}

#[async_trait]
impl DocumentStore for RedisStore {
    async fn get(&self, key: &Key) -> Result<Option<Versioned>> {
        let mut docs = self.read(std::slice::from_ref(key)).await?;
        Ok(docs.pop().flatten())
    }

    async fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.read(keys).await
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
        let index = self.layout.index(scan.parent.as_ref(), &scan.kind);
        let limit = scan.limit.max(1);
        let min = scan
            .cursor
            .as_ref()
            .map_or_else(|| "-".to_owned(), |c| format!("({c}"));
        let what = format!("scan of `{index}`");
        // One script lists the page and reads its documents: atomic for the members in
        // the index's own entity group (all of them on a standalone server).
        let mut invocation = self.read_script.prepare_invoke();
        invocation
            .key(&index)
            .arg("scan")
            .arg(self.layout.prefix())
            .arg(min)
            .arg(limit)
            .arg(if self.is_cluster() { "0" } else { "1" });
        let mut conn = self.conns.get();
        let reply: Value = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.backend(&what, e))?;
        let bad = || self.backend(&what, reply::unexpected("the read script", &reply));
        let (members, entries) = match reply::array(&reply) {
            Some([members, entries]) => (
                reply::array(members).ok_or_else(bad)?,
                reply::array(entries).ok_or_else(bad)?,
            ),
            _ => return Err(bad()),
        };
        if members.len() != entries.len() {
            return Err(bad());
        }
        let next = if members.len() == limit {
            members.last().and_then(reply::text).map(str::to_owned)
        } else {
            None
        };
        let mut found = Vec::with_capacity(members.len());
        let mut elsewhere = Vec::new();
        for (member, entry) in members.iter().zip(entries) {
            let member = reply::text(member).ok_or_else(bad)?;
            let key = Key::decode(member).map_err(|e| self.backend(&what, e))?;
            if key.kind() != scan.kind || key.parent() != scan.parent {
                tracing::warn!(%index, %member, "scan index entry of another kind or parent; skipped");
                continue;
            }
            let not_read = reply::array(entry)
                .is_some_and(|items| items.first().and_then(reply::int) == Some(3));
            if not_read {
                elsewhere.push(found.len());
                found.push((key, None));
            } else {
                let doc = self.decode_entry(&key, entry)?;
                found.push((key, doc));
            }
        }
        if !elsewhere.is_empty() {
            // Documents in groups of their own (cluster only): read after the listing.
            let keys: Vec<Key> = elsewhere.iter().map(|&i| found[i].0.clone()).collect();
            for (&i, doc) in elsewhere.iter().zip(self.read(&keys).await?) {
                found[i].1 = doc;
            }
        }
        let items = found
            .into_iter()
            .filter_map(|(key, doc)| doc.map(|doc| (key, doc)))
            .collect();
        Ok(ScanPage { items, next })
    }

    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        match self.apply(txn, "commit").await? {
            Applied::Committed(_) => Ok(Commit::Committed),
            Applied::Conflict(key) => Ok(Commit::Conflict { key }),
        }
    }

    fn cross_group_transactions(&self) -> bool {
        !self.is_cluster()
    }
}
