//! Exactly-once writes: saves cut short by timeouts, commits whose replies are lost, and
//! keyed operations run many times, on every store. Each case counts every vote it makes
//! and checks that the stored total is exactly that, printing how many saves were
//! interrupted.

use autoshard::KeyedOutcome;
use autoshard::entity::ShardHooks;
use autoshard::prelude::*;
use autoshard::store::faulty::{Fault, FaultyStore};
use autoshard_test_support::entities::Question;
use autoshard_test_support::postgres::Postgres;
use autoshard_test_support::redis::{Cluster, Standalone, namespace};
use autoshard_test_support::store::{Knobs, TestStore};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// How often saves were interrupted in one run, and how long complete saves took.
#[derive(Default, Debug)]
struct Interruptions {
    timeouts: AtomicU64,
    errors: AtomicU64,
    /// A running mean (1/8 weight per sample) of how long a save that completed took,
    /// in microseconds: the scale the timeouts are drawn on.
    save_micros: AtomicU64,
}

impl Interruptions {
    /// Records how long a save that completed took.
    fn saved_in(&self, took: Duration) {
        let sample = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
        let _ = self
            .save_micros
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |mean| {
                Some(if mean == 0 {
                    sample
                } else {
                    mean - mean / 8 + sample / 8
                })
            });
    }

    /// A timeout for the next save, drawn between 0 and twice the running mean of a
    /// complete save (none until a save has completed), so that about half the saves are
    /// cut short at any point of their run, whatever this machine's and store's speed.
    fn draw_timeout(&self) -> Option<Duration> {
        match self.save_micros.load(Ordering::Relaxed) {
            0 => None,
            mean => Some(Duration::from_micros(rand::random_range(0..=2 * mean))),
        }
    }
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
        let started = Instant::now();
        match tokio::time::timeout(limit, db.save(poll)).await {
            Ok(Ok(())) => return seen.saved_in(started.elapsed()),
            Ok(Err(_)) => seen.errors.fetch_add(1, Ordering::Relaxed),
            Err(_) => seen.timeouts.fetch_add(1, Ordering::Relaxed),
        };
    }
    loop {
        let started = Instant::now();
        match db.save(poll).await {
            Ok(()) => return seen.saved_in(started.elapsed()),
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

/// How much voting a run does: each writer casts at least `votes` votes, and goes on
/// (up to `votes * MAX_ROUNDS`) until the run has seen `until` interruptions.
#[derive(Clone, Copy)]
struct Rounds {
    writers: u64,
    votes: u64,
    until: Until,
}

/// The interruptions a run needs to mean something.
#[derive(Clone, Copy)]
enum Until {
    Timeouts(u64),
    Errors(u64),
}

/// How many times the minimum a writer may vote, and for how long past the minimum, while
/// the run waits for interruptions.
const MAX_ROUNDS: u64 = 10;
const MAX_EXTRA_TIME: Duration = Duration::from_mins(2);

impl Until {
    fn reached(self, seen: &Interruptions) -> bool {
        match self {
            Until::Timeouts(n) => seen.timeouts.load(Ordering::Relaxed) >= n,
            Until::Errors(n) => seen.errors.load(Ordering::Relaxed) >= n,
        }
    }
}

/// `rounds.writers` tasks each vote on poll `id` (inserted at 0), each vote a save of
/// both the static and the dynamic property, interrupted as `limit` and the store say and
/// saved again until stored, while a compactor folds the dynamic shards. Then the stored
/// totals are exactly the votes cast, and the run saw the interruptions it needs.
async fn votes_survive_interruptions(
    db: &Db,
    id: u64,
    rounds: Rounds,
    timeouts: bool,
    label: &str,
) -> Interruptions {
    let seen = Arc::new(Interruptions::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (made, stars) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let compactor = {
        let (db, stop) = (db.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                // Errors are the store's injected faults: the next round goes on.
                let _ = db.compact::<Poll>(&id).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let tasks: Vec<_> = (0..rounds.writers)
        .map(|_| {
            let (db, seen) = (db.clone(), seen.clone());
            let (made, stars) = (made.clone(), stars.clone());
            tokio::spawn(async move {
                let mut poll: Poll = loop {
                    if let Ok(poll) = db.load(&id).await {
                        break poll;
                    }
                };
                let mut n = 0;
                let mut extra_until = None;
                while n < rounds.votes
                    || (n < rounds.votes * MAX_ROUNDS
                        && !rounds.until.reached(&seen)
                        && *extra_until.get_or_insert_with(|| Instant::now() + MAX_EXTRA_TIME)
                            > Instant::now())
                {
                    poll.vote(n);
                    let limit = if timeouts { seen.draw_timeout() } else { None };
                    save_until_stored(&db, &mut poll, limit, &seen).await;
                    made.fetch_add(1, Ordering::Relaxed);
                    stars.fetch_add(n % 2, Ordering::Relaxed);
                    n += 1;
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
    let made = i64::try_from(made.load(Ordering::Relaxed)).unwrap();
    let stars = i64::try_from(stars.load(Ordering::Relaxed)).unwrap();
    let stored: Poll = loop {
        if let Ok(poll) = db.load(&id).await {
            break poll;
        }
    };
    eprintln!(
        "{label}: {made} votes made, stored {} + {} (static, merged and compare-and-set) \
         and {} (dynamic); {} saves timed out (a complete save took {} us on average), \
         {} failed, all saved again",
        stored.votes,
        stored.stars,
        stored.views,
        seen.timeouts.load(Ordering::Relaxed),
        seen.save_micros.load(Ordering::Relaxed),
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
    assert!(
        rounds.until.reached(&seen),
        "{label}: too few interruptions to mean anything after {made} votes: {seen:?}"
    );
    seen
}

/// 16 tasks x at least 100 votes, each save under a timeout drawn between 0 and twice
/// the mean time a complete save takes (measured as the run goes), so that a timeout
/// drops the save's future wherever it is, before, during or after its commit; at least
/// 200 saves are cut short, on a fast idle machine as on a slow busy one.
async fn timed_out_saves_saved_again_count_once(store: Arc<dyn DocumentStore>, label: &str) {
    let db: Db = Mapper::new(store);
    db.insert(&mut Poll::new(1, 0, 0, 0)).await.unwrap();
    let rounds = Rounds {
        writers: 16,
        votes: 100,
        until: Until::Timeouts(200),
    };
    votes_survive_interruptions(&db, 1, rounds, true, label).await;
}

/// 16 tasks x at least 100 votes on a store that fails one call in 8 (until 50 saves
/// failed), after applying it (a lost
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
    let rounds = Rounds {
        writers: 16,
        votes: 100,
        until: Until::Errors(50),
    };
    votes_survive_interruptions(&db, id, rounds, false, label).await;
    faulty.clear();
}

/// The distinct keyed votes of [`keyed_votes_apply_once`], each run by all 64 tasks (63
/// of the runs find it applied). 7, the step of each task's order, is prime to it.
const KEYED_VOTES: u64 = 300;

/// 64 tasks each run the same [`KEYED_VOTES`] keyed votes (in their own order): each is
/// applied exactly once, and exactly one run of each reports it applied. The question has
/// static shards only, so each run's load costs one read however many votes were cast.
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
                for i in 0..KEYED_VOTES {
                    let op = format!("vote:user {}:ballot 4", (i * 7 + t * 131) % KEYED_VOTES);
                    match db.update_once(&4, &op, Question::vote_up).await.unwrap() {
                        KeyedOutcome::Applied(()) => applied.fetch_add(1, Ordering::Relaxed),
                        KeyedOutcome::AlreadyApplied => 0,
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
        "{label}: 64 x {KEYED_VOTES} keyed votes: {} applied, {} stored; {} conflicts",
        applied.load(Ordering::Relaxed),
        stored.votes,
        metrics.conflicts,
    );
    assert_eq!(applied.load(Ordering::Relaxed), KEYED_VOTES, "{label}");
    assert_eq!(stored.votes, i64::try_from(KEYED_VOTES).unwrap(), "{label}");
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
    assert_eq!(again, KeyedOutcome::Applied(()), "{label}");
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
            assert_eq!(
                again,
                KeyedOutcome::AlreadyApplied,
                "{label}: fault at call {at}"
            );
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

/// A title beside sharded votes, for the refusals of changes to unsharded fields.
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

    /// A shard method that also changes the unsharded title.
    #[shard_method]
    fn vote_and_mark(&mut self) {
        self.votes += 1;
        self.title.push('!');
    }

    #[shard_fold]
    fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }
}

/// A keyed operation may not change unsharded fields; nothing is written.
#[tokio::test]
async fn keyed_operation_changing_an_unsharded_field_is_refused() {
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

/// A `#[shard_method]` that also changes an unsharded field: its body runs twice (on the
/// shadows, then on the aggregate), so `apply` and `update_once` refuse it with `Invalid`
/// and write nothing, and a loaded entity saves the field as the method left it, changed
/// once per run.
#[tokio::test]
async fn a_shard_method_changing_an_unsharded_field_is_refused_without_a_load() {
    let db = Mapper::new(MemoryStore::new());
    db.insert(&mut Titled::new(1, "a".into(), 0)).await.unwrap();
    let refused = db.apply(&1, Titled::vote_and_mark).await.unwrap_err();
    assert!(matches!(refused, Error::Invalid(_)), "{refused:?}");
    let refused = db
        .update_once(&1, "mark", Titled::vote_and_mark)
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::Invalid(_)), "{refused:?}");
    let stored: Titled = db.load(&1).await.unwrap();
    assert_eq!(
        (stored.title.as_str(), stored.votes),
        ("a", 0),
        "nothing written"
    );

    let mut loaded = stored;
    loaded.vote_and_mark();
    db.save(&mut loaded).await.unwrap();
    let stored: Titled = db.load(&1).await.unwrap();
    assert_eq!(
        (stored.title.as_str(), stored.votes),
        ("a!!", 1),
        "once per run"
    );
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
    timed_out_saves_saved_again_count_once(memory(knobs), "memory").await;
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
async fn every_case(connect: impl AsyncFn(&str) -> Arc<dyn DocumentStore>, label: &str) {
    timed_out_saves_saved_again_count_once(connect("timeouts").await, label).await;
    let lost = format!("{label}, replies lost");
    lost_replies_saved_again_count_once(connect("lost").await, Fault::After, true, &lost).await;
    keyed_votes_apply_once(connect("keyed").await, label).await;
    keyed_vote_with_lost_reply_applies_once(connect("keyed-lost").await, label).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_standalone() {
    let server = Standalone::start();
    let connect = async |case: &str| standalone(&server, case).await;
    every_case(connect, "standalone").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster() {
    let nodes = Cluster::start();
    let connect = async |case: &str| cluster(&nodes, case).await;
    every_case(connect, "cluster").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let server = Postgres::start();
    let connect = async |case: &str| server.shared_store(case).await;
    every_case(connect, "postgres").await;
}
