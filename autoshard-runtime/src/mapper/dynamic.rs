//! Dynamic property sharding (paper, section 2.2): a save adds a new shard document,
//! loads fold every shard document that exists, and compaction (`compact`) folds them
//! back into one.
//!
//! # Layout
//! All dynamic shards of an entity live in ONE entity group (`layout::dynamic_group`): on
//! Redis Cluster they share one hash tag, so one slot, and compaction is a single commit.
//! Inside it, one document per save, named after the save's write id (`<writer>.<seq>`,
//! unique, so no other writer contends; see `writes`), holding `stored_as → change` of
//! every dynamic property with a pending change: a read of the main and compacted
//! documents, then one commit that creates it while the main document exists and the
//! compacted document is unchanged; and the *compacted* document
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
use super::layout::{self, dynamic_properties, has_dynamic, is_former_static_shard};
use super::writes::{self, check_same_entity, pending, state_of};
use super::Mapper;
use crate::document::{Document, Versioned};
use crate::entity::{Entity, Pending, Sent};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::{Commit, DocumentStore, Scan, ScanPage, Transaction};
use std::ops::ControlFlow;

/// How many times a load scans the dynamic shards again because compaction raced it.
const LOAD_SCAN_ATTEMPTS: u32 = 8;

/// The page size of the scans of a load: everything in one page, so that a store that
/// answers in one page (an atomic read, by the store contract) needs no version check
/// and a compaction racing the load never forces it to scan again.
const LOAD_PAGE: usize = 1 << 30;

impl<S: DocumentStore> Mapper<S> {
    /// Writes the pending changes of the dynamic properties of `entity` (staged by
    /// `save`) as one new shard document, named after its write id (see `writes`). A
    /// read of the main and compacted documents, then one commit that creates the new
    /// document while the main document exists and the compacted one is unchanged.
    pub(super) async fn save_dynamic<E: Entity>(&self, entity: &mut E, main: &Key) -> Result<()> {
        let (doc, props) = pending_dynamic(entity, |_| true);
        if doc.is_empty() {
            return Ok(());
        }
        let mut writer = self.writers.take();
        let mut retrying = self.retrying("save dynamic shard");
        loop {
            let (id, seq) = writer.begin();
            let key = layout::dynamic_shard(main, &writes::dynamic_name(&id, seq));
            let sent = Sent {
                writer: id,
                seq,
                shard: key,
                at_ms: writes::now_ms(),
                value: None,
            };
            let attempt = self.insert_dynamic_shard(entity, main, &doc, &props, &sent);
            let outcome = retrying.attempt(attempt).await;
            if let Err(Error::Backend { .. }) = outcome {
                // Unknown: the record stays, and the writer is in doubt.
                return outcome.map(drop);
            }
            writer.settle();
            if let Ok(ControlFlow::Break(())) = outcome {
                return Ok(());
            }
            // A conflict (or retries ran out on one): this send applied nothing, and no
            // other send used its id.
            let state = state_of(entity, main)?;
            for &index in &props {
                state.pending_mut(index).sent = None;
            }
            let _: ControlFlow<()> = outcome?;
        }
    }

    /// Sends again the pending changes of dynamic properties whose commit has an unknown
    /// outcome, under the name they were sent with; added only when neither that
    /// document nor the compacted document's record shows them applied.
    pub(super) async fn resend_dynamic<E: Entity>(&self, entity: &mut E, main: &Key) -> Result<()> {
        let Some(sent) = (0..E::PROPERTIES.len()).find_map(|index| pending(entity, index).sent)
        else {
            return Ok(());
        };
        let (doc, props) = pending_dynamic(entity, |p| p.sent.as_ref() == Some(&sent));
        if doc.is_empty() {
            return Ok(());
        }
        self.check_window(&sent)?;
        let mut retrying = self.retrying("save dynamic shard again");
        loop {
            let attempt = self.insert_dynamic_shard(entity, main, &doc, &props, &sent);
            if let ControlFlow::Break(()) = retrying.attempt(attempt).await? {
                return Ok(());
            }
        }
    }

    /// One attempt to add the dynamic shard document `sent.shard` holding `doc`, the
    /// pending changes of properties `props`: only while the main document exists
    /// ([`Error::NotFound`] otherwise, nothing written), and only when the change is not
    /// stored already (the document exists, or compaction recorded its write id). The
    /// commit expects the compacted document's version (so a request that arrives after
    /// compaction folded an earlier copy conflicts) and, where the store commits across
    /// groups, the main document's (so a racing delete makes it conflict).
    async fn insert_dynamic_shard<E: Entity>(
        &self,
        entity: &mut E,
        main: &Key,
        doc: &Document,
        props: &[usize],
        sent: &Sent,
    ) -> Result<Attempt<()>> {
        let compacted = layout::compacted(main);
        let read = [main.clone(), compacted.clone(), sent.shard.clone()];
        let [main_doc, compacted_doc, shard] =
            <[_; 3]>::try_from(self.get_exactly(&read).await?).unwrap_or_default();
        let main_version = check_same_entity(entity, main, main_doc.as_ref())?;
        let applied = shard.is_some()
            || writes::applied(
                compacted_doc.as_ref().map(|c| &c.doc),
                &sent.writer,
                sent.seq,
            );
        if !applied {
            let mut txn = Transaction::new();
            if self.store.cross_group_transactions() {
                txn = txn.expect(main.clone(), Some(main_version));
            }
            txn = txn
                .expect(compacted, compacted_doc.map(|c| c.version))
                .expect(sent.shard.clone(), None)
                .put(sent.shard.clone(), doc.clone());
            let state = state_of(entity, main)?;
            for &index in props {
                state.pending_mut(index).sent = Some(sent.clone());
            }
            if let Commit::Conflict { key } = self.store.commit(&txn).await? {
                // This send applied nothing; one sent before under the same id may have
                // been, so the record stays (the caller drops it for a fresh send).
                return Ok(Attempt::Conflict(key));
            }
        }
        let state = state_of(entity, main)?;
        for &index in props {
            *state.pending_mut(index) = Pending::default();
        }
        Ok(Attempt::Committed(()))
    }

    /// The shard documents a load folds besides the current static shards, from the
    /// first pages of [`extra_scans`] (`pages`, in that order): every dynamic shard and,
    /// when `E` has a dynamic property, static shards beyond the current count (module
    /// docs). A scan that needs more pages is read again in full.
    pub(super) async fn extra_shards<E: Entity>(
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
pub(super) fn extra_scans<E: Entity>(main: &Key) -> Vec<Scan> {
    if E::PROPERTIES.is_empty() {
        return Vec::new();
    }
    let mut scans = vec![layout::dynamic_shards_scan(main).limit(LOAD_PAGE)];
    if has_dynamic::<E>() {
        scans.push(layout::static_shards_scan(main).limit(LOAD_PAGE));
    }
    scans
}

/// The pending changes of the dynamic properties of `entity` that `which` selects, as a
/// shard document (`stored_as → change`), and the indexes of those properties.
fn pending_dynamic<E: Entity>(
    entity: &E,
    which: impl Fn(&Pending) -> bool,
) -> (Document, Vec<usize>) {
    let mut doc = Document::new();
    let mut props = Vec::new();
    for (index, p) in dynamic_properties::<E>() {
        let pending = pending(entity, index);
        if let (Some(value), true) = (&pending.value, which(&pending)) {
            doc.insert(p.stored_as.to_owned(), value.clone());
            props.push(index);
        }
    }
    (doc, props)
}
