//! Key groups under faults: an error or a dropped future at every store call of create,
//! transaction and dissolve, a Redis restart, a cluster master that stops answering; each
//! followed by recovery once the lease has passed. What the lease ends on its own (holds
//! past it, a join that lands late, an abandoned group) is in `leases`.

use super::one_shot::{assert_records_kept, record_writes, shard_records};
use super::{
    INITIAL, audit, contended, group_of, load_all, memory_stores, open_accounts, random_ids,
    transfer,
};

use async_trait::async_trait;
use autoshard::group::KeyGroup;
use autoshard::prelude::*;
use autoshard::store::faulty::{Fault, FaultyStore};
use autoshard::store::{
    Commit, CommitReply, Document, DocumentStore, FoldFound, FoldLookup, Found, Lookup, Merge,
    Merged, Owner, Scan, ScanPage, Transaction, Version, Versioned,
};
use autoshard_test_support::entities::Account;
use autoshard_test_support::redis::{Cluster, Standalone, namespace};
use autoshard_test_support::store::TestStore;
use futures::StreamExt;
use rand::SeedableRng;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The lease, by the store's clock: waits until it has passed `until_ms`.
pub(super) async fn after<S: DocumentStore>(store: &S, until_ms: u64) {
    while store.now_ms().await.unwrap() <= until_ms {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until a lease of [`LEASE`] taken at `taken_ms` or before has passed, by the
/// store's clock, however long the steps before took on this machine.
pub(super) async fn after_lease<S: DocumentStore>(store: &S, taken_ms: u64) {
    let lease = u64::try_from(LEASE.as_millis()).unwrap();
    after(store, taken_ms + lease).await;
}

/// After a group's lease: no document of the accounts `1..=n` is owned, the total is
/// unchanged, the transfer of 10 from account 1 to 2 is applied whole or not at all (as
/// `known` says, when the transfer's answer told), and every account takes a write again.
pub(super) async fn check_recovered<S: DocumentStore>(
    db: &Mapper<S>,
    store: &MemoryStore,
    n: u64,
    known: Option<bool>,
    case: &str,
) {
    let now = store.now_ms().await.unwrap();
    for id in 1..=n {
        let main = autoshard::Key::new("Account", id.to_string());
        let mut keys = vec![main.clone()];
        keys.extend((0..4).map(|i| autoshard::layout::static_shard(&main, "balance", i)));
        for found in store.get_many(&keys).await.unwrap().into_iter().flatten() {
            let owner = Owner::of(&found.doc);
            assert!(
                owner.as_ref().is_none_or(|o| !o.is_live(now)),
                "{case}: a document still owned past its lease: {owner:?}"
            );
        }
    }
    let accounts = db
        .load_many::<Account>(&(1..=n).collect::<Vec<_>>())
        .await
        .unwrap();
    let balances: Vec<i64> = accounts
        .iter()
        .map(|a| a.as_ref().unwrap().balance)
        .collect();
    assert_eq!(
        balances.iter().sum::<i64>(),
        INITIAL * i64::try_from(n).unwrap(),
        "{case}: {balances:?}"
    );
    let applied = balances == [INITIAL - 10, INITIAL + 10, INITIAL];
    assert!(
        balances == [INITIAL; 3] || applied,
        "{case}: applied partly or twice: {balances:?}"
    );
    if let Some(known) = known {
        assert_eq!(
            applied, known,
            "{case}: the outcome said otherwise: {balances:?}"
        );
    }
    for id in 1..=n {
        db.apply(&id, |a: &mut Account| a.deposit(0)).await.unwrap();
        let mut account: Account = db.load(&id).await.unwrap();
        account.transfers += 1;
        db.save(&mut account).await.unwrap();
    }
}

/// The one-shot transfer of 10 from account 1 to account 2 (of three), under `lease`,
/// waiting up to `wait` for members another group owns.
pub(super) async fn transfer_ten<S: DocumentStore>(
    db: &Mapper<S>,
    lease: Duration,
    wait: Option<Duration>,
) -> Result<()> {
    let mut group = group_of(db, &[1, 2, 3]).lease(lease);
    if let Some(up_to) = wait {
        group = group.wait(up_to);
    }
    let mut txn = group.once().await?;
    let mut accounts = load_all(&mut txn, &[1, 2, 3]).await?;
    accounts[0].deposit(-10);
    accounts[1].deposit(10);
    for account in &mut accounts {
        txn.save(account)?;
    }
    txn.commit().await
}

pub(super) const LEASE: Duration = Duration::from_millis(100);

/// A fault before and after every store call of a one-shot transfer (without a group:
/// one read of its members and the commit, or a read of each, their check and the
/// commit; with one: create, the transaction, dissolve): the transfer applies once or not at all, and once the lease
/// has passed nothing is owned and every account takes writes.
#[tokio::test]
async fn a_fault_at_any_call_leaves_a_recoverable_state() {
    for shape in 0..memory_stores().len() {
        let calls = transfer_calls(shape).await;
        // Each case on a store of its own, several at a time (their leases pass together).
        let cases = (0..calls).flat_map(|n| [Fault::Before, Fault::After].map(|f| (n, f)));
        let runs = futures::stream::iter(cases)
            .map(|(n, fault)| fault_at(shape, n, fault, calls))
            .buffer_unordered(CONCURRENT_CASES);
        let lost = runs.filter(|lost| std::future::ready(*lost)).count().await;
        println!(
            "shape {shape}: {} faults, {lost} of them after the lease had passed",
            2 * calls
        );
    }
}

/// How many store calls a one-shot transfer of [`transfer_ten`] makes on memory store
/// shape `shape` (of `memory_stores`).
async fn transfer_calls(shape: usize) -> u64 {
    let (_, shaped, _) = memory_stores().into_iter().nth(shape).unwrap();
    let store = FaultyStore::new(shaped);
    let db = Mapper::new(store.clone());
    open_accounts(&db, 1..=3).await;
    let before = store.calls();
    transfer_ten(&db, Duration::from_secs(30), None)
        .await
        .unwrap();
    let calls = store.calls() - before;
    // At least one read of the three accounts and the commit (a one-shot transaction
    // on a store that reads them atomically; a read of each, their check and the
    // commit on one that does not; with a group, more).
    assert!(calls >= 2, "a transfer takes {calls} store calls");
    calls
}

/// A one-shot transfer cut by a fault before or after any of its store calls, then
/// recovered once its lease has passed, leaves every entry the write records of the
/// accounts' shards held, on every shape: a merge whose entry was there is still known as
/// applied, and sent again it is not counted twice. Where the commit is a two-phase
/// commit, the transfer read its members without records, and whoever settles a document
/// it held (the transfer, or recovery) writes the next content as values.
#[tokio::test]
async fn a_cut_one_shot_transfer_keeps_the_write_records() {
    for shape in 0..memory_stores().len() {
        let calls = transfer_calls(shape).await;
        let cases = (0..calls).flat_map(|n| [Fault::Before, Fault::After].map(|f| (n, f)));
        let runs = futures::stream::iter(cases)
            .map(|(n, fault)| records_kept_at(shape, n, fault, calls))
            .buffer_unordered(CONCURRENT_CASES);
        runs.collect::<Vec<()>>().await;
    }
}

/// One case of [`a_cut_one_shot_transfer_keeps_the_write_records`]: `fault` at call `n`.
async fn records_kept_at(shape: usize, n: u64, fault: Fault, calls: u64) {
    let (memory, shaped, label) = memory_stores().into_iter().nth(shape).unwrap();
    let store = FaultyStore::new(shaped);
    let db = Mapper::new(store.clone());
    open_accounts(&db, 1..=3).await;
    record_writes(&db, &store).await;
    let before = shard_records(&store).await;
    store.fail_call(n, fault);
    let outcome = transfer_ten(&db, LEASE, None).await;
    let ended = memory.now_ms().await.unwrap();
    store.clear();
    after_lease(&memory, ended).await;
    db.recover_key_groups().await.unwrap();
    let case = format!("{label}, {fault:?} call {n} of {calls}: {outcome:?}");
    assert_records_kept(&before, &shard_records(&memory).await, &case);
}

/// How many fault cases run at a time.
pub(super) const CONCURRENT_CASES: usize = 16;

/// One case of [`a_fault_at_any_call_leaves_a_recoverable_state`]: `fault` at call `n`.
/// Whether the lease had passed before the transfer ended.
async fn fault_at(shape: usize, n: u64, fault: Fault, calls: u64) -> bool {
    let (memory, shaped, label) = memory_stores().into_iter().nth(shape).unwrap();
    let store = FaultyStore::new(shaped);
    let db = Mapper::new(store.clone());
    open_accounts(&db, 1..=3).await;
    store.fail_call(n, fault);
    let outcome = transfer_ten(&db, LEASE, None).await;
    // Every lease the transfer took began before it ended.
    let ended = memory.now_ms().await.unwrap();
    let case = format!("{label}, {fault:?} call {n} of {calls}: {outcome:?}");
    if let Err(e) = &outcome {
        assert!(
            matches!(e, Error::Backend { .. } | Error::GroupLost { .. }),
            "{case}"
        );
    }
    store.clear();
    after_lease(&memory, ended).await;
    db.recover_key_groups().await.unwrap();
    // A transfer that answered knows its outcome: committed, or refused.
    let known = match &outcome {
        Ok(()) => Some(true),
        Err(Error::GroupLost { .. }) => Some(false),
        Err(_) => None,
    };
    check_recovered(&db, &memory, 3, known, &case).await;
    matches!(outcome, Err(Error::GroupLost { .. }))
}

/// On a store without cross-group commits (the grouping protocol), a transaction of a
/// live group cut by a fault before or after any of its store calls: the next transaction
/// through the same group settles what the cut one left in flight and commits at its
/// first attempt (it never expects a document as that transaction still held it), and the
/// cut one applied once or not at all.
#[tokio::test]
async fn the_next_transaction_of_a_group_settles_a_cut_one_and_commits() {
    const GROUPING_PROTOCOL: usize = 1;
    let calls = {
        let (_, shaped, _) = memory_stores().into_iter().nth(GROUPING_PROTOCOL).unwrap();
        let store = FaultyStore::new(shaped);
        let db = Mapper::new(store.clone());
        open_accounts(&db, 1..=2).await;
        let group = group_of(&db, &[1, 2]).create().await.unwrap();
        let before = store.calls();
        move_ten(&group).await.unwrap();
        store.calls() - before
    };
    assert!(calls >= 4, "a group transaction takes {calls} store calls");
    for n in 0..calls {
        for fault in [Fault::Before, Fault::After] {
            let (_, shaped, label) = memory_stores().into_iter().nth(GROUPING_PROTOCOL).unwrap();
            let store = FaultyStore::new(shaped);
            let db = Mapper::new(store.clone());
            open_accounts(&db, 1..=2).await;
            let group = group_of(&db, &[1, 2]).create().await.unwrap();
            store.fail_call(n, fault);
            let cut = move_ten(&group).await;
            store.clear();
            let case = format!("{label}, {fault:?} call {n} of {calls}: {cut:?}");
            let next = move_ten(&group).await;
            assert!(next.is_ok(), "{case}, then {next:?}");
            group.dissolve().await.unwrap();
            let accounts = db.load_many::<Account>(&[1, 2]).await.unwrap();
            let balances: Vec<i64> = accounts.into_iter().map(|a| a.unwrap().balance).collect();
            let moved = INITIAL - balances[0];
            assert_eq!(balances[1], INITIAL + moved, "{case}: the total");
            let want: &[i64] = if cut.is_ok() { &[20] } else { &[10, 20] };
            assert!(want.contains(&moved), "{case}: moved {moved}");
        }
    }
}

/// On the grouping protocol, a transaction of a live group whose future is dropped before
/// or after any of its store calls; then, through the same handle, the group dissolved at
/// once, or after one more transaction (which commits at its first attempt): nothing stays
/// owned or held (the accounts take writes at once, long before the lease passes, and no
/// owner or next content is left in them), and the dropped transaction applied once or not at
/// all.
#[tokio::test]
async fn a_group_dissolved_after_a_dropped_transaction_owns_nothing() {
    const GROUPING_PROTOCOL: usize = 1;
    let gate = |at, fault| {
        let (_, shaped, _) = memory_stores().into_iter().nth(GROUPING_PROTOCOL).unwrap();
        DropAt {
            inner: shaped,
            calls: Arc::new(AtomicU64::new(u64::MAX / 2)),
            at,
            fault,
            hit: Arc::new(tokio::sync::Notify::new()),
        }
    };
    let calls = {
        let gate = gate(u64::MAX, Fault::Before);
        let db = Mapper::new(gate.clone());
        open_accounts(&db, 1..=2).await;
        let group = group_of(&db, &[1, 2]).create().await.unwrap();
        gate.calls.store(0, Ordering::SeqCst);
        move_ten(&group).await.unwrap();
        gate.calls.load(Ordering::SeqCst)
    };
    assert!(calls >= 4, "a group transaction takes {calls} store calls");
    for at in 0..calls {
        for fault in [Fault::Before, Fault::After] {
            for next in [false, true] {
                let gate = gate(at, fault);
                let db = Mapper::new(gate.clone());
                open_accounts(&db, 1..=2).await;
                let group = group_of(&db, &[1, 2]).create().await.unwrap();
                gate.calls.store(0, Ordering::SeqCst);
                let case = format!("dropped {fault:?} call {at} of {calls}, next: {next}");
                tokio::select! {
                    outcome = move_ten(&group) => panic!("{case}: not dropped: {outcome:?}"),
                    () = gate.hit.notified() => {}
                }
                gate.calls.store(u64::MAX / 2, Ordering::SeqCst);
                if next {
                    let moved = move_ten(&group).await;
                    assert!(moved.is_ok(), "{case}: the next transaction: {moved:?}");
                }
                group.dissolve().await.unwrap();
                for id in [1u64, 2] {
                    let main = autoshard::Key::new("Account", id.to_string());
                    let mut keys = vec![main.clone()];
                    keys.extend(
                        (0..4).map(|i| autoshard::layout::static_shard(&main, "balance", i)),
                    );
                    for found in gate
                        .inner
                        .get_many(&keys)
                        .await
                        .unwrap()
                        .into_iter()
                        .flatten()
                    {
                        let left: Vec<&String> = found
                            .doc
                            .keys()
                            .filter(|p| ["~own", "~next"].contains(&p.as_str()))
                            .collect();
                        assert!(
                            left.is_empty(),
                            "{case}: left behind in account {id}: {left:?}"
                        );
                    }
                    let deposit = db.apply(&id, |a: &mut Account| a.deposit(1)).await;
                    assert!(
                        deposit.is_ok(),
                        "{case}: account {id} after dissolve: {deposit:?}"
                    );
                }
                let accounts = db.load_many::<Account>(&[1, 2]).await.unwrap();
                let balances: Vec<i64> = accounts.into_iter().map(|a| a.unwrap().balance).collect();
                let moved = INITIAL + 1 - balances[0];
                assert_eq!(balances[1], INITIAL + 1 + moved, "{case}: the total");
                let by_next = if next { 10 } else { 0 };
                assert!(
                    [by_next, by_next + 10].contains(&moved),
                    "{case}: moved {moved}"
                );
            }
        }
    }
}

/// Moves 10 from account 1 to account 2 in a transaction of `group`.
async fn move_ten<S: DocumentStore>(group: &KeyGroup<'_, S>) -> Result<()> {
    let mut txn = group.transaction().await;
    let mut accounts = load_all(&mut txn, &[1, 2]).await?;
    accounts[0].deposit(-10);
    accounts[1].deposit(10);
    for account in &mut accounts {
        txn.save(account)?;
    }
    txn.commit().await
}

/// A store that runs calls until the `at`-th, which it leaves pending forever, before or
/// after running it: a future dropped there.
#[derive(Debug, Clone)]
pub(super) struct DropAt {
    pub(super) inner: Arc<TestStore<MemoryStore>>,
    pub(super) calls: Arc<AtomicU64>,
    pub(super) at: u64,
    pub(super) fault: Fault,
    pub(super) hit: Arc<tokio::sync::Notify>,
}

impl DropAt {
    async fn pass<T>(&self, call: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        if self.calls.fetch_add(1, Ordering::SeqCst) != self.at {
            return call.await;
        }
        if self.fault == Fault::After {
            call.await?;
        }
        self.hit.notify_one();
        std::future::pending().await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl DocumentStore for DropAt {
    async fn get(&self, key: &autoshard::Key) -> Result<Option<Versioned>> {
        self.pass(self.inner.get(key)).await
    }
    async fn get_many(&self, keys: &[autoshard::Key]) -> Result<Vec<Option<Versioned>>> {
        self.pass(self.inner.get_many(keys)).await
    }
    async fn insert(&self, key: &autoshard::Key, doc: Document) -> Result<Version> {
        self.pass(self.inner.insert(key, doc)).await
    }
    async fn put(&self, key: &autoshard::Key, doc: Document) -> Result<Version> {
        self.pass(self.inner.put(key, doc)).await
    }
    async fn delete(&self, key: &autoshard::Key) -> Result<bool> {
        self.pass(self.inner.delete(key)).await
    }
    async fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        self.pass(self.inner.scan(scan)).await
    }
    async fn lookup(&self, lookup: &Lookup) -> Result<Found> {
        self.pass(self.inner.lookup(lookup)).await
    }
    async fn fold_lookup(&self, lookup: &FoldLookup) -> Result<FoldFound> {
        self.pass(self.inner.fold_lookup(lookup)).await
    }
    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        self.pass(self.inner.commit(txn)).await
    }
    async fn commit_versioned(&self, txn: &Transaction) -> Result<CommitReply> {
        self.pass(self.inner.commit_versioned(txn)).await
    }
    async fn merge(&self, merge: &Merge) -> Result<Merged> {
        self.pass(self.inner.merge(merge)).await
    }
    async fn now_ms(&self) -> Result<u64> {
        self.pass(self.inner.now_ms()).await
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

/// A one-shot transfer whose future is dropped before or after each of its store calls:
/// applied once or not at all, and recoverable once the lease has passed.
#[tokio::test]
async fn a_dropped_transfer_leaves_a_recoverable_state() {
    for shape in 0..memory_stores().len() {
        dropped_transfers(shape).await;
    }
}

async fn dropped_transfers(shape: usize) {
    // The calls of a transfer no one drops.
    let calls = {
        let (_, shaped, _) = memory_stores().into_iter().nth(shape).unwrap();
        let gate = DropAt {
            inner: shaped,
            calls: Arc::new(AtomicU64::new(u64::MAX / 2)),
            at: u64::MAX,
            fault: Fault::Before,
            hit: Arc::new(tokio::sync::Notify::new()),
        };
        let db = Mapper::new(gate.clone());
        open_accounts(&db, 1..=3).await;
        gate.calls.store(0, Ordering::SeqCst);
        transfer_ten(&db, Duration::from_secs(30), None)
            .await
            .unwrap();
        gate.calls.load(Ordering::SeqCst)
    };
    // As in `a_fault_at_any_call_leaves_a_recoverable_state`.
    assert!(calls >= 2, "a transfer takes {calls} store calls");
    let cases = (0..calls).flat_map(|at| [Fault::Before, Fault::After].map(|f| (at, f)));
    let runs = futures::stream::iter(cases)
        .map(|(at, fault)| dropped_at(shape, at, fault))
        .buffer_unordered(CONCURRENT_CASES);
    runs.collect::<Vec<()>>().await;
}

/// One case of [`a_dropped_transfer_leaves_a_recoverable_state`]: the transfer dropped
/// before or after its call `at`.
async fn dropped_at(shape: usize, at: u64, fault: Fault) {
    let (inner, shaped, label) = memory_stores().into_iter().nth(shape).unwrap();
    let gate = DropAt {
        inner: shaped,
        calls: Arc::new(AtomicU64::new(u64::MAX / 2)),
        at,
        fault,
        hit: Arc::new(tokio::sync::Notify::new()),
    };
    let db = Mapper::new(gate.clone());
    open_accounts(&db, 1..=3).await;
    gate.calls.store(0, Ordering::SeqCst);
    let case = format!("{label}, dropped {fault:?} call {at}");
    tokio::select! {
        outcome = transfer_ten(&db, LEASE, None) => {
            // A transfer whose lease passed before the call is refused there.
            assert!(matches!(outcome, Err(Error::GroupLost { .. })), "{case}: {outcome:?}");
        }
        () = gate.hit.notified() => {}
    }
    gate.calls.store(u64::MAX / 2, Ordering::SeqCst);
    // Every lease the transfer took began before it was dropped.
    let dropped = inner.now_ms().await.unwrap();
    after_lease(&inner, dropped).await;
    db.recover_key_groups().await.unwrap();
    check_recovered(&db, &inner, 3, None, &case).await;
}

/// A standalone Redis killed and restarted while clients transfer: every error is typed,
/// and the total holds once the leases of groups cut short have passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_survive_a_redis_restart() {
    let mut server = Standalone::start_persistent();
    let store = autoshard::store::RedisStore::connect_with(&server.url(), cut_short("kill"))
        .await
        .unwrap();
    let server = std::sync::Mutex::new(&mut server.server);
    transfers_survive(
        Mapper::new(Arc::new(store)),
        || server.lock().unwrap().kill(),
        || server.lock().unwrap().restart(),
        "redis restart",
    )
    .await;
}

/// A master of a Redis Cluster stopped (it answers nothing, its connections stay open)
/// and let go on while clients transfer: the calls bound for it, a master's owner commits
/// sent together among them, time out with their outcome unknown; every error is typed,
/// and the total holds once the leases of groups cut short have passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_survive_a_stopped_cluster_master() {
    let cluster = Cluster::start();
    let store =
        autoshard::store::RedisStore::connect_cluster_with(&cluster.urls(), cut_short("stop"))
            .await
            .unwrap();
    transfers_survive(
        Mapper::new(Arc::new(store)),
        || cluster.nodes[0].pause(),
        || cluster.nodes[0].resume(),
        "cluster master stopped",
    )
    .await;
}

/// Options of a store whose calls give up soon when the server does not answer.
fn cut_short(case: &str) -> autoshard::store::RedisOptions {
    autoshard::store::RedisOptions::default()
        .namespace(namespace(&format!("keygroup_{case}")))
        .response_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_millis(500))
        .reconnect_retries(1)
}

/// 8 clients transfer among 16 accounts of `db`; after 20 transfers the server is `cut`
/// until a client has failed, then `restored`; after 20 more transfers the clients stop,
/// and an audit (once groups cut short have let their members go) finds the total.
async fn transfers_survive<S: DocumentStore + Clone + 'static>(
    db: Mapper<S>,
    cut: impl FnOnce(),
    restore: impl FnOnce(),
    label: &str,
) {
    const ACCOUNTS: u64 = 16;
    open_accounts(&db, 1..=ACCOUNTS).await;
    let lease = Duration::from_secs(2);
    let (committed, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..8u64)
        .map(|c| {
            let (db, committed, failed, stop) =
                (db.clone(), committed.clone(), failed.clone(), stop.clone());
            tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(100 + c);
                while !stop.load(Ordering::Relaxed) {
                    let ids = random_ids(&mut rng, ACCOUNTS);
                    match transfer(&db, &ids, &mut rng, lease).await {
                        Ok(()) => {
                            committed.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if contended(&e) => {
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        Err(Error::Backend { .. } | Error::GroupLost { .. }) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Err(e) => panic!("client {c}: {e}"),
                    }
                }
            })
        })
        .collect();
    let progress = |n: u64, what: &str| {
        let committed = committed.clone();
        let what = what.to_owned();
        async move {
            autoshard_test_support::progress::wait_until(&what, || {
                committed.load(Ordering::Relaxed) >= n
            })
            .await;
        }
    };
    progress(20, "20 transfers before the cut").await;
    cut();
    autoshard_test_support::progress::wait_until("a client to fail", || {
        failed.load(Ordering::Relaxed) >= 1
    })
    .await;
    restore();
    let before = committed.load(Ordering::Relaxed);
    progress(before + 20, "20 transfers after the restore").await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    let total = loop {
        match audit(&db, ACCOUNTS).await {
            Ok(total) => break total,
            // Groups cut short own their members until their lease passes.
            Err(e) if contended(&e) || matches!(e, Error::Backend { .. }) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("audit: {e}"),
        }
    };
    assert_eq!(total, INITIAL * i64::try_from(ACCOUNTS).unwrap());
    println!(
        "{label}: {} transfers, {} cut short",
        committed.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
}
