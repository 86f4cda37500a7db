//! The cases of transactions: commits, their conflicts, concurrent commits, and the
//! snapshots reads take within one entity group.

use super::{commit, doc, fresh_kind, get, must_get, ok, scan_all};
use crate::document::{Document, Value, Version, Versioned};
use crate::error::Error;
use crate::key::Key;
use crate::store::{Commit, DocumentStore, Lookup, Scan, Transaction};
use futures::future::join_all;
use std::collections::BTreeSet;

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

/// `commit_versioned` commits as `commit` does. Where it tells the versions of a
/// committed transaction, it tells one per write, in order: the version a read answers
/// right after for a put or a write of the owner alone, `None` for a delete and for the
/// owner written to an absent document. It tells none for a conflict.
pub async fn a_versioned_commit_tells_the_versions_it_gave(store: &dyn DocumentStore) {
    let kind = fresh_kind("Versioned");
    let a = Key::new(kind, "a");
    let (part, gone, absent) = (
        a.child("Part", "x"),
        a.child("Part", "gone"),
        a.child("Part", "absent"),
    );
    let va = ok(store.insert(&a, doc(&[("n", 1.into())])).await, "insert a");
    ok(
        store.insert(&gone, doc(&[("n", 1.into())])).await,
        "insert gone",
    );
    let txn = Transaction::new()
        .expect(a.clone(), Some(va))
        .put(a.clone(), doc(&[("n", 2.into())]))
        .put(part.clone(), doc(&[("p", true.into())]))
        .delete(gone.clone())
        .own(absent.clone(), None);
    let answer = ok(store.commit_versioned(&txn).await, "commit_versioned");
    assert_eq!(answer.outcome, Commit::Committed);
    assert_eq!(must_get(store, &a).await.doc, doc(&[("n", 2.into())]));
    assert_eq!(get(store, &gone).await, None);
    assert_eq!(get(store, &absent).await, None);
    if let Some(versions) = answer.versions {
        let now = vec![
            Some(must_get(store, &a).await.version),
            Some(must_get(store, &part).await.version),
            None,
            None,
        ];
        assert_eq!(
            versions, now,
            "the versions told for put, put, delete, owner of none"
        );
        let own = Transaction::new()
            .expect(a.clone(), now[0])
            .own(a.clone(), None);
        let answer = ok(
            store.commit_versioned(&own).await,
            "commit_versioned of the owner",
        );
        assert_eq!(answer.outcome, Commit::Committed);
        if let Some(versions) = answer.versions {
            let version = must_get(store, &a).await.version;
            assert_eq!(
                versions,
                vec![Some(version)],
                "the version told for the owner"
            );
            assert_ne!(
                Some(version),
                now[0],
                "a write of the owner alone kept the version"
            );
        }
    }
    let stale = Transaction::new()
        .expect(a.clone(), Some(va))
        .put(a.clone(), doc(&[("n", 9.into())]));
    let answer = ok(
        store.commit_versioned(&stale).await,
        "stale commit_versioned",
    );
    assert!(
        matches!(answer.outcome, Commit::Conflict { .. }),
        "{answer:?}"
    );
    assert_eq!(answer.versions, None, "versions told for a conflict");
    assert_eq!(must_get(store, &a).await.doc, doc(&[("n", 2.into())]));
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
    assert!(
        get(store, &head.child(child_kind.clone(), "c"))
            .await
            .is_none()
    );
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
    assert!(
        scan_all(store, &child_kind, Some(&head), 10)
            .await
            .is_empty()
    );
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

/// One optimistic transfer of `amount` from `from` to `to` (in one group, or in two on a
/// store that commits across groups); a conflict is fine (another transfer won).
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

/// `SNAPSHOT_ROUNDS` transfers among `keys` (`SNAPSHOT_DOCS` of them), round `r` from
/// key `r` to key `r * step + 1` (modulo their number), yielding between two.
async fn transfers(store: &dyn DocumentStore, keys: &[Key], step: usize) {
    for round in 0..SNAPSHOT_ROUNDS {
        let from = &keys[round % SNAPSHOT_DOCS];
        let to = &keys[(round * step + 1) % SNAPSHOT_DOCS];
        if from != to {
            transfer(store, from, to, [1, 2, 3, 4, 5][round % 5]).await;
        }
        tokio::task::yield_now().await;
    }
}

/// `get_many` of keys that share one group is one atomic read of that group: while
/// transactions move amounts between its documents, every read sums to the same total.
pub async fn get_many_within_one_group_is_a_snapshot(store: &dyn DocumentStore) {
    let kind = fresh_kind("Snapshot");
    let group = Key::new(fresh_kind("SnapshotRoot"), "1").child_group("Group", "0");
    let keys = seed_snapshot_group(store, &group, &kind).await;
    let writer = transfers(store, &keys, 7);
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

/// Where the store says so ([`DocumentStore::snapshot_lookups`]), one lookup is one atomic
/// read of everything it answers, across entity groups: while transactions move amounts
/// between documents of four groups (two read by key, two listed by the lookup's scan as
/// children in groups of their own), every lookup whose scan answers in one page sees the
/// total, with write records and without, prefetched or not. A store that does not say so
/// (or does not commit across groups) is not checked.
pub async fn a_snapshot_lookup_is_one_instant_of_every_group(store: &dyn DocumentStore) {
    if !store.snapshot_lookups() || !store.cross_group_transactions() {
        return;
    }
    let kind = fresh_kind("Instant");
    let parent = Key::new(fresh_kind("InstantRoot"), "p");
    let by_key: Vec<Key> = (0..2)
        .map(|i| Key::new(kind.as_str(), i.to_string()))
        .collect();
    let listed: Vec<Key> = (0..2)
        .map(|i| parent.child_group(kind.clone(), i.to_string()))
        .collect();
    let all: Vec<Key> = by_key.iter().chain(&listed).cloned().collect();
    let mut seed = Transaction::new();
    for key in &all {
        seed = seed.put(key.clone(), doc(&[("n", SNAPSHOT_SHARE.into())]));
    }
    assert_eq!(commit(store, &seed).await, Commit::Committed);
    let writer = transfers(store, &all, 3);
    let reader = async {
        let mut checked = 0;
        for round in 0..SNAPSHOT_ROUNDS {
            let lookup = Lookup {
                keys: by_key.clone(),
                scans: vec![Scan::new(kind.clone(), Some(parent.clone()))],
                records: round % 2 == 0,
                writer: None,
                prefetch: if round % 3 == 0 {
                    listed.clone()
                } else {
                    Vec::new()
                },
            };
            let found = ok(store.lookup(&lookup).await, "lookup");
            if found.pages.iter().all(|page| page.next.is_none()) {
                checked += 1;
                let docs = found.docs.iter().flatten();
                let items = found
                    .pages
                    .iter()
                    .flat_map(|p| p.items.iter().map(|(_, d)| d));
                let total: i64 = docs.chain(items).map(amount).sum();
                assert_eq!(
                    total, SNAPSHOT_TOTAL,
                    "lookup {round} saw the groups at different instants: {found:?}"
                );
            }
            tokio::task::yield_now().await;
        }
        checked
    };
    let ((), checked) = futures::join!(writer, reader);
    tracing::debug!(checked, "snapshot lookups checked");
}
