//! The concurrency scenario every real store runs: 64 tasks on one question, sharded (10
//! static shards, 200 votes a task) and naive (40 votes a task: every conflict there
//! costs a read and a commit, and 64 writers on one document conflict about six times
//! per vote), with and without retries, the four variants at once. Totals must be exact:
//! the stored votes equal the votes reported saved, and with (patient) retries every
//! vote is saved.

use crate::entities::{NaiveQuestion, Question};
use autoshard::store::DocumentStore;
use autoshard::{Mapper, RetryPolicy};
use std::sync::Arc;
use std::time::Duration;

pub const TASKS: u64 = 64;
/// Votes per task on the sharded question.
pub const VOTES: u64 = 200;
/// Votes per task on the naive question.
pub const NAIVE_VOTES: u64 = 40;

/// Retries until every vote is in (bounded far beyond what the test needs).
pub fn patient() -> RetryPolicy {
    RetryPolicy::exponential(Duration::from_millis(1), Duration::from_millis(50), 10_000)
        .with_max_elapsed(Duration::from_mins(2))
}

/// Runs [`TASKS`] tasks at once, each `task()`, and sums what they answer (the votes
/// each reports saved): the one harness of the concurrency scenarios, here and in the
/// mapper's own tests.
pub async fn from_tasks<F, Fut>(task: F) -> u64
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = u64> + Send + 'static,
{
    let tasks: Vec<_> = (0..TASKS).map(|_| tokio::spawn(task())).collect();
    let mut saved = 0;
    for task in tasks {
        saved += task.await.unwrap();
    }
    saved
}

/// Runs [`TASKS`] x `votes` votes through `vote` ([`from_tasks`]) and returns how many
/// were reported saved; a vote that gave up on contention is not, any other error fails.
pub async fn votes<F, Fut>(votes: u64, vote: F) -> u64
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = autoshard::Result<()>> + Send,
{
    from_tasks(|| {
        let vote = vote.clone();
        async move {
            let mut saved = 0;
            for _ in 0..votes {
                match vote().await {
                    Ok(()) => saved += 1,
                    Err(err) if err.is_contention() => {}
                    Err(err) => panic!("vote failed: {err}"),
                }
            }
            saved
        }
    })
    .await
}

async fn sharded<S: DocumentStore + 'static>(store: Arc<S>, retry: RetryPolicy, label: &str) {
    let db = Arc::new(Mapper::new(store).with_retry(retry));
    db.insert(&mut Question::new(1, "Hot?", 0)).await.unwrap();
    let voter = db.clone();
    let saved = votes(VOTES, move || {
        let db = voter.clone();
        async move { db.update(&1, |q: &mut Question| q.vote_up()).await }
    })
    .await;
    let stored = db.load::<Question>(&1).await.unwrap().votes;
    let m = db.metrics().snapshot();
    eprintln!("{label} sharded: {saved} saved, stored {stored}, {m:?}");
    assert_eq!(
        u64::try_from(stored).unwrap(),
        saved,
        "{label} sharded: lost or phantom votes"
    );
    if retry.max_attempts() > 1 {
        assert_eq!(
            saved,
            TASKS * VOTES,
            "{label} sharded: votes gave up despite retries"
        );
    }
}

async fn naive<S: DocumentStore + 'static>(store: Arc<S>, retry: RetryPolicy, label: &str) {
    let db = Arc::new(Mapper::new(store).with_retry(retry));
    db.insert(&mut NaiveQuestion {
        id: 1,
        text: "Hot?".into(),
        votes: 0,
    })
    .await
    .unwrap();
    let voter = db.clone();
    let saved = votes(NAIVE_VOTES, move || {
        let db = voter.clone();
        async move { db.update(&1, |q: &mut NaiveQuestion| q.vote_up()).await }
    })
    .await;
    let stored = db.load::<NaiveQuestion>(&1).await.unwrap().votes;
    let m = db.metrics().snapshot();
    eprintln!("{label} naive: {saved} saved, stored {stored}, {m:?}");
    assert_eq!(
        u64::try_from(stored).unwrap(),
        saved,
        "{label} naive: lost or phantom votes"
    );
    if retry.max_attempts() > 1 {
        assert_eq!(
            saved,
            TASKS * NAIVE_VOTES,
            "{label} naive: votes gave up despite retries"
        );
    } else {
        assert!(
            m.conflicts > 0,
            "{label} naive: 64 writers on one document never conflicted"
        );
    }
}

/// The four variants at once, each on a fresh store from `connect` (named after the
/// case).
pub async fn all_variants<S: DocumentStore + 'static>(
    connect: impl AsyncFn(&str) -> S,
    label: &str,
) {
    let stores = [
        Arc::new(connect("sharded-retry").await),
        Arc::new(connect("sharded-once").await),
        Arc::new(connect("naive-retry").await),
        Arc::new(connect("naive-once").await),
    ];
    let [a, b, c, d] = stores;
    futures::join!(
        sharded(a, patient(), label),
        sharded(b, RetryPolicy::none(), label),
        naive(c, patient(), label),
        naive(d, RetryPolicy::none(), label),
    );
}
