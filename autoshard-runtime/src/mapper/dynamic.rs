//! Dynamic property sharding (paper, section 2.2): a save adds a new shard document,
//! loads fold every shard document that exists, and compaction (`compact`) folds them
//! back into one.
//!
//! # Layout
//! All dynamic shards of the entity at `main` live in ONE entity group,
//! [`Key::dynamic_shards`] (`{Question:42/~dyn:}`): on Redis Cluster they share one hash
//! tag, so one slot, and compaction is a single Lua commit on one node. Inside it:
//! - `{Question:42/~dyn:}/~d:<uuid>`: one document per save, a fresh UUID v4 name,
//!   written with one `insert` (no read, no retry loop: the key is new, so nothing
//!   contends). It holds `stored_as → shadow` of every dynamic property whose shadow is
//!   not its neutral value.
//! - `{Question:42/~dyn:}/~d:` (empty name, [`compacted_key`]): the *compacted*
//!   document. `insert` writes the start values there (an empty document for an entity
//!   whose properties are all static, so that its loads take the one-page fast path
//!   below); compaction folds shards into it.
//!   The empty name sorts before every UUID, in [`Key`] order and in the byte order of
//!   the Redis scan index, so a scan always returns it first.
//!
//! Both are listed by the scan index of (`~dyn` prefix, `~d`), which lives in the same
//! group, so on Redis the commit script updates it atomically with the documents.
//!
//! # Loads are consistent despite compaction
//! A load reads the dynamic shards with a scan, concurrently with the `get_many` of the
//! main document and the static shards (no extra sequential round trip). Compaction
//! moves values between documents, so a scan racing it could see a value twice (in a
//! shard read early and in the compacted document read later) or not at all. Every
//! compaction rewrites the compacted document, so the load compares the compacted
//! document's version as read by the first page with its version after the last page:
//! equal means no compaction committed in between, and every value was seen exactly
//! once. When they differ the load scans again (bounded; then [`Error::Contention`]).
//! One page that contains the compacted document needs no check: a page is read in one
//! atomic step of one entity group (`get_many` of one group is a snapshot on every
//! backend here: one lock on [`crate::MemoryStore`], one Lua script on Redis). Loads
//! therefore ask for all dynamic shards in one page; the check matters for stores that
//! page anyway, and when the compacted document is absent (an entity inserted before
//! its property became dynamic) and compaction creates it meanwhile.
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

use super::layout::{dynamic_properties, has_dynamic, static_shard_count};
use super::load::with_property;
use super::{malformed, Mapper};
use crate::document::{Document, Versioned};
use crate::entity::Entity;
use crate::error::{Error, Result};
use crate::key::{Key, DYNAMIC_SHARD_KIND, SHARD_KIND};
use crate::store::{DocumentStore, Scan};

/// The name of the compacted dynamic shard document (sorts before every UUID).
const COMPACTED: &str = "";

/// How many times a load scans the dynamic shards again because compaction raced it.
const LOAD_SCAN_ATTEMPTS: u32 = 8;

/// The page size of the scans of a load: everything in one page, so that on the stores
/// here (whose pages are atomic reads) the fast path of `read_dynamic_shards` applies
/// and a compaction racing the load never forces it to scan again.
const LOAD_PAGE: usize = 1 << 30;

/// The key of the compacted dynamic shard document of the entity at `main`.
pub(super) fn compacted_key(main: &Key) -> Key {
    main.dynamic_shard(COMPACTED)
}

/// The scan of the dynamic shards of the entity at `main`.
pub(super) fn dynamic_scan(main: &Key) -> Scan {
    Scan::new(DYNAMIC_SHARD_KIND, Some(main.dynamic_shards()))
}

/// Folds every sharded property of `E` present in the shard document `doc` at `key`
/// into `entity`.
pub(super) fn fold_document<E: Entity>(entity: &mut E, key: &Key, doc: &Document) -> Result<()> {
    for (index, p) in E::PROPERTIES.iter().enumerate() {
        if let Some(stored) = doc.get(p.stored_as) {
            entity
                .fold_stored(index, stored)
                .map_err(|e| Error::malformed(key, with_property(e, p.name)))?;
        }
    }
    Ok(())
}

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
            // A UUID v4 collision is not a practical concern; a second name is still
            // tried rather than reporting a conflict the caller could do nothing about.
            let mut tries = 0;
            loop {
                tries += 1;
                let key = main.dynamic_shard(uuid::Uuid::new_v4().hyphenated().to_string());
                self.metrics.attempt(tries > 1);
                match self.store.insert(&key, doc.clone()).await {
                    Ok(_) => {
                        self.metrics.commit();
                        tracing::debug!(key = %key, "save: dynamic shard");
                        break;
                    }
                    Err(Error::AlreadyExists { key }) if tries < 3 => {
                        self.metrics.conflict();
                        tracing::warn!(key = %key, "save: dynamic shard name taken; new name");
                    }
                    Err(e) => {
                        self.metrics.failure();
                        return Err(e);
                    }
                }
            }
        }
        for index in touched {
            entity.reset_shadow(index);
        }
        Ok(())
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
        let current = static_shard_count::<E>();
        let old_static = async {
            let all = self
                .scan_all(Scan::new(SHARD_KIND, Some(main.clone())).limit(LOAD_PAGE))
                .await?;
            Ok::<_, Error>(all.into_iter().filter(move |(key, _)| {
                key.name()
                    .parse::<u32>()
                    .is_ok_and(|index| index >= current)
            }))
        };
        let (mut dynamic, old_static) =
            futures::try_join!(self.read_dynamic_shards(main), old_static)?;
        dynamic.extend(old_static);
        Ok(dynamic)
    }

    /// Every document of `scan`, all pages.
    async fn scan_all(&self, mut scan: Scan) -> Result<Vec<(Key, Versioned)>> {
        let mut items = Vec::new();
        loop {
            let page = self.store.scan(&scan).await?;
            items.extend(page.items);
            match page.next {
                Some(cursor) => scan.cursor = Some(cursor),
                None => return Ok(items),
            }
        }
    }

    /// Every dynamic shard document of the entity at `main`, each value exactly once
    /// even while compaction runs (module docs).
    async fn read_dynamic_shards(&self, main: &Key) -> Result<Vec<(Key, Versioned)>> {
        let compacted = compacted_key(main);
        for attempt in 1..=LOAD_SCAN_ATTEMPTS {
            let mut scan = dynamic_scan(main).limit(LOAD_PAGE);
            let mut items = Vec::new();
            let mut pages = 0u32;
            let mut first = None;
            loop {
                let page = self.store.scan(&scan).await?;
                pages += 1;
                if pages == 1 {
                    first = page
                        .items
                        .iter()
                        .find(|(key, _)| *key == compacted)
                        .map(|(_, doc)| doc.version);
                }
                items.extend(page.items);
                match page.next {
                    Some(cursor) => scan.cursor = Some(cursor),
                    None => break,
                }
            }
            if pages == 1 && first.is_some() {
                return Ok(items);
            }
            let now = self.store.get(&compacted).await?.map(|doc| doc.version);
            if now == first {
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
