//! The folding read: an entity's main document and its shard documents read together,
//! the store folding the built-in-fold properties of the shards itself and answering one
//! value per property instead of the shard documents' values (a load needs the fold, not
//! N values). A store that can aggregate on its server overrides it; the stores of this
//! crate fold what their lookup read ([`by_lookup`]: measured cheaper for their servers).
//!
//! A [`FoldLookup`] names the main document (answered whole), the shard documents, the
//! properties to fold, each with its built-in [`Fold`], and scans whose first page to read
//! (a load's scan of dynamic shards, answered whole). The answer ([`FoldFound`]) has:
//! - the main document, as `get_many` answers it;
//! - each shard document without the folded properties (its version and every other
//!   property: what the mapper reads to know which documents count) or `None` when absent;
//! - per property, the fold over the shard documents that hold it, in their order:
//!   [`Folded::Absent`] when none does, [`Folded::Value`] otherwise, or
//!   [`Folded::Unsupported`] when the store does not fold it exactly. [`reference()`]
//!   specifies the answer; a store's must equal it, except that a store may answer
//!   `Unsupported` for any property (the mapper then reads the documents whole and folds
//!   them itself);
//! - for each scan the page `scan` would answer (the parts are not one snapshot together).
//!
//! The fold of a sum is the exact sum of the stored integers, answered only when it lies
//! within the fold's range; max, min and union fold as [`Fold::fold`] does. A stored value
//! the fold does not take ([`Fold::supports`]: a malformed value, another type, a number
//! out of the type's range) makes the property `Unsupported`, so that the mapper's own fold
//! reports it where it reports it for any read.
//!
//! Like a [`Lookup`] without records, documents come without their write
//! records ([`merge::RECORD`]). The entries for documents of one entity group are one
//! snapshot, the values folded from them included; nothing more is promised across groups.

use super::merge::{self, Fold};
use super::{DocumentStore, Lookup, Scan, ScanPage};
use crate::document::{Value, Versioned};
use crate::error::{Error, Result};
use crate::key::Key;

/// The documents of one entity read with its shards folded by the store
/// ([`DocumentStore::fold_lookup`]).
#[derive(Clone, Debug, PartialEq)]
pub struct FoldLookup {
    /// The main document, answered whole.
    pub main: Key,
    /// The shard documents whose properties are folded.
    pub shards: Vec<Key>,
    /// The properties folded over the shards, each with its fold.
    pub properties: Vec<(String, Fold)>,
    /// Scans whose first page to read, as `scan` would (documents whole, without write
    /// records).
    pub scans: Vec<Scan>,
    /// Documents the scans are likely to list: a hint, as [`Lookup::prefetch`](super::Lookup::prefetch).
    pub prefetch: Vec<Key>,
}

/// The answer to a [`FoldLookup`].
#[derive(Clone, Debug, PartialEq)]
pub struct FoldFound {
    /// The main document, `None` when absent.
    pub main: Option<Versioned>,
    /// One entry per shard key, in order: the document without the folded properties.
    pub shards: Vec<Option<Versioned>>,
    /// One entry per property of the lookup, in order.
    pub values: Vec<Folded>,
    /// One page per scan, in order.
    pub pages: Vec<ScanPage>,
}

/// One property folded over the shard documents of a [`FoldLookup`].
#[derive(Clone, Debug, PartialEq)]
pub enum Folded {
    /// No shard document holds the property.
    Absent,
    /// The fold of the values the shard documents hold.
    Value(Value),
    /// The store did not fold it: read the shard documents whole.
    Unsupported,
}

/// The reference answer to `lookup` for the documents `main` and `shards` (one per shard
/// key, in order) as a snapshot read them and the `pages` its scans read, write records
/// included or not.
#[must_use]
pub fn reference(
    lookup: &FoldLookup,
    main: Option<Versioned>,
    shards: &[Option<Versioned>],
    pages: Vec<ScanPage>,
) -> FoldFound {
    folded(lookup, main, shards.to_vec(), pages)
}

/// [`reference()`] on documents it may take apart.
fn folded(
    lookup: &FoldLookup,
    main: Option<Versioned>,
    mut shards: Vec<Option<Versioned>>,
    pages: Vec<ScanPage>,
) -> FoldFound {
    let values = lookup
        .properties
        .iter()
        .map(|(property, fold)| {
            let held = shards
                .iter()
                .flatten()
                .filter_map(|shard| shard.doc.get(property));
            fold_all(*fold, held)
        })
        .collect();
    let without_record = |mut doc: Versioned| {
        doc.doc.remove(merge::RECORD);
        doc
    };
    for shard in shards.iter_mut().flatten() {
        shard.doc.remove(merge::RECORD);
        for (property, _) in &lookup.properties {
            shard.doc.remove(property);
        }
    }
    FoldFound {
        main: main.map(without_record),
        shards,
        values,
        pages: pages
            .into_iter()
            .map(|page| ScanPage {
                items: page
                    .items
                    .into_iter()
                    .map(|(key, doc)| (key, without_record(doc)))
                    .collect(),
                next: page.next,
            })
            .collect(),
    }
}

/// The answer to `lookup` from `store`'s [`lookup`](DocumentStore::lookup) (without write
/// records) and [`reference()`]: the trait's default, right on any store.
///
/// It is also what the stores of this crate answer. Folding on the server cost more than
/// it saved on each of them, measured: inside a Redis script the reads cost the server
/// three to four times what they cost in `MULTI`, and no run showed a PostgreSQL
/// statement that aggregated the shards cheaper than reading their rows
/// (`docs/results.md`, "Loads the store folds").
///
/// # Errors
/// What `lookup` returns, and [`Error::Backend`] when it answers a wrong number of
/// entries.
pub async fn by_lookup<S: DocumentStore + ?Sized>(
    store: &S,
    lookup: &FoldLookup,
) -> Result<FoldFound> {
    let mut keys = Vec::with_capacity(lookup.shards.len() + 1);
    keys.push(lookup.main.clone());
    keys.extend(lookup.shards.iter().cloned());
    let read = Lookup {
        keys,
        scans: lookup.scans.clone(),
        records: false,
        writer: None,
        prefetch: lookup.prefetch.clone(),
    };
    let found = store.lookup(&read).await?;
    let mut docs = found.docs.into_iter();
    match docs.next() {
        Some(main)
            if docs.len() == lookup.shards.len() && found.pages.len() == read.scans.len() =>
        {
            Ok(folded(lookup, main, docs.collect(), found.pages))
        }
        _ => Err(Error::backend(
            format!("lookup of {} keys for `{}`", read.keys.len(), lookup.main),
            "the store answered another number of entries or pages",
        )),
    }
}

/// `values` folded with `fold` as [`reference()`] specifies.
#[must_use]
pub fn fold_all<'v>(fold: Fold, values: impl IntoIterator<Item = &'v Value>) -> Folded {
    let mut values = values.into_iter();
    let Some(first) = values.next() else {
        return Folded::Absent;
    };
    if !fold.supports(first) {
        return Folded::Unsupported;
    }
    if let Fold::Sum { min, max } = fold {
        // Exact: at most 2^64 values of at most 2^64 each never leave i128.
        let mut total = merge::integer(first).unwrap_or_default();
        for value in values {
            match merge::integer(value).filter(|_| fold.supports(value)) {
                Some(n) => total = total.saturating_add(n),
                None => return Folded::Unsupported,
            }
        }
        return if (min..=max).contains(&total) {
            Folded::Value(merge::integer_value(total))
        } else {
            Folded::Unsupported
        };
    }
    let mut folded = first.clone();
    for value in values {
        match fold.fold(&folded, value) {
            Ok(Some(next)) => folded = next,
            _ => return Folded::Unsupported,
        }
    }
    Folded::Value(folded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::Version;
    use serde_json::json;

    fn shard(version: u64, pairs: Value) -> Versioned {
        let Value::Object(doc) = pairs else {
            unreachable!("a test shard is an object")
        };
        Versioned {
            doc: doc.into_iter().collect(),
            version: Version(version),
        }
    }

    fn lookup(properties: &[(&str, Fold)], shards: usize) -> FoldLookup {
        let main = Key::new("Q", "1");
        FoldLookup {
            shards: (0..shards)
                .map(|i| main.child_group("S", i.to_string()))
                .collect(),
            main,
            properties: properties
                .iter()
                .map(|(p, f)| ((*p).to_owned(), *f))
                .collect(),
            scans: Vec::new(),
            prefetch: Vec::new(),
        }
    }

    #[test]
    fn the_reference_folds_each_property_and_answers_shards_without_it() {
        let l = lookup(
            &[
                ("n", Fold::SUM_I64),
                ("m", Fold::MAX_I64),
                ("z", Fold::SUM_I64),
            ],
            3,
        );
        let shards = [
            Some(shard(
                4,
                json!({"n": 2, "m": 7, "~moved": {"0": 1}, "~w": {"w": [1, 1]}}),
            )),
            None,
            Some(shard(5, json!({"n": -5, "m": 9, "text": "x"}))),
        ];
        let main = Some(shard(3, json!({"n": 1, "~w": {"w": [1, 1]}})));
        let found = reference(&l, main, &shards, Vec::new());
        assert_eq!(
            found.values,
            [
                Folded::Value(json!(-3)),
                Folded::Value(json!(9)),
                Folded::Absent
            ]
        );
        assert_eq!(
            found.main,
            Some(shard(3, json!({"n": 1}))),
            "the main document keeps its values"
        );
        assert_eq!(
            found.shards,
            [
                Some(shard(4, json!({"~moved": {"0": 1}}))),
                None,
                Some(shard(5, json!({"text": "x"})))
            ]
        );
    }

    #[test]
    fn the_reference_leaves_to_the_caller_what_it_cannot_fold_exactly() {
        let sum = lookup(&[("n", Fold::SUM_I64)], 2);
        let malformed = [
            Some(shard(1, json!({"n": 2}))),
            Some(shard(2, json!({"n": "3"}))),
        ];
        let found = reference(&sum, None, &malformed, Vec::new());
        assert_eq!(found.values, [Folded::Unsupported]);
        let over = [
            Some(shard(1, json!({"n": i64::MAX}))),
            Some(shard(2, json!({"n": 1}))),
        ];
        let found = reference(&sum, None, &over, Vec::new());
        assert_eq!(
            found.values,
            [Folded::Unsupported],
            "a sum out of the type's range"
        );
    }
}
