//! Dynamic property sharding (paper, section 2.2): a save adds a new shard document,
//! loads fold every shard document that exists, and compaction (`compact`) folds them
//! back into one.
//!
//! # Layout
//! All dynamic shards of an entity live in ONE entity group (`layout::dynamic_group`): on
//! Redis Cluster they share one hash tag, so one slot, and compaction is a single commit.
//! Inside it, one document per save (a fresh UUID name, so no other writer contends; a
//! read of the main document, then one commit that creates it while the main document
//! still exists), holding `stored_as → shadow` of every dynamic
//! property whose shadow is not its neutral value; and the *compacted* document
//! (`layout::compacted`), which `insert` creates (empty for an entity whose properties
//! are all static) and compaction folds shards into.
//!
//! # Loads are consistent despite compaction
//! A load reads the dynamic shards with a scan, concurrently with the `get_many` of the
//! main document and the static shards (no extra sequential round trip). Compaction
//! moves values between documents, so a scan racing it could see a value twice (in a
//! shard read early and in the compacted document read later) or not at all. It relies
//! on two promises of the [`DocumentStore`] contract, and on no scan order:
//! - **one page is a snapshot of its group.** When the whole scan comes back in one page
//!   (loads ask for everything at once), the page is one atomic read of the dynamic group:
//!   every value is in it exactly once, whatever compaction did before or after.
//! - **versions change on every write and are never reused.** When the store splits the
//!   scan into pages anyway, the load reads the compacted document's version *before*
//!   the first page and again *after* the last. Every compaction rewrites the compacted
//!   document in the same commit that deletes the shards it folded, so equal versions
//!   mean no compaction committed in between, and every value was seen exactly once;
//!   otherwise it scans again (bounded; then [`Error::Contention`]).
//!
//! # Moving between static and dynamic sharding
//! A load folds every shard document it finds, for every sharded property it holds,
//! whatever the current annotation says:
//! - every load of an entity with a sharded property scans the dynamic shards (one
//!   concurrent request, which for a static-only entity finds just its empty compacted
//!   document), so values written while a property was dynamic survive a switch to
//!   static;
//! - a load of an entity with a dynamic property also scans the static shards under the
//!   main document (concurrently), so values in shards of an old static annotation
//!   survive a switch to dynamic. Static shards beyond the current count are left in
//!   place (they are no longer written); compaction folds only dynamic shards, since on
//!   a cluster a static shard is in another slot than the compacted document.
//!
//! This module does not decide when to compact; see [`crate::compaction`].

use super::attempt::Attempt;
use super::codec::{malformed, with_property};
use super::layout::{self, dynamic_properties, has_dynamic, is_former_static_shard};
use super::Mapper;
use crate::document::{Document, Versioned};
use crate::entity::Entity;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::{DocumentStore, Transaction};
use std::ops::ControlFlow;

/// How many times a load scans the dynamic shards again because compaction raced it.
const LOAD_SCAN_ATTEMPTS: u32 = 8;

/// The page size of the scans of a load: everything in one page, so that a store that
/// answers in one page (an atomic read, by the store contract) needs no version check
/// and a compaction racing the load never forces it to scan again.
const LOAD_PAGE: usize = 1 << 30;

impl<S: DocumentStore> Mapper<S> {
    /// Writes the touched, non-neutral shadows of the dynamic properties of `entity` as
    /// one new shard document, then resets those shadows. One `insert`, no read.
    pub(super) async fn save_dynamic<E: Entity>(&self, entity: &mut E, main: &Key) -> Result<()> {
        let mut doc = Document::new();
        let mut touched = Vec::new();
        for (index, p) in dynamic_properties::<E>() {
            if !entity.shadow_touched(index) {
                continue;
            }
            touched.push(index);
            let value = entity
                .shadow_value(index)
                .map_err(|e| Error::malformed(main, with_property(e, p.name)))?;
            let neutral = E::neutral_value(index).map_err(malformed(main))?;
            if value != neutral {
                doc.insert(p.stored_as.to_owned(), value);
            }
        }
        if !doc.is_empty() {
            // A UUID v4 collision is not a practical concern; a taken name counts as a
            // conflict, and the next attempt takes a new name.
            let mut retrying = self.retrying("save dynamic shard");
            loop {
                let key = layout::new_dynamic_shard(main);
                let attempt = self.insert_dynamic_shard(main, &key, &doc);
                if let ControlFlow::Break(()) = retrying.attempt(attempt).await? {
                    break;
                }
            }
        }
        for index in touched {
            entity.reset_shadow(index);
        }
        Ok(())
    }

    /// One attempt to add the dynamic shard document `key`: only while the main document
    /// exists ([`Error::NotFound`] otherwise, nothing written). Where the store commits
    /// across groups, the insert expects the main document's version read, so a racing
    /// delete makes it conflict; on a Redis Cluster the check precedes the insert.
    async fn insert_dynamic_shard(
        &self,
        main: &Key,
        key: &Key,
        doc: &Document,
    ) -> Result<Attempt<()>> {
        let Some(found) = self.store.get(main).await? else {
            return Err(Error::NotFound { key: main.clone() });
        };
        if self.store.cross_group_transactions() {
            let txn = Transaction::new()
                .expect(main.clone(), Some(found.version))
                .expect(key.clone(), None)
                .put(key.clone(), doc.clone());
            return self.commit_attempt(&txn).await;
        }
        match self.store.insert(key, doc.clone()).await {
            Ok(_) => Ok(Attempt::Committed(())),
            Err(Error::AlreadyExists { key }) => Ok(Attempt::Conflict(key)),
            Err(e) => Err(e),
        }
    }

    /// The shard documents a load folds besides the current static shards: every dynamic
    /// shard and, when `E` has a dynamic property, static shards beyond the current
    /// count (module docs).
    pub(super) async fn read_extra_shards<E: Entity>(
        &self,
        main: &Key,
    ) -> Result<Vec<(Key, Versioned)>> {
        if E::PROPERTIES.is_empty() {
            return Ok(Vec::new());
        }
        if !has_dynamic::<E>() {
            return self.read_dynamic_shards(main).await;
        }
        let old_static = async {
            let all = self
                .scan_all(layout::static_shards_scan(main).limit(LOAD_PAGE))
                .await?;
            Ok::<_, Error>(
                all.into_iter()
                    .filter(|(key, _)| is_former_static_shard::<E>(key)),
            )
        };
        let (mut dynamic, old_static) =
            futures::try_join!(self.read_dynamic_shards(main), old_static)?;
        dynamic.extend(old_static);
        Ok(dynamic)
    }

    /// Every dynamic shard document of the entity at `main`, each value exactly once
    /// even while compaction runs (module docs).
    async fn read_dynamic_shards(&self, main: &Key) -> Result<Vec<(Key, Versioned)>> {
        let scan = layout::dynamic_shards_scan(main).limit(LOAD_PAGE);
        let first = self.store.scan(&scan).await?;
        if first.next.is_none() {
            // One page: one atomic read of the group.
            return Ok(first.items);
        }
        // Pages: the first one was read before any version, so it cannot be checked; the
        // whole scan is read again between two reads of the compacted document.
        let compacted = layout::compacted(main);
        for attempt in 1..=LOAD_SCAN_ATTEMPTS {
            let before = self.store.get(&compacted).await?.map(|doc| doc.version);
            let items = self.scan_all(scan.clone()).await?;
            let after = self.store.get(&compacted).await?.map(|doc| doc.version);
            if before == after {
                return Ok(items);
            }
            tracing::debug!(key = %compacted, attempt, "load: compaction raced the scan; again");
            tokio::time::sleep(std::time::Duration::from_millis(u64::from(attempt))).await;
        }
        Err(Error::Contention {
            key: compacted,
            attempts: LOAD_SCAN_ATTEMPTS,
        })
    }
}
