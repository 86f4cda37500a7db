//! The cases of merges ([`DocumentStore::merge`]): folds, write ids, guards, versions,
//! overflow, the reference fold, records older than the horizon.

use super::documents::stale_put_conflicts;
use super::{commit, doc, fresh_kind, get, must_get, ok};
use crate::document::{Value, Version};
use crate::error::Error;
use crate::key::Key;
use crate::store::merge::{self, Elements, Fold, Merge, Merged, PRUNE_EVERY, RECORD, WriteId};
use crate::store::{Commit, DocumentStore, Transaction};
use futures::future::join_all;

pub(super) const SUM_I64: Fold = Fold::SUM_I64;

pub(super) fn write_id(writer: &str, seq: u64) -> WriteId {
    write_at(writer, seq, 1_000_000 + seq, 0)
}

/// The write id of `writer`'s write `seq`, sent at `at_ms`, dropping entries older than
/// `horizon_ms`.
fn write_at(writer: &str, seq: u64, at_ms: u64, horizon_ms: u64) -> WriteId {
    WriteId {
        writer: writer.into(),
        seq,
        at_ms,
        horizon_ms,
    }
}

pub(super) async fn merge_ok(store: &dyn DocumentStore, merge: &Merge) -> Merged {
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

/// A merge into one of the store's own properties, the write record or the owner, is
/// refused with `Invalid` and writes nothing, on a document with or without records.
pub async fn a_merge_into_the_stores_own_properties_is_invalid(store: &dyn DocumentStore) {
    let key = Key::new(fresh_kind("MergeOwn"), "1");
    let version = ok(store.insert(&key, doc(&[("n", 1.into())])).await, "insert");
    let mut seq = 0;
    for recorded in [false, true] {
        for property in [RECORD, crate::store::ownership::OWNER] {
            seq += 1;
            let m = Merge::new(key.clone(), property, SUM_I64, 1.into(), write_id("w", seq));
            match store.merge(&m).await {
                Err(Error::Invalid(_)) => {}
                other => panic!("a merge into `{property}`: expected Invalid, got {other:?}"),
            }
        }
        let found = must_get(store, &key).await;
        if recorded {
            assert_eq!(found.doc["n"], 2, "nothing written");
        } else {
            assert_eq!(found.version, version, "nothing written");
            let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write_id("w", 10));
            assert_eq!(merge_ok(store, &m).await, Merged::Applied);
        }
    }
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
/// property, and writes nothing (not even the write record), unless the write was already
/// applied; the bounds are those of the property's type, so sums stay exact over the
/// whole range of `i64` and `u64`.
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
    // A write already applied is answered so, although its change would overflow now.
    let again = Merge::new(key.clone(), "n", SUM_I64, 1.into(), write_id("a", 1));
    assert_eq!(merge_ok(store, &again).await, Merged::AlreadyApplied);
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
    for write in [
        write_at("old", 1, 1_000, 0),
        write_at("mid", 1, 5_000, 0),
        write_at("new", PRUNE_EVERY, 9_000, 4_000),
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

/// Sequence numbers and record times compare exactly over the whole of `u64`: a write
/// one above its writer's recorded one applies and the same write again does not, and a
/// merge that drops old entries drops exactly those written before its horizon, also
/// beyond 2^53, where floating-point numbers take two neighbours for one.
pub async fn merge_compares_write_ids_exactly_across_u64(store: &dyn DocumentStore) {
    let kind = fresh_kind("MergeWide");
    let key = Key::new(kind.as_str(), "1");
    ok(store.insert(&key, doc(&[("n", 0.into())])).await, "insert");
    let mut sum = 0;
    for (writer, first) in [("a", 1_u64 << 53), ("b", 1 << 63), ("c", u64::MAX - 1)] {
        for (seq, expected) in [
            (first, Merged::Applied),
            (first + 1, Merged::Applied),
            (first, Merged::AlreadyApplied),
            (first + 1, Merged::AlreadyApplied),
        ] {
            let m = Merge::new(
                key.clone(),
                "n",
                SUM_I64,
                1.into(),
                write_at(writer, seq, 1_000, 0),
            );
            assert_eq!(
                merge_ok(store, &m).await,
                expected,
                "writer {writer}, sequence number {seq}"
            );
            sum += i64::from(expected == Merged::Applied);
        }
    }
    let found = must_get(store, &key).await;
    assert_eq!(found.doc["n"], sum);
    assert_eq!(
        found.doc[RECORD],
        serde_json::json!({
            "a": [(1_u64 << 53) + 1, 1_000],
            "b": [(1_u64 << 63) + 1, 1_000],
            "c": [u64::MAX, 1_000],
        })
    );

    let key = Key::new(kind.as_str(), "2");
    ok(store.insert(&key, doc(&[("n", 0.into())])).await, "insert");
    let horizon = 1_u64 << 60;
    for m in [
        write_at("before", 1, horizon - 1, 0),
        write_at("at", 1, horizon, 0),
        write_at("dropping", PRUNE_EVERY << 50, horizon + 1, horizon),
    ] {
        let m = Merge::new(key.clone(), "n", SUM_I64, 1.into(), m);
        assert_eq!(merge_ok(store, &m).await, Merged::Applied);
    }
    let found = must_get(store, &key).await;
    assert_eq!(
        found.doc[RECORD],
        serde_json::json!({
            "at": [1, horizon],
            "dropping": [PRUNE_EVERY << 50, horizon + 1],
        })
    );
}

/// A random value for a merge of `fold` (stored or operand): over the whole range of the
/// values it takes (integers near the bounds of `i64` and `u64`, sets of strings with
/// escapes and of large integers), and one time in 8 a value of another type, which the
/// store must refuse as the reference does (`Unsupported`).
pub(super) fn random_value(rng: &mut rand::rngs::StdRng, fold: Fold) -> Value {
    use rand::RngExt;
    use rand::seq::IndexedRandom;
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
pub(super) fn every_fold() -> [Fold; 8] {
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
