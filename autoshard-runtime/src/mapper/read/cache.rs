//! The read cache: the documents of recent loads, reused for a bounded time `b`, with this
//! process's own confirmed writes folded in and stale refills refused (Gumball). In
//! process, on `moka`.
//!
//! Invariants: a cached load returns a state the store held no longer than `b` before the
//! load was called, plus every write this cache's mappers confirmed before it, each exactly
//! once (the shard's write record tells whether a snapshot holds a write); a refill never
//! replaces a newer value, and an invalidated state is never served again. What a cached
//! load returns and why: `docs/design/read-cache.md`.

use crate::document::{Value, Versioned};
use crate::entity::{Entity, Sent, ShardedProperty};
use crate::error::{Error, FieldError, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::A_CENTURY;
use crate::mapper::Mapper;
use crate::mapper::codec::with_values;
use crate::mapper::read::snapshot::{Confirmed, Snapshot};
use crate::store::ownership::system_now_ms;
use crate::sync::lock;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How many entities a [`ReadCache`] keeps by default.
pub const DEFAULT_CACHE_CAPACITY: u64 = 10_000;

/// A cache of loaded entities for [`Mapper::with_read_cache`](crate::mapper::Mapper::with_read_cache):
/// loads answer from documents read at most `staleness` before, with the writes of this
/// process folded in. Cloning shares the cache.
///
/// # What a cached load returns
/// A load through a mapper with the cache (and every mapper sharing it) answers from a
/// snapshot younger than the bound `b` (`staleness`, counted from the call of the load
/// that read it) when there is one, else it reads the store and offers what it read as
/// the new snapshot. What it returns is always:
/// - a state the store held no longer than `b` before the load was called, plus
/// - every write the cache's mappers confirmed before the load was called (a `save`,
///   `apply` or `update` of a statically sharded property), exactly once: a process reads
///   its own writes, and a vote it saw confirmed never disappears from its reads.
///
/// Changes of other processes appear within `b`. Every other write of the cache's
/// mappers (a main document rewritten, `insert`, `delete`, `reshard`, `update_once`, a
/// dynamic shard) drops the entity's snapshot, so the next load reads the store. A read
/// that is overtaken (it offers its snapshot after a write or an invalidation happened)
/// is refused: a refill never replaces a newer value. The argument, after Gumball, is in
/// the repository's `docs/design/read-cache.md`.
///
/// ```
/// use autoshard::{Mapper, ReadCache};
/// use autoshard::store::MemoryStore;
/// use std::time::Duration;
///
/// let cache = ReadCache::new(Duration::from_millis(100)).with_capacity(1_000);
/// let db = Mapper::new(MemoryStore::new()).with_read_cache(cache.clone());
/// assert_eq!(cache.staleness(), Duration::from_millis(100));
/// assert_eq!(cache.stats().hits, 0);
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
    entries: moka::sync::Cache<Key, Arc<Entry>>,
    /// The logs; also the lock under which entries are filled, folded into and dropped.
    logs: Mutex<HashMap<Key, Log>>,
}

/// How a [`ReadCache`] served loads: see [`ReadCache::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Entities answered from a snapshot.
    pub hits: u64,
    /// Entities read from the store: no snapshot, an expired or invalidated one, or one
    /// that could not tell whether it holds a confirmed write.
    pub misses: u64,
    /// Snapshots offered and refused: read before an invalidation, older than the bound
    /// or than the snapshot already there, or unable to tell whether they hold a write
    /// confirmed while they were read.
    pub refused: u64,
}

/// A load's place in time: the cache's tick and the instant, taken when it was called.
#[derive(Clone, Copy, Debug)]
pub(in crate::mapper) struct Ticket {
    tick: u64,
    at: Instant,
}

/// `Entity::fold_values` of the entity type a snapshot was filled for.
type FoldFn = fn(usize, &Value, &Value) -> std::result::Result<Value, FieldError>;

/// A snapshot: what one read found, and each sharded property folded.
pub(in crate::mapper) struct Entry {
    ticket: Ticket,
    /// The entity type it was read as (two types of one kind may read different shards).
    type_name: &'static str,
    found: Arc<Snapshot>,
    properties: &'static [ShardedProperty],
    fold: FoldFn,
    /// Per property of `properties`, the fold of the snapshot's shards and of the
    /// confirmed writes they do not hold; `None` once a confirmed write could not be
    /// placed (the snapshot is then ignored).
    values: Mutex<Option<Vec<Value>>>,
}

/// A cached load's answer: the snapshot's main document and its folded properties.
pub(in crate::mapper) struct Hit {
    entry: Arc<Entry>,
    pub(in crate::mapper) values: Vec<Value>,
}

impl Hit {
    /// The main document; `None` when the entity was not stored.
    pub(in crate::mapper) fn main(&self) -> Option<&Versioned> {
        self.entry.found.main()
    }
}

/// A confirmed write in an entity's log, with when it was confirmed.
#[derive(Clone, Debug)]
struct Logged {
    confirmed: Confirmed,
    tick: u64,
    at: Instant,
}

/// What the cache remembers of one entity besides its snapshot.
#[derive(Debug, Default)]
struct Log {
    invalidated: Option<(u64, Instant)>,
    /// Oldest first.
    confirmed: VecDeque<Logged>,
}

impl Log {
    fn prune(&mut self, staleness: Duration) {
        while self
            .confirmed
            .front()
            .is_some_and(|c| c.at.elapsed() >= staleness)
        {
            self.confirmed.pop_front();
        }
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
                    // moka refuses a time to live of more than 1,000 years.
                    .time_to_live(staleness.clamp(Duration::from_millis(1), A_CENTURY))
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
        let _logs = self.logs();
        self.inner.entries.invalidate_all();
    }

    fn logs(&self) -> MutexGuard<'_, HashMap<Key, Log>> {
        lock(&self.inner.logs)
    }

    fn tick(&self) -> u64 {
        self.inner.clock.fetch_add(1, Ordering::SeqCst)
    }

    /// The ticket of a load called now.
    pub(in crate::mapper) fn ticket(&self) -> Ticket {
        Ticket {
            tick: self.tick(),
            at: Instant::now(),
        }
    }

    /// The snapshot of the entity at `main` a load of `E` may answer from: `None` when
    /// there is none younger than the bound, it was read as another type, or it could not
    /// place a confirmed write. Counted as a hit or a miss.
    pub(in crate::mapper) fn get<E: Entity>(&self, main: &Key) -> Option<Hit> {
        let hit = self.inner.entries.get(main).and_then(|entry| {
            if entry.type_name != std::any::type_name::<E>()
                || entry.ticket.at.elapsed() >= self.inner.staleness
            {
                return None;
            }
            let values = lock(&entry.values).clone()?;
            Some(Hit { entry, values })
        });
        let counter = if hit.is_some() {
            &self.inner.hits
        } else {
            &self.inner.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        hit
    }

    /// Offers what a load of `E` with `ticket` read as the snapshot of the entity at
    /// `main`; refused when it is older than the bound, when the entity was invalidated
    /// after the ticket, when a snapshot read later is there, or when it cannot tell
    /// whether it holds a write confirmed after the ticket.
    pub(in crate::mapper) fn fill<E: Entity>(
        &self,
        main: &Key,
        found: &Arc<Snapshot>,
        ticket: Ticket,
    ) {
        if !self.offer::<E>(main, found, ticket) {
            self.inner.refused.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn offer<E: Entity>(&self, main: &Key, found: &Arc<Snapshot>, ticket: Ticket) -> bool {
        if ticket.at.elapsed() >= self.inner.staleness {
            return false;
        }
        let mut logs = self.logs();
        let later: Vec<Confirmed> = match logs.get_mut(main) {
            Some(log) => {
                log.prune(self.inner.staleness);
                if log.invalidated_after(ticket.tick) {
                    return false;
                }
                log.confirmed
                    .iter()
                    .filter(|c| c.tick > ticket.tick)
                    .map(|c| c.confirmed.clone())
                    .collect()
            }
            None => Vec::new(),
        };
        if self
            .inner
            .entries
            .get(main)
            .is_some_and(|current| current.ticket.tick > ticket.tick)
        {
            return false;
        }
        let Ok(Some(folding)) = found.folding(main, &later) else {
            return false;
        };
        let Ok(values) = folding.values::<E>(main) else {
            return false;
        };
        let entry = Entry {
            ticket,
            type_name: std::any::type_name::<E>(),
            found: found.clone(),
            properties: E::PROPERTIES,
            fold: E::fold_values,
            values: Mutex::new(Some(values)),
        };
        self.inner.entries.insert(main.clone(), Arc::new(entry));
        drop(logs);
        true
    }

    /// Refuses every snapshot of the entity at `main` read before now.
    pub(in crate::mapper) fn invalidate(&self, main: &Key) {
        let tick = self.tick();
        {
            let mut logs = self.logs();
            let log = logs.entry(main.clone()).or_default();
            log.invalidated = Some((tick, Instant::now()));
            log.confirmed.clear();
            self.inner.entries.invalidate(main);
        }
        self.sweep();
    }

    /// Records a write confirmed now and folds it into the entity's snapshot when the
    /// snapshot does not hold it (see the module docs).
    pub(in crate::mapper) fn confirm(
        &self,
        main: &Key,
        stored_as: &'static str,
        sent: &Sent,
        window: Duration,
    ) {
        let Some(value) = &sent.value else {
            return;
        };
        let trusted_until_ms = sent
            .write
            .at_ms
            .saturating_add(u64::try_from(window.as_millis() / 2).unwrap_or(u64::MAX));
        if system_now_ms() >= trusted_until_ms {
            // A late reply: the shard may have dropped the write's record entry already,
            // so no snapshot can tell whether it holds the write. The next load reads it.
            return self.invalidate(main);
        }
        let mut logs = self.logs();
        let confirmed = Logged {
            confirmed: Confirmed {
                stored_as,
                shard: sent.shard.clone(),
                write: sent.write.clone(),
                value: value.clone(),
                trusted_until_ms,
            },
            tick: self.tick(),
            at: Instant::now(),
        };
        if let Some(entry) = self.inner.entries.get(main) {
            entry.take_in(main, &confirmed);
        }
        let log = logs.entry(main.clone()).or_default();
        log.prune(self.inner.staleness);
        log.confirmed.push_back(confirmed);
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

impl Entry {
    /// Folds the confirmed write `c` in unless the snapshot holds it; marks the snapshot
    /// unusable when it cannot tell.
    fn take_in(&self, main: &Key, logged: &Logged) {
        let mut values = lock(&self.values);
        let Some(current) = values.as_mut() else {
            return;
        };
        if logged.tick < self.ticket.tick {
            return;
        }
        let c = &logged.confirmed;
        let placed = match self.found.folding(main, std::slice::from_ref(c)) {
            Ok(Some(f)) if f.later.is_empty() => Ok(()),
            Ok(Some(_)) => match self
                .properties
                .iter()
                .position(|p| p.stored_as == c.stored_as)
            {
                Some(index) => (self.fold)(index, &current[index], &c.value)
                    .map(|folded| current[index] = folded)
                    .map_err(drop),
                // A property this type does not read: nothing to fold.
                None => Ok(()),
            },
            _ => Err(()),
        };
        if placed.is_err() {
            *values = None;
        }
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
pub(in crate::mapper) struct Invalidate<'c> {
    cache: Option<&'c ReadCache>,
    main: Key,
}

impl<'c> Invalidate<'c> {
    pub(in crate::mapper) fn new(cache: Option<&'c ReadCache>, main: &Key) -> Self {
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
    /// A guard that drops the entity's cached snapshots once the write it covers is over
    /// (see [`Invalidate`]).
    pub(in crate::mapper) fn invalidating(&self, main: &Key) -> Invalidate<'_> {
        Invalidate::new(self.cache.as_ref(), main)
    }
}

/// The entity with this id from a cached snapshot. [`Error::NotFound`] when the entity
/// was not stored.
pub(in crate::mapper) fn from_hit<E: Root>(id: &E::Id, main: &Key, hit: &Hit) -> Result<E> {
    let Some(main_doc) = hit.main() else {
        return Err(Error::NotFound { key: main.clone() });
    };
    with_values(id, main, main_doc, &hit.values)
}
