//! A Redis Cluster that grows and shrinks under load: 3 masters, then a fourth added and
//! given its share of the slots (`redis-cli --cluster rebalance`, 5 keys per `MIGRATE`),
//! then all its slots moved off it again, while tasks write through every write path:
//! `apply` of a `fold = sum` property (a merge), load-change-`save` of a `#[shard_fold]`
//! property (compare-and-set), `update_once`, and `save` of a dynamically sharded
//! property. Slots move while keys are written, so scripts meet `ASK` and `TRYAGAIN`
//! (keys of one call split across a migrating slot) and `MOVED` afterwards.
//!
//! Every task finishes (each call runs under a bound far above its deadline, so a call
//! that never returns fails the test instead of hanging it), and every total is exact:
//! each acknowledged change counted once, whatever failed or was sent again on the way.
//! (An `apply` that fails is not sent again: its outcome is unknown, by its contract, so
//! it counts as "maybe" and the total must lie between the sure and the sure plus the
//! maybe; saves and keyed operations are sent again until answered, and count exactly.)
//! The tasks write until both moves are done and then a little more, so they overlap
//! the moves however fast the machine is.

use autoshard::KeyedOutcome;
use autoshard::prelude::*;
use autoshard_test_support::progress::{Tally, WAIT_BOUND};
use autoshard_test_support::redis::{Cluster, namespace};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(kind = "Topic")]
struct Topic {
    #[id]
    id: u64,
    #[shardable(shards = 16, fold = sum)]
    likes: i64,
    #[shardable(neutral = 0, shards = 8)]
    score: i64,
    #[shardable(neutral = 0)]
    views: i64,
}

impl Topic {
    #[shard_method]
    fn like(&mut self) {
        self.likes += 1;
    }

    #[shard_method]
    fn rate(&mut self) {
        self.score += 1;
    }

    #[shard_method]
    fn view(&mut self) {
        self.views += 1;
    }

    #[shard_fold]
    fn fold_score(a: i64, b: i64) -> i64 {
        a + b
    }

    #[shard_fold]
    fn fold_views(a: i64, b: i64) -> i64 {
        a + b
    }
}

const TOPICS: u64 = 12;
const TASKS: u64 = 8;
/// Operations each task runs after both moves are done.
const AFTER: u64 = 40;

/// What the tasks had acknowledged, per topic: likes, scores, views; and the `apply`
/// calls that failed, whose changes may or may not be in.
#[derive(Default)]
struct Acked {
    likes: Vec<AtomicI64>,
    score: Vec<AtomicI64>,
    views: Vec<AtomicI64>,
    maybe_likes: Vec<AtomicI64>,
    maybe_views: Vec<AtomicI64>,
}

/// How long one call may take before the test calls it hung: far above any deadline.
const BOUND: Duration = Duration::from_mins(1);

/// `call`'s answer; fails the test when it does not come within [`BOUND`].
async fn bounded<T>(what: &str, call: impl Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, call)
        .await
        .unwrap_or_else(|elapsed| {
            panic!("{what}: a call did not return within {BOUND:?} ({elapsed})")
        })
}

/// Runs `call` again until it succeeds, each run [`bounded`]. Every value this test
/// stores is well formed, so `Malformed` fails it at once: a key on its way to another
/// master must answer an error to try again, never a verdict on the value.
async fn until_ok<T, F, Fut>(what: &str, tally: &Tally, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = autoshard::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT_BOUND;
    loop {
        match bounded(what, call()).await {
            Ok(value) => return value,
            Err(e @ autoshard::Error::Malformed { .. }) => {
                panic!("{what}: a stored value read as malformed while slots moved: {e}")
            }
            Err(e) => {
                tally.fail();
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{what}: no call went through: {e}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// One task: operations on the topics in turn, until `moved` and `AFTER` more.
async fn writer(
    db: Mapper<RedisStore>,
    task: u64,
    acked: Arc<Acked>,
    tally: Arc<Tally>,
    moved: Arc<AtomicBool>,
) {
    let mut after = 0;
    let mut n: u64 = 0;
    while after < AFTER {
        if moved.load(Ordering::SeqCst) {
            after += 1;
        }
        let id = (task + n) % TOPICS;
        let slot = usize::try_from(id).unwrap();
        match n % 6 {
            0 | 5 => {
                let (change, sure, maybe): (fn(&mut Topic), _, _) = if n.is_multiple_of(6) {
                    (Topic::like, &acked.likes, &acked.maybe_likes)
                } else {
                    (Topic::view, &acked.views, &acked.maybe_views)
                };
                if bounded("apply", db.apply(&id, change)).await.is_ok() {
                    sure[slot].fetch_add(1, Ordering::SeqCst);
                } else {
                    tally.fail();
                    maybe[slot].fetch_add(1, Ordering::SeqCst);
                }
            }
            1 | 3 | 4 => {
                let mut topic: Topic = until_ok("load", &tally, || db.load(&id)).await;
                let counter = match n % 6 {
                    1 => {
                        topic.rate();
                        &acked.score
                    }
                    3 => {
                        topic.view();
                        &acked.views
                    }
                    _ => {
                        topic.like();
                        &acked.likes
                    }
                };
                // The loaded entity keeps its change across errors: saved again, once.
                while bounded("save", db.save(&mut topic)).await.is_err() {
                    tally.fail();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                counter[slot].fetch_add(1, Ordering::SeqCst);
            }
            _ => {
                let op = format!("rate:{task}:{n}");
                let outcome = until_ok("update_once", &tally, || {
                    db.update_once(&id, &op, Topic::rate)
                })
                .await;
                assert!(
                    matches!(
                        outcome,
                        KeyedOutcome::Applied(()) | KeyedOutcome::AlreadyApplied
                    ),
                    "{outcome:?}"
                );
                acked.score[slot].fetch_add(1, Ordering::SeqCst);
            }
        }
        tally.ack();
        n += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_gains_and_loses_a_master_under_load_loses_and_doubles_nothing() {
    let cluster = Cluster::start();
    let store = RedisStore::connect_cluster_with(
        &cluster.urls(),
        RedisOptions::default().namespace(namespace("rebalance")),
    )
    .await
    .unwrap();
    let db = Mapper::new(store);
    for id in 0..TOPICS {
        db.insert(&mut Topic::new(id, 0, 0, 0)).await.unwrap();
    }
    let acked = Arc::new(Acked {
        likes: (0..TOPICS).map(|_| AtomicI64::new(0)).collect(),
        score: (0..TOPICS).map(|_| AtomicI64::new(0)).collect(),
        views: (0..TOPICS).map(|_| AtomicI64::new(0)).collect(),
        maybe_likes: (0..TOPICS).map(|_| AtomicI64::new(0)).collect(),
        maybe_views: (0..TOPICS).map(|_| AtomicI64::new(0)).collect(),
    });
    let tally = Arc::new(Tally::default());
    let moved = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            tokio::spawn(writer(
                db.clone(),
                task,
                acked.clone(),
                tally.clone(),
                moved.clone(),
            ))
        })
        .collect();

    // Under load: the writers are going when the cluster changes.
    autoshard_test_support::progress::wait_until("the writers", || tally.acked() >= 200).await;
    let cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        let new = cluster.add_master();
        cluster.rebalance(None);
        assert!(cluster.slots_of(new) > 0, "the new master took slots");
        cluster.rebalance(Some(new));
        assert_eq!(cluster.slots_of(new), 0, "every slot moved off it again");
        cluster
    })
    .await
    .unwrap();
    moved.store(true, Ordering::SeqCst);
    for task in tasks {
        tokio::time::timeout(WAIT_BOUND, task)
            .await
            .expect("a writer finished")
            .unwrap();
    }
    println!(
        "rebalance under load: {} operations acknowledged, {} failed calls sent again",
        tally.acked(),
        tally.failed()
    );
    let within = |what: &str, id: u64, total: i64, sure: &AtomicI64, maybe: &AtomicI64| {
        let (sure, maybe) = (sure.load(Ordering::SeqCst), maybe.load(Ordering::SeqCst));
        assert!(
            (sure..=sure + maybe).contains(&total),
            "{what} of {id}: {total}, acknowledged {sure}, unknown {maybe}"
        );
    };
    for id in 0..TOPICS {
        let topic: Topic = db.load(&id).await.unwrap();
        let slot = usize::try_from(id).unwrap();
        within(
            "likes",
            id,
            topic.likes,
            &acked.likes[slot],
            &acked.maybe_likes[slot],
        );
        within(
            "views",
            id,
            topic.views,
            &acked.views[slot],
            &acked.maybe_views[slot],
        );
        assert_eq!(
            topic.score,
            acked.score[slot].load(Ordering::SeqCst),
            "score of {id}"
        );
    }
    drop(cluster);
}
