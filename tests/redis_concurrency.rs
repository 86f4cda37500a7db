//! The runtime's concurrency scenario on real Redis: 64 tasks x 500 votes on one
//! question, sharded (10 static shards) and naive, with and without retries, on a
//! standalone server and on a 3-node cluster. Totals must be exact: the stored votes
//! equal the votes reported saved, and with (patient) retries every vote is saved.

use autoshard::{DocumentStore, Mapper, RedisOptions, RedisStore, RetryPolicy};
use autoshard_test_support::entities::{NaiveQuestion, Question};
use autoshard_test_support::redis::{namespace, Cluster, Standalone};
use std::sync::Arc;
use std::time::Duration;

const TASKS: u64 = 64;
const VOTES: u64 = 500;

/// Retries until every vote is in (bounded far beyond what the test needs).
fn patient() -> RetryPolicy {
    RetryPolicy::exponential(Duration::from_millis(1), Duration::from_millis(50), 10_000)
        .with_max_elapsed(Duration::from_mins(2))
}

/// Runs 64 x 500 votes through `vote` and returns how many were reported saved.
async fn run<F, Fut>(vote: F) -> u64
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = autoshard::Result<()>> + Send,
{
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let vote = vote.clone();
            tokio::spawn(async move {
                let mut saved = 0;
                for _ in 0..VOTES {
                    match vote().await {
                        Ok(()) => saved += 1,
                        Err(err) if err.is_contention() => {}
                        Err(err) => panic!("vote failed: {err}"),
                    }
                }
                saved
            })
        })
        .collect();
    let mut saved = 0;
    for task in tasks {
        saved += task.await.unwrap();
    }
    saved
}

async fn sharded<S: DocumentStore + 'static>(store: Arc<S>, retry: RetryPolicy, label: &str) {
    let db = Arc::new(Mapper::new(store).with_retry(retry));
    db.insert(&mut Question::new(1, "Hot?", 0)).await.unwrap();
    let voter = db.clone();
    let saved = run(move || {
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
    let saved = run(move || {
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
            TASKS * VOTES,
            "{label} naive: votes gave up despite retries"
        );
    } else {
        assert!(
            m.conflicts > 0,
            "{label} naive: 64 writers on one document never conflicted"
        );
    }
}

async fn all_variants(connect: impl AsyncFn(&str) -> RedisStore, label: &str) {
    sharded(Arc::new(connect("sharded-retry").await), patient(), label).await;
    sharded(
        Arc::new(connect("sharded-once").await),
        RetryPolicy::none(),
        label,
    )
    .await;
    naive(Arc::new(connect("naive-retry").await), patient(), label).await;
    naive(
        Arc::new(connect("naive-once").await),
        RetryPolicy::none(),
        label,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone() {
    let server = Standalone::start();
    let url = server.url();
    let connect = async |case: &str| {
        RedisStore::connect_with(&url, RedisOptions::default().namespace(namespace(case)))
            .await
            .unwrap()
    };
    all_variants(connect, "standalone").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster() {
    let cluster = Cluster::start();
    let urls = cluster.urls();
    let connect = async |case: &str| {
        RedisStore::connect_cluster_with(&urls, RedisOptions::default().namespace(namespace(case)))
            .await
            .unwrap()
    };
    all_variants(connect, "cluster").await;
}
