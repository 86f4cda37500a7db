//! [`LatencyStore`]: a decorator that makes any store behave like a store whose writes to
//! one entity group are slow and serialized, such as Cloud Datastore (about one commit
//! per second per entity group).
//!
//! It must not change what a store answers, only when: every answer still comes from the
//! inner store, so a decorated store passes the same conformance suite.

use crate::document::{Document, Version, Versioned};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::{
    Commit, CommitReply, DocumentStore, FoldFound, FoldLookup, Found, Lookup, Merge, Merged, Scan,
    ScanPage, Transaction,
};
use crate::sync::lock;
use async_trait::async_trait;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// Wraps a store so that writes model a slow, per-entity-group serialized commit log.
///
/// # The model
/// - Every write (`commit`, `insert`, `put`, `delete`) takes the lock of each entity group
///   it touches ([`Key::group`]; locks are fair, FIFO, and taken in key order so two
///   transactions never deadlock), holds it for `commit_latency`, then applies through the
///   inner store. So one group accepts at most one write per `commit_latency`, the way a
///   Datastore entity group accepts about one commit per second; different groups (for
///   example the ten shards of a question) proceed in parallel.
/// - A `commit` whose expected versions are already stale when it gets the lock fails at
///   once, without the latency: a real store detects the conflict when it prepares the
///   commit, and a failed commit does not consume the group's write slot. Commits that are
///   still valid wait the full latency and are validated again by the inner store, so
///   optimistic semantics are exactly the inner store's.
/// - Reads take `read_latency` (zero by default) and no lock: they never wait for writers,
///   and they see the last applied write. A reader that reads while a write is in flight
///   and then commits will therefore conflict, which is the contention being modelled.
///
/// Clones share the locks, so clones of one decorator model one store.
///
/// ```
/// use autoshard::Key;
/// use autoshard::store::{DocumentStore, LatencyStore, MemoryStore};
/// use std::time::{Duration, Instant};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> autoshard::Result<()> {
/// let store = LatencyStore::new(MemoryStore::new(), Duration::from_millis(5));
/// let key = Key::new("Counter", "hits");
/// let started = Instant::now();
/// store.put(&key, Default::default()).await?;
/// store.put(&key, Default::default()).await?;
/// assert!(started.elapsed() >= Duration::from_millis(10)); // two writes, one group
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LatencyStore<S> {
    inner: S,
    commit_latency: Duration,
    read_latency: Duration,
    locks: Arc<Mutex<HashMap<Key, Arc<AsyncMutex<()>>>>>,
}

impl<S: DocumentStore> LatencyStore<S> {
    /// Wraps `inner`; each write holds its entity groups for `commit_latency`.
    pub fn new(inner: S, commit_latency: Duration) -> Self {
        LatencyStore {
            inner,
            commit_latency,
            read_latency: Duration::ZERO,
            locks: Arc::default(),
        }
    }

    /// The same store, with every read (`get`, `get_many`, `scan`) taking `latency`.
    #[must_use]
    pub fn with_read_latency(mut self, latency: Duration) -> Self {
        self.read_latency = latency;
        self
    }

    /// The modelled duration of one write to an entity group.
    #[must_use]
    pub fn commit_latency(&self) -> Duration {
        self.commit_latency
    }

    /// The modelled duration of one read.
    #[must_use]
    pub fn read_latency(&self) -> Duration {
        self.read_latency
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Takes the locks of every group of `keys`, in key order.
    async fn lock_groups<'k>(
        &self,
        keys: impl Iterator<Item = &'k Key>,
    ) -> Vec<OwnedMutexGuard<()>> {
        let groups: BTreeSet<Key> = keys.map(Key::group).collect();
        let locks: Vec<Arc<AsyncMutex<()>>> = {
            let mut map = lock(&self.locks);
            // Forget locks nobody holds or waits for, so the map does not grow with every
            // group ever written.
            if map.len() > 4096 {
                map.retain(|_, lock| Arc::strong_count(lock) > 1);
            }
            groups
                .into_iter()
                .map(|g| Arc::clone(map.entry(g).or_default()))
                .collect()
        };
        let mut guards = Vec::with_capacity(locks.len());
        for lock in locks {
            guards.push(lock.lock_owned().await);
        }
        guards
    }

    async fn read_delay(&self) {
        if !self.read_latency.is_zero() {
            tokio::time::sleep(self.read_latency).await;
        }
    }

    async fn write_delay(&self) {
        if !self.commit_latency.is_zero() {
            tokio::time::sleep(self.commit_latency).await;
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for LatencyStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyStore")
            .field("inner", &self.inner)
            .field("commit_latency", &self.commit_latency)
            .field("read_latency", &self.read_latency)
            .finish_non_exhaustive()
    }
}

// A decorator forwards every method (see `DocumentStore`, "Wrappers").
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<S: DocumentStore> DocumentStore for LatencyStore<S> {
    async fn get(&self, key: &Key) -> Result<Option<Versioned>> {
        self.read_delay().await;
        self.inner.get(key).await
    }

    async fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        self.read_delay().await;
        self.inner.get_many(keys).await
    }

    async fn insert(&self, key: &Key, doc: Document) -> Result<Version> {
        let _guards = self.lock_groups(std::iter::once(key)).await;
        if self.inner.get(key).await?.is_some() {
            return Err(Error::AlreadyExists { key: key.clone() });
        }
        self.write_delay().await;
        self.inner.insert(key, doc).await
    }

    async fn put(&self, key: &Key, doc: Document) -> Result<Version> {
        let _guards = self.lock_groups(std::iter::once(key)).await;
        self.write_delay().await;
        self.inner.put(key, doc).await
    }

    async fn delete(&self, key: &Key) -> Result<bool> {
        let _guards = self.lock_groups(std::iter::once(key)).await;
        self.write_delay().await;
        self.inner.delete(key).await
    }

    async fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        self.read_delay().await;
        self.inner.scan(scan).await
    }

    async fn lookup(&self, lookup: &Lookup) -> Result<Found> {
        self.read_delay().await;
        self.inner.lookup(lookup).await
    }

    async fn fold_lookup(&self, lookup: &FoldLookup) -> Result<FoldFound> {
        self.read_delay().await;
        self.inner.fold_lookup(lookup).await
    }

    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        Ok(self.commit_versioned(txn).await?.outcome)
    }

    async fn commit_versioned(&self, txn: &Transaction) -> Result<CommitReply> {
        if !self.cross_group_transactions() && !txn.single_group() {
            // Let the inner store give its own answer without modelling latency.
            return self.inner.commit_versioned(txn).await;
        }
        let _guards = self.lock_groups(txn.keys()).await;
        // Fail fast when a read is already stale: a conflict costs no write slot.
        if !txn.reads().is_empty() {
            let keys: Vec<Key> = txn.reads().iter().map(|(k, _)| k.clone()).collect();
            let current = self.inner.get_many(&keys).await?;
            for ((key, expected), found) in txn.reads().iter().zip(current) {
                if found.map(|f| f.version) != *expected {
                    tracing::trace!(key = %key, "latency store: stale read, conflict without latency");
                    return Ok(CommitReply::untold(Commit::Conflict { key: key.clone() }));
                }
            }
        }
        if txn.writes().is_empty() {
            return self.inner.commit_versioned(txn).await;
        }
        self.write_delay().await;
        self.inner.commit_versioned(txn).await
    }

    async fn merge(&self, merge: &Merge) -> Result<Merged> {
        // A merge is a write of one document: it takes the group's write slot.
        let _guards = self.lock_groups(std::iter::once(&merge.key)).await;
        self.write_delay().await;
        self.inner.merge(merge).await
    }

    async fn make_durable(&self, keys: &[Key]) -> Result<()> {
        // Nothing changes: no write slot, a round trip.
        self.read_delay().await;
        self.inner.make_durable(keys).await
    }

    fn cross_group_transactions(&self) -> bool {
        self.inner.cross_group_transactions()
    }

    fn snapshot_lookups(&self) -> bool {
        self.inner.snapshot_lookups()
    }

    async fn now_ms(&self) -> Result<u64> {
        self.read_delay().await;
        self.inner.now_ms().await
    }
}
