//! One-shot transactions: their loads read one snapshot of the store on every shape, and
//! on the grouping protocol two of them that each read what the other writes never both
//! commit.

use super::{INITIAL, assert_moved, group_of, load_all, memory_stores, move_ten, open_accounts};
use async_trait::async_trait;
use autoshard::prelude::*;
use autoshard::store::{
    Commit, CommitReply, Document, DocumentStore, FoldFound, FoldLookup, Found, Lookup, Merge,
    Merged, Scan, ScanPage, Transaction, Version, Versioned,
};
use autoshard_test_support::entities::Account;
use autoshard_test_support::store::TestStore;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The loads of a one-shot transaction read one snapshot of the store, on every shape:
/// once a transfer commits between two loads, the second load fails (the first one's
/// account changed) instead of answering the other account as the transfer left it, so
/// the caller never sees money counted twice or not at all.
#[tokio::test]
async fn a_one_shot_transactions_loads_read_one_snapshot() {
    for (_, shaped, label) in memory_stores() {
        let db = Mapper::new(shaped);
        open_accounts(&db, 1..=2).await;

        let mut reader = group_of(&db, &[1, 2]).once().await.unwrap();
        let one: Account = reader.load(&1).await.unwrap();
        let mut txn = group_of(&db, &[1, 2]).once().await.unwrap();
        let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
        move_ten(&mut txn, &mut accounts).unwrap();
        txn.commit().await.unwrap();
        let two = reader.load::<Account>(&2).await;
        assert!(
            matches!(two, Err(Error::Contention { .. })),
            "{label}: account 1 read at {}, then {two:?}",
            one.balance
        );
        assert_moved(&db, 10, 10, label).await;
    }
}

/// A store of the grouping protocol's shape (commits within one entity group, lookups
/// read atomically) at which two callers meet twice: the first two `now_ms` calls wait
/// for each other, and so do the first two lookups without write records. Two one-shot
/// commits side by side (each loads with one lookup with records, then asks the clock
/// first) thus both start once both have loaded, and both reach their validation (a
/// lookup without records, a commit's first) once both have prepared.
#[derive(Debug, Clone)]
struct Rendezvous {
    inner: Arc<TestStore<MemoryStore>>,
    clocks: Arc<AtomicU64>,
    reads: Arc<AtomicU64>,
    at_clock: Arc<tokio::sync::Barrier>,
    at_read: Arc<tokio::sync::Barrier>,
}

impl Rendezvous {
    fn new(inner: Arc<TestStore<MemoryStore>>) -> Self {
        Rendezvous {
            inner,
            clocks: Arc::default(),
            reads: Arc::default(),
            at_clock: Arc::new(tokio::sync::Barrier::new(2)),
            at_read: Arc::new(tokio::sync::Barrier::new(2)),
        }
    }

    /// Makes the next two `now_ms` calls meet, and the next two lookups without records.
    fn arm(&self) {
        self.clocks.store(2, Ordering::SeqCst);
        self.reads.store(2, Ordering::SeqCst);
    }
}

/// Waits at `barrier` when `count` was not yet down to zero (and counts one down).
async fn meet(count: &AtomicU64, barrier: &tokio::sync::Barrier) {
    if count
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        barrier.wait().await;
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl DocumentStore for Rendezvous {
    async fn get(&self, key: &autoshard::Key) -> Result<Option<Versioned>> {
        self.inner.get(key).await
    }
    async fn get_many(&self, keys: &[autoshard::Key]) -> Result<Vec<Option<Versioned>>> {
        self.inner.get_many(keys).await
    }
    async fn insert(&self, key: &autoshard::Key, doc: Document) -> Result<Version> {
        self.inner.insert(key, doc).await
    }
    async fn put(&self, key: &autoshard::Key, doc: Document) -> Result<Version> {
        self.inner.put(key, doc).await
    }
    async fn delete(&self, key: &autoshard::Key) -> Result<bool> {
        self.inner.delete(key).await
    }
    async fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        self.inner.scan(scan).await
    }
    async fn lookup(&self, lookup: &Lookup) -> Result<Found> {
        if !lookup.records {
            meet(&self.reads, &self.at_read).await;
        }
        self.inner.lookup(lookup).await
    }
    async fn fold_lookup(&self, lookup: &FoldLookup) -> Result<FoldFound> {
        self.inner.fold_lookup(lookup).await
    }
    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        self.inner.commit(txn).await
    }
    async fn commit_versioned(&self, txn: &Transaction) -> Result<CommitReply> {
        self.inner.commit_versioned(txn).await
    }
    async fn merge(&self, merge: &Merge) -> Result<Merged> {
        self.inner.merge(merge).await
    }
    async fn now_ms(&self) -> Result<u64> {
        meet(&self.clocks, &self.at_clock).await;
        self.inner.now_ms().await
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
}

/// Withdraws 60 from account `from` (1 or 2) in a one-shot transaction over both, if the
/// two hold at least 150 together: from 100 each, a serial order lets one withdrawal
/// through and refuses the second (140 left together).
async fn withdraw_if_covered<S: DocumentStore>(db: &Mapper<S>, from: usize) -> Result<()> {
    let mut txn = group_of(db, &[1, 2]).once().await?;
    let mut accounts = load_all(&mut txn, &[1, 2]).await?;
    if accounts.iter().map(|a| a.balance).sum::<i64>() >= 150 {
        accounts[from - 1].deposit(-60);
        txn.save(&mut accounts[from - 1])?;
    }
    txn.commit().await
}

/// On the grouping protocol, two one-shot transactions that each read both accounts and
/// write a different one, side by side: both load, then both prepare before either
/// validates (by construction, [`Rendezvous`]). Each then finds the other's hold on the
/// account it only read, so at most one commits, as in a serial order: never both, the
/// write skew that would leave 80 where no serial order leaves less than 140.
#[tokio::test]
async fn one_shot_transactions_that_read_what_the_other_writes_never_both_commit() {
    let (_, shaped, _) = memory_stores()
        .into_iter()
        .find(|(_, store, _)| !store.cross_group_transactions() && store.snapshot_lookups())
        .expect("the grouping protocol's shape");
    let store = Rendezvous::new(shaped);
    let db = Mapper::new(store.clone());
    open_accounts(&db, 1..=2).await;
    store.arm();
    let both = async { tokio::join!(withdraw_if_covered(&db, 1), withdraw_if_covered(&db, 2)) };
    // A guard, not a timing: the two meet at every rendezvous long before.
    let (one, two) = tokio::time::timeout(std::time::Duration::from_mins(5), both)
        .await
        .expect("the two transactions never met");
    let committed = [&one, &two].iter().filter(|r| r.is_ok()).count();
    for refused in [&one, &two].into_iter().filter_map(|r| r.as_ref().err()) {
        assert!(matches!(refused, Error::Contention { .. }), "{refused:?}");
    }
    let mut total = 0;
    for id in [1, 2] {
        total += db.load::<Account>(&id).await.unwrap().balance;
    }
    assert!(committed <= 1, "both committed: {one:?}, {two:?}");
    assert_eq!(total, 2 * INITIAL - 60 * i64::try_from(committed).unwrap());
}
