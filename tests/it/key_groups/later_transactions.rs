//! A group's later transactions read their members as the group's last commit left them,
//! from the group's handle. Where the store commits across entity groups the commit
//! expects every document so read at the version the handle holds for it; on a Redis
//! Cluster the prepare expects each document it writes so, and the log the group
//! document.

use super::*;
use autoshard::group::KeyGroup;
use autoshard::store::{Commit, Transaction};
use autoshard_test_support::every_store::{Kind, run};

/// Transactions of one group over three accounts: the second and the third read nothing
/// from the store (accounts 1 and 2 are as the first one's commit left them), one commit
/// each where the store commits across entity groups (the third writes nothing: its
/// commit checks what it read; on the cluster, the group document); the fourth reads
/// account 2 from the handle and account 3, which no transaction of the group loaded
/// yet, from the store. Then account 1's main document is changed behind the handle (a
/// commit carrying the group's token): the next transaction, reading the handle's copy,
/// conflicts and writes nothing, and the one after reads the store again and commits.
/// The change behind the handle is kept and every transfer counted once.
async fn read_what_the_last_commit_left(backend: &Backend, label: &str) {
    let store = FaultyStore::new(backend.store("keygroup_later").await);
    let db = Mapper::new(store.clone());
    open_accounts(&db, 1..=3).await;
    let group = group_of(&db, &[1, 2, 3]).create().await.unwrap();
    let mut txn = group.transaction().await;
    let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
    move_ten(&mut txn, &mut accounts).unwrap();
    txn.commit().await.unwrap();

    let before = store.calls();
    let mut txn = group.transaction().await;
    let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
    assert_eq!(store.calls(), before, "{label}: read from the handle");
    let balances = (accounts[0].balance, accounts[1].balance);
    assert_eq!(balances, (INITIAL - 10, INITIAL + 10), "{label}: after one");
    move_ten(&mut txn, &mut accounts).unwrap();
    txn.commit().await.unwrap();
    if store.cross_group_transactions() {
        assert_eq!(store.calls() - before, 1, "{label}: one commit");
    }

    let before = store.calls();
    let mut txn = group.transaction().await;
    let accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
    let balances = (accounts[0].balance, accounts[1].balance);
    assert_eq!(balances, (INITIAL - 20, INITIAL + 20), "{label}: after two");
    txn.commit().await.unwrap();
    assert_eq!(store.calls() - before, 1, "{label}: one commit that checks");

    let mut txn = group.transaction().await;
    let mut accounts = load_all(&mut txn, &[2, 3]).await.unwrap();
    let balances = (accounts[0].balance, accounts[1].balance);
    assert_eq!(
        balances,
        (INITIAL + 20, INITIAL),
        "{label}: one held, one read"
    );
    move_ten(&mut txn, &mut accounts).unwrap();
    txn.commit().await.unwrap();

    let main = autoshard::Key::new("Account", "1");
    let stored = store
        .get(&main)
        .await
        .unwrap()
        .expect("account 1 is stored");
    let mut doc = stored.doc.clone();
    doc.insert("transfers".to_owned(), 1000.into());
    let behind = Transaction::new()
        .owned_by(group.id().to_owned())
        .expect(main.clone(), Some(stored.version))
        .put(main, doc);
    assert_eq!(store.commit(&behind).await.unwrap(), Commit::Committed);

    let mut txn = group.transaction().await;
    let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
    assert_eq!(accounts[0].transfers, 0, "{label}: the handle's copy");
    accounts[0].transfers += 1;
    move_ten(&mut txn, &mut accounts).unwrap();
    let committed = txn.commit().await;
    assert!(
        matches!(committed, Err(Error::Contention { .. })),
        "{label}: a commit on the handle's stale copy: {committed:?}"
    );

    let mut txn = group.transaction().await;
    let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
    assert_eq!(accounts[0].transfers, 1000, "{label}: read from the store");
    accounts[0].transfers += 1;
    move_ten(&mut txn, &mut accounts).unwrap();
    txn.commit().await.unwrap();
    group.dissolve().await.unwrap();
    let one: Account = db.load(&1).await.unwrap();
    assert_eq!(
        one.transfers, 1001,
        "{label}: the change behind the handle kept"
    );
    let mut balances = Vec::new();
    for id in 1..=3 {
        balances.push(db.load::<Account>(&id).await.unwrap().balance);
    }
    let moved = [INITIAL - 30, INITIAL + 20, INITIAL + 10];
    assert_eq!(balances, moved, "{label}: every transfer once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory() {
    run(Kind::Memory, read_what_the_last_commit_left).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_standalone() {
    run(Kind::Standalone, read_what_the_last_commit_left).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster() {
    run(Kind::Cluster, read_what_the_last_commit_left).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    run(Kind::Postgres, read_what_the_last_commit_left).await;
}

/// Moves 10 from account 1 to account 2 in a transaction of `group`, counting it in
/// account 1's transfers.
async fn move_counted<S: DocumentStore>(group: &KeyGroup<'_, S>) -> Result<()> {
    let mut txn = group.transaction().await;
    let mut accounts = load_all(&mut txn, &[1, 2]).await?;
    accounts[0].transfers += 1;
    move_ten(&mut txn, &mut accounts)?;
    txn.commit().await
}

/// Asserts that the accounts moved 10 per transfer account 1 counts, and that it counts
/// `sure` or, where one transfer's outcome stayed unknown, one more.
async fn assert_counted<S: DocumentStore>(db: &Mapper<S>, sure: u64, unknown: bool, case: &str) {
    let one: Account = db.load(&1).await.unwrap();
    let two: Account = db.load(&2).await.unwrap();
    let counted = one.transfers;
    let allowed = sure..=sure + u64::from(unknown);
    assert!(
        allowed.contains(&counted),
        "{case}: {counted} transfers counted"
    );
    let moved = 10 * i64::try_from(counted).unwrap();
    let balances = (one.balance, two.balance);
    assert_eq!(balances, (INITIAL - moved, INITIAL + moved), "{case}");
}

/// A later transaction, reading from the handle, cut at its commit by a fault before the
/// commit reaches the store or after it landed (its reply lost), and one dropped there,
/// before or after it landed: the group's next transaction commits, and the one cut
/// applied once or not at all (once where it answered).
#[tokio::test]
async fn a_later_transaction_cut_at_its_commit_leaves_the_next_one_exact() {
    for fault in [Fault::Before, Fault::After] {
        for (_, shaped, label) in cross_group_memory_stores() {
            let case = format!("{label}, failed {fault:?} its commit");
            let store = FaultyStore::new(shaped);
            let db = Mapper::new(store.clone());
            open_accounts(&db, 1..=2).await;
            let group = group_of(&db, &[1, 2]).create().await.unwrap();
            move_counted(&group).await.unwrap();
            store.fail_call(0, fault);
            let cut = move_counted(&group).await;
            assert_eq!(store.faults(), 1, "{case}: the fault struck");
            if let Err(e) = &cut {
                assert!(matches!(e, Error::Backend { .. }), "{case}: {e:?}");
            }
            move_counted(&group).await.unwrap();
            group.dissolve().await.unwrap();
            assert_counted(&db, 2 + u64::from(cut.is_ok()), cut.is_err(), &case).await;
        }
        for (_, shaped, label) in cross_group_memory_stores() {
            let case = format!("{label}, dropped {fault:?} its commit");
            let gate = faults::DropAt {
                inner: shaped,
                calls: Arc::new(AtomicU64::new(u64::MAX / 2)),
                at: 0,
                fault,
                hit: Arc::new(tokio::sync::Notify::new()),
            };
            let db = Mapper::new(gate.clone());
            open_accounts(&db, 1..=2).await;
            let group = group_of(&db, &[1, 2]).create().await.unwrap();
            move_counted(&group).await.unwrap();
            // The next transaction reads from the handle: its first store call is its
            // commit.
            gate.calls.store(0, Ordering::SeqCst);
            tokio::select! {
                outcome = move_counted(&group) => panic!("{case}: not dropped: {outcome:?}"),
                () = gate.hit.notified() => {}
            }
            gate.calls.store(u64::MAX / 2, Ordering::SeqCst);
            move_counted(&group).await.unwrap();
            group.dissolve().await.unwrap();
            assert_counted(&db, 2, true, &case).await;
        }
    }
}

/// Moves 10 from account `from` to account `to` in a transaction of `group`, counting it
/// in `from`'s transfers.
async fn move_counted_between<S: DocumentStore>(
    group: &KeyGroup<'_, S>,
    from: u64,
    to: u64,
) -> Result<()> {
    let mut txn = group.transaction().await;
    let mut accounts = load_all(&mut txn, &[from, to]).await?;
    accounts[0].transfers += 1;
    move_ten(&mut txn, &mut accounts)?;
    txn.commit().await
}

/// Asserts that accounts 3 and 4 saw exactly two transfers of 10 from 3 to 4.
async fn assert_two_moved_from_three<S: DocumentStore>(db: &Mapper<S>, case: &str) {
    let three: Account = db.load(&3).await.unwrap();
    let four: Account = db.load(&4).await.unwrap();
    assert_eq!(three.transfers, 2, "{case}");
    let balances = (three.balance, four.balance);
    assert_eq!(balances, (INITIAL - 20, INITIAL + 20), "{case}");
}

/// In the grouping protocol's steps (a store whose commits stay within one entity group),
/// a later transaction reading from the handle dropped at each of its store calls, before
/// or after the call ran (at a prepare, at the log, at the settling: after a log that
/// landed, the transaction is committed and holds documents it never settled): the next
/// transaction, over two other accounts the handle also holds, and then one over the same
/// two, commit, and every transfer counts once (the cut one at most once).
#[tokio::test]
async fn a_later_transaction_cut_in_its_steps_leaves_the_next_ones_exact() {
    let shaped = || faults::DropAt {
        inner: grouping_memory_store(),
        calls: Arc::new(AtomicU64::new(u64::MAX / 2)),
        at: 0,
        fault: Fault::Before,
        hit: Arc::new(tokio::sync::Notify::new()),
    };
    // How many store calls a transaction that reads from the handle makes.
    let gate = faults::DropAt {
        at: u64::MAX,
        ..shaped()
    };
    let db = Mapper::new(gate.clone());
    open_accounts(&db, 1..=2).await;
    let group = group_of(&db, &[1, 2]).create().await.unwrap();
    move_counted(&group).await.unwrap();
    gate.calls.store(0, Ordering::SeqCst);
    move_counted(&group).await.unwrap();
    let calls = gate.calls.load(Ordering::SeqCst);
    assert!(calls >= 3, "a prepare, a log and a settling: {calls} calls");

    for at in 0..calls {
        for fault in [Fault::Before, Fault::After] {
            let case = format!("dropped {fault:?} call {at} of {calls}");
            let gate = faults::DropAt {
                at,
                fault,
                ..shaped()
            };
            let db = Mapper::new(gate.clone());
            open_accounts(&db, 1..=4).await;
            let group = group_of(&db, &[1, 2, 3, 4]).create().await.unwrap();
            move_counted_between(&group, 1, 2).await.unwrap();
            move_counted_between(&group, 3, 4).await.unwrap();
            gate.calls.store(0, Ordering::SeqCst);
            tokio::select! {
                outcome = move_counted_between(&group, 1, 2) => {
                    panic!("{case}: not dropped: {outcome:?}")
                }
                () = gate.hit.notified() => {}
            }
            gate.calls.store(u64::MAX / 2, Ordering::SeqCst);
            move_counted_between(&group, 3, 4).await.unwrap();
            move_counted_between(&group, 1, 2).await.unwrap();
            group.dissolve().await.unwrap();
            assert_two_moved_from_three(&db, &case).await;
            assert_counted(&db, 2, true, &case).await;
        }
    }
}

/// The same later transaction failed by a fault at each of its store calls, before the
/// call reaches the store or after it ran (its reply lost): it answers, committed or
/// not (or an error where the outcome stayed unknown), and the next transactions, over
/// two other accounts the handle holds and over the same two, commit at their first
/// attempt with every transfer counted once.
#[tokio::test]
async fn a_later_transaction_failed_in_its_steps_leaves_the_next_ones_exact() {
    let shaped = || FaultyStore::new(grouping_memory_store());
    let calls = {
        let store = shaped();
        let db = Mapper::new(store.clone());
        open_accounts(&db, 1..=2).await;
        let group = group_of(&db, &[1, 2]).create().await.unwrap();
        move_counted(&group).await.unwrap();
        let before = store.calls();
        move_counted(&group).await.unwrap();
        store.calls() - before
    };
    for at in 0..calls {
        for fault in [Fault::Before, Fault::After] {
            let store = shaped();
            let db = Mapper::new(store.clone());
            open_accounts(&db, 1..=4).await;
            let group = group_of(&db, &[1, 2, 3, 4]).create().await.unwrap();
            move_counted_between(&group, 1, 2).await.unwrap();
            move_counted_between(&group, 3, 4).await.unwrap();
            store.fail_call(at, fault);
            let cut = move_counted_between(&group, 1, 2).await;
            store.clear();
            let case = format!("failed {fault:?} call {at} of {calls}: {cut:?}");
            move_counted_between(&group, 3, 4).await.unwrap();
            move_counted_between(&group, 1, 2).await.unwrap();
            group.dissolve().await.unwrap();
            assert_two_moved_from_three(&db, &case).await;
            let sure = 2 + u64::from(cut.is_ok());
            let unknown = matches!(cut, Err(Error::Backend { .. }));
            assert_counted(&db, sure, unknown, &case).await;
        }
    }
}

/// Once the group's lease has passed, a later transaction reading from the handle writes
/// nothing: one that saves none and then one that saves changes both fail with
/// `Error::GroupLost` (the first would otherwise answer a copy the store may no longer
/// hold), on every shape of store, and the accounts keep what the committed transaction
/// left. The lease starts short and doubles until the first transaction
/// commits within it, so a slow machine only makes the test take longer.
#[tokio::test]
async fn a_later_transaction_after_the_lease_writes_nothing() {
    for (memory, shaped, label) in memory_stores() {
        let db = Mapper::new(shaped);
        open_accounts(&db, 1..=2).await;
        let mut lease = Duration::from_millis(200);
        let group = loop {
            let group = group_of(&db, &[1, 2]).lease(lease).create().await.unwrap();
            match move_counted(&group).await {
                Ok(()) => break group,
                Err(Error::GroupLost { .. }) if lease < Duration::from_mins(1) => {
                    db.recover_key_groups().await.unwrap();
                    lease *= 2;
                }
                Err(e) => panic!("{label}: {e:?}"),
            }
        };
        faults::after(&memory, group.until_ms()).await;

        let mut txn = group.transaction().await;
        let read = load_all(&mut txn, &[1, 2]).await.unwrap();
        assert_eq!(read[0].balance, INITIAL - 10, "{label}: the handle's copy");
        let checked = txn.commit().await;
        assert!(
            matches!(checked, Err(Error::GroupLost { .. })),
            "{label}: a read after the lease: {checked:?}"
        );
        let moved = move_counted(&group).await;
        assert!(
            matches!(moved, Err(Error::GroupLost { .. })),
            "{label}: a transfer after the lease: {moved:?}"
        );
        drop(group);
        db.recover_key_groups().await.unwrap();
        assert_counted(&db, 1, false, label).await;
    }
}
