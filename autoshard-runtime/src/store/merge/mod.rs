//! The merge operation: a built-in fold applied by the store itself, without a read and
//! without a conflict (like `RocksDB`'s merge operator), carrying a write id that the
//! document records in the same atomic step.
//!
//! A [`Merge`] names one document, one top-level property, a [`Fold`] and an operand. The
//! store applies it atomically:
//! 1. the document must exist, and when the merge has a guard ([`Merge::only_if`]) its
//!    guard property must hold the given string (or be absent, for `None`); otherwise
//!    nothing is written and the answer is [`Merged::Missing`];
//! 2. when the document's write record (property [`RECORD`]: `{writer: [seq, at_ms]}`)
//!    holds `seq` or more for the merge's writer, nothing is written and the answer is
//!    [`Merged::AlreadyApplied`];
//! 3. otherwise the property becomes `fold(stored, operand)` (the operand alone when the
//!    property is absent: a fold's neutral element is its identity), the record gets
//!    `[seq, at_ms]` for the writer, and the document gets a new version; the answer is
//!    [`Merged::Applied`]. The record may also lose entries of other writers older than
//!    the horizon, and does lose all of them when `seq` is a multiple of [`PRUNE_EVERY`]
//!    (so records stay bounded while a merge need not visit every entry).
//!
//! A sum outside the bounds the merge gives fails with [`Error::Overflow`] and writes
//! nothing. A store answers [`Merged::Unsupported`] (and writes nothing) for values it
//! cannot fold exactly, operand or stored: the folds are defined here on integers within
//! the property type's range (sum, max, min) and on arrays of strings or of integers
//! within the element type's range (union). Anything else, a stored value of another
//! type above all, goes through read and compare-and-set with the entity's typed fold,
//! which reports a stored value the entity cannot read as [`Error::Malformed`]. [`reference()`]
//! is the reference implementation; a store's answer must equal it.

use crate::document::{Document, Value};
use crate::error::{Error, Result};
use crate::key::Key;

mod fold;

pub use fold::{Elements, Fold, FoldError};
pub(crate) use fold::{integer, integer_value};

/// A merge whose `seq` is a multiple of this drops every record entry older than its
/// horizon (module docs). Dropping visits every entry, so its cost per merge is the number
/// of writers a document records divided by this: small, while a record stays bounded by
/// the writers of one horizon and those since the last drop. The Redis script
/// (`merge.lua`) and PostgreSQL's `autoshard_merge` use the same number.
pub const PRUNE_EVERY: u64 = 256;

/// The reserved property of a document that records the write ids applied to it:
/// `{writer: [seq, at_ms]}`, the highest sequence number applied per writer and when.
/// Only an entry whose first two elements are integers in `0..=u64::MAX` records a write;
/// any other entry (or a record that is not a map, or one without entries) records
/// nothing, and a store may keep or drop it.
pub const RECORD: &str = "~w";

/// The write id a merge (or a commit folding a change) carries: writer and sequence
/// number; see the mapper's `write_ids` module for the rules that make "highest sequence
/// number applied" stand for every earlier write of the writer.
///
/// The mapper fixes it once, just before the first send of a change, and the same value
/// travels with the change until a store records it: in the entity's pending state, in
/// every send again, and in the merge or commit that applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteId {
    /// The writer's id (shared by the writer's writes, so cloning a write id is cheap).
    pub writer: std::sync::Arc<str>,
    /// Its sequence number, growing per writer.
    pub seq: u64,
    /// When the write was first sent, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Record entries older than this (milliseconds since the Unix epoch) are dropped.
    pub horizon_ms: u64,
}

/// One merge request: fold `operand` into property `property` of the document at `key`
/// with `fold`, recording `write` (module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Merge {
    /// The document.
    pub key: Key,
    /// The top-level property folded into.
    pub property: String,
    /// The fold.
    pub fold: Fold,
    /// The value folded in.
    pub operand: Value,
    /// The write id recorded with it.
    pub write: WriteId,
    /// A property the document must hold with this string value (`None`: must not hold).
    pub guard: Option<(String, Option<String>)>,
}

impl Merge {
    /// A merge without a guard (the document only has to exist).
    #[must_use]
    pub fn new(
        key: Key,
        property: impl Into<String>,
        fold: Fold,
        operand: Value,
        write: WriteId,
    ) -> Self {
        Merge {
            key,
            property: property.into(),
            fold,
            operand,
            write,
            guard: None,
        }
    }

    /// Applies only while property `property` of the document holds the string `value`
    /// (`None`: only while it is absent).
    #[must_use]
    pub fn only_if(mut self, property: impl Into<String>, value: Option<String>) -> Self {
        self.guard = Some((property.into(), value));
        self
    }

    /// [`Error::Invalid`] for a merge into one of the store's own properties, the write
    /// record ([`RECORD`]) or the owner ([`OWNER`](super::ownership::OWNER)), which no
    /// store folds into: every store refuses it before reading anything.
    ///
    /// # Errors
    /// As above.
    pub(crate) fn check(&self) -> Result<()> {
        if self.property == RECORD || self.property == super::ownership::OWNER {
            return Err(Error::Invalid(format!(
                "a merge into `{}` of `{}`: the property is the store's own, not one a \
                 merge folds into",
                self.property, self.key
            )));
        }
        Ok(())
    }
}

/// The outcome of [`DocumentStore::merge`](super::DocumentStore::merge).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Merged {
    /// Folded in and recorded.
    Applied,
    /// The document records this write id: it was applied before; nothing written.
    AlreadyApplied,
    /// The document is absent or its guard property does not hold; nothing written.
    Missing,
    /// The stored value or the operand is not one this store folds exactly; nothing
    /// written (the caller reads and commits instead).
    Unsupported,
}

/// What [`reference()`] decided for a document.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// The merge's answer, with nothing to write.
    Answer(Merged),
    /// Write this document (the answer is [`Merged::Applied`]).
    Write(Document),
}

/// The reference implementation of a merge on `doc` (`None`: absent), the one every
/// store's answer must equal.
///
/// # Errors
/// [`Error::Overflow`] for a sum out of the bounds of [`Fold::Sum`];
/// [`Error::Invalid`] for a merge into the write record or the owner property.
pub fn reference(doc: Option<&Document>, merge: &Merge) -> Result<Step> {
    merge.check()?;
    let Some(doc) = doc else {
        return Ok(Step::Answer(Merged::Missing));
    };
    if let Some((property, expected)) = &merge.guard
        && (doc.get(property).and_then(Value::as_str) != expected.as_deref()
            || (expected.is_none() && doc.contains_key(property)))
    {
        return Ok(Step::Answer(Merged::Missing));
    }
    if applied(Some(doc), &merge.write.writer, merge.write.seq) {
        return Ok(Step::Answer(Merged::AlreadyApplied));
    }
    // An absent property holds the fold's neutral element: 0 for a sum (whose bounds
    // still apply), and nothing at all for the others.
    let neutral = match merge.fold {
        Fold::Sum { .. } => Some(Value::from(0)),
        _ => None,
    };
    let folded = match doc.get(&merge.property).or(neutral.as_ref()) {
        None if merge.fold.takes_operand(&merge.operand) => Some(merge.operand.clone()),
        None => None,
        Some(stored) => merge
            .fold
            .fold(stored, &merge.operand)
            .map_err(|_| overflow(merge))?,
    };
    let Some(folded) = folded else {
        return Ok(Step::Answer(Merged::Unsupported));
    };
    let mut doc = doc.clone();
    doc.insert(merge.property.clone(), folded);
    let WriteId {
        writer,
        seq,
        at_ms,
        horizon_ms,
    } = &merge.write;
    record(&mut doc, writer, *seq, *at_ms, *horizon_ms);
    Ok(Step::Write(doc))
}

/// The [`Error::Overflow`] of a sum merge that left its bounds.
pub(crate) fn overflow(merge: &Merge) -> Error {
    let (min, max) = match merge.fold {
        Fold::Sum { min, max } => (min, max),
        _ => (i128::MIN, i128::MAX),
    };
    Error::Overflow {
        key: merge.key.clone(),
        property: merge.property.clone(),
        reason: FoldError::Overflow { min, max }.to_string(),
    }
}

/// The highest sequence number `doc` records for `writer` (which entries count: [`RECORD`]).
fn recorded(doc: &Document, writer: &str) -> Option<u64> {
    match doc.get(RECORD)?.get(writer)?.as_array()?.as_slice() {
        [seq, at, ..] if at.is_u64() => seq.as_u64(),
        _ => None,
    }
}

/// Whether `doc` records the write `(writer, seq)` as applied.
#[must_use]
pub fn applied(doc: Option<&Document>, writer: &str, seq: u64) -> bool {
    doc.and_then(|doc| recorded(doc, writer))
        .is_some_and(|last| last >= seq)
}

/// Records `(writer, seq)` at `now` in `doc` (keeping the higher sequence number if one
/// is there) and drops the entries written before `horizon`.
pub fn record(doc: &mut Document, writer: &str, seq: u64, now: u64, horizon: u64) {
    let seq = recorded(doc, writer).map_or(seq, |last| last.max(seq));
    let mut entries = match doc.remove(RECORD) {
        Some(Value::Object(entries)) => entries,
        _ => serde_json::Map::new(),
    };
    entries.retain(|_, entry| {
        entry
            .get(1)
            .and_then(Value::as_u64)
            .is_some_and(|at| at >= horizon)
    });
    entries.insert(writer.to_owned(), Value::from(vec![seq, now]));
    doc.insert(RECORD.to_owned(), Value::Object(entries));
}

/// What a [`Write::Values`](super::Write::Values) of `doc` stores over `kept`, the
/// document the store held (if any): `doc`'s properties, and the record `kept` holds
/// with the entries `doc`'s record carries over it (each replaces its writer's). The
/// reference every store's values write must equal.
#[must_use]
pub fn with_kept_record(kept: Option<&Document>, doc: &Document) -> Document {
    let mut entries = match kept.and_then(|kept| kept.get(RECORD)) {
        Some(Value::Object(entries)) => entries.clone(),
        _ => serde_json::Map::new(),
    };
    let mut stored = doc.clone();
    if let Some(Value::Object(carried)) = stored.remove(RECORD) {
        entries.extend(carried);
    }
    if !entries.is_empty() {
        stored.insert(RECORD.to_owned(), Value::Object(entries));
    }
    stored
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_guarded_merge_needs_the_guard_to_hold() {
        let key = Key::new("K", "1");
        let write = WriteId {
            writer: "w".into(),
            seq: 1,
            at_ms: 10,
            horizon_ms: 0,
        };
        let merge =
            Merge::new(key, "n", Fold::SUM_I64, json!(2), write).only_if("~inc", Some("a".into()));
        let doc: Document = [("n".to_owned(), json!(1))].into();
        assert_eq!(
            reference(Some(&doc), &merge).unwrap(),
            Step::Answer(Merged::Missing)
        );
        let mut doc = doc;
        doc.insert("~inc".into(), json!("a"));
        let Step::Write(after) = reference(Some(&doc), &merge).unwrap() else {
            panic!("not applied");
        };
        assert_eq!(after["n"], json!(3));
        assert_eq!(
            reference(Some(&after), &merge).unwrap(),
            Step::Answer(Merged::AlreadyApplied)
        );
    }

    #[test]
    fn a_record_covers_every_earlier_sequence_number_of_its_writer() {
        let mut doc = Document::new();
        record(&mut doc, "a", 3, 1_000, 0);
        assert!(applied(Some(&doc), "a", 3));
        assert!(applied(Some(&doc), "a", 1));
        assert!(!applied(Some(&doc), "a", 4));
        assert!(!applied(Some(&doc), "b", 1));
        assert!(!applied(None, "a", 1));
        record(&mut doc, "a", 2, 1_001, 0);
        assert!(
            applied(Some(&doc), "a", 3),
            "a lower number never lowers the record"
        );
    }

    #[test]
    fn records_older_than_the_horizon_are_dropped_on_the_next_write() {
        let mut doc = Document::new();
        record(&mut doc, "old", 1, 10_000, 9_000);
        record(&mut doc, "new", 1, 10_500, 9_500);
        assert!(applied(Some(&doc), "old", 1));
        record(&mut doc, "new", 2, 11_200, 10_200);
        assert!(!applied(Some(&doc), "old", 1));
        assert!(applied(Some(&doc), "new", 2));
    }

    #[test]
    fn only_an_entry_of_two_integers_within_u64_records_a_write() {
        let with = |record: Value| applied(Some(&[(RECORD.to_owned(), record)].into()), "w", 4);
        let entries = |text: &str| -> Vec<Value> { serde_json::from_str(text).unwrap() };
        for entry in entries(r#"[[4, 1000], [9, 0, "x"], [4, 18446744073709551615]]"#) {
            assert!(with(json!({ "w": entry })), "{entry} records 4");
        }
        let malformed = r#"[[4], [4, "x"], [4, null], [4, -1], [4, 1.5], [-4, 1], "[4, 1]",
            {"0": 4, "1": 1}, [4, 18446744073709551616]]"#;
        for entry in entries(malformed) {
            assert!(!with(json!({ "w": entry })), "{entry} records nothing");
        }
        assert!(!with(json!("junk")));
    }
}
