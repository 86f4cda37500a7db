//! A Redis Cluster failover under load: 3 masters with one replica each; writers vote
//! on one counter over 8 static shards. Then the replica of the master of shard 0 stops
//! receiving (its link cut, both processes running), the writers go on, the master is
//! killed (SIGKILL), the replica is promoted, and the killed node comes back as a
//! replica. Votes the master acknowledged after the cut exist only on the dead master.
//!
//! With `RedisOptions::wait_for_replicas(1, ..)` no acknowledged vote may be lost and
//! none counted twice: the total equals the votes cast exactly (a vote the replica did
//! not acknowledge failed with an unknown outcome and was sent again). Without it, Redis
//! replicates asynchronously and the votes acknowledged after the cut are gone; the test
//! reports how many, and checks that nothing was counted twice.
//!
//! Votes are saved (each writer keeps its entity across errors, so a vote whose outcome
//! is unknown is sent again under its write id until it is answered), or cast through
//! `update_once` on a `#[shard_fold]` property over 10 shards (each vote sent again under
//! its name until it is answered: a send that finds it applied answers
//! `AlreadyApplied`, which must rest on what the replica holds too). The steps wait for counts (votes
//! answered, saves failed), never for time to pass.

use autoshard::prelude::*;
use autoshard::{Key, layout};
use autoshard_test_support::entities::Question;
use autoshard_test_support::progress::{Tally, WAIT_BOUND, wait_until};
use autoshard_test_support::redis::{Cluster, Standalone, namespace};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(kind = "Counter")]
struct Counter {
    #[id]
    id: u64,
    #[shardable(shards = 8, fold = sum)]
    n: i64,
}

impl Counter {
    #[shard_method]
    fn add(&mut self) {
        self.n += 1;
    }
}

/// How the writers vote.
#[derive(Clone, Copy, PartialEq)]
enum Cast {
    /// `save` of a `fold = sum` counter over 8 shards.
    Saved,
    /// `update_once` on a `#[shard_fold]` property over 10 shards, one name per vote.
    Keyed,
}

/// Casts vote `vote` of writer `writer` through `update_once` until the store answers.
async fn keyed_until_answered(db: &Mapper<RedisStore>, op: &str, tally: &Tally) {
    let deadline = Instant::now() + WAIT_BOUND;
    while let Err(e) = db.update_once(&1, op, Question::vote_up).await {
        tally.fail();
        assert!(Instant::now() < deadline, "no vote went through: {e}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tally.ack();
}

const WRITERS: u64 = 8;
const VOTES: u64 = 150;

/// Saves `counter` until the store answers; a failed save keeps its change and its
/// write id, so sending it again applies it once.
async fn save_until_answered(db: &Mapper<RedisStore>, counter: &mut Counter, tally: &Tally) {
    let deadline = Instant::now() + WAIT_BOUND;
    while let Err(e) = db.save(counter).await {
        tally.fail();
        assert!(Instant::now() < deadline, "no save went through: {e}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tally.ack();
}

/// Votes `WRITERS * VOTES` times while the master of shard 0 dies and its replica takes
/// over; returns the votes cast and the total a load reads afterwards.
async fn votes_through_a_failover(wait_for_replicas: bool, how: Cast) -> (u64, i64) {
    let cluster = Cluster::start_with_replicas();
    let ns = namespace("failover");
    let mut options = RedisOptions::default()
        .namespace(ns.clone())
        .response_timeout(Duration::from_secs(2));
    if wait_for_replicas {
        options = options.wait_for_replicas(1, Duration::from_secs(1));
    }
    let store = RedisStore::connect_cluster_with(&cluster.urls(), options)
        .await
        .unwrap();
    let db = Mapper::new(store);
    db.insert(&mut Counter::new(1, 0)).await.unwrap();
    db.insert(&mut Question::new(1, "?", 0)).await.unwrap();

    let tally = Arc::new(Tally::default());
    // Each writer casts a quarter of its votes, waits at this gate while the replica is
    // cut off, and casts the rest after the cut (however fast the machine is).
    let (open, gate) = tokio::sync::watch::channel(false);
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (db, tally, mut gate) = (db.clone(), tally.clone(), gate.clone());
            tokio::spawn(async move {
                let mut counter: Counter = db.load(&1).await.unwrap();
                for vote in 0..VOTES {
                    if vote == VOTES / 4 {
                        gate.wait_for(|open| *open).await.unwrap();
                    }
                    if how == Cast::Keyed {
                        let op = format!("vote:{writer}:{vote}");
                        keyed_until_answered(&db, &op, &tally).await;
                        continue;
                    }
                    counter.add();
                    save_until_answered(&db, &mut counter, &tally).await;
                }
            })
        })
        .collect();

    // Under load: a quarter of the votes are in when the replica stops receiving.
    wait_until("the writers", || tally.acked() >= WRITERS * (VOTES / 4)).await;
    let (main, property) = match how {
        Cast::Saved => (<Counter as Entity>::key_for(&1), "n"),
        Cast::Keyed => (<Question as Entity>::key_for(&1), "votes"),
    };
    let shard = format!(
        "{ns}:{}",
        Key::encode(&layout::static_shard(&main, property, 0))
    );
    let (cluster, victim, replica) = tokio::task::spawn_blocking(move || {
        let victim = cluster.master_of(&shard);
        let replica = cluster.replica_of(victim);
        cluster.cut_replication(victim, replica);
        (cluster, victim, replica)
    })
    .await
    .unwrap();
    // Votes go on: without waiting for replicas they are acknowledged, and those in the
    // victim's slots exist only there; waiting for a replica, they fail.
    let (cast, failed) = (tally.acked(), tally.failed());
    open.send(true).unwrap();
    wait_until("votes after the cut", || {
        tally.acked() >= cast + 100 || tally.failed() >= failed + WRITERS
    })
    .await;
    let shard = format!(
        "{ns}:{}",
        Key::encode(&layout::static_shard(&main, property, 0))
    );
    let cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        cluster.nodes[victim].kill();
        cluster.wait_for_failover(&shard, victim);
        cluster.restore_replication(replica);
        // Back as a replica of the promoted master, which can then acknowledge writes
        // to a replica again.
        cluster.nodes[victim].restart();
        cluster.wait_for_replicas();
        cluster.wait_until_ok(None);
        cluster
    })
    .await
    .unwrap();
    for writer in writers {
        writer.await.unwrap();
    }
    let cast = tally.acked();
    let deadline = Instant::now() + WAIT_BOUND;
    let total = loop {
        let loaded = match how {
            Cast::Saved => db.load::<Counter>(&1).await.map(|c| c.n),
            Cast::Keyed => db.load::<Question>(&1).await.map(|q| q.votes),
        };
        match loaded {
            Ok(total) => break total,
            Err(e) => assert!(Instant::now() < deadline, "no load went through: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    drop(cluster);
    (cast, total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_loses_no_acknowledged_vote_when_writes_wait_for_a_replica() {
    every_vote_counted_once(Cast::Saved).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_loses_no_acknowledged_keyed_vote_when_writes_wait_for_a_replica() {
    every_vote_counted_once(Cast::Keyed).await;
}

/// Votes through a failover, waiting for a replica: every vote is answered, and counted
/// exactly once.
async fn every_vote_counted_once(how: Cast) {
    let (cast, total) = votes_through_a_failover(true, how).await;
    assert_eq!(cast, WRITERS * VOTES);
    assert_eq!(
        total,
        i64::try_from(cast).unwrap(),
        "every vote counted exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_without_waiting_for_replicas_counts_no_vote_twice() {
    let (cast, total) = votes_through_a_failover(false, Cast::Saved).await;
    let lost = i64::try_from(cast).unwrap() - total;
    println!("without wait_for_replicas: {lost} of {cast} acknowledged votes lost in the failover");
    assert!(lost >= 0, "{} votes counted twice", -lost);
}

/// On a server without a replica, a write waiting for one fails with an unknown outcome
/// (the master applied it); once a replica follows, the entity's next save sends it
/// again under its write id, and it counts once.
///
/// Nothing here depends on the machine's speed: the entity is set up through a store
/// that waits for no replica, the save fails through one that waits 50 ms for a replica
/// the server does not have (so its `WAIT` runs out by construction), and the save again
/// goes through one that waits up to 30 s, time for the replica to synchronise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_no_replica_acknowledged_fails_and_is_applied_once_when_sent_again() {
    let master = Standalone::start();
    let (ns, url) = (namespace("wait"), master.url());
    let connect = |wait: Option<Duration>| {
        let mut options = RedisOptions::default().namespace(ns.clone());
        if let Some(wait) = wait {
            options = options.wait_for_replicas(1, wait);
        }
        RedisStore::connect_with(&url, options)
    };
    let setup = Mapper::new(connect(None).await.unwrap());
    setup.insert(&mut Counter::new(1, 0)).await.unwrap();
    let mut counter: Counter = setup.load(&1).await.unwrap();

    let alone = Mapper::new(connect(Some(Duration::from_millis(50))).await.unwrap());
    counter.add();
    let refused = alone.save(&mut counter).await.unwrap_err();
    assert!(
        matches!(refused, Error::Backend { .. })
            && refused.to_string().contains("0 of the 1 replicas"),
        "{refused}"
    );

    let replica = Standalone::start();
    let port = master.server.port.to_string();
    replica.server.cli(&["replicaof", "127.0.0.1", &port]);
    let followed = Mapper::new(connect(Some(Duration::from_secs(30))).await.unwrap());
    followed.save(&mut counter).await.unwrap();
    assert_eq!(followed.load::<Counter>(&1).await.unwrap().n, 1);
}
