//! The cases of single documents: reads, inserts, puts, deletes and their versions, ids
//! and sizes, and `make_durable`.

use super::{commit, doc, fresh_kind, get, must_get, ok, scan_all};
use crate::document::{Document, MAX_NESTING, Value, Version};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::merge::{Fold, Merge, Merged, WriteId};
use crate::store::{Commit, DocumentStore, Transaction};
use futures::future::join_all;
use std::collections::{BTreeMap, BTreeSet};

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
pub(super) async fn stale_put_conflicts(store: &dyn DocumentStore, key: &Key, stale: Version) {
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

/// A value nested [`MAX_NESTING`] levels deep (arrays and objects) round-trips; one level
/// deeper is refused with `Invalid` by `insert`, `put` and a commit, and nothing is
/// written, whatever else the commit holds.
pub async fn values_nest_up_to_the_limit(store: &dyn DocumentStore) {
    let nested = |depth: usize| {
        let mut value = Value::from(1);
        for level in 0..depth {
            value = if level % 2 == 0 {
                Value::Array(vec![value])
            } else {
                serde_json::json!({ "in": value })
            };
        }
        doc(&[("n", 1.into()), ("tree", value)])
    };
    let kind = fresh_kind("Nested");
    let key = Key::new(kind.as_str(), "1");
    let v = ok(store.insert(&key, nested(MAX_NESTING)).await, "insert");
    let found = must_get(store, &key).await;
    assert_eq!(found.version, v);
    assert!(
        found.doc == nested(MAX_NESTING),
        "nested value changed on the way"
    );

    let too_deep = nested(MAX_NESTING + 1);
    let invalid = |got: Result<Version>, what: &str| match got {
        Err(Error::Invalid(_)) => {}
        other => panic!("{what} of a value nested too deep: expected Invalid, got {other:?}"),
    };
    let fresh = Key::new(kind.as_str(), "2");
    invalid(store.insert(&fresh, too_deep.clone()).await, "insert");
    invalid(store.put(&fresh, too_deep.clone()).await, "put");
    invalid(
        store.put(&key, too_deep.clone()).await,
        "put over a document",
    );
    let other = key.child("Part", "1");
    for txn in [
        Transaction::new().put(key.clone(), too_deep.clone()),
        Transaction::new()
            .expect(key.clone(), Some(v))
            .put(other.clone(), doc(&[("n", 2.into())]))
            .put_values(key.clone(), too_deep.clone()),
    ] {
        let got = store.commit(&txn).await.map(|_| v);
        invalid(got, "commit");
    }
    assert_eq!(get(store, &fresh).await, None);
    assert_eq!(get(store, &other).await, None);
    assert_eq!(must_get(store, &key).await.version, v, "nothing written");
}

/// Floats round-trip exactly, whatever their magnitude: a document of random finite
/// floats (and of floats that hold integers, the largest and the smallest) reads back
/// equal, and a float that holds an integer stays a float, which a sum refuses
/// (`Unsupported`) as the reference does.
pub async fn floats_round_trip_exactly(store: &dyn DocumentStore) {
    use rand::{RngExt, SeedableRng};
    let kind = fresh_kind("Floats");
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut floats = vec![
        1e17,
        -4.796_566_914_205_686e18,
        1e300,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        0.1,
        1.0,
    ];
    while floats.len() < 400 {
        let f = f64::from_bits(rng.random());
        if f.is_finite() {
            floats.push(f);
        }
    }
    for (i, chunk) in floats.chunks(100).enumerate() {
        let key = Key::new(kind.as_str(), i.to_string());
        let d: Document = chunk
            .iter()
            .enumerate()
            .map(|(j, f)| (format!("f{j}"), Value::from(*f)))
            .collect();
        ok(store.put(&key, d.clone()).await, "put");
        let found = must_get(store, &key).await;
        for (property, written) in &d {
            assert_eq!(
                found.doc.get(property),
                Some(written),
                "{property}: {written} read back"
            );
        }
    }
    let key = Key::new(kind.as_str(), "sum");
    ok(store.insert(&key, doc(&[("n", 1.into())])).await, "insert");
    for (seq, operand) in [(1, 1e17), (2, 4.0)] {
        let m = Merge::new(
            key.clone(),
            "n",
            Fold::SUM_I64,
            operand.into(),
            WriteId {
                writer: "w".into(),
                seq,
                at_ms: 1,
                horizon_ms: 0,
            },
        );
        assert_eq!(
            ok(store.merge(&m).await, "merge"),
            Merged::Unsupported,
            "a sum of the float {operand}"
        );
    }
    assert_eq!(must_get(store, &key).await.doc["n"], 1);
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
