//! [`GroupTransaction`]: one transaction of a group (load, change, save, commit), and
//! how it holds its group, or, for a one-shot transaction on a store that commits across
//! entity groups, why it needs none.
//!
//! A one-shot transaction there (`KeyGroupBuilder::once`) forms no group: each load reads
//! its members and checks, with a commit that writes nothing, that every document the
//! transaction has read is still as read (so what the loads return is one snapshot of the
//! store), and its one commit expects every document it read at the version read and
//! writes its changes. The store refuses that commit when a live group owns any document
//! it expects or writes ([`crate::store::ownership`]: a write without a group's token),
//! and it conflicts when any of them changed since the read, so it commits only on what
//! a group formed for it would have seen: the same isolation and atomicity, for one
//! commit per load and one for the changes, where a group adds three (create, the group
//! document's, dissolve) and a read of every member to stamp it. Its write id is recorded in one document the commit writes,
//! so a commit whose reply is lost is checked there and sent again at most once (the
//! resend expects the same versions).

use super::queue::intent_in;
use super::{group_documents, protocol, send, KeyGroup};
use crate::document::{Document, Version, Versioned};
use crate::entity::{EntityState, Pending};
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::codec::malformed;
use crate::mapper::codec::Folds;
use crate::mapper::layout::{self, static_properties};
use crate::mapper::read::snapshot::assemble;
use crate::mapper::read::snapshot::Snapshot;
use crate::mapper::write::dynamic::pending_dynamic;
use crate::mapper::write::static_shard::fold_into_shard;
use crate::mapper::write::write_ids::{self, stage};
use crate::mapper::Mapper;
use crate::store::ownership::{self, Owner, OWNER};
use crate::store::{Commit, DocumentStore, Transaction, Write, WriteId};
use crate::sync::lock;
use rand::RngExt;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

/// How a transaction holds its group: its turn on a shared handle, the group of a
/// one-shot transaction, dissolved at its end, or no group (a one-shot transaction on a
/// store that commits across entity groups: module docs).
pub(super) enum Holder<'g, 'm, S> {
    Shared {
        group: &'g KeyGroup<'m, S>,
        _turn: tokio::sync::MutexGuard<'g, ()>,
    },
    Once(Box<KeyGroup<'m, S>>),
    Ungrouped {
        mapper: &'m Mapper<S>,
        members: Vec<Key>,
    },
}

impl<'m, S> Holder<'_, 'm, S> {
    fn group(&self) -> Option<&KeyGroup<'m, S>> {
        match self {
            Holder::Shared { group, .. } => Some(group),
            Holder::Once(group) => Some(group),
            Holder::Ungrouped { .. } => None,
        }
    }

    fn mapper(&self) -> &'m Mapper<S> {
        match self {
            Holder::Shared { group, .. } => group.mapper,
            Holder::Once(group) => group.mapper,
            Holder::Ungrouped { mapper, .. } => mapper,
        }
    }

    fn members(&self) -> &[Key] {
        match self {
            Holder::Shared { group, .. } => &group.members,
            Holder::Once(group) => &group.members,
            Holder::Ungrouped { members, .. } => members,
        }
    }
}

/// How many times the loads of a one-shot transaction without a group read again after
/// recovering a group whose lease passed with a transaction in flight.
const RECOVERIES: u32 = 3;

/// How many times a load of a one-shot transaction without a group reads its members
/// before it gives up finding them unchanged ([`Error::Contention`]).
const SNAPSHOT_READS: u32 = 4;

/// Every document a member's read found, with its key (`None`: absent).
fn documents_read(found: &Snapshot) -> impl Iterator<Item = (&Key, Option<&Versioned>)> {
    let Snapshot {
        keys,
        docs,
        scanned: extra,
        .. // (read with records: nothing folded)
    } = found;
    let listed = keys.iter().zip(docs).map(|(key, doc)| (key, doc.as_ref()));
    listed.chain(extra.iter().map(|(key, doc)| (key, Some(doc))))
}

/// One transaction of a [`KeyGroup`]: [`load`](GroupTransaction::load) members, change
/// them, [`save`](GroupTransaction::save) them, [`commit`](GroupTransaction::commit).
/// Nothing is written before the commit; dropping the transaction writes nothing.
pub struct GroupTransaction<'g, 'm, S> {
    holder: Holder<'g, 'm, S>,
    /// The group document, read with the first members (the commit expects it unchanged).
    state: Option<Versioned>,
    /// Every document read, and the version it had (`None`: absent).
    reads: BTreeMap<Key, Option<Version>>,
    /// Every document as read.
    docs: BTreeMap<Key, Option<Document>>,
    /// The documents to write.
    writes: BTreeMap<Key, Document>,
    /// The members loaded, with the incarnation they were loaded as.
    loaded: BTreeMap<Key, Option<String>>,
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
            reads: BTreeMap::new(),
            docs: BTreeMap::new(),
            writes: BTreeMap::new(),
            loaded: BTreeMap::new(),
        }
    }

    /// Reads the group document (once per transaction): [`Error::GroupLost`] when the
    /// group is gone.
    async fn read_state(group: &KeyGroup<'m, S>) -> Result<Versioned> {
        let lost = || Error::GroupLost {
            key: group.key.clone(),
            group: group.id.to_string(),
        };
        if !group.mapper.store.cross_group_transactions() {
            // A transaction of the group left in flight is settled before anything is read.
            group.steps().settle_recorded().await?;
        }
        let state = group.mapper.store.get(&group.key).await?.ok_or_else(lost)?;
        if Owner::of(&state.doc).is_none_or(|o| *o.group != *group.id) {
            return Err(lost());
        }
        Ok(state)
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
        let reads = || {
            mains
                .iter()
                .map(|main| mapper.read_entity_with::<E>(main, true))
        };
        let found = if let Some(group) = self.holder.group() {
            let (found, state) = Self::read_grouped(group, self.state.is_none(), reads()).await?;
            if state.is_some() {
                self.state = state;
            }
            found
        } else {
            let intent_keys: Vec<Key> = mains.iter().map(layout::group_intent).collect();
            let (found, intents) = self.read_ungrouped(mapper, reads, &intent_keys).await?;
            for (key, doc) in intent_keys.iter().zip(&intents) {
                self.note_read(key, doc.as_ref());
            }
            found
        };
        let mut entities = Vec::with_capacity(ids.len());
        for found in &found {
            for (key, doc) in documents_read(found) {
                self.note_read(key, doc);
            }
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

    /// Reads members of a group (`reads`), and with them the group document when
    /// `with_state` (the transaction's first read): in one round trip where the store
    /// commits across entity groups, else the group document first (it settles a
    /// transaction left in flight).
    async fn read_grouped<F>(
        group: &KeyGroup<'m, S>,
        with_state: bool,
        reads: impl Iterator<Item = F>,
    ) -> Result<(Vec<Arc<Snapshot>>, Option<Versioned>)>
    where
        F: Future<Output = Result<Arc<Snapshot>>>,
    {
        if !with_state {
            return Ok((futures::future::try_join_all(reads).await?, None));
        }
        if group.mapper.store.cross_group_transactions() {
            let (found, state) = futures::try_join!(
                futures::future::try_join_all(reads),
                Self::read_state(group)
            )?;
            Ok((found, Some(state)))
        } else {
            let state = Self::read_state(group).await?;
            Ok((futures::future::try_join_all(reads).await?, Some(state)))
        }
    }

    /// Reads members for a one-shot transaction without a group (module docs), and
    /// checks that they and everything the transaction read before are one snapshot: a
    /// commit that writes nothing expects every document read at the version read, so
    /// when it passes, all of them were as read at that instant. A conflict on a document
    /// of this read reads again (a few times, then [`Error::Contention`]); one on a
    /// document an earlier load returned is [`Error::Contention`] at once, since the
    /// caller holds what that load returned.
    ///
    /// The check also expects the members' intent documents (`intent_keys`, see
    /// `queue.rs`) absent, as they are but while a group waits for a member: only when it
    /// conflicts on one is that document read, and a live intent refuses the transaction
    /// as a waiting group holds off one that does not wait; another is expected as read.
    /// Answers the documents read, and the intent documents as the check expected them.
    ///
    /// [`Error::Grouped`] when a live group owns one of the members' documents, or a
    /// waiting group queued for a member, as forming a group would answer. A group whose
    /// lease passed with a transaction in flight still holds its documents: it is
    /// recovered, and the members read again.
    async fn read_ungrouped<I, F>(
        &self,
        mapper: &'m Mapper<S>,
        reads: impl Fn() -> I,
        intent_keys: &[Key],
    ) -> Result<(Vec<Arc<Snapshot>>, Vec<Option<Versioned>>)>
    where
        I: Iterator<Item = F>,
        F: Future<Output = Result<Arc<Snapshot>>>,
    {
        let mut intents: Vec<Option<Versioned>> = vec![None; intent_keys.len()];
        let mut attempts = 0;
        loop {
            attempts += 1;
            let found = Self::read_unowned(mapper, &reads).await?;
            let mut check = Transaction::new();
            for (key, version) in &self.reads {
                check = check.expect(key.clone(), *version);
            }
            let intents_read = intent_keys.iter().zip(intents.iter().map(Option::as_ref));
            let read = found.iter().flat_map(|f| documents_read(f));
            for (key, doc) in read.chain(intents_read) {
                if !self.reads.contains_key(key) {
                    check = check.expect(key.clone(), doc.map(|d| d.version));
                }
            }
            let key = match mapper.store.commit(&check).await? {
                Commit::Committed => return Ok((found, intents)),
                Commit::Conflict { key } => key,
            };
            if self.reads.contains_key(&key) || attempts == SNAPSHOT_READS {
                return Err(Error::Contention { key, attempts });
            }
            if let Some(at) = intent_keys.iter().position(|k| *k == key) {
                let doc = mapper.store.get(&key).await?;
                let now = mapper.store.now_ms().await?;
                if let Some(intent) = intent_in(doc.as_ref()).filter(|i| i.holds_off(None, now)) {
                    return Err(intent.refusal(&key));
                }
                intents[at] = doc;
            }
        }
    }

    /// Reads members (`reads`), and refuses documents a live group owns (see
    /// [`GroupTransaction::read_ungrouped`]).
    async fn read_unowned<I, F>(
        mapper: &'m Mapper<S>,
        reads: &impl Fn() -> I,
    ) -> Result<Vec<Arc<Snapshot>>>
    where
        I: Iterator<Item = F>,
        F: Future<Output = Result<Arc<Snapshot>>>,
    {
        let mut recoveries = 0;
        loop {
            let found = futures::future::try_join_all(reads()).await?;
            let named = |doc: &Versioned| Owner::of(&doc.doc).is_some();
            if !found
                .iter()
                .flat_map(|f| f.documents())
                .any(|(_, d)| named(d))
            {
                return Ok(found);
            }
            // A document names an owner, live or left behind by a group whose lease passed.
            let now = mapper.store.now_ms().await?;
            let mut held = false;
            for (key, doc) in found.iter().flat_map(|f| f.documents()) {
                if let Err(refused) = ownership::check(key, Some(&doc.doc), None, now) {
                    let stuck =
                        Owner::of(&doc.doc).is_some_and(|o| o.txn.is_some() && o.until_ms <= now);
                    if !stuck || recoveries == RECOVERIES {
                        return Err(refused);
                    }
                    held = true;
                }
            }
            if !held {
                return Ok(found);
            }
            mapper.recover_key_groups().await?;
            recoveries += 1;
        }
    }

    /// Records a document read (the first read of a key is the one the commit expects).
    fn note_read(&mut self, key: &Key, doc: Option<&Versioned>) {
        if !self.reads.contains_key(key) {
            self.reads.insert(key.clone(), doc.map(|d| d.version));
            self.docs.insert(key.clone(), doc.map(|d| d.doc.clone()));
        }
    }

    /// The document at `key` as this transaction has it: as staged, else as read.
    fn current(&self, key: &Key) -> Option<Document> {
        match self.writes.get(key) {
            Some(doc) => Some(doc.clone()),
            None => self.docs.get(key).cloned().flatten(),
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
        self.reads.entry(key.clone()).or_insert(None);
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
            let version = self.reads.get(&key).copied().flatten();
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

    /// Commits every change saved in this transaction, if no document it read changed:
    /// atomically, exactly once (a commit whose reply is lost is checked and sent again
    /// under the same write id). A one-shot transaction
    /// ([`KeyGroupBuilder::once`](super::KeyGroupBuilder::once)) that formed a group then
    /// dissolves it, also after an error.
    ///
    /// # Errors
    /// [`Error::Contention`] when a document read changed (in a group, only a transaction
    /// of the same group, through another handle, can do that; in a one-shot transaction
    /// without a group, any writer): nothing was written; [`Error::GroupLost`] when the
    /// lease passed: nothing was written; [`Error::Grouped`] when a one-shot transaction
    /// without a group meets a member a live group owns: nothing was written;
    /// [`Error::Backend`] when the outcome stayed unknown after the resends.
    pub async fn commit(self) -> Result<()> {
        let outcome = self.commit_changes().await;
        if let Holder::Once(group) = self.holder {
            let dissolved = group.dissolve().await;
            outcome?;
            return dissolved;
        }
        outcome
    }

    async fn commit_changes(&self) -> Result<()> {
        if self.writes.is_empty() {
            return Ok(());
        }
        let Some(group) = self.holder.group() else {
            return self.commit_ungrouped().await;
        };
        let mapper = group.mapper;
        let stored = match &self.state {
            Some(state) => state.clone(),
            None => Self::read_state(group).await?,
        };
        let mut writer = mapper.writers.take();
        let write: WriteId = writer.begin(mapper.write_window);
        let mut state = stored.doc.clone();
        write_ids::record(&mut state, &write);
        let group_owner = Owner {
            group: group.id.to_string(),
            until_ms: group.until_ms(),
            txn: None,
        };
        let mut owned = lock(&group.owned).clone();
        let fresh: Vec<Key> = self
            .writes
            .keys()
            .filter(|k| !owned.contains(*k))
            .cloned()
            .collect();
        // The list document is rewritten only when the transaction creates documents.
        let list = (!fresh.is_empty()).then(|| {
            owned.extend(fresh);
            group_documents(&group.members, &owned, &group_owner).1
        });
        // Every document read is expected, not only the group document: the group document
        // was read with the members, not before them, and a commit of an earlier
        // transaction whose future was dropped may land between those reads.
        let mut txn = Transaction::new().owned_by(group.id.clone());
        for (key, version) in &self.reads {
            txn = txn.expect(key.clone(), *version);
        }
        for (key, doc) in &self.writes {
            txn = txn.put(key.clone(), doc.clone());
        }
        txn = txn
            .expect(group.key.clone(), Some(stored.version))
            .put(group.key.clone(), state);
        if let Some(list) = &list {
            txn = txn.put(layout::key_group_members(&group.key), list.clone());
        }
        let _invalidate: Vec<_> = self
            .loaded
            .keys()
            .map(|main| mapper.invalidating(main))
            .collect();
        let landed = |doc: Option<&Versioned>| write_ids::applied(doc.map(|d| &d.doc), &write);
        let answer = if mapper.store.cross_group_transactions() {
            send(mapper, &txn, &group.key, landed).await
        } else {
            let current = self
                .writes
                .keys()
                .map(|key| {
                    let version = self.reads.get(key).copied().flatten();
                    let doc = self.docs.get(key).cloned().flatten();
                    (key.clone(), (version, doc))
                })
                .collect();
            let txn_id = write_ids::dynamic_name(&write);
            let state = txn
                .writes()
                .iter()
                .find_map(|(key, write)| match write {
                    Write::Put(state) if *key == group.key => Some(state.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            let changes = protocol::Changes {
                owner: &group_owner,
                stored: &stored,
                state,
                writes: &self.writes,
                current: &current,
                txn_id: &txn_id,
                list,
            };
            protocol::commit_in_steps(&group.steps(), changes, landed)
                .await
                .map(|()| Commit::Committed)
        };
        if !matches!(answer, Err(Error::Backend { .. })) {
            writer.settle();
        }
        match answer? {
            Commit::Committed => {
                *lock(&group.owned) = owned;
                Ok(())
            }
            Commit::Conflict { key } => Err(Error::Contention { key, attempts: 1 }),
        }
    }

    /// The commit of a one-shot transaction without a group (module docs): every
    /// document read expected at its version, the changes written, and the write id
    /// recorded in one written document, where a commit whose reply is lost is checked.
    async fn commit_ungrouped(&self) -> Result<()> {
        let mapper = self.holder.mapper();
        let mut writes = self.writes.clone();
        // A static shard already carries write records; else any document written.
        let Some(marker) = writes
            .keys()
            .find(|key| layout::static_shard_of(key).is_some())
            .or_else(|| writes.keys().next())
            .cloned()
        else {
            return Ok(());
        };
        let mut sender = mapper.writers.take();
        let write: WriteId = sender.begin(mapper.write_window);
        if let Some(doc) = writes.get_mut(&marker) {
            write_ids::record(doc, &write);
        }
        let mut txn = Transaction::new();
        for (key, version) in &self.reads {
            txn = txn.expect(key.clone(), *version);
        }
        for (key, doc) in writes {
            txn = txn.put(key, doc);
        }
        let _invalidate: Vec<_> = self
            .loaded
            .keys()
            .map(|main| mapper.invalidating(main))
            .collect();
        let landed = |doc: Option<&Versioned>| write_ids::applied(doc.map(|d| &d.doc), &write);
        let answer = send(mapper, &txn, &marker, landed).await;
        if !matches!(answer, Err(Error::Backend { .. })) {
            sender.settle();
        }
        match answer? {
            Commit::Committed => Ok(()),
            Commit::Conflict { key } => Err(Error::Contention { key, attempts: 1 }),
        }
    }
}
