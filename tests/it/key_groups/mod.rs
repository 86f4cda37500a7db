//! Key groups (G-Store): a bank-transfer invariant under 32 concurrent clients, the
//! isolation of grouped members from every other write, and exactly-once commits; faults
//! and dropped futures at every store call, each followed by recovery once the lease has
//! passed, in `faults`; what the lease ends (holds past it, a late join, an abandoned
//! group), in `leases`; waiting for members, fairly and under the same faults, in
//! `waiting`; a group's later transactions reading what its last commit left, in
//! `later_transactions`; what a one-shot transaction reads and when two of them conflict,
//! in `one_shot`.

mod bank;
mod faults;
mod later_transactions;
mod leases;
mod one_shot;
mod waiting;

use autoshard::group::{GroupTransaction, KeyGroupBuilder};
use autoshard::prelude::*;
use autoshard::store::DocumentStore;
use autoshard::store::faulty::{Fault, FaultyStore};
use autoshard_test_support::entities::{Account, Counter};
use autoshard_test_support::every_store::Backend;
use autoshard_test_support::store::{Knobs, TestStore};
use rand::{RngExt, SeedableRng};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const INITIAL: i64 = 100;

async fn open_accounts<S: DocumentStore>(db: &Mapper<S>, ids: impl IntoIterator<Item = u64>) {
    for id in ids {
        db.insert(&mut Account::new(id, 0, INITIAL)).await.unwrap();
    }
}

fn group_of<'m, S: DocumentStore>(db: &'m Mapper<S>, ids: &[u64]) -> KeyGroupBuilder<'m, S> {
    ids.iter()
        .fold(db.key_group(), KeyGroupBuilder::member::<Account>)
}

/// Loads every account of `ids` through `txn`: a snapshot of the group.
async fn load_all<S: DocumentStore>(
    txn: &mut GroupTransaction<'_, '_, S>,
    ids: &[u64],
) -> Result<Vec<Account>> {
    let accounts = txn.load_many::<Account>(ids).await?;
    for account in &accounts {
        assert!(account.balance >= 0, "a negative balance: {account:?}");
    }
    Ok(accounts)
}

/// Moves up to 30 from the first account of `ids` to another, in one one-shot group.
async fn transfer<S: DocumentStore>(
    db: &Mapper<S>,
    ids: &[u64],
    rng: &mut rand::rngs::StdRng,
    lease: Duration,
) -> Result<()> {
    let mut txn = group_of(db, ids).lease(lease).once().await?;
    let mut accounts = load_all(&mut txn, ids).await?;
    let amount = rng.random_range(0..=accounts[0].balance.min(30));
    let to = rng.random_range(1..accounts.len());
    accounts[0].deposit(-amount);
    accounts[0].transfers += 1;
    accounts[to].deposit(amount);
    for account in &mut accounts {
        txn.save(account)?;
    }
    txn.commit().await
}

/// The total of all accounts `1..=n` read through one group over them all, checking that
/// no balance is negative.
async fn audit<S: DocumentStore>(db: &Mapper<S>, n: u64) -> Result<i64> {
    let ids: Vec<u64> = (1..=n).collect();
    let mut txn = group_of(db, &ids).once().await?;
    let total = load_all(&mut txn, &ids)
        .await?
        .iter()
        .map(|a| a.balance)
        .sum();
    txn.commit().await?;
    Ok(total)
}

/// `2..=20` distinct accounts of `1..=n`, in random order.
fn random_ids(rng: &mut rand::rngs::StdRng, n: u64) -> Vec<u64> {
    let size = rng.random_range(2..=20usize.min(usize::try_from(n).unwrap()));
    let mut ids: Vec<u64> = Vec::with_capacity(size);
    while ids.len() < size {
        let id = rng.random_range(1..=n);
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

/// Whether an error is one a client meets when groups race for keys (retried).
fn contended(e: &Error) -> bool {
    matches!(e, Error::Grouped { .. } | Error::Contention { .. })
}

/// A random pause after one more refusal in a row (`in_a_row` counts them): up to 2 ms
/// doubled per refusal, at most about four seconds. Without waiting, groups that keep
/// refusing each other (on a cluster a create owns its members one entity group at a
/// time) get out of each other's way only if they back off further each time, however
/// fast the machine is: on a slow, busy machine 32 clients that paused up to half a
/// second still kept enough creates in flight to refuse each other for minutes.
fn backoff(rng: &mut rand::rngs::StdRng, in_a_row: &mut u32) -> Duration {
    *in_a_row += 1;
    Duration::from_millis(rng.random_range(1..=2u64 << (*in_a_row).min(11)))
}

/// A random pause of up to 50 ms after an audit, which ends the refusals in a row
/// (`in_a_row`): an audit owns every account, and the pause lets the clients in between.
fn after_audit(rng: &mut rand::rngs::StdRng, in_a_row: &mut u32) -> Duration {
    *in_a_row = 0;
    Duration::from_millis(rng.random_range(1..=50))
}

mod isolation {
    use super::*;

    /// While a group lives, every other write to a member fails with `Grouped` naming
    /// the group and writes nothing, a member joins no second group, reads go on; after
    /// `dissolve` every write works again. Where the store commits across entity groups,
    /// `dissolve` is one commit (from the versions the group's own commits gave).
    async fn members_take_no_other_write_while_grouped(backend: &Backend, label: &str) {
        let store = FaultyStore::new(backend.store("keygroup_isolation").await);
        let db = Mapper::new(store.clone());
        open_accounts(&db, 1..=3).await;
        let group = group_of(&db, &[1, 2]).create().await.unwrap();
        let grouped = |e: Result<()>, what: &str| match e {
            Err(Error::Grouped { group: id, .. }) => assert_eq!(id, group.id(), "{label}: {what}"),
            other => panic!("{label}: {what}: expected Grouped, got {other:?}"),
        };
        grouped(db.apply(&1, |a: &mut Account| a.deposit(1)).await, "apply");
        grouped(
            db.update(&1, |a: &mut Account| a.transfers += 1).await,
            "update",
        );
        let mut loaded: Account = db.load(&2).await.unwrap();
        assert_eq!(loaded.balance, INITIAL, "{label}: reads go on");
        loaded.deposit(5);
        grouped(db.save(&mut loaded).await, "save of a shard");
        loaded.transfers = 9;
        grouped(db.save(&mut loaded).await, "save of the main document");
        grouped(db.delete::<Account>(&2).await.map(drop), "delete");
        grouped(
            db.update_once(&1, "op", |a: &mut Account| a.deposit(1))
                .await
                .map(drop),
            "update_once",
        );
        grouped(db.reshard::<Account>(&1, 8).await.map(drop), "reshard");
        grouped(
            group_of(&db, &[2, 3]).create().await.map(drop),
            "a second group",
        );
        // The member outside the group, untouched by the refused second group.
        db.apply(&3, |a: &mut Account| a.deposit(1)).await.unwrap();

        let mut txn = group.transaction().await;
        let mut one: Account = txn.load(&1).await.unwrap();
        one.deposit(-7);
        one.transfers += 1;
        txn.save(&mut one).unwrap();
        txn.commit().await.unwrap();
        let before = store.calls();
        group.dissolve().await.unwrap();
        if store.cross_group_transactions() {
            assert_eq!(store.calls() - before, 1, "{label}: dissolve in one commit");
        }

        db.apply(&1, |a: &mut Account| a.deposit(1)).await.unwrap();
        let one: Account = db.load(&1).await.unwrap();
        assert_eq!((one.balance, one.transfers), (INITIAL - 6, 1), "{label}");
        let mut two: Account = db.load(&2).await.unwrap();
        two.deposit(5);
        db.save(&mut two).await.unwrap();
        db.delete::<Account>(&2).await.unwrap();
        assert_eq!(db.load::<Account>(&3).await.unwrap().balance, INITIAL + 1);
    }

    autoshard_test_support::every_store!(members_take_no_other_write_while_grouped);
}

mod owned {
    use super::*;

    /// A group owns every document a writer of its members could use: the main document
    /// and static shards of an account, and the compacted document of a dynamically
    /// sharded counter (where its shards fold); the empty compacted document `insert`
    /// gives an account, which no writer uses, it leaves alone, and its transactions
    /// commit beside it. After `dissolve` nothing is owned.
    async fn a_group_owns_what_writers_use(backend: &Backend, label: &str) {
        let store = backend.store("keygroup_owns").await;
        let db = Mapper::new(store.clone());
        open_accounts(&db, [1]).await;
        db.insert(&mut Counter::new(1, 0)).await.unwrap();
        let account = autoshard::Key::new("Account", "1");
        let counter = autoshard::Key::new("Counter", "1");
        let mut used = vec![account.clone(), autoshard::layout::compacted(&counter)];
        used.extend((0..4).map(|i| autoshard::layout::static_shard(&account, "balance", i)));
        let unused = autoshard::layout::compacted(&account);
        let owners = async |keys: &[autoshard::Key]| -> Vec<Option<String>> {
            let found = store.get_many(keys).await.unwrap();
            let owner = |doc: &Option<autoshard::store::Versioned>| {
                let doc = doc.as_ref().expect("a member's document is stored");
                autoshard::store::Owner::of(&doc.doc).map(|o| o.group)
            };
            found.iter().map(owner).collect()
        };

        let group = db
            .key_group()
            .member::<Account>(&1)
            .member::<Counter>(&1)
            .create()
            .await
            .unwrap();
        let id = Some(group.id().to_owned());
        for (key, owner) in used.iter().zip(owners(&used).await) {
            assert_eq!(owner, id, "{label}: {key} is owned");
        }
        let left = owners(std::slice::from_ref(&unused)).await;
        assert_eq!(left, [None], "{label}: an account's compacted document");

        let mut txn = group.transaction().await;
        let mut one: Account = txn.load(&1).await.unwrap();
        let mut hits: Counter = txn.load(&1).await.unwrap();
        one.deposit(-3);
        hits.hit();
        txn.save(&mut one).unwrap();
        txn.save(&mut hits).unwrap();
        txn.commit().await.unwrap();
        group.dissolve().await.unwrap();

        let everything: Vec<_> = used.iter().chain([&unused]).cloned().collect();
        assert!(
            owners(&everything).await.iter().all(Option::is_none),
            "{label}: owned after dissolve"
        );
        let one: Account = db.load(&1).await.unwrap();
        let hits: Counter = db.load(&1).await.unwrap();
        assert_eq!((one.balance, hits.hits), (INITIAL - 3, 1), "{label}");
    }

    autoshard_test_support::every_store!(a_group_owns_what_writers_use);
}

/// A transaction loads only members, saves only what it loaded, and a group needs stored
/// members.
#[tokio::test]
async fn misuse_is_refused_with_typed_errors() {
    let db = Mapper::new(MemoryStore::new());
    open_accounts(&db, 1..=2).await;
    assert!(matches!(
        db.key_group().create().await,
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        group_of(&db, &[1, 9]).create().await,
        Err(Error::NotFound { .. })
    ));
    let group = group_of(&db, &[1]).create().await.unwrap();
    let mut txn = group.transaction().await;
    assert!(matches!(
        txn.load::<Account>(&2).await,
        Err(Error::Invalid(_))
    ));
    let mut outsider: Account = db.load(&2).await.unwrap();
    assert!(matches!(txn.save(&mut outsider), Err(Error::Invalid(_))));
    drop(txn);
    group.dissolve().await.unwrap();
    // Nothing stayed owned: the failed group and the dissolved one.
    db.apply(&1, |a: &mut Account| a.deposit(1)).await.unwrap();
}

/// Memory stores of each shape a key group meets, sharing nothing: one that reads a
/// lookup atomically across entity groups (a one-shot transaction reads its members in
/// one lookup), one that commits within one entity group only (as a Redis Cluster does:
/// key groups then take the grouping protocol), and one that commits across groups but
/// does not read them atomically (a one-shot transaction checks its reads with a commit),
/// and one that does neither (a Redis Cluster's shape: a one-shot transaction reads its
/// members twice).
fn memory_stores() -> [(MemoryStore, Arc<TestStore<MemoryStore>>, &'static str); 4] {
    let shaped = |cross_group, snapshot_lookups| {
        let memory = MemoryStore::new();
        let knobs = Knobs {
            cross_group_transactions: Some(cross_group),
            snapshot_lookups: Some(snapshot_lookups),
            ..Knobs::default()
        };
        (memory.clone(), Arc::new(TestStore::new(memory, knobs)))
    };
    let (one, one_store) = shaped(true, true);
    let (steps, steps_store) = shaped(false, true);
    let (checked, checked_store) = shaped(true, false);
    let (twice, twice_store) = shaped(false, false);
    [
        (one, one_store, "one commit per step"),
        (steps, steps_store, "the grouping protocol"),
        (checked, checked_store, "reads checked by a commit"),
        (
            twice,
            twice_store,
            "the grouping protocol, reads read twice",
        ),
    ]
}

/// The shapes of [`memory_stores`] that commit across entity groups (all but the
/// grouping protocol's).
fn cross_group_memory_stores()
-> impl Iterator<Item = (MemoryStore, Arc<TestStore<MemoryStore>>, &'static str)> {
    memory_stores()
        .into_iter()
        .filter(|(_, store, _)| store.cross_group_transactions())
}

/// The shape of [`memory_stores`] whose commits stay within one entity group: the
/// grouping protocol's.
fn grouping_memory_store() -> Arc<TestStore<MemoryStore>> {
    let (_, store, _) = memory_stores()
        .into_iter()
        .find(|(_, store, _)| !store.cross_group_transactions())
        .expect("the grouping protocol's shape");
    store
}

/// A commit whose reply is lost is checked and applied once; so is one that failed
/// before reaching the store.
#[tokio::test]
async fn a_commit_with_a_lost_reply_applies_once() {
    for (fault, (_, shaped, _)) in [Fault::After, Fault::Before]
        .into_iter()
        .flat_map(|f| memory_stores().map(|s| (f, s)))
    {
        let store = FaultyStore::new(shaped);
        let db = Mapper::new(store.clone());
        open_accounts(&db, 1..=2).await;
        let group = group_of(&db, &[1, 2]).create().await.unwrap();
        let mut txn = group.transaction().await;
        let mut one: Account = txn.load(&1).await.unwrap();
        let mut two: Account = txn.load(&2).await.unwrap();
        one.deposit(-10);
        two.deposit(10);
        txn.save(&mut one).unwrap();
        txn.save(&mut two).unwrap();
        store.fail_call(0, fault);
        txn.commit().await.unwrap();
        assert_eq!(store.faults(), 1, "{fault:?}: the fault struck");
        assert_eq!(
            db.recover_key_groups().await.unwrap(),
            0,
            "a live group is left alone"
        );
        group.dissolve().await.unwrap();
        assert_eq!(db.load::<Account>(&1).await.unwrap().balance, INITIAL - 10);
        assert_eq!(db.load::<Account>(&2).await.unwrap().balance, INITIAL + 10);
    }
}

/// Asserts that account 1 holds `one` less than it was opened with, and account 2 `two`
/// more.
async fn assert_moved<S: DocumentStore>(db: &Mapper<S>, one: i64, two: i64, label: &str) {
    let balance = |id: u64| async move { db.load::<Account>(&id).await.unwrap().balance };
    assert_eq!(balance(1).await, INITIAL - one, "{label}: account 1");
    assert_eq!(balance(2).await, INITIAL + two, "{label}: account 2");
}

/// Loads the accounts `ids` in a one-shot transaction over them, and drops it: refused
/// where a live group owns one of them (as it forms its group, or at the load).
async fn load_once<S: DocumentStore>(db: &Mapper<S>, ids: &[u64]) -> Result<()> {
    group_of(db, ids)
        .once()
        .await?
        .load_many::<Account>(ids)
        .await
        .map(drop)
}

/// Moves 10 from account 1 to account 2 in `txn`, a one-shot transaction over both.
fn move_ten<S: DocumentStore>(
    txn: &mut GroupTransaction<'_, '_, S>,
    accounts: &mut [Account],
) -> Result<()> {
    accounts[0].deposit(-10);
    accounts[1].deposit(10);
    for account in accounts {
        txn.save(account)?;
    }
    Ok(())
}

/// A one-shot transaction forms no group while it runs: it is its members' reads and a
/// commit (one where the store commits across entity groups, the steps of a two-phase
/// commit elsewhere), its members take other writes meanwhile, and its commit applies
/// only when nothing it read changed and no live group owns a member.
#[tokio::test]
async fn a_one_shot_transaction_is_one_commit_of_what_it_read() {
    for (_, shaped, label) in memory_stores() {
        let store = FaultyStore::new(shaped);
        let db = Mapper::new(store.clone());
        open_accounts(&db, 1..=2).await;

        let before = store.calls();
        let mut txn = group_of(&db, &[1, 2]).once().await.unwrap();
        let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
        move_ten(&mut txn, &mut accounts).unwrap();
        txn.commit().await.unwrap();
        let calls = store.calls() - before;
        match label {
            "one commit per step" => {
                assert_eq!(calls, 2, "{label}: one read of both members, one commit");
            }
            "reads checked by a commit" => assert_eq!(
                calls, 4,
                "{label}: a read of each member, their check, one commit"
            ),
            "the grouping protocol, reads read twice" => assert_eq!(
                calls, 12,
                "{label}: a read of each member, then all of them read again; the \
                 commit's 9 calls"
            ),
            _ => assert_eq!(
                calls, 10,
                "{label}: one read of both members; the clock, the group document \
                 inserted, a prepare of each shard written (an entity group of its own), \
                 the documents only read read again, the decision, a settling of each \
                 shard written, the group document deleted"
            ),
        }

        // A write to a member between the transaction's loads and its commit.
        let mut txn = group_of(&db, &[1, 2]).once().await.unwrap();
        let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
        let deposit = db.apply(&2, |a: &mut Account| a.deposit(5)).await;
        move_ten(&mut txn, &mut accounts).unwrap();
        let committed = txn.commit().await;
        deposit.unwrap();
        assert!(
            matches!(committed, Err(Error::Contention { .. })),
            "{label}: {committed:?}"
        );
        assert_moved(&db, 10, 15, label).await;

        // A live group over a member: refused at the load, or at the commit when the group
        // came after the loads; nothing written either way.
        let group = group_of(&db, &[2]).create().await.unwrap();
        let loaded = load_once(&db, &[1, 2]).await;
        assert!(
            matches!(loaded, Err(Error::Grouped { .. })),
            "{label}: {loaded:?}"
        );
        group.dissolve().await.unwrap();
        let mut txn = group_of(&db, &[1, 2]).once().await.unwrap();
        let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
        let group = group_of(&db, &[2]).create().await;
        move_ten(&mut txn, &mut accounts).unwrap();
        let committed = txn.commit().await;
        assert!(
            matches!(
                committed,
                Err(Error::Grouped { .. } | Error::Contention { .. })
            ),
            "{label}: {committed:?}"
        );
        group.unwrap().dissolve().await.unwrap();
        assert_moved(&db, 10, 15, label).await;
        db.apply(&1, |a: &mut Account| a.deposit(0)).await.unwrap();
    }
}

/// Where the store commits across entity groups, a group's handle knows the version each
/// of its own commits gave the documents it owns: dissolving it is then one commit that
/// expects those versions, releases every document and deletes the group's own documents.
/// A handle that does not know them (here a transaction whose reply was lost, found landed
/// by a read) reads before it releases; either way nothing stays owned or left behind.
#[tokio::test]
async fn a_group_dissolves_in_one_commit_from_what_its_own_commits_wrote() {
    for (memory, shaped, label) in cross_group_memory_stores() {
        let store = FaultyStore::new(shaped);
        let db = Mapper::new(store.clone());
        open_accounts(&db, 1..=2).await;
        let documents = memory.len();
        for lost_reply in [false, true] {
            let case = format!("{label}, a reply lost: {lost_reply}");
            let group = group_of(&db, &[1, 2]).create().await.unwrap();
            group.renew(Duration::from_mins(1)).await.unwrap();
            let mut txn = group.transaction().await;
            let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
            move_ten(&mut txn, &mut accounts).unwrap();
            if lost_reply {
                store.fail_call(0, Fault::After);
            }
            txn.commit().await.unwrap();
            let before = store.calls();
            group.dissolve().await.unwrap();
            let calls = store.calls() - before;
            if lost_reply {
                assert!(calls > 1, "{case}: read before the release, {calls} calls");
            } else {
                assert_eq!(calls, 1, "{case}: one commit");
            }
            assert_released(&memory, &db, documents, &case).await;
        }
        assert_moved(&db, 20, 20, label).await;
    }
}

/// The one commit that dissolves a group from its handle's versions, cut by a fault
/// before it reaches the store or after it applied (its reply lost): dissolve still
/// answers that the group is gone, having checked the group document and sent the
/// commit again where it had not landed, and nothing stays owned or left behind.
#[tokio::test]
async fn a_one_commit_dissolve_cut_by_a_fault_still_releases_everything() {
    for fault in [Fault::Before, Fault::After] {
        for (memory, shaped, label) in cross_group_memory_stores() {
            let case = format!("{label}, {fault:?}");
            let store = FaultyStore::new(shaped);
            let db = Mapper::new(store.clone());
            open_accounts(&db, 1..=2).await;
            let documents = memory.len();
            let group = group_of(&db, &[1, 2]).create().await.unwrap();
            let mut txn = group.transaction().await;
            let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
            move_ten(&mut txn, &mut accounts).unwrap();
            txn.commit().await.unwrap();
            store.fail_call(0, fault);
            group.dissolve().await.unwrap();
            assert_eq!(store.faults(), 1, "{case}: the fault struck");
            assert_released(&memory, &db, documents, &case).await;
            assert_moved(&db, 10, 10, &case).await;
        }
    }
}

/// After a group over accounts 1 and 2 was dissolved: the store holds `documents`
/// documents again (the group's own are gone), none of the accounts' is owned, and each
/// account takes a plain write.
async fn assert_released<S: DocumentStore>(
    memory: &MemoryStore,
    db: &Mapper<S>,
    documents: usize,
    case: &str,
) {
    assert_eq!(
        memory.len(),
        documents,
        "{case}: the group's documents deleted"
    );
    for id in 1..=2u64 {
        let main = autoshard::Key::new("Account", id.to_string());
        let mut keys = vec![main.clone()];
        keys.extend((0..4).map(|i| autoshard::layout::static_shard(&main, "balance", i)));
        for found in memory.get_many(&keys).await.unwrap().into_iter().flatten() {
            let owner = autoshard::store::Owner::of(&found.doc);
            assert!(owner.is_none(), "{case}: still owned: {owner:?}");
        }
        db.apply(&id, |a: &mut Account| a.deposit(0)).await.unwrap();
    }
}

/// A group transaction on a store that reads a lookup atomically expects the group
/// document in place of every member document the group owns with at least its lease,
/// not of one stamped with a shorter lease: here a renewal dropped after it landed leaves
/// the handle with the old lease, a transaction stamps account 2 with it, and once that
/// passes a plain writer changes account 2 while a second transaction, which read account
/// 2 before, writes account 1 from what it read. That transaction's commit meets the
/// change (it would commit on a stale read otherwise), though the group document is
/// unchanged, its lease holds and it does not write account 2.
#[tokio::test]
async fn a_member_stamped_with_a_shorter_lease_is_expected_as_read() {
    const AT: u64 = 1_000_000;
    let (_, shaped, _) = memory_stores().into_iter().next().unwrap();
    let gate = faults::DropAt {
        inner: shaped,
        calls: Arc::new(AtomicU64::new(u64::MAX / 2)),
        at: AT,
        fault: Fault::After,
        hit: Arc::new(tokio::sync::Notify::new()),
    };
    let db = Mapper::new(gate.clone());
    open_accounts(&db, 1..=2).await;
    // The dropped renewal must reach the store before the short lease passes: on a machine
    // too slow for that, the lease is doubled and the group formed again (its members are
    // free once the lease has passed).
    let mut lease = Duration::from_millis(300);
    let (group, short) = loop {
        gate.calls.store(u64::MAX / 2, Ordering::SeqCst);
        let group = group_of(&db, &[1, 2]).create().await.unwrap();
        gate.calls.store(0, Ordering::SeqCst);
        group.renew(lease).await.unwrap();
        let short = group.until_ms();
        // A renewal to an hour dropped once its commit has landed: the handle keeps `short`.
        let renewal = gate.calls.load(Ordering::SeqCst);
        gate.calls.store(AT + 1 - renewal, Ordering::SeqCst);
        tokio::select! {
            renewed = group.renew(Duration::from_hours(1)) => {
                assert!(matches!(renewed, Err(Error::GroupLost { .. })), "{renewed:?}");
                assert!(lease < Duration::from_mins(1), "the short lease always passed first");
                lease *= 2;
            }
            () = gate.hit.notified() => break (group, short),
        }
    };
    gate.calls.store(u64::MAX / 2, Ordering::SeqCst);
    assert_eq!(group.until_ms(), short);
    // A transaction through the handle stamps account 2's main document with `short`.
    let mut txn = group.transaction().await;
    let mut two: Account = txn.load(&2).await.unwrap();
    two.transfers += 1;
    txn.save(&mut two).unwrap();
    txn.commit().await.unwrap();

    let mut txn = group.transaction().await;
    let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
    // Once `short` has passed by the store's clock, account 2's main document is free.
    while db.store().now_ms().await.unwrap() <= short {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    db.update(&2, |a: &mut Account| a.transfers += 10)
        .await
        .unwrap();
    accounts[0].transfers = accounts[1].transfers + 100;
    txn.save(&mut accounts[0]).unwrap();
    let committed = txn.commit().await;
    assert!(
        matches!(committed, Err(Error::Contention { .. })),
        "{committed:?}"
    );
    let one: Account = db.load(&1).await.unwrap();
    let two: Account = db.load(&2).await.unwrap();
    assert_eq!((one.transfers, two.transfers), (0, 11));
}
