//! Acknowledgements that rest on a read wait for replicas too
//! (`RedisOptions::wait_for_replicas`, and `DocumentStore::make_durable`).
//!
//! A master with one replica, which the test stops (SIGSTOP) once it has acknowledged
//! everything: the master still counts it as a connected replica, so a `WAIT` for what
//! a connection wrote before the stop answers at once, and a `WAIT` for anything newer
//! never does. A write sent then fails with an unknown outcome (its `WAIT` timed out),
//! although the master applied it. Every way of sending it again would find it stored
//! and answer "already applied" from that read; each must fail instead while the replica
//! holds nothing of it, and succeed, counting it once, when the replica goes on.
//!
//! Nothing here waits for time to pass: the replica is stopped, so each `WAIT` after a
//! new write runs out by construction, whatever the machine's speed.

use autoshard::prelude::*;
use autoshard::store::{Fold, Merge, Merged, WriteId};
use autoshard::{layout, KeyedOutcome};
use autoshard_test_support::entities::{Account, Counter, Question};
use autoshard_test_support::redis::{namespace, Replicated};
use std::time::Duration;

#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(kind = "Votes")]
struct Votes {
    #[id]
    id: u64,
    #[shardable(shards = 4, fold = sum)]
    n: i64,
}

/// A store on the master of `pair` whose writes wait for its replica, with two pooled
/// connections used in turn.
async fn store_on(pair: &Replicated, case: &str) -> RedisStore {
    let options = RedisOptions::default()
        .namespace(namespace(case))
        .pool_size(2)
        .wait_for_replicas(1, Duration::from_millis(200));
    RedisStore::connect_with(&pair.master.url(), options)
        .await
        .unwrap()
}

/// Fails the test unless `answer` is the error of a write the replica did not
/// acknowledge.
fn assert_unacknowledged<T: std::fmt::Debug>(answer: autoshard::Result<T>, what: &str) {
    match answer {
        Err(e @ Error::Backend { .. }) if e.to_string().contains("0 of the 1 replicas") => {}
        other => panic!("{what}: acknowledged while the replica holds nothing of it: {other:?}"),
    }
}

/// The send again goes through the other pooled connection, whose own writes the
/// replica acknowledged before it stopped. On Redis 7.2 and later a `WAIT` covers what
/// its connection's last *propagated* command wrote, so only the write `merge.lua` makes
/// when it answers `already` holds this; Redis 7.0 sets that offset after every command,
/// so there the server alone holds it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_already_applied_waits_for_the_replica_on_its_own_connection() {
    let pair = Replicated::start();
    let store = store_on(&pair, "acks-merge").await;
    let db = Mapper::new(store.clone());
    db.insert(&mut Votes::new(1, 0)).await.unwrap();
    let shard = layout::static_shard(&<Votes as Entity>::key_for(&1), "n", 0);
    let write = WriteId {
        writer: "w".into(),
        seq: 1,
        at_ms: 1,
        horizon_ms: 0,
    };
    let merge = Merge::new(shard, "shard_n", Fold::SUM_I64, 1.into(), write);

    pair.pause_replica();
    // On one pooled connection: applied, and its `WAIT` runs out.
    assert_unacknowledged(store.merge(&merge).await, "the first send");
    // On the other, whose own writes the replica acknowledged before it stopped.
    assert_unacknowledged(store.merge(&merge).await, "the send again");
    assert_unacknowledged(store.merge(&merge).await, "the third send");

    pair.resume_replica();
    assert_eq!(store.merge(&merge).await.unwrap(), Merged::AlreadyApplied);
    assert_eq!(db.load::<Votes>(&1).await.unwrap().n, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_sent_again_that_finds_its_write_id_waits_for_the_replica() {
    let pair = Replicated::start();
    let db = Mapper::new(store_on(&pair, "acks-save").await);
    db.insert(&mut Question::new(1, "?", 0)).await.unwrap();
    db.insert(&mut Counter::new(1, 0)).await.unwrap();
    let mut question: Question = db.load(&1).await.unwrap();
    let mut counter: Counter = db.load(&1).await.unwrap();

    pair.pause_replica();
    question.vote_up();
    counter.hit();
    // A static shard by compare-and-set, and a new dynamic shard document.
    assert_unacknowledged(db.save(&mut question).await, "a static save");
    assert_unacknowledged(db.save(&mut counter).await, "a dynamic save");
    for _ in 0..2 {
        assert_unacknowledged(db.save(&mut question).await, "the static save again");
        assert_unacknowledged(db.save(&mut counter).await, "the dynamic save again");
    }

    pair.resume_replica();
    db.save(&mut question).await.unwrap();
    db.save(&mut counter).await.unwrap();
    assert_eq!(db.load::<Question>(&1).await.unwrap().votes, 1);
    assert_eq!(db.load::<Counter>(&1).await.unwrap().hits, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_operation_found_applied_waits_for_the_replica() {
    let pair = Replicated::start();
    let db = Mapper::new(store_on(&pair, "acks-keyed").await);
    db.insert(&mut Question::new(1, "?", 0)).await.unwrap();
    db.insert(&mut Counter::new(1, 0)).await.unwrap();

    pair.pause_replica();
    for _ in 0..3 {
        let answer = db.update_once(&1, "vote:17", Question::vote_up).await;
        assert_unacknowledged(answer, "a keyed vote on static shards");
        let answer = db.update_once(&1, "vote:17", Counter::hit).await;
        assert_unacknowledged(answer, "a keyed vote on dynamic shards");
    }

    pair.resume_replica();
    let again = db
        .update_once(&1, "vote:17", Question::vote_up)
        .await
        .unwrap();
    assert_eq!(again, KeyedOutcome::AlreadyApplied);
    let again = db.update_once(&1, "vote:17", Counter::hit).await.unwrap();
    assert_eq!(again, KeyedOutcome::AlreadyApplied);
    assert_eq!(db.load::<Question>(&1).await.unwrap().votes, 1);
    assert_eq!(db.load::<Counter>(&1).await.unwrap().hits, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_group_commit_found_landed_waits_for_the_replica() {
    let pair = Replicated::start();
    let db = Mapper::new(store_on(&pair, "acks-group").await);
    for id in [1, 2] {
        db.insert(&mut Account::new(id, 0, 10)).await.unwrap();
    }
    let group = db
        .key_group()
        .member::<Account>(&1)
        .member::<Account>(&2)
        .create()
        .await
        .unwrap();

    pair.pause_replica();
    let mut txn = group.transaction().await;
    let [mut from, mut to] =
        <[Account; 2]>::try_from(txn.load_many(&[1, 2]).await.unwrap()).expect("two members");
    from.deposit(-3);
    to.deposit(3);
    txn.save(&mut from).unwrap();
    txn.save(&mut to).unwrap();
    // The commit lands on the master, its `WAIT` runs out, and the group document then
    // shows it landed: that read must not stand for the replica's acknowledgement.
    assert_unacknowledged(txn.commit().await, "a group transaction");

    pair.resume_replica();
    let mut txn = group.transaction().await;
    let balances: Vec<i64> = txn
        .load_many::<Account>(&[1, 2])
        .await
        .unwrap()
        .iter()
        .map(|a| a.balance)
        .collect();
    assert_eq!(balances, [7, 13], "the transfer applied once");
    drop(txn);
    group.dissolve().await.unwrap();
}
