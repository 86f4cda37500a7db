//! The static-shard writer: the one change a save makes to one statically sharded
//! property, coalesced with concurrent saves of it (`coalesce`), sent as one write with a
//! write id, shard and value fixed before the first send: a guarded [`Merge`] where the
//! property's fold is built in (one round trip, no read, no conflict), else read, fold and
//! compare-and-set on that shard. [`fold_into_shard`] is the one fold of a change into a
//! static shard, for every save.
//!
//! Invariant: however many times a fixed write is sent (the leader's attempts, a later save
//! of the batch after an unknown outcome), its shard applies it at most once; a shard a
//! shrink sealed sends it, under the same id, to the base shard every sender picks alike.
//! The compare-and-set reads the writer's own record entry (whether the id landed) and
//! writes the shard back as values, keeping the other writers' entries.
//! The argument: `docs/design/exactly-once.md`, "The static-shard writer".
//!
//! Across a failover: a send that finds its write id recorded answers only after
//! [`DocumentStore::make_durable`] of the shard, since the send that stored it may have
//! failed its wait for replicas (the same note, "Acknowledgements across a failover").
//!
//! Concurrent saves of the property are coalesced into one write by
//! [`Coalescer`](super::coalesce::Coalescer): `send_batch` sends the batch its leader hands it.

use crate::Version;
use crate::document::{Document, Value, Versioned};
use crate::entity::{Entity, EntityState, Pending, Sent};
use crate::error::{Error, FieldError, Result};
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::attempt::Attempt;
use crate::mapper::codec::Folds;
use crate::mapper::layout::{self, StaticProperty};
use crate::mapper::write::coalesce::{
    Claim, ClaimRef, Member, Resolve, in_doubt, moved, settle, take_claims,
};
use crate::mapper::write::write_ids::{self, check_incarnation, hold, state_of};
use crate::store::merge::PRUNE_EVERY;
use crate::store::{Commit, DocumentStore, Merge, Merged, Transaction};
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

/// What a batch writes into: one property of one stored entity.
struct Target<'a> {
    main: &'a Key,
    /// The incarnation of the entity the saves wrote to (`None`: built in code).
    incarnation: Option<String>,
    p: StaticProperty,
    folds: Folds,
}

impl<'a> Target<'a> {
    fn of<E: Entity>(entity: &E, main: &'a Key, p: StaticProperty) -> Self {
        Target {
            main,
            incarnation: entity
                .state()
                .and_then(EntityState::incarnation)
                .map(str::to_owned),
            p,
            folds: Folds::of::<E>(),
        }
    }
}

impl<S: DocumentStore> Mapper<S> {
    /// Saves the pending change of `p`, the one static property a save changes, through
    /// the mapper's coalescer (or alone when coalescing is off); see the module docs.
    pub(in crate::mapper) async fn save_single<E: Entity>(
        &self,
        entity: &mut E,
        main: &Key,
        p: StaticProperty,
    ) -> Result<()> {
        let target = Target::of(entity, main, p);
        let pending = state_of(entity, main)?.pending_mut(p.index);
        let Some(value) = pending.value.clone() else {
            return Ok(());
        };
        let claim: ClaimRef = Arc::new(Mutex::new(Claim::Queued));
        let resolve = Resolve {
            pending,
            claim: claim.clone(),
        };
        let send = |members| self.send_batch(&target, members);
        let result = if let Some(coalescer) = &self.coalescer {
            let slot = (main.clone(), p.index);
            coalescer.submit(slot, value, claim, send).await
        } else {
            send(vec![Member::own(value, claim)]).await.0
        };
        drop(resolve);
        result
    }

    /// Sends again the pending change of `p` whose earlier write has an unknown outcome,
    /// exactly as it was sent (its value, or the batch it was coalesced into, under its
    /// write id, to its shard): applied only when the shard does not record the id
    /// (module docs). Nothing to do when no change of `p` is in doubt; [`Error::Expired`]
    /// when it was first sent longer ago than the write window.
    pub(in crate::mapper) async fn resend_single<E: Entity>(
        &self,
        entity: &mut E,
        main: &Key,
        p: StaticProperty,
    ) -> Result<()> {
        let Pending {
            value: Some(pending),
            sent: Some(sent),
        } = state_of(entity, main)?.pending(p.index)
        else {
            return Ok(());
        };
        self.check_window(&sent)?;
        let sent = Sent {
            value: Some(sent.value.clone().unwrap_or(pending)),
            ..sent
        };
        let mut sent = sent;
        let target = Target::of(entity, main, p);
        let pending = state_of(entity, main)?.pending_mut(p.index);
        let mut moved = |to: &Sent| {
            if let Some(recorded) = &mut pending.sent {
                recorded.shard = to.shard.clone();
            }
        };
        self.send_fixed(&target, &mut sent, &mut moved).await?;
        self.confirmed(main, p.property.stored_as, &sent);
        tracing::debug!(key = %sent.shard, seq = sent.write.seq, "save: change sent before is stored");
        *state_of(entity, main)?.pending_mut(p.index) = Pending::default();
        Ok(())
    }

    /// Sends the fold of the changes of `members` as one write (module docs). Members
    /// whose save is gone are left out; the others' claims are taken with the write
    /// before it is sent and marked done on a definite answer.
    async fn send_batch(
        &self,
        target: &Target<'_>,
        members: Vec<Member>,
    ) -> (Result<()>, Vec<Member>) {
        let p = target.p;
        let counts = [p.layout.shards];
        let key = |_, slot| p.live_shard(target.main, slot);
        let (keys, mut held) = hold(self.lanes.as_deref(), &self.writers, &counts, key).await;
        let writer = held.writer();
        let write = writer.begin(self.write_window);
        let fold = |a: &Value, b: &Value| target.folds.fold(target.main, p.index, a, b);
        let taken = take_claims(&members, fold, |value| Sent {
            write,
            shard: keys[0].clone(),
            value: Some(value),
        });
        let mut sent = match taken {
            Ok(Some(sent)) => sent,
            Ok(None) => {
                writer.settle();
                return (Ok(()), members);
            }
            Err(e) => {
                writer.settle();
                return (Err(e), members);
            }
        };
        let mut moved = |to: &Sent| moved(&members, to);
        let result = self.send_fixed(target, &mut sent, &mut moved).await;
        if result.is_ok() {
            self.confirmed(target.main, p.property.stored_as, &sent);
        }
        let done = match &result {
            Ok(()) => Some(true),
            Err(e) if in_doubt(e) => None,
            Err(_) => Some(false),
        };
        if let Some(applied) = done {
            writer.settle();
            settle(&members, applied);
        }
        (result, members)
    }

    /// Sends `sent` (its value, under its write id, to its shard) until the store gives
    /// a definite answer: a merge where the fold allows, else compare-and-set attempts on
    /// the same shard (a conflict may be this very write, sent before and landing late).
    /// When the shard turns out sealed by a shrink (or deleted after one) without the
    /// write, the write goes to the base shard that shard's index maps to: `sent` names
    /// it, and `moved` is told before anything is sent there (module docs of `reshard`:
    /// every sender of the write id, whatever it knows, picks the same one).
    async fn send_fixed(
        &self,
        target: &Target<'_>,
        sent: &mut Sent,
        moved: &mut (dyn FnMut(&Sent) + Send),
    ) -> Result<()> {
        let value = sent
            .value
            .clone()
            .ok_or_else(|| Error::Invalid("a coalesced write without a value".to_owned()))?;
        loop {
            if self.merge_fixed(target, sent, &value).await? {
                return Ok(());
            }
            let mut retrying = self.retrying("save shard");
            let elsewhere = loop {
                let attempt = self.fold_fixed(target, sent, &value);
                if let ControlFlow::Break(elsewhere) = retrying.attempt(attempt).await? {
                    break elsewhere;
                }
            };
            let Some(shard) = elsewhere else {
                return Ok(());
            };
            tracing::debug!(from = %sent.shard, to = %shard, "save: shard retired, sent elsewhere");
            sent.shard = shard;
            moved(sent);
        }
    }

    /// Sends `sent` as one guarded merge where the property's fold takes `value`: whether
    /// the store applied it now or before. `false`: nothing written (no such fold, or the
    /// shard is missing, sealed, or of another incarnation).
    async fn merge_fixed(&self, target: &Target<'_>, sent: &Sent, value: &Value) -> Result<bool> {
        let p = target.p;
        let Some(fold) = (p.property.store_fold)().filter(|f| f.takes_operand(value)) else {
            return Ok(false);
        };
        // A merge without a guard could land in a sealed shard: an entity built in code
        // (no incarnation known) goes through compare-and-set.
        let Some(incarnation) = &target.incarnation else {
            return Ok(false);
        };
        let expected = (!incarnation.is_empty()).then(|| incarnation.clone());
        let merge = Merge::new(
            sent.shard.clone(),
            p.property.stored_as,
            fold,
            value.clone(),
            sent.write.clone(),
        )
        .only_if(layout::INCARNATION, expected);
        self.metrics.attempt(false);
        match self.store.merge(&merge).await? {
            Merged::Applied | Merged::AlreadyApplied => {
                self.metrics.commit();
                self.metrics.entity_attempt(target.main, false);
                Ok(true)
            }
            // Nothing written: the compare-and-set reads what is there, and finds the
            // entity gone (`NotFound`), the shard sealed, or creates a missing shard.
            Merged::Missing | Merged::Unsupported => Ok(false),
        }
    }

    /// One compare-and-set attempt of [`Mapper::send_fixed`]: read the main document
    /// and the shard, and unless the shard records the write id, fold `value` in, record
    /// the id, and commit expecting the versions read. `Some(shard)`: nothing written, the
    /// shard is retired (sealed, or deleted) and the write goes to this live one.
    ///
    /// The shard is read with its writer's own record entry only, and written back as
    /// values: the store keeps the other writers' entries, so a hot shard that records
    /// many writers costs neither its read nor its write more (on PostgreSQL a record
    /// entry is a row). Whether the write id landed is the writer's entry alone. One send
    /// in [`PRUNE_EVERY`] (by sequence number, as merges prune) reads the whole record
    /// and writes the shard back whole, dropping the entries older than the horizon.
    async fn fold_fixed(
        &self,
        target: &Target<'_>,
        sent: &Sent,
        value: &Value,
    ) -> Result<Attempt<Option<Key>>> {
        let read = [target.main.clone(), sent.shard.clone()];
        let prune = sent.write.seq.is_multiple_of(PRUNE_EVERY);
        let [main_doc, shard] = <[_; 2]>::try_from(
            self.get_for_write(&read, Some(&sent.write.writer), prune)
                .await?,
        )
        .unwrap_or_default();
        let main_version = check_incarnation(
            target.incarnation.as_deref(),
            target.main,
            main_doc.as_ref(),
        )?;
        if write_ids::applied(shard.as_ref().map(|s| &s.doc), &sent.write) {
            // Answered from what was read: the send that stored it may have failed.
            self.store.make_durable(&read[1..]).await?;
            return Ok(Attempt::Committed(None));
        }
        let p = target.p;
        let counts = match &main_doc {
            Some(main_doc) => layout::recorded_counts(target.main, &main_doc.doc)?,
            None => None,
        };
        if layout::is_retired(counts.as_ref(), &sent.shard, shard.as_ref().map(|s| &s.doc)) {
            let recorded = counts
                .as_ref()
                .and_then(|c| layout::count_of(c, p.property.name));
            let base = recorded.map_or(p.layout.base, |c| c.base);
            let heir = layout::static_shard_of(&sent.shard)
                .filter(|&(_, index)| index >= base)
                .map(|(_, index)| layout::static_shard(target.main, p.property.name, index % base))
                .ok_or_else(|| {
                    Error::malformed(
                        &sent.shard,
                        FieldError::new(layout::SEALED, "a base shard is sealed"),
                    )
                })?;
            return Ok(Attempt::Committed(Some(heir)));
        }
        let (mut doc, version) = fold_into_shard(
            &target.folds,
            &sent.shard,
            shard,
            p.index,
            value,
            target.incarnation.as_deref(),
        )?;
        write_ids::record(&mut doc, &sent.write);
        let mut txn = Transaction::new();
        if self.store.cross_group_transactions() {
            txn = txn.expect(target.main.clone(), Some(main_version));
        }
        txn = Self::write_back(
            txn.expect(sent.shard.clone(), version),
            &sent.shard,
            doc,
            prune,
        );
        let answer: Commit = self.store.commit(&txn).await?;
        let conflicted = matches!(answer, Commit::Conflict { .. });
        self.metrics.entity_attempt(target.main, conflicted);
        Ok(Attempt::from(answer).map(|()| None))
    }
}

/// The shard document at `key` (as read: `current`) with `change` of property `index`
/// folded into its value and, when it lacks one, the entity's `incarnation` stamped in (a
/// shard created here, or stored before shards recorded incarnations); and the version
/// to expect for it. The one fold of a change into a static shard, for every save; the
/// caller records the write id once it has one.
pub(in crate::mapper) fn fold_into_shard(
    folds: &Folds,
    key: &Key,
    current: Option<Versioned>,
    index: usize,
    change: &Value,
    incarnation: Option<&str>,
) -> Result<(Document, Option<Version>)> {
    let (mut doc, version) = match current {
        Some(current) => (current.doc, Some(current.version)),
        None => (Document::new(), None),
    };
    folds.fold_into(key, &mut doc, index, change)?;
    if let Some(incarnation) = incarnation.filter(|i| !i.is_empty()) {
        doc.entry(layout::INCARNATION.to_owned())
            .or_insert_with(|| incarnation.into());
    }
    Ok((doc, version))
}
