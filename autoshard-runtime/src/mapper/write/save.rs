//! `save`: the main document when it changed, and each sharded property's change folded
//! into one uniformly random shard of that property, in optimistic transactions (paper,
//! section 4, "Saving", and Figure 5): one transaction for everything on a store with
//! cross-group transactions, one per entity group on a Redis Cluster. `apply` (in
//! `apply.rs`) saves through here too.
//!
//! Invariant: a change leaves the entity only after the commit that folded it was answered
//! `Committed`; a change whose commit has an unknown outcome is sent again first, under its
//! write id, to the shard it went to, and applied only if that shard does not record it.
//! So no write drops an entry of a shard's write record within the write window: a shard
//! is written back as values (the store keeps every entry), or whole after a read of its
//! whole record that drops only the entries past the horizon. Every attempt checks that
//! the entity exists (a stale cached main document changes nothing stored). The argument:
//! `docs/design/exactly-once.md`, "Saving" and "Applying".
//!
//! Tests: `tests/it/exactly_once.rs`, `multi_property.rs`, `lifecycle.rs`, the concurrency
//! and fault tests.

use crate::document::{Document, Versioned};
use crate::entity::{Entity, EntityState, Pending, Sent};
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::attempt::Attempt;
use crate::mapper::codec::{Folds, main_unchanged, malformed};
use crate::mapper::layout::{self, StaticProperty, static_properties};
use crate::mapper::write::static_shard::fold_into_shard;
use crate::mapper::write::write_ids::{self, Writer, check_same_entity, pending, stage, state_of};
use crate::store::merge::PRUNE_EVERY;
use crate::store::{Commit, DocumentStore, Transaction};
use std::ops::ControlFlow;

impl<S: DocumentStore> Mapper<S> {
    /// Saves an entity.
    ///
    /// 1. The main document is written only when it differs from the one last loaded or
    ///    saved (an unsharded entity, which keeps no such record, is always written).
    /// 2. For each statically sharded property whose shadow holds a change (touched and
    ///    not the neutral value, which would fold into nothing): fold the change into one
    ///    of its shards chosen uniformly at random, recording the save's write id there.
    ///    When the save changes one such property and nothing else static, that is one
    ///    merge for a built-in fold (the store folds; no read, no conflict) or a read,
    ///    fold and compare-and-set of the shard for a `#[shard_fold]` function, coalesced
    ///    with concurrent saves of the property ([`Mapper::with_coalescing`]). Otherwise
    ///    each property's shard is read, folded and committed expecting the version read:
    ///    on a store with cross-group transactions
    ///    ([`DocumentStore::cross_group_transactions`]) all of them together, atomically,
    ///    with the main document; on a Redis Cluster each property on its own. A conflict
    ///    retries per the [`crate::RetryPolicy`]. A change is dropped from the entity only
    ///    after its commit succeeded.
    /// 3. The changes of dynamic properties (`#[shardable]` without `shards`) go into ONE
    ///    new shard document named after the save's write id: nothing to contend on (a
    ///    read of the main and compacted documents, then one commit that creates the new
    ///    document while the main document exists). `compact` folds these documents back
    ///    into one.
    ///
    /// Every write checks that the entity exists: a save of an entity that was never
    /// inserted, or was deleted since (also when a new entity was inserted under the same
    /// id since: another incarnation), fails with [`Error::NotFound`] and writes nothing.
    /// On [`crate::MemoryStore`] and standalone Redis the check is part of the same
    /// commit, so a delete racing the save either precedes it (`NotFound`) or follows it
    /// (and deletes what it wrote); on a Redis Cluster the main document is in another
    /// slot, so the check precedes each commit, and the commit expects the version of the
    /// shard it folds into (or of the compacted document), which a delete removes: a
    /// delete landing in between makes it conflict, and the next attempt finds no entity.
    /// Concurrent changes to unsharded fields are last writer wins: the main document is
    /// rewritten whole, expecting only the version read in the same attempt. A save with
    /// nothing to write makes no store call.
    ///
    /// When retries run out the error is [`Error::Contention`], and the changes that were
    /// not committed stay pending in the entity, so a later `save` writes them (all of
    /// them on a store with cross-group transactions; on a cluster, properties committed
    /// before the failing one are stored and no longer pending).
    ///
    /// # Errors, cancellation and saving again
    /// A save that fails, or whose future is dropped (a timeout, a client gone), keeps
    /// every change it did not see committed in the entity, together with the write id
    /// and shard of any commit that may have been applied. Saving the same entity (or a
    /// clone) again stores each change exactly once: a change that was applied is found
    /// recorded in its shard and not folded again. This holds within the mapper's write
    /// window ([`Mapper::with_write_window`], 10 minutes by default); a change first sent
    /// longer ago fails with [`Error::Expired`]. Loading the entity anew instead drops the
    /// pending changes with the rest of the old value.
    ///
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[autoshard::sharded]
    /// #[derive(Entity, Debug, Clone)]
    /// struct Question {
    ///     #[id]
    ///     id: u64,
    ///     text: String,
    ///     #[shardable(neutral = 0, shards = 10)]
    ///     votes: i64,
    /// }
    ///
    /// impl Question {
    ///     #[shard_method]
    ///     fn vote_up(&mut self) {
    ///         self.votes += 1;
    ///     }
    ///
    ///     #[shard_fold]
    ///     fn fold_votes(a: i64, b: i64) -> i64 {
    ///         a + b
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Question::new(3, "Votes only?".into(), 0)).await?;
    /// let mut q: Question = db.load(&3).await?;
    /// let main_version = db.store().get(&q.key()).await?.unwrap().version;
    /// q.vote_up();
    /// db.save(&mut q).await?; // a vote alone does not rewrite the main document
    /// assert_eq!(db.store().get(&q.key()).await?.unwrap().version, main_version);
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(name = "autoshard.save", level = "debug", skip_all, fields(kind = E::KIND, key = %entity.key(), attempts = tracing::field::Empty, outcome = tracing::field::Empty))]
    pub async fn save<E: Root>(&self, entity: &mut E) -> Result<()> {
        let main = entity.key();
        let unchanged = main_unchanged(entity, &main)?;
        let changed = if unchanged {
            None
        } else {
            Some(entity.to_document().map_err(malformed(&main))?)
        };
        self.save_as(entity, &main, changed).await
    }

    /// [`Mapper::save`] of `entity`, stored at `main`, with `changed` its main document
    /// when that differs from the main document as last saved or loaded (`None` when it
    /// does not: `save` and `apply` have compared them already).
    pub(in crate::mapper) async fn save_as<E: Root>(
        &self,
        entity: &mut E,
        main: &Key,
        changed: Option<Document>,
    ) -> Result<()> {
        let dirty = changed.is_some();
        // Writes a snapshot cannot take in (module docs of `cache`): the main document,
        // dynamic shards.
        let _invalidate = (dirty || layout::has_dynamic::<E>()).then(|| self.invalidating(main));
        // Changes sent before with an unknown outcome go first, each to where it was sent.
        for p in static_properties(entity) {
            self.resend_single(entity, main, p).await?;
        }
        let dynamic = layout::has_dynamic::<E>();
        if dynamic {
            self.resend_dynamic(entity, main).await?;
        }
        if entity.state().is_some_and(EntityState::adoption_pending) {
            // Values the main document holds from before a field was sharded.
            self.adopt(entity, main).await?;
        }
        stage(entity, main)?;
        let touched: Vec<StaticProperty> = static_properties(entity)
            .into_iter()
            .filter(|p| pending(entity, p.index).value.is_some())
            .collect();
        let put_main = changed.as_ref();
        if self.store.cross_group_transactions() && (put_main.is_some() || touched.len() > 1) {
            // One commit: the main document (expected present; rewritten when dirty) and
            // a shard of every touched static property.
            self.save_shadows(entity, main, put_main, &touched).await?;
        } else {
            // The main document first, then each property on its own (coalesced with
            // concurrent saves of it, merged by the store where its fold allows: see
            // `static_shard`); each write checks that the entity exists.
            if put_main.is_some() {
                self.save_shadows(entity, main, put_main, &[]).await?;
            }
            for &p in &touched {
                self.save_single(entity, main, p).await?;
            }
        }
        if let (Some(doc), Some(state)) = (changed, entity.state_mut()) {
            state.set_saved_main(doc);
        }
        if dynamic {
            self.save_dynamic(entity, main).await?;
        }
        Ok(())
    }

    /// Folds the pending change of every property in `props` into one random shard of
    /// that property, and puts `put_main` as the main document, all in one optimistic
    /// commit, with retries. Each attempt reads the main document with the shards: when it
    /// is absent the save fails with [`Error::NotFound`] and writes nothing; on a store
    /// with cross-group transactions the commit also expects the main document's version,
    /// so a delete racing the save makes it conflict, not write into a deleted entity.
    /// Each attempt picks fresh shards: the ones that conflicted are likely still hot.
    async fn save_shadows<E: Entity>(
        &self,
        entity: &mut E,
        main: &Key,
        put_main: Option<&Document>,
        props: &[StaticProperty],
    ) -> Result<()> {
        if let Some(p) = props.iter().find(|p| p.layout.shards == 0) {
            return Err(Error::Invalid(format!(
                "`{}.{}` declares 0 shards",
                E::KIND,
                p.property.name
            )));
        }
        let mut props = props.to_vec();
        let mut retrying = self.retrying("save shard");
        loop {
            // The layout the entity knows: an attempt that found a shard retired updated it.
            let known = static_properties(entity);
            for p in &mut props {
                if let Some(k) = known.iter().find(|k| k.index == p.index) {
                    p.layout = k.layout;
                }
            }
            let counts: Vec<u32> = props.iter().map(|p| p.layout.shards).collect();
            let props = &props;
            let attempt = async {
                // The shards' lanes are held from the read to the commit (see `write_ids`),
                // and released before any backoff.
                let key = |i: usize, slot| props[i].live_shard(main, slot);
                let (keys, mut held) =
                    write_ids::hold(self.lanes.as_deref(), &self.writers, &counts, key).await;
                self.fold_into_shards(entity, main, put_main, &keys, props, held.writer())
                    .await
            };
            if let ControlFlow::Break(()) = retrying.attempt(attempt).await? {
                return Ok(());
            }
        }
    }

    /// One attempt: read the main document and the shards `keys` (one per property of
    /// `props`), fold each property's pending change into its shard, record the write id
    /// from `writer` there, and commit expecting the versions read (the main document's
    /// too, where the store commits across groups).
    async fn fold_into_shards<E: Entity>(
        &self,
        entity: &mut E,
        main: &Key,
        put_main: Option<&Document>,
        keys: &[Key],
        props: &[StaticProperty],
        writer: &mut Writer,
    ) -> Result<Attempt<()>> {
        let mut read = Vec::with_capacity(keys.len() + 1);
        read.push(main.clone());
        read.extend(keys.iter().cloned());
        // Without write records, written back as values, but for one write in
        // `PRUNE_EVERY` (`docs/design/exactly-once.md`, "The static-shard writer").
        let prune = writer.next_seq().is_multiple_of(PRUNE_EVERY);
        let mut found = self.get_for_write(&read, None, prune).await?.into_iter();
        let stored_main = found.next().flatten();
        let main_version = check_same_entity(entity, main, stored_main.as_ref())?;
        let mut txn = Transaction::new();
        if self.store.cross_group_transactions() || props.is_empty() {
            txn = txn.expect(main.clone(), Some(main_version));
        }
        if let Some(doc) = put_main {
            // The stored main document keeps the entity's incarnation, its shard layout
            // and the values on their way into the shards, as read (the commit expects
            // the version read).
            let mut doc = doc.clone();
            let incarnation = entity.state().and_then(EntityState::incarnation);
            if let Some(incarnation) = incarnation.filter(|i| !i.is_empty()) {
                doc.insert(layout::INCARNATION.to_owned(), incarnation.into());
            }
            if let Some(stored) = &stored_main {
                layout::carry_over::<E>(&stored.doc, &mut doc);
            }
            txn = txn.put(main.clone(), doc);
        }
        let found: Vec<Option<Versioned>> = found.collect();
        let stored_counts = match &stored_main {
            Some(stored) => layout::recorded_counts(main, &stored.doc)?,
            None => None,
        };
        let retired = keys.iter().zip(&found).find(|(key, current)| {
            layout::is_retired(
                stored_counts.as_ref(),
                key,
                current.as_ref().map(|c| &c.doc),
            )
        });
        if let Some((retired, _)) = retired {
            // A shrink retired a shard the entity's layout offered: no write goes there;
            // the next attempt picks from the layout stored now.
            if let Some(state) = entity.state_mut() {
                state.set_shard_counts(stored_counts.map(std::sync::Arc::new));
            }
            return Ok(Attempt::Conflict(retired.clone()));
        }
        let folds = Folds::of::<E>();
        let incarnation = entity
            .state()
            .and_then(EntityState::incarnation)
            .map(str::to_owned);
        let mut shards = Vec::with_capacity(props.len());
        for ((key, current), p) in keys.iter().zip(found).zip(props) {
            tracing::trace!(key = %key, version = ?current.as_ref().map(|c| c.version), "save: shard read");
            let Some(value) = pending(entity, p.index).value else {
                continue;
            };
            let (doc, version) = fold_into_shard(
                &folds,
                key,
                current,
                p.index,
                &value,
                incarnation.as_deref(),
            )?;
            shards.push((key, (doc, version)));
        }
        // Everything that can fail before sending has; from here the writer is in doubt
        // until the store answers.
        let write = writer.begin(self.write_window);
        for (key, (mut doc, version)) in shards {
            write_ids::record(&mut doc, &write);
            txn = Self::write_back(txn.expect(key.clone(), version), key, doc, prune);
        }
        let state = state_of(entity, main)?;
        for (key, p) in keys.iter().zip(props) {
            state.pending_mut(p.index).sent = Some(Sent {
                write: write.clone(),
                shard: key.clone(),
                value: None,
            });
        }
        let answer = self.store.commit(&txn).await?;
        writer.settle();
        if !props.is_empty() {
            let conflicted = matches!(answer, Commit::Conflict { .. });
            self.metrics.entity_attempt(main, conflicted);
        }
        for (key, p) in keys.iter().zip(props) {
            let pending = state.pending_mut(p.index);
            match answer {
                Commit::Committed => {
                    let sent = Sent {
                        write: write.clone(),
                        shard: key.clone(),
                        value: pending.value.take(),
                    };
                    self.confirmed(main, p.property.stored_as, &sent);
                    *pending = Pending::default();
                }
                Commit::Conflict { .. } => pending.sent = None,
            }
        }
        Ok(answer.into())
    }
}
