//! The paper's experiment (section 5, Figure 6): votes arrive at a fixed rate, spread
//! uniformly over 16 questions, for a set time; naive, autoshard with the paper's fold
//! function (read and compare-and-set of a shard) and autoshard with a built-in sum (a
//! merge the store applies), each without and with transaction retries.
//!
//! Arrivals are open-loop: vote `i` is due at `start + i / rate` and starts then whether
//! or not earlier votes finished (when the driver falls behind, late votes start at once,
//! a burst, like `MissedTickBehavior::Burst`). Its latency runs from when it was due, so
//! a slow store cannot hide queueing by slowing the arrivals down.
//!
//! This module measures and checks; it prints nothing (see [`crate::report`]).

use crate::backend::Backend;
use crate::model::{FoldFnQuestion, NaiveQuestion, Question, sample_text};
use crate::progress::Progress;
use crate::stats::Latency;
use autoshard::prelude::*;
use rand::RngExt;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How votes are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// [`NaiveQuestion`]: optimistic read-modify-write of the question's document.
    Naive,
    /// [`FoldFnQuestion`], the paper's setting: load (fold 10 shards), `vote_up`, save
    /// into one random shard by reading it and committing the folded value.
    #[serde(rename = "autoshard-fold-fn")]
    AutoshardFoldFn,
    /// [`Question`]: load (fold 10 shards), `vote_up`, save into one random shard (a
    /// merge: the store adds the vote in).
    Autoshard,
}

impl Strategy {
    /// Every strategy, in the order variants and charts show them.
    pub const ALL: [Strategy; 3] = [
        Strategy::Naive,
        Strategy::AutoshardFoldFn,
        Strategy::Autoshard,
    ];

    /// The name variants and charts use.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::AutoshardFoldFn => "autoshard fold-fn",
            Strategy::Autoshard => "autoshard sum",
        }
    }
}

/// One of the six variants of the experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Variant {
    /// How votes are written.
    pub strategy: Strategy,
    /// Whether a conflicting transaction is retried (per [`BenchConfig::retry`]).
    pub retries: bool,
}

impl Variant {
    /// The variants in the paper's order (without retries, then with), every strategy in
    /// each.
    #[must_use]
    pub fn all() -> Vec<Variant> {
        [false, true]
            .into_iter()
            .flat_map(|retries| {
                Strategy::ALL
                    .into_iter()
                    .map(move |strategy| Variant { strategy, retries })
            })
            .collect()
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let strategy = self.strategy.name();
        let retries = if self.retries {
            "w/ Tx retry"
        } else {
            "w/o Tx retry"
        };
        write!(f, "{strategy} {retries}")
    }
}

/// The workload.
#[derive(Clone, Copy, Debug)]
pub struct BenchConfig {
    /// Votes per second, over all questions.
    pub rate: f64,
    /// How long votes arrive.
    pub duration: Duration,
    /// Questions the votes are spread over, uniformly.
    pub questions: u64,
    /// The policy of the "w/ Tx retry" variants ("retry until they succeed", bounded so a
    /// broken store cannot hang the run). The other variants use [`RetryPolicy::none`].
    pub retry: RetryPolicy,
}

/// [`BenchConfig::default`]'s votes per second (the CLI's default too).
pub const DEFAULT_RATE: f64 = 75.0;
/// [`BenchConfig::default`]'s seconds of arrivals per variant.
pub const DEFAULT_SECONDS: f64 = 20.0;
/// [`BenchConfig::default`]'s questions.
pub const DEFAULT_QUESTIONS: u64 = 16;

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            rate: DEFAULT_RATE,
            duration: Duration::from_secs_f64(DEFAULT_SECONDS),
            questions: DEFAULT_QUESTIONS,
            retry: retry_until_success(),
        }
    }
}

/// Retries with jittered exponential backoff from 10 ms up to 200 ms, for up to 1000
/// attempts or 60 s: in practice, until the transaction succeeds.
#[must_use]
pub fn retry_until_success() -> RetryPolicy {
    RetryPolicy::exponential(Duration::from_millis(10), Duration::from_millis(200), 1000)
        .with_max_elapsed(Duration::from_mins(1))
}

/// What one variant did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VariantResult {
    /// Which variant.
    pub variant: Variant,
    /// Variant name as printed.
    pub name: String,
    /// Votes that arrived.
    pub attempted: u64,
    /// Votes that committed.
    pub committed: u64,
    /// Votes that failed (contention after the retry policy gave up, or a store error).
    pub failed: u64,
    /// Of the failed, those that failed with a store error rather than contention.
    pub errors: u64,
    /// `failed / attempted`, in percent.
    pub failed_pct: f64,
    /// Optimistic transactions attempted (first tries and retries).
    pub transactions: u64,
    /// Of those, how many conflicted.
    pub conflicts: u64,
    /// Latency of every vote, committed or not, from its due time to its answer.
    pub latency: Latency,
    /// Committed votes per second of the run (first arrival to last answer).
    pub committed_per_sec: f64,
    /// Sum of the questions' votes read back at the end.
    pub total_found: i64,
    /// What that sum must be: the votes seeded plus `committed`.
    pub total_expected: i64,
    /// The first store error, if any.
    pub first_error: Option<String>,
}

impl VariantResult {
    /// Whether the votes read back are exactly the votes that committed.
    #[must_use]
    pub fn totals_match(&self) -> bool {
        self.total_found == self.total_expected
    }
}

/// The variants whose name (as printed: `"autoshard sum w/ Tx retry"`) contains one of
/// `only`, or is the one after `=`; all of them when `only` is empty. [`Error::Invalid`]
/// when it picks none, naming the variants.
///
/// ```
/// use autoshard_moderator::bench::{Strategy, chosen};
///
/// let picked = chosen(&["naive".to_owned()])?;
/// assert_eq!(picked.len(), 2); // without and with retries
/// assert!(picked.iter().all(|v| v.strategy == Strategy::Naive));
/// assert!(chosen(&["nosuch".to_owned()]).is_err());
/// # Ok::<(), autoshard::Error>(())
/// ```
pub fn chosen(only: &[String]) -> Result<Vec<Variant>> {
    let available = Variant::all()
        .into_iter()
        .map(|v| (v.to_string(), v))
        .collect();
    Ok(crate::only::pick(available, only, "the variants")?
        .into_iter()
        .map(|(_, variant)| variant)
        .collect())
}

/// Runs every variant one after another, each on a fresh store of `backend` (on
/// Redis: a fresh namespace `<namespace>-<n>`).
pub async fn run(
    backend: &Backend,
    namespace: &str,
    config: &BenchConfig,
    progress: Progress,
) -> Result<Vec<VariantResult>> {
    run_variants(backend, namespace, config, &Variant::all(), progress).await
}

/// Runs `variants` one after another, each on a fresh store of `backend` (on Redis: a
/// fresh namespace `<namespace>-<n>`, `n` counting the variants run).
pub async fn run_variants(
    backend: &Backend,
    namespace: &str,
    config: &BenchConfig,
    variants: &[Variant],
    progress: Progress,
) -> Result<Vec<VariantResult>> {
    let mut results = Vec::new();
    for (n, &variant) in variants.iter().enumerate() {
        let store = backend.connect(&format!("{namespace}-{n}")).await?;
        results.push(run_variant(store, variant, config, progress).await?);
    }
    Ok(results)
}

/// Runs one variant on `store` (which must not hold the questions yet).
pub async fn run_variant(
    store: Arc<dyn DocumentStore>,
    variant: Variant,
    config: &BenchConfig,
    progress: Progress,
) -> Result<VariantResult> {
    let policy = if variant.retries {
        config.retry
    } else {
        RetryPolicy::none()
    };
    // Every simulated user is an independent client, as in the paper: no shard lanes,
    // no coalesced saves, no shared reads.
    let db = Mapper::new(store)
        .with_retry(policy)
        .with_shard_lanes(false)
        .with_coalescing(false)
        .with_shared_reads(false);
    for id in 1..=config.questions {
        insert_question(&db, variant.strategy, id).await?;
    }
    let before = db.metrics().snapshot();

    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    // rate * secs is small and positive
    let arrivals = (config.rate * config.duration.as_secs_f64())
        .round()
        .max(0.0) as u64;
    let bar = progress.bar(arrivals, &variant.to_string());
    let start = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..arrivals {
        #[allow(clippy::cast_precision_loss)]
        let due = start + Duration::from_secs_f64(i as f64 / config.rate);
        tokio::time::sleep_until(due).await;
        let id = rand::rng().random_range(1..=config.questions);
        let (db, bar) = (db.clone(), bar.clone());
        tasks.spawn(async move {
            let outcome = vote(&db, variant.strategy, id).await;
            bar.inc(1);
            (outcome, due.elapsed())
        });
    }
    let (mut committed, mut errors, mut latencies, mut first_error) =
        (0u64, 0u64, Vec::new(), None);
    while let Some(done) = tasks.join_next().await {
        let (outcome, latency) = done.map_err(|e| Error::backend("a vote's task failed", e))?;
        latencies.push(latency);
        match outcome {
            Ok(()) => committed += 1,
            Err(Error::Contention { .. }) => {}
            Err(e) => {
                errors += 1;
                first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    let m = db.metrics().snapshot().since(&before);

    let mut total_found = 0;
    for id in 1..=config.questions {
        total_found += votes_of(&db, variant.strategy, id).await?;
    }
    let failed = arrivals - committed;
    #[allow(clippy::cast_precision_loss)]
    Ok(VariantResult {
        variant,
        name: variant.to_string(),
        attempted: arrivals,
        committed,
        failed,
        errors,
        failed_pct: if arrivals == 0 {
            0.0
        } else {
            100.0 * failed as f64 / arrivals as f64
        },
        transactions: m.attempts,
        conflicts: m.conflicts,
        latency: Latency::of(latencies),
        committed_per_sec: committed as f64 / elapsed.as_secs_f64().max(f64::EPSILON),
        total_found,
        total_expected: i64::try_from(committed).unwrap_or(i64::MAX),
        first_error,
    })
}

/// Inserts question `id` with no votes, as the strategy stores it.
pub(crate) async fn insert_question<S: DocumentStore>(
    db: &Mapper<S>,
    strategy: Strategy,
    id: u64,
) -> Result<()> {
    let (text, author) = (sample_text(id - 1), format!("candidate{id}"));
    match strategy {
        Strategy::Naive => {
            db.insert(&mut NaiveQuestion {
                id,
                text,
                author,
                votes: 0,
            })
            .await
        }
        Strategy::AutoshardFoldFn => db.insert(&mut FoldFnQuestion::new(id, text, 0)).await,
        Strategy::Autoshard => db.insert(&mut Question::new(id, text, author, 0)).await,
    }
}

/// One vote on question `id`, as the strategy writes it.
pub(crate) async fn vote<S: DocumentStore>(
    db: &Mapper<S>,
    strategy: Strategy,
    id: u64,
) -> Result<()> {
    match strategy {
        Strategy::Naive => db.update(&id, |q: &mut NaiveQuestion| q.vote_up()).await,
        Strategy::AutoshardFoldFn => db.update(&id, |q: &mut FoldFnQuestion| q.vote_up()).await,
        Strategy::Autoshard => db.update(&id, |q: &mut Question| q.vote_up()).await,
    }
}

/// The votes of question `id` as stored.
pub(crate) async fn votes_of<S: DocumentStore>(
    db: &Mapper<S>,
    strategy: Strategy,
    id: u64,
) -> Result<i64> {
    Ok(match strategy {
        Strategy::Naive => db.load::<NaiveQuestion>(&id).await?.votes,
        Strategy::AutoshardFoldFn => db.load::<FoldFnQuestion>(&id).await?.votes,
        Strategy::Autoshard => db.load::<Question>(&id).await?.votes,
    })
}
