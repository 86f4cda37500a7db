//! The static-shard writer: the one change a save makes to one statically sharded
//! property, coalesced with concurrent saves of it (below), sent as one write with a
//! write id, shard and value fixed before the first send: a guarded [`Merge`] where the
//! property's fold is built in (one round trip, no read, no conflict), else read, fold and
//! compare-and-set on that shard. [`fold_into_shard`] is the one fold of a change into a
//! static shard, for every save.
//!
//! Invariant: however many times a fixed write is sent (the leader's attempts, a later save
//! of the batch after an unknown outcome), its shard applies it at most once; a shard a
//! shrink sealed sends it, under the same id, to the base shard every sender picks alike.
//! The argument: `docs/design/exactly-once.md`, "The static-shard writer".
//!
//! Across a failover: a send that finds its write id recorded answers only after
//! [`DocumentStore::make_durable`] of the shard, since the send that stored it may have
//! failed its wait for replicas (the same note, "Acknowledgements across a failover").
//!
//! Write coalescing (group commit): concurrent saves of one sharded property of one entity,
//! in one mapper and its clones, fold their changes into one commit while a commit for that
//! property is in flight. The first save leads and sends at once; saves that arrive
//! meanwhile queue, and the next leader sends up to [`MAX_BATCH`] of them as one fold. A
//! save that finds no save of the mapper under way sends alone, outside the relay
//! ([`Coalescer::submit`]).
//! The [`Claim`] of each save's change is handled here alone: a leader takes queued claims
//! ([`take_claims`]), redirects them ([`moved`]) and settles them ([`settle`]); a save
//! resolves its own when it returns or is dropped ([`Resolve`]). The lead passes on through
//! a [`Relay`]. Invariant: a change is sent only while its claim is taken, so never without
//! its save (or its entity) knowing it, and a claim in doubt keeps the batch's write id for
//! the next save. The argument: `docs/design/exactly-once.md`, "Coalescing".

use crate::Version;
use crate::document::{Document, Value, Versioned};
use crate::entity::{Entity, EntityState, Pending, Sent};
use crate::error::{Error, FieldError, Result};
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::attempt::Attempt;
use crate::mapper::codec::Folds;
use crate::mapper::layout::{self, StaticProperty};
use crate::mapper::write::write_ids::{self, check_incarnation, hold, state_of};
use crate::store::{Commit, DocumentStore, Merge, Merged, Transaction};
use crate::sync::lock;
use crate::sync::relay::{Caller, Joined, Relay};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering};
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
        txn = txn
            .expect(sent.shard.clone(), version)
            .put(sent.shard.clone(), doc);
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

/// The most changes one commit carries.
pub(in crate::mapper) const MAX_BATCH: usize = 256;

/// The state of one save's change, shared between the save and the leader sending it.
#[derive(Debug, Default)]
pub(in crate::mapper) enum Claim {
    /// Waiting; nobody sent it.
    #[default]
    Queued,
    /// In a batch sent (or about to be) as this write.
    Taken(Sent),
    /// The batch was answered: applied or not.
    Done(bool),
    /// Its save is gone; it must not be sent.
    Withdrawn,
}

pub(in crate::mapper) type ClaimRef = Arc<Mutex<Claim>>;

/// A queued save's change, as the relay carries it to the leader.
type Queued = (Value, ClaimRef);

/// One change in a batch: its value and claim, and how to tell its save (`None`: the
/// leader's own).
pub(in crate::mapper) struct Member {
    value: Value,
    claim: ClaimRef,
    save: Option<Caller<Result<()>>>,
}

impl Member {
    /// The change of the save that sends the batch itself.
    pub(in crate::mapper) fn own(value: Value, claim: ClaimRef) -> Self {
        Member {
            value,
            claim,
            save: None,
        }
    }
}

/// The in-flight properties of one mapper: a property (main key, property index) is in
/// flight while the relay leads it, with the saves queued behind its commit.
#[derive(Debug, Default)]
pub(in crate::mapper) struct Coalescer {
    slots: Relay<(Key, usize), Queued, Result<()>>,
    /// How many saves are in [`Coalescer::submit`] now, of any property.
    submitting: AtomicUsize,
}

/// One save counted in [`Coalescer::submitting`] until it is dropped (with its future
/// too).
struct Submitting<'c>(&'c AtomicUsize);

impl Drop for Submitting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Coalescer {
    /// Sends `value` (with `claim`) for property `slot`, alone or in a batch: `send` is
    /// called by whichever save leads, with the members of its batch, and sends their
    /// fold as one change.
    ///
    /// A save that finds no other save of the mapper under way sends its change alone
    /// without entering the relay, as with coalescing off: nothing could queue behind it
    /// yet, and the saves that arrive while it is in flight lead and queue in the relay
    /// as usual (they then do not join its commit, only each other's). That spares the
    /// relay's bookkeeping on every save of a mapper that saves one thing at a time (a
    /// process with one client, a mapper per request).
    pub(in crate::mapper) async fn submit<F, Fut>(
        &self,
        slot: (Key, usize),
        value: Value,
        claim: ClaimRef,
        send: F,
    ) -> Result<()>
    where
        F: FnOnce(Vec<Member>) -> Fut,
        Fut: std::future::Future<Output = (Result<()>, Vec<Member>)>,
    {
        let others = self.submitting.fetch_add(1, Ordering::Relaxed);
        let _submitting = Submitting(&self.submitting);
        if others == 0 {
            return send(vec![Member::own(value, claim)]).await.0;
        }
        let lead = match self
            .slots
            .join(slot, || (value.clone(), claim.clone()))
            .await
        {
            Joined::Lead(lead) => lead,
            Joined::Done(result) => return result,
            Joined::Abandoned => {
                return Err(Error::backend(
                    "coalesced save",
                    "the save sending this change's batch was dropped; its outcome is unknown",
                ));
            }
        };
        // Leading: this save's change and what is queued now. If this future is dropped
        // while sending, the batch's queued saves learn it (their claims say whether the
        // batch was sent), and the lead passes on.
        let mut members = vec![Member::own(value, claim)];
        for save in lead.take(MAX_BATCH - 1) {
            let (value, claim) = save.payload;
            members.push(Member {
                value,
                claim,
                save: Some(save.caller),
            });
        }
        let (result, members) = send(members).await;
        for member in members {
            if let Some(save) = member.save {
                // A save that is gone resolves its claim from the claim alone; the others
                // get the same error as the leader (errors share the backend's error).
                save.tell(result.clone());
            }
        }
        result
    }
}

/// Takes the claims of `members` that are still queued, folds their values with `fold`,
/// and marks them taken with the write `sent(fold)` builds, all under the claims' locks:
/// a save dropped meanwhile either withdrew first (left out) or finds its claim taken.
/// `None` when no member is left.
pub(in crate::mapper) fn take_claims(
    members: &[Member],
    fold: impl Fn(&Value, &Value) -> Result<Value>,
    sent: impl FnOnce(Value) -> Sent,
) -> Result<Option<Sent>> {
    let mut claims: Vec<_> = members.iter().map(|m| lock(&m.claim)).collect();
    let mut folded: Option<Value> = None;
    for (member, claim) in members.iter().zip(&claims) {
        if !matches!(**claim, Claim::Queued) {
            continue;
        }
        folded = Some(match folded {
            None => member.value.clone(),
            Some(acc) => fold(&acc, &member.value)?,
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

/// Tells the claims the batch took that its write went elsewhere: `to` names the shard
/// now (before anything is sent there).
pub(in crate::mapper) fn moved(members: &[Member], to: &Sent) {
    for member in members {
        if let Claim::Taken(taken) = &mut *lock(&member.claim)
            && taken.write == to.write
        {
            taken.shard = to.shard.clone();
        }
    }
}

/// Marks the claims the batch took done after a definite answer (`applied` or not); an
/// answer in doubt leaves them taken.
pub(in crate::mapper) fn settle(members: &[Member], applied: bool) {
    for member in members {
        let mut claim = lock(&member.claim);
        if matches!(*claim, Claim::Taken(_)) {
            *claim = Claim::Done(applied);
        }
    }
}

/// Whether an error from a write leaves its outcome unknown.
pub(in crate::mapper) fn in_doubt(error: &Error) -> bool {
    matches!(error, Error::Backend { .. })
}

/// Resolves a save's pending change from its claim when the save returns or its future
/// is dropped.
pub(in crate::mapper) struct Resolve<'e> {
    pub(in crate::mapper) pending: &'e mut Pending,
    pub(in crate::mapper) claim: ClaimRef,
}

impl Drop for Resolve<'_> {
    fn drop(&mut self) {
        let mut claim = lock(&self.claim);
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures::poll;
    use std::pin::pin;

    fn queued() -> ClaimRef {
        Arc::new(Mutex::new(Claim::Queued))
    }

    /// A save whose `send` stays under way until `release` answers, counting in `sends`.
    async fn held_send(
        members: Vec<Member>,
        sends: &AtomicUsize,
        release: tokio::sync::oneshot::Receiver<()>,
    ) -> (Result<()>, Vec<Member>) {
        sends.fetch_add(1, Ordering::Relaxed);
        let _ = release.await;
        (Ok(()), members)
    }

    /// A save that sends at once.
    fn quick_send(
        members: Vec<Member>,
        sends: &AtomicUsize,
    ) -> std::future::Ready<(Result<()>, Vec<Member>)> {
        sends.fetch_add(1, Ordering::Relaxed);
        std::future::ready((Ok(()), members))
    }

    /// A save that finds no other save under way sends outside the relay, so a second
    /// save of the same property that comes while it is still sending leads the relay
    /// and sends at once instead of queueing behind it; and a save whose future is
    /// dropped counts as under way no more (the next lone save sends outside the relay
    /// again).
    #[tokio::test]
    async fn a_save_with_none_under_way_sends_outside_the_relay() {
        let coalescer = Coalescer::default();
        let slot = (Key::new("Post", "1"), 0);
        let sends = AtomicUsize::new(0);

        let (release, released) = tokio::sync::oneshot::channel();
        let mut first = pin!(
            coalescer.submit(slot.clone(), Value::from(1), queued(), |m| {
                held_send(m, &sends, released)
            })
        );
        assert!(poll!(first.as_mut()).is_pending());
        let second = coalescer.submit(slot.clone(), Value::from(2), queued(), |m| {
            quick_send(m, &sends)
        });
        assert!(
            poll!(pin!(second)).is_ready(),
            "the second save queued behind the first"
        );
        assert_eq!(sends.load(Ordering::Relaxed), 2);
        release.send(()).unwrap();
        assert!(matches!(first.await, Ok(())));

        let (_release, released) = tokio::sync::oneshot::channel();
        let dropped = coalescer.submit(slot.clone(), Value::from(3), queued(), |m| {
            held_send(m, &sends, released)
        });
        assert!(poll!(pin!(dropped)).is_pending());
        let (release, released) = tokio::sync::oneshot::channel();
        let mut alone = pin!(
            coalescer.submit(slot.clone(), Value::from(4), queued(), |m| {
                held_send(m, &sends, released)
            })
        );
        assert!(poll!(alone.as_mut()).is_pending());
        let after = coalescer.submit(slot, Value::from(5), queued(), |m| quick_send(m, &sends));
        assert!(
            poll!(pin!(after)).is_ready(),
            "a dropped save still counted as under way"
        );
        release.send(()).unwrap();
        assert!(matches!(alone.await, Ok(())));
        assert_eq!(sends.load(Ordering::Relaxed), 5);
    }
}
