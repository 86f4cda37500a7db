//! One leader per slot, the lead relayed from one call to the next: the hand-over that
//! the mapper's write coalescing (`mapper/write/coalesce.rs`) and shared reads
//! (`shared`) both stand on.
//!
//! A call on a slot that nobody leads leads it at once. Calls that arrive while it leads
//! queue with a payload. The leader takes queued calls ([`Lead::take`]), does the work
//! for them and tells each its outcome ([`Caller::tell`]). When its [`Lead`] is dropped,
//! after the work or with the leader's future, the lead passes to the first queued call
//! still waiting, or the slot goes idle. A queued call whose future is dropped just as it
//! is handed the lead passes it on in turn. So a slot never stays led by nobody while
//! calls wait, and a call a leader took and then dropped learns it
//! ([`Joined::Abandoned`]) instead of waiting for ever.

use crate::key::FastMap;
use crate::sync::lock;
use std::collections::VecDeque;
use std::collections::hash_map::Entry;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use tokio::sync::oneshot;

/// The slots being led, each with the calls queued behind its leader.
pub(crate) struct Relay<K, W, R> {
    slots: Mutex<FastMap<K, VecDeque<Follower<W, R>>>>,
}

impl<K, W, R> Default for Relay<K, W, R> {
    fn default() -> Self {
        Relay {
            slots: Mutex::new(FastMap::default()),
        }
    }
}

impl<K, W, R> std::fmt::Debug for Relay<K, W, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").finish_non_exhaustive()
    }
}

/// What a queued call is told.
enum Turn<R> {
    /// The leader that took it did its work: this is the outcome.
    Done(R),
    /// It leads now.
    Lead,
}

/// A queued call, as its leader takes it: its payload, and how to tell it the outcome.
pub(crate) struct Follower<W, R> {
    pub(crate) payload: W,
    pub(crate) caller: Caller<R>,
}

/// How to tell a queued call its outcome.
pub(crate) struct Caller<R> {
    turn: oneshot::Sender<Turn<R>>,
}

impl<R> Caller<R> {
    /// Tells the call its outcome (nothing happens when its future is gone).
    pub(crate) fn tell(self, outcome: R) {
        let _ = self.turn.send(Turn::Done(outcome));
    }
}

/// How a call joined its slot.
pub(crate) enum Joined<'r, K: Eq + Hash, W, R> {
    /// It leads the slot until the [`Lead`] is dropped.
    Lead(Lead<'r, K, W, R>),
    /// A leader took it and did the work: the outcome.
    Done(R),
    /// A leader took it and was dropped before telling it the outcome.
    Abandoned,
}

impl<K: Eq + Hash, W, R> Relay<K, W, R> {
    fn slots(&self) -> MutexGuard<'_, FastMap<K, VecDeque<Follower<W, R>>>> {
        lock(&self.slots)
    }

    /// Passes the lead of `slot` to the first queued call still waiting, or marks the
    /// slot idle when none is: what dropping a [`Lead`] does, and what the holder of a
    /// lead taken with [`Relay::lead_idle`] calls when it is done.
    pub(crate) fn hand_over(&self, slot: &K) {
        let mut slots = self.slots();
        let Some(queue) = slots.get_mut(slot) else {
            return;
        };
        while let Some(next) = queue.pop_front() {
            if next.caller.turn.send(Turn::Lead).is_ok() {
                return;
            }
        }
        slots.remove(slot);
    }
}

impl<K: Eq + Hash + Clone, W, R> Relay<K, W, R> {
    /// Whether a call leads `slot` now.
    #[cfg(test)]
    pub(crate) fn is_led(&self, slot: &K) -> bool {
        self.slots().contains_key(slot)
    }

    /// Marks `slot` led when nobody leads it, for a caller that is already doing its work
    /// outside the relay, so that calls joining it from now on queue. That caller must
    /// call [`Relay::hand_over`] when it is done (also when its future is dropped), as a
    /// dropped [`Lead`] does. Answers whether the slot was idle.
    pub(crate) fn lead_idle(&self, slot: &K) -> bool {
        match self.slots().entry(slot.clone()) {
            Entry::Vacant(idle) => {
                idle.insert(VecDeque::new());
                true
            }
            Entry::Occupied(_) => false,
        }
    }

    /// Leads `slot` at once when nobody does; otherwise queues with `payload()` and waits
    /// until a leader tells the outcome or hands over the lead.
    pub(crate) async fn join(&self, slot: K, payload: impl FnOnce() -> W) -> Joined<'_, K, W, R> {
        let told = match self.slots().entry(slot.clone()) {
            Entry::Vacant(idle) => {
                idle.insert(VecDeque::new());
                None
            }
            Entry::Occupied(mut led) => {
                let (turn, told) = oneshot::channel();
                led.get_mut().push_back(Follower {
                    payload: payload(),
                    caller: Caller { turn },
                });
                Some(told)
            }
        };
        if let Some(told) = told {
            let mut waiting = Waiting {
                relay: self,
                slot: &slot,
                told: Some(told),
            };
            match waiting.turn().await {
                Some(Turn::Done(outcome)) => return Joined::Done(outcome),
                Some(Turn::Lead) => {}
                None => return Joined::Abandoned,
            }
        }
        Joined::Lead(Lead { relay: self, slot })
    }
}

/// The lead of a slot; dropped, also with the leader's future, it hands the lead on.
pub(crate) struct Lead<'r, K: Eq + Hash, W, R> {
    relay: &'r Relay<K, W, R>,
    slot: K,
}

impl<K: Eq + Hash, W, R> Lead<'_, K, W, R> {
    /// Takes up to `max` of the calls queued now whose futures are still waiting.
    pub(crate) fn take(&self, max: usize) -> Vec<Follower<W, R>> {
        let mut slots = self.relay.slots();
        let Some(queue) = slots.get_mut(&self.slot) else {
            return Vec::new();
        };
        let mut taken = Vec::new();
        while taken.len() < max {
            let Some(next) = queue.pop_front() else {
                break;
            };
            if !next.caller.turn.is_closed() {
                taken.push(next);
            }
        }
        taken
    }
}

impl<K: Eq + Hash, W, R> Drop for Lead<'_, K, W, R> {
    fn drop(&mut self) {
        self.relay.hand_over(&self.slot);
    }
}

/// A queued call's wait; dropped early, it makes sure a lead handed to it moves on.
struct Waiting<'r, K: Eq + Hash, W, R> {
    relay: &'r Relay<K, W, R>,
    slot: &'r K,
    told: Option<oneshot::Receiver<Turn<R>>>,
}

impl<K: Eq + Hash, W, R> Waiting<'_, K, W, R> {
    async fn turn(&mut self) -> Option<Turn<R>> {
        let told = self.told.as_mut()?;
        let turn = told.await.ok();
        self.told = None;
        turn
    }
}

impl<K: Eq + Hash, W, R> Drop for Waiting<'_, K, W, R> {
    fn drop(&mut self) {
        if let Some(mut told) = self.told.take() {
            told.close();
            if let Ok(Turn::Lead) = told.try_recv() {
                self.relay.hand_over(self.slot);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Poll;

    type TestRelay = Relay<u32, u32, u32>;

    #[tokio::test]
    async fn a_call_on_an_idle_slot_leads_and_queued_calls_get_its_outcome() {
        let relay = TestRelay::default();
        let Joined::Lead(lead) = relay.join(1, || 0).await else {
            panic!("an idle slot is led by its first call");
        };
        let follower = relay.join(1, || 7);
        tokio::pin!(follower);
        assert!(futures::poll!(follower.as_mut()).is_pending());
        let taken = lead.take(usize::MAX);
        assert_eq!(taken.iter().map(|f| f.payload).collect::<Vec<_>>(), [7]);
        for f in taken {
            f.caller.tell(42);
        }
        assert!(matches!(
            futures::poll!(follower.as_mut()),
            Poll::Ready(Joined::Done(42))
        ));
        drop(lead);
        assert!(relay.slots().is_empty(), "the slot goes idle");
    }

    #[tokio::test]
    async fn the_lead_passes_to_the_next_waiting_call_when_a_leader_is_dropped() {
        let relay = TestRelay::default();
        let Joined::Lead(lead) = relay.join(1, || 0).await else {
            panic!("an idle slot is led by its first call");
        };
        let mut gone = Box::pin(relay.join(1, || 1));
        let mut next = Box::pin(relay.join(1, || 2));
        assert!(futures::poll!(gone.as_mut()).is_pending());
        assert!(futures::poll!(next.as_mut()).is_pending());
        drop(gone);
        drop(lead);
        // Handed over at once, without waiting on anything.
        assert!(matches!(
            futures::poll!(next.as_mut()),
            Poll::Ready(Joined::Lead(_))
        ));
    }

    #[tokio::test]
    async fn a_call_taken_by_a_dropped_leader_is_told_so() {
        let relay = TestRelay::default();
        let Joined::Lead(lead) = relay.join(1, || 0).await else {
            panic!("an idle slot is led by its first call");
        };
        let follower = relay.join(1, || 1);
        tokio::pin!(follower);
        assert!(futures::poll!(follower.as_mut()).is_pending());
        let taken = lead.take(1);
        drop(taken);
        drop(lead);
        assert!(matches!(
            futures::poll!(follower.as_mut()),
            Poll::Ready(Joined::Abandoned)
        ));
    }

    #[tokio::test]
    async fn a_call_dropped_as_it_is_handed_the_lead_hands_it_on() {
        let relay = TestRelay::default();
        let Joined::Lead(lead) = relay.join(1, || 0).await else {
            panic!("an idle slot is led by its first call");
        };
        let mut handed = Box::pin(relay.join(1, || 1));
        let mut next = Box::pin(relay.join(1, || 2));
        assert!(futures::poll!(handed.as_mut()).is_pending());
        assert!(futures::poll!(next.as_mut()).is_pending());
        drop(lead); // the lead goes to `handed`, which is dropped before it runs
        drop(handed);
        // Handed over at once, without waiting on anything.
        assert!(matches!(
            futures::poll!(next.as_mut()),
            Poll::Ready(Joined::Lead(_))
        ));
    }
}
