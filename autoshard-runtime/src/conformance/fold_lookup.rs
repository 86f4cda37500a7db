//! The cases of folding lookups ([`DocumentStore::fold_lookup`]).

use super::merges::{every_fold, random_value, write_id};
use super::{doc, fresh_kind, ok};
use crate::document::Versioned;
use crate::key::Key;
use crate::store::fold_lookup::{self, FoldLookup, Folded};
use crate::store::merge::RECORD;
use crate::store::merge::{Fold, Merge, Merged};
use crate::store::{DocumentStore, Scan, ScanPage};

/// For each built-in fold (`every_fold`), entities whose shards (some in the main document's group,
/// some in groups of their own, some absent, some without the property, some with other
/// properties beside it) hold random values over the whole range each fold takes, small
/// canonical integers above all, and now and then a value of another type: the answer
/// equals [`fold_lookup::reference`] over what `get_many` reads, main document and shards
/// without their write records and folded properties included, except that a property
/// may be answered [`Folded::Unsupported`] (the contract allows it for any property). A
/// property no shard holds is [`Folded::Absent`].
pub async fn fold_lookup_matches_the_reference(store: &dyn DocumentStore) {
    use rand::SeedableRng;
    let seed: u64 = rand::random();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let kind = fresh_kind("FoldLookup");
    for (i, fold) in every_fold().into_iter().enumerate() {
        for round in 0..12_u32 {
            let main = Key::new(kind.as_str(), format!("{i}.{round}"));
            let mut main_doc = doc(&[("text", "q".into())]);
            if round % 5 == 0 {
                // A plain value of the property in the main document is not folded.
                main_doc.insert("v".to_owned(), 7.into());
            }
            ok(
                store.insert(&main, main_doc).await,
                "insert the main document",
            );
            let small = round % 3 == 0;
            let shards = seed_shards(store, &mut rng, &main, fold, small).await;
            let lookup = FoldLookup {
                main: main.clone(),
                shards: shards.clone(),
                properties: vec![("v".to_owned(), fold), ("none".to_owned(), fold)],
                scans: vec![
                    Scan::new("Shard", Some(main.clone())),
                    Scan::new("None", None),
                ],
                prefetch: vec![main.child("Shard", "0")],
            };
            let mut keys = vec![main.clone()];
            keys.extend(shards.iter().cloned());
            let read = ok(store.get_many(&keys).await, "get_many");
            let want = fold_lookup::reference(&lookup, read[0].clone(), &read[1..], Vec::new());
            let got = ok(store.fold_lookup(&lookup).await, "fold_lookup");
            let context = format!("seed {seed}, {fold:?}, {lookup:?}, read {read:?}");
            assert_eq!(got.main, want.main, "{context}: the main document");
            assert_eq!(got.shards, want.shards, "{context}: the shards");
            assert_eq!(got.values.len(), 2, "{context}: one value per property");
            // The scans list the shards whole (without write records), and nothing else.
            let mut listed: Vec<(Key, Versioned)> = Vec::new();
            for (key, found) in shards.iter().zip(&read[1..]) {
                if let Some(found) = found {
                    let mut found = found.clone();
                    found.doc.remove(RECORD);
                    listed.push((key.clone(), found));
                }
            }
            assert_eq!(got.pages.len(), 2, "{context}: one page per scan");
            assert_page(&got.pages[0], &listed, &context);
            assert_page(&got.pages[1], &[], &context);
            assert_eq!(
                got.values[1],
                Folded::Absent,
                "{context}: a property no shard holds"
            );
            if got.values[0] != Folded::Unsupported {
                assert_eq!(got.values[0], want.values[0], "{context}: the fold");
            }
            if small && !matches!(fold, Fold::Union { .. }) {
                assert!(
                    !matches!(want.values[0], Folded::Unsupported),
                    "{context}: the reference folds small integers"
                );
            }
        }
    }
}

/// Up to five shards of `main`, alternately in its group and in groups of their own, with
/// random values of `fold` (`small`: canonical integers below 10^5 in magnitude) or none,
/// some absent, some with another property, some with a write record.
async fn seed_shards(
    store: &dyn DocumentStore,
    rng: &mut rand::rngs::StdRng,
    main: &Key,
    fold: Fold,
    small: bool,
) -> Vec<Key> {
    use rand::RngExt;
    let mut shards = Vec::new();
    for s in 0..rng.random_range(0..6_u32) {
        let key = if s % 2 == 0 {
            main.child("Shard", s.to_string())
        } else {
            main.child_group("Shard", s.to_string())
        };
        shards.push(key.clone());
        if rng.random_range(0..6) == 0 {
            continue;
        }
        let mut shard = doc(&[]);
        if rng.random_range(0..5) != 0 {
            let value = if small {
                let (_, lowest, _) = fold.name_and_range();
                let low = if lowest < 0 { -99_999 } else { 0 };
                rng.random_range(low..100_000_i64).into()
            } else {
                random_value(rng, fold)
            };
            shard.insert("v".to_owned(), value);
        }
        if rng.random_range(0..3) == 0 {
            shard.insert("~moved".to_owned(), serde_json::json!({"0": 1}));
        }
        ok(store.insert(&key, shard).await, "insert a shard");
        if rng.random_range(0..3) == 0 {
            // A write record, never answered.
            let m = Merge::new(key.clone(), "w", Fold::SUM_I64, 1.into(), write_id("w", 1));
            assert_eq!(ok(store.merge(&m).await, "merge"), Merged::Applied);
        }
    }
    shards
}

/// A page (`got`) holds documents of `listed` only, each once and as listed; a page that
/// says it is complete holds them all. No order is promised.
fn assert_page(got: &ScanPage, listed: &[(Key, Versioned)], context: &str) {
    for (key, doc) in &got.items {
        let found = listed.iter().find(|(k, _)| k == key).map(|(_, d)| d);
        assert_eq!(found, Some(doc), "{context}: the page's `{key}`");
        let times = got.items.iter().filter(|(k, _)| k == key).count();
        assert_eq!(times, 1, "{context}: `{key}` once in its page");
    }
    if got.next.is_none() {
        assert_eq!(got.items.len(), listed.len(), "{context}: a complete page");
    }
}
