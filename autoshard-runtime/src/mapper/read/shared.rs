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

use crate::document::Versioned;
use crate::error::Result;
use crate::key::Key;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::oneshot;

/// What one read of an entity found: the keys of its static documents, what was found
/// at each, and the shard documents found by scanning.
pub(in crate::mapper) type Found = Arc<(Vec<Key>, Vec<Option<Versioned>>, Vec<(Key, Versioned)>)>;

enum Turn {
    /// The read answering this load.
    Done(Result<Found>),
    /// This load reads now, for itself and these loads.
    Lead(Vec<oneshot::Sender<Turn>>),
}

/// The entities with a read running, and the loads waiting for the next one.
#[derive(Debug, Default)]
pub(in crate::mapper) struct SharedReads {
    running: Mutex<HashMap<Slot, Vec<WaitingLoad>>>,
}

/// What loads share a read of: an entity, read as one entity type (two types declared
/// for one kind may read different documents), with or without the shards' write records
/// (a cached load needs them to tell which confirmed writes its snapshot holds, so it
/// never shares a read made without them).
pub(in crate::mapper) type Slot = (Key, &'static str, bool);

struct WaitingLoad(oneshot::Sender<Turn>);

impl std::fmt::Debug for WaitingLoad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WaitingLoad")
    }
}

impl SharedReads {
    fn running(&self) -> MutexGuard<'_, HashMap<Slot, Vec<WaitingLoad>>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The documents of the entity at `main`, from a read (`read()`) that started after
    /// this call, shared with the loads it answers.
    pub(in crate::mapper) async fn read<F, Fut>(&self, main: &Slot, read: F) -> Result<Found>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Found>>,
    {
        loop {
            let waiting = {
                let mut running = self.running();
                if let Some(queue) = running.get_mut(main) {
                    let (tell, told) = oneshot::channel();
                    queue.push(WaitingLoad(tell));
                    Some(told)
                } else {
                    running.insert(main.clone(), Vec::new());
                    None
                }
            };
            let followers = match waiting {
                None => Vec::new(),
                Some(told) => {
                    let mut wait = Wait {
                        reads: self,
                        main,
                        told: Some(told),
                    };
                    match wait.turn().await {
                        Some(Turn::Done(found)) => return found,
                        Some(Turn::Lead(followers)) => followers,
                        // The read this load waited for was dropped: start over.
                        None => continue,
                    }
                }
            };
            let lead = Lead { reads: self, main };
            let found = read().await;
            for follower in followers {
                let _ = follower.send(Turn::Done(share(&found)));
            }
            drop(lead);
            return found;
        }
    }

    /// Hands the lead of `main` to the first load still waiting, with the others as its
    /// followers, or marks the entity as read by nobody.
    fn hand_over(&self, main: &Slot) {
        let mut running = self.running();
        let Some(queue) = running.get_mut(main) else {
            return;
        };
        let mut waiting: Vec<_> = std::mem::take(queue)
            .into_iter()
            .map(|WaitingLoad(tell)| tell)
            .filter(|tell| !tell.is_closed())
            .collect();
        while !waiting.is_empty() {
            let next = waiting.remove(0);
            match next.send(Turn::Lead(waiting)) {
                Err(Turn::Lead(rest)) => waiting = rest,
                Ok(()) | Err(Turn::Done(_)) => return,
            }
        }
        running.remove(main);
    }
}

fn share(found: &Result<Found>) -> Result<Found> {
    // The same error for every load that shared the read, as the leader got it.
    found.clone()
}

/// A waiting load; dropped early, it makes sure a lead handed to it moves on.
struct Wait<'r> {
    reads: &'r SharedReads,
    main: &'r Slot,
    told: Option<oneshot::Receiver<Turn>>,
}

impl Wait<'_> {
    async fn turn(&mut self) -> Option<Turn> {
        let told = self.told.as_mut()?;
        let turn = told.await.ok();
        self.told = None;
        turn
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if let Some(mut told) = self.told.take() {
            told.close();
            if let Ok(Turn::Lead(followers)) = told.try_recv() {
                // Give the followers back to the queue, then pass the lead on.
                let mut running = self.reads.running();
                if let Some(queue) = running.get_mut(self.main) {
                    queue.extend(followers.into_iter().map(WaitingLoad));
                }
                drop(running);
                self.reads.hand_over(self.main);
            }
        }
    }
}

/// The lead of a read of `main`; dropped, it hands the lead on.
struct Lead<'r> {
    reads: &'r SharedReads,
    main: &'r Slot,
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        self.reads.hand_over(self.main);
    }
}
