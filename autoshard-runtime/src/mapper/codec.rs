//! Between stored documents and entity values: folding a shard document into an entity,
//! and errors that name the key and the property a bad value came from. No store calls.

use crate::document::Document;
use crate::entity::Entity;
use crate::error::{Error, FieldError, Result};
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
