//! Redis-specific behaviour of `RedisStore` beyond the shared conformance suite: the key
//! layout on the server, foreign values, cluster slot placement, group-only commits, and
//! concurrent optimistic commits through shared connections.

use autoshard::store::{
    Commit, Document, DocumentStore, Fold, FoldLookup, Folded, Lookup, Merge, Merged, OWNER, Owner,
    RedisOptions, RedisStore, Scan, Transaction, Version, Versioned, WriteId, fold_lookup, merge,
};
use autoshard::{Error, Key};
use autoshard_test_support::redis::{Cluster, RedisServer, Standalone, namespace};
use autoshard_test_support::store::assert_scan_lists;
use std::collections::HashSet;
use std::sync::Arc;

fn doc(n: i64) -> Document {
    [("n".to_owned(), n.into())].into()
}

fn options(case: &str) -> RedisOptions {
    RedisOptions::default().namespace(namespace(case))
}

/// A write id of `writer`'s write number `seq`, whose records never expire.
fn write_id(writer: &str, seq: u64) -> WriteId {
    WriteId {
        writer: writer.into(),
        seq,
        at_ms: 1,
        horizon_ms: 0,
    }
}

/// The Redis key of `key` in a store with namespace `ns`.
fn redis_key(ns: &str, key: &Key) -> String {
    format!("{ns}:{}", key.encode())
}

/// Documents are hashes `{v, p:<property>...}` at `namespace:` + `Key::encode()`, one
/// field of JSON per property; their write records are apart, in `<document>/~w`, written
/// by merges and commits alike, so the document's hash holds values only.
async fn layout_on_the_server(server: &RedisServer, store: &RedisStore, ns: &str) {
    let key = Key::new("Question", "a{b}:c/d");
    let version = store.insert(&key, doc(7)).await.unwrap();
    let name = redis_key(ns, &key);
    assert_eq!(server.cli(&["TYPE", &name]).trim(), "hash");
    assert_eq!(
        server.cli(&["HGET", &name, "v"]).trim(),
        version.0.to_string()
    );
    assert_eq!(server.cli(&["HGET", &name, "p:n"]).trim(), "7");
    assert_eq!(server.cli(&["HLEN", &name]).trim(), "2");

    let record = format!("{name}/~w");
    let write = write_id("w", 3);
    let merge = Merge::new(key.clone(), "n", Fold::SUM_I64, 2.into(), write);
    assert_eq!(store.merge(&merge).await.unwrap(), Merged::Applied);
    assert_eq!(server.cli(&["HGET", &name, "p:n"]).trim(), "9");
    assert_eq!(server.cli(&["HLEN", &name]).trim(), "2", "values only");
    assert_eq!(server.cli(&["HGET", &record, "w:w"]).trim(), "[3,1]");

    // A commit carries the record it read over, into the record hash.
    let read = store.get(&key).await.unwrap().unwrap();
    assert!(
        merge::applied(Some(&read.doc), "w", 3),
        "a read with records"
    );
    let mut rewritten = read.doc.clone();
    rewritten.insert("n".to_owned(), 10.into());
    let txn = Transaction::new()
        .expect(key.clone(), Some(read.version))
        .put(key.clone(), rewritten);
    assert_eq!(store.commit(&txn).await.unwrap(), Commit::Committed);
    assert_eq!(server.cli(&["HLEN", &name]).trim(), "2", "values only");
    assert_eq!(server.cli(&["HGET", &record, "w:w"]).trim(), "[3,1]");
    assert_eq!(store.merge(&merge).await.unwrap(), Merged::AlreadyApplied);

    // A delete removes both.
    assert!(store.delete(&key).await.unwrap());
    assert_eq!(server.cli(&["EXISTS", &name, &record]).trim(), "0");
}

/// A document written by an earlier layout keeps its writers' record entries in its own
/// hash (`w:<writer>`) until its next put: a merge honours such an entry until the record
/// hash has one for the same writer; a merge writes its entry to the record hash, which
/// then decides for that writer.
async fn merges_honour_entries_an_earlier_layout_kept_in_the_document(
    server: &RedisServer,
    store: &RedisStore,
    ns: &str,
) {
    let key = Key::new("Earlier", "1");
    let name = redis_key(ns, &key);
    server.cli(&["HSET", &name, "v", "7", "p:n", "5", "w:w", "[5,1]"]);
    let merge = |writer: &str, seq: u64| {
        let write = write_id(writer, seq);
        Merge::new(key.clone(), "n", Fold::SUM_I64, 1.into(), write)
    };
    let value = || async { store.get(&key).await.unwrap().unwrap().doc["n"].clone() };
    let steps = [
        ("w", 5, Merged::AlreadyApplied, 5),
        ("w", 4, Merged::AlreadyApplied, 5),
        ("w", 6, Merged::Applied, 6),
        ("w", 6, Merged::AlreadyApplied, 6),
        ("x", 1, Merged::Applied, 7),
        ("w", 5, Merged::AlreadyApplied, 7),
        ("w", 7, Merged::Applied, 8),
        ("x", 1, Merged::AlreadyApplied, 8),
        ("w", 10, Merged::Applied, 9),
        ("w", 9, Merged::AlreadyApplied, 9),
        ("w", 10, Merged::AlreadyApplied, 9),
        ("w", 11, Merged::Applied, 10),
    ];
    for (writer, seq, want, n) in steps {
        let got = store.merge(&merge(writer, seq)).await.unwrap();
        assert_eq!(got, want, "writer {writer}, seq {seq}");
        assert_eq!(value().await, n, "after writer {writer}, seq {seq}");
    }
    assert_eq!(server.cli(&["HGET", &name, "w:w"]).trim(), "[5,1]");
    assert_eq!(
        server.cli(&["HGET", &format!("{name}/~w"), "w:w"]).trim(),
        "[11,1]"
    );
}

/// The record hash of a document that 33 writers or more merged into is a hash table,
/// not a listpack (whose every lookup scans its entries): it holds every writer's entry
/// and nothing else, each merge counts once, and a small record stays compact.
async fn a_record_of_many_writers_is_a_hash_table(
    server: &RedisServer,
    store: &RedisStore,
    ns: &str,
) {
    let key = Key::new("Hot", "1");
    store.insert(&key, doc(0)).await.unwrap();
    let record = format!("{}/~w", redis_key(ns, &key));
    let encoding = || {
        server
            .cli(&["OBJECT", "ENCODING", &record])
            .trim()
            .to_owned()
    };
    let merge = |writer: usize| {
        let write = write_id(&format!("w{writer}"), 1);
        Merge::new(key.clone(), "n", Fold::SUM_I64, 1.into(), write)
    };
    for writer in 0..32 {
        assert_eq!(store.merge(&merge(writer)).await.unwrap(), Merged::Applied);
    }
    assert_ne!(encoding(), "hashtable", "32 entries stay compact");
    for writer in 32..40 {
        assert_eq!(store.merge(&merge(writer)).await.unwrap(), Merged::Applied);
    }
    assert_eq!(encoding(), "hashtable");
    assert_eq!(server.cli(&["HLEN", &record]).trim(), "40");
    for writer in 0..40 {
        let again = store.merge(&merge(writer)).await.unwrap();
        assert_eq!(again, Merged::AlreadyApplied, "writer {writer}");
    }
    let read = store.get(&key).await.unwrap().unwrap();
    assert_eq!(read.doc["n"], 40);
    for writer in 0..40 {
        assert!(merge::applied(Some(&read.doc), &format!("w{writer}"), 1));
    }
}

/// A lookup that names a writer (`Lookup::writer`) answers that writer's record entry of
/// each document however many writers the record holds: on a standalone server that entry
/// alone (one `HGET` of the record hash, not all of it), with a malformed entry of another
/// writer left unread; on a cluster at least that entry. A writer without an entry reads
/// none, and a lookup with records still reads them all.
async fn a_lookup_naming_a_writer_reads_its_entry(
    server: &RedisServer,
    store: &RedisStore,
    ns: &str,
    alone: bool,
) {
    const WRITERS: usize = 40;
    let keys: Vec<Key> = (0..12).map(|i| Key::new("Named", i.to_string())).collect();
    for key in &keys {
        store.insert(key, doc(0)).await.unwrap();
        for writer in 0..WRITERS {
            let write = write_id(&format!("w{writer}"), 3);
            let merge = Merge::new(key.clone(), "n", Fold::SUM_I64, 1.into(), write);
            assert_eq!(store.merge(&merge).await.unwrap(), Merged::Applied);
        }
    }
    if alone {
        // Another writer's entry that no read could decode.
        let record = format!("{}/~w", redis_key(ns, &keys[0]));
        server.cli(&["HSET", &record, "w:w9", "not json"]);
    }
    let entries = |doc: &Versioned| -> Vec<String> {
        let mut writers: Vec<String> = doc
            .doc
            .get(merge::RECORD)
            .and_then(|record| record.as_object())
            .map(|record| record.keys().cloned().collect())
            .unwrap_or_default();
        writers.sort();
        writers
    };
    for writer in ["w7", "nobody"] {
        let lookup = Lookup {
            keys: keys.clone(),
            writer: Some(writer.into()),
            ..Lookup::default()
        };
        let found = store.lookup(&lookup).await.unwrap();
        assert_eq!(found.docs.len(), keys.len());
        for (key, doc) in keys.iter().zip(&found.docs) {
            let doc = doc.as_ref().unwrap();
            assert_eq!(doc.doc["n"], WRITERS, "{key}");
            let named = writer == "w7";
            assert_eq!(merge::applied(Some(&doc.doc), writer, 3), named, "{key}");
            assert!(!merge::applied(Some(&doc.doc), writer, 4), "{key}");
            let entries = entries(doc);
            if alone {
                let want: Vec<String> = if named {
                    vec![writer.to_owned()]
                } else {
                    Vec::new()
                };
                assert_eq!(entries, want, "{key}: the named writer's entry alone");
            } else if named {
                assert!(entries.contains(&writer.to_owned()), "{key}: {entries:?}");
            }
        }
    }
    let all = Lookup {
        keys: keys[1..].to_vec(),
        records: true,
        ..Lookup::default()
    };
    for doc in store.lookup(&all).await.unwrap().docs {
        assert_eq!(
            entries(&doc.unwrap()).len(),
            WRITERS,
            "a lookup with records"
        );
    }
}

/// A value that is not a hash where a document's write record lives (`<document>/~w`)
/// makes a merge into the document a typed error naming the document, as a read with
/// records and a lookup naming a writer report it, and is left as it is.
async fn a_foreign_value_at_a_record_hash_is_malformed(
    server: &RedisServer,
    store: &RedisStore,
    ns: &str,
) {
    let key = Key::new("ForeignRecord", "1");
    let name = redis_key(ns, &key);
    store.insert(&key, doc(5)).await.unwrap();
    let record = format!("{name}/~w");
    server.cli(&["SET", &record, "plain"]);
    for (writer, seq) in [("w", 1), ("w", 256)] {
        let write = write_id(writer, seq);
        let merge = Merge::new(key.clone(), "n", Fold::SUM_I64, 1.into(), write);
        match store.merge(&merge).await {
            Err(Error::Malformed { key: k, .. }) => assert_eq!(k, key),
            other => panic!("merge with seq {seq}: expected Malformed, got {other:?}"),
        }
    }
    match store.get(&key).await {
        Err(Error::Malformed { key: k, .. }) => assert_eq!(k, key),
        other => panic!("get: expected Malformed, got {other:?}"),
    }
    // So does a lookup that names a writer: read as no entry, the foreign value would tell
    // a compare-and-set save that its earlier write did not land.
    let named = Lookup {
        keys: vec![key.clone()],
        writer: Some("w".into()),
        ..Lookup::default()
    };
    match store.lookup(&named).await {
        Err(Error::Malformed { key: k, .. }) => assert_eq!(k, key),
        other => panic!("lookup naming a writer: expected Malformed, got {other:?}"),
    }
    assert_eq!(server.cli(&["GET", &record]).trim(), "plain");
    assert_eq!(server.cli(&["HGET", &name, "p:n"]).trim(), "5");
}

/// A version beyond 2^53 - 1, past which the scripts cannot count exactly (Lua numbers
/// are doubles), makes every operation on the document a typed error naming it, and so
/// does a write past 2^53 - 1 or under a version counter there: nothing is written. Such
/// a write stored a version that came before, or one in exponent notation no read takes.
async fn versions_the_scripts_cannot_count_past_are_malformed(
    server: &RedisServer,
    store: &RedisStore,
    ns: &str,
) {
    const MAX: u64 = (1 << 53) - 1;
    let malformed = |got: autoshard::Result<()>, key: &Key, what: &str| match got {
        Err(Error::Malformed { key: k, .. }) => assert_eq!(&k, key, "{what}"),
        other => panic!("{what}: expected Malformed, got {other:?}"),
    };
    for version in [MAX, MAX + 1, MAX + 2, u64::MAX] {
        let key = Key::new("BigVersion", version.to_string());
        let name = redis_key(ns, &key);
        let text = version.to_string();
        server.cli(&["HSET", &name, "v", &text, "p:n", "1"]);
        let what = |op: &str| format!("{op} of a document at version {version}");
        if version == MAX {
            let read = store.get(&key).await.unwrap().map(|d| d.version);
            assert_eq!(read, Some(Version(MAX)), "the largest version reads");
        } else {
            malformed(store.get(&key).await.map(drop), &key, &what("get"));
        }
        malformed(store.put(&key, doc(2)).await.map(drop), &key, &what("put"));
        let expecting = Transaction::new().expect(key.clone(), Some(Version(version)));
        let owner = Owner {
            group: "g".to_owned(),
            until_ms: u64::MAX,
            txn: None,
        };
        for (op, txn) in [
            ("commit", expecting.clone().put(key.clone(), doc(2))),
            (
                "values write",
                expecting.clone().put_values(key.clone(), doc(2)),
            ),
            (
                "owner write",
                expecting.clone().own(key.clone(), Some(owner)),
            ),
            ("delete", expecting.delete(key.clone())),
        ] {
            malformed(store.commit(&txn).await.map(drop), &key, &what(op));
        }
        let merge = Merge::new(key.clone(), "n", Fold::SUM_I64, 1.into(), write_id("w", 1));
        malformed(store.merge(&merge).await.map(drop), &key, &what("merge"));
        assert_eq!(server.cli(&["HGET", &name, "v"]).trim(), text);
        assert_eq!(server.cli(&["HGET", &name, "p:n"]).trim(), "1");
        assert_eq!(server.cli(&["HGET", &name, "p:~own"]).trim(), "");
    }

    // A write up to the largest version.
    let key = Key::new("BigVersion", "below");
    server.cli(&[
        "HSET",
        &redis_key(ns, &key),
        "v",
        &(MAX - 1).to_string(),
        "p:n",
        "1",
    ]);
    assert_eq!(store.put(&key, doc(2)).await.unwrap(), Version(MAX));
    assert_eq!(
        store.get(&key).await.unwrap().map(|d| d.version),
        Some(Version(MAX))
    );

    let key = Key::new("BigCounter", "1");
    let counter = format!("{ns}:{{BigCounter:1}}#v");
    let full = MAX.to_string();
    server.cli(&["SET", &counter, &full]);
    malformed(
        store.insert(&key, doc(1)).await.map(drop),
        &key,
        "insert under a full counter",
    );
    assert_eq!(server.cli(&["EXISTS", &redis_key(ns, &key)]).trim(), "0");
    assert_eq!(server.cli(&["GET", &counter]).trim(), full);
}

/// An owner field holding any JSON text, as another client may write it (keys in another
/// order, spaces, escapes, fields the store does not write, repeated keys, lease ends
/// beyond 2^53 and beyond u64), owns the document as the owner the text decodes to, read
/// as a read decodes it (`Owner::of`): a commit and a merge without the group's token are
/// refused naming that group and its lease end while it is live, and apply when it is
/// not.
async fn owner_texts_own_as_their_json_reads(server: &RedisServer, store: &RedisStore, ns: &str) {
    let now = store.now_ms().await.unwrap();
    let (far, past) = (now + 600_000, now - 1);
    let texts = [
        format!(r#"{{"group":"g-1","until":{far}}}"#),
        format!(r#"{{"until":{far},"group":"g-1"}}"#),
        format!(r#"{{ "group" : "g-1" , "until" : {far} }}"#),
        format!(r#"{{"group":"g\u002d1","until":{far}}}"#),
        format!(r#"{{"group":"g\"1","until":{far}}}"#),
        format!(r#"{{"group":"","until":{far}}}"#),
        format!(r#"{{"group":"g-1","txn":"t-1","until":{past}}}"#),
        format!(r#"{{"group":"g-1","until":{past},"txn":"t-1"}}"#),
        format!(r#"{{"group":"g-1","txn":7,"until":{past}}}"#),
        format!(r#"{{"group":"g-1","until":{past}}}"#),
        format!(r#"{{"group":"g-1","until":{far},"x":1}}"#),
        r#"{"group":"g-1","until":9999999999999999}"#.to_owned(),
        r#"{"group":"g-1","until":0}"#.to_owned(),
        r#"{"group":"g-1","until":18446744073709551615}"#.to_owned(),
        r#"{"group":"g-1","until":18446744073709551616}"#.to_owned(),
        r#"{ "group" : "g-1" , "until" : 9007199254740993 }"#.to_owned(),
        r#"{"until":1,"group":"g-1","until":18446744073709551615}"#.to_owned(),
        r#"{"group":"g-1","until":100000000000000000000}"#.to_owned(),
    ];
    for (i, text) in texts.iter().enumerate() {
        let key = Key::new("OwnerText", i.to_string());
        let name = redis_key(ns, &key);
        server.cli(&["HSET", &name, "v", "1", "p:n", "1", "p:~own", text]);
        let stored: Document = [(OWNER.to_owned(), serde_json::from_str(text).unwrap())].into();
        let live = Owner::of(&stored).filter(|owner| owner.is_live(now));
        let merge = Merge::new(key.clone(), "n", Fold::SUM_I64, 1.into(), write_id("w", 1));
        let merged = store.merge(&merge).await;
        let txn = Transaction::new()
            .expect(key.clone(), Some(Version(1)))
            .put(key.clone(), doc(5));
        let committed = store.commit(&txn).await;
        let Some(owner) = live else {
            assert_eq!(merged.unwrap(), Merged::Applied, "merge under {text}");
            let conflict = Commit::Conflict { key: key.clone() };
            assert_eq!(
                committed.unwrap(),
                conflict,
                "commit under {text} (after the merge)"
            );
            continue;
        };
        for (op, answer) in [("merge", merged.map(drop)), ("commit", committed.map(drop))] {
            match answer {
                Err(Error::Grouped {
                    group, until_ms, ..
                }) => {
                    assert_eq!(group, owner.group, "{op} under {text}");
                    assert_eq!(until_ms, owner.until_ms, "{op} under {text}: the lease end");
                }
                other => panic!("{op} under {text}: expected Grouped, got {other:?}"),
            }
        }
    }
}

/// A value that is not ours at one of our keys is a typed error naming the key, on every
/// operation, and is never overwritten.
async fn foreign_values_are_malformed(server: &RedisServer, store: &RedisStore, ns: &str) {
    let cases: [(&str, &[&str]); 5] = [
        ("string", &["SET", "{k}", "plain"]),
        ("list", &["RPUSH", "{k}", "x"]),
        ("hash", &["HSET", "{k}", "name", "x"]),
        ("bad-json", &["HSET", "{k}", "v", "3", "p:n", "not json"]),
        ("other-field", &["HSET", "{k}", "v", "3", "d", "{}"]),
    ];
    for (id, command) in cases {
        let key = Key::new("Foreign", id);
        let name = redis_key(ns, &key);
        let args: Vec<&str> = command
            .iter()
            .map(|a| if *a == "{k}" { name.as_str() } else { a })
            .collect();
        server.cli(&args);
        let malformed = |err: Error, op: &str| match err {
            Error::Malformed { key: k, .. } => assert_eq!(k, key, "{op} on {id}"),
            other => panic!("{op} on {id}: expected Malformed, got {other:?}"),
        };
        malformed(store.get(&key).await.unwrap_err(), "get");
        malformed(
            store
                .get_many(&[Key::new("Foreign", "none"), key.clone()])
                .await
                .unwrap_err(),
            "get_many",
        );
        if id == "bad-json" {
            // A well-formed envelope: writes may replace it (only reads decode properties).
            continue;
        }
        malformed(store.put(&key, doc(1)).await.unwrap_err(), "put");
        malformed(store.insert(&key, doc(1)).await.unwrap_err(), "insert");
        malformed(store.delete(&key).await.unwrap_err(), "delete");
        let txn = Transaction::new()
            .expect(key.clone(), None)
            .put(key.clone(), doc(1));
        malformed(store.commit(&txn).await.unwrap_err(), "commit");
        let write = write_id("w", 1);
        let merge = Merge::new(key.clone(), "n", Fold::MAX_I64, 1.into(), write);
        malformed(store.merge(&merge).await.unwrap_err(), "merge");
        let ty = server.cli(&["TYPE", &name]);
        assert_ne!(ty.trim(), "none", "{id} was deleted");
        if id == "string" {
            assert_eq!(
                server.cli(&["GET", &name]).trim(),
                "plain",
                "the foreign value was overwritten"
            );
        }
    }
    let err = store.get(&Key::new("Foreign", "string")).await.unwrap_err();
    assert!(err.to_string().contains("Foreign:string"), "{err}");
}

/// A merge answers what the reference fold answers whatever text a value holds on the
/// server (or `Unsupported`, writing nothing, for a text `serde_json` reads but would not
/// write): texts the common path takes (short canonical integers) and every text it
/// leaves to the full script (leading zeros, exponents, `-0`, spaces, hex, 15 digits or
/// more, sums that leave 14 digits, versions that are not plain digits).
async fn merges_answer_stored_texts_as_the_reference(
    server: &RedisServer,
    store: &RedisStore,
    ns: &str,
) {
    let values = [
        "5",
        "-5",
        "0",
        "05",
        "-0",
        "1e3",
        "1.0",
        " 5",
        "5 ",
        "0x10",
        "+5",
        "nan",
        "inf",
        "99999999999999",
        "-99999999999999",
        "100000000000000",
        "9007199254740993",
        "9223372036854775807",
        "\"5\"",
        "true",
        "[]",
    ];
    let cases = values.iter().map(|value| ("7", *value)).chain([
        ("1e3", "5"),
        ("007", "5"),
        ("99999999999999", "5"),
        ("x", "5"),
    ]);
    for (i, (version, value)) in cases.enumerate() {
        let merges = [(Fold::SUM_I64, 1), (Fold::SUM_I64, -1), (Fold::MAX_I64, 7)];
        for (j, (fold, operand)) in merges.into_iter().enumerate() {
            let key = Key::new("Texts", format!("{i}.{j}"));
            let name = redis_key(ns, &key);
            server.cli(&["HSET", &name, "v", version, "p:n", value]);
            let write = write_id("w", 1);
            let m = Merge::new(key.clone(), "n", fold, operand.into(), write);
            let what = format!("{fold:?} {operand} into v={version} n={value}");
            let read_before = store.get(&key).await;
            let got = store.merge(&m).await;
            match read_before {
                Ok(Some(Versioned { doc: before, .. })) => {
                    let found = store.get(&key).await.unwrap().unwrap();
                    let canonical = serde_json::to_string(&before["n"]).unwrap() == value;
                    if !canonical && matches!(got, Ok(Merged::Unsupported)) {
                        // A text serde_json reads but would not write: the store may leave
                        // it to the mapper's read and compare-and-set (the contract).
                        assert_eq!(found.doc.get("n"), before.get("n"), "{what}");
                        continue;
                    }
                    match (merge::reference(Some(&before), &m), got) {
                        (Ok(merge::Step::Write(want)), Ok(Merged::Applied)) => {
                            assert_eq!(found.doc.get("n"), want.get("n"), "{what}");
                        }
                        (Ok(merge::Step::Answer(want)), Ok(got)) => {
                            assert_eq!(got, want, "{what}");
                            assert_eq!(found.doc.get("n"), before.get("n"), "{what}");
                        }
                        (Err(Error::Overflow { .. }), Err(Error::Overflow { .. })) => {}
                        (want, got) => panic!("{what}: expected {want:?}, got {got:?}"),
                    }
                }
                read => {
                    assert!(
                        matches!(got, Err(Error::Malformed { .. }) | Ok(Merged::Unsupported)),
                        "{what}: read {read:?}, merge {got:?}"
                    );
                    let stored = server.cli(&["HGET", &name, "p:n"]);
                    assert_eq!(stored.trim_end_matches('\n'), value, "{what}: rewritten");
                }
            }
        }
    }
}

/// A folding lookup over shards holding stored texts (beside shards holding 2 and 3, in
/// groups of their own, so on a cluster in other slots) answers what the reference answers
/// over what `get_many` reads, and folds every short canonical integer (the texts a merge
/// writes). Any other text it may leave to the caller (`Unsupported`), and a text that is
/// not JSON it may report as a read does.
async fn folding_lookups_answer_stored_texts_as_the_reference(
    server: &RedisServer,
    store: &RedisStore,
    ns: &str,
) {
    let on_server = ["5", "-5", "0", "99999999999999", "-9999999999999"];
    let left = [
        "-99999999999999",
        "05",
        "-0",
        "1e3",
        "1.0",
        " 5",
        "0x10",
        "nan",
        "100000000000000",
        "9223372036854775807",
        "\"5\"",
        "true",
        "[]",
    ];
    for (i, value) in on_server.iter().chain(&left).enumerate() {
        for (j, fold) in [Fold::SUM_I64, Fold::MAX_I64, Fold::MIN_I64]
            .into_iter()
            .enumerate()
        {
            let main = Key::new("FoldTexts", format!("{i}.{j}"));
            store.insert(&main, doc(0)).await.unwrap();
            let shards: Vec<Key> = (0..3)
                .map(|s| main.child_group("Shard", s.to_string()))
                .collect();
            for (shard, text) in shards.iter().zip(["2", value, "3"]) {
                server.cli(&["HSET", &redis_key(ns, shard), "v", "1", "p:n", text]);
            }
            let lookup = FoldLookup {
                main: main.clone(),
                shards: shards.clone(),
                properties: vec![("n".to_owned(), fold)],
                scans: Vec::new(),
                prefetch: Vec::new(),
            };
            let what = format!("{fold:?} over 2, {value}, 3");
            let got = store.fold_lookup(&lookup).await;
            let mut keys = vec![main.clone()];
            keys.extend(shards);
            let want = store.get_many(&keys).await.map(|read| {
                fold_lookup::reference(&lookup, read[0].clone(), &read[1..], Vec::new())
            });
            match (got, want) {
                (Ok(got), Ok(want)) => {
                    if on_server.contains(value) {
                        assert!(
                            matches!(want.values[0], Folded::Value(_)),
                            "{what}: {want:?}"
                        );
                    }
                    if on_server.contains(value) || got.values[0] != Folded::Unsupported {
                        assert_eq!(got, want, "{what}");
                    }
                }
                // A text that is not JSON: the folding lookup may report it as a read does,
                // or leave it to the caller.
                (got, Err(Error::Malformed { .. })) => assert!(
                    matches!(&got, Err(Error::Malformed { .. }))
                        || got
                            .as_ref()
                            .is_ok_and(|g| g.values[0] == Folded::Unsupported),
                    "{what}: {got:?}"
                ),
                (got, want) => panic!("{what}: {got:?}, read {want:?}"),
            }
        }
    }
}

/// Deleted documents leave index entries only transiently; scans skip entries whose
/// document is gone, and entries that name no key at all (here: entries planted by
/// hand), in a scan and in a lookup's scan alike.
async fn scan_skips_stale_index_entries(server: &RedisServer, store: &RedisStore, ns: &str) {
    let live = Key::new("Stale", "live");
    store.insert(&live, doc(1)).await.unwrap();
    let ghost = Key::new("Stale", "ghost");
    let index = format!("{ns}:{{#root:Stale}}#i");
    server.cli(&["ZADD", &index, "0", &ghost.encode()]);
    for junk in ["junk", "{", "{Stale:", "~"] {
        server.cli(&["ZADD", &index, "0", junk]);
    }
    let scan = Scan::new("Stale", None).limit(10);
    assert_scan_lists(store, &scan, &[live]).await;
}

/// Many tasks doing optimistic read-modify-write on one document through the shared
/// connection pool lose no update (scripts need no WATCH).
async fn concurrent_increments_are_exact(store: Arc<RedisStore>) {
    let key = Key::new("Counter", namespace("c"));
    store.insert(&key, doc(0)).await.unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let store = store.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let mut conflicts = 0u32;
                for _ in 0..50 {
                    loop {
                        let current = store.get(&key).await.unwrap().unwrap();
                        let n = current.doc["n"].as_i64().unwrap();
                        let txn = Transaction::new()
                            .expect(key.clone(), Some(current.version))
                            .put(key.clone(), doc(n + 1));
                        match store.commit(&txn).await.unwrap() {
                            Commit::Committed => break,
                            Commit::Conflict { .. } => conflicts += 1,
                        }
                    }
                }
                conflicts
            })
        })
        .collect();
    let mut conflicts = 0;
    for task in tasks {
        conflicts += task.await.unwrap();
    }
    let n = store.get(&key).await.unwrap().unwrap().doc["n"]
        .as_i64()
        .unwrap();
    assert_eq!(n, 32 * 50, "lost updates ({conflicts} conflicts seen)");
}

/// The store's clock, read from the server and counted on between readings, never runs
/// ahead of the server's own: each answer is at most what `TIME` says right after it, on
/// a connection of its own. Leases judged past by it have passed on the server.
async fn the_clock_never_runs_ahead_of_the_servers(server: &RedisServer, store: &RedisStore) {
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    for i in 0..500 {
        let ours = store.now_ms().await.unwrap();
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
        let theirs = secs * 1000 + micros / 1000;
        assert!(
            ours <= theirs,
            "answer {i}: {ours} ms, the server's clock {theirs} ms"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone() {
    let server = Standalone::start();
    let connect = |case: &str| {
        let url = server.url();
        let options = options(case);
        async move {
            let ns = options.namespace.clone();
            (RedisStore::connect_with(&url, options).await.unwrap(), ns)
        }
    };
    let (store, ns) = connect("layout").await;
    layout_on_the_server(&server.server, &store, &ns).await;
    let (store, ns) = connect("earlier").await;
    merges_honour_entries_an_earlier_layout_kept_in_the_document(&server.server, &store, &ns).await;
    let (store, ns) = connect("foreign").await;
    foreign_values_are_malformed(&server.server, &store, &ns).await;
    let (store, ns) = connect("owner texts").await;
    owner_texts_own_as_their_json_reads(&server.server, &store, &ns).await;
    let (store, ns) = connect("foreign record").await;
    a_foreign_value_at_a_record_hash_is_malformed(&server.server, &store, &ns).await;
    let (store, ns) = connect("many writers").await;
    a_record_of_many_writers_is_a_hash_table(&server.server, &store, &ns).await;
    let (store, ns) = connect("named writer").await;
    a_lookup_naming_a_writer_reads_its_entry(&server.server, &store, &ns, true).await;
    let (store, ns) = connect("big versions").await;
    versions_the_scripts_cannot_count_past_are_malformed(&server.server, &store, &ns).await;
    let (store, ns) = connect("stale").await;
    scan_skips_stale_index_entries(&server.server, &store, &ns).await;
    let (store, ns) = connect("texts").await;
    merges_answer_stored_texts_as_the_reference(&server.server, &store, &ns).await;
    let (store, ns) = connect("fold texts").await;
    folding_lookups_answer_stored_texts_as_the_reference(&server.server, &store, &ns).await;
    let (store, _) = connect("clock").await;
    the_clock_never_runs_ahead_of_the_servers(&server.server, &store).await;
    let (store, _) = connect("concurrent").await;
    concurrent_increments_are_exact(Arc::new(store)).await;

    // A namespace that would move hash tags is refused.
    let err = RedisStore::connect_with(&server.url(), RedisOptions::default().namespace("a{b}"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
}

/// The static shards of one entity spread over a cluster's nodes, while an entity group
/// stays on one slot: a transaction across groups is refused (nothing written), one
/// within a group commits, and `get_many` across slots keeps its order.
async fn shards_spread_over_the_nodes_and_groups_stay_on_one_slot(
    cluster: &Cluster,
    store: &RedisStore,
    ns: &str,
) {
    let question = Key::new("Question", "{42}");
    let node = &cluster.nodes[0];
    let mut owners = HashSet::new();
    let mut slots = HashSet::new();
    for i in 0..10 {
        let shard = autoshard::layout::static_shard(&question, "votes", i);
        store.insert(&shard, doc(0)).await.unwrap();
        let name = redis_key(ns, &shard);
        slots.insert(node.cli(&["CLUSTER", "KEYSLOT", &name]).trim().to_owned());
        // Ask every node directly (no redirects): only the owner has the key.
        let owner: Vec<usize> = cluster
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                let out = std::process::Command::new("redis-cli")
                    .args(["-p", &n.port.to_string(), "EXISTS", &name])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout).trim() == "1"
            })
            .map(|(i, _)| i)
            .collect();
        assert_eq!(owner.len(), 1, "{name} on nodes {owner:?}");
        owners.insert(owner[0]);
    }
    assert!(slots.len() >= 8, "10 shards in only {} slots", slots.len());
    assert!(owners.len() >= 2, "10 shards all on one node");
    let child = question.child("Answer", "a/b:c");
    let child_slot = node.cli(&["CLUSTER", "KEYSLOT", &redis_key(ns, &child)]);
    let main_slot = node.cli(&["CLUSTER", "KEYSLOT", &redis_key(ns, &question)]);
    assert_eq!(child_slot, main_slot);

    // A transaction across entity groups is refused, and nothing is written.
    let txn = Transaction::new().put(question.clone(), doc(1)).put(
        autoshard::layout::static_shard(&question, "votes", 0),
        doc(1),
    );
    assert!(matches!(store.commit(&txn).await, Err(Error::Invalid(_))));
    assert!(store.get(&question).await.unwrap().is_none());
    // Within one group it commits.
    let txn = Transaction::new()
        .expect(question.clone(), None)
        .put(question.clone(), doc(1))
        .put(child.clone(), doc(2));
    assert_eq!(store.commit(&txn).await.unwrap(), Commit::Committed);

    // get_many across slots keeps order.
    let keys: Vec<Key> = (0..10)
        .map(|i| autoshard::layout::static_shard(&question, "votes", i))
        .chain([child.clone(), Key::new("None", "x")])
        .collect();
    let docs = store.get_many(&keys).await.unwrap();
    assert_eq!(docs.len(), 12);
    assert!(docs[..11].iter().all(Option::is_some));
    assert!(docs[11].is_none());
    assert_eq!(docs[10].as_ref().unwrap().doc, doc(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster() {
    let cluster = Cluster::start();
    let node = &cluster.nodes[0];
    let connect = |case: &str| {
        let urls = cluster.urls();
        let options = options(case);
        async move {
            let ns = options.namespace.clone();
            (
                RedisStore::connect_cluster_with(&urls, options)
                    .await
                    .unwrap(),
                ns,
            )
        }
    };
    let (store, ns) = connect("layout").await;
    assert!(store.is_cluster());
    layout_on_the_server(node, &store, &ns).await;
    let (store, ns) = connect("earlier").await;
    merges_honour_entries_an_earlier_layout_kept_in_the_document(node, &store, &ns).await;
    let (store, ns) = connect("foreign").await;
    foreign_values_are_malformed(node, &store, &ns).await;
    let (store, ns) = connect("owner texts").await;
    owner_texts_own_as_their_json_reads(node, &store, &ns).await;
    let (store, ns) = connect("foreign record").await;
    a_foreign_value_at_a_record_hash_is_malformed(node, &store, &ns).await;
    let (store, ns) = connect("named writer").await;
    a_lookup_naming_a_writer_reads_its_entry(node, &store, &ns, false).await;
    let (store, ns) = connect("stale").await;
    scan_skips_stale_index_entries(node, &store, &ns).await;
    let (store, ns) = connect("fold texts").await;
    folding_lookups_answer_stored_texts_as_the_reference(node, &store, &ns).await;

    let (store, ns) = connect("slots").await;
    shards_spread_over_the_nodes_and_groups_stay_on_one_slot(&cluster, &store, &ns).await;

    let (store, _) = connect("concurrent").await;
    concurrent_increments_are_exact(Arc::new(store)).await;

    let (store, ns) = connect("moved").await;
    reads_answer_what_the_cluster_holds_after_a_slot_moved(&cluster, &store, &ns).await;

    let (store, ns) = connect("multi").await;
    the_documents_of_a_slot_are_read_by_one_multi(&cluster, &store, &ns).await;

    let (store, ns) = connect("moving record").await;
    a_record_hash_that_moves_before_its_document_makes_calls_try_again(&cluster, &store, &ns).await;

    // A cluster client built by the application carries the store as well.
    let client = autoshard::redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let store = RedisStore::from_cluster_client(&client, options("client"))
        .await
        .unwrap();
    assert!(store.is_cluster());
    concurrent_increments_are_exact(Arc::new(store)).await;
    // One that cannot reach any node fails at connect, not at the first write.
    let nowhere =
        autoshard::redis::cluster::ClusterClientBuilder::new(vec!["redis://127.0.0.1:1/"])
            .retries(0)
            .build()
            .unwrap();
    let err = RedisStore::from_cluster_client(&nowhere, options("nowhere"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
}

/// The commands of every master's `INFO commandstats` since the last `CONFIG RESETSTAT`,
/// summed over the masters: (name, calls).
fn calls_on_the_masters(cluster: &Cluster) -> Vec<(String, u64)> {
    let mut calls: Vec<(String, u64)> = Vec::new();
    for node in &cluster.nodes {
        for line in node.cli(&["INFO", "commandstats"]).lines() {
            let Some((name, fields)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let n: u64 = fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            match calls.iter_mut().find(|(known, _)| known == name) {
                Some((_, total)) => *total += n,
                None => calls.push((name.to_owned(), n)),
            }
        }
    }
    calls
}

/// What a lookup answers: its documents, and its pages' items.
type Answer = (Vec<Option<Document>>, Vec<Vec<(Key, Document)>>);

/// The lookups of [`the_documents_of_a_slot_are_read_by_one_multi`] over `keys` (an entity
/// and its two children, the second holding a write record of writer `w`), each with what
/// it answers: without records, with them, naming `w`, and the entity with the scan of its
/// children prefetching both, then neither, then one.
fn lookups_of_one_slot(keys: &[Key; 3]) -> Vec<(Lookup, Answer)> {
    let plain: Vec<Option<Document>> = vec![Some(doc(0)), Some(doc(2)), Some(doc(2))];
    let mut recorded = plain.clone();
    if let Some(doc) = &mut recorded[1] {
        doc.insert(merge::RECORD.to_owned(), serde_json::json!({"w": [1, 1]}));
    }
    let children = vec![(keys[1].clone(), doc(2)), (keys[2].clone(), doc(2))];
    let scan = |prefetch: &[Key]| Lookup {
        keys: vec![keys[0].clone()],
        scans: vec![Scan::new("Answer", Some(keys[0].clone()))],
        prefetch: prefetch.to_vec(),
        ..Lookup::default()
    };
    vec![
        (
            Lookup {
                keys: keys.to_vec(),
                ..Lookup::default()
            },
            (plain, Vec::new()),
        ),
        (
            Lookup {
                keys: keys.to_vec(),
                records: true,
                ..Lookup::default()
            },
            (recorded.clone(), Vec::new()),
        ),
        (
            Lookup {
                keys: keys.to_vec(),
                writer: Some("w".into()),
                ..Lookup::default()
            },
            (recorded, Vec::new()),
        ),
        (
            scan(&keys[1..]),
            (vec![Some(doc(0))], vec![children.clone()]),
        ),
        (scan(&[]), (vec![Some(doc(0))], vec![children.clone()])),
        (scan(&keys[1..2]), (vec![Some(doc(0))], vec![children])),
    ]
}

/// The documents a read wants of one slot (an entity and its children, one entity group)
/// are read by one `MULTI` on their master, with or without their write records or one
/// writer's entry, and so is a scan's first page with the documents the lookup prefetches
/// in its index's slot, never by the read script: a read of each kind is one `EXEC`, and
/// no script runs. A scan without a prefetch is read by the script, and so is a page that
/// lists a document the lookup did not prefetch.
/// A value of another type at one of the documents is `Malformed` naming it, and once the
/// slot has moved to another master every read answers as stored (the old master refuses
/// the `MULTI`, and the read script reads them through the cluster's routing).
async fn the_documents_of_a_slot_are_read_by_one_multi(
    cluster: &Cluster,
    store: &RedisStore,
    ns: &str,
) {
    let entity = Key::new("Question", "multi");
    let keys = [
        entity.clone(),
        entity.child("Answer", "a"),
        entity.child("Answer", "b"),
    ];
    for (i, key) in (0..).zip(&keys) {
        store.insert(key, doc(i)).await.unwrap();
    }
    let merge = Merge::new(
        keys[1].clone(),
        "n",
        Fold::SUM_I64,
        1.into(),
        write_id("w", 1),
    );
    assert_eq!(store.merge(&merge).await.unwrap(), Merged::Applied);
    let lookups = lookups_of_one_slot(&keys);
    let read = |lookup: &Lookup| {
        let lookup = lookup.clone();
        async move {
            let found = store.lookup(&lookup).await?;
            let docs = found.docs.into_iter().map(|d| d.map(|d| d.doc)).collect();
            let pages = found
                .pages
                .into_iter()
                .map(|page| page.items.into_iter().map(|(k, d)| (k, d.doc)).collect())
                .collect();
            Ok::<Answer, Error>((docs, pages))
        }
    };
    for node in &cluster.nodes {
        node.cli(&["CONFIG", "RESETSTAT"]);
    }
    // All but the last two: one prefetches nothing, the other one of the two documents
    // its page lists (its `MULTI` lists the page, and the read script reads it again).
    for (lookup, want) in &lookups[..4] {
        assert_eq!(&read(lookup).await.unwrap(), want);
    }
    let calls = calls_on_the_masters(cluster);
    let count = |name: &str| calls.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c);
    assert_eq!(count("evalsha") + count("eval"), 0, "no script: {calls:?}");
    assert_eq!(count("exec"), 4, "one EXEC per read: {calls:?}");
    for (lookup, want) in &lookups[4..] {
        assert_eq!(&read(lookup).await.unwrap(), want);
    }

    let names: Vec<String> = keys.iter().map(|k| redis_key(ns, k)).collect();
    let master = cluster.master_of(&names[0]);
    cluster.move_slot_of(&names[0], (master + 1) % cluster.nodes.len());
    for round in 0..4 {
        for (lookup, want) in &lookups {
            let got = read(lookup).await.unwrap();
            assert_eq!(&got, want, "after the move, round {round}");
        }
    }
    cluster.nodes[0].cli(&["DEL", &names[2]]);
    cluster.nodes[0].cli(&["SET", &names[2], "plain"]);
    for (lookup, _) in &lookups {
        match read(lookup).await {
            Err(Error::Malformed { key, .. }) => assert_eq!(key, keys[2]),
            other => panic!("a string among the documents: expected Malformed, got {other:?}"),
        }
    }
}

/// While a slot migrates, a document's record hash may move to the new master before the
/// document does. A read of the document with its record (whole, or one writer's entry)
/// then answers an error to try again, never `Malformed`: the old master's `MULTI` is
/// refused, and the read script, which reaches the record hash without being given it,
/// fails with `TRYAGAIN` there. So do a put, a delete and a merge through `merge.lua`,
/// before they write anything (a put deleted the document, then failed). Once the slot
/// has moved, the read answers the document with its record, as before those writes.
async fn a_record_hash_that_moves_before_its_document_makes_calls_try_again(
    cluster: &Cluster,
    store: &RedisStore,
    ns: &str,
) {
    let key = Key::new("Moving", "1");
    store.insert(&key, doc(0)).await.unwrap();
    let merge = Merge::new(key.clone(), "n", Fold::SUM_I64, 1.into(), write_id("w", 1));
    assert_eq!(store.merge(&merge).await.unwrap(), Merged::Applied);
    let name = redis_key(ns, &key);
    let to = (cluster.master_of(&name) + 1) % cluster.nodes.len();
    let from = cluster.begin_moving_slot_of(&name, to);
    cluster.migrate(from, to, &[&format!("{name}/~w")]);
    let lookups = [
        Lookup {
            keys: vec![key.clone()],
            writer: Some("w".into()),
            ..Lookup::default()
        },
        Lookup {
            keys: vec![key.clone()],
            records: true,
            ..Lookup::default()
        },
    ];
    for lookup in &lookups {
        match store.lookup(lookup).await {
            Err(Error::Backend { .. }) => {}
            other => {
                panic!("a record hash on its way: expected an error to try again, got {other:?}")
            }
        }
    }
    // An operand of 15 digits goes to `merge.lua`, which takes the record hash without
    // being given it (`merge_common.lua` is given it, and Redis refuses that call).
    let big = 100_000_000_000_000_i64;
    let merge = Merge::new(
        key.clone(),
        "n",
        Fold::SUM_I64,
        big.into(),
        write_id("w", 2),
    );
    let writes = [
        store.put(&key, doc(7)).await.map(drop),
        store.delete(&key).await.map(drop),
        store.merge(&merge).await.map(drop),
    ];
    for write in writes {
        let Err(Error::Backend { .. }) = write else {
            panic!("a write with its record hash on its way: expected an error, got {write:?}");
        };
    }
    cluster.move_slot_of(&name, to);
    let mut recorded = doc(1);
    recorded.insert(merge::RECORD.to_owned(), serde_json::json!({"w": [1, 1]}));
    for lookup in &lookups {
        let found = store.lookup(lookup).await.unwrap();
        let got = found.docs[0].as_ref().map(|d| &d.doc);
        assert_eq!(got, Some(&recorded), "as before the writes that failed");
    }
    store.put(&key, doc(7)).await.unwrap();
    assert_eq!(store.get(&key).await.unwrap().map(|d| d.doc), Some(doc(7)));
}

/// A read of documents each alone in its slot (without write records, as a load reads,
/// and with them, as `get_many` and key groups read) and of scan pages goes to each
/// master as one pipeline, by the slot table the store fetched when it connected; once a
/// slot has moved to another master, reads through that table still answer every
/// document and page as stored (the node that lost the slot answers with an error, never
/// with data, and the item is read again through the cluster's routing, the table
/// dropped), and keep answering so.
async fn reads_answer_what_the_cluster_holds_after_a_slot_moved(
    cluster: &Cluster,
    store: &RedisStore,
    ns: &str,
) {
    let entity = Key::new("Question", "moved");
    let keys: Vec<Key> = (0..10)
        .map(|i| autoshard::layout::static_shard(&entity, "votes", i))
        .chain([entity.clone()])
        .collect();
    for (i, key) in (0..).zip(&keys) {
        store.insert(key, doc(i)).await.unwrap();
    }
    let children = [entity.child("Answer", "a"), entity.child("Answer", "b")];
    for (i, child) in (20..).zip(&children) {
        store.insert(child, doc(i)).await.unwrap();
    }
    // A lookup with a scan in the entity's group (its index in the entity's slot),
    // without write records (what a load reads) or with them.
    let lookup = |records| Lookup {
        keys: keys.clone(),
        scans: vec![Scan::new("Answer", Some(entity.clone()))],
        records,
        writer: None,
        prefetch: Vec::new(),
    };
    let read = |records| async move {
        let found = store.lookup(&lookup(records)).await.unwrap();
        let docs: Vec<_> = found.docs.into_iter().map(|d| d.map(|d| d.doc)).collect();
        let page: Vec<_> = found.pages[0]
            .items
            .iter()
            .map(|(key, d)| (key.clone(), d.doc.clone()))
            .collect();
        (docs, page)
    };
    // The main document and a shard hold a write record, which only a read with records
    // answers.
    let main = keys.len() - 1;
    let mut expected: Vec<Option<Document>> = (0..).zip(&keys).map(|(i, _)| Some(doc(i))).collect();
    let mut recorded = expected.clone();
    for at in [0, main] {
        let merge = Merge::new(
            keys[at].clone(),
            "n",
            Fold::SUM_I64,
            1.into(),
            write_id("w", 1),
        );
        assert_eq!(store.merge(&merge).await.unwrap(), Merged::Applied);
        let n = i64::try_from(at).unwrap() + 1;
        expected[at] = Some(doc(n));
        let mut with_record = doc(n);
        with_record.insert(merge::RECORD.to_owned(), serde_json::json!({"w": [1, 1]}));
        recorded[at] = Some(with_record);
    }
    let page: Vec<(Key, Document)> = (20..)
        .zip(&children)
        .map(|(i, k)| (k.clone(), doc(i)))
        .collect();
    for records in [false, true] {
        let want = answered(records, &recorded, &expected);
        assert_eq!(read(records).await, (want, page.clone()));
    }
    // Move the entity's slot (its main document and the scan's index) to a master that
    // serves a shard of the read, so that the old table sends both to a node that no
    // longer has them.
    let names: Vec<String> = keys.iter().map(|k| redis_key(ns, k)).collect();
    let masters: Vec<usize> = names.iter().map(|n| cluster.master_of(n)).collect();
    let to = *masters
        .iter()
        .find(|&&m| m != masters[main])
        .expect("the documents span two masters");
    cluster.move_slot_of(&names[main], to);
    for round in 0..20 {
        let records = round % 2 == 1;
        let want = answered(records, &recorded, &expected);
        assert_eq!(read(records).await, (want, page.clone()));
        let docs = store.get_many(&keys).await.unwrap();
        let docs: Vec<_> = docs.into_iter().map(|d| d.map(|d| d.doc)).collect();
        assert_eq!(docs, recorded, "get_many, round {round}");
    }
    let mut rewritten = doc(100);
    rewritten.insert(merge::RECORD.to_owned(), serde_json::json!({"w": [1, 1]}));
    store.put(&keys[main], rewritten.clone()).await.unwrap();
    expected[main] = Some(doc(100));
    recorded[main] = Some(rewritten);
    for records in [false, true] {
        let want = answered(records, &recorded, &expected);
        assert_eq!(read(records).await, (want, page.clone()));
    }
}

/// What a read answers of documents stored as `recorded` (with their write records) and
/// read as `expected` without them.
fn answered(
    records: bool,
    recorded: &[Option<Document>],
    expected: &[Option<Document>],
) -> Vec<Option<Document>> {
    if records { recorded } else { expected }.to_vec()
}

/// `rediss://` (feature `tls`): a server whose certificate the platform does not trust is
/// refused at connect, saying so; with its certificate as the root, through a
/// `redis::Client` built for it, the store works as over plain TCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_connections_verify_the_server_and_carry_the_store() {
    use autoshard::prelude::*;

    #[autoshard::sharded]
    #[derive(Entity)]
    struct Poll {
        #[id]
        id: u64,
        #[shardable(shards = 4, fold = sum)]
        votes: i64,
    }
    impl Poll {
        #[shard_method]
        fn vote(&mut self) {
            self.votes += 1;
        }
    }

    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let server = Standalone::start_tls(&cert.cert.pem(), &cert.signing_key.serialize_pem());
    let ns = namespace("tls");
    let options = || RedisOptions::default().namespace(ns.clone());
    let fast = || options().reconnect_retries(0);

    let untrusted = RedisStore::connect_with(&server.tls_url(), fast())
        .await
        .unwrap_err();
    // The error names the server; its source, redis-rs's error, says what failed.
    let mut message = untrusted.to_string();
    let mut source = std::error::Error::source(&untrusted);
    while let Some(cause) = source {
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    assert!(message.contains("127.0.0.1"), "{message}");
    assert!(message.to_lowercase().contains("certificate"), "{message}");

    let roots = autoshard::redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(cert.cert.pem().into_bytes()),
    };
    let client = autoshard::redis::Client::build_with_tls(server.tls_url(), roots).unwrap();
    let store = RedisStore::from_client(client, options()).await.unwrap();
    let db = Mapper::new(store);
    db.insert(&mut Poll::new(1, 0)).await.unwrap();
    for _ in 0..20 {
        db.apply(&1, |p: &mut Poll| p.vote()).await.unwrap();
    }
    assert_eq!(db.load::<Poll>(&1).await.unwrap().votes, 20);
    // The plain port of the same server holds the same data: TLS changed the transport only.
    let plain = RedisStore::connect_with(&server.url(), options())
        .await
        .unwrap();
    assert_eq!(Mapper::new(plain).load::<Poll>(&1).await.unwrap().votes, 20);
}

/// A failed connect says what failed in its `Display` text (a refused port, a wrong
/// password, a password missing), with the server's address and never the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_errors_say_why_and_never_show_the_password() {
    let quick = || RedisOptions::default().reconnect_retries(0);
    let refused = RedisStore::connect_with("redis://127.0.0.1:1/", quick())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.starts_with("store error: connecting to Redis at 127.0.0.1:1: ")
            && refused.to_lowercase().contains("refused"),
        "{refused}"
    );

    let server = Standalone::start_with(&["--requirepass", "s3cret"]);
    let port = server.server.port;
    let wrong = RedisStore::connect_with(&format!("redis://:hunter2@127.0.0.1:{port}/"), quick())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        wrong.contains(&format!("127.0.0.1:{port}"))
            && wrong.to_lowercase().contains("authentication failed")
            && !wrong.contains("hunter2"),
        "{wrong}"
    );
    let missing = RedisStore::connect_with(&format!("redis://127.0.0.1:{port}/"), quick())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        missing.contains(&format!("127.0.0.1:{port}")) && missing.contains("NOAUTH"),
        "{missing}"
    );
    let right =
        RedisStore::connect_with(&format!("redis://:s3cret@127.0.0.1:{port}/"), quick()).await;
    assert!(right.is_ok(), "{right:?}");
}

/// The outcome of a commit as the test compares it across stores (versions left out).
fn outcome(result: autoshard::Result<Commit>) -> String {
    match result {
        Ok(commit) => format!("{commit:?}"),
        Err(Error::Grouped { key, group, .. }) => format!("grouped {key} by {group}"),
        Err(e) => format!("{e:?}"),
    }
}

/// Owner-alone commits (a key group's join, renewal or release of one document) of 48
/// documents in slots of their own, six of each kind: a join at the version read; one at
/// a version the document does not hold; a commit without a token on a document another
/// group owns; a release by the group that owns it; a join of an absent document; a
/// release by a group that owns nothing. Prepared the same way on `store`; the commits,
/// and the owners they set.
async fn owner_commits(store: &dyn DocumentStore, docs: &[Key], until_ms: u64) -> Vec<Transaction> {
    let owner = |group: &str| Owner {
        group: group.to_owned(),
        until_ms,
        txn: None,
    };
    let mut commits = Vec::new();
    for (i, key) in (0..).zip(docs) {
        let case = i % 6;
        if case != 4 {
            store.insert(key, doc(i)).await.unwrap();
        }
        if case == 2 || case == 3 {
            let version = store.get(key).await.unwrap().unwrap().version;
            let group = if case == 2 { "other" } else { "g2" };
            let join = Transaction::new()
                .expect(key.clone(), Some(version))
                .own(key.clone(), Some(owner(group)));
            assert_eq!(store.commit(&join).await.unwrap(), Commit::Committed);
        }
        let version = match store.get(key).await.unwrap() {
            Some(found) => found.version,
            None => Version(1),
        };
        let at = |v: Version| Transaction::new().expect(key.clone(), Some(v));
        commits.push(match case {
            0 | 4 => at(version).own(key.clone(), Some(owner("g"))),
            1 => at(Version(version.0 + 1_000)).own(key.clone(), Some(owner("g"))),
            2 => at(version).own(key.clone(), None),
            3 => at(version).own(key.clone(), None).owned_by("g2"),
            _ => at(version).own(key.clone(), None).owned_by("gone"),
        });
    }
    commits
}

/// On a cluster, owner-alone commits bound for one master go to it together, in one call
/// of the owner script (on this current-thread runtime every commit sent at once is queued
/// before the first call leaves). Each answers as it would alone, and as the reference
/// store answers it; so do those whose slot moved to another master after the store
/// fetched its slot table (the call's master no longer serves them), and one at a key
/// that holds a foreign value.
#[tokio::test(flavor = "current_thread")]
async fn owner_commits_sent_together_answer_as_each_alone() {
    let cluster = Cluster::start();
    let options = options("own together");
    let ns = options.namespace.clone();
    let store = RedisStore::connect_cluster_with(&cluster.urls(), options)
        .await
        .unwrap();
    let reference = autoshard::store::MemoryStore::new();
    let entity = Key::new("Account", "together");
    let docs: Vec<Key> = (0..48)
        .map(|i| autoshard::layout::static_shard(&entity, "balance", i))
        .collect();
    let until_ms = store.now_ms().await.unwrap() + 600_000;
    let commits = owner_commits(&store, &docs, until_ms).await;
    let expected = owner_commits(&reference, &docs, until_ms).await;
    // One document of each kind moves to another master; the slot table is not told. (The
    // last ones: a call is routed by its first document, and one whose first document
    // moved runs on the new master, where the others are not.)
    for key in &docs[42..] {
        let name = redis_key(&ns, key);
        let from = cluster.master_of(&name);
        cluster.move_slot_of(&name, (from + 1) % cluster.nodes.len());
    }
    let foreign = autoshard::layout::static_shard(&entity, "balance", 100);
    let foreign_name = redis_key(&ns, &foreign);
    cluster.nodes[cluster.master_of(&foreign_name)].cli(&["SET", &foreign_name, "x"]);
    let foreign_commit = Transaction::new()
        .expect(foreign.clone(), Some(Version(1)))
        .own(foreign.clone(), None);

    let sent = commits.iter().map(|txn| store.commit(txn));
    let (answers, foreign_answer) = futures::join!(
        futures::future::join_all(sent),
        store.commit(&foreign_commit)
    );
    let reference_answers =
        futures::future::join_all(expected.iter().map(|txn| reference.commit(txn))).await;
    for ((key, got), want) in docs.iter().zip(answers).zip(reference_answers) {
        assert_eq!(outcome(got), outcome(want), "{key}");
    }
    assert!(
        matches!(&foreign_answer, Err(Error::Malformed { key, .. }) if *key == foreign),
        "{foreign_answer:?}"
    );
    let stored = |docs: Vec<Option<Versioned>>| -> Vec<Option<Document>> {
        docs.into_iter().map(|d| d.map(|d| d.doc)).collect()
    };
    assert_eq!(
        stored(store.get_many(&docs).await.unwrap()),
        stored(reference.get_many(&docs).await.unwrap())
    );
}
