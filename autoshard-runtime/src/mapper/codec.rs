//! Between stored documents and entity values: an entity from its main document, folding
//! a shard document into it, and errors that name the key and the property a bad value
//! came from. No store calls.

use super::layout;
use crate::document::{Document, Versioned};
use crate::entity::Entity;
use crate::error::{Error, FieldError, Result};
use crate::group::Root;
use crate::key::Key;

/// Attaches the key to an entity hook's [`FieldError`].
pub(super) fn malformed(key: &Key) -> impl Fn(FieldError) -> Error + '_ {
    move |e| Error::malformed(key, e)
}

/// Makes sure a field error names the property (generated code may leave it empty).
pub(super) fn with_property(mut e: FieldError, name: &str) -> FieldError {
    if e.field.is_empty() {
        name.clone_into(&mut e.field);
    }
    e
}

/// Folds every sharded property of `E` present in the shard document `doc` at `key`
/// into `entity`.
pub(super) fn fold_document<E: Entity>(entity: &mut E, key: &Key, doc: &Document) -> Result<()> {
    for (index, p) in E::PROPERTIES.iter().enumerate() {
        if let Some(stored) = doc.get(p.stored_as) {
            entity
                .fold_stored(index, stored)
                .map_err(|e| Error::malformed(key, with_property(e, p.name)))?;
        }
    }
    Ok(())
}

/// The entity as its main document `stored` says, sharded fields neutral, with the state
/// a load gives it (dirty tracking, incarnation, shard layout); `load` then folds the shards in.
pub(super) fn from_main<E: Root>(id: &E::Id, main: &Key, stored: &Versioned) -> Result<E> {
    let mut entity = E::from_document(id.clone(), &stored.doc).map_err(malformed(main))?;
    for index in 0..E::PROPERTIES.len() {
        entity.reset_shadow(index);
    }
    if entity.state().is_some() {
        // Re-encoded rather than the stored text, so a save right after load sees no
        // change even if the store's encoding differs in detail.
        let saved = entity.to_document().map_err(malformed(main))?;
        let incarnation = Some(layout::incarnation(&stored.doc).unwrap_or("").to_owned());
        let counts = layout::recorded_counts(main, &stored.doc)?;
        if let Some(state) = entity.state_mut() {
            state.set_saved_main(saved);
            state.set_incarnation(incarnation);
            state.set_shard_counts(counts.map(std::sync::Arc::new));
        }
    }
    Ok(entity)
}
