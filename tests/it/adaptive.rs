//! Adaptive shard counts (`autoshard::maintenance`), on the memory store, a standalone
//! Redis and a 3-node Redis Cluster started here, each behind a store latency (a
//! millisecond per commit, half of one per read) so that every read-and-compare-and-set
//! window is at least that wide: the conflicts the policy reacts to come from the test's
//! construction, not from how fast this machine or its loopback is. One question starts
//! at one shard and 64 writers vote on it, each pausing 10 to 29 ms between votes, through
//! a mapper whose saves neither coalesce nor queue in lanes (every vote is its own read
//! and compare-and-set, as from 64 processes):
//! - the count grows while the conflict rate is above the target, then holds: it never
//!   goes down while the writers write, and changes at most once more over 10 s;
//! - when the writers stop, it shrinks back to the annotation's `min`, and the retired
//!   shards are drained;
//! - every vote that reported success is counted once, and no other.

use autoshard::Key;
use autoshard::maintenance::{Adaptive, Maintainer};
use autoshard::prelude::*;
use autoshard::store::latency::LatencyStore;
use autoshard_test_support::redis::{Cluster, Standalone, namespace};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A question whose votes fold through read and compare-and-set (a `#[shard_fold]`
/// function), so that concurrent saves of one shard conflict.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(kind = "Adaptive")]
struct Question {
    #[id]
    id: u64,
    #[shardable(neutral = 0, shards = 1, min = 1, max = 64)]
    votes: i64,
}

impl Question {
    #[shard_method]
    fn vote(&mut self) {
        self.votes += 1;
    }

    #[shard_fold]
    fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }
}

const WRITERS: usize = 64;
const TARGET: f64 = 0.2;
const STEADY: Duration = Duration::from_secs(10);
/// Bounds for a broken run, far above what a run needs (a few seconds each): the loops
/// below end on an event, not on time passing.
const GROWTH_BOUND: Duration = Duration::from_mins(2);
const SHRINK_BOUND: Duration = Duration::from_mins(1);

/// `store` behind the latency that makes each vote's read-and-compare-and-set window at
/// least 1.5 ms wide.
fn with_latency<S: DocumentStore>(store: S) -> LatencyStore<S> {
    LatencyStore::new(store, Duration::from_millis(1)).with_read_latency(Duration::from_micros(500))
}

/// The conflict rate of the question's saves over the last `over`.
async fn conflict_rate<S: DocumentStore>(db: &Mapper<S>, over: Duration) -> f64 {
    let key = Key::new("Adaptive", "1");
    let before = db.metrics().entity(&key).unwrap_or_default();
    tokio::time::sleep(over).await;
    db.metrics()
        .entity(&key)
        .unwrap_or_default()
        .since(&before)
        .conflict_rate()
}

/// The 64 voting tasks.
struct Writers {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    tasks: tokio::task::JoinSet<()>,
}

impl Writers {
    fn start<S: DocumentStore + Clone + 'static>(db: &Mapper<S>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..WRITERS {
            let (db, stop, ok, failed) = (db.clone(), stop.clone(), ok.clone(), failed.clone());
            // 10 to 29 ms between votes, so that the writers do not move in step.
            let pause = Duration::from_millis(10 + (i as u64 * 7) % 20);
            tasks.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match db.update(&1, Question::vote).await {
                        Ok(()) => ok.fetch_add(1, Ordering::Relaxed),
                        Err(Error::Contention { .. }) => failed.fetch_add(1, Ordering::Relaxed),
                        Err(e) => panic!("a vote failed: {e}"),
                    };
                    tokio::time::sleep(pause).await;
                }
            });
        }
        Writers {
            stop,
            ok,
            failed,
            tasks,
        }
    }

    /// Stops the writers: the votes that succeeded, and those that gave up.
    async fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        while let Some(done) = self.tasks.join_next().await {
            done.unwrap();
        }
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

async fn grows_holds_and_shrinks_back<S: DocumentStore + Clone + 'static>(store: S, label: &str) {
    let db = Mapper::new(store)
        .with_coalescing(false)
        .with_shard_lanes(false)
        .with_shared_reads(false)
        .with_write_window(Duration::from_secs(2));
    db.insert(&mut Question::new(1, 0)).await.unwrap();
    let policy = Adaptive::default()
        .target(TARGET)
        .interval(Duration::from_millis(250))
        .grow_after(2)
        .shrink_after(8)
        .hold(Duration::from_secs(1));
    let maintainer = Maintainer::<Question, _>::new(db.clone())
        .adapt(policy)
        .spawn();

    let writers = Writers::start(&db);

    // Growth: until the conflict rate is under the target (or the count at its max).
    let start = Instant::now();
    let rate_at_one = conflict_rate(&db, Duration::from_millis(500)).await;
    let reached = loop {
        let shards = db.shards::<Question>(&1).await.unwrap();
        let rate = conflict_rate(&db, Duration::from_secs(1)).await;
        if shards > 1 && (rate < TARGET || shards == 64) {
            break (shards, start.elapsed(), rate);
        }
        assert!(
            start.elapsed() < GROWTH_BOUND,
            "{label}: still {shards} shards at {rate:.2} conflicts after {GROWTH_BOUND:?}"
        );
    };
    // Steady load: the count never goes down, and settles.
    let mut counts = vec![reached.0];
    let steady = Instant::now();
    while steady.elapsed() < STEADY {
        tokio::time::sleep(Duration::from_millis(500)).await;
        counts.push(db.shards::<Question>(&1).await.unwrap());
    }
    let rate_steady = conflict_rate(&db, Duration::from_secs(1)).await;
    assert!(
        counts.windows(2).all(|w| w[0] <= w[1]),
        "{label}: the count went down under load: {counts:?}"
    );
    let changes = counts.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        changes <= 1,
        "{label}: the count kept changing under load: {counts:?}"
    );

    // The writers stop: back to `min`, and exact.
    let (total, gave_up) = writers.stop().await;
    let idle = Instant::now();
    let shrunk = loop {
        let shards = db.shards::<Question>(&1).await.unwrap();
        if shards == 1 {
            break idle.elapsed();
        }
        assert!(
            idle.elapsed() < SHRINK_BOUND,
            "{label}: still {shards} shards {SHRINK_BOUND:?} after the writers stopped"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let loaded = db.load::<Question>(&1).await.unwrap().votes;
    assert_eq!(
        u64::try_from(loaded).ok(),
        Some(total),
        "{label}: votes counted"
    );
    // The retired shards are deleted once the write window (2 s, kept a quarter longer)
    // has passed since their seal. The count reads 1 as soon as the shrink recorded it,
    // while the shrink may still be sealing the retired shards: a drain seals every one
    // not sealed yet, so that the 3 s sleep after it outlasts the window on any machine.
    db.drain::<Question>(&1).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let report = maintainer.shutdown().await.unwrap();
    assert_eq!(db.drain::<Question>(&1).await.unwrap(), 0, "{label}");
    assert_eq!(
        db.load::<Question>(&1).await.unwrap().votes,
        loaded,
        "{label}: after the drain"
    );
    println!(
        "{label}: 1 shard at {:.0}% conflicts; {} shards after {:.1} s at {:.0}%; over 10 s: \
         {counts:?}, {:.0}% at the end; back to 1 shard {:.1} s after the writers stopped; \
         {total} votes ({} gave up), {} grows, {} shrinks",
        100.0 * rate_at_one,
        reached.0,
        reached.1.as_secs_f64(),
        100.0 * reached.2,
        100.0 * rate_steady,
        shrunk.as_secs_f64(),
        gave_up,
        report.grown,
        report.shrunk,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory() {
    grows_holds_and_shrinks_back(with_latency(MemoryStore::new()), "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_standalone() {
    let server = Standalone::start();
    let options = RedisOptions::default().namespace(namespace("adaptive"));
    let store = RedisStore::connect_with(&server.url(), options)
        .await
        .unwrap();
    grows_holds_and_shrinks_back(Arc::new(with_latency(store)), "standalone").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster() {
    let cluster = Cluster::start();
    let options = RedisOptions::default().namespace(namespace("adaptive"));
    let store = RedisStore::connect_cluster_with(&cluster.urls(), options)
        .await
        .unwrap();
    grows_holds_and_shrinks_back(Arc::new(with_latency(store)), "cluster").await;
}
