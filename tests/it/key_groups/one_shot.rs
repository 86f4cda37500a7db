//! One-shot transactions: their loads read one snapshot of the store on every shape, and
//! where commits stay within one entity group two of them that each read what the other
//! writes never both commit.

use super::{INITIAL, assert_moved, group_of, load_all, memory_stores, move_ten, open_accounts};
use autoshard::group::GroupTransaction;
use autoshard::prelude::*;
use autoshard::store::DocumentStore;
use autoshard_test_support::entities::{Account, Tips};
use autoshard_test_support::every_store::Backend;
use autoshard_test_support::store::{Gate, Knobs, TestStore};
use std::collections::BTreeMap;

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

/// Loads accounts 1 and 2 in a one-shot transaction and, if the two hold at least 150
/// together, withdraws 60 from account `from` (1 or 2) in it: from 100 each, a serial
/// order lets one withdrawal through and refuses the second (140 left together).
async fn withdrawal_if_covered<S: DocumentStore>(
    db: &Mapper<S>,
    from: usize,
) -> GroupTransaction<'_, '_, S> {
    let mut txn = group_of(db, &[1, 2]).once().await.unwrap();
    let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
    if accounts.iter().map(|a| a.balance).sum::<i64>() >= 150 {
        accounts[from - 1].deposit(-60);
        txn.save(&mut accounts[from - 1]).unwrap();
    }
    txn
}

/// On both shapes of a store whose commits stay within one entity group, two one-shot
/// transactions that each read both accounts and write a different one: both load, then
/// the first one's commit is held at its first write (a store gate) while the second
/// commits whole, then goes on. Its prepare finds nothing changed in the entity group it
/// writes, but its validation finds the account it only read changed: it fails, as in a
/// serial order, and never commits beside the other (the write skew that would leave 80
/// where no serial order leaves less than 140).
#[tokio::test]
async fn one_shot_transactions_that_read_what_the_other_writes_never_both_commit() {
    for snapshot_lookups in [true, false] {
        let gate = Gate::default();
        let knobs = Knobs {
            cross_group_transactions: Some(false),
            snapshot_lookups: Some(snapshot_lookups),
            write_gate: Some(gate.clone()),
            ..Knobs::default()
        };
        let db = Mapper::new(TestStore::new(MemoryStore::new(), knobs));
        open_accounts(&db, 1..=2).await;
        let first = withdrawal_if_covered(&db, 1).await;
        let second = withdrawal_if_covered(&db, 2).await;

        gate.arm();
        let second_whole = async {
            gate.wait_held().await;
            let committed = second.commit().await;
            gate.release();
            committed
        };
        let (first, second) = tokio::join!(first.commit(), second_whole);
        let label = format!("snapshot lookups {snapshot_lookups}: {first:?}, {second:?}");
        second.unwrap();
        assert!(matches!(first, Err(Error::Contention { .. })), "{label}");
        let mut total = 0;
        for id in [1, 2] {
            total += db.load::<Account>(&id).await.unwrap().balance;
        }
        assert_eq!(total, 2 * INITIAL - 60, "{label}");
    }
}

/// The write record of every static shard of accounts 1 and 2: each writer's entry.
pub(super) async fn shard_records(
    store: &dyn DocumentStore,
) -> BTreeMap<(u64, u32), serde_json::Value> {
    let mut records = BTreeMap::new();
    for id in 1..=2 {
        let main = autoshard::Key::new("Account", id.to_string());
        for i in 0..4 {
            let shard = autoshard::layout::static_shard(&main, "balance", i);
            let doc = store.get(&shard).await.unwrap().expect("the shard");
            let record = doc.doc.get(autoshard::store::merge::RECORD).cloned();
            records.insert((id, i), record.unwrap_or_default());
        }
    }
    records
}

/// Writes entries into the write record of every static shard of accounts 1 and 2, from
/// the writers of `db` and of another mapper over `store`: 8 merges of 1 each per account
/// and mapper.
pub(super) async fn record_writes<S: DocumentStore + Clone>(db: &Mapper<S>, store: &S) {
    let other = Mapper::new(store.clone());
    for _ in 0..8 {
        for id in 1..=2 {
            db.apply(&id, |a: &mut Account| a.deposit(1)).await.unwrap();
            other
                .apply(&id, |a: &mut Account| a.deposit(1))
                .await
                .unwrap();
        }
    }
}

/// Checks that every writer's entry of `before` (as [`shard_records`] reads them) is in
/// `after`, at the same sequence number or a later one.
pub(super) fn assert_records_kept(
    before: &BTreeMap<(u64, u32), serde_json::Value>,
    after: &BTreeMap<(u64, u32), serde_json::Value>,
    label: &str,
) {
    for (shard, entries) in before {
        let Some(entries) = entries.as_object() else {
            continue;
        };
        for (writer, entry) in entries {
            let kept = after[shard].get(writer);
            let seq = |e: Option<&serde_json::Value>| e.and_then(|e| e.get(0)?.as_u64());
            assert!(
                seq(kept) >= seq(Some(entry)),
                "{label}: shard {shard:?} lost writer {writer}'s entry {entry} ({kept:?} after)"
            );
        }
    }
}

/// A one-shot commit keeps every entry the write records of the documents it writes
/// held: its loads leave the records on the store and its commit writes the values alone
/// (on every shape: one commit, or the prepare and settling of a two-phase commit), so a
/// merge whose entry was there before is still known as applied after it, and sent again
/// it is not counted twice.
async fn a_one_shot_commit_keeps_the_write_records_it_did_not_read(backend: &Backend, label: &str) {
    let store = backend.store("keygroup_one_shot_records").await;
    let db = Mapper::new(store.clone());
    open_accounts(&db, 1..=2).await;
    record_writes(&db, &store).await;
    let before = shard_records(&*store).await;
    let mut txn = group_of(&db, &[1, 2]).once().await.unwrap();
    let mut accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
    move_ten(&mut txn, &mut accounts).unwrap();
    txn.commit().await.unwrap();
    assert_records_kept(&before, &shard_records(&*store).await, label);
    assert_moved(&db, 10 - 16, 10 + 16, label).await;
}

mod keeps_records {
    autoshard_test_support::every_store!(
        super::a_one_shot_commit_keeps_the_write_records_it_did_not_read
    );
}

/// A one-shot transaction reads the shards of a property the store can fold (`fold =
/// sum`) whole, never folded by the store: it writes one of them back with its change,
/// and a shard read without its value would be written back without what it held. So
/// every tip counts, on every store and shape.
async fn a_one_shot_transaction_keeps_what_store_folded_shards_held(
    backend: &Backend,
    label: &str,
) {
    let store = backend.store("keygroup_one_shot_folds").await;
    let db = Mapper::new(store);
    for id in 1..=2 {
        db.insert(&mut Tips::new(id, 0)).await.unwrap();
        // Enough tips that every shard of the four holds some.
        for _ in 0..40 {
            db.apply(&id, |t: &mut Tips| t.tip()).await.unwrap();
        }
    }
    for _ in 0..4 {
        let mut txn = db
            .key_group()
            .member::<Tips>(&1)
            .member::<Tips>(&2)
            .once()
            .await
            .unwrap();
        let mut tips = txn.load_many::<Tips>(&[1, 2]).await.unwrap();
        for t in &mut tips {
            t.tip();
            txn.save(t).unwrap();
        }
        txn.commit().await.unwrap();
    }
    for id in 1..=2 {
        let tips: Tips = db.load(&id).await.unwrap();
        assert_eq!(tips.total, 44, "{label}: Tips {id}");
    }
}

mod keeps_folded_shards {
    autoshard_test_support::every_store!(
        super::a_one_shot_transaction_keeps_what_store_folded_shards_held
    );
}
