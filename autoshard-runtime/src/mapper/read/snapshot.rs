//! What one read of an entity found ([`Snapshot`]: its main document, the static shard
//! documents at their keys, the shard documents a scan found) and its fold: which
//! documents count ([`Snapshot::folding`]: never a static shard the recorded layout does
//! not read, or one whose value a document read holds after a reshard moved it), and each
//! sharded property folded over them ([`Folding::values`]), with the values the main
//! document holds for the shards (adoption) and, for a cached snapshot, the confirmed
//! writes it does not hold ([`Confirmed`]). Every load folds here, cached or not.

use crate::document::{Document, Value, Versioned};
use crate::entity::{Entity, ShardCounts};
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::codec::{sum_range, sum_values, with_property, with_values};
use crate::mapper::layout;
use crate::mapper::write::write_ids;
use crate::store::WriteId;
use crate::store::ownership::system_now_ms;

/// What one read of an entity found.
#[derive(Clone, Debug)]
pub(in crate::mapper) struct Snapshot {
    /// The keys read by key: the main document first, then static shards.
    pub(in crate::mapper) keys: Vec<Key>,
    /// What was found at each of `keys`.
    pub(in crate::mapper) docs: Vec<Option<Versioned>>,
    /// The shard documents found by scanning, with their keys.
    pub(in crate::mapper) scanned: Vec<(Key, Versioned)>,
    /// The built-in-fold properties the store folded over the static shards in `docs`
    /// (whose entries then lack them), by the name they are stored as: a folding lookup.
    pub(in crate::mapper) folded: Vec<(&'static str, Value)>,
}

impl Snapshot {
    /// The main document; `None` when the entity is not stored.
    pub(in crate::mapper) fn main(&self) -> Option<&Versioned> {
        self.docs.first().and_then(Option::as_ref)
    }

    /// Whether the store folded a shard document that the fold must not count (see
    /// [`Snapshot::folding`]): then its fold cannot be used, and the documents are read
    /// whole.
    pub(in crate::mapper) fn folds_uncounted(&self, main: &Key) -> Result<bool> {
        let Some(main_doc) = self.main() else {
            return Ok(false);
        };
        if self.folded.is_empty() {
            return Ok(false);
        }
        let counts = layout::recorded_counts(main, &main_doc.doc)?;
        let moved = self.moved();
        Ok(self.keys[1..]
            .iter()
            .zip(&self.docs[1..])
            .any(|(key, doc)| doc.is_some() && uncounted(key, &moved, counts.as_ref())))
    }

    /// The names of the shards whose values a document of this snapshot says it holds
    /// (moved there by a reshard).
    fn moved(&self) -> Vec<&str> {
        self.documents()
            .skip(usize::from(self.main().is_some()))
            .flat_map(|(_, doc)| layout::moved_into(&doc.doc).map(|(name, _)| name))
            .collect()
    }

    /// Every document found, with its key.
    pub(in crate::mapper) fn documents(&self) -> impl Iterator<Item = (&Key, &Versioned)> {
        self.keys
            .iter()
            .zip(&self.docs)
            .filter_map(|(key, doc)| doc.as_ref().map(|doc| (key, doc)))
            .chain(self.scanned.iter().map(|(key, doc)| (key, doc)))
    }
}

/// A confirmed write of a static shard: `value` folded into property `stored_as` of
/// `shard` under the write id `write`.
#[derive(Clone, Debug)]
pub(in crate::mapper) struct Confirmed {
    pub(in crate::mapper) stored_as: &'static str,
    pub(in crate::mapper) shard: Key,
    pub(in crate::mapper) write: WriteId,
    pub(in crate::mapper) value: Value,
    /// Until when (ms since the Unix epoch) the shard's write record is sure to hold the
    /// write once it is applied: half the write window after it was first sent. Writers
    /// drop record entries a write window old, so a snapshot read later could hold the
    /// write without its entry, and is not trusted to tell.
    pub(in crate::mapper) trusted_until_ms: u64,
}

/// What a snapshot (the documents one read found) gives an entity: its main document,
/// the shard documents to fold, and the confirmed writes to fold besides, the ones the
/// snapshot does not hold.
pub(in crate::mapper) struct Folding<'f> {
    /// `None`: the entity is not stored.
    pub(in crate::mapper) main: Option<&'f Versioned>,
    pub(in crate::mapper) docs: Vec<(&'f Key, &'f Document)>,
    pub(in crate::mapper) later: Vec<&'f Confirmed>,
    /// The values the store folded over shard documents (see [`Snapshot::folded`]).
    pub(in crate::mapper) folded: &'f [(&'static str, Value)],
    /// The adoptions whose values the documents `docs` hold (see `adopt`).
    pub(in crate::mapper) adopted: Vec<&'f str>,
}

/// What to fold for the entity at `main` from the snapshot `found`, given the confirmed
/// writes `later` it may not hold; `Ok(None)` when it cannot tell whether it holds one
/// of them (see the module docs).
impl Snapshot {
    pub(in crate::mapper) fn folding<'f>(
        &'f self,
        main: &Key,
        later: &'f [Confirmed],
    ) -> Result<Option<Folding<'f>>> {
        let Snapshot {
            keys,
            docs: found,
            scanned: extra,
            folded,
        } = self;
        let mut found = found.iter();
        let Some(main_doc) = found.next().and_then(Option::as_ref) else {
            return Ok(Some(Folding {
                main: None,
                docs: Vec::new(),
                later: Vec::new(),
                adopted: Vec::new(),
                folded: &[],
            }));
        };

        // Every sharded property found in any shard document is folded, whatever the
        // current annotation says, so switching static <-> dynamic loses nothing; but
        // never a static shard the layout does not read, or whose value a shard read
        // holds (see `reshard`).
        let counts = layout::recorded_counts(main, &main_doc.doc)?;
        let docs: Vec<(&Key, &Versioned)> = keys[1..]
            .iter()
            .zip(found)
            .filter_map(|(key, doc)| Some((key, doc.as_ref()?)))
            .chain(extra.iter().map(|(key, doc)| (key, doc)))
            .collect();
        let moved = self.moved();
        let mut counted: Vec<(&Key, &Document)> = Vec::with_capacity(docs.len());
        for (key, doc) in docs {
            if !uncounted(key, &moved, counts.as_ref()) {
                counted.push((key, &doc.doc));
            } else if !folded.is_empty() && keys.contains(key) {
                // The store counted it: `read_entity_with` reads whole such a snapshot.
                return Err(Error::backend(
                    "load",
                    "a folding lookup counted a shard the layout does not",
                ));
            } else if later.iter().any(|c| &c.shard == key) {
                return Ok(None);
            }
        }
        let mut missing = Vec::new();
        for c in later {
            let held = match counted.iter().find(|(key, _)| *key == &c.shard) {
                // Read too late for the shard's record to be sure to tell (`Confirmed`).
                Some(_) if system_now_ms() >= c.trusted_until_ms => return Ok(None),
                Some((_, doc)) => write_ids::applied(Some(doc), &c.write),
                // Absent from the snapshot: created after it, unless a reshard retired it.
                None if layout::is_retired(counts.as_ref(), &c.shard, None) => return Ok(None),
                None => false,
            };
            if !held {
                missing.push(c);
            }
        }
        let adopted = counted
            .iter()
            .flat_map(|(_, doc)| layout::adopted(doc).map(|(id, _)| id))
            .collect();
        Ok(Some(Folding {
            main: Some(main_doc),
            docs: counted,
            later: missing,
            adopted,
            folded,
        }))
    }
}

/// Whether the shard document at `key` is left out of the fold: a static shard the
/// recorded layout `counts` does not read, or one whose value a document read holds
/// (`moved`, after a reshard).
fn uncounted(key: &Key, moved: &[&str], counts: Option<&ShardCounts>) -> bool {
    layout::static_shard_of(key).is_some_and(|(property, index)| {
        moved.contains(&key.name())
            || counts
                .and_then(|c| layout::count_of(c, property))
                .is_some_and(|c| !c.is_read(index))
    })
}

/// Each sharded property of `E` folded over `folding`: its documents, the confirmed
/// writes it lacks, and the values its main document holds that belong in the shards
/// (see `adopt`: a plain value stored before the field was sharded, and a value on its
/// way into the shards that no document read holds yet); neutral values when the entity
/// is not stored.
impl Folding<'_> {
    pub(in crate::mapper) fn values<E: Entity>(&self, main: &Key) -> Result<Vec<Value>> {
        let folding = self;
        let main_doc = folding.main.map(|m| &m.doc);
        let adopting = match main_doc {
            Some(doc) => layout::adopting(main, doc)?,
            None => Vec::new(),
        };
        let mut values = Vec::with_capacity(E::PROPERTIES.len());
        for (index, p) in E::PROPERTIES.iter().enumerate() {
            let malformed = |key: &Key| {
                let key = key.clone();
                move |e| Error::malformed(&key, with_property(e, p.name))
            };
            let mut value = E::neutral_value(index).map_err(malformed(main))?;
            let in_main = main_doc
                .and_then(|doc| doc.get(p.name))
                .into_iter()
                .chain(
                    adopting
                        .iter()
                        .filter(|a| a.property == p.name && !folding.adopted.contains(&a.id))
                        .map(|a| a.value),
                )
                .map(|value| (main, value));
            let stored = folding
                .docs
                .iter()
                .filter_map(|(key, doc)| Some((*key, doc.get(p.stored_as)?)))
                .chain(
                    folding
                        .later
                        .iter()
                        .filter(|c| c.stored_as == p.stored_as)
                        .map(|c| (&c.shard, &c.value)),
                )
                .chain(
                    folding
                        .folded
                        .iter()
                        .filter(|(stored_as, _)| *stored_as == p.stored_as)
                        .map(|(_, value)| (main, value)),
                )
                .chain(in_main);
            if let Some(range) = sum_range(p) {
                value = sum_values(main, p.name, range, stored)?;
            } else {
                for (key, stored) in stored {
                    value = E::fold_values(index, &value, stored).map_err(malformed(key))?;
                }
            }
            values.push(value);
        }
        Ok(values)
    }
}

/// The entity with this id from the documents a read `found`. [`Error::NotFound`] when
/// the entity is not stored.
pub(in crate::mapper) fn assemble<E: Root>(id: &E::Id, main: &Key, found: &Snapshot) -> Result<E> {
    let folding = found.folding(main, &[])?.ok_or_else(|| {
        Error::backend(
            "load",
            "a snapshot without confirmed writes tells all it holds",
        )
    })?;
    let Some(main_doc) = folding.main else {
        return Err(Error::NotFound { key: main.clone() });
    };
    with_values(id, main, main_doc, &folding.values::<E>(main)?)
}
