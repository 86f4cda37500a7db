//! The voting app: seed questions, let simulated users vote and respond concurrently,
//! and read back the leaderboard, checked against what the users were told committed.
//!
//! It uses only the public API of `autoshard`, as an application would. It prints nothing;
//! the binary renders the [`AppOutcome`].

use crate::model::{Question, Response, sample_text};
use crate::progress::Progress;
use crate::responses;
use autoshard::prelude::*;
use rand::distr::Distribution;
use rand::distr::weighted::WeightedIndex;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What the simulation does.
#[derive(Clone, Copy, Debug)]
pub struct AppConfig {
    /// Questions seeded (ids `1..=questions`).
    pub questions: u64,
    /// Simulated users, each a concurrent task.
    pub users: u64,
    /// Votes each user casts, each on a random question (lower ids are more popular).
    pub votes_per_user: u64,
    /// Responses each user writes, each to a random question.
    pub responses_per_user: u64,
    /// Retries of a vote's shard transaction.
    pub retry: RetryPolicy,
}

/// [`AppConfig::default`]'s questions (the CLI's default too).
pub const DEFAULT_QUESTIONS: u64 = 16;
/// [`AppConfig::default`]'s users.
pub const DEFAULT_USERS: u64 = 300;
/// [`AppConfig::default`]'s votes per user.
pub const DEFAULT_VOTES_PER_USER: u64 = 20;
/// [`AppConfig::default`]'s responses per user.
pub const DEFAULT_RESPONSES_PER_USER: u64 = 1;

impl Default for AppConfig {
    fn default() -> Self {
        AppConfig {
            questions: DEFAULT_QUESTIONS,
            users: DEFAULT_USERS,
            votes_per_user: DEFAULT_VOTES_PER_USER,
            responses_per_user: DEFAULT_RESPONSES_PER_USER,
            retry: RetryPolicy::default(),
        }
    }
}

/// One line of the leaderboard, with what it should say.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Standing {
    /// The question's id.
    pub id: u64,
    /// Its text.
    pub text: String,
    /// Votes read back from the store (the fold of its shards).
    pub votes: i64,
    /// Votes it was seeded with plus the votes the users saw commit.
    pub expected_votes: i64,
    /// Responses read back from the store.
    pub responses: u64,
    /// Responses the users saw commit.
    pub expected_responses: u64,
}

impl Standing {
    /// Whether what the store holds is exactly what committed.
    #[must_use]
    pub fn is_exact(&self) -> bool {
        self.votes == self.expected_votes && self.responses == self.expected_responses
    }
}

/// What a run of the app did and what the store holds afterwards.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AppOutcome {
    /// Questions by votes, most first.
    pub leaderboard: Vec<Standing>,
    /// Votes that committed.
    pub votes_committed: u64,
    /// Votes that gave up after the retry policy ran out (nothing of them is stored).
    pub votes_failed: u64,
    /// Responses that committed.
    pub responses_committed: u64,
    /// Responses that gave up after the retry policy ran out (nothing of them is stored).
    pub responses_failed: u64,
    /// Wall time of the voting and responding.
    pub elapsed: Duration,
}

impl AppOutcome {
    /// Whether every line of the leaderboard holds exactly what committed.
    #[must_use]
    pub fn is_exact(&self) -> bool {
        self.leaderboard.iter().all(Standing::is_exact)
    }
}

/// Seeds `config.questions` questions on `store`, runs the users, reads the leaderboard.
///
/// A vote or response that fails with [`Error::Contention`] is counted as failed (the runtime
/// guarantees nothing of it was stored); any other store error stops the run.
///
/// ```
/// use autoshard::prelude::*;
/// use autoshard_moderator::app::{run, AppConfig};
/// use autoshard_moderator::progress::Progress;
/// use std::sync::Arc;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> autoshard::Result<()> {
/// let config = AppConfig { questions: 3, users: 4, votes_per_user: 5, ..AppConfig::default() };
/// let outcome = run(Arc::new(MemoryStore::new()), &config, Progress::hidden()).await?;
/// assert!(outcome.is_exact());
/// assert_eq!(outcome.votes_committed, 20);
/// # Ok(())
/// # }
/// ```
pub async fn run(
    store: Arc<dyn DocumentStore>,
    config: &AppConfig,
    progress: Progress,
) -> Result<AppOutcome> {
    let db = Mapper::new(store).with_retry(config.retry);
    let seeded = seed(&db, config.questions).await?;

    let questions = usize::try_from(config.questions).unwrap_or(usize::MAX);
    let votes: Arc<Vec<AtomicI64>> = Arc::new((0..questions).map(|_| AtomicI64::new(0)).collect());
    let answers: Arc<Vec<AtomicU64>> =
        Arc::new((0..questions).map(|_| AtomicU64::new(0)).collect());
    let failed = Arc::new(AtomicU64::new(0));
    let failed_responses = Arc::new(AtomicU64::new(0));
    // Question i is (questions - i) times as popular as the last one.
    let popularity = WeightedIndex::new((0..config.questions).map(|i| config.questions - i))
        .map_err(|e| Error::Invalid(format!("cannot pick among {questions} questions: {e}")))?;

    let per_user = config.votes_per_user + config.responses_per_user;
    let bar = progress.bar(config.users * per_user, "users voting and responding");
    let started = Instant::now();
    let mut users = tokio::task::JoinSet::new();
    for user in 0..config.users {
        let (db, votes, answers, failed, failed_responses) = (
            db.clone(),
            votes.clone(),
            answers.clone(),
            failed.clone(),
            failed_responses.clone(),
        );
        let (popularity, bar, config) = (popularity.clone(), bar.clone(), *config);
        users.spawn(async move {
            for n in 0..per_user {
                let index = popularity.sample(&mut rand::rng());
                let id = index as u64 + 1;
                if n < config.votes_per_user {
                    match db.update(&id, |q: &mut Question| q.vote_up()).await {
                        Ok(()) => {
                            votes[index].fetch_add(1, Ordering::Relaxed);
                        }
                        Err(Error::Contention { .. }) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => return Err(e),
                    }
                } else {
                    let mut response = Response {
                        id: format!("{id}-{user}-{n}"),
                        question: id,
                        author: format!("user{user}"),
                        text: format!("user{user}'s answer"),
                    };
                    match responses::respond(&db, &mut response).await {
                        Ok(()) => {
                            answers[index].fetch_add(1, Ordering::Relaxed);
                        }
                        Err(Error::Contention { .. }) => {
                            failed_responses.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => return Err(e),
                    }
                }
                bar.inc(1);
            }
            Ok(())
        });
    }
    while let Some(done) = users.join_next().await {
        done.map_err(|e| Error::backend("a simulated user's task failed", e))??;
    }
    let elapsed = started.elapsed();
    bar.finish_and_clear();

    let response_counts = responses::count_per_question(&db, 1..=config.questions).await?;
    let mut leaderboard = Vec::with_capacity(questions);
    for (index, start) in seeded.iter().enumerate() {
        let id = index as u64 + 1;
        let q: Question = db.load(&id).await?;
        leaderboard.push(Standing {
            id,
            text: q.text,
            votes: q.votes,
            expected_votes: start + votes[index].load(Ordering::Relaxed),
            responses: response_counts.get(&id).copied().unwrap_or(0),
            expected_responses: answers[index].load(Ordering::Relaxed),
        });
    }
    leaderboard.sort_by(|a, b| b.votes.cmp(&a.votes).then(a.id.cmp(&b.id)));
    let committed: i64 = votes.iter().map(|v| v.load(Ordering::Relaxed)).sum();
    Ok(AppOutcome {
        leaderboard,
        votes_committed: u64::try_from(committed).unwrap_or(0),
        votes_failed: failed.load(Ordering::Relaxed),
        responses_committed: answers.iter().map(|a| a.load(Ordering::Relaxed)).sum(),
        responses_failed: failed_responses.load(Ordering::Relaxed),
        elapsed,
    })
}

/// Inserts questions `1..=n`, question `i` with `3 * (n - i)` votes already; returns the
/// seeded votes by index.
async fn seed<S: DocumentStore>(db: &Mapper<S>, n: u64) -> Result<Vec<i64>> {
    let mut seeded = Vec::new();
    for id in 1..=n {
        let start = i64::try_from(3 * (n - id)).unwrap_or(0);
        let mut q = Question::new(id, sample_text(id - 1), format!("candidate{id}"), start);
        db.insert(&mut q).await?;
        seeded.push(start);
    }
    Ok(seeded)
}
