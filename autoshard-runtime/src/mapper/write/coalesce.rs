//! Write coalescing (group commit): concurrent saves of one sharded property of one entity,
//! in one mapper and its clones, fold their changes into one commit while a commit for that
//! property is in flight. The first save leads and sends at once; saves that arrive
//! meanwhile queue, and the next leader sends up to [`MAX_BATCH`] of them as one fold
//! (`static_shard`'s `send_batch` sends it). A save that finds no save of the mapper under
//! way leads without entering the relay; a save of its property that comes meanwhile marks
//! the property led there for it and queues, so the batches are the same
//! ([`Coalescer::submit`]).
//!
//! The [`Claim`] of each save's change is handled here alone: a leader takes queued claims
//! ([`take_claims`]), redirects them ([`moved`]) and settles them ([`settle`]); a save
//! resolves its own when it returns or is dropped ([`Resolve`]). The lead passes on through
//! a [`Relay`]. Invariant: a change is sent only while its claim is taken, so never without
//! its save (or its entity) knowing it, and a claim in doubt keeps the batch's write id for
//! the next save. The argument: `docs/design/exactly-once.md`, "Coalescing".

use crate::document::Value;
use crate::entity::{Pending, Sent};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::sync::lock;
use crate::sync::relay::{Caller, Joined, Relay};
use std::sync::{Arc, Mutex};

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
/// flight while the relay leads it, with the saves queued behind its commit, or while
/// the lone save sends it.
#[derive(Debug, Default)]
pub(in crate::mapper) struct Coalescer {
    slots: Relay<(Key, usize), Queued, Result<()>>,
    /// The saves in [`Coalescer::submit`], and the lone one among them: one lock, so that
    /// a save becomes the lone one only when no other is under way, and a save of the
    /// lone one's property always sees it.
    saves: Mutex<Saves>,
}

/// The saves under way in a [`Coalescer`].
#[derive(Debug, Default)]
struct Saves {
    /// How many are in [`Coalescer::submit`].
    under_way: usize,
    /// The property the lone save sends, and whether the relay marks it led for it.
    lone: Option<((Key, usize), bool)>,
}

/// One save counted in [`Saves::under_way`] until it is dropped (also with its future);
/// for the lone save, dropping it also ends its lead.
struct UnderWay<'c> {
    coalescer: &'c Coalescer,
    lone: bool,
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        let mut saves = lock(&self.coalescer.saves);
        saves.under_way -= 1;
        if self.lone
            && let Some((slot, led)) = saves.lone.take()
            && led
        {
            // Saves of the property queued while it sent: the first still waiting leads.
            self.coalescer.slots.hand_over(&slot);
        }
    }
}

impl Coalescer {
    /// Sends `value` (with `claim`) for property `slot`, alone or in a batch: `send` is
    /// called by whichever save leads, with the members of its batch, and sends their
    /// fold as one change.
    ///
    /// A save that finds no other save of the mapper under way is the *lone* save: it
    /// sends at once without entering the relay, where a save would hash its property's
    /// key four times. A save of the same property that comes while the lone save sends
    /// marks the property led in the relay on its behalf and queues, so group commit is
    /// as before: the saves that come during a commit go out together after it (the lone
    /// save hands the lead over when it is done or dropped).
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
        let lone = {
            let mut saves = lock(&self.saves);
            let lone = saves.under_way == 0;
            saves.under_way += 1;
            if lone {
                saves.lone = Some((slot.clone(), false));
            } else if let Some((sending, led)) = &mut saves.lone
                && *sending == slot
                && !*led
            {
                // The relay marks it led until the lone save hands over (`UnderWay`).
                *led = self.slots.lead_idle(&slot);
            }
            lone
        };
        let _under_way = UnderWay {
            coalescer: self,
            lone,
        };
        if lone {
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
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn queued() -> ClaimRef {
        Arc::new(Mutex::new(Claim::Queued))
    }

    /// A leader's send that stays under way until `release` answers.
    async fn held_send(
        members: Vec<Member>,
        release: tokio::sync::oneshot::Receiver<()>,
    ) -> (Result<()>, Vec<Member>) {
        let _ = release.await;
        (Ok(()), members)
    }

    /// A leader's send that answers at once, recording how many changes it carried.
    fn counted_send(
        members: Vec<Member>,
        batches: &Mutex<Vec<usize>>,
    ) -> std::future::Ready<(Result<()>, Vec<Member>)> {
        lock(batches).push(members.len());
        std::future::ready((Ok(()), members))
    }

    /// Group commit: saves of a property that come while a save of it is sending queue
    /// behind it, and once it is answered they go out together, as one batch (the first
    /// of them leads it); each save is told the outcome of the commit that holds its
    /// change. Polled by hand, so the order is made, not timed.
    #[tokio::test]
    async fn saves_that_come_while_one_sends_go_out_as_one_batch() {
        let coalescer = Coalescer::default();
        let slot = (Key::new("Post", "1"), 0);
        let batches = Mutex::new(Vec::new());
        let first_sends = AtomicUsize::new(0);

        let (release, released) = tokio::sync::oneshot::channel();
        let mut first = pin!(
            coalescer.submit(slot.clone(), Value::from(1), queued(), |m| {
                first_sends.fetch_add(1, Ordering::Relaxed);
                held_send(m, released)
            })
        );
        assert!(poll!(first.as_mut()).is_pending());
        let mut second = pin!(
            coalescer.submit(slot.clone(), Value::from(2), queued(), |m| {
                counted_send(m, &batches)
            })
        );
        let mut third = pin!(coalescer.submit(slot, Value::from(3), queued(), |m| {
            counted_send(m, &batches)
        }));
        assert!(
            poll!(second.as_mut()).is_pending(),
            "the second save did not wait for the first's commit"
        );
        assert!(poll!(third.as_mut()).is_pending());
        assert!(lock(&batches).is_empty());

        release.send(()).unwrap();
        assert!(matches!(first.await, Ok(())));
        let told = |answer| matches!(answer, std::task::Poll::Ready(Ok(())));
        assert!(
            told(poll!(second.as_mut())),
            "the second save was not handed the lead"
        );
        assert!(told(poll!(third.as_mut())));
        assert_eq!(first_sends.load(Ordering::Relaxed), 1);
        assert_eq!(
            *lock(&batches),
            [2],
            "the queued saves were not sent as one batch"
        );
    }

    /// A save that finds none under way sends outside the relay (its property is not
    /// led there); a save of the same property that comes meanwhile marks it led and
    /// queues; and when the lone save's future is dropped while it sends, the queued save
    /// leads and sends. The property is idle after, and the next save is lone again.
    #[tokio::test]
    async fn a_lone_save_sends_outside_the_relay_and_hands_over_when_dropped() {
        let coalescer = Coalescer::default();
        let slot = (Key::new("Post", "1"), 0);
        let batches = Mutex::new(Vec::new());

        let (_release, released) = tokio::sync::oneshot::channel();
        let mut lone = Box::pin(
            coalescer.submit(slot.clone(), Value::from(1), queued(), |m| {
                held_send(m, released)
            }),
        );
        assert!(poll!(lone.as_mut()).is_pending());
        assert!(
            !coalescer.slots.is_led(&slot),
            "the lone save entered the relay"
        );
        let mut waiting = pin!(
            coalescer.submit(slot.clone(), Value::from(2), queued(), |m| {
                counted_send(m, &batches)
            })
        );
        assert!(poll!(waiting.as_mut()).is_pending());
        assert!(coalescer.slots.is_led(&slot));

        drop(lone);
        assert!(
            poll!(waiting.as_mut()).is_ready(),
            "the dropped lone save left the queued save waiting"
        );
        assert_eq!(*lock(&batches), [1]);
        assert!(!coalescer.slots.is_led(&slot));

        let (release, released) = tokio::sync::oneshot::channel();
        let mut again = pin!(
            coalescer.submit(slot.clone(), Value::from(3), queued(), |m| {
                held_send(m, released)
            })
        );
        assert!(poll!(again.as_mut()).is_pending());
        assert!(!coalescer.slots.is_led(&slot), "the next save was not lone");
        release.send(()).unwrap();
        assert!(matches!(again.await, Ok(())));
    }
}
