//! [`TestStore`]: one store decorator for the workspace's own tests. Each knob changes or
//! observes one behaviour of the store underneath; with every knob off it forwards each
//! call unchanged. Tests that need a store which meets the contract differently (pages
//! in another order, smaller pages), breaks it on purpose (torn reads, an `insert` that
//! overwrites), or whose commits they count or force to conflict, configure one of these
//! instead of writing a decorator of their own.

use async_trait::async_trait;
use autoshard::store::{
    Commit, CommitReply, Document, DocumentStore, FoldFound, FoldLookup, Found, Lookup, Merge,
    Merged, Scan, ScanPage, Transaction, Version, Versioned, fold_lookup,
};
use autoshard::{Key, Result};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// What a [`TestStore`] changes; `Knobs::default()` changes nothing.
#[derive(Clone, Debug, Default)]
pub struct Knobs {
    /// List every scan page in descending key order (allowed: no order is promised).
    pub reverse_pages: bool,
    /// Never return more than this many documents per scan page (allowed: a page may
    /// hold fewer than asked), and let other tasks run between pages.
    pub max_page: Option<usize>,
    /// Read `get_many` and scan pages one document at a time, letting other tasks run
    /// in between: not snapshots, which breaks the contract.
    pub torn_reads: bool,
    /// Make `insert` overwrite a present document, which breaks the contract.
    pub insert_overwrites: bool,
    /// Answer this to `cross_group_transactions` instead of the inner store's answer;
    /// with `Some(false)` a commit across entity groups is refused with `Error::Invalid`,
    /// as a Redis Cluster refuses it.
    pub cross_group_transactions: Option<bool>,
    /// Answer this to `snapshot_lookups` instead of the inner store's answer: `Some(false)`
    /// as a store that does not read a lookup atomically across groups; `Some(true)` over
    /// a store that does not breaks the contract. Without it the answer is `false` with
    /// the knobs that read through `get_many` and scans (torn reads, page order and size).
    pub snapshot_lookups: Option<bool>,
    /// Wait a random time up to this long before a commit reaches the inner store, and
    /// again before its answer comes back, as a network would: a caller that gives up
    /// waiting (a timeout) may then leave a commit that was applied, or one that was not.
    pub commit_latency: Option<std::time::Duration>,
    /// Answer `get_many` a random time up to this long after reading: a read's snapshot
    /// is then older than its answer, as over a network, so writes can complete between
    /// the two.
    pub read_latency: Option<std::time::Duration>,
    /// Hold the next `get_many` an armed gate lets through between reading and
    /// answering, until the test releases it (see [`Gate`]).
    pub read_gate: Option<Gate>,
    /// Hold the next write (`insert`, `put`, `delete` or `commit`) an armed gate lets
    /// through before it reaches the store, until the test releases it: a write that
    /// arrives late, after others that started after it.
    pub write_gate: Option<Gate>,
    /// Answer one `get_many` in this many with an error after reading (a lost reply):
    /// the caller never gets what was read.
    pub lost_reads: Option<u32>,
}

/// Holds one call of a [`TestStore`] (a read between reading and answering, or a write
/// before it reaches the store; see [`Knobs`]): armed, the next such call tells
/// [`Gate::wait_held`] and goes on only after [`Gate::release`].
#[derive(Clone, Debug, Default)]
pub struct Gate {
    inner: std::sync::Arc<GateState>,
}

#[derive(Debug, Default)]
struct GateState {
    armed: std::sync::atomic::AtomicBool,
    read: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

impl Gate {
    /// Holds the next call.
    pub fn arm(&self) {
        self.inner.armed.store(true, Ordering::SeqCst);
    }

    /// Returns once a call is held.
    pub async fn wait_held(&self) {
        self.inner.read.notified().await;
    }

    /// Lets the held call go on.
    pub fn release(&self) {
        self.inner.release.notify_one();
    }

    async fn hold(&self) {
        if self.inner.armed.swap(false, Ordering::SeqCst) {
            self.inner.read.notify_one();
            self.inner.release.notified().await;
        }
    }
}

/// A store decorator for tests; see the module docs.
#[derive(Debug)]
pub struct TestStore<S> {
    inner: S,
    knobs: Knobs,
    conflicts: Mutex<BTreeMap<String, u64>>,
    forced_conflicts: AtomicU32,
}

impl<S: DocumentStore> TestStore<S> {
    pub fn new(inner: S, knobs: Knobs) -> Self {
        TestStore {
            inner,
            knobs,
            conflicts: Mutex::default(),
            forced_conflicts: AtomicU32::new(0),
        }
    }

    /// The store underneath.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The commits that answered `Conflict` so far, per key name (forced ones included).
    pub fn conflicts(&self) -> BTreeMap<String, u64> {
        self.conflicts.lock().unwrap().clone()
    }

    /// Answers `Conflict` (on the transaction's first key) to the next `n` commits,
    /// applying nothing.
    pub fn force_conflicts(&self, n: u32) {
        self.forced_conflicts.store(n, Ordering::SeqCst);
    }

    async fn one_by_one(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            tokio::task::yield_now().await;
            out.push(self.inner.get(key).await?);
        }
        Ok(out)
    }

    /// What the read knobs do between a read and its answer: a latency, a held read, a
    /// lost reply.
    async fn answer_read(&self, what: &str) -> Result<()> {
        if let Some(latency) = self.knobs.read_latency {
            random_sleep(latency).await;
        }
        if let Some(gate) = &self.knobs.read_gate {
            gate.hold().await;
        }
        if let Some(one_in) = self.knobs.lost_reads
            && rand::random_range(0..one_in.max(1)) == 0
        {
            return Err(autoshard::Error::backend(what, "the reply was lost"));
        }
        Ok(())
    }

    /// Holds a write while the write gate is armed.
    async fn hold_write(&self) {
        if let Some(gate) = &self.knobs.write_gate {
            gate.hold().await;
        }
    }

    fn count_conflict(&self, key: &Key) {
        *self
            .conflicts
            .lock()
            .unwrap()
            .entry(key.name().to_owned())
            .or_default() += 1;
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<S: DocumentStore> DocumentStore for TestStore<S> {
    async fn get(&self, key: &Key) -> Result<Option<Versioned>> {
        self.inner.get(key).await
    }

    async fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        if self.knobs.torn_reads {
            return self.one_by_one(keys).await;
        }
        let found = self.inner.get_many(keys).await?;
        self.answer_read("get_many").await?;
        Ok(found)
    }

    /// The inner store's own lookup (one round trip where it has one, and the documents
    /// without their write records when asked), with the read knobs applied as to
    /// `get_many`; the knobs that change scans and `get_many` themselves (page order and
    /// size, torn reads) read through those instead.
    async fn lookup(&self, lookup: &Lookup) -> Result<Found> {
        if self.knobs.torn_reads || self.knobs.reverse_pages || self.knobs.max_page.is_some() {
            let pages = futures::future::try_join_all(lookup.scans.iter().map(|s| self.scan(s)));
            let (docs, pages) = futures::try_join!(self.get_many(&lookup.keys), pages)?;
            return Ok(Found { docs, pages });
        }
        let found = self.inner.lookup(lookup).await?;
        self.answer_read("lookup").await?;
        Ok(found)
    }

    /// The inner store's own folding lookup, with the read knobs applied as to
    /// `get_many`; with the knobs that change reads, through this store's `lookup`.
    async fn fold_lookup(&self, lookup: &FoldLookup) -> Result<FoldFound> {
        if self.knobs.torn_reads || self.knobs.reverse_pages || self.knobs.max_page.is_some() {
            return fold_lookup::by_lookup(self, lookup).await;
        }
        let found = self.inner.fold_lookup(lookup).await?;
        self.answer_read("fold_lookup").await?;
        Ok(found)
    }

    async fn insert(&self, key: &Key, doc: Document) -> Result<Version> {
        self.hold_write().await;
        if self.knobs.insert_overwrites {
            return self.inner.put(key, doc).await;
        }
        self.inner.insert(key, doc).await
    }

    async fn put(&self, key: &Key, doc: Document) -> Result<Version> {
        self.hold_write().await;
        self.inner.put(key, doc).await
    }

    async fn delete(&self, key: &Key) -> Result<bool> {
        self.hold_write().await;
        self.inner.delete(key).await
    }

    async fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        let mut scan = scan.clone();
        if let Some(max) = self.knobs.max_page {
            scan.limit = scan.limit.min(max);
            // Let other tasks run between pages, as a network store would.
            tokio::task::yield_now().await;
        }
        let mut page = self.inner.scan(&scan).await?;
        if self.knobs.torn_reads {
            let keys: Vec<Key> = page.items.iter().map(|(k, _)| k.clone()).collect();
            let found = self.one_by_one(&keys).await?;
            page.items = keys
                .into_iter()
                .zip(found)
                .filter_map(|(k, f)| f.map(|f| (k, f)))
                .collect();
        }
        if self.knobs.reverse_pages {
            page.items.sort_by(|a, b| b.0.cmp(&a.0));
        }
        Ok(page)
    }

    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        Ok(self.commit_versioned(txn).await?.outcome)
    }

    async fn commit_versioned(&self, txn: &Transaction) -> Result<CommitReply> {
        if self.knobs.cross_group_transactions == Some(false) && !txn.single_group() {
            // As a Redis Cluster answers a commit across slots.
            return Err(autoshard::Error::Invalid(
                "this store commits within one entity group only".to_owned(),
            ));
        }
        self.hold_write().await;
        if let Some(latency) = self.knobs.commit_latency {
            random_sleep(latency).await;
        }
        let forced = self
            .forced_conflicts
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let outcome = if forced {
            let key = txn
                .keys()
                .next()
                .cloned()
                .unwrap_or_else(|| Key::new("None", ""));
            CommitReply::untold(Commit::Conflict { key })
        } else {
            self.inner.commit_versioned(txn).await?
        };
        if let Commit::Conflict { key } = &outcome.outcome {
            self.count_conflict(key);
        }
        if let Some(latency) = self.knobs.commit_latency {
            random_sleep(latency).await;
        }
        Ok(outcome)
    }

    async fn merge(&self, merge: &Merge) -> Result<Merged> {
        if let Some(latency) = self.knobs.commit_latency {
            random_sleep(latency).await;
        }
        let outcome = self.inner.merge(merge).await?;
        if let Some(latency) = self.knobs.commit_latency {
            random_sleep(latency).await;
        }
        Ok(outcome)
    }

    async fn make_durable(&self, keys: &[Key]) -> Result<()> {
        self.inner.make_durable(keys).await
    }

    fn cross_group_transactions(&self) -> bool {
        self.knobs
            .cross_group_transactions
            .unwrap_or_else(|| self.inner.cross_group_transactions())
    }

    fn snapshot_lookups(&self) -> bool {
        let split =
            self.knobs.torn_reads || self.knobs.reverse_pages || self.knobs.max_page.is_some();
        self.knobs
            .snapshot_lookups
            .unwrap_or_else(|| !split && self.inner.snapshot_lookups())
    }

    async fn now_ms(&self) -> Result<u64> {
        self.inner.now_ms().await
    }
}

/// Sleeps a uniformly random time in `0..=max`.
async fn random_sleep(max: std::time::Duration) {
    let micros = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    tokio::time::sleep(std::time::Duration::from_micros(rand::random_range(
        0..=micros,
    )))
    .await;
}

/// Asserts that `scan` lists exactly the documents at `want`, in order: sent alone, and
/// within a lookup that also reads `want` (the two paths a store may list a page by).
///
/// # Panics
/// When either lists anything else, or the store fails.
pub async fn assert_scan_lists(store: &dyn DocumentStore, scan: &Scan, want: &[Key]) {
    let page = store.scan(scan).await.expect("scan");
    let listed: Vec<Key> = page.items.into_iter().map(|(key, _)| key).collect();
    assert_eq!(listed, want, "scan of {scan:?}");
    let lookup = Lookup {
        keys: want.to_vec(),
        scans: vec![scan.clone()],
        ..Lookup::default()
    };
    let found = store.lookup(&lookup).await.expect("lookup");
    let listed: Vec<Key> = found.pages[0]
        .items
        .iter()
        .map(|(key, _)| key.clone())
        .collect();
    assert_eq!(listed, want, "lookup's scan of {scan:?}");
}
