//! The conformance suite's own checks: its case names are unique, and a store that breaks
//! the contract fails the case that covers it, named. The suite runs on every store and
//! decorator from the integration tests' `conformance.rs`.
#![cfg(feature = "conformance")]

use autoshard_runtime::{MemoryStore, conformance};
use autoshard_test_support::store::{Knobs, TestStore};

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
