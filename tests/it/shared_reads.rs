//! Shared reads: concurrent loads of one entity through one mapper share reads, and
//! every load still sees every write completed before it was called (its own ones
//! too). Every store runs the case behind a read latency (up to 2 ms) and a commit
//! latency (up to 1 ms): reads answer late (their snapshot is older than their answer),
//! so a load that joined a read started before it would miss writes, and reads last long
//! enough that concurrent loads overlap on any machine.

use autoshard::prelude::*;
use autoshard::store::faulty::FaultyStore;
use autoshard_test_support::entities::Question;
use autoshard_test_support::every_store::Backend;
use autoshard_test_support::store::{Knobs, TestStore};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// 16 tasks x 40 rounds of load, vote, save: each load sees at least every vote
/// confirmed before it was called, and at most the votes attempted; after its own save,
/// a task's load sees its own vote. With shared reads, the store serves fewer reads
/// than there are loads.
async fn loads_see_every_write_completed_before_them(store: Arc<dyn DocumentStore>, label: &str) {
    const TASKS: i64 = 16;
    const ROUNDS: i64 = 40;
    let knobs = Knobs {
        read_latency: Some(Duration::from_millis(2)),
        commit_latency: Some(Duration::from_millis(1)),
        ..Knobs::default()
    };
    let counting = FaultyStore::new(Arc::new(TestStore::new(store, knobs)));
    let db = Mapper::new(Arc::new(counting.clone()) as Arc<dyn DocumentStore>);
    db.insert(&mut Question::new(1, "Fresh?", 0)).await.unwrap();
    let confirmed = Arc::new(AtomicI64::new(0));
    let attempted = Arc::new(AtomicI64::new(0));
    let calls_before = counting.calls();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (db, confirmed, attempted) = (db.clone(), confirmed.clone(), attempted.clone());
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let before = confirmed.load(Ordering::SeqCst);
                    let mut q: Question = db.load(&1).await.unwrap();
                    let seen = q.votes;
                    assert!(
                        seen >= before,
                        "a load saw {seen} after {before} were confirmed"
                    );
                    assert!(seen <= attempted.load(Ordering::SeqCst));
                    attempted.fetch_add(1, Ordering::SeqCst);
                    q.vote_up();
                    db.save(&mut q).await.unwrap();
                    let mine = confirmed.fetch_add(1, Ordering::SeqCst) + 1;
                    let after: Question = db.load(&1).await.unwrap();
                    assert!(
                        after.votes >= mine,
                        "a load after its own save saw {}",
                        after.votes
                    );
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let calls = counting.calls() - calls_before;
    let loads = 2 * TASKS * ROUNDS;
    eprintln!(
        "{label}: {loads} loads and {} saves made {calls} store calls",
        TASKS * ROUNDS
    );
    assert_eq!(
        db.load::<Question>(&1).await.unwrap().votes,
        TASKS * ROUNDS,
        "{label}"
    );
    // Without sharing, every load alone is two calls (documents and shard scan).
    assert!(
        calls < u64::try_from(2 * loads).unwrap(),
        "{label}: no read was shared: {calls}"
    );
}

/// Loads that share a read that fails each get the error the read got, as informative
/// as the one the load that made the call got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_load_sharing_a_failed_read_gets_its_error() {
    let knobs = Knobs {
        read_latency: Some(Duration::from_millis(2)),
        lost_reads: Some(1),
        ..Knobs::default()
    };
    let store = MemoryStore::new();
    Mapper::new(store.clone())
        .insert(&mut Question::new(1, "Lost?", 0))
        .await
        .unwrap();
    let db = Mapper::new(Arc::new(TestStore::new(store, knobs)) as Arc<dyn DocumentStore>);
    let loads: Vec<_> = (0..16)
        .map(|_| {
            let db = db.clone();
            tokio::spawn(async move { db.load::<Question>(&1).await.unwrap_err() })
        })
        .collect();
    for load in loads {
        let err = load.await.unwrap();
        let text = err.to_string();
        assert!(
            matches!(err, Error::Backend { .. }) && text.contains("the reply was lost"),
            "{text}"
        );
    }
}

async fn every_case(backend: &Backend, label: &str) {
    let store = backend.store("shared-reads").await;
    loads_see_every_write_completed_before_them(store, label).await;
}

autoshard_test_support::every_store!(every_case);
