//! The dynamic-shard half of a load (paper, section 2.2): every dynamic shard document the
//! entity has, each value once, while compaction moves them (the writer is in
//! `write/dynamic.rs`). A load also folds shards of a former annotation (static shards of
//! a now dynamic property, dynamic shards of a now static one).
//!
//! Invariant: a scan in one page is a snapshot of its group; a scan in several pages
//! checks that the compacted document's version did not change across it, else scans again
//! (bounded; then [`Error::Contention`]). The argument: `docs/design/resharding.md`,
//! "Loads of dynamic shards".

use crate::document::Versioned;
use crate::entity::Entity;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::mapper::layout::{self, has_dynamic, is_former_static_shard};
use crate::mapper::Mapper;
use crate::store::{DocumentStore, Scan, ScanPage};

/// How many times a load scans the dynamic shards again because compaction raced it.
const LOAD_SCAN_ATTEMPTS: u32 = 8;

/// The page size of the scans of a load: everything in one page, so that a store that
/// answers in one page (an atomic read, by the store contract) needs no version check
/// and a compaction racing the load never forces it to scan again.
const LOAD_PAGE: usize = 1 << 30;

/// How many dynamic shard documents of one entity a load reads before the mapper warns,
/// once per process, that nothing seems to compact them (see
/// [`Mapper::compact`](crate::Mapper::compact)).
pub const DYNAMIC_SHARDS_WARNING: usize = 1_000;

/// Warns, once per process, when a load of the entity at `main` read `shards` dynamic
/// shard documents, more than [`DYNAMIC_SHARDS_WARNING`].
fn warn_if_uncompacted(main: &Key, shards: usize) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if shards > DYNAMIC_SHARDS_WARNING && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            key = %main,
            shards,
            "a load read {shards} dynamic shards of one entity: run `Mapper::compact`, a \
             `Compactor` or a `Maintainer` to fold them back (warned once per process)"
        );
    }
}

impl<S: DocumentStore> Mapper<S> {
    /// The shard documents a load folds besides the current static shards, from the
    /// first pages of [`extra_scans`] (`pages`, in that order): every dynamic shard and,
    /// when `E` has a dynamic property, static shards beyond the current count (module
    /// docs). A scan that needs more pages is read again in full.
    pub(in crate::mapper) async fn extra_shards<E: Entity>(
        &self,
        main: &Key,
        pages: Vec<ScanPage>,
    ) -> Result<Vec<(Key, Versioned)>> {
        let mut pages = pages.into_iter();
        let (Some(dynamic), old_static) = (pages.next(), pages.next()) else {
            return Ok(Vec::new());
        };
        let dynamic = async {
            if dynamic.next.is_none() {
                // One page: one atomic read of the group.
                Ok(dynamic.items)
            } else {
                self.read_dynamic_shards(main).await
            }
        };
        let old_static = async {
            let all = match old_static {
                None => Vec::new(),
                Some(page) if page.next.is_none() => page.items,
                Some(_) => {
                    self.scan_all(layout::static_shards_scan(main).limit(LOAD_PAGE))
                        .await?
                }
            };
            Ok::<_, Error>(
                all.into_iter()
                    .filter(|(key, _)| is_former_static_shard::<E>(key)),
            )
        };
        let (mut dynamic, old_static) = futures::try_join!(dynamic, old_static)?;
        warn_if_uncompacted(main, dynamic.len());
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

/// The scans whose first pages a load of `E` at `main` reads with its documents (see
/// [`Mapper::extra_shards`]): none for an entity without sharded properties, the dynamic
/// shards, and for an entity with a dynamic property also every static shard.
pub(in crate::mapper) fn extra_scans<E: Entity>(main: &Key) -> Vec<Scan> {
    if E::PROPERTIES.is_empty() {
        return Vec::new();
    }
    let mut scans = vec![layout::dynamic_shards_scan(main).limit(LOAD_PAGE)];
    if has_dynamic::<E>() {
        scans.push(layout::static_shards_scan(main).limit(LOAD_PAGE));
    }
    scans
}
