//! The cases of write records ([`merge::RECORD`]) beyond a merge's own: what a values
//! write ([`Write::Values`](crate::store::Write::Values)) keeps and adds, which entries
//! of a malformed record count, and the one writer's entry a lookup without records
//! answers ([`Lookup::writer`]), on every store alike.

use super::merges::{SUM_I64, merge_ok, write_id};
use super::{commit, doc, fresh_kind, must_get, ok};
use crate::document::Value;
use crate::key::Key;
use crate::store::merge::{self, Merge, Merged, RECORD};
use crate::store::{Commit, DocumentStore, Lookup, Scan, Transaction};

/// A values write ([`Write::Values`](crate::store::Write::Values)) stores the
/// document's properties and keeps the write record: the entries merges left stay (so
/// resending one of those merges is answered `AlreadyApplied`), and the entries the
/// written document carries are added, each replacing its writer's, as
/// [`merge::with_kept_record`] says; to an absent document it writes the document and
/// its entries. A put of the same document without a record drops the record.
pub async fn a_values_write_keeps_the_write_record(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("Values"), "1");
    ok(store.insert(&key, doc(&[("n", 1.into())])).await, "insert");
    let plus =
        |writer: &str, seq| Merge::new(key.clone(), "n", SUM_I64, 2.into(), write_id(writer, seq));
    assert_eq!(merge_ok(store, &plus("a", 4)).await, Merged::Applied);
    assert_eq!(merge_ok(store, &plus("b", 1)).await, Merged::Applied);
    let before = must_get(store, &key).await;
    let mut written = doc(&[("n", 40.into()), ("text", "new".into())]);
    merge::record(&mut written, "b", 2, 1_000_002, 0);
    merge::record(&mut written, "c", 9, 1_000_009, 0);
    let txn = Transaction::new()
        .expect(key.clone(), Some(before.version))
        .put_values(key.clone(), written.clone());
    assert_eq!(commit(store, &txn).await, Commit::Committed);
    let after = must_get(store, &key).await;
    assert_eq!(
        after.doc,
        merge::with_kept_record(Some(&before.doc), &written)
    );
    assert_eq!(
        (&after.doc["n"], &after.doc["text"]),
        (&40.into(), &"new".into())
    );
    assert!(merge::applied(Some(&after.doc), "a", 4));
    assert!(merge::applied(Some(&after.doc), "b", 2));
    assert!(merge::applied(Some(&after.doc), "c", 9));
    assert_eq!(merge_ok(store, &plus("a", 4)).await, Merged::AlreadyApplied);
    assert_eq!(must_get(store, &key).await.doc["n"], 40);

    let absent = Key::new(fresh_kind("Values"), "2");
    let txn = Transaction::new()
        .expect(absent.clone(), None)
        .put_values(absent.clone(), written.clone());
    assert_eq!(commit(store, &txn).await, Commit::Committed);
    assert_eq!(must_get(store, &absent).await.doc, written);

    // A put of what a read without records shows drops the record: what values keep.
    let bare = doc(&[("n", 40.into()), ("text", "new".into())]);
    let txn = Transaction::new()
        .expect(key.clone(), Some(must_get(store, &key).await.version))
        .put(key.clone(), bare);
    assert_eq!(commit(store, &txn).await, Commit::Committed);
    assert!(!merge::applied(
        Some(&must_get(store, &key).await.doc),
        "a",
        4
    ));
}

/// A values write whose stored or written record is not a map of entries, or whose
/// entries are not what merges write, keeps and adds what [`merge::with_kept_record`]
/// says: the same properties, and the same write recorded for every writer
/// ([`merge::applied`]: an entry whose first two elements are not integers within `u64`
/// records nothing, so a store may drop it). A merge of each writer afterwards answers
/// as the reference does.
pub async fn a_values_write_over_malformed_records_matches_the_reference(
    store: &dyn DocumentStore,
) {
    let kind = fresh_kind("ValuesMalformed");
    let json = |text: &str| -> Value { serde_json::from_str(text).expect("test JSON") };
    let stored_records = [
        None,
        Some(json(r#""junk""#)),
        Some(json("7")),
        Some(json("null")),
        Some(json(
            r#"{"a": "text", "b": [3, 1000003], "d": [4, "x"], "e": [6], "f": [-1, 5]}"#,
        )),
    ];
    let written_records = [
        None,
        Some(json("7")),
        Some(json("[1, 2]")),
        Some(json("{}")),
        Some(json(
            r#"{"b": [9, 1000009], "c": false, "d": [2, 1000002], "g": [8, null],
                "h": [18446744073709551615, 18446744073709551615]}"#,
        )),
    ];
    let mut case = 0;
    for stored in &stored_records {
        for written in &written_records {
            case += 1;
            let key = Key::new(kind.as_str(), case.to_string());
            values_write_over(store, &key, stored.as_ref(), written.as_ref()).await;
        }
    }
}

/// A lookup without records that names a writer ([`Lookup::writer`]) answers, for every
/// document it reads by key or in a scan page, the properties a read with records
/// answers, and of the record the named writer's entry exactly as that read answers it,
/// or none where it answers none (records that merges wrote, that a put stored, that are
/// not a map, entries that are not what merges write). It may answer other writers'
/// entries too.
pub async fn a_lookup_answers_the_named_writers_record_entry(store: &dyn DocumentStore) {
    let kind = fresh_kind("WriterEntry");
    let json = |text: &str| -> Value { serde_json::from_str(text).expect("test JSON") };
    let merged = Key::new(kind.as_str(), "merged");
    ok(
        store.insert(&merged, doc(&[("n", 1.into())])).await,
        "insert",
    );
    for (writer, seq) in [("a", 4), ("b", 1), ("a", 5)] {
        let merge = Merge::new(
            merged.clone(),
            "n",
            SUM_I64,
            2.into(),
            write_id(writer, seq),
        );
        assert_eq!(merge_ok(store, &merge).await, Merged::Applied);
    }
    let mut keys = vec![merged];
    for (id, record) in [
        ("put", r#"{"c": [3, 1000003], "d": "junk", "e": [6]}"#),
        ("scalar", "7"),
        ("empty", "{}"),
    ] {
        let key = Key::new(kind.as_str(), id);
        let mut stored = doc(&[("n", 3.into())]);
        stored.insert(RECORD.to_owned(), json(record));
        ok(store.put(&key, stored).await, "put");
        keys.push(key);
    }
    keys.push(Key::new(kind.as_str(), "absent"));
    let whole = ok(
        store
            .lookup(&Lookup {
                keys: keys.clone(),
                records: true,
                ..Lookup::default()
            })
            .await,
        "lookup with records",
    );
    let entry = |doc: &crate::document::Document, writer: &str| -> Option<Value> {
        doc.get(RECORD)?.as_object()?.get(writer).cloned()
    };
    let properties = |doc: &crate::document::Document| {
        let mut doc = doc.clone();
        doc.remove(RECORD);
        doc
    };
    for writer in ["a", "b", "c", "d", "e", "z"] {
        let lookup = Lookup {
            keys: keys.clone(),
            scans: vec![Scan::new(kind.as_str(), None)],
            records: false,
            writer: Some(writer.into()),
            prefetch: Vec::new(),
        };
        let found = ok(
            store.lookup(&lookup).await,
            "lookup of one writer's entries",
        );
        assert_eq!(found.docs.len(), keys.len(), "one entry per key");
        let page: std::collections::HashMap<_, _> = found.pages[0].items.iter().cloned().collect();
        for ((key, got), want) in keys.iter().zip(&found.docs).zip(&whole.docs) {
            let context = format!("`{key}`, writer {writer}");
            let (Some(got), Some(want)) = (got, want) else {
                assert_eq!(got.is_some(), want.is_some(), "{context}: found or not");
                assert!(!page.contains_key(key), "{context}: listed though absent");
                continue;
            };
            // A page may stop short of the kind's documents (the contract): those it lists.
            let listed = page.get(key).map(|listed| (listed, "listed"));
            for (got, how) in std::iter::once((got, "read by key")).chain(listed) {
                assert_eq!(got.version, want.version, "{context}, {how}: the version");
                assert_eq!(
                    properties(&got.doc),
                    properties(&want.doc),
                    "{context}, {how}: the properties"
                );
                assert_eq!(
                    entry(&got.doc, writer),
                    entry(&want.doc, writer),
                    "{context}, {how}: the writer's entry (whole record {:?})",
                    want.doc.get(RECORD)
                );
            }
        }
    }
}

/// A merge into a document whose record is not a map of entries (a put stored it so)
/// records its write as the reference does: read back, the document records it, and the
/// same write again is answered `AlreadyApplied`.
pub async fn a_merge_over_a_record_that_is_not_a_map_records_its_write(store: &dyn DocumentStore) {
    let kind = fresh_kind("MergeOverMalformedRecord");
    for (i, record) in [
        Value::from(7),
        Value::from("junk"),
        Value::Null,
        Value::from(vec![1, 2]),
    ]
    .into_iter()
    .enumerate()
    {
        let key = Key::new(kind.as_str(), i.to_string());
        let mut first = doc(&[("n", 1.into())]);
        first.insert(RECORD.to_owned(), record.clone());
        ok(store.insert(&key, first).await, "insert");
        let m = Merge::new(key.clone(), "n", SUM_I64, 2.into(), write_id("a", 1));
        assert_eq!(
            merge_ok(store, &m).await,
            Merged::Applied,
            "record {record}"
        );
        let found = must_get(store, &key).await;
        assert_eq!(found.doc["n"], 3, "record {record}");
        assert!(
            merge::applied(Some(&found.doc), "a", 1),
            "record {record}: the merge's write is recorded, read back: {:?}",
            found.doc
        );
        assert_eq!(
            merge_ok(store, &m).await,
            Merged::AlreadyApplied,
            "record {record}"
        );
    }
}

/// The writers [`values_write_over`] writes entries of.
const WRITERS: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];

/// One case of [`a_values_write_over_malformed_records_matches_the_reference`]: a document
/// inserted at `key` with the record `stored`, then a values write carrying `written`.
async fn values_write_over(
    store: &dyn DocumentStore,
    key: &Key,
    stored: Option<&Value>,
    written: Option<&Value>,
) {
    let context = format!("stored record {stored:?}, written record {written:?}");
    let with_record = |mut doc: crate::document::Document, record: Option<&Value>| {
        if let Some(record) = record {
            doc.insert(RECORD.to_owned(), record.clone());
        }
        doc
    };
    let first = with_record(doc(&[("n", 1.into()), ("gone", "x".into())]), stored);
    ok(store.insert(key, first).await, "insert");
    let before = must_get(store, key).await;
    let next = with_record(doc(&[("n", 5.into())]), written);
    let txn = Transaction::new()
        .expect(key.clone(), Some(before.version))
        .put_values(key.clone(), next.clone());
    assert_eq!(commit(store, &txn).await, Commit::Committed, "{context}");
    let after = must_get(store, key).await;
    let want = merge::with_kept_record(Some(&before.doc), &next);
    let properties = |doc: &crate::document::Document| {
        let mut doc = doc.clone();
        doc.remove(RECORD);
        doc
    };
    assert_eq!(
        properties(&after.doc),
        properties(&want),
        "{context}: the properties written"
    );
    // The highest sequence number recorded per writer (those used here are below 20).
    let recorded = |doc: &crate::document::Document| -> Vec<Option<u64>> {
        WRITERS
            .iter()
            .map(|w| (1..20).rev().find(|seq| merge::applied(Some(doc), w, *seq)))
            .collect()
    };
    assert_eq!(
        recorded(&after.doc),
        recorded(&want),
        "{context}: the writes recorded, of writers {WRITERS:?}"
    );
    for writer in WRITERS {
        let again = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write_id(writer, 4));
        let now = must_get(store, key).await;
        let want = match merge::reference(Some(&now.doc), &again) {
            Ok(merge::Step::Answer(answer)) => answer,
            Ok(merge::Step::Write(_)) => Merged::Applied,
            Err(e) => panic!("{context}: the reference refused the merge: {e}"),
        };
        assert_eq!(
            merge_ok(store, &again).await,
            want,
            "{context}: a merge of writer {writer} after it"
        );
    }
}
