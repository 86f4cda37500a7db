//! The read cache: the documents of recent loads, reused for a bounded time `b`, with this
//! process's own confirmed writes folded in and stale refills refused (Gumball). In
//! process, on `moka`.
//!
//! Invariants: a cached load returns a state the store held no longer than `b` before the
//! load was called, plus every write this cache's mappers confirmed before it, each exactly
//! once (the shard's write record tells whether a snapshot holds a write); a refill never
//! replaces a newer value, and an invalidated state is never served again. What a cached
//! load returns and why: `docs/design/read-cache.md`.

use crate::document::{Document, Value, Versioned};
use crate::entity::{Entity, Sent, ShardedProperty};
use crate::error::{Error, FieldError, Result};
use crate::key::Key;
use crate::mapper::codec::{sum_range, sum_values, with_property};
use crate::mapper::layout;
use crate::mapper::read::shared::Found;
use crate::mapper::write::write_ids;
use crate::mapper::Mapper;
use crate::store::ownership::system_now_ms;
use crate::store::WriteId;
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
    found: Found,
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
        self.entry.found.1.first().and_then(Option::as_ref)
    }
}

/// A confirmed write of a static shard: `value` folded into property `stored_as` of
/// `shard` under the write id `write`.
#[derive(Clone, Debug)]
pub(in crate::mapper) struct Confirmed {
    pub(in crate::mapper) stored_as: &'static str,
    pub(in crate::mapper) shard: Key,
    pub(in crate::mapper) write: WriteId,
    pub(in crate::mapper) value: Value,
    tick: u64,
    at: Instant,
    /// Until when (ms since the Unix epoch) the shard's write record is sure to hold the
    /// write once it is applied: half the write window after it was first sent. Writers
    /// drop record entries a write window old, so a snapshot read later could hold the
    /// write without its entry, and is not trusted to tell.
    trusted_until_ms: u64,
}

/// What the cache remembers of one entity besides its snapshot.
#[derive(Debug, Default)]
struct Log {
    invalidated: Option<(u64, Instant)>,
    /// Oldest first.
    confirmed: VecDeque<Confirmed>,
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
    pub(in crate::mapper) fn fill<E: Entity>(&self, main: &Key, found: &Found, ticket: Ticket) {
        if !self.offer::<E>(main, found, ticket) {
            self.inner.refused.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn offer<E: Entity>(&self, main: &Key, found: &Found, ticket: Ticket) -> bool {
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
                    .cloned()
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
        let Ok(Some(folding)) = folding(main, found, &later) else {
            return false;
        };
        let Ok(values) = values_of::<E>(main, &folding) else {
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
        let confirmed = Confirmed {
            stored_as,
            shard: sent.shard.clone(),
            write: sent.write.clone(),
            value: value.clone(),
            tick: self.tick(),
            at: Instant::now(),
            trusted_until_ms,
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
    fn take_in(&self, main: &Key, c: &Confirmed) {
        let mut values = lock(&self.values);
        let Some(current) = values.as_mut() else {
            return;
        };
        if c.tick < self.ticket.tick {
            return;
        }
        let placed = match folding(main, &self.found, std::slice::from_ref(c)) {
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

/// What a snapshot (the documents one read found) gives an entity: its main document,
/// the shard documents to fold, and the confirmed writes to fold besides, the ones the
/// snapshot does not hold.
pub(in crate::mapper) struct Folding<'f> {
    /// `None`: the entity is not stored.
    pub(in crate::mapper) main: Option<&'f Versioned>,
    pub(in crate::mapper) docs: Vec<(&'f Key, &'f Document)>,
    pub(in crate::mapper) later: Vec<&'f Confirmed>,
    /// The adoptions whose values the documents `docs` hold (see `adopt`).
    pub(in crate::mapper) adopted: Vec<&'f str>,
}

/// What to fold for the entity at `main` from the snapshot `found`, given the confirmed
/// writes `later` it may not hold; `Ok(None)` when it cannot tell whether it holds one
/// of them (see the module docs).
pub(in crate::mapper) fn folding<'f>(
    main: &Key,
    found: &'f Found,
    later: &'f [Confirmed],
) -> Result<Option<Folding<'f>>> {
    let (keys, found, extra) = &**found;
    let mut found = found.iter();
    let Some(main_doc) = found.next().and_then(Option::as_ref) else {
        return Ok(Some(Folding {
            main: None,
            docs: Vec::new(),
            later: Vec::new(),
            adopted: Vec::new(),
        }));
    };
    // Every sharded property found in any shard document is folded, whatever the
    // current annotation says, so switching static <-> dynamic loses nothing; but
    // never a static shard the layout does not read, or whose value a shard read
    // holds (see `reshard`).
    let counts = layout::recorded_counts(main, &main_doc.doc)?;
    let docs: Vec<(&Key, &Versioned)> = keys[1..]
        .iter()
        .zip(found)
        .filter_map(|(key, doc)| Some((key, doc.as_ref()?)))
        .chain(extra.iter().map(|(key, doc)| (key, doc)))
        .collect();
    let moved: Vec<&str> = docs
        .iter()
        .flat_map(|(_, doc)| layout::moved_into(&doc.doc).map(|(name, _)| name))
        .collect();
    let mut folded: Vec<(&Key, &Document)> = Vec::with_capacity(docs.len());
    for (key, doc) in docs {
        let skip = layout::static_shard_of(key).is_some_and(|(property, index)| {
            moved.contains(&key.name())
                || counts
                    .as_ref()
                    .and_then(|c| layout::count_of(c, property))
                    .is_some_and(|c| !c.is_read(index))
        });
        if !skip {
            folded.push((key, &doc.doc));
        } else if later.iter().any(|c| &c.shard == key) {
            return Ok(None);
        }
    }
    let mut missing = Vec::new();
    for c in later {
        let held = match folded.iter().find(|(key, _)| *key == &c.shard) {
            // Read too late for the shard's record to be sure to tell (`Confirmed`).
            Some(_) if system_now_ms() >= c.trusted_until_ms => return Ok(None),
            Some((_, doc)) => write_ids::applied(Some(doc), &c.write),
            // Absent from the snapshot: created after it, unless a reshard retired it.
            None if layout::is_retired(counts.as_ref(), &c.shard, None) => return Ok(None),
            None => false,
        };
        if !held {
            missing.push(c);
        }
    }
    let adopted = folded
        .iter()
        .flat_map(|(_, doc)| layout::adopted(doc).map(|(id, _)| id))
        .collect();
    Ok(Some(Folding {
        main: Some(main_doc),
        docs: folded,
        later: missing,
        adopted,
    }))
}

/// Each sharded property of `E` folded over `folding`: its documents, the confirmed
/// writes it lacks, and the values its main document holds that belong in the shards
/// (see `adopt`: a plain value stored before the field was sharded, and a value on its
/// way into the shards that no document read holds yet); neutral values when the entity
/// is not stored.
pub(in crate::mapper) fn values_of<E: Entity>(
    main: &Key,
    folding: &Folding<'_>,
) -> Result<Vec<Value>> {
    let main_doc = folding.main.map(|m| &m.doc);
    let adopting = match main_doc {
        Some(doc) => layout::adopting(main, doc)?,
        None => Vec::new(),
    };
    let mut values = Vec::with_capacity(E::PROPERTIES.len());
    for (index, p) in E::PROPERTIES.iter().enumerate() {
        let malformed = |key: &Key| {
            let key = key.clone();
            move |e| Error::malformed(&key, with_property(e, p.name))
        };
        let mut value = E::neutral_value(index).map_err(malformed(main))?;
        let in_main = main_doc
            .and_then(|doc| doc.get(p.name))
            .into_iter()
            .chain(
                adopting
                    .iter()
                    .filter(|a| a.property == p.name && !folding.adopted.contains(&a.id))
                    .map(|a| a.value),
            )
            .map(|value| (main, value));
        let stored = folding
            .docs
            .iter()
            .filter_map(|(key, doc)| Some((*key, doc.get(p.stored_as)?)))
            .chain(
                folding
                    .later
                    .iter()
                    .filter(|c| c.stored_as == p.stored_as)
                    .map(|c| (&c.shard, &c.value)),
            )
            .chain(in_main);
        if let Some(range) = sum_range(p) {
            value = sum_values(main, p.name, range, stored)?;
        } else {
            for (key, stored) in stored {
                value = E::fold_values(index, &value, stored).map_err(malformed(key))?;
            }
        }
        values.push(value);
    }
    Ok(values)
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
