//! Shared reads: concurrent calls for one slot share one read, and every call is answered
//! by a read that *started after the call was made*, so a caller always sees its own
//! completed writes (and everything else completed before its call). The mapper's loads
//! share their reads of an entity's documents this way (`Mapper::with_shared_reads`).
//!
//! Per slot, at most one read runs. A call that finds none running starts one and leads
//! it. Calls that arrive while a read runs cannot use it (it started before them): they
//! wait, and when the read ends its leader hands the lead to the first of them, whose read
//! starts then, after all of their calls, and answers all of them. A leader whose future
//! is dropped hands the lead on the same way ([`Relay`]); a waiting call whose leader
//! vanished starts over.

use crate::sync::relay::{Joined, Relay};
use std::fmt;
use std::future::Future;
use std::hash::Hash;

/// The slots with a read running, and the calls waiting for the next one.
pub(crate) struct SharedReads<K, R> {
    running: Relay<K, (), R>,
}

impl<K, R> Default for SharedReads<K, R> {
    fn default() -> Self {
        SharedReads {
            running: Relay::default(),
        }
    }
}

impl<K, R> fmt::Debug for SharedReads<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedReads").finish_non_exhaustive()
    }
}

impl<K: Eq + Hash + Clone, R: Clone> SharedReads<K, R> {
    /// The outcome of a read of `slot` (`read()`) that started after this call, shared
    /// with the calls it answers (an error too: every call that shared the read gets it
    /// as the leader did).
    pub(crate) async fn read<F, Fut>(&self, slot: &K, read: F) -> R
    where
        F: Fn() -> Fut,
        Fut: Future<Output = R>,
    {
        loop {
            let lead = match self.running.join(slot.clone(), || ()).await {
                Joined::Lead(lead) => lead,
                Joined::Done(outcome) => return outcome,
                // The read this call waited for was dropped: start over.
                Joined::Abandoned => continue,
            };
            // The calls queued now were made before this read starts: it answers them all.
            let followers = lead.take(usize::MAX);
            let outcome = read().await;
            for follower in followers {
                follower.caller.tell(outcome.clone());
            }
            return outcome;
        }
    }
}
