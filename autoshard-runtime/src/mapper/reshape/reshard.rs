//! `reshard`: the number of static shards of one stored entity, changed online while other
//! writers write, through its recorded layout (`layout`'s `ShardCount`). A shrink ends
//! with `drain` (its own module), which moves the values of the shards it retired into
//! live ones.
//!
//! Invariants: a load counts every value once (a shard named as moved is skipped, and a
//! sealed shard's value is frozen before the move); a write is applied once (a sealed shard
//! refuses it, and every sender of its write id sends it to the same base shard). The
//! protocol and the proofs: `docs/design/resharding.md`, "Resharding".

use crate::document::Document;
use crate::entity::{Entity, ShardCount, ShardCounts, Sharding};
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::{EntityId, Key};
use crate::mapper::Mapper;
use crate::mapper::attempt::Attempt;
use crate::mapper::layout::{self, StaticProperty};
use crate::store::{Commit, DocumentStore, Scan, Transaction};
use std::ops::ControlFlow;

impl<S: DocumentStore> Mapper<S> {
    /// The most static shards [`Mapper::reshard`] gives one property.
    pub const MAX_SHARDS: u32 = layout::MAX_SHARDS;

    /// Sets the number of static shards of every statically sharded property of the
    /// stored entity with this id to `shards`, while other writers keep writing. The
    /// count is recorded in the entity, so it outlives the annotation's (which only gives
    /// the count at insert): later loads and saves of the entity, in any process, use it.
    ///
    /// Growing spreads saves over more shard documents at once. Shrinking makes saves
    /// fold into fewer documents and moves the values of the shards it retires into the
    /// others ([`Mapper::drain`], run here); the shards of the insert stay for the
    /// entity's life. The module docs of `reshard` give the protocol and why no value is
    /// lost or counted twice meanwhile.
    ///
    /// # Errors
    /// [`Error::Invalid`] when `shards` is outside a property's annotated bounds
    /// (`#[shardable(shards = 10, min = 2, max = 100)]`; by default 1 and
    /// [`crate::DEFAULT_MAX_SHARDS`]) or above [`Mapper::MAX_SHARDS`], or `E` has no
    /// statically sharded property; [`Error::NotFound`] when the entity is not stored;
    /// [`Error::Contention`] when concurrent changes outlast the retry policy; store
    /// errors. After an error the count is either the old or the new one, and a later
    /// `reshard` or `drain` finishes what was left.
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
    #[tracing::instrument(name = "autoshard.reshard", level = "debug", skip_all, fields(kind = E::KIND, key = %E::key_for(&id.to_owned()), attempts = tracing::field::Empty, outcome = tracing::field::Empty))]
    pub async fn reshard<E: Root>(
        &self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
        shards: u32,
    ) -> Result<()> {
        let id = &id.to_owned();
        let main = E::key_for(id);
        let _invalidate = self.invalidating(&main);
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
        for p in layout::static_annotated::<E>() {
            let (fewest, most) = bounds(&p);
            if !(fewest..=most).contains(&shards) {
                return Err(Error::Invalid(format!(
                    "cannot reshard `{main}` to {shards} shards: `{}.{}` is annotated with \
                     {fewest} to {most} (`#[shardable(min = .., max = ..)]`)",
                    E::KIND,
                    p.property.name
                )));
            }
        }
        tracing::debug!(key = %main, shards, "reshard");
        let mut retrying = self.retrying("reshard");
        loop {
            let attempt = self.reshard_attempt::<E>(&main, shards);
            if let ControlFlow::Break(()) = retrying.attempt(attempt).await? {
                break;
            }
        }
        self.drain_at::<E>(&main).await.map(|_| ())
    }

    /// [`Mapper::reshard`] for every stored entity of kind `E`, one at a time (a scan of
    /// the kind's main documents, in pages). An entity whose reshard fails is logged and
    /// counted, and the others go on; one deleted meanwhile is skipped.
    ///
    /// # Errors
    /// The errors of [`Mapper::reshard`] that concern the count ([`Error::Invalid`]),
    /// before anything is changed; a failed scan of the kind.
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
    ///     #[shardable(shards = 4, fold = sum)]
    ///     votes: i64,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// for id in 0..3 {
    ///     db.insert(&mut Question::new(id, 0)).await?;
    /// }
    /// let report = db.reshard_kind::<Question>(16).await?;
    /// assert_eq!((report.entities, report.failures), (3, 0));
    /// assert_eq!(db.shards::<Question>(&2).await?, 16);
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(name = "autoshard.reshard_kind", level = "debug", skip_all, fields(kind = E::KIND, attempts = tracing::field::Empty, outcome = tracing::field::Empty))]
    pub async fn reshard_kind<E: Root>(&self, shards: u32) -> Result<ReshardReport> {
        let mut report = ReshardReport::default();
        let mut scan = Scan::new(E::KIND, None);
        loop {
            let page = self.store.scan(&scan).await?;
            for (key, _) in &page.items {
                let Some(id) = E::Id::from_key_name(key.name()) else {
                    continue;
                };
                match self.reshard::<E>(&id, shards).await {
                    Ok(()) => report.entities += 1,
                    Err(Error::NotFound { .. }) => {}
                    Err(e @ Error::Invalid(_)) => return Err(e),
                    Err(e) => {
                        report.entities += 1;
                        report.failures += 1;
                        tracing::warn!(key = %key, error = %e, "reshard_kind: entity failed");
                    }
                }
            }
            match page.next {
                Some(cursor) => scan.cursor = Some(cursor),
                None => return Ok(report),
            }
        }
    }

    /// The number of static shards saves of the stored entity with this id fold into:
    /// the count its layout records (the largest over its statically sharded
    /// properties), or the annotation's for an entity stored without one.
    ///
    /// # Errors
    /// [`Error::NotFound`] when the entity is not stored; [`Error::Malformed`] when its
    /// layout record is not one; store errors.
    ///
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[autoshard::sharded]
    /// #[derive(Entity, Debug, Clone)]
    /// struct Question {
    ///     #[id]
    ///     id: u64,
    ///     #[shardable(shards = 4, fold = sum)]
    ///     votes: i64,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Question::new(1, 0)).await?;
    /// assert_eq!(db.shards::<Question>(&1).await?, 4);
    /// db.reshard::<Question>(&1, 12).await?;
    /// assert_eq!(db.shards::<Question>(&1).await?, 12);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shards<E: Root>(
        &self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
    ) -> Result<u32> {
        let id = &id.to_owned();
        let main = E::key_for(id);
        let Some(stored) = self.store.get(&main).await? else {
            return Err(Error::NotFound { key: main });
        };
        let recorded = layout::recorded_counts(&main, &stored.doc)?.unwrap_or_default();
        Ok(layout::static_annotated::<E>()
            .map(|p| {
                layout::count_of(&recorded, p.property.name).map_or(p.layout.shards, |c| c.shards)
            })
            .max()
            .unwrap_or(0))
    }

    /// One attempt: read the main document, create the shard documents a grow adds, and
    /// commit the new layout expecting the main document's version.
    async fn reshard_attempt<E: Root>(&self, main: &Key, shards: u32) -> Result<Attempt<()>> {
        let Some(stored) = self.store.get(main).await? else {
            return Err(Error::NotFound { key: main.clone() });
        };
        let current = self.current_counts::<E>(main, &stored.doc).await?;
        let next: ShardCounts = current
            .iter()
            .map(|(property, c)| (property.clone(), resized(*c, shards)))
            .collect();
        if next == current && stored.doc.contains_key(layout::SHARDS) {
            return Ok(Attempt::Committed(()));
        }
        // New shard documents first, stamped with the incarnation so that merges into
        // them pass their guard. One that exists already was created by an attempt that
        // did not commit its layout, and never written since.
        let incarnation = layout::incarnation(&stored.doc).filter(|i| !i.is_empty());
        for ((property, before), (_, after)) in current.iter().zip(&next) {
            for index in before.next..after.next {
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
        self.commit_attempt(&txn).await
    }

    /// The layout the main document `doc` records, completed for the statically sharded
    /// properties of `E` it does not record (an entity stored before layouts were
    /// recorded, or a property that was dynamic at insert) from the annotation and the
    /// static shard documents a scan finds: those beyond the annotation's count are
    /// retired, to be drained.
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
            let next = found
                .iter()
                .filter_map(|(key, _)| layout::static_shard_of(key))
                .filter(|(property, _)| *property == p.property.name)
                .map(|(_, index)| index.saturating_add(1))
                .fold(p.layout.base, u32::max);
            let count = ShardCount { next, ..p.layout };
            counts.push((p.property.name.to_owned(), count));
        }
        Ok(counts)
    }
}

/// What [`Mapper::reshard_kind`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReshardReport {
    /// Entities of the kind it found (resharded, or failed).
    pub entities: u64,
    /// Entities whose reshard failed (logged; run it again for them).
    pub failures: u64,
}

/// `c` with `shards` shards: a grow adds fresh indexes after `next`; a shrink retires the
/// oldest live added shards.
fn resized(c: ShardCount, shards: u32) -> ShardCount {
    let added_before = c.shards - c.live_base();
    let added_after = shards - shards.min(c.base);
    let next = c.next + added_after.saturating_sub(added_before);
    ShardCount { shards, next, ..c }
}

/// The fewest and the most shards the annotation of `p` allows.
fn bounds(p: &StaticProperty) -> (u32, u32) {
    match p.property.sharding {
        Sharding::Static { min, max, .. } => (min, max),
        Sharding::Dynamic => (1, 1),
    }
}

/// The counts a reshard may give every statically sharded property of `E` (the
/// intersection of their annotated bounds); `None` when there is none, or no count fits
/// them all.
pub(crate) fn shard_bounds<E: Entity>() -> Option<(u32, u32)> {
    let (fewest, most) = layout::static_annotated::<E>()
        .map(|p| bounds(&p))
        .reduce(|(a, b), (c, d)| (a.max(c), b.min(d)))?;
    (fewest <= most).then_some((fewest, most))
}
