//! Write coalescing (group commit): concurrent saves of one sharded property of one entity,
//! in one mapper and its clones, fold their changes into one commit while a commit for that
//! property is in flight. The first save leads and sends at once; saves that arrive
//! meanwhile queue, and the next leader sends up to [`MAX_BATCH`] of them as one fold
//! (`static_shard`'s `send_batch` sends it).
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
/// flight while the relay leads it, with the saves queued behind its commit.
#[derive(Debug, Default)]
pub(in crate::mapper) struct Coalescer {
    slots: Relay<(Key, usize), Queued, Result<()>>,
}

impl Coalescer {
    /// Sends `value` (with `claim`) for property `slot`, alone or in a batch: `send` is
    /// called by whichever save leads, with the members of its batch, and sends their
    /// fold as one change.
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
        assert!(matches!(second.await, Ok(())));
        assert!(matches!(third.await, Ok(())));
        assert_eq!(first_sends.load(Ordering::Relaxed), 1);
        assert_eq!(
            *lock(&batches),
            [2],
            "the queued saves were not sent as one batch"
        );
    }
}
