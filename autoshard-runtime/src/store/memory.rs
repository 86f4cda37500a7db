//! [`MemoryStore`]: the embedded default store, all in one process.
//!
//! It keeps every document in one ordered map behind one mutex, so every operation
//! (including a whole [`Transaction`]) is atomic and linearizable. It never sleeps and
//! models no latency; wrap it in [`crate::store::LatencyStore`] for that.
//!
//! # Limits
//! None of its own: keys and documents are limited by the process's memory.

use crate::document::{Document, Version, Versioned, check_nesting};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::{
    Commit, CommitReply, DocumentStore, Found, Lookup, Merge, Merged, Scan, ScanPage, Transaction,
    Write, merge,
    ownership::{self, OWNER},
};
use crate::sync::lock;
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

/// A thread-safe in-memory [`DocumentStore`] with real optimistic-concurrency semantics.
///
/// Versions come from one store-wide counter, so a version is never handed out twice,
/// not even for a key that was deleted and inserted again. Cloning is cheap and the clones
/// share one state, like clones of a connection handle.
///
/// ```
/// use autoshard::Key;
/// use autoshard::store::{Commit, DocumentStore, MemoryStore, Transaction};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> autoshard::Result<()> {
/// let store = MemoryStore::new();
/// let key = Key::new("Counter", "hits");
/// let v1 = store.insert(&key, [("n".to_owned(), 1.into())].into()).await?;
///
/// // An optimistic write that expects the version it read.
/// let txn = Transaction::new()
///     .expect(key.clone(), Some(v1))
///     .put(key.clone(), [("n".to_owned(), 2.into())].into());
/// assert_eq!(store.commit(&txn).await?, Commit::Committed);
/// // The same transaction again: `v1` is stale now, nothing is applied.
/// assert!(matches!(store.commit(&txn).await?, Commit::Conflict { .. }));
/// assert_eq!(store.get(&key).await?.unwrap().doc["n"], 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    docs: BTreeMap<Key, Versioned>,
    /// The last version handed out (store-wide).
    last_version: u64,
}

impl State {
    /// One page of `scan` (the trait's `scan`, under the lock the caller holds).
    fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        // Keys sort by path, segment by segment, kind before name: the children of one
        // parent with one kind (and their own descendants) form one run of keys, which
        // starts at the child named "" and ends at the first key with another kind at
        // that depth. A scan walks only that run, and jumps over each child's
        // descendants (past any kind a descendant can have).
        let first = match &scan.parent {
            Some(parent) => parent.child(scan.kind.as_str(), ""),
            None => Key::new(scan.kind.as_str(), ""),
        };
        let mut from = match scan.cursor_key()? {
            None => Bound::Included(first),
            Some(cursor) => Bound::Excluded(cursor),
        };
        let depth = scan.parent.as_ref().map_or(0, |p| p.path().len());
        let limit = scan.limit.max(1);
        let mut items = Vec::new();
        let mut next = None;
        'seek: loop {
            for (key, doc) in self.docs.range((from.clone(), Bound::Unbounded)) {
                let in_run = scan
                    .parent
                    .as_ref()
                    .is_none_or(|parent| key.path().starts_with(parent.path()))
                    && key.path().get(depth).is_some_and(|s| s.kind() == scan.kind);
                if !in_run {
                    break 'seek;
                }
                if key.path().len() > depth + 1 {
                    // A descendant of a child: go on after the last of them.
                    let child = &key.path()[..=depth];
                    from = Bound::Excluded(past_descendants(child));
                    continue 'seek;
                }
                if key.parent() != scan.parent {
                    continue;
                }
                if items.len() == limit {
                    // There is at least one more; resume after the last one returned.
                    next = items.last().map(|(k, _): &(Key, Versioned)| k.encode());
                    break 'seek;
                }
                items.push((key.clone(), doc.clone()));
            }
            break;
        }
        Ok(ScanPage { items, next })
    }

    fn next_version(&mut self) -> Version {
        self.last_version += 1;
        Version(self.last_version)
    }

    /// [`ownership::check`] of a write to `key` carrying `token`, by the system clock.
    fn check_owner(&self, key: &Key, token: Option<&str>) -> Result<()> {
        let doc = self.docs.get(key).map(|d| &d.doc);
        ownership::check(key, doc, token, ownership::system_now_ms())
    }

    fn store(&mut self, key: &Key, doc: Document) -> Version {
        let version = self.next_version();
        self.docs.insert(key.clone(), Versioned { doc, version });
        version
    }
}

impl MemoryStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        MemoryStore::default()
    }

    /// How many documents the store holds (main documents and shards alike).
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().docs.len()
    }

    /// Whether the store holds no document.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the map half-updated: every
        // mutation is a single map operation or a sequence validated before it starts.
        lock(&self.state)
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("documents", &self.len())
            .finish()
    }
}

#[async_trait]
impl DocumentStore for MemoryStore {
    async fn get(&self, key: &Key) -> Result<Option<Versioned>> {
        tracing::trace!(key = %key, "memory get");
        Ok(self.lock().docs.get(key).cloned())
    }

    async fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        tracing::trace!(keys = keys.len(), "memory get_many");
        let state = self.lock();
        Ok(keys.iter().map(|k| state.docs.get(k).cloned()).collect())
    }

    async fn lookup(&self, lookup: &Lookup) -> Result<Found> {
        tracing::trace!(
            keys = lookup.keys.len(),
            scans = lookup.scans.len(),
            "memory lookup"
        );
        // Without records, a document is copied without its write record (but the entry
        // of `lookup.writer`): a load never copies the entries of the writers a shard
        // remembers.
        let copy = |doc: &Versioned| {
            if lookup.records {
                return doc.clone();
            }
            let mut values: Document = doc
                .doc
                .iter()
                .filter(|(name, _)| name.as_str() != merge::RECORD)
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect();
            if let Some((writer, entry)) = lookup.writer.as_deref().and_then(|writer| {
                let entry = doc.doc.get(merge::RECORD)?.as_object()?.get(writer)?;
                Some((writer, entry))
            }) {
                let entries = [(writer.to_owned(), entry.clone())].into_iter().collect();
                values.insert(merge::RECORD.to_owned(), serde_json::Value::Object(entries));
            }
            Versioned {
                doc: values,
                version: doc.version,
            }
        };
        // One lock for the pages and the documents: one atomic read (`snapshot_lookups`).
        let state = self.lock();
        let mut pages = Vec::with_capacity(lookup.scans.len());
        for scan in &lookup.scans {
            let mut page = state.scan(scan)?;
            if !lookup.records {
                for (_, doc) in &mut page.items {
                    *doc = copy(doc);
                }
            }
            pages.push(page);
        }
        let docs = lookup
            .keys
            .iter()
            .map(|k| state.docs.get(k).map(copy))
            .collect();
        Ok(Found { docs, pages })
    }

    async fn insert(&self, key: &Key, doc: Document) -> Result<Version> {
        tracing::trace!(key = %key, "memory insert");
        check_nesting(key, &doc)?;
        let mut state = self.lock();
        if state.docs.contains_key(key) {
            return Err(Error::AlreadyExists { key: key.clone() });
        }
        Ok(state.store(key, doc))
    }

    async fn put(&self, key: &Key, doc: Document) -> Result<Version> {
        tracing::trace!(key = %key, "memory put");
        check_nesting(key, &doc)?;
        let mut state = self.lock();
        state.check_owner(key, None)?;
        Ok(state.store(key, doc))
    }

    async fn delete(&self, key: &Key) -> Result<bool> {
        tracing::trace!(key = %key, "memory delete");
        let mut state = self.lock();
        state.check_owner(key, None)?;
        Ok(state.docs.remove(key).is_some())
    }

    async fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        tracing::trace!(kind = %scan.kind, parent = ?scan.parent, cursor = ?scan.cursor, "memory scan");
        self.lock().scan(scan)
    }

    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        Ok(self.commit_versioned(txn).await?.outcome)
    }

    async fn commit_versioned(&self, txn: &Transaction) -> Result<CommitReply> {
        tracing::trace!(
            reads = txn.reads().len(),
            writes = txn.writes().len(),
            "memory commit"
        );
        txn.check_nesting()?;
        let mut state = self.lock();
        for (key, expected) in txn.reads() {
            let actual = state.docs.get(key).map(|d| d.version);
            if actual != *expected {
                tracing::debug!(key = %key, ?expected, ?actual, "memory commit conflict");
                return Ok(CommitReply::untold(Commit::Conflict { key: key.clone() }));
            }
        }
        for key in txn.keys() {
            state.check_owner(key, txn.owner())?;
        }
        let mut versions = Vec::with_capacity(txn.writes().len());
        for (key, write) in txn.writes() {
            let version =
                match write {
                    Write::Put(doc) => Some(state.store(key, doc.clone())),
                    Write::Values(doc) => {
                        let kept = state.docs.get(key).map(|d| &d.doc);
                        let doc = merge::with_kept_record(kept, doc);
                        Some(state.store(key, doc))
                    }
                    Write::Delete => {
                        state.docs.remove(key);
                        None
                    }
                    Write::Own(owner) => state
                        .docs
                        .get(key)
                        .map(|current| current.doc.clone())
                        .map(|mut doc| {
                            match owner {
                                Some(owner) => doc.insert(OWNER.to_owned(), owner.to_value()),
                                None => doc.remove(OWNER),
                            };
                            state.store(key, doc)
                        }),
                };
            versions.push(version);
        }
        Ok(CommitReply {
            outcome: Commit::Committed,
            versions: Some(versions),
        })
    }

    async fn merge(&self, merge: &Merge) -> Result<Merged> {
        tracing::trace!(key = %merge.key, property = %merge.property, "memory merge");
        merge.check()?;
        let mut state = self.lock();
        state.check_owner(&merge.key, None)?;
        let current = state.docs.get(&merge.key).map(|d| &d.doc);
        match merge::reference(current, merge)? {
            merge::Step::Answer(answer) => Ok(answer),
            merge::Step::Write(doc) => {
                state.store(&merge.key, doc);
                Ok(Merged::Applied)
            }
        }
    }

    /// A lookup reads under one lock.
    fn snapshot_lookups(&self) -> bool {
        true
    }
}

/// A key that sorts after every descendant of the key whose path is `path` (and before
/// the next key that is not one): its path with one more segment of a kind that sorts
/// after every kind (`char::MAX`; kinds are Rust names or start with `~`).
fn past_descendants(path: &[crate::key::Segment]) -> Key {
    let mut key = Key::new(path[0].kind(), path[0].name());
    for segment in &path[1..] {
        key = key.child(segment.kind(), segment.name());
    }
    key.child(char::MAX.to_string(), "")
}
