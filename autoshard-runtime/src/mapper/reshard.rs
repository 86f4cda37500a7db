//! `reshard`: changing the number of static shards of one stored entity online, while
//! other writers keep writing, through its recorded layout (see `layout`).
//!
//! # Why nothing is lost or counted twice
//! Values never move between shard documents here; only the record of where saves go
//! changes. A load folds every shard document with an index below the record's `read`
//! count, which only grows, and a reshard raises it before any save can use a new index:
//! - growing raises `shards` and `read` together in one compare-and-set of the main
//!   document, after creating the new shard documents (so the first merges into them
//!   find them); a save that loaded the older record keeps folding into the shards it
//!   knew, all of which are still read;
//! - shrinking lowers `shards` only: saves stop folding into the shards above it, but
//!   those keep their values and stay read. A change in doubt is always sent again to
//!   the shard it was first sent to, which still holds its write-id record, so it is
//!   applied there once.
//!
//! So a shrink reduces the documents writers contend on, not the documents a load reads:
//! folding the retired shards into the survivors (and so reading fewer) is not done here.

use super::layout::{self, StaticProperty};
use super::Mapper;
use crate::document::Document;
use crate::entity::{ShardCount, ShardCounts};
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::store::{Commit, DocumentStore, Transaction};
use std::ops::ControlFlow;

impl<S: DocumentStore> Mapper<S> {
    /// The most static shards [`Mapper::reshard`] gives one property.
    pub const MAX_SHARDS: u32 = 4096;

    /// Sets the number of static shards of every statically sharded property of the
    /// stored entity with this id to `shards`, while other writers keep writing. The
    /// count is recorded in the entity, so it outlives the annotation's (which only gives
    /// the count at insert): later loads and saves of the entity, in any process, use it.
    ///
    /// Growing spreads saves over more shard documents at once. Shrinking makes saves
    /// fold into fewer documents; the retired shards keep their values and loads still
    /// read them (module docs of `reshard` say why this is exact).
    ///
    /// # Errors
    /// [`Error::Invalid`] when `shards` is 0 or above [`Mapper::MAX_SHARDS`], or `E` has no
    /// statically sharded property; [`Error::NotFound`] when the entity is not stored;
    /// [`Error::Contention`] when concurrent changes of the main document outlast the
    /// retry policy; store errors.
    ///
    /// # Example
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[autoshard::sharded]
    /// #[derive(Entity, Debug, Clone)]
    /// struct Question {
    ///     #[id]
    ///     id: u64,
    ///     #[shardable(shards = 2, fold = sum)]
    ///     votes: i64,
    /// }
    ///
    /// impl Question {
    ///     #[shard_method]
    ///     fn vote_up(&mut self) {
    ///         self.votes += 1;
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Question::new(1, 0)).await?;
    /// db.update(&1, Question::vote_up).await?;
    /// db.reshard::<Question>(&1, 16).await?; // a hot question: 16 shards
    /// db.update(&1, Question::vote_up).await?;
    /// db.reshard::<Question>(&1, 1).await?; // cold again
    /// db.update(&1, Question::vote_up).await?;
    /// assert_eq!(db.load::<Question>(&1).await?.votes, 3);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn reshard<E: Root>(&self, id: &E::Id, shards: u32) -> Result<()> {
        let main = E::key_for(id);
        if shards == 0 || shards > Self::MAX_SHARDS {
            return Err(Error::Invalid(format!(
                "cannot reshard `{main}` to {shards} shards: the count must be 1 to {}",
                Self::MAX_SHARDS
            )));
        }
        if layout::static_annotated::<E>().next().is_none() {
            return Err(Error::Invalid(format!(
                "cannot reshard `{main}`: `{}` has no statically sharded property",
                E::KIND
            )));
        }
        tracing::debug!(key = %main, shards, "reshard");
        let mut retrying = self.retrying("reshard");
        loop {
            let attempt = self.reshard_attempt::<E>(&main, shards);
            if let ControlFlow::Break(()) = retrying.attempt(attempt).await? {
                return Ok(());
            }
        }
    }

    /// One attempt: read the main document, create the shard documents a grow adds, and
    /// commit the new layout expecting the main document's version.
    async fn reshard_attempt<E: Root>(
        &self,
        main: &Key,
        shards: u32,
    ) -> Result<super::attempt::Attempt<()>> {
        let Some(stored) = self.store.get(main).await? else {
            return Err(Error::NotFound { key: main.clone() });
        };
        let current = self.current_counts::<E>(main, &stored.doc).await?;
        let mut next = current.clone();
        for (_, count) in &mut next {
            count.shards = shards;
            count.read = count.read.max(shards);
        }
        if next == current && stored.doc.contains_key(layout::SHARDS) {
            return Ok(super::attempt::Attempt::Committed(()));
        }
        // New shard documents first, stamped with the incarnation so that merges into
        // them pass their guard; one that exists already (a retired shard) is kept.
        let incarnation = layout::incarnation(&stored.doc).filter(|i| !i.is_empty());
        for ((property, before), (_, after)) in current.iter().zip(&next) {
            for index in before.read..after.read {
                let key = layout::static_shard(main, property, index);
                let mut doc = Document::new();
                if let Some(incarnation) = incarnation {
                    doc.insert(layout::INCARNATION.to_owned(), incarnation.into());
                }
                let txn = Transaction::new().expect(key.clone(), None).put(key, doc);
                match self.store.commit(&txn).await? {
                    Commit::Committed | Commit::Conflict { .. } => {}
                }
            }
        }
        let mut doc = stored.doc;
        doc.insert(layout::SHARDS.to_owned(), layout::counts_value(&next));
        let txn = Transaction::new()
            .expect(main.clone(), Some(stored.version))
            .put(main.clone(), doc);
        Ok(self.store.commit(&txn).await?.into())
    }

    /// The layout the main document `doc` records, completed for the statically sharded
    /// properties of `E` it does not record (an entity stored before layouts were
    /// recorded, or a property that was dynamic at insert) from the annotation and the
    /// static shard documents a scan finds.
    async fn current_counts<E: Root>(&self, main: &Key, doc: &Document) -> Result<ShardCounts> {
        let mut counts = layout::recorded_counts(main, doc)?.unwrap_or_default();
        let missing: Vec<StaticProperty> = layout::static_annotated::<E>()
            .filter(|p| layout::count_of(&counts, p.property.name).is_none())
            .collect();
        if missing.is_empty() {
            return Ok(counts);
        }
        let found = self.scan_all(layout::static_shards_scan(main)).await?;
        for p in missing {
            let read = found
                .iter()
                .filter_map(|(key, _)| layout::static_shard_of(key))
                .filter(|(property, _)| *property == p.property.name)
                .map(|(_, index)| index.saturating_add(1))
                .fold(p.shards, u32::max);
            let count = ShardCount {
                shards: p.shards,
                read,
                base: p.shards,
            };
            counts.push((p.property.name.to_owned(), count));
        }
        Ok(counts)
    }
}
