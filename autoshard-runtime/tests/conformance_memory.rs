//! The conformance suite against the memory store, directly, through `Arc`/`Box`, and
//! through every decorator (`LatencyStore`, `FaultyStore`).
#![cfg(feature = "conformance")]

use autoshard_runtime::{conformance, DocumentStore, LatencyStore, MemoryStore};
use autoshard_test_support::store::{Knobs, TestStore};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store() {
    conformance::run_all(&MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_through_arc_dyn() {
    let store: Arc<dyn DocumentStore> = Arc::new(MemoryStore::new());
    conformance::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_through_box_dyn() {
    let store: Box<dyn DocumentStore> = Box::new(MemoryStore::new());
    conformance::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_runs_twice_on_one_store() {
    let store = MemoryStore::new();
    conformance::run_all(&store).await;
    conformance::run_all(&store).await;
}

#[test]
fn case_names_are_unique() {
    let names: Vec<_> = conformance::case_names().collect();
    let unique: std::collections::BTreeSet<_> = names.iter().collect();
    assert_eq!(names.len(), unique.len());
    assert!(names.len() >= 20);
}

/// Runs case `name` on a store broken as `flaw` says; it must fail, naming the case.
async fn fails_with_flaw(name: &'static str, flaw: Knobs) {
    let store = TestStore::new(MemoryStore::new(), flaw);
    let outcome = tokio::spawn(async move {
        conformance::run_named(name, &store).await;
    })
    .await;
    let panic = outcome.expect_err("the broken store passed").into_panic();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains(&format!("conformance case `{name}` failed")),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_store_fails_with_the_case_name() {
    let overwrites = Knobs {
        insert_overwrites: true,
        ..Knobs::default()
    };
    fails_with_flaw("insert_conflicts_when_present", overwrites).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_reads_fail_the_snapshot_cases() {
    let torn = Knobs {
        torn_reads: true,
        ..Knobs::default()
    };
    fails_with_flaw("get_many_within_one_group_is_a_snapshot", torn.clone()).await;
    fails_with_flaw("scan_page_within_one_group_is_a_snapshot", torn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_store_over_memory() {
    let store = LatencyStore::new(MemoryStore::new(), Duration::from_millis(1))
        .with_read_latency(Duration::from_micros(100));
    conformance::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_store_through_arc_dyn() {
    let store: Arc<dyn DocumentStore> = Arc::new(LatencyStore::new(
        MemoryStore::new(),
        Duration::from_millis(1),
    ));
    conformance::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_store_with_no_fault_armed() {
    let store = autoshard_runtime::store::FaultyStore::new(MemoryStore::new());
    conformance::run_all(&store).await;
    assert_eq!(store.faults(), 0);
    assert!(store.calls() > 0);
}
