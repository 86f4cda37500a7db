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
//! [`DocumentStore::cross_group_transactions`]), not separate suites.

// Every public function here is a test that panics when the store misbehaves; the module
// docs say so once instead of a `# Panics` section on each.
#![allow(clippy::missing_panics_doc)]

use crate::document::{Document, Value, Version, Versioned};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::merge::{self, Elements, Fold, Merge, Merged, WriteId, PRUNE_EVERY, RECORD};
use crate::store::ownership::{Owner, OWNER};
use crate::store::{Commit, DocumentStore, Lookup, Scan, Transaction};
use futures::future::{join_all, BoxFuture, FutureExt};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::panic::AssertUnwindSafe;

mod fold_lookup;
pub use fold_lookup::fold_lookup_matches_the_reference;

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
    commit_across_groups,
    scan_roots_and_children,
    scan_pages_cover_every_document_once,
    nasty_ids_round_trip,
    empty_document,
    large_document,
    concurrent_commits_have_one_winner,
    transaction_within_one_group_commits_atomically,
    get_many_within_one_group_is_a_snapshot,
    scan_page_within_one_group_is_a_snapshot,
    merge_folds_and_applies_each_write_id_once,
    merge_needs_the_document_and_its_guard,
    merge_gives_a_new_version,
    versions_not_reused_after_merges,
    merge_overflow_writes_nothing,
    merge_refuses_what_it_cannot_fold_exactly,
    merge_drops_records_older_than_the_horizon,
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

// ----------------------------------------------------------------------------------------
// Cases

/// `get` of a key never written answers `None`.
pub async fn get_missing_is_none(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("Missing"), "1");
    assert_eq!(get(store, &key).await, None);
    assert_eq!(get(store, &key.child_group("Part", "0")).await, None);
    assert_eq!(get(store, &key.child("Part", "0")).await, None);
}

/// `insert` stores the document; `get` returns it with the version `insert` returned.
pub async fn insert_then_get(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("Insert"), "1");
    let d = doc(&[
        ("text", "hello".into()),
        ("n", 7.into()),
        ("nested", serde_json::json!({"a": [1, 2]})),
    ]);
    let version = ok(store.insert(&key, d.clone()).await, "insert");
    let found = must_get(store, &key).await;
    assert_eq!(found.doc, d);
    assert_eq!(found.version, version);
}

/// `insert` on a taken key fails with `AlreadyExists` naming the key and changes nothing.
pub async fn insert_conflicts_when_present(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("InsertTwice"), "1");
    let version = ok(store.insert(&key, doc(&[("n", 1.into())])).await, "insert");
    match store.insert(&key, doc(&[("n", 2.into())])).await {
        Err(Error::AlreadyExists { key: taken }) => assert_eq!(taken, key),
        other => panic!("second insert: expected AlreadyExists, got {other:?}"),
    }
    let found = must_get(store, &key).await;
    assert_eq!(found.doc, doc(&[("n", 1.into())]));
    assert_eq!(found.version, version);
}

/// Concurrent inserts of one key: exactly one stores its document, every other one fails
/// with `AlreadyExists` (what `Mapper::insert_if_absent` rests on).
pub async fn concurrent_inserts_of_one_key_store_one(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("InsertRace"), "1");
    let answers = join_all((0..8).map(|i| store.insert(&key, doc(&[("n", i.into())])))).await;
    let mut stored = None;
    for (i, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(version) => {
                assert!(
                    stored.is_none(),
                    "two concurrent inserts of one key succeeded"
                );
                stored = Some((i, version));
            }
            Err(Error::AlreadyExists { key: taken }) => assert_eq!(taken, key),
            Err(e) => panic!("a concurrent insert failed with {e}"),
        }
    }
    let (winner, version) = stored.expect("one of the concurrent inserts succeeds");
    let found = must_get(store, &key).await;
    assert_eq!(found.doc, doc(&[("n", winner.into())]));
    assert_eq!(found.version, version);
}

/// `put` creates a missing document and overwrites an existing one (no merge).
pub async fn put_creates_and_overwrites(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("Put"), "1");
    let v1 = ok(
        store
            .put(&key, doc(&[("a", 1.into()), ("b", 2.into())]))
            .await,
        "put",
    );
    assert_eq!(must_get(store, &key).await.version, v1);
    let v2 = ok(store.put(&key, doc(&[("c", 3.into())])).await, "put again");
    let found = must_get(store, &key).await;
    assert_eq!(
        found.doc,
        doc(&[("c", 3.into())]),
        "put must replace, not merge"
    );
    assert_eq!(found.version, v2);
}

/// `delete` answers whether a document was there, and removes it.
pub async fn delete_reports_presence(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("Delete"), "1");
    let other = Key::new(key.kind(), "2");
    ok(store.insert(&key, doc(&[("n", 1.into())])).await, "insert");
    ok(
        store.insert(&other, doc(&[("n", 2.into())])).await,
        "insert other",
    );
    assert!(
        ok(store.delete(&key).await, "delete"),
        "delete of a present key"
    );
    assert_eq!(get(store, &key).await, None);
    assert!(
        !ok(store.delete(&key).await, "delete again"),
        "delete of an absent key"
    );
    assert!(
        get(store, &other).await.is_some(),
        "delete removed another key"
    );
}

/// Every write (insert, put, commit) gives the document a new version.
pub async fn versions_change_on_every_write(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("Versions"), "1");
    let mut seen = BTreeSet::new();
    let v = ok(store.insert(&key, doc(&[("n", 0.into())])).await, "insert");
    seen.insert(v);
    // The same content again still changes the version.
    for _ in 0..3 {
        let v = ok(store.put(&key, doc(&[("n", 0.into())])).await, "put");
        assert!(seen.insert(v), "put reused version {v:?}");
        assert_eq!(must_get(store, &key).await.version, v);
    }
    for i in 0..3 {
        let current = must_get(store, &key).await.version;
        let txn = Transaction::new()
            .expect(key.clone(), Some(current))
            .put(key.clone(), doc(&[("n", i.into())]));
        assert_eq!(commit(store, &txn).await, Commit::Committed);
        let v = must_get(store, &key).await.version;
        assert!(seen.insert(v), "commit reused version {v:?}");
    }
}

/// A version is not handed out again after delete and re-insert, so a commit that read
/// the old document conflicts (no ABA).
pub async fn versions_not_reused_after_delete(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("Aba"), "1");
    let mut seen = BTreeSet::new();
    let mut first = None;
    for round in 0..5 {
        let v = ok(store.insert(&key, doc(&[("n", 1.into())])).await, "insert");
        assert!(
            seen.insert(v),
            "round {round}: version {v:?} reused after delete"
        );
        first.get_or_insert(v);
        assert!(ok(store.delete(&key).await, "delete"));
    }
    ok(store.insert(&key, doc(&[("n", 1.into())])).await, "insert");
    stale_put_conflicts(store, &key, first.unwrap_or(Version(0))).await;
    assert_eq!(must_get(store, &key).await.doc, doc(&[("n", 1.into())]));
}

/// A put of `key` expecting the version `stale` conflicts.
async fn stale_put_conflicts(store: &dyn DocumentStore, key: &Key, stale: Version) {
    let txn = Transaction::new()
        .expect(key.clone(), Some(stale))
        .put(key.clone(), doc(&[("n", 99.into())]));
    assert_eq!(
        commit(store, &txn).await,
        Commit::Conflict { key: key.clone() },
        "a commit expecting {stale:?}"
    );
}

/// `get_many` answers one entry per key, in order, `None` for missing keys, repeated keys
/// repeated; an empty request answers an empty list.
pub async fn get_many_keeps_order_and_missing(store: &dyn DocumentStore) {
    let kind = fresh_kind("Many");
    let keys: Vec<Key> = (0..6)
        .map(|i| Key::new(kind.clone(), i.to_string()))
        .collect();
    let mut versions = BTreeMap::new();
    for (i, key) in keys.iter().enumerate() {
        if i % 2 == 0 {
            versions.insert(
                i,
                ok(store.insert(key, doc(&[("i", i.into())])).await, "insert"),
            );
        }
    }
    let other_group = keys[0].child_group("Part", "1");
    ok(
        store.put(&other_group, doc(&[("s", 1.into())])).await,
        "put child group",
    );
    let asked = vec![
        keys[5].clone(),
        keys[0].clone(),
        other_group.clone(),
        keys[1].clone(),
        keys[4].clone(),
        keys[0].clone(),
        keys[3].clone(),
        keys[2].clone(),
    ];
    let got = ok(store.get_many(&asked).await, "get_many");
    assert_eq!(
        got.len(),
        asked.len(),
        "get_many must answer one entry per key"
    );
    for (key, found) in asked.iter().zip(&got) {
        if key == &other_group {
            assert_eq!(
                found.as_ref().map(|f| &f.doc),
                Some(&doc(&[("s", 1.into())]))
            );
            continue;
        }
        let i: usize = key.name().parse().unwrap_or(usize::MAX);
        match (versions.get(&i), found) {
            (Some(v), Some(f)) => {
                assert_eq!(f.version, *v, "{key}");
                assert_eq!(f.doc, doc(&[("i", i.into())]), "{key}");
            }
            (None, None) => {}
            (want, got) => panic!("get_many at {key}: expected {want:?}, got {got:?}"),
        }
    }
    assert!(ok(store.get_many(&[]).await, "get_many of nothing").is_empty());
}

/// A commit whose reads all match applies every put and delete.
pub async fn commit_applies_all_writes(store: &dyn DocumentStore) {
    let kind = fresh_kind("Commit");
    let a = Key::new(kind.clone(), "a");
    let b = Key::new(kind.clone(), "b");
    // `c` (never written) is in `b`'s group, so the delete below is a one-group commit.
    let c = b.child("Part", "c");
    let va = ok(store.insert(&a, doc(&[("n", 1.into())])).await, "insert a");
    ok(store.insert(&b, doc(&[("n", 2.into())])).await, "insert b");
    // Keep everything in one group so stores without cross-group commits accept it too.
    let a_child = a.child("Part", "x");
    let txn = Transaction::new()
        .expect(a.clone(), Some(va))
        .put(a.clone(), doc(&[("n", 10.into())]))
        .put(a_child.clone(), doc(&[("p", true.into())]));
    assert_eq!(commit(store, &txn).await, Commit::Committed);
    assert_eq!(must_get(store, &a).await.doc, doc(&[("n", 10.into())]));
    assert_eq!(
        must_get(store, &a_child).await.doc,
        doc(&[("p", true.into())])
    );

    let vb = must_get(store, &b).await.version;
    let txn = Transaction::new()
        .expect(b.clone(), Some(vb))
        .delete(b.clone())
        .delete(c.clone());
    assert_eq!(
        commit(store, &txn).await,
        Commit::Committed,
        "delete of an absent key is no error"
    );
    assert_eq!(get(store, &b).await, None);
    assert_eq!(get(store, &c).await, None);
}

/// A commit with one stale read applies nothing, and names the stale key.
pub async fn commit_conflict_applies_nothing(store: &dyn DocumentStore) {
    let kind = fresh_kind("Conflict");
    let a = Key::new(kind.clone(), "a");
    let child = a.child("Part", "x");
    let va = ok(store.insert(&a, doc(&[("n", 1.into())])).await, "insert a");
    let vc = ok(
        store.insert(&child, doc(&[("n", 2.into())])).await,
        "insert child",
    );
    // Someone else writes the child.
    let vc2 = ok(
        store.put(&child, doc(&[("n", 3.into())])).await,
        "concurrent put",
    );
    assert_ne!(vc, vc2);
    let created = a.child("Part", "new");
    let txn = Transaction::new()
        .expect(a.clone(), Some(va))
        .expect(child.clone(), Some(vc))
        .put(a.clone(), doc(&[("n", 100.into())]))
        .put(created.clone(), doc(&[("n", 100.into())]))
        .delete(child.clone());
    assert_eq!(
        commit(store, &txn).await,
        Commit::Conflict { key: child.clone() }
    );
    let found_a = must_get(store, &a).await;
    assert_eq!(
        (found_a.doc, found_a.version),
        (doc(&[("n", 1.into())]), va),
        "a was written"
    );
    let found_c = must_get(store, &child).await;
    assert_eq!(
        (found_c.doc, found_c.version),
        (doc(&[("n", 3.into())]), vc2),
        "child was written"
    );
    assert_eq!(
        get(store, &created).await,
        None,
        "a conflicting commit created a document"
    );
}

/// Expecting `None` means "still absent": it commits once, then conflicts.
pub async fn commit_expecting_absent(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("Absent"), "1").child_group("Part", "4");
    let txn = Transaction::new()
        .expect(key.clone(), None)
        .put(key.clone(), doc(&[("n", 1.into())]));
    assert_eq!(commit(store, &txn).await, Commit::Committed);
    assert_eq!(must_get(store, &key).await.doc, doc(&[("n", 1.into())]));
    assert_eq!(
        commit(store, &txn).await,
        Commit::Conflict { key: key.clone() }
    );
    // After a delete, "absent" holds again.
    assert!(ok(store.delete(&key).await, "delete"));
    assert_eq!(commit(store, &txn).await, Commit::Committed);
    // Expecting a version of a document that is absent conflicts.
    let other = Key::new(key.path()[0].kind(), "2");
    let txn = Transaction::new()
        .expect(other.clone(), Some(must_get(store, &key).await.version))
        .put(other.clone(), Document::new());
    assert_eq!(
        commit(store, &txn).await,
        Commit::Conflict { key: other.clone() }
    );
    assert_eq!(get(store, &other).await, None);
}

/// Two writes of one key in a transaction: the later wins.
pub async fn commit_later_write_wins(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("LaterWins"), "1");
    let txn = Transaction::new()
        .put(key.clone(), doc(&[("n", 1.into())]))
        .put(key.clone(), doc(&[("n", 2.into())]));
    assert_eq!(commit(store, &txn).await, Commit::Committed);
    assert_eq!(must_get(store, &key).await.doc, doc(&[("n", 2.into())]));
    let txn = Transaction::new()
        .put(key.clone(), doc(&[("n", 3.into())]))
        .delete(key.clone());
    assert_eq!(commit(store, &txn).await, Commit::Committed);
    assert_eq!(get(store, &key).await, None);
    let txn = Transaction::new()
        .delete(key.clone())
        .put(key.clone(), doc(&[("n", 4.into())]));
    assert_eq!(commit(store, &txn).await, Commit::Committed);
    assert_eq!(must_get(store, &key).await.doc, doc(&[("n", 4.into())]));
}

/// A transaction without writes commits when its reads hold (and changes no version);
/// an empty transaction commits.
pub async fn commit_read_only_and_empty(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("ReadOnly"), "1");
    let v = ok(store.insert(&key, doc(&[("n", 1.into())])).await, "insert");
    let txn = Transaction::new().expect(key.clone(), Some(v));
    assert_eq!(commit(store, &txn).await, Commit::Committed);
    assert_eq!(
        must_get(store, &key).await.version,
        v,
        "a read-only commit changed the version"
    );
    assert_eq!(commit(store, &Transaction::new()).await, Commit::Committed);
}

/// A transaction over two entity groups: atomic where the store says it supports them
/// (`cross_group_transactions`), otherwise rejected with `Error::Invalid` and nothing
/// applied.
pub async fn commit_across_groups(store: &dyn DocumentStore) {
    let kind = fresh_kind("CrossGroup");
    let a = Key::new(kind.clone(), "a");
    let b = Key::new(kind.clone(), "b");
    let va = ok(store.insert(&a, doc(&[("n", 1.into())])).await, "insert a");
    let txn = Transaction::new()
        .expect(a.clone(), Some(va))
        .expect(b.clone(), None)
        .put(a.clone(), doc(&[("n", 2.into())]))
        .put(b.clone(), doc(&[("n", 2.into())]));
    assert!(!txn.single_group());
    if store.cross_group_transactions() {
        assert_eq!(commit(store, &txn).await, Commit::Committed);
        assert_eq!(must_get(store, &a).await.doc, doc(&[("n", 2.into())]));
        assert_eq!(must_get(store, &b).await.doc, doc(&[("n", 2.into())]));
        // And it conflicts as a whole: b is no longer absent.
        let va = must_get(store, &a).await.version;
        let txn = Transaction::new()
            .expect(a.clone(), Some(va))
            .expect(b.clone(), None)
            .put(a.clone(), doc(&[("n", 3.into())]));
        assert_eq!(
            commit(store, &txn).await,
            Commit::Conflict { key: b.clone() }
        );
        assert_eq!(must_get(store, &a).await.doc, doc(&[("n", 2.into())]));
    } else {
        match store.commit(&txn).await {
            Err(Error::Invalid(_)) => {}
            other => panic!(
                "cross-group commit on a store without them: expected Invalid, got {other:?}"
            ),
        }
        assert_eq!(must_get(store, &a).await.version, va);
        assert_eq!(get(store, &b).await, None);
    }
}

/// A scan lists the documents of one kind under one parent: roots with `None`, children
/// of exactly that parent otherwise (in the parent's group or in groups of their own);
/// never other kinds or grandchildren.
pub async fn scan_roots_and_children(store: &dyn DocumentStore) {
    let kind = fresh_kind("Scan");
    let child_kind = fresh_kind("ScanChild");
    let q1 = Key::new(kind.clone(), "1");
    let q2 = Key::new(kind.clone(), "2");
    let mut write = vec![
        q1.clone(),
        q2.clone(),
        q1.child_group("Part", "0"),
        q1.child_group("Parts", "").child("Part", "d"),
        Key::new(fresh_kind("Other"), "1"),
    ];
    let c1 = q1.child(child_kind.clone(), "a");
    let c2 = q1.child(child_kind.clone(), "b");
    let c3 = q2.child(child_kind.clone(), "c");
    let own_group = q1.child_group(child_kind.clone(), "o");
    let group = q1.child_group("Group", "0");
    let in_group = group.child(child_kind.clone(), "s");
    let grandchild = c1.child(child_kind.clone(), "g");
    write.extend([
        c1.clone(),
        c2.clone(),
        own_group.clone(),
        in_group.clone(),
        c3.clone(),
        grandchild.clone(),
    ]);
    // A root of the child kind must not show up under a parent either.
    let root_of_child_kind = Key::new(child_kind.clone(), "a");
    write.push(root_of_child_kind.clone());
    for key in &write {
        ok(
            store.put(key, doc(&[("at", key.encode().into())])).await,
            "put",
        );
    }

    let keys = |items: Vec<(Key, Versioned)>| -> BTreeSet<Key> {
        items
            .into_iter()
            .map(|(k, v)| {
                assert_eq!(
                    v.doc,
                    doc(&[("at", k.encode().into())]),
                    "scan returned another document's content for {k}"
                );
                k
            })
            .collect()
    };
    assert_eq!(
        keys(scan_all(store, &kind, None, 100).await),
        BTreeSet::from([q1.clone(), q2.clone()])
    );
    assert_eq!(
        keys(scan_all(store, &child_kind, Some(&q1), 100).await),
        BTreeSet::from([c1.clone(), c2, own_group])
    );
    assert_eq!(
        keys(scan_all(store, &child_kind, Some(&q2), 100).await),
        BTreeSet::from([c3])
    );
    assert_eq!(
        keys(scan_all(store, &child_kind, Some(&group), 100).await),
        BTreeSet::from([in_group])
    );
    assert_eq!(
        keys(scan_all(store, &child_kind, Some(&c1), 100).await),
        BTreeSet::from([grandchild])
    );
    assert_eq!(
        keys(scan_all(store, &child_kind, None, 100).await),
        BTreeSet::from([root_of_child_kind])
    );
    assert!(scan_all(store, &fresh_kind("Nothing"), None, 100)
        .await
        .is_empty());
}

/// Paging with small limits returns every document exactly once, with its version.
pub async fn scan_pages_cover_every_document_once(store: &dyn DocumentStore) {
    let kind = fresh_kind("Paging");
    let mut expected = BTreeMap::new();
    for i in 0..53 {
        let key = Key::new(kind.clone(), format!("{i}"));
        let v = ok(store.insert(&key, doc(&[("i", i.into())])).await, "insert");
        expected.insert(key, v);
    }
    for limit in [1, 7, 53, 54, 1000] {
        let items = scan_all(store, &kind, None, limit).await;
        let mut seen = BTreeMap::new();
        for (key, found) in items {
            assert!(
                seen.insert(key.clone(), found.version).is_none(),
                "limit {limit}: {key} returned twice"
            );
        }
        assert_eq!(seen, expected, "limit {limit}");
    }
}

/// Ids full of separators and escape characters store, load and scan back unchanged and
/// never collide with each other or with derived keys (children, child groups).
pub async fn nasty_ids_round_trip(store: &dyn DocumentStore) {
    let kind = fresh_kind("Nasty");
    let ids = [
        "", "{", "}", "{x}", ":", "a:b", "/", "a/b", "%", "%41", "%2F", "1/Part:0", "~Part", " ",
        "\n", "ü/é", "{1}/{2}", "*", "?", "[", "\\",
    ];
    let root = Key::new(kind.clone(), "1");
    let part = root.child_group("Part", "0");
    ok(
        store.put(&part, doc(&[("id", "part".into())])).await,
        "put child group",
    );
    for id in ids {
        let key = Key::new(kind.clone(), id);
        ok(
            store.insert(&key, doc(&[("id", id.into())])).await,
            &format!("insert {id:?}"),
        );
        let child = root.child(kind.clone(), id);
        ok(
            store.insert(&child, doc(&[("child", id.into())])).await,
            &format!("insert child {id:?}"),
        );
    }
    for id in ids {
        let key = Key::new(kind.clone(), id);
        assert_eq!(
            must_get(store, &key).await.doc,
            doc(&[("id", id.into())]),
            "id {id:?}"
        );
    }
    assert_eq!(
        must_get(store, &part).await.doc,
        doc(&[("id", "part".into())])
    );
    let roots: BTreeMap<String, Document> = scan_all(store, &kind, None, 5)
        .await
        .into_iter()
        .map(|(k, v)| (k.name().to_owned(), v.doc))
        .collect();
    assert_eq!(roots.len(), ids.len());
    for id in ids {
        assert_eq!(
            roots.get(id),
            Some(&doc(&[("id", id.into())])),
            "scan id {id:?}"
        );
    }
    let children = scan_all(store, &kind, Some(&root), 5).await;
    assert_eq!(children.len(), ids.len());
    for (key, found) in children {
        assert_eq!(found.doc, doc(&[("child", key.name().into())]));
    }
}

/// An empty document is a document: stored, found, listed.
pub async fn empty_document(store: &dyn DocumentStore) {
    let kind = fresh_kind("Empty");
    let key = Key::new(kind.clone(), "1");
    let v = ok(store.insert(&key, Document::new()).await, "insert");
    let found = must_get(store, &key).await;
    assert_eq!((found.doc, found.version), (Document::new(), v));
    assert!(matches!(
        store.insert(&key, Document::new()).await,
        Err(Error::AlreadyExists { .. })
    ));
    let listed = scan_all(store, &kind, None, 10).await;
    assert_eq!(listed.len(), 1);
    let got = ok(store.get_many(std::slice::from_ref(&key)).await, "get_many");
    assert_eq!(got.len(), 1);
    assert!(got[0].is_some(), "get_many lost an empty document");
    let txn = Transaction::new()
        .expect(key.clone(), Some(v))
        .put(key.clone(), Document::new());
    assert_eq!(commit(store, &txn).await, Commit::Committed);
    assert!(get(store, &key).await.is_some());
}

/// A document of about 1 MiB with many properties round-trips unchanged.
pub async fn large_document(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("Large"), "1");
    let mut d: Document = (0..2000)
        .map(|i| (format!("field_{i:05}"), Value::from(i)))
        .collect();
    d.insert("blob".to_owned(), "x".repeat(1 << 20).into());
    d.insert(
        "list".to_owned(),
        Value::Array(
            (0..5000)
                .map(|i| Value::from(format!("item {i} ✓")))
                .collect(),
        ),
    );
    let v = ok(store.insert(&key, d.clone()).await, "insert");
    let found = must_get(store, &key).await;
    assert_eq!(found.version, v);
    assert!(found.doc == d, "large document changed on the way");
}

/// Rounds of concurrent commits, all expecting the same version of one key: exactly one
/// wins per round, and the stored value is the winner's.
pub async fn concurrent_commits_have_one_winner(store: &dyn DocumentStore) {
    const ROUNDS: usize = 20;
    const WRITERS: usize = 8;
    let key = Key::new(fresh_kind("Race"), "1");
    ok(store.insert(&key, doc(&[("n", 0.into())])).await, "insert");
    for round in 0..ROUNDS {
        let read = must_get(store, &key).await;
        let attempts = (0..WRITERS).map(|w| {
            let txn = Transaction::new()
                .expect(key.clone(), Some(read.version))
                .put(key.clone(), doc(&[("n", (round * WRITERS + w).into())]));
            async move { (w, store.commit(&txn).await) }
        });
        let mut winners = Vec::new();
        for (w, outcome) in join_all(attempts).await {
            match outcome {
                Ok(Commit::Committed) => winners.push(w),
                Ok(Commit::Conflict { key: conflicted }) => assert_eq!(conflicted, key),
                Err(e) => panic!("round {round}: commit failed: {e}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let found = must_get(store, &key).await;
        assert_eq!(
            found.doc,
            doc(&[("n", (round * WRITERS + winners[0]).into())]),
            "round {round}"
        );
        assert_ne!(found.version, read.version);
    }
}

/// A transaction whose keys share one group commits atomically on every store, also
/// one without cross-group transactions: a commit that writes a group's head document
/// and a child in it, expecting the head's version, applies both or nothing; a commit
/// expecting a stale head applies nothing; a scan under the head lists its children
/// only; two child groups of one root are separate groups.
pub async fn transaction_within_one_group_commits_atomically(store: &dyn DocumentStore) {
    let root = Key::new(fresh_kind("GroupRoot"), "1");
    let child_kind = fresh_kind("GroupChild");
    let head = root.child_group("Group", "3");
    let a = head.child(child_kind.clone(), "a");
    let b = head.child(child_kind.clone(), "b");
    let elsewhere = root
        .child_group("Group", "4")
        .child(child_kind.clone(), "a");
    assert!(a.same_group(&head) && !a.same_group(&elsewhere) && !a.same_group(&root));

    let insert = |child: &Key, head_version: Option<Version>| {
        Transaction::new()
            .expect(head.clone(), head_version)
            .expect(child.clone(), None)
            .put(head.clone(), Document::new())
            .put(child.clone(), doc(&[("at", child.encode().into())]))
    };
    assert_eq!(commit(store, &insert(&a, None)).await, Commit::Committed);
    let first = must_get(store, &head).await.version;
    assert_eq!(
        commit(store, &insert(&b, Some(first))).await,
        Commit::Committed
    );
    // A writer that read the head before `b` went in must conflict.
    let stale = insert(&head.child(child_kind.clone(), "c"), Some(first));
    assert!(matches!(
        commit(store, &stale).await,
        Commit::Conflict { .. }
    ));
    assert!(get(store, &head.child(child_kind.clone(), "c"))
        .await
        .is_none());
    // The same child name in another group is another document.
    ok(store.put(&elsewhere, Document::new()).await, "put");

    let listed: BTreeSet<Key> = scan_all(store, &child_kind, Some(&head), 1)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(listed, BTreeSet::from([a.clone(), b.clone()]));

    let cleanup = Transaction::new()
        .delete(a.clone())
        .delete(b.clone())
        .delete(head.clone());
    assert_eq!(commit(store, &cleanup).await, Commit::Committed);
    assert!(scan_all(store, &child_kind, Some(&head), 10)
        .await
        .is_empty());
    assert!(get(store, &head).await.is_none());
    assert!(get(store, &elsewhere).await.is_some());
}

/// The total the snapshot cases keep constant across their documents.
const SNAPSHOT_TOTAL: i64 = 1000;
/// Documents in the snapshot cases' group.
const SNAPSHOT_DOCS: usize = 4;
/// `SNAPSHOT_TOTAL / SNAPSHOT_DOCS`: what each document starts with.
const SNAPSHOT_SHARE: i64 = SNAPSHOT_TOTAL / 4;
/// Transactions (and reads) in the snapshot cases.
const SNAPSHOT_ROUNDS: usize = 150;

fn amount(found: &Versioned) -> i64 {
    found
        .doc
        .get("n")
        .and_then(Value::as_i64)
        .unwrap_or(i64::MIN)
}

/// Writes `SNAPSHOT_DOCS` documents under `group` holding `SNAPSHOT_TOTAL` in all.
async fn seed_snapshot_group(store: &dyn DocumentStore, group: &Key, kind: &str) -> Vec<Key> {
    let keys: Vec<Key> = (0..SNAPSHOT_DOCS)
        .map(|i| group.child(kind, i.to_string()))
        .collect();
    let share = SNAPSHOT_SHARE;
    let mut txn = Transaction::new();
    for key in &keys {
        txn = txn.put(key.clone(), doc(&[("n", share.into())]));
    }
    assert_eq!(commit(store, &txn).await, Commit::Committed);
    keys
}

/// One optimistic transfer of `amount` from `from` to `to` (both in one group); a
/// conflict is fine (another transfer won).
async fn transfer(store: &dyn DocumentStore, from: &Key, to: &Key, amount: i64) {
    let found = ok(
        store.get_many(&[from.clone(), to.clone()]).await,
        "get_many",
    );
    let (Some(f), Some(t)) = (&found[0], &found[1]) else {
        panic!("transfer: {from} or {to} vanished");
    };
    let txn = Transaction::new()
        .expect(from.clone(), Some(f.version))
        .expect(to.clone(), Some(t.version))
        .put(
            from.clone(),
            doc(&[("n", (self::amount(f) - amount).into())]),
        )
        .put(to.clone(), doc(&[("n", (self::amount(t) + amount).into())]));
    let _ = commit(store, &txn).await;
}

/// `get_many` of keys that share one group is one atomic read of that group: while
/// transactions move amounts between its documents, every read sums to the same total.
pub async fn get_many_within_one_group_is_a_snapshot(store: &dyn DocumentStore) {
    let kind = fresh_kind("Snapshot");
    let group = Key::new(fresh_kind("SnapshotRoot"), "1").child_group("Group", "0");
    let keys = seed_snapshot_group(store, &group, &kind).await;
    let writer = async {
        for round in 0..SNAPSHOT_ROUNDS {
            let from = &keys[round % SNAPSHOT_DOCS];
            let to = &keys[(round * 7 + 1) % SNAPSHOT_DOCS];
            if from != to {
                transfer(store, from, to, [1, 2, 3, 4, 5][round % 5]).await;
            }
            tokio::task::yield_now().await;
        }
    };
    let reader = async {
        for round in 0..SNAPSHOT_ROUNDS {
            let found = ok(store.get_many(&keys).await, "get_many");
            let total: i64 = found.iter().map(|f| f.as_ref().map_or(0, amount)).sum();
            assert_eq!(
                total, SNAPSHOT_TOTAL,
                "read {round} saw a torn group: {found:?}"
            );
            tokio::task::yield_now().await;
        }
    };
    futures::join!(writer, reader);
}

/// A scan page that lists children of a parent in the parent's own group is one atomic
/// read of that group: while transactions delete documents and create new ones in
/// their place (keeping the total), a scan that answers in a single page sees every
/// amount exactly once. (Stores may split a scan into several pages; such a scan is
/// not checked here, and the mapper does not rely on it being a snapshot.)
pub async fn scan_page_within_one_group_is_a_snapshot(store: &dyn DocumentStore) {
    let kind = fresh_kind("PageSnapshot");
    let group = Key::new(fresh_kind("PageSnapshotRoot"), "1").child_group("Group", "0");
    let keys = seed_snapshot_group(store, &group, &kind).await;
    let writer = async {
        let mut live = keys.clone();
        for round in 0..SNAPSHOT_ROUNDS {
            // Move document `i` to a new name, as compaction replaces documents.
            let i = round % SNAPSHOT_DOCS;
            let Some(found) = get(store, &live[i]).await else {
                panic!("{} vanished", live[i]);
            };
            let renamed = group.child(kind.clone(), format!("m{round}"));
            let txn = Transaction::new()
                .expect(live[i].clone(), Some(found.version))
                .expect(renamed.clone(), None)
                .delete(live[i].clone())
                .put(renamed.clone(), found.doc.clone());
            assert_eq!(commit(store, &txn).await, Commit::Committed, "move {round}");
            live[i] = renamed;
            transfer(store, &live[i], &live[(i + 1) % SNAPSHOT_DOCS], 3).await;
            tokio::task::yield_now().await;
        }
    };
    let reader = async {
        let mut checked = 0;
        for round in 0..SNAPSHOT_ROUNDS {
            let page = ok(
                store
                    .scan(&Scan::new(kind.clone(), Some(group.clone())))
                    .await,
                "scan",
            );
            if page.next.is_none() {
                checked += 1;
                let total: i64 = page.items.iter().map(|(_, f)| amount(f)).sum();
                assert_eq!(
                    (page.items.len(), total),
                    (SNAPSHOT_DOCS, SNAPSHOT_TOTAL),
                    "scan {round} saw a torn group: {:?}",
                    page.items
                );
            }
            tokio::task::yield_now().await;
        }
        checked
    };
    let ((), checked) = futures::join!(writer, reader);
    tracing::debug!(checked, "single-page scans checked");
}

// ----------------------------------------------------------------------------------------
// Merges

const SUM_I64: Fold = Fold::SUM_I64;

fn write_id(writer: &str, seq: u64) -> WriteId {
    WriteId {
        writer: writer.into(),
        seq,
        at_ms: 1_000_000 + seq,
        horizon_ms: 0,
    }
}

async fn merge_ok(store: &dyn DocumentStore, merge: &Merge) -> Merged {
    ok(store.merge(merge).await, "merge")
}

/// A merge folds its operand into the property (the operand alone when the property is
/// absent) and records its write id; the same write id again, or an earlier one of the
/// same writer, is answered `AlreadyApplied` and changes nothing; other properties stay.
pub async fn merge_folds_and_applies_each_write_id_once(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("Merge"), "1");
    ok(
        store
            .insert(&key, doc(&[("n", 1.into()), ("text", "keep".into())]))
            .await,
        "insert",
    );
    let plus = |n: i64, writer: &str, seq| {
        Merge::new(key.clone(), "n", SUM_I64, n.into(), write_id(writer, seq))
    };
    assert_eq!(merge_ok(store, &plus(2, "a", 1)).await, Merged::Applied);
    assert_eq!(
        merge_ok(store, &plus(2, "a", 1)).await,
        Merged::AlreadyApplied
    );
    assert_eq!(merge_ok(store, &plus(5, "a", 2)).await, Merged::Applied);
    assert_eq!(
        merge_ok(store, &plus(7, "a", 1)).await,
        Merged::AlreadyApplied
    );
    assert_eq!(merge_ok(store, &plus(10, "b", 1)).await, Merged::Applied);
    let found = must_get(store, &key).await;
    assert_eq!(found.doc["n"], 18);
    assert_eq!(found.doc["text"], "keep");
    assert!(merge::applied(Some(&found.doc), "a", 2));
    assert!(merge::applied(Some(&found.doc), "b", 1));
    let absent = Merge::new(key.clone(), "m", Fold::MAX_I64, 4.into(), write_id("a", 3));
    assert_eq!(merge_ok(store, &absent).await, Merged::Applied);
    assert_eq!(must_get(store, &key).await.doc["m"], 4);
}

/// A merge into an absent document, or one whose guard property does not hold the
/// given string (or is present when it must be absent), answers `Missing` and writes
/// nothing: no document is created.
pub async fn merge_needs_the_document_and_its_guard(store: &dyn DocumentStore) {
    let kind = fresh_kind("MergeGuard");
    let absent = Key::new(kind.as_str(), "absent");
    let m = Merge::new(absent.clone(), "n", SUM_I64, 1.into(), write_id("a", 1));
    assert_eq!(merge_ok(store, &m).await, Merged::Missing);
    assert_eq!(get(store, &absent).await, None);

    let key = Key::new(kind.as_str(), "1");
    let version = ok(
        store
            .insert(&key, doc(&[("n", 1.into()), ("~inc", "x".into())]))
            .await,
        "insert",
    );
    let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write_id("a", 1));
    for guard in [Some("y".to_owned()), None] {
        let guarded = m.clone().only_if("~inc", guard);
        assert_eq!(merge_ok(store, &guarded).await, Merged::Missing);
    }
    let other = m.clone().only_if("~other", Some("x".to_owned()));
    assert_eq!(merge_ok(store, &other).await, Merged::Missing);
    assert_eq!(must_get(store, &key).await.version, version);
    let held = m.clone().only_if("~inc", Some("x".to_owned()));
    assert_eq!(merge_ok(store, &held).await, Merged::Applied);
    let unset = m.only_if("~other", None).clone();
    let unset = Merge {
        write: write_id("a", 2),
        ..unset
    };
    assert_eq!(merge_ok(store, &unset).await, Merged::Applied);
    assert_eq!(must_get(store, &key).await.doc["n"], 3);
}

/// A merge gives the document a new version: a commit expecting the version read before
/// it conflicts, so merges and read-fold-commit writers of one document never lose each
/// other's changes.
pub async fn merge_gives_a_new_version(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("MergeVersion"), "1");
    let before = ok(store.insert(&key, doc(&[("n", 1.into())])).await, "insert");
    let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write_id("a", 1));
    assert_eq!(merge_ok(store, &m).await, Merged::Applied);
    let after = must_get(store, &key).await;
    assert_ne!(after.version, before);
    let stale = Transaction::new()
        .expect(key.clone(), Some(before))
        .put(key.clone(), doc(&[("n", 100.into())]));
    assert!(matches!(
        commit(store, &stale).await,
        Commit::Conflict { .. }
    ));
    let twice = merge_ok(store, &m).await;
    assert_eq!(twice, Merged::AlreadyApplied);
    assert_eq!(must_get(store, &key).await.version, after.version);
}

/// The versions merges give are never handed out again: not by a later put, nor after a
/// delete and re-insert, so a commit expecting any of them conflicts (no ABA however the
/// store numbers the versions of merges).
pub async fn versions_not_reused_after_merges(store: &dyn DocumentStore) {
    // Four merges of writer `a` from sequence number `first` on, each version seen.
    async fn merge_four(store: &dyn DocumentStore, key: &Key, first: u64, seen: &mut Vec<Version>) {
        for seq in first..first + 4 {
            let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write_id("a", seq));
            assert_eq!(merge_ok(store, &m).await, Merged::Applied);
            seen.push(must_get(store, key).await.version);
        }
    }
    let key = Key::new(fresh_kind("MergeAba"), "1");
    let mut seen = vec![ok(
        store.insert(&key, doc(&[("n", 0.into())])).await,
        "insert",
    )];
    let fresh = |seen: &[Version], v: Version, what: &str| {
        assert!(
            !seen.contains(&v),
            "{what} reused version {v:?} (seen {seen:?})"
        );
    };
    merge_four(store, &key, 1, &mut seen).await;
    let v = ok(store.put(&key, doc(&[("n", 0.into())])).await, "put");
    fresh(&seen, v, "a put after merges");
    seen.push(v);
    merge_four(store, &key, 5, &mut seen).await;
    assert!(ok(store.delete(&key).await, "delete"));
    let v = ok(store.insert(&key, doc(&[("n", 7.into())])).await, "insert");
    fresh(&seen, v, "an insert after merges and a delete");
    for stale in seen {
        stale_put_conflicts(store, &key, stale).await;
    }
    assert_eq!(must_get(store, &key).await.doc, doc(&[("n", 7.into())]));
}

/// A sum leaving the bounds of its fold fails with `Overflow` naming the key and
/// property, and writes nothing (not even the write record); the bounds are those of
/// the property's type, so sums stay exact over the whole range of `i64` and `u64`.
pub async fn merge_overflow_writes_nothing(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("MergeOverflow"), "1");
    let start = doc(&[("n", (i64::MAX - 1).into()), ("u", (u64::MAX - 1).into())]);
    ok(store.insert(&key, start).await, "insert");
    let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write_id("a", 1));
    assert_eq!(merge_ok(store, &m).await, Merged::Applied);
    let version = must_get(store, &key).await.version;
    let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write_id("a", 2));
    match store.merge(&m).await {
        Err(Error::Overflow {
            key: at, property, ..
        }) => {
            assert_eq!((at, property.as_str()), (key.clone(), "n"));
        }
        other => panic!("expected Overflow, got {other:?}"),
    }
    let found = must_get(store, &key).await;
    assert_eq!(
        (found.version, &found.doc["n"]),
        (version, &i64::MAX.into())
    );
    assert!(!merge::applied(Some(&found.doc), "a", 2));
    let u64_sum = Fold::Sum {
        min: 0,
        max: u64::MAX.into(),
    };
    let m = Merge::new(key.clone(), "u", u64_sum, 1.into(), write_id("a", 3));
    assert_eq!(merge_ok(store, &m).await, Merged::Applied);
    assert_eq!(must_get(store, &key).await.doc["u"], u64::MAX);
    let m = Merge::new(key.clone(), "u", u64_sum, (-2).into(), write_id("a", 4));
    assert_eq!(merge_ok(store, &m).await, Merged::Applied);
    assert_eq!(must_get(store, &key).await.doc["u"], u64::MAX - 2);
}

/// Values outside what the built-in folds take, as operand or stored (a float, a string,
/// a number outside the property type's range, a set of objects or of the other kind of
/// element), are answered `Unsupported` and nothing is written: a merge never folds into
/// a value the entity could not read.
pub async fn merge_refuses_what_it_cannot_fold_exactly(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("MergeUnsupported"), "1");
    let start = doc(&[
        ("f", 1.5.into()),
        ("s", "x".into()),
        ("set", serde_json::json!(["a"])),
        ("ints", serde_json::json!([1, 2])),
        ("negative", (-3).into()),
        ("big", u64::MAX.into()),
        ("huge", serde_json::json!(1.234_567_890_123_456_8e29)),
        ("object", serde_json::json!({"n": 1})),
    ]);
    let version = ok(store.insert(&key, start).await, "insert");
    let u64_max = Fold::Max {
        min: 0,
        max: u64::MAX.into(),
    };
    let i32_sum = Fold::Sum {
        min: i32::MIN.into(),
        max: i32::MAX.into(),
    };
    let bytes = Fold::Union {
        elements: Elements::Integers { min: 0, max: 255 },
    };
    let cases = [
        ("f", SUM_I64, Value::from(1)),
        ("s", Fold::MAX_I64, Value::from(1)),
        ("n", SUM_I64, Value::from(0.5)),
        ("set", Fold::UNION_STRINGS, serde_json::json!([{"a": 1}])),
        ("set", Fold::UNION_STRINGS, serde_json::json!([1.5])),
        ("set", Fold::UNION_STRINGS, serde_json::json!([1])),
        ("ints", Fold::UNION_STRINGS, serde_json::json!(["a"])),
        ("ints", bytes, serde_json::json!([300])),
        ("negative", u64_max, Value::from(3)),
        ("negative", u64_max, Value::from(u64::MAX)),
        ("big", i32_sum, Value::from(1)),
        ("big", SUM_I64, Value::from(-1)),
        ("huge", SUM_I64, Value::from(1)),
        ("huge", Fold::MAX_I64, Value::from(1)),
        ("object", SUM_I64, Value::from(1)),
        ("absent", u64_max, Value::from(-1)),
        ("absent", i32_sum, Value::from(0.5)),
    ];
    for (seq, (property, fold, operand)) in (1..).zip(cases) {
        let m = Merge::new(
            key.clone(),
            property,
            fold,
            operand.clone(),
            write_id("a", seq),
        );
        assert_eq!(
            merge::reference(Some(&must_get(store, &key).await.doc), &m).ok(),
            Some(merge::Step::Answer(Merged::Unsupported)),
            "the reference: {property} {fold:?} {operand}"
        );
        assert_eq!(
            merge_ok(store, &m).await,
            Merged::Unsupported,
            "{property} {fold:?} {operand}"
        );
    }
    assert_eq!(must_get(store, &key).await.version, version);
}

/// A merge whose sequence number is a multiple of [`PRUNE_EVERY`] drops the record entries of other
/// writers older than its horizon and keeps the newer ones.
pub async fn merge_drops_records_older_than_the_horizon(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("MergeHorizon"), "1");
    ok(store.insert(&key, doc(&[("n", 0.into())])).await, "insert");
    let at = |writer: &str, seq, at_ms, horizon_ms| WriteId {
        writer: writer.into(),
        seq,
        at_ms,
        horizon_ms,
    };
    for write in [
        at("old", 1, 1_000, 0),
        at("mid", 1, 5_000, 0),
        at("new", PRUNE_EVERY, 9_000, 4_000),
    ] {
        let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write);
        assert_eq!(merge_ok(store, &m).await, Merged::Applied);
    }
    let found = must_get(store, &key).await;
    let record = found.doc[RECORD].as_object().expect("a record");
    let mut recorded: Vec<&str> = record.keys().map(String::as_str).collect();
    recorded.sort_unstable();
    assert_eq!(recorded, ["mid", "new"]);
    assert_eq!(record["new"], serde_json::json!([PRUNE_EVERY, 9_000]));
}

/// A random value for a merge of `fold` (stored or operand): over the whole range of the
/// values it takes (integers near the bounds of `i64` and `u64`, sets of strings with
/// escapes and of large integers), and one time in 8 a value of another type, which the
/// store must refuse as the reference does (`Unsupported`).
fn random_value(rng: &mut rand::rngs::StdRng, fold: Fold) -> Value {
    use rand::seq::IndexedRandom;
    use rand::RngExt;
    let integer = |rng: &mut rand::rngs::StdRng| -> Value {
        match rng.random_range(0..5) {
            0 => rng.random::<i64>().into(),
            1 => rng.random::<u64>().into(),
            2 => (i64::MAX - rng.random_range(0..3)).into(),
            3 => (i64::MIN + rng.random_range(0..3)).into(),
            _ => rng.random_range(-1000..1000_i64).into(),
        }
    };
    let text = |rng: &mut rand::rngs::StdRng| -> Value {
        let texts = ["a", "b", "a/b", "quote\"d", "\\", "é", "1", "", "tab\t"];
        (*texts.choose(rng).unwrap_or(&"a")).into()
    };
    let count = |rng: &mut rand::rngs::StdRng| -> Value {
        match rng.random_range(0..2) {
            0 => rng.random_range(0..4_u64).into(),
            _ => (u64::MAX - rng.random_range(0..2)).into(),
        }
    };
    let set = |rng: &mut rand::rngs::StdRng, element: &dyn Fn(&mut rand::rngs::StdRng) -> Value| {
        let mut items: Vec<Value> = Vec::new();
        for _ in 0..rng.random_range(0..4) {
            let item = element(rng);
            if !items.contains(&item) {
                items.push(item);
            }
        }
        Value::Array(items)
    };
    let strings = |rng: &mut rand::rngs::StdRng| set(rng, &text);
    let integers = |rng: &mut rand::rngs::StdRng| set(rng, &count);
    // Now and then a value of another type: the store must refuse it as the reference
    // does (`Unsupported`), stored or as the operand.
    let malformed = |rng: &mut rand::rngs::StdRng| -> Value {
        let odd = [
            serde_json::json!(1.5),
            serde_json::json!(1.234_567_890_123_456_8e29),
            serde_json::json!("7"),
            serde_json::json!({"n": 1}),
            serde_json::json!([1, "a"]),
            serde_json::json!(-1),
            serde_json::json!(u64::MAX),
            serde_json::json!(i64::MIN),
            serde_json::json!([-1]),
            serde_json::json!(null),
        ];
        odd.choose(rng).cloned().unwrap_or(Value::Null)
    };
    if rng.random_range(0..8) == 0 {
        return malformed(rng);
    }
    match fold {
        Fold::Union {
            elements: Elements::Strings,
        } => strings(rng),
        Fold::Union { .. } => integers(rng),
        Fold::Sum { min, max } if max - min < 1 << 40 => rng.random_range(-100..100_i64).into(),
        _ => integer(rng),
    }
}

/// Every built-in fold over the ranges the cases try: `i64`, `u64` and `i32` sums, `i64`
/// and `u64` maxima, an `i32` minimum, and unions of strings and of `u64`s.
fn every_fold() -> [Fold; 8] {
    let u64s = (0, i128::from(u64::MAX));
    let i32s = (i128::from(i32::MIN), i128::from(i32::MAX));
    [
        SUM_I64,
        Fold::Sum {
            min: u64s.0,
            max: u64s.1,
        },
        Fold::Sum {
            min: i32s.0,
            max: i32s.1,
        },
        Fold::MAX_I64,
        Fold::Max {
            min: u64s.0,
            max: u64s.1,
        },
        Fold::Min {
            min: i32s.0,
            max: i32s.1,
        },
        Fold::UNION_STRINGS,
        Fold::Union {
            elements: Elements::Integers {
                min: u64s.0,
                max: u64s.1,
            },
        },
    ]
}

/// For each built-in fold and random operands over the whole range of the values it
/// takes (integers near the bounds of `i64` and `u64`, sets of strings with escapes and
/// of large integers), and now and then a value of another type, stored or as the
/// operand, the store's result equals the reference fold's ([`merge::reference`]),
/// including which merges overflow and which are refused. The merges come from several
/// writers with sequence numbers out of order (a lower or equal one of a writer is
/// already applied), and some carry a guard that holds or not: the answer, the value and
/// the write record equal the reference's after every merge.
pub async fn merge_matches_the_reference_fold(store: &dyn DocumentStore) {
    use rand::{RngExt, SeedableRng};
    const WRITERS: [&str; 3] = ["w0", "w1", "w2"];
    const SEQS: u64 = 4;
    const GUARD: &str = "~g";
    let seed: u64 = rand::random();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let kind = fresh_kind("MergeReference");
    let folds = every_fold();
    for (i, fold) in folds.into_iter().enumerate() {
        for round in 0..24_u64 {
            let key = Key::new(kind.as_str(), format!("{i}.{round}"));
            let value = |rng: &mut rand::rngs::StdRng| random_value(rng, fold);
            let mut start = doc(&[]);
            if round % 4 != 0 {
                start.insert("v".to_owned(), value(&mut rng));
            }
            if round % 3 == 0 {
                start.insert(GUARD.to_owned(), "x".into());
            }
            ok(store.insert(&key, start.clone()).await, "insert");
            let mut expected = Some(start);
            for _ in 0..6 {
                let writer = WRITERS[rng.random_range(0..WRITERS.len())];
                let seq = rng.random_range(1..=SEQS);
                let m = Merge::new(
                    key.clone(),
                    "v",
                    fold,
                    value(&mut rng),
                    write_id(writer, seq),
                );
                let m = match rng.random_range(0..3) {
                    0 => m,
                    1 => m.only_if(GUARD, Some("x".to_owned())),
                    _ => m.only_if(GUARD, None),
                };
                let want = merge::reference(expected.as_ref(), &m);
                let got = store.merge(&m).await;
                let context = format!("seed {seed}, {fold:?}, merge {m:?}, into {expected:?}");
                match (want, got) {
                    (Ok(merge::Step::Write(doc)), Ok(Merged::Applied)) => expected = Some(doc),
                    (Ok(merge::Step::Answer(want)), Ok(got)) => assert_eq!(got, want, "{context}"),
                    (Err(Error::Overflow { .. }), Err(Error::Overflow { .. })) => {}
                    (want, got) => panic!("{context}: expected {want:?}, got {got:?}"),
                }
                let found = must_get(store, &key).await.doc;
                let expected_doc = expected.as_ref().expect("present");
                assert_eq!(found.get("v"), expected_doc.get("v"), "{context}");
                for writer in WRITERS {
                    for seq in 1..=SEQS {
                        assert_eq!(
                            merge::applied(Some(&found), writer, seq),
                            merge::applied(Some(expected_doc), writer, seq),
                            "{context}: the record of {writer}.{seq}"
                        );
                    }
                }
            }
        }
    }
}

/// Concurrent merges of one document (distinct writers) never conflict and lose nothing.
pub async fn concurrent_merges_are_exact(store: &dyn DocumentStore) {
    const WRITERS: u64 = 8;
    const EACH: u64 = 25;
    let key = Key::new(fresh_kind("MergeRace"), "1");
    ok(store.insert(&key, doc(&[("n", 0.into())])).await, "insert");
    let writers = (0..WRITERS).map(|w| {
        let key = key.clone();
        async move {
            for seq in 1..=EACH {
                let id = write_id(&format!("w{w}"), seq);
                let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), id);
                assert_eq!(merge_ok(store, &m).await, Merged::Applied);
            }
        }
    });
    join_all(writers).await;
    assert_eq!(must_get(store, &key).await.doc["n"], WRITERS * EACH);
}

/// `make_durable` of documents present and absent, in one group and in several, changes
/// nothing a read shows: the same versions (a commit expecting them still commits), absent
/// keys stay absent, and the next write still gets a version never handed out.
pub async fn make_durable_changes_nothing(store: &dyn DocumentStore) {
    let kind = fresh_kind("Durable");
    let (a, b, absent) = (
        Key::new(kind.as_str(), "a"),
        Key::new(kind.as_str(), "b"),
        Key::new(kind.as_str(), "absent"),
    );
    let va = ok(store.insert(&a, doc(&[("n", 1.into())])).await, "insert");
    let vb = ok(store.insert(&b, doc(&[("n", 2.into())])).await, "insert");
    ok(store.make_durable(&[]).await, "make_durable of no key");
    ok(
        store
            .make_durable(&[a.clone(), b.clone(), absent.clone()])
            .await,
        "make_durable",
    );
    assert_eq!(must_get(store, &a).await.version, va);
    assert_eq!(must_get(store, &b).await.version, vb);
    assert!(
        get(store, &absent).await.is_none(),
        "an absent key stays absent"
    );
    let txn = Transaction::new()
        .expect(a.clone(), Some(va))
        .put(a.clone(), doc(&[("n", 3.into())]));
    assert_eq!(commit(store, &txn).await, Commit::Committed);
    let after = must_get(store, &a).await.version;
    assert!(
        after != va && after != vb,
        "a new version after make_durable"
    );
}

/// A lookup answers, for its keys, what `get_many` answers (in order, `None` for missing
/// keys), and for each scan a first page as `scan` would (here: everything, in one page,
/// in any order); with records off, documents equal the stored ones but for their write
/// record; with or without a prefetch of some or all of the listed documents.
pub async fn lookup_answers_as_get_many_and_scan(store: &dyn DocumentStore) {
    let kind = fresh_kind("Lookup");
    let root = Key::new(kind.as_str(), "1");
    ok(store.insert(&root, doc(&[("n", 1.into())])).await, "insert");
    let children: Vec<Key> = (0..3)
        .map(|i| root.child_group("Part", i.to_string()))
        .collect();
    for (i, child) in (0..).zip(&children) {
        ok(
            store.insert(child, doc(&[("i", i.into())])).await,
            "insert child",
        );
    }
    let m = Merge::new(root.clone(), "n", SUM_I64, 1.into(), write_id("w", 1));
    assert_eq!(merge_ok(store, &m).await, Merged::Applied);
    let keys = vec![
        root.clone(),
        Key::new(kind.as_str(), "missing"),
        children[1].clone(),
    ];
    let scans = vec![
        Scan::new("Part", Some(root.clone())),
        Scan::new("Nothing", Some(root.clone())),
    ];
    let prefetches = [
        Vec::new(),
        children.clone(),
        vec![children[0].clone(), Key::new("Part", "elsewhere")],
    ];
    let mut cases = Vec::new();
    for records in [true, false] {
        for prefetch in &prefetches {
            cases.push((records, prefetch.clone()));
        }
    }
    for (records, prefetch) in cases {
        let lookup = Lookup {
            keys: keys.clone(),
            scans: scans.clone(),
            records,
            prefetch,
        };
        let found = ok(store.lookup(&lookup).await, "lookup");
        let want = ok(store.get_many(&keys).await, "get_many");
        assert_eq!(found.docs.len(), want.len());
        for (got, want) in found.docs.iter().zip(&want) {
            let strip = |v: &Option<Versioned>| {
                v.clone().map(|mut v| {
                    if !records {
                        v.doc.remove(RECORD);
                    }
                    v
                })
            };
            assert_eq!(strip(got), strip(want), "records {records}");
        }
        if records {
            assert!(found.docs[0]
                .as_ref()
                .is_some_and(|d| merge::applied(Some(&d.doc), "w", 1)));
        }
        assert_eq!(found.pages.len(), 2);
        let listed: BTreeSet<Key> = found.pages[0]
            .items
            .iter()
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(listed, children.iter().cloned().collect());
        for (key, got) in &found.pages[0].items {
            let want = ok(store.get(key).await, "get");
            let strip = |v: Option<Versioned>| {
                v.map(|mut v| {
                    if !records {
                        v.doc.remove(RECORD);
                    }
                    v
                })
            };
            assert_eq!(strip(Some(got.clone())), strip(want), "page item {key}");
        }
        assert!(found.pages[0].next.is_none());
        assert!(found.pages[1].items.is_empty() && found.pages[1].next.is_none());
    }
}

// ----------------------------------------------------------------------------------------
// Key-group ownership (`store::ownership`)

/// A document owned by group `group` until `until_ms`, with `n`.
fn owned_doc(group: &str, until_ms: u64, n: i64) -> Document {
    let owner = Owner {
        group: group.to_owned(),
        until_ms,
        txn: None,
    };
    doc(&[("n", n.into()), (OWNER, owner.to_value())])
}

#[track_caller]
fn assert_grouped<T: Debug>(result: Result<T>, key: &Key, group: &str, what: &str) {
    match result {
        Err(Error::Grouped {
            key: refused,
            group: owner,
            ..
        }) => {
            assert_eq!(&refused, key, "{what}: refused the wrong key");
            assert_eq!(owner, group, "{what}: named the wrong group");
        }
        other => panic!("{what}: expected Grouped, got {other:?}"),
    }
}

#[track_caller]
fn assert_lost<T: Debug>(result: Result<T>, key: &Key, group: &str, what: &str) {
    match result {
        Err(Error::GroupLost {
            key: refused,
            group: owner,
        }) => {
            assert_eq!(&refused, key, "{what}: refused the wrong key");
            assert_eq!(owner, group, "{what}: named the wrong group");
        }
        other => panic!("{what}: expected GroupLost, got {other:?}"),
    }
}

/// A document a live key group owns refuses every write without the group's token
/// (`put`, `delete`, `merge`, a commit that writes it or only expects it) with
/// `Grouped`, naming the key and the group, and writes nothing; the group's own
/// transaction commits.
pub async fn owned_documents_take_only_their_groups_writes(store: &dyn DocumentStore) {
    let kind = fresh_kind("Owned");
    let key = Key::new(kind.as_str(), "1");
    let now = ok(store.now_ms().await, "now_ms");
    let until = now + 600_000;
    let version = ok(
        store.put(&key, owned_doc("g1", until, 1)).await,
        "put owned",
    );
    match store.put(&key, doc(&[("n", 2.into())])).await {
        Err(Error::Grouped { until_ms, .. }) => assert_eq!(until_ms, until),
        other => panic!("put: expected Grouped, got {other:?}"),
    }
    assert_grouped(store.delete(&key).await, &key, "g1", "delete");
    let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write_id("a", 1));
    assert_grouped(store.merge(&m).await, &key, "g1", "merge");
    let write = Transaction::new()
        .expect(key.clone(), Some(version))
        .put(key.clone(), doc(&[("n", 3.into())]));
    assert_grouped(store.commit(&write).await, &key, "g1", "commit");
    let blind = Transaction::new().put(key.clone(), doc(&[("n", 3.into())]));
    assert_grouped(store.commit(&blind).await, &key, "g1", "blind commit");
    let other = Key::new(kind.as_str(), "2");
    let reading = Transaction::new()
        .expect(key.clone(), Some(version))
        .put(other.clone(), doc(&[("n", 1.into())]));
    if reading.single_group() || store.cross_group_transactions() {
        assert_grouped(
            store.commit(&reading).await,
            &key,
            "g1",
            "commit expecting it",
        );
        assert_eq!(get(store, &other).await, None, "a refused commit wrote");
    }
    assert_eq!(
        must_get(store, &key).await.version,
        version,
        "a refused write wrote"
    );
    let stranger = write.clone().owned_by("g2");
    assert_grouped(
        store.commit(&stranger).await,
        &key,
        "g1",
        "another group's commit",
    );
    assert_eq!(must_get(store, &key).await.version, version);
    let own = Transaction::new()
        .expect(key.clone(), Some(version))
        .put(key.clone(), owned_doc("g1", until, 5))
        .owned_by("g1");
    assert_eq!(commit(store, &own).await, Commit::Committed);
    assert_eq!(must_get(store, &key).await.doc["n"], 5);
    // Released by its group, the document takes every write again.
    let release = Transaction::new()
        .put(key.clone(), doc(&[("n", 6.into())]))
        .owned_by("g1");
    assert_eq!(commit(store, &release).await, Commit::Committed);
    ok(
        store.put(&key, doc(&[("n", 7.into())])).await,
        "put released",
    );
    assert_eq!(merge_ok(store, &m).await, Merged::Applied);
    assert_eq!(must_get(store, &key).await.doc["n"], 8);
}

/// A transaction with a group's token writes documents that group owns, and absent
/// ones; a present document it does not own refuses it with `GroupLost`, and nothing
/// of it is applied.
pub async fn a_groups_transaction_takes_only_owned_or_absent_documents(store: &dyn DocumentStore) {
    let kind = fresh_kind("GroupTxn");
    let owned = Key::new(kind.as_str(), "owned");
    let fresh = owned.child("Part", "new");
    let free = owned.child("Part", "free");
    let until = ok(store.now_ms().await, "now_ms") + 600_000;
    let version = ok(store.put(&owned, owned_doc("g", until, 1)).await, "put");
    ok(store.put(&free, doc(&[("n", 1.into())])).await, "put");
    let refused = Transaction::new()
        .expect(owned.clone(), Some(version))
        .put(owned.clone(), owned_doc("g", until, 2))
        .put(fresh.clone(), doc(&[("n", 1.into())]))
        .put(free.clone(), doc(&[("n", 2.into())]))
        .owned_by("g");
    if !refused.single_group() && !store.cross_group_transactions() {
        return;
    }
    assert_lost(
        store.commit(&refused).await,
        &free,
        "g",
        "commit over a free document",
    );
    assert_eq!(
        must_get(store, &owned).await.version,
        version,
        "nothing applied"
    );
    assert_eq!(get(store, &fresh).await, None, "nothing applied");
    let accepted = Transaction::new()
        .expect(owned.clone(), Some(version))
        .put(owned.clone(), owned_doc("g", until, 2))
        .put(fresh.clone(), doc(&[("n", 1.into())]))
        .owned_by("g");
    assert_eq!(commit(store, &accepted).await, Commit::Committed);
    assert_eq!(must_get(store, &fresh).await.doc["n"], 1);
}

/// Once its lease has passed (by the store's clock), a document is free: writes without
/// a token apply, and its former group's transactions get `GroupLost`.
pub async fn a_passed_lease_frees_the_document(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("Lease"), "1");
    let past = ok(store.now_ms().await, "now_ms").saturating_sub(1);
    ok(store.put(&key, owned_doc("g", past, 1)).await, "put");
    let txn = Transaction::new()
        .put(key.clone(), owned_doc("g", past, 2))
        .owned_by("g");
    assert_lost(
        store.commit(&txn).await,
        &key,
        "g",
        "the group after its lease",
    );
    let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write_id("a", 1));
    assert_eq!(merge_ok(store, &m).await, Merged::Applied);
    ok(store.put(&key, doc(&[("n", 5.into())])).await, "put");
    assert!(ok(store.delete(&key).await, "delete"));
}

/// An ownership property that is not `{"group": <string>, "until": <integer>}` owns
/// nothing: every write applies, and no group's transaction takes the document.
pub async fn malformed_owners_own_nothing(store: &dyn DocumentStore) {
    let kind = fresh_kind("BadOwner");
    let far = ok(store.now_ms().await, "now_ms") + 600_000;
    let bad = [
        serde_json::json!("g"),
        serde_json::json!(["g", far]),
        serde_json::json!({"group": 7, "until": far}),
        serde_json::json!({"group": "g", "until": -1}),
        serde_json::json!({"group": "g", "until": 1.5}),
        serde_json::json!({"group": "g", "until": far.to_string()}),
        serde_json::json!({"group": "g"}),
    ];
    for (i, owner) in bad.into_iter().enumerate() {
        let key = Key::new(kind.as_str(), i.to_string());
        let stored = doc(&[("n", 1.into()), (OWNER, owner.clone())]);
        ok(store.put(&key, stored.clone()).await, "put");
        let txn = Transaction::new().put(key.clone(), stored).owned_by("g");
        assert_lost(
            store.commit(&txn).await,
            &key,
            "g",
            &format!("owner {owner}"),
        );
        let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write_id("a", 1));
        assert_eq!(merge_ok(store, &m).await, Merged::Applied, "owner {owner}");
        ok(store.put(&key, doc(&[("n", 1.into())])).await, "put");
    }
}

/// A document a group's transaction holds (`~own.txn`) stays owned after its lease has
/// passed: writes without the token are refused with `Grouped`, the group's own commit
/// settles it. A `txn` that is not a string owns nothing.
pub async fn a_held_document_stays_owned_past_its_lease(store: &dyn DocumentStore) {
    let kind = fresh_kind("Held");
    let key = Key::new(kind.as_str(), "1");
    let past = ok(store.now_ms().await, "now_ms").saturating_sub(1);
    let held = Owner {
        group: "g".to_owned(),
        until_ms: past,
        txn: Some("t1".to_owned()),
    };
    let version = ok(
        store
            .put(&key, doc(&[("n", 1.into()), (OWNER, held.to_value())]))
            .await,
        "put",
    );
    assert_grouped(
        store.put(&key, doc(&[("n", 2.into())])).await,
        &key,
        "g",
        "put",
    );
    let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write_id("a", 1));
    assert_grouped(store.merge(&m).await, &key, "g", "merge");
    assert_eq!(must_get(store, &key).await.version, version);
    let settle = Transaction::new()
        .expect(key.clone(), Some(version))
        .put(key.clone(), owned_doc("g", past, 2))
        .owned_by("g");
    assert_eq!(commit(store, &settle).await, Commit::Committed);
    // Settled, the lease alone counts: it has passed.
    ok(
        store.put(&key, doc(&[("n", 3.into())])).await,
        "put after settling",
    );
    let odd = Key::new(kind.as_str(), "2");
    let bad = serde_json::json!({"group": "g", "until": past, "txn": 7});
    ok(store.put(&odd, doc(&[(OWNER, bad)])).await, "put");
    ok(
        store.put(&odd, doc(&[("n", 1.into())])).await,
        "a txn that is no string",
    );
}
