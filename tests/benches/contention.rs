//! Measurement, not a check: the conflict rate of the naive entity versus the 10-shard
//! one under the same concurrent workload on a store with a modelled commit latency.
//! Run with `cargo bench -p autoshard-integration --bench contention` (about a minute).

use autoshard::metrics::MetricsSnapshot;
use autoshard::store::{LatencyStore, MemoryStore};
use autoshard::{Error, Mapper, RetryPolicy};
use autoshard_test_support::entities::{NaiveQuestion, Question};
use std::time::{Duration, Instant};

const TASKS: usize = 64;
const VOTES_PER_TASK: usize = 5;
/// 20 ms per commit per entity group: 50 commits/s/group, 50 times Cloud Datastore's
/// documented 1/s so that a run takes seconds instead of minutes, while one commit still
/// outlasts the gap between a task's read and its commit by orders of magnitude.
const COMMIT_LATENCY: Duration = Duration::from_millis(20);

type Store = LatencyStore<MemoryStore>;

async fn run(sharded: bool, policy: RetryPolicy) -> (MetricsSnapshot, i64, usize, Duration) {
    // Independent clients, as in the paper: no shard lanes.
    let db = Mapper::new(LatencyStore::new(MemoryStore::new(), COMMIT_LATENCY))
        .with_retry(policy)
        .with_shard_lanes(false);
    if sharded {
        db.insert(&mut Question::new(1, "Hot?", 0))
            .await
            .expect("insert");
    } else {
        db.insert(&mut NaiveQuestion {
            id: 1,
            text: "Hot?".into(),
            votes: 0,
        })
        .await
        .expect("insert");
    }
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let db: Mapper<Store> = db.clone();
            tokio::spawn(async move {
                let mut saved = 0;
                for _ in 0..VOTES_PER_TASK {
                    let outcome = if sharded {
                        db.update(&1, |q: &mut Question| q.vote_up()).await
                    } else {
                        db.update(&1, |q: &mut NaiveQuestion| q.vote_up()).await
                    };
                    match outcome {
                        Ok(()) => saved += 1,
                        Err(Error::Contention { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                saved
            })
        })
        .collect();
    let mut saved = 0;
    for task in tasks {
        saved += task.await.expect("task");
    }
    let elapsed = started.elapsed();
    let total = if sharded {
        db.load::<Question>(&1).await.expect("load").votes
    } else {
        db.load::<NaiveQuestion>(&1).await.expect("load").votes
    };
    (db.metrics().snapshot(), total, saved, elapsed)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!(
        "{TASKS} tasks x {VOTES_PER_TASK} votes (update per vote), commit latency {COMMIT_LATENCY:?} per entity group"
    );
    println!(
        "variant           retries        attempts commits conflicts retries failures conflict-rate stored  wall"
    );
    for (label, policy) in [
        ("none", RetryPolicy::none()),
        ("default", RetryPolicy::default()),
    ] {
        for sharded in [false, true] {
            let (m, total, saved, elapsed) = run(sharded, policy).await;
            assert_eq!(
                total,
                i64::try_from(saved).expect("small"),
                "lost or doubled votes"
            );
            println!(
                "{:<17} {:<14} {:>8} {:>7} {:>9} {:>7} {:>8} {:>12.1}% {:>6} {:>5.1}s",
                if sharded { "sharded (10)" } else { "naive" },
                label,
                m.attempts,
                m.commits,
                m.conflicts,
                m.retries,
                m.failures,
                100.0 * m.conflict_rate(),
                total,
                elapsed.as_secs_f64(),
            );
        }
    }
}
