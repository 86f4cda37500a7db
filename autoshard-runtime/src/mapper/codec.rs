//! Between stored documents and entity values: an entity from its main document (and its
//! folded values), folding a shard document into it, and errors that name the key and
//! the property a bad value came from. No store calls.

use super::layout;
use crate::document::{Document, Value, Versioned};
use crate::entity::{Entity, ShardedProperty};
use crate::error::{Error, FieldError, Result};
use crate::group::Root;
use crate::key::Key;
use crate::store::{Fold, merge};
use std::any::TypeId;
use std::sync::{Arc, OnceLock};

/// Attaches the key to an entity hook's [`FieldError`].
pub(super) fn malformed(key: &Key) -> impl Fn(FieldError) -> Error + '_ {
    move |e| Error::malformed(key, e)
}

/// Whether `entity`'s main document, stored at `main`, is as last saved or loaded (`false`
/// when nothing was: an entity built in code, or one without sharded state), told without
/// encoding it where its fields allow ([`Entity::encodes_as`]); [`Error::Malformed`] for a
/// field that does not encode.
pub(super) fn main_unchanged<E: Entity>(entity: &E, main: &Key) -> Result<bool> {
    match entity
        .state()
        .and_then(crate::entity::EntityState::saved_main)
    {
        Some(saved) => entity.encodes_as(saved).map_err(malformed(main)),
        None => Ok(false),
    }
}

/// Makes sure a field error names the property (generated code may leave it empty).
pub(super) fn with_property(mut e: FieldError, name: &str) -> FieldError {
    if e.field.is_empty() {
        name.clone_into(&mut e.field);
    }
    e
}

/// The total of a `fold = sum` property over its shard values (each with the key of the
/// document it came from), folded in `i128` so that only the total is checked against
/// the range `min..=max` of the property's type, as a sum over the shards is: partial
/// sums may leave the range on the way (`[i64::MAX, -1, 1]` is fine). A shard value that
/// is not an integer of the type is [`Error::Malformed`] naming its document; a total out
/// of range is [`Error::Overflow`] naming the main document.
pub(super) fn sum_values<'v>(
    main: &Key,
    property: &str,
    range: (i128, i128),
    values: impl IntoIterator<Item = (&'v Key, &'v Value)>,
) -> Result<Value> {
    let (lowest, highest) = range;
    let mut total: i128 = 0;
    for (key, value) in values {
        let n = merge::integer(value)
            .filter(|n| (lowest..=highest).contains(n))
            .ok_or_else(|| Error::Malformed {
                key: key.clone(),
                field: property.to_owned(),
                reason: format!("{value} is not an integer within {lowest}..={highest}"),
            })?;
        // At most 2^64 shard values of at most 2^64 each: never near i128's range.
        total = total.saturating_add(n);
    }
    if !(lowest..=highest).contains(&total) {
        return Err(Error::Overflow {
            key: main.clone(),
            property: property.to_owned(),
            reason: format!(
                "the sum {total} over the shards leaves the range {lowest}..={highest} of the property's type"
            ),
        });
    }
    Ok(merge::integer_value(total))
}

/// The range of a property whose store-level fold is a sum: its shard values are folded
/// by [`sum_values`].
pub(super) fn sum_range(p: &ShardedProperty) -> Option<(i128, i128)> {
    match (p.store_fold)() {
        Some(Fold::Sum { min, max }) => Some((min, max)),
        _ => None,
    }
}

/// The entity as its main document `stored` says, sharded fields neutral, with the state
/// a load gives it (dirty tracking, incarnation, shard layout); `load` then folds the shards in.
pub(super) fn from_main<E: Root>(id: &E::Id, main: &Key, stored: &Versioned) -> Result<E> {
    from_main_reusing(id, main, stored, &OnceLock::new())
}

/// [`from_main`] that reuses what an earlier call derived from the same document for the
/// same type (`derived`, filled by the first call, which also checked the document's
/// sharded properties against `E`): what a cached main document spares each `apply`.
pub(super) fn from_main_reusing<E: Root>(
    id: &E::Id,
    main: &Key,
    stored: &Versioned,
    derived: &OnceLock<(TypeId, MainState)>,
) -> Result<E> {
    let ty = TypeId::of::<E>();
    let known = derived
        .get()
        .filter(|(of, _)| *of == ty)
        .map(|(_, state)| state);
    if known.is_none() {
        layout::check_sharded::<E>(main, &stored.doc)?;
    }
    let mut entity = E::from_document(id.clone(), &stored.doc).map_err(malformed(main))?;
    for index in 0..E::PROPERTIES.len() {
        entity.reset_shadow(index);
    }
    if entity.state().is_none() {
        return Ok(entity);
    }
    if let Some(state) = known {
        state.give(&mut entity);
    } else {
        let state = MainState::of(&entity, main, stored)?;
        state.give(&mut entity);
        // Another `apply` may have filled it meanwhile (with the same state), or one of
        // another type: this entity has its state either way.
        let _ = derived.set((ty, state));
    }
    Ok(entity)
}

/// What an entity's state takes from its main document.
pub(super) struct MainState {
    /// The entity re-encoded rather than the stored text, so a save right after load
    /// sees no change even if the store's encoding differs in detail.
    saved: Arc<Document>,
    incarnation: Option<String>,
    counts: Option<Arc<crate::entity::ShardCounts>>,
    adoption_pending: bool,
}

impl MainState {
    /// The state of `entity`, just decoded from `stored`.
    fn of<E: Root>(entity: &E, main: &Key, stored: &Versioned) -> Result<Self> {
        Ok(MainState {
            saved: Arc::new(entity.to_document().map_err(malformed(main))?),
            incarnation: Some(layout::incarnation(&stored.doc).unwrap_or("").to_owned()),
            counts: layout::recorded_counts(main, &stored.doc)?.map(Arc::new),
            adoption_pending: layout::holds_plain_values::<E>(&stored.doc),
        })
    }

    /// Sets it as `entity`'s state.
    fn give<E: Root>(&self, entity: &mut E) {
        if let Some(state) = entity.state_mut() {
            state.share_saved_main(self.saved.clone());
            state.set_incarnation(self.incarnation.clone());
            state.set_shard_counts(self.counts.clone());
            state.set_adoption_pending(self.adoption_pending);
        }
    }
}

/// The folds of one entity type's sharded properties, without the type: what a writer
/// that outlives one save (a coalesced batch) keeps of the entity.
#[derive(Clone, Copy)]
pub(super) struct Folds {
    properties: &'static [ShardedProperty],
    fold_values: fn(usize, &Value, &Value) -> std::result::Result<Value, FieldError>,
    neutral: fn(usize) -> std::result::Result<Value, FieldError>,
}

impl Folds {
    pub(super) fn of<E: Entity>() -> Self {
        Folds {
            properties: E::PROPERTIES,
            fold_values: E::fold_values,
            neutral: E::neutral_value,
        }
    }

    /// The fold of two values of property `index`; an error names `key` and the property.
    pub(super) fn fold(&self, key: &Key, index: usize, a: &Value, b: &Value) -> Result<Value> {
        (self.fold_values)(index, a, b).map_err(|e| self.malformed(key, index, e))
    }

    /// Folds `change` into the value of property `index` in the shard document `doc` at
    /// `key` (neutral when absent).
    pub(super) fn fold_into(
        &self,
        key: &Key,
        doc: &mut Document,
        index: usize,
        change: &Value,
    ) -> Result<()> {
        let stored_as = self.properties[index].stored_as;
        let folded = match doc.get(stored_as) {
            Some(stored) => (self.fold_values)(index, stored, change),
            None => (self.neutral)(index).and_then(|n| (self.fold_values)(index, &n, change)),
        }
        .map_err(|e| self.malformed(key, index, e))?;
        doc.insert(stored_as.to_owned(), folded);
        Ok(())
    }

    fn malformed(&self, key: &Key, index: usize, e: FieldError) -> Error {
        Error::malformed(key, with_property(e, self.properties[index].name))
    }
}

/// Folds `change` into the value of property `index` of `E` in the shard document `doc`
/// at `key` (neutral when absent).
pub(super) fn fold_value<E: Entity>(
    key: &Key,
    doc: &mut Document,
    index: usize,
    change: &Value,
) -> Result<()> {
    Folds::of::<E>().fold_into(key, doc, index, change)
}

/// The entity as its main document `main_doc` says, each sharded property set to its
/// folded value in `values`.
pub(super) fn with_values<E: Root>(
    id: &E::Id,
    main: &Key,
    main_doc: &Versioned,
    values: &[Value],
) -> Result<E> {
    let mut entity: E = from_main(id, main, main_doc)?;
    for (index, value) in values.iter().enumerate() {
        entity
            .fold_stored(index, value)
            .map_err(|e| Error::malformed(main, with_property(e, E::PROPERTIES[index].name)))?;
    }
    Ok(entity)
}
