//! The leaderboard mode: a read-mostly page. `R` readers each show the leaderboard (the
//! votes of every question, read with [`Mapper::aggregates`]) as fast as they can while
//! `W` writers vote on random questions with [`Mapper::apply`] (half of them through the
//! readers' mapper, half through a mapper of their own, as another process would), for a
//! fixed time, once
//! without a read cache and once with a [`ReadCache`] (each on fresh questions of the
//! same store, in one run):
//! - page views per second and their latency (median and 99th percentile);
//! - votes per second, to show that the cache costs writers nothing;
//! - the largest staleness a reader saw (the age of the oldest confirmed vote a page
//!   missed), sampled on one page in 8, against the cache's bound;
//! - whether every question reads exact once the writers stopped and a bound passed.
//!
//! Each task yields to the scheduler after each page or vote, as a web handler would
//! between requests: a page the cache answers (and a vote on the embedded store) never
//! waits for I/O, and without the yield such tasks would starve the others of the
//! runtime's threads.

use crate::backend::Backend;
use crate::model::Question;
use crate::progress::Progress;
use crate::stats::Latency;
use autoshard::ReadCache;
use autoshard::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The leaderboard workload.
#[derive(Clone, Debug)]
pub struct LeaderboardConfig {
    /// Concurrent readers, each showing the leaderboard in a closed loop.
    pub readers: usize,
    /// Concurrent writers, each voting in a closed loop.
    pub writers: usize,
    /// Questions on the leaderboard.
    pub questions: u64,
    /// How long each variant runs.
    pub duration: Duration,
    /// The cache's staleness bound.
    pub staleness: Duration,
}

impl Default for LeaderboardConfig {
    fn default() -> Self {
        LeaderboardConfig {
            readers: 64,
            writers: 8,
            questions: 16,
            duration: Duration::from_secs(5),
            staleness: Duration::from_millis(100),
        }
    }
}

/// What one variant did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LeaderboardRow {
    /// `uncached` or `cached`.
    pub variant: String,
    /// Leaderboards shown.
    pub pages: u64,
    /// Leaderboards shown per second.
    pub pages_per_sec: f64,
    /// Question reads per second (`pages_per_sec` times the questions on a page).
    pub reads_per_sec: f64,
    /// Latency of one leaderboard.
    pub page: Latency,
    /// Votes confirmed.
    pub votes: u64,
    /// Votes confirmed per second.
    pub votes_per_sec: f64,
    /// Votes that failed.
    pub failed: u64,
    /// The largest staleness seen, in ms (0 when no page missed a confirmed vote).
    pub staleness_ms: f64,
    /// Share of the question reads the cache answered, in % (`None` without a cache).
    pub hit_pct: Option<f64>,
    /// Whether every question read exact after the writers stopped.
    pub exact: bool,
}

/// The variants, in the order they run: whether the mapper has a read cache.
pub const VARIANTS: [(&str, bool); 2] = [("uncached", false), ("cached", true)];

/// Confirmed votes of one question, each with the instant its writer saw it confirmed.
#[derive(Default)]
struct Votes {
    confirmed: Mutex<Vec<Instant>>,
}

impl Votes {
    fn confirmed(&self) -> MutexGuard<'_, Vec<Instant>> {
        self.confirmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// How stale a read of `seen` votes by a load called at `called` is: the age of the
    /// oldest vote confirmed before the call that it missed.
    fn staleness(&self, seen: i64, called: Instant) -> Duration {
        let seen = usize::try_from(seen).unwrap_or(0);
        match self.confirmed().get(seen) {
            Some(&missed) if missed < called => called - missed,
            _ => Duration::ZERO,
        }
    }
}

/// What the readers and writers of one variant share.
struct Run {
    db: Mapper<Arc<dyn DocumentStore>>,
    ids: Vec<u64>,
    votes: Vec<Votes>,
    failed: AtomicU64,
    stop: Instant,
}

/// Runs both variants on `backend`.
pub async fn run(
    backend: &Backend,
    namespace: &str,
    config: &LeaderboardConfig,
    progress: Progress,
) -> Result<Vec<LeaderboardRow>> {
    let store = backend.connect(namespace).await?;
    let mut rows = Vec::new();
    for (v, (name, cached)) in VARIANTS.into_iter().enumerate() {
        let bar = progress.bar(config.duration.as_secs().max(1), name);
        let mut db = Mapper::new(store.clone());
        if cached {
            db = db.with_read_cache(ReadCache::new(config.staleness));
        }
        let first = 1 + config.questions * u64::try_from(v).unwrap_or(0);
        let row = variant(db, name, first, config, &bar).await?;
        bar.finish_and_clear();
        rows.push(row);
    }
    Ok(rows)
}

/// One variant on questions `first..first + questions`.
async fn variant(
    db: Mapper<Arc<dyn DocumentStore>>,
    name: &str,
    first: u64,
    config: &LeaderboardConfig,
    bar: &indicatif::ProgressBar,
) -> Result<LeaderboardRow> {
    let ids: Vec<u64> = (first..first + config.questions.max(1)).collect();
    for &id in &ids {
        let text = format!("Question {id}?");
        db.insert(&mut Question::new(id, text, "moderator".into(), 0))
            .await?;
    }
    let run = Arc::new(Run {
        db,
        votes: ids.iter().map(|_| Votes::default()).collect(),
        ids,
        failed: AtomicU64::new(0),
        stop: Instant::now() + config.duration,
    });
    let started = Instant::now();
    // Every other writer votes through a mapper of its own, as another process would:
    // the readers' cache sees its votes only when it reads the store again.
    let other = Mapper::new(run.db.store().clone());
    let writers: Vec<_> = (0..config.writers)
        .map(|w| {
            let db = if w % 2 == 0 {
                run.db.clone()
            } else {
                other.clone()
            };
            tokio::spawn(write(run.clone(), db))
        })
        .collect();
    let readers: Vec<_> = (0..config.readers)
        .map(|_| tokio::spawn(read(run.clone())))
        .collect();
    let ticker = tick(bar, run.stop);
    let mut times = Vec::new();
    let mut staleness = Duration::ZERO;
    for reader in readers {
        let (t, s) = reader.await.map_err(join)??;
        times.extend(t);
        staleness = staleness.max(s);
    }
    for writer in writers {
        writer.await.map_err(join)?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    ticker.abort();
    let stats = run.db.read_cache().map(ReadCache::stats);
    tokio::time::sleep(config.staleness).await;
    let board: Vec<Option<i64>> = run.db.aggregates::<Question, _>(&run.ids, "votes").await?;
    let counts: Vec<usize> = run.votes.iter().map(|v| v.confirmed().len()).collect();
    let exact = board
        .iter()
        .zip(&counts)
        .all(|(read, &n)| read.and_then(|r| usize::try_from(r).ok()) == Some(n));
    let confirmed: usize = counts.iter().sum();
    let pages = times.len() as u64;
    #[allow(clippy::cast_precision_loss)] // counts are far below 2^52
    let (pages_per_sec, votes_per_sec, questions) = (
        pages as f64 / elapsed,
        confirmed as f64 / elapsed,
        run.ids.len() as f64,
    );
    #[allow(clippy::cast_precision_loss)]
    let hit_pct = stats.map(|s| 100.0 * s.hits as f64 / (s.hits + s.misses).max(1) as f64);
    Ok(LeaderboardRow {
        variant: name.to_owned(),
        pages,
        pages_per_sec,
        reads_per_sec: pages_per_sec * questions,
        page: Latency::of(times),
        votes: confirmed as u64,
        votes_per_sec,
        failed: run.failed.load(Ordering::Relaxed),
        staleness_ms: staleness.as_secs_f64() * 1000.0,
        hit_pct,
        exact,
    })
}

/// A writer: votes on random questions through `db` until the run stops.
async fn write(run: Arc<Run>, db: Mapper<Arc<dyn DocumentStore>>) {
    while Instant::now() < run.stop {
        let q = rand::random_range(0..run.ids.len());
        match db.apply(&run.ids[q], Question::vote_up).await {
            Ok(()) => run.votes[q].confirmed().push(Instant::now()),
            Err(_) => {
                run.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        tokio::task::yield_now().await;
    }
}

/// A reader: shows the leaderboard until the run stops; the time each page took, and the
/// largest staleness seen on one page in 8.
async fn read(run: Arc<Run>) -> Result<(Vec<Duration>, Duration)> {
    let mut times = Vec::new();
    let mut stale = Duration::ZERO;
    while Instant::now() < run.stop {
        let called = Instant::now();
        let board: Vec<Option<i64>> = run.db.aggregates::<Question, _>(&run.ids, "votes").await?;
        times.push(called.elapsed());
        if times.len() % 8 == 0 {
            for (votes, seen) in run.votes.iter().zip(&board) {
                stale = stale.max(votes.staleness(seen.unwrap_or(0), called));
            }
        }
        tokio::task::yield_now().await;
    }
    Ok((times, stale))
}

/// Moves `bar` on once a second until `stop`.
fn tick(bar: &indicatif::ProgressBar, stop: Instant) -> tokio::task::JoinHandle<()> {
    let bar = bar.clone();
    tokio::spawn(async move {
        while Instant::now() < stop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            bar.inc(1);
        }
    })
}

#[allow(clippy::needless_pass_by_value)] // the shape `map_err` takes
fn join(e: tokio::task::JoinError) -> Error {
    Error::backend("a leaderboard task", e.to_string())
}
