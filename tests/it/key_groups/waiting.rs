//! Waiting for members (`KeyGroupBuilder::wait`): a large group passes small ones that
//! keep coming, a one-shot transaction takes its turn, and a fault at any call of a waiter
//! holds nobody up past its lease.

use super::faults::{CONCURRENT_CASES, DropAt, LEASE, after_lease, check_recovered, transfer_ten};
use super::{
    INITIAL, assert_moved, contended, group_of, load_all, load_once, memory_stores, move_ten,
    open_accounts,
};
use autoshard::prelude::*;
use autoshard::store::faulty::{Fault, FaultyStore};
use autoshard_test_support::entities::Account;
use futures::StreamExt;
use rand::{RngExt, SeedableRng};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

/// Small groups that keep coming while a large group waits for all their members: once it
/// has queued, at most the groups alive then commit before it forms, counted in their
/// commits (they stop after `SMALL_LIMIT`, so a starved large group fails the count and
/// the test still ends). On one store of each shape.
#[tokio::test]
async fn a_waiting_large_group_passes_small_groups_that_keep_coming() {
    const ACCOUNTS: u64 = 8;
    const SMALL_CLIENTS: u64 = 4;
    const SMALL_LIMIT: u64 = 20_000;
    for (_, shaped, label) in memory_stores() {
        let db = Mapper::new(shaped);
        open_accounts(&db, 1..=ACCOUNTS).await;
        let commits = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let clients: Vec<_> = (0..SMALL_CLIENTS)
            .map(|c| {
                let (db, commits, stop) = (db.clone(), commits.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(c);
                    while !stop.load(Ordering::SeqCst)
                        && commits.load(Ordering::SeqCst) < SMALL_LIMIT
                    {
                        let a = rng.random_range(1..=ACCOUNTS);
                        let b = a % ACCOUNTS + 1;
                        match group_of(&db, &[a, b]).create().await {
                            Ok(group) => {
                                let mut txn = group.transaction().await;
                                let mut accounts = load_all(&mut txn, &[a, b]).await.unwrap();
                                let amount = accounts[0].balance.min(10);
                                accounts[0].deposit(-amount);
                                accounts[1].deposit(amount);
                                for account in &mut accounts {
                                    txn.save(account).unwrap();
                                }
                                txn.commit().await.unwrap();
                                commits.fetch_add(1, Ordering::SeqCst);
                                group.dissolve().await.unwrap();
                            }
                            Err(e) if contended(&e) => tokio::task::yield_now().await,
                            Err(e) => panic!("{label}: a small group: {e}"),
                        }
                    }
                })
            })
            .collect();
        // The small groups are under way.
        while commits.load(Ordering::SeqCst) < 50 {
            tokio::task::yield_now().await;
        }
        let all: Vec<u64> = (1..=ACCOUNTS).collect();
        let before = commits.load(Ordering::SeqCst);
        let large = group_of(&db, &all)
            .wait(Duration::from_hours(1))
            .create()
            .await;
        let passed = commits.load(Ordering::SeqCst) - before;
        stop.store(true, Ordering::SeqCst);
        let large = large.unwrap_or_else(|e| panic!("{label}: the large group: {e}"));
        let total: i64 = {
            let mut txn = large.transaction().await;
            load_all(&mut txn, &all)
                .await
                .unwrap()
                .iter()
                .map(|a| a.balance)
                .sum()
        };
        large.dissolve().await.unwrap();
        for client in clients {
            client.await.unwrap();
        }
        assert_eq!(total, INITIAL * i64::try_from(ACCOUNTS).unwrap(), "{label}");
        println!("{label}: {passed} small groups committed while the large one waited");
        // Each small client commits at most the group it held when the large one queued,
        // and one it formed between the large group's read and its intents.
        assert!(
            passed <= 2 * SMALL_CLIENTS,
            "{label}: {passed} small groups committed while the large one waited"
        );
    }
}

/// A waiting one-shot transaction whose members a group owns forms its own group once
/// that one is dissolved, and commits, where one that does not wait is refused.
#[tokio::test]
async fn a_waiting_one_shot_transaction_takes_its_turn() {
    for (_, shaped, label) in memory_stores() {
        let db = Mapper::new(shaped);
        open_accounts(&db, 1..=2).await;
        let holder = group_of(&db, &[2]).create().await.unwrap();
        let refused = load_once(&db, &[1, 2]).await;
        assert!(
            matches!(refused, Err(Error::Grouped { .. })),
            "{label}: {refused:?}"
        );
        let waiting = async {
            let mut txn = group_of(&db, &[1, 2])
                .wait(Duration::from_hours(1))
                .once()
                .await?;
            let mut accounts = load_all(&mut txn, &[1, 2]).await?;
            move_ten(&mut txn, &mut accounts)?;
            txn.commit().await
        };
        let (moved, dissolved) = tokio::join!(waiting, holder.dissolve());
        dissolved.unwrap();
        moved.unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_moved(&db, 10, 10, label).await;
        // Its group is gone: every account takes writes.
        db.apply(&2, |a: &mut Account| a.deposit(1)).await.unwrap();
    }
}

/// A waiting one-shot transaction over a member whose one-shot commit lately met a change
/// takes its turn in the queue up front: it forms its group, which holds off other
/// writers until its commit. One over members that met no change reads optimistically
/// and holds nobody off. (On a machine so slow that the commit's conflict is older than
/// half of the second it counts for when the waiting transaction loads, the first check
/// is skipped, not failed.)
#[tokio::test]
async fn a_waiting_one_shot_transaction_over_a_contended_member_takes_its_turn() {
    let (_, shaped, _) = memory_stores().into_iter().next().unwrap();
    let db = Mapper::new(shaped);
    open_accounts(&db, 1..=4).await;
    // A one-shot transfer over accounts 1 and 2 whose commit meets a deposit to 2.
    let mut txn = group_of(&db, &[1, 2]).once().await.unwrap();
    let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
    db.apply(&2, |a: &mut Account| a.deposit(5)).await.unwrap();
    move_ten(&mut txn, &mut accounts).unwrap();
    let conflicted = txn.commit().await;
    let at = std::time::Instant::now();
    assert!(
        matches!(conflicted, Err(Error::Contention { .. })),
        "{conflicted:?}"
    );
    let waiting = |ids: &'static [u64]| group_of(&db, ids).wait(Duration::from_hours(1));

    let mut txn = waiting(&[1, 2]).once().await.unwrap();
    let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
    if at.elapsed() < Duration::from_millis(500) {
        let held = db.apply(&1, |a: &mut Account| a.deposit(1)).await;
        assert!(matches!(held, Err(Error::Grouped { .. })), "{held:?}");
    }
    move_ten(&mut txn, &mut accounts).unwrap();
    txn.commit().await.unwrap();
    assert_moved(&db, 10, 15, "after the queued transfer").await;

    // Accounts 3 and 4 met no change: read optimistically, nobody held off (so the
    // deposit beside it commits, and the transfer meets it at its commit).
    let mut txn = waiting(&[3, 4]).once().await.unwrap();
    let mut accounts = load_all(&mut txn, &[3, 4]).await.unwrap();
    db.apply(&3, |a: &mut Account| a.deposit(1)).await.unwrap();
    accounts[0].deposit(-1);
    accounts[1].deposit(1);
    for account in &mut accounts {
        txn.save(account).unwrap();
    }
    let committed = txn.commit().await;
    assert!(
        matches!(committed, Err(Error::Contention { .. })),
        "{committed:?}"
    );
}

/// An error, and a dropped future, before and after each store call of a waiting transfer
/// while a group owns one of its members (its looks at the members, its intents, then the
/// group it forms or its one commit): the transfer applies once or not at all, and once
/// its lease has passed nothing is owned, every account takes writes, and no intent of it
/// holds off a creator, not even one that does not wait.
#[tokio::test]
async fn a_waiting_transfer_cut_short_at_any_call_holds_nobody_past_its_lease() {
    for shape in 0..3 {
        // The calls of a waiting transfer nothing cuts short.
        let calls = waiting_cut_at(shape, u64::MAX, Cut::Error(Fault::Before)).await;
        // At least a look at the members and the intents while the group owns one, a look
        // once it is gone, and a commit.
        assert!(calls >= 4, "a waiting transfer takes {calls} store calls");
        let cuts = [Fault::Before, Fault::After].map(Cut::Error);
        let drops = [Fault::Before, Fault::After].map(Cut::Drop);
        let cases = (0..calls).flat_map(|n| cuts.into_iter().chain(drops).map(move |c| (n, c)));
        futures::stream::iter(cases)
            .map(|(n, cut)| waiting_cut_at(shape, n, cut))
            .buffer_unordered(CONCURRENT_CASES)
            .collect::<Vec<u64>>()
            .await;
    }
}

/// How a waiting transfer is cut short at one of its store calls.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// The call fails (before or after it runs) and the transfer goes on from the error.
    Error(Fault),
    /// The transfer's future is dropped there (before or after the call runs).
    Drop(Fault),
}

/// One case of [`a_waiting_transfer_cut_short_at_any_call_holds_nobody_past_its_lease`]:
/// the waiting transfer cut short at its call `n`. How many store calls it made.
async fn waiting_cut_at(shape: usize, n: u64, cut: Cut) -> u64 {
    let (memory, shaped, label) = memory_stores().into_iter().nth(shape).unwrap();
    // The group that holds account 2 calls the store directly: the cut strikes the waiter.
    let holders = Mapper::new(shaped.clone());
    open_accounts(&holders, 1..=3).await;
    let holder = group_of(&holders, &[2]).create().await.unwrap();
    let gate = DropAt {
        inner: shaped,
        calls: Arc::new(AtomicU64::new(0)),
        at: u64::MAX,
        fault: Fault::Before,
        hit: Arc::new(tokio::sync::Notify::new()),
    };
    let gate = match cut {
        Cut::Drop(fault) => DropAt {
            at: n,
            fault,
            ..gate
        },
        Cut::Error(_) => gate,
    };
    let store = FaultyStore::new(gate.clone());
    if let Cut::Error(fault) = cut {
        store.fail_call(n, fault);
    }
    let db = Mapper::new(store.clone());
    let mut transfer = Box::pin(transfer_ten(&db, LEASE, Some(Duration::from_mins(1))));
    // The holder dissolves once the waiter sleeps until its next look (it has looked at
    // the members and queued: polled again and again, it calls the store no more), or has
    // ended.
    let (mut outcome, mut seen, mut still) = (None, 0, 0);
    while outcome.is_none() && still < 3 {
        if let Poll::Ready(ended) = futures::poll!(&mut transfer) {
            outcome = Some(ended);
        }
        tokio::task::yield_now().await;
        let calls = gate.calls.load(Ordering::SeqCst);
        (seen, still) = if calls == seen {
            (seen, still + 1)
        } else {
            (calls, 0)
        };
    }
    holder.dissolve().await.unwrap();
    // `None`: dropped.
    if outcome.is_none() {
        outcome = tokio::select! {
            ended = &mut transfer => Some(ended),
            () = gate.hit.notified() => None,
        };
    }
    // (A future left pending holds what it holds, a read other loads would join.)
    drop(transfer);
    let calls = gate
        .calls
        .swap(u64::MAX / 2, Ordering::SeqCst)
        .min(u64::MAX / 2);
    store.clear();
    // Every lease the transfer took began before it ended.
    let ended = memory.now_ms().await.unwrap();
    let case = format!("{label}, waiting, {cut:?} at call {n}: {outcome:?}");
    if let Some(Err(e)) = &outcome {
        assert!(
            matches!(e, Error::Backend { .. } | Error::GroupLost { .. }),
            "{case}"
        );
    }
    after_lease(&memory, ended).await;
    db.recover_key_groups().await.unwrap();
    let known = match &outcome {
        Some(Ok(())) => Some(true),
        Some(Err(Error::GroupLost { .. })) => Some(false),
        _ => None,
    };
    check_recovered(&db, &memory, 3, known, &case).await;
    let group = group_of(&db, &[1, 2, 3])
        .create()
        .await
        .unwrap_or_else(|e| panic!("{case}: a creator held off past the lease: {e}"));
    group.dissolve().await.unwrap();
    calls
}
