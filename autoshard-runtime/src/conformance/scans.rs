//! The cases of scans and lookups.

use super::merges::{SUM_I64, merge_ok, write_id};
use super::{doc, fresh_kind, ok, scan_all};
use crate::document::Versioned;
use crate::error::Error;
use crate::key::Key;
use crate::store::merge::{self, Merge, Merged, RECORD};
use crate::store::{DocumentStore, Lookup, Scan, ScanPage};
use std::collections::{BTreeMap, BTreeSet};

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
    assert!(
        scan_all(store, &fresh_kind("Nothing"), None, 100)
            .await
            .is_empty()
    );
}

/// Paging with small limits returns every document exactly once, with its version; so
/// does a limit anywhere in `usize` (one page of everything).
pub async fn scan_pages_cover_every_document_once(store: &dyn DocumentStore) {
    let kind = fresh_kind("Paging");
    let mut expected = BTreeMap::new();
    for i in 0..53 {
        let key = Key::new(kind.clone(), format!("{i}"));
        let v = ok(store.insert(&key, doc(&[("i", i.into())])).await, "insert");
        expected.insert(key, v);
    }
    for limit in [1, 7, 53, 54, 1000, 1 << 53, usize::MAX] {
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

/// A cursor that names no key (one no page handed out) is refused with `Invalid`, by a
/// scan and by a lookup that carries it, on every store; the cursor a page handed out
/// goes on after that page.
pub async fn a_cursor_that_names_no_key_is_invalid(store: &dyn DocumentStore) {
    let kind = fresh_kind("Cursor");
    for i in 0..3 {
        let key = Key::new(kind.as_str(), i.to_string());
        ok(store.insert(&key, doc(&[("i", i.into())])).await, "insert");
    }
    let first = ok(
        store.scan(&Scan::new(kind.as_str(), None).limit(1)).await,
        "scan",
    );
    let mut next = Scan::new(kind.as_str(), None);
    next.cursor = first.next.clone();
    let rest = ok(store.scan(&next).await, "scan after the first page");
    assert_eq!(first.items.len() + rest.items.len(), 3);
    for cursor in ["", "garbage", "%zz", "{Cursor:1"] {
        let mut scan = Scan::new(kind.as_str(), None);
        scan.cursor = Some(cursor.to_owned());
        let what = format!("cursor {cursor:?}");
        assert!(
            matches!(store.scan(&scan).await, Err(Error::Invalid(_))),
            "scan, {what}"
        );
        let lookup = Lookup {
            keys: vec![Key::new(kind.as_str(), "0")],
            scans: vec![scan],
            records: false,
            writer: None,
            prefetch: Vec::new(),
        };
        assert!(
            matches!(store.lookup(&lookup).await, Err(Error::Invalid(_))),
            "lookup, {what}"
        );
    }
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
        Scan::new("Part", Some(root.clone())).limit(usize::MAX),
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
            writer: None,
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
            assert!(
                found.docs[0]
                    .as_ref()
                    .is_some_and(|d| merge::applied(Some(&d.doc), "w", 1))
            );
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
        scans_alone_answer_the_same_pages(store, &scans, records, &found.pages).await;
    }
}

/// A lookup of `scans` without documents answers the pages `pages` (as a lookup with
/// documents answered them).
async fn scans_alone_answer_the_same_pages(
    store: &dyn DocumentStore,
    scans: &[Scan],
    records: bool,
    pages: &[ScanPage],
) {
    let lookup = Lookup {
        keys: Vec::new(),
        scans: scans.to_vec(),
        records,
        writer: None,
        prefetch: Vec::new(),
    };
    let alone = ok(store.lookup(&lookup).await, "lookup of scans alone");
    assert!(alone.docs.is_empty(), "scans alone: {alone:?}");
    let items = |pages: &[ScanPage]| -> Vec<BTreeMap<Key, Versioned>> {
        pages
            .iter()
            .map(|p| p.items.iter().cloned().collect())
            .collect()
    };
    assert_eq!(
        items(&alone.pages),
        items(pages),
        "scans alone, records {records}"
    );
}
