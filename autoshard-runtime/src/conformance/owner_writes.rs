//! The cases of writes of the owner alone ([`Write::Own`](crate::store::Write::Own)):
//! what a key group writes to join, renew and hand back a document. They change only the
//! owner, follow the ownership rule as any write, check what they expect, and never bring
//! a version back.

use super::merges::{SUM_I64, merge_ok, write_id};
use super::ownership::{assert_grouped, assert_lost};
use super::{commit, doc, fresh_kind, get, must_get, ok};
use crate::document::Versioned;
use crate::key::Key;
use crate::store::merge::{Merge, Merged};
use crate::store::ownership::{OWNER, Owner};
use crate::store::{Commit, DocumentStore, Transaction};

/// A write of the owner alone ([`Write::Own`](crate::store::Write::Own)) sets or takes out
/// the document's owner with a new version, leaving every other property and the write
/// record as they were; of an absent document it writes nothing. It follows the ownership
/// rule as any write: refused without the token of the group that owns the document, taken
/// with it.
pub async fn the_owner_alone_changes_only_the_owner(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("OwnAlone"), "1");
    let absent = key.child("Part", "absent");
    let plain = doc(&[("n", 1.into()), ("s", "text".into())]);
    ok(store.put(&key, plain).await, "put");
    let m = Merge::new(key.clone(), "n", SUM_I64, 2.into(), write_id("a", 1));
    assert_eq!(merge_ok(store, &m).await, Merged::Applied);
    let before = must_get(store, &key).await;
    let owner = Owner {
        group: "g".to_owned(),
        until_ms: ok(store.now_ms().await, "now_ms") + 600_000,
        txn: None,
    };
    let stamp = Transaction::new()
        .expect(key.clone(), Some(before.version))
        .own(key.clone(), Some(owner.clone()))
        .own(absent.clone(), Some(owner.clone()));
    assert_eq!(commit(store, &stamp).await, Commit::Committed);
    let stamped = must_get(store, &key).await;
    assert_ne!(
        stamped.version, before.version,
        "the owner alone: a new version"
    );
    let mut expected = before.doc.clone();
    expected.insert(OWNER.to_owned(), owner.to_value());
    assert_eq!(
        stamped.doc, expected,
        "the owner alone: only the owner changed"
    );
    assert_eq!(
        get(store, &absent).await,
        None,
        "an absent document stays absent"
    );
    let untokened = Transaction::new().own(key.clone(), None);
    assert_grouped(
        store.commit(&untokened).await,
        &key,
        "g",
        "the owner without a token",
    );
    // The same, expecting the version it has (a group's join or release of one document).
    let at_version = || {
        Transaction::new()
            .expect(key.clone(), Some(stamped.version))
            .own(key.clone(), None)
    };
    assert_grouped(
        store.commit(&at_version()).await,
        &key,
        "g",
        "the owner at its version without a token",
    );
    assert_grouped(
        store.commit(&at_version().owned_by("h")).await,
        &key,
        "g",
        "the owner at its version with another group's token",
    );
    let stale = Transaction::new()
        .expect(key.clone(), Some(before.version))
        .own(key.clone(), None)
        .owned_by("g");
    assert_eq!(
        commit(store, &stale).await,
        Commit::Conflict { key: key.clone() },
        "the owner at a version it no longer has"
    );
    let back = Transaction::new()
        .expect(key.clone(), Some(stamped.version))
        .own(key.clone(), None)
        .owned_by("g");
    assert_eq!(commit(store, &back).await, Commit::Committed);
    let freed = must_get(store, &key).await;
    assert_ne!(freed.version, stamped.version, "taken out: a new version");
    assert_eq!(freed.doc, before.doc, "taken out: the rest as before");
    let lost = Transaction::new()
        .expect(key.clone(), Some(freed.version))
        .own(key.clone(), Some(owner.clone()))
        .owned_by("g");
    assert_lost(
        store.commit(&lost).await,
        &key,
        "g",
        "the owner at its version, with the token of a group that owns it no more",
    );
    assert_eq!(
        merge_ok(store, &m).await,
        Merged::AlreadyApplied,
        "the write record kept"
    );
}

/// A write of the owner alone that also expects another document of its entity group
/// absent (a key group's join of a member's main document, expecting the member's intent
/// document as read) conflicts on that document when it exists, in either order of the
/// expectations, and writes nothing; while it is absent the owner is written.
pub async fn the_owner_alone_expecting_a_document_absent_conflicts_when_it_exists(
    store: &dyn DocumentStore,
) {
    let key = Key::new(fresh_kind("OwnBeside"), "1");
    let beside = key.child("Intent", "x");
    ok(store.put(&key, doc(&[("n", 1.into())])).await, "put");
    let owner = Owner {
        group: "g".to_owned(),
        until_ms: ok(store.now_ms().await, "now_ms") + 600_000,
        txn: None,
    };
    let join = |version, beside_first: bool| {
        let txn = Transaction::new();
        let txn = if beside_first {
            txn.expect(beside.clone(), None)
                .expect(key.clone(), Some(version))
        } else {
            txn.expect(key.clone(), Some(version))
                .expect(beside.clone(), None)
        };
        txn.own(key.clone(), Some(owner.clone()))
    };
    ok(
        store.put(&beside, doc(&[("n", 2.into())])).await,
        "put beside",
    );
    let before = must_get(store, &key).await;
    for beside_first in [true, false] {
        assert_eq!(
            commit(store, &join(before.version, beside_first)).await,
            Commit::Conflict {
                key: beside.clone()
            },
            "the document beside exists (expected first: {beside_first})"
        );
        assert_eq!(
            must_get(store, &key).await,
            before,
            "a join that conflicts writes nothing"
        );
    }
    assert!(ok(store.delete(&beside).await, "delete beside"));
    assert_eq!(
        commit(store, &join(before.version, false)).await,
        Commit::Committed,
        "the document beside absent"
    );
    let joined = must_get(store, &key).await;
    assert_eq!(Owner::of(&joined.doc), Some(owner.clone()), "owned");
    assert_eq!(
        get(store, &beside).await,
        None,
        "the document beside stays absent"
    );
}

/// The writes a round of [`owner_writes_never_bring_a_version_back`] adds to a commit.
type Writes = fn(Transaction, &Key, &Owner) -> Transaction;

/// Writes of the owner alone never bring a version back: not several in one commit, not
/// beside a put or a delete of the same document, not across a delete and a new insert,
/// nor while other documents of its entity group are written. Each commit gives the
/// document a version it never had, and a commit expecting any earlier one conflicts.
pub async fn owner_writes_never_bring_a_version_back(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("OwnVersions"), "1");
    let sibling = key.child("Part", "s");
    let owner = Owner {
        group: "g".to_owned(),
        until_ms: ok(store.now_ms().await, "now_ms") + 600_000,
        txn: None,
    };
    // A commit of `txn` as the document now stands: with the group's token when it owns
    // the document (its own writes), without one when nobody does.
    let as_found = |txn: Transaction, found: &Versioned| {
        if Owner::of(&found.doc).is_some() {
            txn.owned_by("g")
        } else {
            txn
        }
    };
    ok(store.insert(&key, doc(&[("n", 1.into())])).await, "insert");
    let mut found = must_get(store, &key).await;
    let mut seen = vec![found.version];
    let rounds: [(&str, Writes); 5] = [
        ("the owner twice", |t, k, o| {
            t.own(k.clone(), Some(o.clone())).own(k.clone(), None)
        }),
        ("the owner, then a put", |t, k, o| {
            t.own(k.clone(), Some(o.clone()))
                .put(k.clone(), doc(&[("n", 2.into())]))
        }),
        ("a put, then the owner", |t, k, o| {
            t.put(k.clone(), doc(&[("n", 3.into())]))
                .own(k.clone(), Some(o.clone()))
        }),
        ("the owner taken out, then set", |t, k, o| {
            t.own(k.clone(), None).own(k.clone(), Some(o.clone()))
        }),
        ("the owner, then a delete", |t, k, o| {
            t.own(k.clone(), Some(o.clone())).delete(k.clone())
        }),
    ];
    for (what, writes) in rounds {
        for round in 0..3 {
            let set = (round % 2 == 0).then(|| owner.clone());
            let txn = Transaction::new()
                .expect(key.clone(), Some(found.version))
                .own(key.clone(), set);
            let txn = as_found(txn, &found);
            assert_eq!(commit(store, &txn).await, Commit::Committed, "{what}: own");
            found = must_get(store, &key).await;
            let version = found.version;
            assert!(
                !seen.contains(&version),
                "{what}: the owner alone reused {version:?}"
            );
            seen.push(version);
        }
        ok(
            store.put(&sibling, doc(&[("n", 0.into())])).await,
            "put sibling",
        );
        let txn = Transaction::new().expect(key.clone(), Some(found.version));
        let txn = as_found(writes(txn, &key, &owner), &found);
        assert_eq!(commit(store, &txn).await, Commit::Committed, "{what}");
        if get(store, &key).await.is_none() {
            ok(
                store.insert(&key, doc(&[("n", 4.into())])).await,
                "insert again",
            );
        }
        found = must_get(store, &key).await;
        let version = found.version;
        assert!(!seen.contains(&version), "{what}: reused {version:?}");
        for stale in &seen {
            let txn = Transaction::new()
                .expect(key.clone(), Some(*stale))
                .put(key.clone(), doc(&[("n", 99.into())]));
            assert_eq!(
                commit(store, &as_found(txn, &found)).await,
                Commit::Conflict { key: key.clone() },
                "{what}: a commit expecting the earlier {stale:?}"
            );
        }
        seen.push(version);
    }
}
