//! The read cache: the documents of recent loads, reused for a bounded time, with this
//! process's own confirmed writes folded in and stale refills refused (Gumball).
//!
//! # What a cached load returns
//! A [`ReadCache`] given to a [`Mapper`](super::Mapper) with
//! [`Mapper::with_read_cache`](super::Mapper::with_read_cache) keeps, per entity, the
//! documents one read found (its *snapshot*) for at most the cache's staleness bound
//! `b`, counted from the moment the load that read them was called. A load through the
//! mapper (and every mapper sharing the cache) answers from a snapshot younger than `b`
//! when there is one, else it reads the store and offers what it read as the new
//! snapshot. What a load returns is then always:
//! - **a state the store held no longer than `b` before the load was called**, except
//!   for:
//! - **the writes this cache's mappers confirmed** before the load was called, which are
//!   always in it, and exactly once: a save (or `apply`, `update`) of a statically
//!   sharded property returns only after its change is recorded beside the cache
//!   (below), so a process reads its own writes, and a vote it saw confirmed never
//!   disappears from its reads;
//! - each sharded property is a fold of changes that were each applied once, so a count
//!   never shows a vote twice nor one never attempted.
//!
//! Changes of other processes appear within `b`. Every other write of the cache's
//! mappers (a main document rewritten by `save` or `update`, `insert`, `delete`,
//! `reshard`, `update_once`, a dynamic shard) drops the entity's snapshot instead, so
//! the next load reads the store.
//!
//! # Why a stale refill never wins
//! A read can be overtaken: it reads the store, then (a slow task, a paused thread)
//! offers its snapshot after a write or an invalidation happened. Following Gumball, the
//! cache keeps, per entity, a short log: the tick (a counter of the cache) of its last
//! invalidation and the confirmed writes of the last `b`, each with its tick. A load
//! takes a tick when it is called, before its read starts, and:
//! - a snapshot is refused when the entity was invalidated after that tick, when an
//!   entry from a later tick is there already, or when it is older than `b`; a snapshot
//!   in the cache is ignored when an invalidation came after its tick. So a refill never
//!   replaces a newer value, and an invalidated state is never served again;
//! - a confirmed write with a later tick than the snapshot may or may not be in it.
//!   The shard document it went to tells: its write record (`writes`) holds the
//!   write's id exactly when the snapshot read the write. A write it does not hold is
//!   folded into the answer (the fold is commutative and associative); when the
//!   snapshot cannot tell (the shard was not read, or a reshard moved it), the load reads
//!   the store instead. A write with an earlier tick than the snapshot is in it.
//!
//! Log entries older than `b` are dropped: every snapshot they could concern is expired.
//!
//! # Why in process
//! The cache lives in the process, on `moka` (bounded, expiring entries). A cache shared
//! in Redis would save little: a load from Redis is one round trip already (the MULTI of
//! `HGETALL`s), and a shared cache needs the same guards on the server for every writer.
//! In-process, a cached load costs no round trip at all.

use super::shared_read::{Found, Slot};
use super::Mapper;
use crate::document::Value;
use crate::entity::Sent;
use crate::key::Key;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How many entities a [`ReadCache`] keeps by default.
pub const DEFAULT_CACHE_CAPACITY: u64 = 10_000;

/// A cache of loaded entities for [`Mapper::with_read_cache`](super::Mapper::with_read_cache):
/// loads answer from documents read at most `staleness` before, with the writes of this
/// process folded in (see the [module docs](self) for exactly what a cached load may
/// return). Cloning shares the cache.
///
/// ```
/// use autoshard::{Mapper, MemoryStore, ReadCache};
/// use std::time::Duration;
///
/// let cache = ReadCache::new(Duration::from_millis(100)).with_capacity(1_000);
/// let db = Mapper::new(MemoryStore::new()).with_read_cache(cache.clone());
/// assert_eq!(cache.staleness(), Duration::from_millis(100));
/// # let _ = db;
/// ```
#[derive(Clone)]
pub struct ReadCache {
    inner: Arc<Inner>,
}

struct Inner {
    staleness: Duration,
    clock: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    refused: AtomicU64,
    entries: moka::sync::Cache<Slot, Arc<Entry>>,
    logs: Mutex<HashMap<Key, Log>>,
}

/// How a [`ReadCache`] served loads: see [`ReadCache::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Entities answered from a snapshot (with the confirmed writes it lacks folded in).
    pub hits: u64,
    /// Entities read from the store: no snapshot, an expired or invalidated one, or one
    /// that could not tell whether it holds a confirmed write.
    pub misses: u64,
    /// Snapshots offered and refused: read before an invalidation, older than the bound,
    /// or older than the snapshot already there.
    pub refused: u64,
}

/// A load's place in time: the cache's tick and the instant, taken when it was called.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ticket {
    tick: u64,
    at: Instant,
}

/// A snapshot and the ticket of the load that read it.
pub(super) struct Entry {
    pub(super) found: Found,
    pub(super) ticket: Ticket,
}

/// A confirmed write of a static shard: `value` folded into property `stored_as` of
/// `shard` under the write id `(writer, seq)`.
#[derive(Clone, Debug)]
pub(super) struct Confirmed {
    pub(super) stored_as: &'static str,
    pub(super) shard: Key,
    pub(super) writer: Arc<str>,
    pub(super) seq: u64,
    pub(super) value: Value,
    tick: u64,
    at: Instant,
}

/// What the cache remembers of one entity besides its snapshots.
#[derive(Debug, Default)]
struct Log {
    invalidated: Option<(u64, Instant)>,
    confirmed: Vec<Confirmed>,
}

impl Log {
    fn prune(&mut self, staleness: Duration) {
        self.confirmed.retain(|c| c.at.elapsed() < staleness);
        if self
            .invalidated
            .is_some_and(|(_, at)| at.elapsed() >= staleness)
        {
            self.invalidated = None;
        }
    }

    fn is_empty(&self) -> bool {
        self.invalidated.is_none() && self.confirmed.is_empty()
    }

    fn invalidated_after(&self, tick: u64) -> bool {
        self.invalidated.is_some_and(|(t, _)| t > tick)
    }
}

/// The logs kept before a sweep drops the expired ones.
const LOGS_BEFORE_SWEEP: usize = 4_096;

impl ReadCache {
    /// A cache whose loads answer from documents read at most `staleness` before, for at
    /// most [`DEFAULT_CACHE_CAPACITY`] entities.
    #[must_use]
    pub fn new(staleness: Duration) -> Self {
        Self::build(staleness, DEFAULT_CACHE_CAPACITY)
    }

    /// The same settings for at most `entities` entities (a new, empty cache).
    #[must_use]
    pub fn with_capacity(self, entities: u64) -> Self {
        Self::build(self.inner.staleness, entities)
    }

    fn build(staleness: Duration, capacity: u64) -> Self {
        ReadCache {
            inner: Arc::new(Inner {
                staleness,
                clock: AtomicU64::new(1),
                hits: AtomicU64::new(0),
                misses: AtomicU64::new(0),
                refused: AtomicU64::new(0),
                entries: moka::sync::Cache::builder()
                    .max_capacity(capacity)
                    .time_to_live(staleness.max(Duration::from_millis(1)))
                    .build(),
                logs: Mutex::default(),
            }),
        }
    }

    /// How old the documents a cached load answers from may be.
    #[must_use]
    pub fn staleness(&self) -> Duration {
        self.inner.staleness
    }

    /// How the cache served loads so far.
    #[must_use]
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.inner.hits.load(Ordering::Relaxed),
            misses: self.inner.misses.load(Ordering::Relaxed),
            refused: self.inner.refused.load(Ordering::Relaxed),
        }
    }

    /// Drops everything cached (the guards stay: a read that started before is still
    /// refused where it would have been).
    pub fn clear(&self) {
        self.inner.entries.invalidate_all();
    }

    fn logs(&self) -> MutexGuard<'_, HashMap<Key, Log>> {
        self.inner
            .logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn tick(&self) -> u64 {
        self.inner.clock.fetch_add(1, Ordering::SeqCst)
    }

    /// The ticket of a load called now.
    pub(super) fn ticket(&self) -> Ticket {
        Ticket {
            tick: self.tick(),
            at: Instant::now(),
        }
    }

    /// The snapshot of `slot` a load may answer from, with the confirmed writes that may
    /// not be in it; `None` when there is none younger than the bound, or it was
    /// invalidated.
    pub(super) fn get(&self, slot: &Slot) -> Option<(Arc<Entry>, Vec<Confirmed>)> {
        let entry = self.inner.entries.get(slot)?;
        if entry.ticket.at.elapsed() >= self.inner.staleness {
            return None;
        }
        let mut logs = self.logs();
        let Some(log) = logs.get_mut(&slot.0) else {
            return Some((entry, Vec::new()));
        };
        log.prune(self.inner.staleness);
        if log.invalidated_after(entry.ticket.tick) {
            return None;
        }
        let later = Self::confirmed_after(log, entry.ticket.tick);
        Some((entry, later))
    }

    fn confirmed_after(log: &Log, tick: u64) -> Vec<Confirmed> {
        log.confirmed
            .iter()
            .filter(|c| c.tick > tick)
            .cloned()
            .collect()
    }

    /// Offers what a load with `ticket` read as the snapshot of `slot`; refused when it
    /// is older than the bound, when `slot`'s entity was invalidated after the ticket, or
    /// when a snapshot read later is there.
    pub(super) fn fill(&self, slot: &Slot, found: Found, ticket: Ticket) -> bool {
        let taken = self.offer(slot, found, ticket);
        if !taken {
            self.inner.refused.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// Counts a load answered from a snapshot (`true`) or read from the store.
    pub(super) fn count(&self, hit: bool) {
        let counter = if hit {
            &self.inner.hits
        } else {
            &self.inner.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn offer(&self, slot: &Slot, found: Found, ticket: Ticket) -> bool {
        if ticket.at.elapsed() >= self.inner.staleness {
            return false;
        }
        {
            let mut logs = self.logs();
            if let Some(log) = logs.get_mut(&slot.0) {
                log.prune(self.inner.staleness);
                if log.invalidated_after(ticket.tick) {
                    return false;
                }
            }
        }
        let entry = Arc::new(Entry { found, ticket });
        let outcome = self
            .inner
            .entries
            .entry(slot.clone())
            .and_compute_with(|current| match current {
                Some(current) if current.value().ticket.tick > ticket.tick => {
                    moka::ops::compute::Op::Nop
                }
                _ => moka::ops::compute::Op::Put(entry),
            });
        matches!(
            outcome,
            moka::ops::compute::CompResult::Inserted(_)
                | moka::ops::compute::CompResult::ReplacedWith(_)
        )
    }

    /// Refuses every snapshot of the entity at `main` read before now (the ones cached
    /// are ignored from now on, and expire).
    pub(super) fn invalidate(&self, main: &Key) {
        let tick = self.tick();
        {
            let mut logs = self.logs();
            let log = logs.entry(main.clone()).or_default();
            log.invalidated = Some((tick, Instant::now()));
            log.confirmed.clear();
        }
        self.sweep();
    }

    /// Records a write confirmed now (see the module docs).
    pub(super) fn confirm(
        &self,
        main: &Key,
        stored_as: &'static str,
        shard: &Key,
        writer: &Arc<str>,
        seq: u64,
        value: &Value,
    ) {
        let confirmed = Confirmed {
            stored_as,
            shard: shard.clone(),
            writer: writer.clone(),
            seq,
            value: value.clone(),
            tick: self.tick(),
            at: Instant::now(),
        };
        let mut logs = self.logs();
        let log = logs.entry(main.clone()).or_default();
        log.prune(self.inner.staleness);
        log.confirmed.push(confirmed);
        let sweep = logs.len() > LOGS_BEFORE_SWEEP;
        drop(logs);
        if sweep {
            self.sweep();
        }
    }

    /// Drops the logs whose every entry is older than the bound.
    fn sweep(&self) {
        let mut logs = self.logs();
        if logs.len() <= LOGS_BEFORE_SWEEP {
            return;
        }
        let staleness = self.inner.staleness;
        logs.retain(|_, log| {
            log.prune(staleness);
            !log.is_empty()
        });
    }
}

impl fmt::Debug for ReadCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadCache")
            .field("staleness", &self.inner.staleness)
            .field("entries", &self.inner.entries.entry_count())
            .finish_non_exhaustive()
    }
}

/// Invalidates an entity's snapshots when dropped: after a write that is not folded
/// into them, whatever its outcome (a write that failed or whose future was dropped
/// may still have landed).
pub(super) struct Invalidate<'c> {
    cache: Option<&'c ReadCache>,
    main: Key,
}

impl<'c> Invalidate<'c> {
    pub(super) fn new(cache: Option<&'c ReadCache>, main: &Key) -> Self {
        Invalidate {
            cache,
            main: main.clone(),
        }
    }
}

impl Drop for Invalidate<'_> {
    fn drop(&mut self) {
        if let Some(cache) = self.cache {
            cache.invalidate(&self.main);
        }
    }
}

impl<S> Mapper<S> {
    /// Records in the read cache, if any, that the write `sent` of property `stored_as`
    /// of the entity at `main` was confirmed (its value is the change it carried).
    pub(super) fn confirmed(&self, main: &Key, stored_as: &'static str, sent: &Sent) {
        if let (Some(cache), Some(value)) = (&self.cache, &sent.value) {
            cache.confirm(main, stored_as, &sent.shard, &sent.writer, sent.seq, value);
        }
    }

    /// A guard that drops the entity's cached snapshots once the write it covers is over
    /// (see [`Invalidate`]).
    pub(super) fn invalidating(&self, main: &Key) -> Invalidate<'_> {
        Invalidate::new(self.cache.as_ref(), main)
    }
}
