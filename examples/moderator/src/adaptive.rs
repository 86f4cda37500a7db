//! The adaptive mode of `hotspot`: `C` clients vote on one [`AdaptiveQuestion`] as fast
//! as they can for a while, then stop, and the same run compares:
//! - **adaptive**: the question starts at one shard and a [`Maintainer`] adapts its count
//!   ([`POLICY`]) from the mapper's per-entity conflict counters;
//! - **fixed 1, 10, 40**: the count set once, no maintainer.
//!
//! Every vote is its own read and compare-and-set (the mapper's coalescing, shard lanes
//! and shared reads are off), as if each client were its own process: conflicts come
//! from the store, which is what a shard count can remove. Each second is sampled: votes
//! committed, the share of attempts that conflicted, and the question's shard count.

use crate::backend::Backend;
use crate::model::AdaptiveQuestion;
use crate::progress::Progress;
use autoshard::Key;
use autoshard::maintenance::{Adaptive, Maintainer};
use autoshard::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The workload.
#[derive(Clone, Debug)]
pub struct AdaptiveConfig {
    /// Concurrent clients.
    pub clients: usize,
    /// How long the clients vote, per variant.
    pub load: Duration,
    /// How long the adaptive variant is watched after the clients stop.
    pub idle: Duration,
    /// Retry policy of the votes.
    pub retry: RetryPolicy,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        AdaptiveConfig {
            clients: 64,
            load: Duration::from_secs(40),
            idle: Duration::from_secs(10),
            retry: RetryPolicy::default(),
        }
    }
}

/// The maintainer's policy in this benchmark: the library's defaults, with a shorter
/// interval, hold and idle wait, so that a run of a minute shows growth and shrinking.
#[must_use]
pub fn policy() -> Adaptive {
    Adaptive::default()
        .interval(Duration::from_millis(500))
        .hold(Duration::from_secs(2))
        .shrink_after(10)
}

/// A description of [`policy`] for reports.
pub const POLICY: &str = "target 5% conflicts, every 0.5 s, grow after 2 hot intervals, \
                          shrink after 10 cold ones, hold 2 s after a change";

/// One second of one variant.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Sample {
    /// `adaptive`, or `fixed N`.
    pub variant: String,
    /// Seconds since the clients started.
    pub t_s: f64,
    /// Votes committed in this second.
    pub votes_per_sec: f64,
    /// Share of the question's save attempts in this second that conflicted, in %.
    pub conflict_pct: f64,
    /// The question's shard count at the end of this second.
    pub shards: u32,
    /// Whether the clients were voting.
    pub loaded: bool,
}

/// What one variant did, from its samples.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Summary {
    /// The variant.
    pub variant: String,
    /// Votes committed while loaded, per second.
    pub votes_per_sec: f64,
    /// The same over the last quarter of the load.
    pub final_votes_per_sec: f64,
    /// Conflicts in the first second, in %.
    pub first_conflict_pct: f64,
    /// Conflicts over the last quarter of the load, in %.
    pub final_conflict_pct: f64,
    /// The most shards it had.
    pub peak_shards: u32,
    /// Seconds until it first had `peak_shards`.
    pub peak_after_s: f64,
    /// Its count at the end.
    pub end_shards: u32,
    /// Votes that gave up (contention after the retry policy).
    pub failed: u64,
    /// Whether the question's votes equal the votes committed.
    pub total_matches: bool,
}

/// The variants, in the order they run: `None` is adaptive.
const VARIANTS: [Option<u32>; 4] = [None, Some(1), Some(10), Some(40)];

/// Runs every variant; the samples of all and a summary of each.
pub async fn run(
    backend: &Backend,
    namespace: &str,
    config: &AdaptiveConfig,
    progress: Progress,
) -> Result<(Vec<Sample>, Vec<Summary>)> {
    let (mut samples, mut summaries) = (Vec::new(), Vec::new());
    for fixed in VARIANTS {
        let variant = fixed.map_or_else(|| "adaptive".to_owned(), |n| format!("fixed {n}"));
        let watch = config.load
            + if fixed.is_none() {
                config.idle
            } else {
                Duration::ZERO
            };
        let bar = progress.bar(
            watch.as_secs().max(1),
            &format!("{}: {variant}", config.clients),
        );
        let store = backend
            .connect(&format!("{namespace}-{}", variant.replace(' ', "")))
            .await?;
        let (mine, summary) = run_variant(store, &variant, fixed, config, &bar).await?;
        bar.finish_and_clear();
        samples.extend(mine);
        summaries.push(summary);
    }
    Ok((samples, summaries))
}

/// The question every client votes on.
const ID: u64 = 1;

async fn run_variant(
    store: Arc<dyn DocumentStore>,
    variant: &str,
    fixed: Option<u32>,
    config: &AdaptiveConfig,
    bar: &indicatif::ProgressBar,
) -> Result<(Vec<Sample>, Summary)> {
    let db = Mapper::new(store)
        .with_retry(config.retry)
        .with_coalescing(false)
        .with_shard_lanes(false)
        .with_shared_reads(false);
    db.insert(&mut AdaptiveQuestion::new(ID, 0)).await?;
    let maintainer = match fixed {
        Some(shards) => {
            db.reshard::<AdaptiveQuestion>(&ID, shards).await?;
            None
        }
        None => Some(
            Maintainer::<AdaptiveQuestion, _>::new(db.clone())
                .adapt(policy())
                .spawn(),
        ),
    };
    let mut clients = Clients::start(&db, config.clients);
    let key = Key::new(AdaptiveQuestion::KIND, ID.to_string());
    let start = Instant::now();
    let mut samples = Vec::new();
    let (mut last_ok, mut last_counts) = (0, db.metrics().entity(&key).unwrap_or_default());
    let watch = config.load
        + if fixed.is_none() {
            config.idle
        } else {
            Duration::ZERO
        };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut stopped = None;
    while start.elapsed() < watch {
        tick.tick().await;
        let loaded = stopped.is_none();
        if loaded && start.elapsed() >= config.load {
            stopped = Some(clients.stop().await);
        }
        let ok = stopped.map_or_else(|| clients.ok(), |(ok, _)| ok);
        let counts = db.metrics().entity(&key).unwrap_or_default();
        let delta = counts.since(&last_counts);
        #[allow(clippy::cast_precision_loss)]
        samples.push(Sample {
            variant: variant.to_owned(),
            t_s: start.elapsed().as_secs_f64().round(),
            votes_per_sec: (ok - last_ok) as f64,
            conflict_pct: 100.0 * delta.conflict_rate(),
            shards: db.shards::<AdaptiveQuestion>(&ID).await?,
            loaded,
        });
        (last_ok, last_counts) = (ok, counts);
        bar.inc(1);
    }
    let (ok, failed) = match stopped {
        Some(done) => done,
        None => clients.stop().await,
    };
    if let Some(maintainer) = maintainer {
        maintainer.shutdown().await?;
    }
    let votes = db.load::<AdaptiveQuestion>(&ID).await?.votes;
    let summary = summarize(
        variant,
        &samples,
        failed,
        u64::try_from(votes).ok() == Some(ok),
    );
    Ok((samples, summary))
}

fn summarize(variant: &str, samples: &[Sample], failed: u64, total_matches: bool) -> Summary {
    let loaded: Vec<&Sample> = samples.iter().filter(|s| s.loaded).collect();
    let tail = &loaded[loaded.len() - loaded.len().div_ceil(4)..];
    #[allow(clippy::cast_precision_loss)]
    let mean = |of: &[&Sample], f: fn(&Sample) -> f64| {
        of.iter().map(|s| f(s)).sum::<f64>() / of.len().max(1) as f64
    };
    let peak_shards = samples.iter().map(|s| s.shards).max().unwrap_or(0);
    Summary {
        variant: variant.to_owned(),
        votes_per_sec: mean(&loaded, |s| s.votes_per_sec),
        final_votes_per_sec: mean(tail, |s| s.votes_per_sec),
        first_conflict_pct: loaded.first().map_or(0.0, |s| s.conflict_pct),
        final_conflict_pct: mean(tail, |s| s.conflict_pct),
        peak_shards,
        peak_after_s: samples
            .iter()
            .find(|s| s.shards == peak_shards)
            .map_or(0.0, |s| s.t_s),
        end_shards: samples.last().map_or(0, |s| s.shards),
        failed,
        total_matches,
    }
}

/// The voting clients of one variant.
struct Clients {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    tasks: tokio::task::JoinSet<()>,
}

impl Clients {
    fn start(db: &Mapper<Arc<dyn DocumentStore>>, clients: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..clients {
            let (db, stop, ok, failed) = (db.clone(), stop.clone(), ok.clone(), failed.clone());
            tasks.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match db.apply(&ID, AdaptiveQuestion::vote_up).await {
                        Ok(()) => ok.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            tracing::debug!(error = %e, "adaptive: vote failed");
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            });
        }
        Clients {
            stop,
            ok,
            failed,
            tasks,
        }
    }

    fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    /// Stops the clients: votes committed and votes that failed.
    async fn stop(&mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        while self.tasks.join_next().await.is_some() {}
        (self.ok(), self.failed.load(Ordering::Relaxed))
    }
}
