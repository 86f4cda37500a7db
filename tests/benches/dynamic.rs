//! Measurement, not a test (it asserts nothing about speed), on a standalone Redis started
//! here:
//! 1. save throughput of 64 concurrent tasks for a few seconds: a dynamic property (one
//!    insert per save) versus a 10-shard static property (read a random shard, commit,
//!    retry on conflict); each task saves one loaded entity over and over. Then the same
//!    with `Mapper::update` (load + save), the dynamic one with a compactor running.
//! 2. load latency of an entity with 10,000 dynamic shard documents, before and after
//!    compacting them, and how long the compaction took.
//!
//! ```sh
//! cargo bench -p autoshard-integration --bench dynamic
//! ```

use autoshard::compaction::Compactor;
use autoshard::metrics::MetricsSnapshot;
use autoshard::store::{RedisOptions, RedisStore};
use autoshard::{Mapper, RetryPolicy};
use autoshard_test_support::entities::{Counter, Question};
use autoshard_test_support::redis::{Standalone, namespace};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const TASKS: usize = 64;
const RUN: Duration = Duration::from_secs(3);
const SHARDS: u64 = 10_000;

/// Runs `op` in 64 tasks until `RUN` has passed; returns (successes, failures, seconds).
async fn hammer<F, Fut>(op: F) -> (u64, u64, f64)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = autoshard::Result<()>> + Send,
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
    (
        ok.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        start.elapsed().as_secs_f64(),
    )
}

#[allow(clippy::cast_precision_loss)]
fn row(label: &str, (ok, failed, secs): (u64, u64, f64), m: MetricsSnapshot) -> f64 {
    let rate = ok as f64 / secs;
    eprintln!(
        "{label:<34} {rate:>9.0}/s  saved {ok:>7}  failed {failed:>5}  conflict rate {:>5.1}%",
        m.conflict_rate() * 100.0
    );
    rate
}

async fn store(url: &str) -> Arc<RedisStore> {
    let options = RedisOptions::default().namespace(namespace("dynbench"));
    Arc::new(RedisStore::connect_with(url, options).await.unwrap())
}

/// Mean and median of `n` loads of counter `id`, in milliseconds.
#[allow(clippy::cast_precision_loss)]
async fn load_latency(
    db: &Mapper<Arc<RedisStore>>,
    id: u64,
    n: usize,
    expected: i64,
) -> (f64, f64) {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let c: Counter = db.load(&id).await.unwrap();
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(c.hits, expected);
    }
    times.sort_by(f64::total_cmp);
    (times.iter().sum::<f64>() / n as f64, times[n / 2])
}

#[tokio::main]
async fn main() {
    let server = Standalone::start();
    let url = server.url();
    let patient =
        RetryPolicy::exponential(Duration::from_micros(200), Duration::from_millis(20), 50);
    eprintln!("64 tasks x {RUN:?} on one entity, standalone Redis (release build)");

    // 1a. save only: each task holds a loaded entity and saves one change at a time.
    let db = Arc::new(Mapper::new(store(&url).await).with_retry(patient));
    db.insert(&mut Question::new(1, "Static?", 0))
        .await
        .unwrap();
    let loaded: Question = db.load(&1).await.unwrap();
    let (d, l) = (db.clone(), loaded.clone());
    let run = hammer(move || {
        let (db, mut q) = (d.clone(), l.clone());
        async move {
            q.vote_up();
            db.save(&mut q).await
        }
    })
    .await;
    let static_save = row("save, static 10 shards", run, db.metrics().snapshot());

    let db = Arc::new(Mapper::new(store(&url).await).with_retry(patient));
    db.insert(&mut Counter::new(1, 0)).await.unwrap();
    let loaded: Counter = db.load(&1).await.unwrap();
    let (d, l) = (db.clone(), loaded.clone());
    let run = hammer(move || {
        let (db, mut c) = (d.clone(), l.clone());
        async move {
            c.hit();
            db.save(&mut c).await
        }
    })
    .await;
    let dynamic_save = row("save, dynamic", run, db.metrics().snapshot());
    let shards_written = run.0;

    // 1b. update = load + save; the dynamic one with a compactor every 100 ms.
    let db = Arc::new(Mapper::new(store(&url).await).with_retry(patient));
    db.insert(&mut Question::new(2, "Static?", 0))
        .await
        .unwrap();
    let d = db.clone();
    let run = hammer(move || {
        let db = d.clone();
        async move { db.update(&2, |q: &mut Question| q.vote_up()).await }
    })
    .await;
    let static_update = row("update, static 10 shards", run, db.metrics().snapshot());

    let mut dynamic_update = 0.0;
    for (id, interval) in [(2, 100), (4, 10)] {
        let db = Arc::new(Mapper::new(store(&url).await).with_retry(patient));
        db.insert(&mut Counter::new(id, 0)).await.unwrap();
        let compactor =
            Compactor::<Counter, _>::new((*db).clone()).spawn(Duration::from_millis(interval));
        let d = db.clone();
        let run = hammer(move || {
            let db = d.clone();
            async move { db.update(&id, |c: &mut Counter| c.hit()).await }
        })
        .await;
        let compacted = compactor.shutdown().await.unwrap();
        let label = format!("update, dynamic + compactor {interval}ms");
        dynamic_update = row(&label, run, db.metrics().snapshot());
        eprintln!(
            "  compactor: {} sweeps, {} shards folded in {} commits",
            compacted.sweeps, compacted.shards_folded, compacted.commits
        );
        assert_eq!(
            db.load::<Counter>(&id).await.unwrap().hits,
            i64::try_from(run.0).unwrap()
        );
    }
    eprintln!(
        "dynamic / static: save {:.2}x, update (10ms compactor) {:.2}x ({shards_written} shard documents from the save run)",
        dynamic_save / static_save,
        dynamic_update / static_update
    );

    load_before_after_compaction(&url).await;
}

/// Load latency around compacting 10,000 shard documents.
async fn load_before_after_compaction(url: &str) {
    let db = Mapper::new(store(url).await);
    db.insert(&mut Counter::new(3, 0)).await.unwrap();
    let loaded: Counter = db.load(&3).await.unwrap();
    let writers: Vec<_> = (0..TASKS as u64)
        .map(|t| {
            let (db, loaded) = (db.clone(), loaded.clone());
            tokio::spawn(async move {
                for _ in (t..SHARDS).step_by(TASKS) {
                    let mut c = loaded.clone();
                    c.hit();
                    db.save(&mut c).await.unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let total = i64::try_from(SHARDS).unwrap();
    let (mean, median) = load_latency(&db, 3, 20, total).await;
    eprintln!(
        "load, {SHARDS} shard documents:  mean {mean:.2} ms, median {median:.2} ms (20 loads)"
    );
    let start = Instant::now();
    let report = db.compact::<Counter>(&3).await.unwrap();
    eprintln!(
        "compaction: {:.0} ms, {} shards folded in {} commits",
        start.elapsed().as_secs_f64() * 1000.0,
        report.shards_folded,
        report.commits
    );
    let (mean_after, median_after) = load_latency(&db, 3, 200, total).await;
    eprintln!(
        "load, after compaction:         mean {mean_after:.2} ms, median {median_after:.2} ms (200 loads); {:.0}x faster (median)",
        median / median_after
    );
}
