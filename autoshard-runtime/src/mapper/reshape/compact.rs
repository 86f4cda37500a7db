//! `compact`: folds the dynamic shard documents of one entity back into its compacted
//! document, in bounded batches: each round reads a page, folds it, and commits ONE
//! transaction in the entity's dynamic-shard group that expects every version it folded,
//! deletes the folded shards and writes the compacted document with their write ids.
//!
//! Invariant: a save racing compaction writes a key the round did not read, a racing
//! compactor conflicts, a value that does not decode stops the round before anything is
//! committed; so nothing is lost or counted twice. Sweeping a kind is
//! [`crate::compaction`], built on this. The argument: `docs/design/resharding.md`,
//! "Compaction".

use crate::document::{Document, Value};
use crate::entity::Entity;
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::attempt::Attempt;
use crate::mapper::codec::{malformed, with_property};
use crate::mapper::layout;
use crate::mapper::write::write_ids;
use crate::store::ownership::system_now_ms;
use crate::store::{DocumentStore, Transaction, WriteId};
use std::ops::ControlFlow;

/// What a compaction did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactionReport {
    /// Entities visited.
    pub entities: u64,
    /// Dynamic shard documents folded into a compacted document (and deleted).
    pub shards_folded: u64,
    /// Commits made (one per folded batch).
    pub commits: u64,
    /// Commits that conflicted with a concurrent compaction and were redone.
    pub conflicts: u64,
    /// Entities whose compaction failed (logged; the sweep went on). Only
    /// [`Compactor`](crate::compaction::Compactor) sweeps count these; [`Mapper::compact`] returns the error.
    pub failures: u64,
    /// Sweeps of the kind (one per [`Compactor::run_once`](crate::compaction::Compactor::run_once)).
    pub sweeps: u64,
}

impl CompactionReport {
    /// Adds `other`'s counts to this report.
    pub fn add(&mut self, other: &CompactionReport) {
        self.entities += other.entities;
        self.shards_folded += other.shards_folded;
        self.commits += other.commits;
        self.conflicts += other.conflicts;
        self.failures += other.failures;
        self.sweeps += other.sweeps;
    }
}

/// Shard documents folded per commit by [`Mapper::compact`].
pub const DEFAULT_BATCH: usize = 256;

/// Rounds (commits) per entity and call of [`Mapper::compact`], so compaction of one
/// entity that writers keep growing still ends.
pub const DEFAULT_ROUNDS: u32 = 64;

/// What one round that did not conflict did.
enum Round {
    /// Nothing to fold (no shard, or only the compacted document).
    Idle,
    /// Folded this many shard documents; `more` when the page was full.
    Folded { shards: u64, more: bool },
}

impl<S: DocumentStore> Mapper<S> {
    /// Folds the dynamic shard documents of the entity with this id into one, with the
    /// default batch size and round limit ([`DEFAULT_BATCH`], [`DEFAULT_ROUNDS`]).
    ///
    /// Safe to run at any time, next to any number of saves, loads and other compactions
    /// (module docs of [`crate::compaction`]). After it returns, with no concurrent
    /// saves, the entity has one dynamic shard document (if it had any).
    ///
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[autoshard::sharded]
    /// #[derive(Entity, Debug, Clone)]
    /// struct Counter {
    ///     #[id]
    ///     id: u64,
    ///     #[shardable(neutral = 0)] // no `shards`: a new shard document per save
    ///     hits: i64,
    /// }
    ///
    /// impl Counter {
    ///     #[shard_method]
    ///     fn hit(&mut self) {
    ///         self.hits += 1;
    ///     }
    ///
    ///     #[shard_fold]
    ///     fn fold_hits(a: i64, b: i64) -> i64 {
    ///         a + b
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Counter::new(1, 5)).await?; // main document + compacted shard
    /// for _ in 0..10 {
    ///     db.update(&1, |c: &mut Counter| c.hit()).await?; // one new shard each
    /// }
    /// assert_eq!(db.store().len(), 12);
    /// let report = db.compact::<Counter>(&1).await?;
    /// assert_eq!(report.shards_folded, 10);
    /// assert_eq!(db.store().len(), 2);
    /// assert_eq!(db.load::<Counter>(&1).await?.hits, 15);
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(name = "autoshard.compact", level = "debug", skip_all, fields(kind = E::KIND, key = %E::key_for(&id.to_owned()), attempts = tracing::field::Empty, outcome = tracing::field::Empty))]
    pub async fn compact<E: Root>(
        &self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
    ) -> Result<CompactionReport> {
        let id = &id.to_owned();
        self.compact_in_batches::<E>(id, DEFAULT_BATCH, DEFAULT_ROUNDS)
            .await
    }

    /// [`Mapper::compact`] folding at most `batch` documents per commit (at least 2) and
    /// making at most `rounds` commits.
    pub async fn compact_in_batches<E: Root>(
        &self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
        batch: usize,
        rounds: u32,
    ) -> Result<CompactionReport> {
        let id = &id.to_owned();
        let main = E::key_for(id);
        let batch = batch.max(2);
        let mut report = CompactionReport {
            entities: 1,
            ..CompactionReport::default()
        };
        let mut retrying = self.retrying("compact");
        while report.commits < u64::from(rounds) {
            let round = match retrying
                .attempt(self.compact_round::<E>(&main, batch))
                .await?
            {
                ControlFlow::Break(round) => round,
                ControlFlow::Continue(()) => {
                    report.conflicts += 1;
                    continue;
                }
            };
            // A round that committed starts the policy afresh for the next one.
            retrying = self.retrying("compact");
            match round {
                Round::Idle => break,
                Round::Folded { shards, more } => {
                    report.commits += 1;
                    report.shards_folded += shards;
                    tracing::debug!(key = %main, shards, more, "compact: round committed");
                    if !more {
                        break;
                    }
                }
            }
        }
        Ok(report)
    }

    /// One round: scan a page, fold it, commit (module docs).
    async fn compact_round<E: Entity>(&self, main: &Key, batch: usize) -> Result<Attempt<Round>> {
        let compacted = layout::compacted(main);
        let page = self
            .store
            .scan(&layout::dynamic_shards_scan(main).limit(batch))
            .await?;
        let more = page.next.is_some();
        let listed = page.items.iter().find(|(key, _)| *key == compacted);
        if page.items.len() <= usize::from(listed.is_some()) {
            return Ok(Attempt::Committed(Round::Idle));
        }
        let current = match listed {
            Some((_, current)) => Some(current.clone()),
            None => self.store.get(&compacted).await?,
        };

        let compacted_version = current.as_ref().map(|c| c.version);
        let mut kept = Document::new();
        let mut folded: Vec<Option<Value>> = vec![None; E::PROPERTIES.len()];
        let mut shards = Vec::new();
        let read = current.iter().map(|c| (&compacted, c));
        let listed = page
            .items
            .iter()
            .filter(|(key, _)| *key != compacted)
            .map(|(k, v)| (k, v));
        for (key, stored) in read.chain(listed) {
            let is_compacted = *key == compacted;
            let unknown: Vec<&String> = stored
                .doc
                .keys()
                .filter(|field| {
                    *field != write_ids::RECORD
                        && !E::PROPERTIES.iter().any(|p| p.stored_as == *field)
                })
                .collect();
            if is_compacted {
                // Its record of write ids too (see `write_ids`): the folds below add to it.
                for field in unknown
                    .into_iter()
                    .chain(stored.doc.get_key_value(write_ids::RECORD).map(|(k, _)| k))
                {
                    kept.insert(field.clone(), stored.doc[field].clone());
                }
            } else if !unknown.is_empty() {
                tracing::warn!(key = %key, ?unknown, "compact: shard with unknown properties left in place");
                continue;
            } else {
                shards.push((key.clone(), stored.version));
            }
            for (index, p) in E::PROPERTIES.iter().enumerate() {
                let Some(value) = stored.doc.get(p.stored_as) else {
                    continue;
                };
                // Every value goes through the property's fold, the first one with the
                // neutral value, so one that does not decode is reported with its own key
                // and nothing is committed: it is never moved or deleted.
                let acc = match folded[index].take() {
                    Some(acc) => acc,
                    None => E::neutral_value(index).map_err(malformed(key))?,
                };
                let next = E::fold_values(index, &acc, value)
                    .map_err(|e| Error::malformed(key, with_property(e, p.name)))?;
                folded[index] = Some(next);
            }
        }
        if shards.is_empty() {
            return Ok(Attempt::Committed(Round::Idle));
        }

        let mut doc = kept;
        for (p, value) in E::PROPERTIES.iter().zip(folded) {
            if let Some(value) = value {
                doc.insert(p.stored_as.to_owned(), value);
            }
        }
        // The write ids of the folded documents, so that a save sending one of them again
        // finds it applied (see `write_ids`).
        let now = system_now_ms();
        for (key, _) in &shards {
            if let Some((writer, seq)) = write_ids::parse_dynamic_name(key.name()) {
                let folded = WriteId {
                    writer: writer.into(),
                    seq,
                    at_ms: now,
                    horizon_ms: write_ids::horizon(now, self.write_window),
                };
                write_ids::record(&mut doc, &folded);
            }
        }
        let mut txn = Transaction::new().expect(compacted.clone(), compacted_version);
        for (key, version) in &shards {
            txn = txn.expect(key.clone(), Some(*version)).delete(key.clone());
        }
        txn = txn.put(compacted, doc);
        let folded = shards.len() as u64;
        Ok(self.commit_attempt(&txn).await?.map(|()| Round::Folded {
            shards: folded,
            more,
        }))
    }
}
