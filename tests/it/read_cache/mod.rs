//! The read cache: a process reads its own writes, other processes' writes appear
//! within the bound, and a refill that read the store before a newer write or
//! invalidation never replaces the newer value (deterministic races with a read held
//! between the store's answer and the cache fill), a cached load never shares a read
//! made without write records, and a reply that comes back after the write window is
//! counted once. On memory, standalone Redis, a Redis Cluster and PostgreSQL; the soak
//! (64 readers, 8 writers in two processes) checks every read against a log of confirmed
//! writes on memory and Redis.

mod soak;

use autoshard::prelude::*;
use autoshard::{Key, ReadCache};
use autoshard_test_support::entities::Question;
use autoshard_test_support::every_store::{Backend, Kind};

use autoshard_test_support::store::{Gate, Knobs, TestStore};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
struct Poll {
    #[id]
    id: u64,
    title: String,
    #[shardable(shards = 8, fold = sum)]
    votes: i64,
}

impl Poll {
    #[shard_method]
    fn vote_up(&mut self) {
        self.votes += 1;
    }
}

/// A bound long enough that only the guards decide what a load returns.
const LONG: Duration = Duration::from_mins(1);

fn gated(store: Arc<dyn DocumentStore>, gate: &Gate) -> Arc<dyn DocumentStore> {
    let knobs = Knobs {
        read_gate: Some(gate.clone()),
        ..Knobs::default()
    };
    Arc::new(TestStore::new(store, knobs))
}

/// A load held after reading 0 votes, while the same process confirms a vote, then
/// fills the cache: the next load shows the vote (the write record of the shard tells
/// the snapshot lacks it), for a built-in fold (merge) and a `#[shard_fold]` (compare
/// and set).
async fn own_write_during_a_held_refill_is_read(store: Arc<dyn DocumentStore>, label: &str) {
    let gate = Gate::default();
    let db = Mapper::new(gated(store, &gate)).with_read_cache(ReadCache::new(LONG));
    db.insert(&mut Poll::new(1, "merge".into(), 0))
        .await
        .unwrap();
    db.insert(&mut Question::new(1, "compare and set", 0))
        .await
        .unwrap();

    gate.arm();
    let reader = tokio::spawn({
        let db = db.clone();
        async move { db.load::<Poll>(&1).await.unwrap().votes }
    });
    gate.wait_held().await;
    db.apply(&1, Poll::vote_up).await.unwrap();
    gate.release();
    assert_eq!(
        reader.await.unwrap(),
        0,
        "{label}: the held read was called first"
    );
    assert_eq!(
        db.load::<Poll>(&1).await.unwrap().votes,
        1,
        "{label}: merge"
    );
    assert_eq!(
        db.aggregate::<Poll, i64>(&1, "votes").await.unwrap(),
        1,
        "{label}: aggregate"
    );

    gate.arm();
    let reader = tokio::spawn({
        let db = db.clone();
        async move { db.load::<Question>(&1).await.unwrap().votes }
    });
    gate.wait_held().await;
    // The update loads the question: a load sharing `db`'s reads would wait for the
    // held one, so the writer shares only the cache (the same process).
    let writer = db.clone().with_shared_reads(false);
    writer
        .update(&1, |q: &mut Question| q.vote_up())
        .await
        .unwrap();
    gate.release();
    assert_eq!(reader.await.unwrap(), 0, "{label}");
    assert_eq!(
        db.load::<Question>(&1).await.unwrap().votes,
        1,
        "{label}: compare and set"
    );
    // Later votes fold in once each, whether or not a snapshot holds them.
    for _ in 0..5 {
        db.apply(&1, Poll::vote_up).await.unwrap();
        db.load::<Poll>(&1).await.unwrap();
    }
    assert_eq!(db.load::<Poll>(&1).await.unwrap().votes, 6, "{label}");
}

/// A load held after reading while the same process rewrites the main document or
/// deletes the entity: its fill is refused, so the next load does not bring back the
/// old text or the deleted entity.
async fn invalidation_during_a_held_refill_refuses_it(store: Arc<dyn DocumentStore>, label: &str) {
    let gate = Gate::default();
    let db = Mapper::new(gated(store, &gate)).with_read_cache(ReadCache::new(LONG));
    db.insert(&mut Poll::new(2, "before".into(), 4))
        .await
        .unwrap();

    gate.arm();
    let reader = tokio::spawn({
        let db = db.clone();
        async move { db.load::<Poll>(&2).await.unwrap().title }
    });
    gate.wait_held().await;
    // The update loads the poll: the writer shares only the cache, not the held read.
    let writer = db.clone().with_shared_reads(false);
    writer
        .update(&2, |p: &mut Poll| p.title = "after".into())
        .await
        .unwrap();
    gate.release();
    assert_eq!(reader.await.unwrap(), "before", "{label}");
    let loaded = db.load::<Poll>(&2).await.unwrap();
    assert_eq!(
        (loaded.title.as_str(), loaded.votes),
        ("after", 4),
        "{label}"
    );

    // Emptied so that the next load reads the store (and is held there).
    db.read_cache().unwrap().clear();
    gate.arm();
    let reader = tokio::spawn({
        let db = db.clone();
        async move { db.load::<Poll>(&2).await.is_ok() }
    });
    gate.wait_held().await;
    assert!(db.delete::<Poll>(&2).await.unwrap());
    gate.release();
    assert!(reader.await.unwrap(), "{label}");
    assert!(
        matches!(db.load::<Poll>(&2).await, Err(Error::NotFound { .. })),
        "{label}: a refill brought a deleted entity back"
    );
    let many = db.load_many::<Poll>(&[2]).await.unwrap();
    assert!(many[0].is_none(), "{label}: load_many");
}

/// A load held with an old snapshot while another process votes and a later load of
/// this process reads and caches the newer state: the held fill does not replace it.
async fn an_older_refill_never_replaces_a_newer_one(store: Arc<dyn DocumentStore>, label: &str) {
    let gate = Gate::default();
    let db = Mapper::new(gated(store.clone(), &gate)).with_read_cache(ReadCache::new(LONG));
    let other = Mapper::new(store);
    db.insert(&mut Poll::new(3, "race".into(), 0))
        .await
        .unwrap();

    gate.arm();
    let held = tokio::spawn({
        let db = db.clone();
        async move { db.load::<Poll>(&3).await.unwrap().votes }
    });
    gate.wait_held().await;
    other.apply(&3, Poll::vote_up).await.unwrap();
    other.apply(&3, Poll::vote_up).await.unwrap();
    // A load of the same process (the same cache) that does not wait for the held read.
    let newer = db.clone().with_shared_reads(false);
    let newer = newer.load::<Poll>(&3).await.unwrap().votes;
    assert_eq!(newer, 2, "{label}");
    gate.release();
    assert_eq!(held.await.unwrap(), 0, "{label}");
    assert_eq!(
        db.load::<Poll>(&3).await.unwrap().votes,
        2,
        "{label}: the older refill replaced the newer snapshot"
    );
}

/// Other processes' votes appear within the bound; `load_many` and `aggregates` answer
/// as `load` does, from the cache where they can.
async fn other_writes_appear_within_the_bound(store: Arc<dyn DocumentStore>, label: &str) {
    let bound = Duration::from_millis(200);
    let db = Mapper::new(store.clone()).with_read_cache(ReadCache::new(bound));
    let other = Mapper::new(store);
    for id in 10..14 {
        db.insert(&mut Poll::new(
            id,
            "many".into(),
            i64::try_from(id).unwrap(),
        ))
        .await
        .unwrap();
    }
    let ids = [13, 10, 99, 12, 11];
    let votes = |polls: Vec<Option<Poll>>| -> Vec<Option<i64>> {
        polls.into_iter().map(|p| p.map(|p| p.votes)).collect()
    };
    let before = db.load_many::<Poll>(&ids).await.unwrap();
    assert_eq!(
        votes(before),
        [Some(13), Some(10), None, Some(12), Some(11)]
    );
    other.apply(&10, Poll::vote_up).await.unwrap();
    db.apply(&11, Poll::vote_up).await.unwrap();
    let now = Instant::now();
    // Own vote at once; the other process's within the bound.
    let board: Vec<Option<i64>> = db.aggregates::<Poll, _>(&ids, "votes").await.unwrap();
    assert_eq!(board[4], Some(12), "{label}: own write");
    assert!(matches!(board[1], Some(10 | 11)), "{label}: {board:?}");
    tokio::time::sleep(bound.saturating_sub(now.elapsed())).await;
    let after = db.load_many::<Poll>(&ids).await.unwrap();
    assert_eq!(
        votes(after),
        [Some(13), Some(11), None, Some(12), Some(12)],
        "{label}"
    );
    assert!(matches!(
        db.aggregate::<Poll, i64>(&10, "title").await,
        Err(Error::Invalid(_))
    ));
}

/// Cached and uncached clones of one mapper share reads only with their own kind: a
/// cached load never takes a read an uncached load made (documents without their write
/// records), so a vote confirmed while the cached load waits is not folded in again.
async fn a_cached_load_never_shares_an_uncached_read(store: Arc<dyn DocumentStore>, label: &str) {
    let gate = Gate::default();
    let base = Mapper::new(gated(store, &gate));
    let cached = base.clone().with_read_cache(ReadCache::new(LONG));
    base.insert(&mut Poll::new(20, "shared".into(), 0))
        .await
        .unwrap();
    // An uncached read is held; an uncached load, then a cached one, wait for the next
    // read; the cached mapper confirms a vote; the held read goes on.
    gate.arm();
    let held = tokio::spawn({
        let base = base.clone();
        async move { base.load::<Poll>(&20).await.unwrap().votes }
    });
    gate.wait_held().await;
    // The pauses let each spawned load reach its wait in this order (on a machine too
    // busy for that, the case checks less, never wrongly).
    let uncached = tokio::spawn({
        let base = base.clone();
        async move { base.load::<Poll>(&20).await.unwrap().votes }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let waiting = tokio::spawn({
        let cached = cached.clone();
        async move { cached.load::<Poll>(&20).await.unwrap().votes }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    cached.apply(&20, Poll::vote_up).await.unwrap();
    gate.release();
    assert_eq!(held.await.unwrap(), 0, "{label}");
    assert!(uncached.await.unwrap() <= 1, "{label}");
    assert!(waiting.await.unwrap() <= 1, "{label}: a vote counted twice");
    assert_eq!(cached.load::<Poll>(&20).await.unwrap().votes, 1, "{label}");
    let board: Vec<Option<i64>> = cached.aggregates::<Poll, _>(&[20], "votes").await.unwrap();
    assert_eq!(board, [Some(1)], "{label}");
    let many = cached.load_many::<Poll>(&[20]).await.unwrap();
    assert_eq!(many[0].as_ref().map(|p| p.votes), Some(1), "{label}");
}

/// Holds the reply of the next merge, after the store applied it, until released.
#[derive(Debug, Default)]
struct HeldReply {
    armed: std::sync::atomic::AtomicBool,
    applied: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

/// A store whose merge replies a [`HeldReply`] can hold.
#[derive(Debug)]
struct SlowReplies {
    inner: Arc<dyn DocumentStore>,
    held: Arc<HeldReply>,
}

#[async_trait::async_trait]
#[deny(clippy::missing_trait_methods)]
impl DocumentStore for SlowReplies {
    async fn get(&self, key: &Key) -> Result<Option<autoshard::store::Versioned>> {
        self.inner.get(key).await
    }
    async fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<autoshard::store::Versioned>>> {
        self.inner.get_many(keys).await
    }
    async fn insert(
        &self,
        key: &Key,
        doc: autoshard::store::Document,
    ) -> Result<autoshard::store::Version> {
        self.inner.insert(key, doc).await
    }
    async fn put(
        &self,
        key: &Key,
        doc: autoshard::store::Document,
    ) -> Result<autoshard::store::Version> {
        self.inner.put(key, doc).await
    }
    async fn delete(&self, key: &Key) -> Result<bool> {
        self.inner.delete(key).await
    }
    async fn scan(&self, scan: &autoshard::store::Scan) -> Result<autoshard::store::ScanPage> {
        self.inner.scan(scan).await
    }
    async fn lookup(&self, lookup: &autoshard::store::Lookup) -> Result<autoshard::store::Found> {
        self.inner.lookup(lookup).await
    }
    async fn fold_lookup(
        &self,
        lookup: &autoshard::store::FoldLookup,
    ) -> Result<autoshard::store::FoldFound> {
        self.inner.fold_lookup(lookup).await
    }
    async fn commit(
        &self,
        txn: &autoshard::store::Transaction,
    ) -> Result<autoshard::store::Commit> {
        self.inner.commit(txn).await
    }
    async fn commit_versioned(
        &self,
        txn: &autoshard::store::Transaction,
    ) -> Result<autoshard::store::CommitReply> {
        self.inner.commit_versioned(txn).await
    }
    async fn merge(&self, merge: &autoshard::store::Merge) -> Result<autoshard::store::Merged> {
        let merged = self.inner.merge(merge).await;
        if self.held.armed.swap(false, Ordering::SeqCst) {
            self.held.applied.notify_one();
            self.held.release.notified().await;
        }
        merged
    }
    fn cross_group_transactions(&self) -> bool {
        self.inner.cross_group_transactions()
    }
    fn snapshot_lookups(&self) -> bool {
        self.inner.snapshot_lookups()
    }
    async fn make_durable(&self, keys: &[autoshard::Key]) -> Result<()> {
        self.inner.make_durable(keys).await
    }
    async fn now_ms(&self) -> Result<u64> {
        self.inner.now_ms().await
    }
}

/// A vote whose reply comes back after the write window, once other writers dropped its
/// entry from the shard's write record, while a cached load read the shard: the vote is
/// counted once, not folded into the snapshot again.
async fn a_late_reply_is_counted_once(store: Arc<dyn DocumentStore>, label: &str) {
    #[autoshard::sharded]
    #[derive(Entity, Debug, Clone)]
    #[entity(kind = "LatePoll")]
    struct LatePoll {
        #[id]
        id: u64,
        #[shardable(shards = 1, fold = sum)]
        votes: i64,
    }
    impl LatePoll {
        #[shard_method]
        fn vote_up(&mut self) {
            self.votes += 1;
        }
    }
    let window = Duration::from_millis(200);
    let held = Arc::new(HeldReply::default());
    let slow: Arc<dyn DocumentStore> = Arc::new(SlowReplies {
        inner: store.clone(),
        held: held.clone(),
    });
    let db = Mapper::new(slow)
        .with_write_window(window)
        .with_read_cache(ReadCache::new(LONG));
    let others = Mapper::new(store).with_write_window(window);
    db.insert(&mut LatePoll::new(1, 0)).await.unwrap();
    held.armed.store(true, Ordering::SeqCst);
    let late = tokio::spawn({
        let db = db.clone();
        async move { db.apply(&1, LatePoll::vote_up).await }
    });
    held.applied.notified().await;
    // Past the window, other writers' merges drop the entry (one merge in 16 prunes).
    tokio::time::sleep(window + window / 4).await;
    for _ in 0..32 {
        others.apply(&1, LatePoll::vote_up).await.unwrap();
    }
    // The cached load reads the shard (the late vote in its value, not in its record).
    assert_eq!(db.load::<LatePoll>(&1).await.unwrap().votes, 33, "{label}");
    held.release.notify_one();
    late.await.unwrap().unwrap();
    assert_eq!(
        db.load::<LatePoll>(&1).await.unwrap().votes,
        33,
        "{label}: the late vote folded in again"
    );
    assert_eq!(
        others.load::<LatePoll>(&1).await.unwrap().votes,
        33,
        "{label}"
    );
}

async fn every_case(store: Arc<dyn DocumentStore>, label: &str) {
    a_cached_load_never_shares_an_uncached_read(store.clone(), label).await;
    a_late_reply_is_counted_once(store.clone(), label).await;
    own_write_during_a_held_refill_is_read(store.clone(), label).await;
    invalidation_during_a_held_refill_refuses_it(store.clone(), label).await;
    an_older_refill_never_replaces_a_newer_one(store.clone(), label).await;
    other_writes_appear_within_the_bound(store, label).await;
}

/// Every case on one store of the backend, then writers and readers with a cache for a
/// while (longest on standalone Redis, with injected faults on memory and standalone).
async fn on(backend: &Backend, label: &str) {
    let store = backend.store("read-cache").await;
    every_case(store.clone(), label).await;
    let (soak_for, faults_for) = match backend.kind() {
        Kind::Memory => (2, Some(2)),
        Kind::Standalone => (4, Some(3)),
        Kind::Cluster => (3, None),
        Kind::Postgres => return,
    };
    soak::soak(store.clone(), label, Duration::from_secs(soak_for), false).await;
    if let Some(secs) = faults_for {
        let faulty = format!("{label}, faults");
        soak::soak(store, &faulty, Duration::from_secs(secs), true).await;
    }
}

autoshard_test_support::every_store!(on);
