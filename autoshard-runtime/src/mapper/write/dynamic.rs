//! The dynamic-shard writer (paper, section 2.2): a save adds a new shard document, named
//! after its write id, in the entity's one dynamic-shard group (one Redis Cluster slot);
//! loads fold every shard document there (`read/load.rs`), and compaction
//! (`reshape/compact.rs`, scheduled by [`crate::compaction`]) folds them back into the
//! compacted document.
//!
//! Invariant: the insert of a dynamic shard expects the compacted document's version and
//! the main document, so a change is applied once even when an old request lands after its
//! resend was compacted. The layout: `docs/design/exactly-once.md`, "The dynamic-shard
//! writer". A resend that finds its change stored answers only after
//! [`DocumentStore::make_durable`] of what it read (the same note, "Acknowledgements across
//! a failover").

use crate::document::Document;
use crate::entity::{Entity, Pending, Sent};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::attempt::Attempt;
use crate::mapper::layout::{self, dynamic_properties};
use crate::mapper::write::write_ids::{self, check_same_entity, pending, state_of};
use crate::store::{Commit, DocumentStore, Transaction};
use std::ops::ControlFlow;

impl<S: DocumentStore> Mapper<S> {
    /// Writes the pending changes of the dynamic properties of `entity` (staged by
    /// `save`) as one new shard document, named after its write id (see `write_ids`). A
    /// read of the main and compacted documents, then one commit that creates the new
    /// document while the main document exists and the compacted one is unchanged.
    pub(in crate::mapper) async fn save_dynamic<E: Entity>(
        &self,
        entity: &mut E,
        main: &Key,
    ) -> Result<()> {
        let (doc, props) = pending_dynamic(entity, |_| true);
        if doc.is_empty() {
            return Ok(());
        }
        let mut writer = self.writers.take();
        let mut retrying = self.retrying("save dynamic shard");
        loop {
            let write = writer.begin(self.write_window);
            let key = layout::dynamic_shard(main, &write_ids::dynamic_name(&write));
            let sent = Sent {
                write,
                shard: key,
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
    pub(in crate::mapper) async fn resend_dynamic<E: Entity>(
        &self,
        entity: &mut E,
        main: &Key,
    ) -> Result<()> {
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
            || write_ids::applied(compacted_doc.as_ref().map(|c| &c.doc), &sent.write);
        if applied {
            // Answered from what was read: the send that stored it may have failed.
            self.store.make_durable(&read[2..]).await?;
        } else {
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
}

/// The pending changes of the dynamic properties of `entity` that `which` selects, as a
/// shard document (`stored_as → change`), and the indexes of those properties.
pub(in crate::mapper) fn pending_dynamic<E: Entity>(
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
