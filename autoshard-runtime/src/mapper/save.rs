//! `save`: the main document when it changed, then each touched shadow folded into one
//! uniformly random shard inside an optimistic transaction (paper, section 4, "Saving",
//! and Figure 5).

use super::attempt::Attempt;
use super::codec::malformed;
use super::codec::with_property;
use super::layout::{self, has_change, static_properties, StaticProperty};
use super::Mapper;
use crate::entity::Entity;
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::store::{DocumentStore, Transaction};
use rand::Rng;
use std::ops::ControlFlow;

impl<S: DocumentStore> Mapper<S> {
    /// Saves an entity.
    ///
    /// 1. The main document is written only when it differs from the one last loaded or
    ///    saved (an unsharded entity, which keeps no such record, is always written).
    /// 2. For each sharded property whose shadow holds a change (touched and not the
    ///    neutral value, which would fold into nothing): read one shard chosen
    ///    uniformly at random, fold the shadow into its value, and commit expecting the
    ///    version read. A conflict retries per the [`crate::RetryPolicy`], on a freshly
    ///    chosen shard. The shadow is reset only after its commit succeeded.
    /// 3. The touched shadows of dynamic properties (`#[shardable]` without `shards`)
    ///    that differ from their neutral value go into ONE new shard document under a
    ///    fresh UUID key: one `insert`, no read, nothing to contend on. `compact` folds
    ///    these documents back into one.
    ///
    /// When retries run out the error is [`Error::Contention`] and the failing property's
    /// shadow keeps its change, so a later `save` can still write it; properties
    /// committed before stay reset (their change is stored).
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
        if dirty {
            tracing::debug!(key = %main, "save: main document");
            self.store.put(&main, doc.clone()).await?;
            if let Some(state) = entity.state_mut() {
                state.set_saved_main(doc);
            }
        } else {
            tracing::trace!(key = %main, "save: main document unchanged");
        }

        for p in static_properties::<E>() {
            if has_change(entity, p.index) {
                self.save_shadow(entity, &main, p).await?;
            }
            entity.reset_shadow(p.index);
        }
        self.save_dynamic(entity, &main).await
    }

    /// Folds the shadow of `p` into one random shard, with retries.
    async fn save_shadow<E: Entity>(
        &self,
        entity: &E,
        main: &Key,
        p: StaticProperty,
    ) -> Result<()> {
        if p.shards == 0 {
            return Err(Error::Invalid(format!(
                "`{}.{}` declares 0 shards",
                E::KIND,
                p.property.name
            )));
        }
        let mut retrying = self.retrying("save shard");
        loop {
            // A fresh shard on every attempt: the one that conflicted is likely still hot.
            let key = layout::static_shard(main, random_shard(p.shards));
            let attempt = self.fold_into_shard(entity, &key, p);
            if let ControlFlow::Break(()) = retrying.attempt(attempt).await? {
                return Ok(());
            }
        }
    }

    /// One attempt: read shard `key`, fold the shadow of `p` in, commit expecting the
    /// version read.
    async fn fold_into_shard<E: Entity>(
        &self,
        entity: &E,
        key: &Key,
        p: StaticProperty,
    ) -> Result<Attempt<()>> {
        let stored_as = p.property.stored_as;
        let current = self.store.get(key).await?;
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
        let txn = Transaction::new()
            .expect(key.clone(), version)
            .put(key.clone(), doc);
        self.commit_attempt(&txn).await
    }
}

/// A shard index uniformly in `0..shards` (`shards >= 1`).
fn random_shard(shards: u32) -> u32 {
    rand::rng().random_range(0..shards)
}
