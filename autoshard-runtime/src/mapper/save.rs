//! `save`: the main document when it changed, and each touched shadow folded into one
//! uniformly random shard of its property, inside optimistic transactions (paper,
//! section 4, "Saving", and Figure 5): one transaction for everything on a store with
//! cross-group transactions, one per entity group (the main document, then each
//! property's shard) on a Redis Cluster.
//!
//! # Why a save neither loses nor doubles a change
//! - A shadow is the change not yet stored. It is reset only after the commit that
//!   folded it was answered `Committed`; an error or a conflict leaves it as it was.
//! - A retry happens only after a `Conflict`, which by the store contract applied
//!   nothing; it then reads again, so it folds into the shard as it is now.
//! - Each attempt reads the main document and fails with `NotFound` when it is absent.
//!   Where the commit spans groups it also expects the main document's version, so a
//!   delete racing the save makes it conflict instead of writing into a deleted entity.
//!
//! Not covered here yet: a commit answered with `Backend` (or whose future was dropped)
//! may have been applied, and saving the kept shadow again counts it twice; the README's
//! limits say so. Tests: `tests/multi_property.rs` (a fault at every call of a
//! two-property save leaves neither or both), `tests/lifecycle.rs`, and the concurrency
//! tests (exact totals).

use super::attempt::Attempt;
use super::codec::malformed;
use super::codec::with_property;
use super::lanes;
use super::layout::{self, has_change, static_properties, StaticProperty};
use super::Mapper;
use crate::entity::Entity;
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::store::{DocumentStore, Transaction};
use std::ops::ControlFlow;

impl<S: DocumentStore> Mapper<S> {
    /// Saves an entity.
    ///
    /// 1. The main document is written only when it differs from the one last loaded or
    ///    saved (an unsharded entity, which keeps no such record, is always written).
    /// 2. For each statically sharded property whose shadow holds a change (touched and
    ///    not the neutral value, which would fold into nothing): read one of its shards
    ///    chosen uniformly at random, fold the shadow into its value, and commit
    ///    expecting the version read. On a store with cross-group transactions
    ///    ([`DocumentStore::cross_group_transactions`]) all such properties commit
    ///    together, atomically; on a Redis Cluster each property commits on its own. A
    ///    conflict retries per the [`crate::RetryPolicy`], on freshly chosen shards. A
    ///    shadow is reset only after its commit succeeded.
    /// 3. The touched shadows of dynamic properties (`#[shardable]` without `shards`)
    ///    that differ from their neutral value go into ONE new shard document under a
    ///    fresh UUID key: nothing to contend on (a read of the main document, then one
    ///    commit that creates the new document while the main document exists). `compact`
    ///    folds these documents back into one.
    ///
    /// Every write checks that the entity exists: a save of an entity that was never
    /// inserted, or was deleted since, fails with [`Error::NotFound`] and writes
    /// nothing. On [`crate::MemoryStore`] and standalone Redis the check is part of the same
    /// commit, so a delete racing the save either precedes it (`NotFound`) or follows it
    /// (and deletes what it wrote); on a Redis Cluster the main document is in another
    /// slot, so the check precedes each commit, and a delete landing in between can leave
    /// that commit's shard write behind. Concurrent changes to unsharded fields are last
    /// writer wins: the main document is rewritten whole, expecting only the version read
    /// in the same attempt. A save with nothing to write makes no store call.
    ///
    /// When retries run out the error is [`Error::Contention`] and the shadows that were
    /// not committed keep their change, so a later `save` can still write them (all of
    /// them on a store with cross-group transactions; on a cluster, properties committed
    /// before the failing one stay reset, their change being stored).
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
    /// use autoshard::{DocumentStore, Entity, Mapper, MemoryStore};
    ///
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
    pub async fn save<E: Root>(&self, entity: &mut E) -> Result<()> {
        let main = entity.key();
        let doc = entity.to_document().map_err(malformed(&main))?;
        let dirty = entity
            .state()
            .is_none_or(|state| state.saved_main() != Some(&doc));
        let touched: Vec<StaticProperty> = static_properties::<E>()
            .filter(|p| has_change(entity, p.index))
            .collect();
        let put_main = dirty.then_some(&doc);
        if self.store.cross_group_transactions() {
            // One commit: the main document (expected present; rewritten when dirty) and
            // a shard of every touched static property.
            if put_main.is_some() || !touched.is_empty() {
                self.save_shadows(entity, &main, put_main, &touched).await?;
            }
        } else {
            // Each commit stays in one group (one slot): the main document first, then
            // each property's shard; each checks that the main document exists.
            if put_main.is_some() {
                self.save_shadows(entity, &main, put_main, &[]).await?;
            }
            for &p in &touched {
                self.save_shadows(entity, &main, None, &[p]).await?;
                entity.reset_shadow(p.index);
            }
        }
        if dirty {
            if let Some(state) = entity.state_mut() {
                state.set_saved_main(doc);
            }
        }
        for p in static_properties::<E>() {
            entity.reset_shadow(p.index);
        }
        self.save_dynamic(entity, &main).await
    }

    /// Folds the shadow of every property in `props` into one random shard of that
    /// property, and puts `put_main` as the main document, all in one optimistic commit,
    /// with retries. Each attempt reads the main document with the shards: when it is
    /// absent the save fails with [`Error::NotFound`] and writes nothing; on a store with
    /// cross-group transactions the commit also expects the main document's version, so
    /// a delete racing the save makes it conflict, not write into a deleted entity. Each
    /// attempt picks fresh shards: the ones that conflicted are likely still hot.
    async fn save_shadows<E: Entity>(
        &self,
        entity: &E,
        main: &Key,
        put_main: Option<&crate::Document>,
        props: &[StaticProperty],
    ) -> Result<()> {
        if let Some(p) = props.iter().find(|p| p.shards == 0) {
            return Err(Error::Invalid(format!(
                "`{}.{}` declares 0 shards",
                E::KIND,
                p.property.name
            )));
        }
        let counts: Vec<u32> = props.iter().map(|p| p.shards).collect();
        let mut retrying = self.retrying("save shard");
        loop {
            let attempt = async {
                // The shards' lanes are held from the read to the commit (see `lanes`),
                // and released before any backoff.
                let key =
                    |i: usize, shard| layout::static_shard(main, props[i].property.name, shard);
                let (keys, _held) = lanes::hold(self.lanes.as_deref(), &counts, key).await;
                self.fold_into_shards(entity, main, put_main, &keys, props)
                    .await
            };
            if let ControlFlow::Break(()) = retrying.attempt(attempt).await? {
                return Ok(());
            }
        }
    }

    /// One attempt: read the main document and the shards `keys` (one per property of
    /// `props`), fold each property's shadow into its shard, commit expecting the versions
    /// read (the main document's too, where the store commits across groups).
    async fn fold_into_shards<E: Entity>(
        &self,
        entity: &E,
        main: &Key,
        put_main: Option<&crate::Document>,
        keys: &[Key],
        props: &[StaticProperty],
    ) -> Result<Attempt<()>> {
        let mut read = Vec::with_capacity(keys.len() + 1);
        read.push(main.clone());
        read.extend(keys.iter().cloned());
        let mut found = self.get_exactly(&read).await?.into_iter();
        let Some(main_version) = found.next().flatten().map(|m| m.version) else {
            return Err(Error::NotFound { key: main.clone() });
        };
        let mut txn = Transaction::new();
        if self.store.cross_group_transactions() || props.is_empty() {
            txn = txn.expect(main.clone(), Some(main_version));
        }
        if let Some(doc) = put_main {
            txn = txn.put(main.clone(), doc.clone());
        }
        for ((key, current), p) in keys.iter().zip(found).zip(props) {
            let stored_as = p.property.stored_as;
            tracing::trace!(key = %key, version = ?current.as_ref().map(|c| c.version), "save: shard read");
            let stored = current.as_ref().and_then(|c| c.doc.get(stored_as));
            let value = entity
                .fold_shadow_into(p.index, stored)
                .map_err(|e| Error::malformed(key, with_property(e, p.property.name)))?;
            let (mut doc, version) = match current {
                Some(current) => (current.doc, Some(current.version)),
                None => (crate::Document::new(), None),
            };
            doc.insert(stored_as.to_owned(), value);
            txn = txn.expect(key.clone(), version).put(key.clone(), doc);
        }
        self.commit_attempt(&txn).await
    }
}
