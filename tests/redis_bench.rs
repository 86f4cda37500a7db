//! Measurement, not a test (ignored; it asserts nothing about speed): 64 concurrent tasks
//! vote on one question for a few seconds on a standalone Redis started here. Prints
//! commits/s and conflict rate of the naive entity (`Mapper::update`, optimistic
//! read-modify-write of the main document) and of the 10-shard entity (`Mapper::update`
//! = load, vote, save into one random shard), and raw `HINCRBY` on the same server in the
//! same run, with ratios.
//!
//! ```sh
//! cargo test --release --test redis_bench -- --ignored --nocapture
//! ```

mod support;

use autoshard::{Mapper, MetricsSnapshot, RedisOptions, RedisStore, RetryPolicy};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::entities::{NaiveQuestion, Question};
use support::redis::{namespace, Standalone};

const TASKS: usize = 64;
const RUN: Duration = Duration::from_secs(3);

/// Runs `op` in 64 tasks until `RUN` has passed; returns (successes, failures, seconds).
async fn hammer<F, Fut, E>(op: F) -> (u64, u64, f64)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), E>> + Send,
    E: std::fmt::Display,
{
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (op, ok, failed) = (op.clone(), ok.clone(), failed.clone());
            tokio::spawn(async move {
                while start.elapsed() < RUN {
                    match op().await {
                        Ok(()) => ok.fetch_add(1, Ordering::Relaxed),
                        Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    (
        ok.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        secs,
    )
}

#[allow(clippy::cast_precision_loss)]
fn report(label: &str, votes: u64, secs: f64, m: MetricsSnapshot, raw: f64) -> f64 {
    let rate = votes as f64 / secs;
    println!(
        "{label:<28} {rate:>9.0} votes/s  conflict rate {:>5.1}%  attempts {:>7}  \
         commits {:>7}  gave up {:>6}  ratio to HINCRBY {:.4}",
        100.0 * m.conflict_rate(),
        m.attempts,
        m.commits,
        m.failures,
        rate / raw
    );
    rate
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run with --release -- --ignored --nocapture"]
#[allow(clippy::cast_precision_loss)]
async fn votes_on_standalone_redis() {
    let server = Standalone::start();
    let url = server.url();

    // Raw HINCRBY on two multiplexed connections (the store's default pool size).
    let client = redis::Client::open(url.as_str()).unwrap();
    let conns = Arc::new([
        client.get_connection_manager().await.unwrap(),
        client.get_connection_manager().await.unwrap(),
    ]);
    let next = Arc::new(AtomicU64::new(0));
    let (hincr, _, secs) = hammer(move || {
        let mut conn = conns[(next.fetch_add(1, Ordering::Relaxed) % 2) as usize].clone();
        async move {
            redis::cmd("HINCRBY")
                .arg("bench:raw")
                .arg("votes")
                .arg(1)
                .query_async::<i64>(&mut conn)
                .await
                .map(|_| ())
        }
    })
    .await;
    let raw = hincr as f64 / secs;
    println!("{TASKS} tasks, {RUN:?} per variant, standalone redis-server, 2 pooled connections");
    println!("{:<28} {raw:>9.0} ops/s", "raw HINCRBY");

    for (policy, name) in [
        (RetryPolicy::none(), "no retry"),
        (RetryPolicy::default(), "default retry"),
    ] {
        let store =
            RedisStore::connect_with(&url, RedisOptions::default().namespace(namespace("bench")))
                .await
                .unwrap();
        let db = Arc::new(Mapper::new(store).with_retry(policy));
        db.insert(&mut NaiveQuestion {
            id: 1,
            text: "Naive?".into(),
            votes: 0,
        })
        .await
        .unwrap();
        db.insert(&mut Question::new(1, "Sharded?", 0))
            .await
            .unwrap();

        let voter = db.clone();
        let before = db.metrics().snapshot();
        let (saved, _, secs) = hammer(move || {
            let db = voter.clone();
            async move { db.update(&1, |q: &mut NaiveQuestion| q.vote_up()).await }
        })
        .await;
        let m = db.metrics().snapshot().since(&before);
        let naive = report(&format!("naive ({name})"), saved, secs, m, raw);

        let voter = db.clone();
        let before = db.metrics().snapshot();
        let (saved, _, secs) = hammer(move || {
            let db = voter.clone();
            async move { db.update(&1, |q: &mut Question| q.vote_up()).await }
        })
        .await;
        let m = db.metrics().snapshot().since(&before);
        let sharded = report(&format!("10 shards ({name})"), saved, secs, m, raw);
        println!("{:<28} sharded / naive = {:.2}", "", sharded / naive);
    }
}
