//! Shared reads: concurrent loads of one entity through one [`Mapper`](crate::mapper::Mapper)
//! (and its clones) share one read of its documents, and every load is answered by a
//! read that *started after the load was called*, so a caller always sees its own
//! completed writes (and everything else completed before its call).
//!
//! Per entity, at most one read runs. A load that finds none running starts one and
//! leads it. Loads that arrive while a read runs cannot use it (it started before them):
//! they wait, and when the read ends its leader hands the lead to the first of them,
//! whose read starts then, after all of their calls, and answers all of them. A leader
//! whose future is dropped hands the lead on the same way; a waiting load whose leader
//! vanished starts over.

use crate::error::Result;
use crate::key::Key;
use crate::mapper::read::snapshot::Snapshot;
use crate::mapper::relay::{Joined, Relay};
use std::future::Future;
use std::sync::Arc;

/// The entities with a read running, and the loads waiting for the next one.
#[derive(Debug, Default)]
pub(in crate::mapper) struct SharedReads {
    running: Relay<Slot, (), Result<Arc<Snapshot>>>,
}

/// What loads share a read of: an entity, read as one entity type (two types declared
/// for one kind may read different documents), with or without the shards' write records
/// (a cached load needs them to tell which confirmed writes its snapshot holds, so it
/// never shares a read made without them).
pub(in crate::mapper) type Slot = (Key, &'static str, bool);

impl SharedReads {
    /// The documents of the entity at `main`, from a read (`read()`) that started after
    /// this call, shared with the loads it answers.
    pub(in crate::mapper) async fn read<F, Fut>(
        &self,
        main: &Slot,
        read: F,
    ) -> Result<Arc<Snapshot>>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Arc<Snapshot>>>,
    {
        loop {
            let lead = match self.running.join(main.clone(), || ()).await {
                Joined::Lead(lead) => lead,
                Joined::Done(found) => return found,
                // The read this load waited for was dropped: start over.
                Joined::Abandoned => continue,
            };
            // The loads queued now called before this read starts: it answers them all.
            let followers = lead.take(usize::MAX);
            let found = read().await;
            for follower in followers {
                // The same error for every load that shared the read, as the leader got it.
                follower.caller.tell(found.clone());
            }
            return found;
        }
    }
}
