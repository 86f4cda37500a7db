//! Shard lanes: in one process, at most one read-fold-commit at a time per shard
//! document. Tasks of one [`Mapper`](crate::mapper::Mapper) (and its clones) that fold into the
//! same shard would otherwise read the same version and all but one conflict; a lane
//! makes them queue instead, and a writer first looks for a shard whose lane is free, so
//! concurrent writers of one process spread over the shards. Writers in other processes
//! still meet through the store's optimistic commit, which alone keeps counts exact:
//! lanes only cut conflicts.
//!
//! Each lane also owns the [`Writer`] under whose write ids its holder sends (see
//! `write_ids`): one process writes a given shard under one writer id, so the shard's record
//! of applied writes stays about one entry per process.
//!
//! Lanes are a fixed set of striped locks (a shard document maps to one by the hash of
//! its key), so memory stays bounded whatever the number of entities; two shards that
//! share a stripe merely queue behind each other.

use crate::key::Key;
use crate::mapper::write::write_ids::{Pool, Pooled, Writer};
use rand::RngExt;
use std::hash::BuildHasher;
use tokio::sync::{Mutex, MutexGuard};

/// Stripes of the lanes of one mapper.
const STRIPES: usize = 1024;

/// How many random shards a writer tries for a free lane before it waits on one.
const FREE_LANE_TRIES: usize = 4;

/// Picks one shard for each entry of `shard_counts` (see [`Lanes::hold`]); without
/// lanes, uniformly at random, holding only a writer from `pool`.
pub(in crate::mapper) async fn hold<'l>(
    lanes: Option<&'l Lanes>,
    pool: &'l Pool,
    shard_counts: &[u32],
    key: impl Fn(usize, u32) -> Key,
) -> (Vec<Key>, Held<'l>) {
    let (keys, guards) = if let Some(lanes) = lanes {
        lanes.hold(shard_counts, key).await
    } else {
        let mut rng = rand::rng();
        let keys = shard_counts
            .iter()
            .enumerate()
            .map(|(i, &shards)| key(i, rng.random_range(0..shards.max(1))))
            .collect();
        (keys, Vec::new())
    };
    let held = Held {
        guards,
        pool,
        pooled: None,
    };
    (keys, held)
}

#[derive(Debug)]
pub(in crate::mapper) struct Lanes {
    stripes: Vec<Mutex<Writer>>,
    hasher: std::collections::hash_map::RandomState,
}

/// The lanes one attempt holds, released on drop (also when its future is dropped), and
/// the writer it sends under: the first held lane's, or a pooled one when it holds none.
pub(in crate::mapper) struct Held<'l> {
    guards: Vec<MutexGuard<'l, Writer>>,
    pool: &'l Pool,
    pooled: Option<Pooled<'l>>,
}

impl Held<'_> {
    /// The writer of this attempt, used by no other attempt while held.
    pub(in crate::mapper) fn writer(&mut self) -> &mut Writer {
        match self.guards.first_mut() {
            Some(guard) => guard,
            None => self.pooled.get_or_insert_with(|| self.pool.take()),
        }
    }
}

impl Lanes {
    pub(in crate::mapper) fn new() -> Self {
        Lanes {
            stripes: (0..STRIPES).map(|_| Mutex::new(Writer::new())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    fn stripe(&self, key: &Key) -> usize {
        (self.hasher.hash_one(key) % STRIPES as u64) as usize
    }

    /// Picks one shard index in `0..shards` for each entry of `shard_counts` and holds
    /// the lanes of the chosen shard documents (`key(i, shard)` names them). A shard
    /// whose lane is free is preferred (a few random tries per property); otherwise the
    /// lanes are awaited in stripe order, so writers never deadlock.
    pub(in crate::mapper) async fn hold(
        &self,
        shard_counts: &[u32],
        key: impl Fn(usize, u32) -> Key,
    ) -> (Vec<Key>, Vec<MutexGuard<'_, Writer>>) {
        let (keys, guards, all_free) = self.try_hold(shard_counts, &key);
        if all_free {
            return (keys, guards);
        }
        // Some lane is busy: release what is held and wait for all in stripe order.
        drop(guards);
        let mut stripes: Vec<usize> = keys.iter().map(|k| self.stripe(k)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for stripe in stripes {
            guards.push(self.stripes[stripe].lock().await);
        }
        (keys, guards)
    }

    /// The choice of [`Lanes::hold`] without waiting: the keys chosen, the lanes taken,
    /// and whether every chosen lane was taken.
    fn try_hold(
        &self,
        shard_counts: &[u32],
        key: &impl Fn(usize, u32) -> Key,
    ) -> (Vec<Key>, Vec<MutexGuard<'_, Writer>>, bool) {
        let mut rng = rand::rng();
        let mut keys = Vec::with_capacity(shard_counts.len());
        let mut guards = Vec::with_capacity(shard_counts.len());
        let mut held_stripes = Vec::new();
        let mut all_free = true;
        for (i, &shards) in shard_counts.iter().enumerate() {
            let mut chosen = None;
            for _ in 0..FREE_LANE_TRIES {
                let shard = rng.random_range(0..shards.max(1));
                let k = key(i, shard);
                let stripe = self.stripe(&k);
                if held_stripes.contains(&stripe) {
                    chosen = Some(k);
                    break;
                }
                if let Ok(guard) = self.stripes[stripe].try_lock() {
                    guards.push(guard);
                    held_stripes.push(stripe);
                    chosen = Some(k);
                    break;
                }
            }
            if let Some(k) = chosen {
                keys.push(k);
            } else {
                all_free = false;
                keys.push(key(i, rng.random_range(0..shards.max(1))));
            }
        }
        (keys, guards, all_free)
    }
}
