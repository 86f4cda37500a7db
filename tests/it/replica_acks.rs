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
//! Nothing here depends on the machine's speed. Each test writes through three stores on
//! the same data: one that waits for no replica (to set up, before the replica stops),
//! one that waits 200 ms (while the replica is stopped, so each `WAIT` after a new write
//! runs out by construction), and one that waits up to 30 s (once the replica goes on,
//! for the sends that must then be acknowledged).

use autoshard::Key;
use autoshard::prelude::*;
use autoshard::store::{
    Commit, Document, DocumentStore, Fold, FoldFound, FoldLookup, Found, Lookup, Merge, Merged,
    Scan, ScanPage, Transaction, Version, Versioned, WriteId,
};
use autoshard::{KeyedOutcome, layout};
use autoshard_test_support::entities::{Account, Counter, Question};
use autoshard_test_support::redis::{Replicated, namespace};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Stores on the master of `pair`, one namespace for all three (module docs).
struct Stores {
    /// Waits for no replica.
    setup: RedisStore,
    /// Waits 200 ms for the replica, with two pooled connections used in turn.
    stopped: RedisStore,
    /// Waits up to 30 s for the replica.
    running: RedisStore,
}

async fn stores_on(pair: &Replicated, case: &str) -> Stores {
    let namespace = namespace(case);
    let url = pair.master.url();
    let connect = |wait: Option<Duration>| {
        let mut options = RedisOptions::default()
            .namespace(namespace.clone())
            .pool_size(2);
        if let Some(wait) = wait {
            options = options.wait_for_replicas(1, wait);
        }
        RedisStore::connect_with(&url, options)
    };
    Stores {
        setup: connect(None).await.unwrap(),
        stopped: connect(Some(Duration::from_millis(200))).await.unwrap(),
        running: connect(Some(Duration::from_secs(30))).await.unwrap(),
    }
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
    let stores = stores_on(&pair, "acks-merge").await;
    let db = Mapper::new(stores.setup.clone());
    db.insert(&mut Votes::new(1, 0)).await.unwrap();
    let store = &stores.stopped;
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
    let answer = stores.running.merge(&merge).await.unwrap();
    assert_eq!(answer, Merged::AlreadyApplied);
    assert_eq!(db.load::<Votes>(&1).await.unwrap().n, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_sent_again_that_finds_its_write_id_waits_for_the_replica() {
    let pair = Replicated::start();
    let stores = stores_on(&pair, "acks-save").await;
    let setup = Mapper::new(stores.setup);
    setup.insert(&mut Question::new(1, "?", 0)).await.unwrap();
    setup.insert(&mut Counter::new(1, 0)).await.unwrap();
    let mut question: Question = setup.load(&1).await.unwrap();
    let mut counter: Counter = setup.load(&1).await.unwrap();
    let db = Mapper::new(stores.stopped);

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
    // A change in doubt is sent again by any mapper, under its write id.
    let db = Mapper::new(stores.running);
    db.save(&mut question).await.unwrap();
    db.save(&mut counter).await.unwrap();
    assert_eq!(db.load::<Question>(&1).await.unwrap().votes, 1);
    assert_eq!(db.load::<Counter>(&1).await.unwrap().hits, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_operation_found_applied_waits_for_the_replica() {
    let pair = Replicated::start();
    let stores = stores_on(&pair, "acks-keyed").await;
    let setup = Mapper::new(stores.setup);
    setup.insert(&mut Question::new(1, "?", 0)).await.unwrap();
    setup.insert(&mut Counter::new(1, 0)).await.unwrap();
    let db = Mapper::new(stores.stopped);

    pair.pause_replica();
    for _ in 0..3 {
        let answer = db.update_once(&1, "vote:17", Question::vote_up).await;
        assert_unacknowledged(answer, "a keyed vote on static shards");
        let answer = db.update_once(&1, "vote:17", Counter::hit).await;
        assert_unacknowledged(answer, "a keyed vote on dynamic shards");
    }

    pair.resume_replica();
    let db = Mapper::new(stores.running);
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

/// The `running` store until `stopped` is set, then the `stopped` one: a key group is
/// formed through one mapper and commits through it, before and while the replica is
/// stopped.
#[derive(Debug)]
struct Switch {
    running: RedisStore,
    stopped: RedisStore,
    replica_stopped: AtomicBool,
}

impl Switch {
    fn now(&self) -> &RedisStore {
        if self.replica_stopped.load(Ordering::SeqCst) {
            &self.stopped
        } else {
            &self.running
        }
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait::async_trait]
impl DocumentStore for Switch {
    async fn get(&self, key: &Key) -> autoshard::Result<Option<Versioned>> {
        self.now().get(key).await
    }
    async fn get_many(&self, keys: &[Key]) -> autoshard::Result<Vec<Option<Versioned>>> {
        self.now().get_many(keys).await
    }
    async fn insert(&self, key: &Key, doc: Document) -> autoshard::Result<Version> {
        self.now().insert(key, doc).await
    }
    async fn put(&self, key: &Key, doc: Document) -> autoshard::Result<Version> {
        self.now().put(key, doc).await
    }
    async fn delete(&self, key: &Key) -> autoshard::Result<bool> {
        self.now().delete(key).await
    }
    async fn scan(&self, scan: &Scan) -> autoshard::Result<ScanPage> {
        self.now().scan(scan).await
    }
    async fn lookup(&self, lookup: &Lookup) -> autoshard::Result<Found> {
        self.now().lookup(lookup).await
    }
    async fn fold_lookup(&self, lookup: &FoldLookup) -> autoshard::Result<FoldFound> {
        self.now().fold_lookup(lookup).await
    }
    async fn commit(&self, txn: &Transaction) -> autoshard::Result<Commit> {
        self.now().commit(txn).await
    }
    async fn commit_versioned(
        &self,
        txn: &Transaction,
    ) -> autoshard::Result<autoshard::store::CommitReply> {
        self.now().commit_versioned(txn).await
    }
    async fn merge(&self, merge: &Merge) -> autoshard::Result<Merged> {
        self.now().merge(merge).await
    }
    async fn make_durable(&self, keys: &[Key]) -> autoshard::Result<()> {
        self.now().make_durable(keys).await
    }
    fn cross_group_transactions(&self) -> bool {
        self.now().cross_group_transactions()
    }
    fn snapshot_lookups(&self) -> bool {
        self.now().snapshot_lookups()
    }
    async fn now_ms(&self) -> autoshard::Result<u64> {
        self.now().now_ms().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_group_commit_found_landed_waits_for_the_replica() {
    let pair = Replicated::start();
    let stores = stores_on(&pair, "acks-group").await;
    let switch = Arc::new(Switch {
        running: stores.running,
        stopped: stores.stopped,
        replica_stopped: AtomicBool::new(false),
    });
    let db = Mapper::new(switch.clone());
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
    switch.replica_stopped.store(true, Ordering::SeqCst);
    let mut txn = group.transaction().await;
    let [mut from, mut to] =
        <[Account; 2]>::try_from(txn.load_many(&[1, 2]).await.unwrap()).expect("two members");
    from.deposit(-3);
    to.deposit(3);
    txn.save(&mut from).unwrap();
    txn.save(&mut to).unwrap();
    // The commit lands on the master, its `WAIT` runs out, and the group document then
    // shows it landed: that read must not stand for the replica's acknowledgement.
    assert_unacknowledged(txn.commit().await, "a key-group transaction");

    pair.resume_replica();
    switch.replica_stopped.store(false, Ordering::SeqCst);
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
