//! What a main document records of its sharded properties and of adoptions (see
//! `write/adopt.rs`): the list of sharded properties at insert, plain values on their way
//! into the shards, finished adoptions, and the checks and copies a write of the main
//! document makes with them.

use super::{SHARDS, compacted, static_shard};
use crate::document::{Document, Value};
use crate::entity::{Entity, ShardedProperty, Sharding};
use crate::error::{Error, FieldError, Result};
use crate::key::Key;

/// The reserved property of a sharded entity's main document that names every sharded
/// property at insert (`["votes", "tags"]`): a type that reads one of them as a plain
/// field is refused ([`check_sharded`]) instead of dropping the shards' value.
pub(in crate::mapper) const SHARDED: &str = "~sharded";

/// The reserved property of a main document that holds plain values of sharded
/// properties on their way into the shards (see `adopt`): `{"<id>": {"property":
/// "votes", "value": 76}}`, one entry per value, named by a fresh adoption id.
pub(in crate::mapper) const ADOPTING: &str = "~adopting";

/// The reserved property that records finished adoptions (see `adopt`), as
/// `{"<id>": "votes"}`: in the document a value was folded into (the property's static
/// shard 0, or the compacted dynamic shard), in the same commit as the fold; and in the
/// main document once the value left it.
pub(in crate::mapper) const ADOPTED: &str = "~adopted";

/// The document a plain value of the sharded property `p` of the entity at `main` is
/// folded into when it leaves the main document: static shard 0 (a base shard, never
/// retired), or the compacted dynamic shard (kept by compaction).
pub(in crate::mapper) fn adoption_target(main: &Key, p: &ShardedProperty) -> Key {
    match p.sharding {
        Sharding::Static { .. } => static_shard(main, p.name, 0),
        Sharding::Dynamic => compacted(main),
    }
}

/// The adoptions `doc` records as finished ([`ADOPTED`]): `(id, property)`.
pub(in crate::mapper) fn adopted(doc: &Document) -> impl Iterator<Item = (&str, &str)> {
    doc.get(ADOPTED)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(id, property)| (id.as_str(), property.as_str().unwrap_or("")))
}

/// A plain value on its way from the main document into the shards ([`ADOPTING`]).
#[derive(Clone, Debug, PartialEq)]
pub(in crate::mapper) struct Adopting<'d> {
    pub id: &'d str,
    pub property: &'d str,
    pub value: &'d Value,
}

/// The values the main document `doc` at `main` holds on their way into the shards.
///
/// # Errors
/// [`Error::Malformed`] when the record is not one this module writes.
pub(in crate::mapper) fn adopting<'d>(main: &Key, doc: &'d Document) -> Result<Vec<Adopting<'d>>> {
    let Some(record) = doc.get(ADOPTING) else {
        return Ok(Vec::new());
    };
    let bad = || {
        Error::malformed(
            main,
            FieldError::new(ADOPTING, "expected `{id: {property, value}}`"),
        )
    };
    record
        .as_object()
        .ok_or_else(bad)?
        .iter()
        .map(|(id, entry)| {
            let property = entry.get("property").and_then(Value::as_str);
            match (property, entry.get("value")) {
                (Some(property), Some(value)) => Ok(Adopting {
                    id,
                    property,
                    value,
                }),
                _ => Err(bad()),
            }
        })
        .collect()
}

/// Whether a read of the entity whose main document is `doc` straddled an adoption (see
/// `adopt`): a document read names an adoption the main document does not know yet (the
/// main document was read before the value left it), or the main document names one as
/// finished that no document read holds (the target was read before the fold). Stores
/// that read one snapshot never answer such a read; a Redis Cluster may.
pub(in crate::mapper) fn adoption_torn<'d>(
    doc: &Document,
    read: impl IntoIterator<Item = &'d Document>,
) -> bool {
    let known = |id: &str| {
        doc.get(ADOPTING).is_some_and(|a| a.get(id).is_some())
            || doc.get(ADOPTED).is_some_and(|a| a.get(id).is_some())
    };
    let mut held: Vec<&str> = Vec::new();
    for shard in read {
        for (id, _) in adopted(shard) {
            if !known(id) {
                return true;
            }
            held.push(id);
        }
    }
    adopted(doc).any(|(id, _)| !held.contains(&id))
}

/// Whether the main document `doc` holds values of `E`'s sharded properties that
/// belong in the shards: plain values stored before the field was sharded, or values on
/// their way (see `adopt`).
pub(in crate::mapper) fn holds_plain_values<E: Entity>(doc: &Document) -> bool {
    doc.contains_key(ADOPTING) || E::PROPERTIES.iter().any(|p| doc.contains_key(p.name))
}

/// Every property the main document `doc` records as kept in shards: by its layout, its
/// list at insert, or an adoption.
fn recorded_properties(doc: &Document) -> Vec<&str> {
    let names = |name: &str| {
        doc.get(name)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
    };
    let mut found: Vec<&str> = names(SHARDS)
        .map(|(property, _)| property.as_str())
        .collect();
    found.extend(
        doc.get(SHARDED)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str),
    );
    found.extend(adopted(doc).map(|(_, property)| property));
    found.extend(
        names(ADOPTING).filter_map(|(_, entry)| entry.get("property").and_then(Value::as_str)),
    );
    found
}

/// [`Error::StillSharded`] when the main document `doc` at `main` records a property as
/// kept in shards that `E` does not shard: reading it as a plain field (or writing the
/// main document without it) would lose the shards' value.
pub(in crate::mapper) fn check_sharded<E: Entity>(main: &Key, doc: &Document) -> Result<()> {
    match recorded_properties(doc)
        .into_iter()
        .find(|name| !E::PROPERTIES.iter().any(|p| p.name == *name))
    {
        Some(property) => Err(Error::StillSharded {
            key: main.clone(),
            kind: E::KIND,
            property: property.to_owned(),
        }),
        None => Ok(()),
    }
}

/// Copies from the stored main document `stored` into `doc`, a main document about to
/// replace it, what `E`'s own encoding leaves out: the reserved properties of the
/// sharded entity, and the plain values of sharded properties that still wait to be
/// moved into the shards (see `adopt`).
pub(in crate::mapper) fn carry_over<E: Entity>(stored: &Document, doc: &mut Document) {
    let plain = E::PROPERTIES.iter().map(|p| p.name);
    for name in [SHARDS, SHARDED, ADOPTING, ADOPTED]
        .into_iter()
        .chain(plain)
    {
        if let Some(value) = stored.get(name) {
            doc.insert(name.to_owned(), value.clone());
        }
    }
}
