//! Finding children: which of the `K` sub-groups of a root holds a child (the sub-group
//! is not stored in the child, so every lookup reads the `K` candidate keys), and
//! decoding what was found. No writes.

use crate::document::{Document, Versioned};
use crate::entity::Entity;
use crate::error::{Error, FieldError, Result};
use crate::group::Child;
use crate::key::{EntityId, Key};
use crate::mapper::Mapper;
use crate::mapper::codec::malformed;
use crate::mapper::layout;
use crate::store::DocumentStore;

impl<S: DocumentStore> Mapper<S> {
    /// Finds the one sub-group that holds child `id` of `root`.
    pub(super) async fn locate<C: Child>(
        &self,
        root: &Key,
        id: &C::Id,
    ) -> Result<(Key, Versioned)> {
        let shards = group_shards::<C>()?;
        let keys = layout::child_candidates(root, C::KIND, &id.to_key_name(), shards);
        let found = self.get_exactly(&keys).await?;
        let mut hits = keys
            .into_iter()
            .zip(found)
            .filter_map(|(k, f)| Some((k, f?)));
        let Some(hit) = hits.next() else {
            return Err(not_found::<C>(root, &id.to_key_name()));
        };
        if let Some((other, _)) = hits.next() {
            return Err(duplicate(&hit.0, &other));
        }
        Ok(hit)
    }

    /// The keys of the children `ids` of `root`, which must share one sub-group; one
    /// `get_many` for all candidates.
    pub(super) async fn locate_in_one_sub_group<C: Child>(
        &self,
        root: &Key,
        ids: &[C::Id],
    ) -> Result<Vec<Key>> {
        let shards = group_shards::<C>()?;
        let names: Vec<String> = ids.iter().map(EntityId::to_key_name).collect();
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                return Err(Error::Invalid(format!(
                    "an entity-group transaction lists child `{name}` of `{root}` twice"
                )));
            }
        }
        let all: Vec<Key> = names
            .iter()
            .flat_map(|name| layout::child_candidates(root, C::KIND, name, shards))
            .collect();
        let found = self.get_exactly(&all).await?;
        let per_child = all
            .chunks(shards as usize)
            .zip(found.chunks(shards as usize));
        let mut keys = Vec::with_capacity(ids.len());
        for (candidates, found) in per_child {
            let mut hits = candidates.iter().zip(found).filter(|(_, f)| f.is_some());
            let Some((key, _)) = hits.next() else {
                return Err(not_found::<C>(root, candidates[0].name()));
            };
            if let Some((other, _)) = hits.next() {
                return Err(duplicate(key, other));
            }
            keys.push(key.clone());
        }
        if let Some(first) = keys.first()
            && let Some(other) = keys.iter().find(|k| !k.same_group(first))
        {
            return Err(Error::Invalid(format!(
                "an entity-group transaction must stay in one sub-group, but `{first}` and \
                     `{other}` are in different sub-groups of `{root}` (`{}` spreads its \
                     group over {shards} sub-groups; only children of one sub-group can be \
                     changed atomically)",
                C::Parent::KIND
            )));
        }
        Ok(keys)
    }
}

/// `K` of `E`'s group, at least 1.
pub(super) fn group_shards<E: Entity>() -> Result<u32> {
    match E::GROUP_SHARDS {
        0 => Err(Error::Invalid(format!(
            "`{}` declares 0 group shards",
            E::KIND
        ))),
        k => Ok(k),
    }
}

/// Decodes the child stored at `key`, checking that it names `root` as its parent.
pub(super) fn decode_child<C: Entity>(
    root: &Key,
    key: &Key,
    id: C::Id,
    doc: &Document,
) -> Result<C> {
    let child = C::from_document(id, doc).map_err(malformed(key))?;
    if child.parent_key().as_ref() != Some(root) {
        return Err(Error::malformed(
            key,
            FieldError::new(
                "(parent)",
                format!(
                    "names parent `{}`, but the document is stored under `{root}`",
                    child
                        .parent_key()
                        .map_or_else(|| "none".to_owned(), |k| k.encode())
                ),
            ),
        ));
    }
    Ok(child)
}

/// Two sub-groups hold the same child id.
pub(super) fn duplicate(a: &Key, b: &Key) -> Error {
    Error::Invalid(format!(
        "child `{}` is stored twice, at `{a}` and `{b}` (two concurrent inserts of one id); \
         delete one of them",
        a.name()
    ))
}

/// No child of kind `C` named `name` in any sub-group of `root`.
pub(super) fn not_found<C: Entity>(root: &Key, name: &str) -> Error {
    Error::ChildNotFound {
        root: root.clone(),
        kind: C::KIND.to_owned(),
        id: name.to_owned(),
    }
}
