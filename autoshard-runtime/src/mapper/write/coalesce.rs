//! Write coalescing (group commit): concurrent saves of one sharded property of one
//! entity, in one [`Mapper`](crate::mapper::Mapper) and its clones, fold their changes into one
//! commit while a commit for that property is in flight.
//!
//! The first save of a property finds nothing in flight and sends its change at once
//! (no added latency without contention); it is the *leader*. Saves that arrive while it
//! is in flight queue. When the leader's commit is answered, it tells its batch the
//! outcome and hands the lead to the first queued save, which takes every change queued
//! then (up to [`MAX_BATCH`]), folds them with the property's fold (built-in or
//! `#[shard_fold]`: folds are associative and commutative, so one commit of the fold
//! equals the commits of its parts), and sends that as one change.
//!
//! # Why nothing is lost or counted twice
//! Each save keeps its change pending in its own entity (see `write_ids`) and shares a
//! [`Claim`] with whoever sends it:
//! - a leader fixes its commit's write id, shard and value (the fold of its batch) and
//!   marks every claim of the batch *taken* with them, under the claims' locks, before
//!   it sends anything; every attempt of that commit (a merge, or compare-and-set
//!   attempts after conflicts) sends exactly that, so however many times it is sent, by
//!   the leader or later by a save of the batch, the shard applies it at most once;
//! - after a definite answer the leader marks the claims *done* (applied or not);
//! - a save resolves its claim when it returns or when its future is dropped: done and
//!   applied (the change leaves the entity), done and not applied (the change stays,
//!   unsent), or still taken: in doubt, the change stays and `Sent` records the batch's
//!   write id, shard and value, so the next save sends the batch again first;
//! - a save dropped while still queued withdraws its claim under the claim's lock, and
//!   a leader takes only queued claims, so a change is never sent without its save (or
//!   its entity, when the save is gone) knowing it.
//!
//! A leader whose future is dropped tells its batch the outcome is unknown and hands the
//! lead on; a queued save that is handed the lead as its future is dropped hands it on in
//! turn, so the property never stays "in flight" with nobody sending.

use crate::document::Value;
use crate::entity::Sent;
use crate::error::{Error, Result};
use crate::key::Key;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::oneshot;

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

pub(in crate::mapper) fn lock(claim: &ClaimRef) -> MutexGuard<'_, Claim> {
    claim.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a queued save is told.
enum Turn {
    /// The batch holding its change was answered.
    Done(Result<()>),
    /// It leads now: send the queue.
    Lead,
}

struct Waiter {
    value: Value,
    claim: ClaimRef,
    turn: oneshot::Sender<Turn>,
}

/// One change in a batch: its value and claim, and how to tell its save (`None`: the
/// leader's own).
pub(in crate::mapper) struct Member {
    pub(in crate::mapper) value: Value,
    pub(in crate::mapper) claim: ClaimRef,
    turn: Option<oneshot::Sender<Turn>>,
}

impl Member {
    /// The change of the save that sends the batch itself.
    pub(in crate::mapper) fn own(value: Value, claim: ClaimRef) -> Self {
        Member {
            value,
            claim,
            turn: None,
        }
    }
}

/// The in-flight properties of one mapper: a property (main key, property index) is in
/// flight while it has an entry, which holds the saves queued behind the commit.
#[derive(Debug, Default)]
pub(in crate::mapper) struct Coalescer {
    slots: Mutex<HashMap<(Key, usize), VecDeque<WaiterEntry>>>,
}

/// A queued save (a newtype so the map can derive `Debug`).
struct WaiterEntry(Waiter);

impl std::fmt::Debug for WaiterEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter").finish_non_exhaustive()
    }
}

impl Coalescer {
    fn slots(&self) -> MutexGuard<'_, HashMap<(Key, usize), VecDeque<WaiterEntry>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

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
        let queued = {
            let mut slots = self.slots();
            if let Some(queue) = slots.get_mut(&slot) {
                let (turn, told) = oneshot::channel();
                queue.push_back(WaiterEntry(Waiter {
                    value: value.clone(),
                    claim: claim.clone(),
                    turn,
                }));
                Some(told)
            } else {
                slots.insert(slot.clone(), VecDeque::new());
                None
            }
        };
        if let Some(told) = queued {
            let mut waiting = Waiting {
                coalescer: self,
                slot: &slot,
                told: Some(told),
            };
            match waiting.turn().await {
                Some(Turn::Done(result)) => return result,
                Some(Turn::Lead) => {}
                None => {
                    return Err(Error::backend(
                        "coalesced save",
                        "the save sending this change's batch was dropped; its outcome is unknown",
                    ))
                }
            }
        }
        // Leading: this save's change and what is queued now. If this future is dropped
        // while sending, the batch's queued saves see their channel close (their claims
        // say whether the batch was sent), and `lead` hands the lead on.
        let lead = Lead {
            coalescer: self,
            slot: &slot,
        };
        let mut members = vec![Member {
            value,
            claim,
            turn: None,
        }];
        self.take_queued(&slot, &mut members);
        let (result, members) = send(members).await;
        for member in members {
            if let Some(turn) = member.turn {
                // A save that is gone resolves its claim from the claim alone.
                let _ = turn.send(Turn::Done(duplicate(&result)));
            }
        }
        drop(lead);
        result
    }

    /// Moves up to a batch of queued changes of `slot` into `members`.
    fn take_queued(&self, slot: &(Key, usize), members: &mut Vec<Member>) {
        let mut slots = self.slots();
        let Some(queue) = slots.get_mut(slot) else {
            return;
        };
        while members.len() < MAX_BATCH {
            let Some(WaiterEntry(waiter)) = queue.pop_front() else {
                break;
            };
            members.push(Member {
                value: waiter.value,
                claim: waiter.claim,
                turn: Some(waiter.turn),
            });
        }
    }

    /// Passes the lead of `slot` to the first queued save still waiting (it leads with
    /// its own change, which it kept), or marks the property idle when none is.
    fn hand_over(&self, slot: &(Key, usize)) {
        let mut slots = self.slots();
        let Some(queue) = slots.get_mut(slot) else {
            return;
        };
        while let Some(WaiterEntry(waiter)) = queue.pop_front() {
            if waiter.turn.send(Turn::Lead).is_ok() {
                return;
            }
        }
        slots.remove(slot);
    }
}

/// A queued save's wait; dropped early, it makes sure a lead handed to it moves on.
struct Waiting<'c> {
    coalescer: &'c Coalescer,
    slot: &'c (Key, usize),
    told: Option<oneshot::Receiver<Turn>>,
}

impl Waiting<'_> {
    async fn turn(&mut self) -> Option<Turn> {
        let told = self.told.as_mut()?;
        let turn = told.await.ok();
        self.told = None;
        turn
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(mut told) = self.told.take() {
            told.close();
            if let Ok(Turn::Lead) = told.try_recv() {
                self.coalescer.hand_over(self.slot);
            }
        }
    }
}

/// The lead of a property; dropped (also with the leader's future), it hands the lead
/// to the next queued save.
struct Lead<'c> {
    coalescer: &'c Coalescer,
    slot: &'c (Key, usize),
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        self.coalescer.hand_over(self.slot);
    }
}

/// Whether an error from a write leaves its outcome unknown.
pub(in crate::mapper) fn in_doubt(error: &Error) -> bool {
    matches!(error, Error::Backend { .. })
}

/// The outcome of a batch for each of its saves: the same error, as informative as the
/// one the leader got (errors share the backend's error behind an `Arc`).
fn duplicate(result: &Result<()>) -> Result<()> {
    result.clone()
}
