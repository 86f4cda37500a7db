//! Exactly-once writes: saves cut short by timeouts, commits whose replies are lost, and
//! keyed operations run many times, on every store. Each case counts every vote it makes
//! and checks that the stored total is exactly that, printing how many saves were
//! interrupted.

use autoshard::entity::ShardHooks;
use autoshard::prelude::*;
use autoshard::store::faulty::{Fault, FaultyStore};
use autoshard::Once;
use autoshard_test_support::entities::Question;
use autoshard_test_support::postgres::Postgres;
use autoshard_test_support::redis::{namespace, Cluster, Standalone};
use autoshard_test_support::store::{Knobs, TestStore};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A poll: `votes` over 10 static shards with a built-in fold (merged by the store),
/// `stars` over 4 static shards with a fold of its own (read and compare-and-set),
/// `views` sharded dynamically.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
struct Poll {
    #[id]
    id: u64,
    #[shardable(shards = 10, fold = sum)]
    votes: i64,
    #[shardable(neutral = 0, shards = 4)]
    stars: i64,
    #[shardable(neutral = 0)]
    views: i64,
}

impl Poll {
    /// The `n`-th vote of a writer: a vote or a star (each save changes one static
    /// property, so concurrent saves coalesce), and a view.
    #[shard_method]
    fn vote(&mut self, n: u64) {
        if n.is_multiple_of(2) {
            self.votes += 1;
        } else {
            self.stars += 1;
        }
        self.views += 1;
    }

    #[shard_fold]
    fn fold_stars(a: i64, b: i64) -> i64 {
        a + b
    }

    #[shard_fold]
    fn fold_views(a: i64, b: i64) -> i64 {
        a + b
    }
}

type Db = Mapper<Arc<dyn DocumentStore>>;

/// How often saves were interrupted in one run.
#[derive(Default, Debug)]
struct Interruptions {
    timeouts: AtomicU64,
    errors: AtomicU64,
}

/// Saves `poll` until a save succeeds: the first one under `limit` (a timeout drops its
/// future), the next ones without, each error counted and followed by a pause.
async fn save_until_stored(
    db: &Db,
    poll: &mut Poll,
    limit: Option<Duration>,
    seen: &Interruptions,
) {
    if let Some(limit) = limit {
        match tokio::time::timeout(limit, db.save(poll)).await {
            Ok(Ok(())) => return,
            Ok(Err(_)) => seen.errors.fetch_add(1, Ordering::Relaxed),
            Err(_) => seen.timeouts.fetch_add(1, Ordering::Relaxed),
        };
    }
    loop {
        match db.save(poll).await {
            Ok(()) => return,
            Err(err) => {
                assert!(
                    matches!(err, Error::Backend { .. } | Error::Contention { .. }),
                    "{err:?}"
                );
                seen.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
}

/// `writers` tasks each cast `votes` votes on poll `id` (inserted at 0), each vote a save
/// of both the static and the dynamic property, interrupted as `limit` and the store say
/// and saved again until stored, while a compactor folds the dynamic shards. Then the
/// stored totals are exactly the votes cast.
async fn votes_survive_interruptions(
    db: &Db,
    id: u64,
    writers: u64,
    votes: u64,
    limit: impl Fn() -> Option<Duration> + Send + Sync + Clone + 'static,
    label: &str,
) -> Interruptions {
    let seen = Arc::new(Interruptions::default());
    let stop = Arc::new(AtomicBool::new(false));
    let compactor = {
        let (db, stop) = (db.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                // Errors are the store's injected faults: the next round goes on.
                if std::env::var("NOCOMPACT").is_err() {
                    let _ = db.compact::<Poll>(&id).await;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let (db, seen, limit) = (db.clone(), seen.clone(), limit.clone());
            tokio::spawn(async move {
                let mut poll: Poll = loop {
                    if let Ok(poll) = db.load(&id).await {
                        break poll;
                    }
                };
                for n in 0..votes {
                    poll.vote(n);
                    save_until_stored(&db, &mut poll, limit(), &seen).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    compactor.await.unwrap();
    let seen = Arc::into_inner(seen).unwrap();
    let made = i64::try_from(writers * votes).unwrap();
    let stars = i64::try_from(writers * (votes / 2)).unwrap();
    let stored: Poll = loop {
        if let Ok(poll) = db.load(&id).await {
            break poll;
        }
    };
    eprintln!(
        "{label}: {made} votes made, stored {} + {} (static, merged and compare-and-set) \
         and {} (dynamic); {} saves timed out, {} failed, all saved again",
        stored.votes,
        stored.stars,
        stored.views,
        seen.timeouts.load(Ordering::Relaxed),
        seen.errors.load(Ordering::Relaxed),
    );
    assert_eq!(
        stored.votes,
        made - stars,
        "{label}: static property, merged"
    );
    assert_eq!(
        stored.stars, stars,
        "{label}: static property, compare-and-set"
    );
    assert_eq!(stored.views, made, "{label}: dynamic property");
    seen
}

/// 16 tasks x 100 votes, each save under a timeout drawn between 0 and `max`: a timeout
/// drops the save's future wherever it is, before, during or after its commit (most saves
/// time out: on a Redis Cluster 5,500 of 6,400 at 32 x 200, which took five minutes).
async fn timed_out_saves_saved_again_count_once(
    store: Arc<dyn DocumentStore>,
    max: Duration,
    label: &str,
) {
    let db: Db = Mapper::new(store);
    db.insert(&mut Poll::new(1, 0, 0, 0)).await.unwrap();
    let limit = move || {
        Some(Duration::from_micros(rand::random_range(
            0..=max.as_micros() as u64,
        )))
    };
    let seen = votes_survive_interruptions(&db, 1, 16, 100, limit, label).await;
    assert!(
        seen.timeouts.load(Ordering::Relaxed) > 200,
        "{label}: too few timeouts to mean anything: {seen:?}"
    );
}

/// 16 tasks x 100 votes on a store that fails one call in 8, after applying it (a lost
/// reply) or before, as `fault` says; every failed save is saved again.
async fn lost_replies_saved_again_count_once(
    store: Arc<dyn DocumentStore>,
    fault: Fault,
    lanes: bool,
    label: &str,
) {
    let faulty = FaultyStore::new(store);
    let db: Db = Mapper::new(Arc::new(faulty.clone()) as Arc<dyn DocumentStore>)
        .with_shard_lanes(lanes)
        .with_retry(RetryPolicy::exponential(
            Duration::from_micros(100),
            Duration::from_millis(5),
            1000,
        ));
    let id = 2 + u64::from(lanes);
    db.insert(&mut Poll::new(id, 0, 0, 0)).await.unwrap();
    faulty.fail_randomly(8, fault);
    let seen = votes_survive_interruptions(&db, id, 16, 100, || None, label).await;
    faulty.clear();
    assert!(
        seen.errors.load(Ordering::Relaxed) > 50,
        "{label}: too few failures to mean anything: {seen:?}"
    );
}

/// 64 tasks each run the same 1,000 keyed votes (in their own order): each is applied
/// exactly once, and exactly one run of each reports it applied. The question has static
/// shards only, so each run's load costs one read however many votes were cast.
async fn keyed_votes_apply_once(store: Arc<dyn DocumentStore>, label: &str) {
    let db: Db = Mapper::new(store).with_retry(
        RetryPolicy::exponential(
            Duration::from_micros(100),
            Duration::from_millis(20),
            10_000,
        )
        .with_max_elapsed(Duration::from_mins(2)),
    );
    db.insert(&mut Question::new(4, "Ballot?", 0))
        .await
        .unwrap();
    let applied = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..64u64)
        .map(|t| {
            let (db, applied) = (db.clone(), applied.clone());
            tokio::spawn(async move {
                for i in 0..1000u64 {
                    let op = format!("vote:user {}:ballot 4", (i * 7 + t * 131) % 1000);
                    match db.update_once(&4, &op, Question::vote_up).await.unwrap() {
                        Once::Applied(()) => applied.fetch_add(1, Ordering::Relaxed),
                        Once::AlreadyApplied => 0,
                    };
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let stored: Question = db.load(&4).await.unwrap();
    let metrics = db.metrics().snapshot();
    eprintln!(
        "{label}: 64 x 1000 keyed votes: {} applied, {} stored; {} conflicts",
        applied.load(Ordering::Relaxed),
        stored.votes,
        metrics.conflicts,
    );
    assert_eq!(applied.load(Ordering::Relaxed), 1000, "{label}");
    assert_eq!(stored.votes, 1000, "{label}");
    // Deleting the ballot removes the markers too: a new one under the same id counts
    // the same operation again.
    db.delete::<Question>(&4).await.unwrap();
    db.insert(&mut Question::new(4, "Ballot?", 0))
        .await
        .unwrap();
    let again = db
        .update_once(&4, "vote:user 1:ballot 4", Question::vote_up)
        .await
        .unwrap();
    assert_eq!(again, Once::Applied(()), "{label}");
}

/// A keyed operation whose commit reply is lost is run again: applied once.
async fn keyed_vote_with_lost_reply_applies_once(store: Arc<dyn DocumentStore>, label: &str) {
    let faulty = FaultyStore::new(store);
    let db: Db = Mapper::new(Arc::new(faulty.clone()) as Arc<dyn DocumentStore>);
    db.insert(&mut Poll::new(5, 0, 0, 0)).await.unwrap();
    for at in 0..12 {
        let op = format!("vote {at}");
        faulty.fail_call(at, Fault::After);
        let first = db.update_once(&5, &op, |p: &mut Poll| p.vote(0)).await;
        faulty.clear();
        let again = db
            .update_once(&5, &op, |p: &mut Poll| p.vote(0))
            .await
            .unwrap();
        if first.is_ok() {
            assert_eq!(again, Once::AlreadyApplied, "{label}: fault at call {at}");
        }
        let stored: Poll = db.load(&5).await.unwrap();
        let made = i64::try_from(at + 1).unwrap();
        assert_eq!(
            (stored.votes, stored.views),
            (made, made),
            "{label}: fault at call {at}"
        );
    }
}

/// A keyed operation may not change unsharded fields; nothing is written.
#[tokio::test]
async fn keyed_operation_changing_an_unsharded_field_is_refused() {
    #[autoshard::sharded]
    #[derive(Entity, Debug, Clone)]
    struct Titled {
        #[id]
        id: u64,
        title: String,
        #[shardable(neutral = 0, shards = 2)]
        votes: i64,
    }
    impl Titled {
        #[shard_method]
        fn vote(&mut self) {
            self.votes += 1;
        }
        #[shard_fold]
        fn fold_votes(a: i64, b: i64) -> i64 {
            a + b
        }
    }
    let db = Mapper::new(MemoryStore::new());
    db.insert(&mut Titled::new(1, "a".into(), 0)).await.unwrap();
    let err = db
        .update_once(&1, "rename", |t: &mut Titled| {
            t.vote();
            t.title = "b".into();
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    let stored: Titled = db.load(&1).await.unwrap();
    assert_eq!((stored.title.as_str(), stored.votes), ("a", 0));
}

/// A change whose reply was lost and that is saved again after the write window fails
/// with `Expired` and stays pending; within the window it is stored once.
#[tokio::test]
async fn change_sent_longer_ago_than_the_window_is_not_sent_again() {
    let faulty = FaultyStore::new(MemoryStore::new());
    let db = Mapper::new(faulty.clone()).with_write_window(Duration::from_millis(50));
    db.insert(&mut Poll::new(1, 0, 0, 0)).await.unwrap();
    let mut poll: Poll = db.load(&1).await.unwrap();
    poll.vote(0);
    faulty.fail_call(0, Fault::After); // the save's merge: applied, reply lost
    db.save(&mut poll).await.unwrap_err();
    tokio::time::sleep(Duration::from_millis(80)).await;
    let err = db.save(&mut poll).await.unwrap_err();
    assert!(matches!(err, Error::Expired { .. }), "{err:?}");
    assert!(poll.state().unwrap().has_pending());
    assert_eq!(db.load::<Poll>(&1).await.unwrap().votes, 1);

    let db = db.with_write_window(Duration::from_mins(10));
    let mut poll: Poll = db.load(&1).await.unwrap();
    poll.vote(0);
    faulty.fail_call(0, Fault::After);
    db.save(&mut poll).await.unwrap_err();
    db.save(&mut poll).await.unwrap();
    assert!(!poll.state().unwrap().has_pending());
    // The first view was never saved: its save stopped at the expired vote.
    let stored: Poll = db.load(&1).await.unwrap();
    assert_eq!((stored.votes, stored.views), (2, 1));
}

fn memory(knobs: Knobs) -> Arc<dyn DocumentStore> {
    Arc::new(TestStore::new(MemoryStore::new(), knobs))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_timeouts() {
    let knobs = Knobs {
        commit_latency: Some(Duration::from_millis(1)),
        ..Knobs::default()
    };
    timed_out_saves_saved_again_count_once(memory(knobs), Duration::from_millis(30), "memory")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_lost_replies() {
    let store = memory(Knobs::default());
    lost_replies_saved_again_count_once(store.clone(), Fault::After, true, "memory, replies lost")
        .await;
    lost_replies_saved_again_count_once(
        store.clone(),
        Fault::After,
        false,
        "memory, replies lost, no lanes",
    )
    .await;
    let cluster_like = memory(Knobs {
        cross_group_transactions: Some(false),
        ..Knobs::default()
    });
    lost_replies_saved_again_count_once(
        cluster_like,
        Fault::After,
        true,
        "memory, one group per commit",
    )
    .await;
    lost_replies_saved_again_count_once(
        memory(Knobs::default()),
        Fault::Before,
        true,
        "memory, calls failed",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_keyed() {
    keyed_votes_apply_once(memory(Knobs::default()), "memory").await;
    keyed_vote_with_lost_reply_applies_once(memory(Knobs::default()), "memory").await;
    let cluster_like = memory(Knobs {
        cross_group_transactions: Some(false),
        ..Knobs::default()
    });
    keyed_vote_with_lost_reply_applies_once(cluster_like, "memory, one group per commit").await;
}

async fn standalone(server: &Standalone, case: &str) -> Arc<dyn DocumentStore> {
    let options = RedisOptions::default().namespace(namespace(case));
    Arc::new(
        RedisStore::connect_with(&server.url(), options)
            .await
            .unwrap(),
    )
}

async fn cluster(cluster: &Cluster, case: &str) -> Arc<dyn DocumentStore> {
    let options = RedisOptions::default().namespace(namespace(case));
    Arc::new(
        RedisStore::connect_cluster_with(&cluster.urls(), options)
            .await
            .unwrap(),
    )
}

/// Every case on one server (Redis or PostgreSQL); `connect` opens a store in a fresh
/// namespace or schema.
async fn every_case(
    connect: impl AsyncFn(&str) -> Arc<dyn DocumentStore>,
    max_timeout: Duration,
    label: &str,
) {
    timed_out_saves_saved_again_count_once(connect("timeouts").await, max_timeout, label).await;
    let lost = format!("{label}, replies lost");
    lost_replies_saved_again_count_once(connect("lost").await, Fault::After, true, &lost).await;
    keyed_votes_apply_once(connect("keyed").await, label).await;
    keyed_vote_with_lost_reply_applies_once(connect("keyed-lost").await, label).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_standalone() {
    let server = Standalone::start();
    let connect = async |case: &str| standalone(&server, case).await;
    every_case(connect, Duration::from_millis(80), "standalone").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster() {
    let nodes = Cluster::start();
    let connect = async |case: &str| cluster(&nodes, case).await;
    every_case(connect, Duration::from_millis(120), "cluster").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let server = Postgres::start();
    let connect = async |case: &str| server.shared_store(case).await;
    every_case(connect, Duration::from_millis(80), "postgres").await;
}
