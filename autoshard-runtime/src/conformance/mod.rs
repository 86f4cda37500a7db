//! The store conformance suite (feature `conformance`): plain async functions, each
//! taking `&dyn DocumentStore`, that every backend's tests run.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use autoshard::conformance;
//! use autoshard::store::MemoryStore;
//!
//! conformance::run_all(&MemoryStore::new()).await;
//! # }
//! ```
//!
//! Each case panics (it is test code) with a message naming the case when the store
//! misbehaves; [`run_all`] runs [`CASES`] in order and re-panics with the case name.
//! Cases use fresh kinds (with a random suffix), so they can run on a store that already
//! holds data, any number of times, and never touch documents they did not write. They
//! clean up nothing: run them on a store made for the test.
//!
//! Capability differences between stores are parameters read from the store (today:
//! [`DocumentStore::cross_group_transactions`] and [`DocumentStore::snapshot_lookups`]),
//! not separate suites.
//!
//! The cases live by concern, all re-exported here: single documents (`documents`),
//! transactions and snapshots (`transactions`), scans and lookups (`scans`), merges
//! (`merges`), write records beyond a merge's (`records`), folding lookups
//! (`fold_lookup`) and key-group ownership (`ownership`); this
//! module holds the runner and the helpers they share.

// Every public function here is a test that panics when the store misbehaves; the module
// docs say so once instead of a `# Panics` section on each.
#![allow(clippy::missing_panics_doc)]

use crate::document::{Document, Value, Versioned};
use crate::error::Result;
use crate::key::Key;
use crate::store::{Commit, DocumentStore, Scan, Transaction};
use futures::future::{BoxFuture, FutureExt};
use std::fmt::Debug;
use std::panic::AssertUnwindSafe;

mod documents;
mod fold_lookup;
mod merges;
mod owner_writes;
mod ownership;
mod records;
mod scans;
mod transactions;

pub use documents::*;
pub use fold_lookup::fold_lookup_matches_the_reference;
pub use merges::*;
pub use owner_writes::*;
pub use ownership::*;
pub use records::*;
pub use scans::*;
pub use transactions::*;

/// One named conformance case.
#[derive(Clone, Copy)]
pub struct Case {
    /// The case's name (the name of its function in this module).
    pub name: &'static str,
    /// Runs the case; panics when the store misbehaves.
    pub run: for<'a> fn(&'a dyn DocumentStore) -> BoxFuture<'a, ()>,
}

impl Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        /// Every case, in the order [`run_all`] runs them.
        pub const CASES: &[Case] = &[$(Case {
            name: stringify!($name),
            run: |store| $name(store).boxed(),
        }),*];
    };
}

cases!(
    get_missing_is_none,
    insert_then_get,
    insert_conflicts_when_present,
    concurrent_inserts_of_one_key_store_one,
    put_creates_and_overwrites,
    delete_reports_presence,
    versions_change_on_every_write,
    versions_not_reused_after_delete,
    get_many_keeps_order_and_missing,
    commit_applies_all_writes,
    commit_conflict_applies_nothing,
    commit_expecting_absent,
    commit_later_write_wins,
    commit_read_only_and_empty,
    a_versioned_commit_tells_the_versions_it_gave,
    commit_across_groups,
    scan_roots_and_children,
    scan_pages_cover_every_document_once,
    a_cursor_that_names_no_key_is_invalid,
    nasty_ids_round_trip,
    empty_document,
    large_document,
    values_nest_up_to_the_limit,
    floats_round_trip_exactly,
    concurrent_commits_have_one_winner,
    transaction_within_one_group_commits_atomically,
    get_many_within_one_group_is_a_snapshot,
    scan_page_within_one_group_is_a_snapshot,
    a_snapshot_lookup_is_one_instant_of_every_group,
    merge_folds_and_applies_each_write_id_once,
    a_values_write_keeps_the_write_record,
    a_values_write_over_malformed_records_matches_the_reference,
    a_merge_over_a_record_that_is_not_a_map_records_its_write,
    a_lookup_answers_the_named_writers_record_entry,
    merge_needs_the_document_and_its_guard,
    a_merge_into_the_stores_own_properties_is_invalid,
    merge_gives_a_new_version,
    versions_not_reused_after_merges,
    merge_overflow_writes_nothing,
    merge_refuses_what_it_cannot_fold_exactly,
    merge_drops_records_older_than_the_horizon,
    merge_compares_write_ids_exactly_across_u64,
    merge_matches_the_reference_fold,
    concurrent_merges_are_exact,
    make_durable_changes_nothing,
    lookup_answers_as_get_many_and_scan,
    fold_lookup_matches_the_reference,
    owned_documents_take_only_their_groups_writes,
    a_groups_transaction_takes_only_owned_or_absent_documents,
    a_passed_lease_frees_the_document,
    a_held_document_stays_owned_past_its_lease,
    malformed_owners_own_nothing,
    any_group_id_owns_alike,
    a_refusal_tells_the_lease_end_exactly,
    the_owner_alone_changes_only_the_owner,
    the_owner_alone_expecting_a_document_absent_conflicts_when_it_exists,
    owner_writes_never_bring_a_version_back,
);

/// The names of all cases, in order.
pub fn case_names() -> impl Iterator<Item = &'static str> {
    CASES.iter().map(|c| c.name)
}

/// Runs every case against `store`, in order. Panics on the first failing case with a
/// message `conformance case `name` failed: ...`.
pub async fn run_all(store: &dyn DocumentStore) {
    for case in CASES {
        run_case(case, store).await;
    }
}

/// Runs one case; on failure panics with a message naming it.
pub async fn run_case(case: &Case, store: &dyn DocumentStore) {
    tracing::debug!(case = case.name, "conformance case");
    if let Err(payload) = AssertUnwindSafe((case.run)(store)).catch_unwind().await {
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("(non-text panic)");
        panic!("conformance case `{}` failed: {message}", case.name);
    }
}

/// Runs the case called `name`; panics if there is none.
pub async fn run_named(name: &str, store: &dyn DocumentStore) {
    let Some(case) = CASES.iter().find(|c| c.name == name) else {
        panic!(
            "no conformance case `{name}`; cases: {:?}",
            case_names().collect::<Vec<_>>()
        );
    };
    run_case(case, store).await;
}

// ----------------------------------------------------------------------------------------
// Helpers

/// A kind no earlier run used, so cases never see each other's documents.
fn fresh_kind(base: &str) -> String {
    format!("{base}_{}", uuid::Uuid::new_v4().simple())
}

fn doc(pairs: &[(&str, Value)]) -> Document {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

#[track_caller]
fn ok<T>(result: Result<T>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(e) => panic!("{what}: unexpected error: {e}"),
    }
}

async fn get(store: &dyn DocumentStore, key: &Key) -> Option<Versioned> {
    ok(store.get(key).await, &format!("get {key}"))
}

async fn must_get(store: &dyn DocumentStore, key: &Key) -> Versioned {
    match get(store, key).await {
        Some(found) => found,
        None => panic!("get {key}: expected a document, found none"),
    }
}

async fn commit(store: &dyn DocumentStore, txn: &Transaction) -> Commit {
    ok(store.commit(txn).await, "commit")
}

async fn scan_all(
    store: &dyn DocumentStore,
    kind: &str,
    parent: Option<&Key>,
    limit: usize,
) -> Vec<(Key, Versioned)> {
    let mut scan = Scan::new(kind, parent.cloned()).limit(limit);
    let mut out = Vec::new();
    // A bound on pages so a store whose cursor never ends fails instead of hanging.
    for _ in 0..10_000 {
        let page = ok(store.scan(&scan).await, &format!("scan {kind}"));
        assert!(
            page.items.len() <= limit,
            "scan page of {} items exceeds limit {limit}",
            page.items.len()
        );
        out.extend(page.items);
        match page.next {
            None => return out,
            Some(cursor) => scan.cursor = Some(cursor),
        }
    }
    panic!("scan of {kind} did not finish after 10,000 pages");
}
