//! Adoption: the value a field held before it was annotated `#[shardable]` moves from the
//! main document into the shards, while writers run, in three compare-and-set steps of one
//! document each: announce (main document), fold (the property's adoption target, with the
//! adoption id recorded), settle (main document).
//!
//! Invariants: a load counts the value in exactly one place (a torn read on a Redis Cluster
//! is detected by [`layout::adoption_torn`] and read again); each step does only what is
//! missing, so a repeated or interrupted step changes nothing twice. The argument:
//! `docs/design/layout.md`, "Adoption". Tests: `tests/it/adoption.rs`.

use crate::document::{Document, Value, Version};
use crate::entity::{Entity, EntityState};
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::attempt::Attempt;
use crate::mapper::codec::fold_value;
use crate::mapper::layout::{self, Adopting};
use crate::mapper::write::write_ids::check_same_entity;
use crate::store::{DocumentStore, Transaction};

/// A value on its way into the shards, owned.
#[derive(Clone, Debug)]
struct Entry {
    id: String,
    index: usize,
    value: Value,
}

impl<S: DocumentStore> Mapper<S> {
    /// Moves the values the stored main document of `entity` holds for its sharded
    /// properties into the shards (module docs), when the entity was loaded from a main
    /// document that holds some.
    pub(in crate::mapper) async fn adopt<E: Root>(&self, entity: &mut E, main: &Key) -> Result<()> {
        if !entity.state().is_some_and(EntityState::adoption_pending) {
            return Ok(());
        }
        let _invalidate = self.invalidating(main);
        let entries = self
            .until_committed("adopt: announce", || self.announce(entity, main))
            .await?;
        for entry in &entries {
            let target = layout::adoption_target(main, &E::PROPERTIES[entry.index]);
            let incarnation = entity.state().and_then(EntityState::incarnation);
            self.until_committed("adopt: fold", || {
                self.fold_adopted::<E>(&target, incarnation, entry)
            })
            .await?;
        }
        if !entries.is_empty() {
            self.until_committed("adopt: settle", || self.settle(entity, main, &entries))
                .await?;
        }
        self.main_cache.invalidate(main);
        if let Some(state) = entity.state_mut() {
            state.set_adoption_pending(false);
        }
        Ok(())
    }

    /// The main document of `entity` as stored now, with its version.
    async fn read_main<E: Entity>(&self, entity: &E, main: &Key) -> Result<(Version, Document)> {
        let found = self.get_exactly(std::slice::from_ref(main)).await?;
        let stored = found.into_iter().next().flatten();
        let version = check_same_entity(entity, main, stored.as_ref())?;
        match stored {
            Some(stored) => Ok((version, stored.doc)),
            None => Err(Error::NotFound { key: main.clone() }),
        }
    }

    /// Step 1: every plain value of a sharded property leaves its field for an entry of
    /// `~adopting`. Committed with every entry the main document holds then (of this
    /// save or of one interrupted before).
    async fn announce<E: Entity>(&self, entity: &E, main: &Key) -> Result<Attempt<Vec<Entry>>> {
        let (version, mut doc) = self.read_main(entity, main).await?;
        let mut announced = serde_json::Map::new();
        for p in E::PROPERTIES {
            if let Some(value) = doc.remove(p.name) {
                let id = uuid::Uuid::new_v4().simple().to_string();
                announced.insert(id, serde_json::json!({"property": p.name, "value": value}));
            }
        }
        let changed = !announced.is_empty();
        if changed {
            record_mut(&mut doc, layout::ADOPTING, main)?.extend(announced);
        }
        let entries = entries::<E>(main, &doc)?;
        if !changed {
            return Ok(Attempt::Committed(entries));
        }
        let txn = Transaction::new()
            .expect(main.clone(), Some(version))
            .put(main.clone(), doc);
        Ok(self.commit_attempt(&txn).await?.map(|()| entries))
    }

    /// Step 2: `entry`'s value folded into the document at `target`, with its id.
    async fn fold_adopted<E: Entity>(
        &self,
        target: &Key,
        incarnation: Option<&str>,
        entry: &Entry,
    ) -> Result<Attempt<()>> {
        let found = self.get_exactly(std::slice::from_ref(target)).await?;
        let current = found.into_iter().next().flatten();
        if let Some(current) = &current {
            if layout::adopted(&current.doc).any(|(id, _)| id == entry.id) {
                return Ok(Attempt::Committed(()));
            }
            if current.doc.contains_key(layout::SEALED) {
                // Static shard 0 is a base shard, which no reshard retires.
                return Err(Error::malformed(
                    target,
                    crate::FieldError::new(layout::SEALED, "a base shard is sealed"),
                ));
            }
        }
        let (mut doc, version) = match current {
            Some(current) => (current.doc, Some(current.version)),
            None => (Document::new(), None),
        };
        fold_value::<E>(target, &mut doc, entry.index, &entry.value)?;
        if let Some(incarnation) = incarnation.filter(|i| !i.is_empty()) {
            doc.entry(layout::INCARNATION.to_owned())
                .or_insert_with(|| incarnation.into());
        }
        let property = E::PROPERTIES[entry.index].name;
        record_mut(&mut doc, layout::ADOPTED, target)?.insert(entry.id.clone(), property.into());
        let txn = Transaction::new()
            .expect(target.clone(), version)
            .put(target.clone(), doc);
        self.commit_attempt(&txn).await
    }

    /// Step 3: the entries `entries` leave `~adopting` for the main document's
    /// `~adopted` record.
    async fn settle<E: Entity>(
        &self,
        entity: &E,
        main: &Key,
        entries: &[Entry],
    ) -> Result<Attempt<()>> {
        let (version, mut doc) = self.read_main(entity, main).await?;
        let Some(Value::Object(adopting)) = doc.get_mut(layout::ADOPTING) else {
            return Ok(Attempt::Committed(()));
        };
        let mut settled = serde_json::Map::new();
        for entry in entries {
            if adopting.remove(&entry.id).is_some() {
                let property = E::PROPERTIES[entry.index].name;
                settled.insert(entry.id.clone(), property.into());
            }
        }
        if settled.is_empty() {
            return Ok(Attempt::Committed(()));
        }
        if adopting.is_empty() {
            doc.remove(layout::ADOPTING);
        }
        record_mut(&mut doc, layout::ADOPTED, main)?.extend(settled);
        let txn = Transaction::new()
            .expect(main.clone(), Some(version))
            .put(main.clone(), doc);
        self.commit_attempt(&txn).await
    }
}

/// The entries of `~adopting` in the main document `doc` at `main`, owned, for
/// properties of `E` (a record naming another property was refused on load).
fn entries<E: Entity>(main: &Key, doc: &Document) -> Result<Vec<Entry>> {
    layout::adopting(main, doc)?
        .into_iter()
        .map(
            |Adopting {
                 id,
                 property,
                 value,
             }| {
                let index = E::PROPERTIES
                    .iter()
                    .position(|p| p.name == property)
                    .ok_or_else(|| Error::StillSharded {
                        key: main.clone(),
                        kind: E::KIND,
                        property: property.to_owned(),
                    })?;
                Ok(Entry {
                    id: id.to_owned(),
                    index,
                    value: value.clone(),
                })
            },
        )
        .collect()
}

/// The record `name` of the document `doc` at `key`, created empty when absent;
/// [`Error::Malformed`] when it is not an object.
fn record_mut<'d>(
    doc: &'d mut Document,
    name: &str,
    key: &Key,
) -> Result<&'d mut serde_json::Map<String, Value>> {
    doc.entry(name.to_owned())
        .or_insert_with(|| Value::Object(serde_json::Map::new()))
        .as_object_mut()
        .ok_or_else(|| Error::malformed(key, crate::FieldError::new(name, "expected an object")))
}

#[cfg(test)]
mod tests {
    use crate::document::Document;
    use crate::mapper::layout::{ADOPTED, ADOPTING, adoption_torn};
    use serde_json::json;

    fn doc(value: serde_json::Value) -> Document {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_read_is_torn_only_when_it_straddles_a_step() {
        let announced = doc(json!({ADOPTING: {"x": {"property": "votes", "value": 76}}}));
        let settled = doc(json!({ADOPTED: {"x": "votes"}}));
        let plain = doc(json!({"votes": 76}));
        let before_fold = doc(json!({"shard_votes": 3}));
        let folded = doc(json!({"shard_votes": 79, ADOPTED: {"x": "votes"}}));
        // Every step seen in order.
        assert!(!adoption_torn(&plain, [&before_fold]));
        assert!(!adoption_torn(&announced, [&before_fold]));
        assert!(!adoption_torn(&announced, [&folded]));
        assert!(!adoption_torn(&settled, [&folded]));
        // The main document read before the announcement, the shard after the fold.
        assert!(adoption_torn(&plain, [&folded]));
        // The main document read after settling, the shard before the fold.
        assert!(adoption_torn(&settled, [&before_fold]));
    }
}
