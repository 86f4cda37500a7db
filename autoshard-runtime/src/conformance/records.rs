//! The cases of write records ([`merge::RECORD`]) beyond a merge's own: what a values
//! write ([`Write::Values`](crate::store::Write::Values)) keeps and adds, and which
//! entries of a malformed record count, on every store alike.

use super::merges::{SUM_I64, merge_ok, write_id};
use super::{commit, doc, fresh_kind, must_get, ok};
use crate::document::Value;
use crate::key::Key;
use crate::store::merge::{self, Merge, Merged, RECORD};
use crate::store::{Commit, DocumentStore, Transaction};

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
