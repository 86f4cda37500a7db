//! The cases of key-group ownership (`store::ownership`): owned documents take only
//! their group's writes, until the lease passes. Writes of the owner alone: `owner_writes.rs`.

use super::merges::{SUM_I64, merge_ok, write_id};
use super::{commit, doc, fresh_kind, get, must_get, ok};
use crate::document::Document;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::merge::{Merge, Merged};
use crate::store::ownership::{OWNER, Owner};
use crate::store::{Commit, DocumentStore, Transaction};
use std::fmt::Debug;

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
pub(super) fn assert_grouped<T: Debug>(result: Result<T>, key: &Key, group: &str, what: &str) {
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
pub(super) fn assert_lost<T: Debug>(result: Result<T>, key: &Key, group: &str, what: &str) {
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
    let values = Transaction::new()
        .expect(key.clone(), Some(version))
        .put_values(key.clone(), doc(&[("n", 3.into())]));
    assert_grouped(store.commit(&values).await, &key, "g1", "values commit");
    assert_grouped(
        store.commit(&values.clone().owned_by("g2")).await,
        &key,
        "g1",
        "another group's values commit",
    );
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
    let own_values = Transaction::new()
        .expect(key.clone(), Some(must_get(store, &key).await.version))
        .put_values(key.clone(), owned_doc("g1", until, 5))
        .owned_by("g1");
    assert_eq!(commit(store, &own_values).await, Commit::Committed);
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

/// A lease may end anywhere in `u64`: a write, a merge and a commit without the group's
/// token are refused with the lease end the document holds, to the millisecond, also
/// beyond 2^53 (where floating-point numbers take two neighbours for one), with or
/// without a transaction holding the document.
pub async fn a_refusal_tells_the_lease_end_exactly(store: &dyn DocumentStore) {
    let kind = fresh_kind("FarLease");
    let ends = [(1_u64 << 53) + 1, (1 << 63) + 1, u64::MAX - 1, u64::MAX];
    for (i, until_ms) in ends.into_iter().enumerate() {
        let key = Key::new(kind.as_str(), i.to_string());
        let owner = Owner {
            group: "g".to_owned(),
            until_ms,
            txn: (i % 2 == 1).then(|| "t".to_owned()),
        };
        let version = ok(
            store
                .put(&key, doc(&[("n", 1.into()), (OWNER, owner.to_value())]))
                .await,
            "put owned",
        );
        let read = must_get(store, &key).await;
        assert_eq!(Owner::of(&read.doc), Some(owner.clone()), "read back");
        let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write_id("a", 1));
        let commit = Transaction::new()
            .expect(key.clone(), Some(version))
            .put(key.clone(), doc(&[("n", 3.into())]));
        let refusals = [
            (
                "put",
                store.put(&key, doc(&[("n", 2.into())])).await.map(drop),
            ),
            ("merge", store.merge(&m).await.map(drop)),
            ("commit", store.commit(&commit).await.map(drop)),
        ];
        for (what, refused) in refusals {
            match refused {
                Err(Error::Grouped {
                    key: k,
                    group,
                    until_ms: told,
                }) => {
                    assert_eq!((k, group.as_str()), (key.clone(), "g"), "{what}");
                    assert_eq!(told, until_ms, "{what}: the lease end told");
                }
                other => panic!(
                    "{what} of a document owned until {until_ms}: expected Grouped, got {other:?}"
                ),
            }
        }
        assert_eq!(
            must_get(store, &key).await.version,
            version,
            "nothing written"
        );
    }
}

/// A group owns its documents whatever its id (empty, with quotes, backslashes or letters
/// beyond ASCII) and whatever else its ownership property holds: writes and merges
/// without its token are refused naming it, and its own commit applies.
pub async fn any_group_id_owns_alike(store: &dyn DocumentStore) {
    let kind = fresh_kind("AnyOwner");
    let far = ok(store.now_ms().await, "now_ms") + 600_000;
    let ids = ["", "g\"1", "g\\b", "é-1", "g 1/{x}"];
    for (i, id) in ids.into_iter().enumerate() {
        let key = Key::new(kind.as_str(), i.to_string());
        let mut owner = Owner {
            group: id.to_owned(),
            until_ms: far,
            txn: None,
        }
        .to_value();
        if i % 2 == 1 {
            owner["note"] = "kept".into();
        }
        let version = ok(
            store
                .put(&key, doc(&[("n", 1.into()), (OWNER, owner.clone())]))
                .await,
            "put",
        );
        let what = format!("group {id:?}");
        assert_grouped(
            store.put(&key, doc(&[("n", 2.into())])).await,
            &key,
            id,
            &what,
        );
        let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write_id("a", 1));
        assert_grouped(store.merge(&m).await, &key, id, &what);
        let plain = Transaction::new()
            .expect(key.clone(), Some(version))
            .put(key.clone(), doc(&[("n", 3.into())]));
        assert_grouped(store.commit(&plain).await, &key, id, &what);
        let own = Transaction::new()
            .expect(key.clone(), Some(version))
            .put(key.clone(), doc(&[("n", 4.into()), (OWNER, owner)]))
            .owned_by(id);
        assert_eq!(commit(store, &own).await, Commit::Committed, "{what}");
        assert_eq!(
            get(store, &key).await.and_then(|d| d.doc.get("n").cloned()),
            Some(4.into())
        );
        let release = Transaction::new()
            .put(key.clone(), doc(&[("n", 5.into())]))
            .owned_by(id);
        assert_eq!(commit(store, &release).await, Commit::Committed, "{what}");
        ok(
            store.put(&key, doc(&[("n", 6.into())])).await,
            "put once released",
        );
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
