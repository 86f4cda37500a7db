//! The save of one statically sharded property: the change is coalesced with concurrent
//! saves of the same property (`coalesce`), and the batch is sent as one write with a
//! fixed write id, shard and value:
//! - with a built-in fold (`#[shardable(fold = sum)]`) and a value the store folds
//!   exactly, as one [`Merge`]: one round trip, no read, no conflict. The merge is
//!   guarded by the entity's incarnation, which insert records in every static shard,
//!   so it never lands in a deleted entity or in another incarnation under the same id;
//! - otherwise (a `#[shard_fold]` function, a value the store does not fold, a shard
//!   the merge did not find) by read, fold and compare-and-set on that shard, retried on
//!   conflicts with the same write id: the commit checks the main document like every
//!   other save, and stamps the incarnation into a shard that lacks it. A stored value
//!   the merge refused as not of the property's type (`Unsupported`) fails there to
//!   decode as the type: `Malformed` naming the shard, and nothing is written.
//!
//! Fixing the write id and value before the first send is what lets any number of sends
//! of the batch (the leader's attempts, and later a save of the batch sending it again
//! after an unknown outcome, [`Mapper::resend_single`]) apply it at most once: the shard
//! records the id in the same atomic step as the fold (`write_ids`). The shard changes only
//! when a shrink sealed it (a definite "not applied"), to the base shard its index maps
//! to, which every sender of the write id picks alike; the pending record names it
//! before anything is sent there. So a send in doubt is always sent again to the shards
//! that may hold it, in the same order. Every change of a static
//! property in doubt is sent again that way, whichever save sent it first.

use crate::document::{Document, Value};
use crate::entity::{Entity, EntityState, Pending, Sent};
use crate::error::{Error, FieldError, Result};
use crate::key::Key;
use crate::mapper::attempt::Attempt;
use crate::mapper::codec::with_property;
use crate::mapper::layout::{self, StaticProperty};
use crate::mapper::write::coalesce::{self, Claim, ClaimRef, Member};
use crate::mapper::write::shard_choice;
use crate::mapper::write::write_ids::{self, check_incarnation, state_of};
use crate::mapper::Mapper;
use crate::store::{Commit, DocumentStore, Merge, Merged, Transaction, WriteId};
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

/// What a batch writes into: one property of one stored entity.
struct Target<'a> {
    main: &'a Key,
    /// The incarnation of the entity the saves wrote to (`None`: built in code).
    incarnation: Option<String>,
    p: StaticProperty,
    fold_values: fn(usize, &Value, &Value) -> Result<Value, FieldError>,
    neutral: fn(usize) -> Result<Value, FieldError>,
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
            fold_values: E::fold_values,
            neutral: E::neutral_value,
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
        tracing::debug!(key = %sent.shard, seq = sent.seq, "save: change sent before is stored");
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
        let (keys, mut held) =
            shard_choice::hold(self.lanes.as_deref(), &self.writers, &counts, key).await;
        let writer = held.writer();
        let (id, seq) = writer.begin();
        let taken = take_claims(target, &members, |value| Sent {
            writer: id.clone(),
            seq,
            shard: keys[0].clone(),
            at_ms: write_ids::now_ms(),
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
        let mut moved = |to: &Sent| {
            for member in &members {
                if let Claim::Taken(taken) = &mut *coalesce::lock(&member.claim) {
                    if taken.writer == to.writer && taken.seq == to.seq {
                        taken.shard = to.shard.clone();
                    }
                }
            }
        };
        let result = self.send_fixed(target, &mut sent, &mut moved).await;
        if result.is_ok() {
            self.confirmed(target.main, p.property.stored_as, &sent);
        }
        let done = match &result {
            Ok(()) => Some(true),
            Err(e) if coalesce::in_doubt(e) => None,
            Err(_) => Some(false),
        };
        if let Some(applied) = done {
            writer.settle();
            for member in &members {
                let mut claim = coalesce::lock(&member.claim);
                if matches!(*claim, Claim::Taken(_)) {
                    *claim = Claim::Done(applied);
                }
            }
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
        let write = WriteId {
            writer: sent.writer.to_string(),
            seq: sent.seq,
            at_ms: sent.at_ms,
            horizon_ms: write_ids::horizon(sent.at_ms, self.write_window),
        };
        let expected = (!incarnation.is_empty()).then(|| incarnation.clone());
        let merge = Merge::new(
            sent.shard.clone(),
            p.property.stored_as,
            fold,
            value.clone(),
            write,
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
    async fn fold_fixed(
        &self,
        target: &Target<'_>,
        sent: &Sent,
        value: &Value,
    ) -> Result<Attempt<Option<Key>>> {
        let read = [target.main.clone(), sent.shard.clone()];
        let [main_doc, shard] =
            <[_; 2]>::try_from(self.get_exactly(&read).await?).unwrap_or_default();
        let main_version = check_incarnation(
            target.incarnation.as_deref(),
            target.main,
            main_doc.as_ref(),
        )?;
        if write_ids::applied(shard.as_ref().map(|s| &s.doc), &sent.writer, sent.seq) {
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
        let (mut doc, version) = match shard {
            Some(shard) => (shard.doc, Some(shard.version)),
            None => (Document::new(), None),
        };
        let stored_as = p.property.stored_as;
        let malformed =
            |e: FieldError| Error::malformed(&sent.shard, with_property(e, p.property.name));
        let folded = match doc.get(stored_as) {
            Some(stored) => (target.fold_values)(p.index, stored, value),
            None => {
                (target.neutral)(p.index).and_then(|n| (target.fold_values)(p.index, &n, value))
            }
        }
        .map_err(malformed)?;
        doc.insert(stored_as.to_owned(), folded);
        if let Some(incarnation) = target.incarnation.as_deref().filter(|i| !i.is_empty()) {
            doc.entry(layout::INCARNATION.to_owned())
                .or_insert_with(|| incarnation.into());
        }
        write_ids::record(
            &mut doc,
            &sent.writer,
            sent.seq,
            sent.at_ms,
            self.write_window,
        );
        let mut txn = Transaction::new();
        if self.store.cross_group_transactions() {
            txn = txn.expect(target.main.clone(), Some(main_version));
        }
        txn = txn
            .expect(sent.shard.clone(), version)
            .put(sent.shard.clone(), doc);
        let answer: Commit = self.store.commit(&txn).await?;
        let conflicted = matches!(answer, Commit::Conflict { .. });
        self.metrics.entity_attempt(target.main, conflicted);
        Ok(Attempt::from(answer).map(|()| None))
    }
}

/// Takes the claims of `members` that are still queued, folds their values, and marks
/// them taken with the write `sent(fold)` builds, all under the claims' locks: a save
/// dropped meanwhile either withdrew first (left out) or finds its claim taken. `None`
/// when no member is left.
fn take_claims(
    target: &Target<'_>,
    members: &[Member],
    sent: impl FnOnce(Value) -> Sent,
) -> Result<Option<Sent>> {
    let mut claims: Vec<_> = members.iter().map(|m| coalesce::lock(&m.claim)).collect();
    let mut folded: Option<Value> = None;
    for (member, claim) in members.iter().zip(&claims) {
        if !matches!(**claim, Claim::Queued) {
            continue;
        }
        folded = Some(match folded {
            None => member.value.clone(),
            Some(acc) => {
                (target.fold_values)(target.p.index, &acc, &member.value).map_err(|e| {
                    Error::malformed(target.main, with_property(e, target.p.property.name))
                })?
            }
        });
    }
    let Some(folded) = folded else {
        return Ok(None);
    };
    let sent = sent(folded);
    for claim in &mut claims {
        if matches!(**claim, Claim::Queued) {
            **claim = Claim::Taken(sent.clone());
        }
    }
    Ok(Some(sent))
}

/// Resolves a save's pending change from its claim when the save returns or its future
/// is dropped (see `coalesce`).
struct Resolve<'e> {
    pending: &'e mut Pending,
    claim: ClaimRef,
}

impl Drop for Resolve<'_> {
    fn drop(&mut self) {
        let mut claim = coalesce::lock(&self.claim);
        match &*claim {
            Claim::Done(true) => *self.pending = Pending::default(),
            Claim::Done(false) | Claim::Queued | Claim::Withdrawn => self.pending.sent = None,
            Claim::Taken(sent) => self.pending.sent = Some(sent.clone()),
        }
        if matches!(*claim, Claim::Queued) {
            *claim = Claim::Withdrawn;
        }
    }
}
