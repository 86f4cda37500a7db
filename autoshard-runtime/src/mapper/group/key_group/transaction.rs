//! [`GroupTransaction`]: one transaction of a group (load, change, save, commit) and how
//! it holds its group (one without a group is `one_shot.rs`'s). Its commit is exact as it
//! expects what it read, or the group document in place of what the group owns
//! (`expect_reads`; `docs/design/key-groups.md`, "Serializability"). The commit is in
//! `transaction/commit.rs`.

mod commit;

use super::holder::Holder;
use super::one_shot;
use super::read_set::ReadSet;
use super::{KeyGroup, reads};
use crate::document::{Document, Version, Versioned};
use crate::entity::{EntityState, Pending};
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::codec::{Folds, malformed};
use crate::mapper::layout::{self, static_properties};
use crate::mapper::read::load::Reading;
use crate::mapper::read::snapshot::{Snapshot, assemble};
use crate::mapper::write::dynamic::pending_dynamic;
use crate::mapper::write::static_shard::fold_into_shard;
use crate::mapper::write::write_ids::{self, stage};
use crate::store::DocumentStore;
use crate::store::ownership::{OWNER, Owner};
use rand::RngExt;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// One transaction of a [`KeyGroup`]: [`load`](GroupTransaction::load) members, change
/// them, [`save`](GroupTransaction::save) them, [`commit`](GroupTransaction::commit).
/// Nothing is written before the commit; dropping the transaction writes nothing.
pub struct GroupTransaction<'g, 'm, S> {
    holder: Holder<'g, 'm, S>,
    /// The group document, read with the first members (the commit expects it unchanged).
    state: Option<Versioned>,
    /// Whether the group document was read in one atomic lookup with the first members,
    /// so that every later read follows it (see `commit_changes`).
    reads_follow_state: bool,
    /// Every document read, with the version it had.
    read: ReadSet,
    /// The documents to write.
    writes: BTreeMap<Key, Document>,
    /// The members loaded, with the incarnation they were loaded as.
    loaded: BTreeMap<Key, Option<String>>,
    /// What each load of the group's members found, by main document (noted in the
    /// group's memo once the commit is told: `memo.rs`).
    found: Vec<(Key, Arc<Snapshot>)>,
    /// Whether the first load took the members from the group's memo: a commit that
    /// writes nothing then still checks what it read.
    from_memo: bool,
}

impl<S> fmt::Debug for GroupTransaction<'_, '_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupTransaction")
            .field("group", &self.holder.group().map(|g| &g.id))
            .field("loaded", &self.loaded.keys().collect::<Vec<_>>())
            .field("writes", &self.writes.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<'g, 'm, S: DocumentStore> GroupTransaction<'g, 'm, S> {
    pub(super) fn begin(holder: Holder<'g, 'm, S>) -> Self {
        GroupTransaction {
            holder,
            state: None,
            reads_follow_state: false,
            read: ReadSet::default(),
            writes: BTreeMap::new(),
            loaded: BTreeMap::new(),
            found: Vec::new(),
            from_memo: false,
        }
    }

    /// Loads the member of kind `E` with this id, as [`Mapper::load`](crate::mapper::Mapper::load) does; the commit
    /// expects every document read unchanged.
    ///
    /// # Errors
    /// [`Error::Invalid`] when it is not a member of the group; [`Error::GroupLost`] when
    /// the group is gone; as [`Mapper::load`](crate::mapper::Mapper::load).
    pub async fn load<E: Root>(
        &mut self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
    ) -> Result<E> {
        let mut loaded = self
            .load_many::<E>(std::slice::from_ref(&id.to_owned()))
            .await?;
        loaded
            .pop()
            .ok_or_else(|| Error::backend("load", "a member read answered nothing"))
    }

    /// Loads the members of kind `E` with these ids, all read concurrently (in one round
    /// trip where the store pipelines), in order; see [`GroupTransaction::load`].
    ///
    /// # Errors
    /// As [`GroupTransaction::load`].
    pub async fn load_many<E: Root>(&mut self, ids: &[E::Id]) -> Result<Vec<E>> {
        let mapper = self.holder.mapper();
        let mains: Vec<Key> = ids.iter().map(E::key_for).collect();
        if let Some(main) = mains
            .iter()
            .find(|main| !self.holder.members().contains(main))
        {
            return Err(Error::Invalid(match self.holder.group() {
                Some(group) => format!("`{main}` is not a member of key group `{}`", group.id),
                None => format!("`{main}` is not a member of this one-shot transaction"),
            }));
        }
        // A group's transactions write their documents back whole, so they read them
        // with write records; a one-shot transaction writes values, and the store keeps
        // the records.
        let mains_ref = &mains;
        let reads_as = |reading| {
            move || {
                mains_ref
                    .iter()
                    .map(move |main| mapper.read_entity_with::<E>(main, reading))
            }
        };
        let reads = reads_as(Reading::Whole);
        let found = if let Some(group) = self.holder.group() {
            // The first load: as the group's last commit left the members (`memo.rs`), or
            // in one lookup with the group document, or beside it.
            let known = match self.state {
                None => reads::from_handle(group, &mains),
                Some(_) => None,
            };
            self.from_memo |= known.is_some();
            let at_once = match (&self.state, &known) {
                (None, None) => reads::at_once::<S, E>(group, &mains).await?,
                _ => None,
            };
            self.reads_follow_state |= at_once.is_some();
            let (found, state) = match known.or(at_once) {
                Some((found, state)) => (found, Some(state)),
                None => reads::members(group, self.state.is_none(), reads).await?,
            };
            if state.is_some() {
                self.state = state;
            }
            self.found
                .extend(mains.iter().cloned().zip(found.iter().cloned()));
            found
        } else {
            let intent_keys: Vec<Key> = mains.iter().map(layout::group_intent).collect();
            let read = if let Some(key) = self.contended_member() {
                // Waiting, over a member whose one-shot commit lately met a change: it takes
                // its turn in the queue at once (see `one_shot::Contended`).
                Err(Error::Contention { key, attempts: 0 })
            } else {
                let at_once = one_shot::read_at_once::<S, E>(
                    mapper,
                    &mains,
                    &intent_keys,
                    self.read.versions(),
                );
                match at_once.await {
                    Ok(None) => {
                        let reads = reads_as(Reading::Values);
                        one_shot::read(mapper, &reads, &intent_keys, self.read.versions()).await
                    }
                    Ok(Some(read)) => Ok(read),
                    Err(e) => Err(e),
                }
            };
            match read {
                Ok((found, intents)) => {
                    for (key, doc) in intent_keys.iter().zip(intents) {
                        self.read.note_alone(key, doc);
                    }
                    found
                }
                Err(e @ (Error::Grouped { .. } | Error::Contention { .. })) => {
                    // Nothing was returned yet: with waiting on, the transaction forms its
                    // group, waiting its turn, and reads under it.
                    let Some(group) = self.form_group().await? else {
                        return Err(e);
                    };
                    let (found, state) = reads::members(group, true, reads).await?;
                    self.state = state;
                    found
                }
                Err(e) => return Err(e),
            }
        };
        let mut entities = Vec::with_capacity(ids.len());
        for found in &found {
            self.read.note_snapshot(found);
        }
        for ((id, main), found) in ids.iter().zip(mains).zip(found) {
            let entity: E = assemble(id, &main, &found)?;
            let incarnation = entity
                .state()
                .and_then(EntityState::incarnation)
                .map(str::to_owned);
            self.loaded.insert(main, incarnation);
            entities.push(entity);
        }
        Ok(entities)
    }

    /// For a one-shot transaction without a group that waits and has read nothing yet:
    /// a member whose one-shot commit through this mapper lately met a change, if any
    /// (see `one_shot::Contended`).
    fn contended_member(&self) -> Option<Key> {
        let Holder::Ungrouped {
            mapper,
            members,
            waiting: Some(_),
            ..
        } = &self.holder
        else {
            return None;
        };
        if !self.read.is_empty() {
            return None;
        }
        members
            .iter()
            .find(|member| mapper.contended.contains_key(*member))
            .cloned()
    }

    /// For a one-shot transaction without a group that waits and has read nothing yet:
    /// forms its group ([`KeyGroupBuilder::create`], waiting its turn) and holds it from
    /// now on, as a one-shot transaction that formed a group does. `None` otherwise.
    async fn form_group(&mut self) -> Result<Option<&KeyGroup<'m, S>>> {
        if !self.read.is_empty() {
            return Ok(None);
        }
        let Holder::Ungrouped { waiting, .. } = &mut self.holder else {
            return Ok(None);
        };
        let Some(builder) = waiting.take() else {
            return Ok(None);
        };
        let group = builder.for_one_transaction().create().await?;
        self.holder = Holder::Once(Box::new(group));
        Ok(self.holder.group())
    }

    /// The document at `key` as this transaction has it: as staged, else as read.
    fn current(&self, key: &Key) -> Option<Document> {
        match self.writes.get(key) {
            Some(doc) => Some(doc.clone()),
            None => self.read.doc(key).cloned(),
        }
    }

    /// The owner every document the transaction writes carries: its group, if any.
    fn owner(&self) -> Option<Owner> {
        self.holder.group().map(|group| Owner {
            group: group.id.to_string(),
            until_ms: group.until_ms(),
            txn: None,
        })
    }

    /// Stages `doc` to be written at `key`: stamped with the group as owner, or without
    /// an owner (an owner named by a document read without a group is one whose lease
    /// passed, and the commit would be refused for a live one).
    fn stage_write(&mut self, key: Key, mut doc: Document) {
        match self.owner() {
            Some(owner) => doc.insert(OWNER.to_owned(), owner.to_value()),
            None => doc.remove(OWNER),
        };
        self.read.expect_absent_unless_read(&key);
        self.writes.insert(key, doc);
    }

    /// Stages the changes of `entity`, a member loaded in this transaction: its plain
    /// fields into the main document, the change of each sharded property folded into one
    /// of its shards (a dynamic property: into a new shard document). Nothing is written
    /// before [`GroupTransaction::commit`]; the entity's changes count as saved.
    ///
    /// # Errors
    /// [`Error::Invalid`] when `entity` was not loaded in this transaction;
    /// [`Error::Malformed`] for a value that does not encode.
    pub fn save<E: Root>(&mut self, entity: &mut E) -> Result<()> {
        let main = entity.key();
        let Some(incarnation) = self.loaded.get(&main).cloned() else {
            return Err(Error::Invalid(format!(
                "`{main}` was not loaded in this transaction: load members with \
                 `GroupTransaction::load` before saving them"
            )));
        };
        let doc = entity.to_document().map_err(malformed(&main))?;
        let dirty = entity
            .state()
            .is_none_or(|state| state.saved_main() != Some(&doc));
        if dirty {
            let mut stored_doc = doc.clone();
            if let Some(incarnation) = incarnation.as_deref().filter(|i| !i.is_empty()) {
                stored_doc.insert(layout::INCARNATION.to_owned(), incarnation.into());
            }
            if let Some(stored) = self.current(&main) {
                layout::carry_over::<E>(&stored, &mut stored_doc);
            }
            self.stage_write(main.clone(), stored_doc);
            if let Some(state) = entity.state_mut() {
                state.set_saved_main(doc);
            }
        }
        stage(entity, &main)?;
        let folds = Folds::of::<E>();
        for p in static_properties(entity) {
            let Some(value) = write_ids::pending(entity, p.index).value else {
                continue;
            };
            let slot = rand::rng().random_range(0..p.layout.shards.max(1));
            let key = p.live_shard(&main, slot);
            let current = self.current(&key);
            let version = self.read.version(&key);
            let current = current.map(|doc| Versioned {
                doc,
                version: version.unwrap_or(Version(0)),
            });
            let (doc, _) = fold_into_shard(
                &folds,
                &key,
                current,
                p.index,
                &value,
                incarnation.as_deref(),
            )?;
            self.stage_write(key, doc);
            if let Some(state) = entity.state_mut() {
                *state.pending_mut(p.index) = Pending::default();
            }
        }
        let (doc, props) = pending_dynamic(entity, |_| true);
        if !doc.is_empty() {
            let mapper = self.holder.mapper();
            let write = mapper.writers.take().begin(mapper.write_window);
            let key = layout::dynamic_shard(&main, &write_ids::dynamic_name(&write));
            self.stage_write(key, doc);
            if let Some(state) = entity.state_mut() {
                for index in props {
                    *state.pending_mut(index) = Pending::default();
                }
            }
        }
        Ok(())
    }
}
