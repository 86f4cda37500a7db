//! [`Metrics`]: counters of the optimistic transactions a mapper runs, for benchmarks and
//! dashboards, in total and for each of the busiest entities. Counting only; no timing,
//! no logging.

use crate::key::{FastMap, Key};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// How many entities [`Metrics::entities`] keeps counters for: the busiest. When one more
/// entity would pass this count, the half of the tracked entities with the fewest
/// attempts since the last such pruning is forgotten.
pub const TRACKED_ENTITIES: u64 = 10_000;

/// Live counters of one [`crate::Mapper`] and its clones.
///
/// They count optimistic transactions: a save's commit (its main document and shard
/// updates, or a dynamic shard insert), an unsharded `update`, a child insert, group
/// transaction or delete, and each compaction round (one that finds nothing to fold
/// counts as a read-only commit). A root's `insert` and `delete` are not attempts. With
/// no store errors:
/// `attempts = commits + conflicts`, and with [`crate::RetryPolicy::none`] also
/// `attempts = commits + failures`.
///
/// Per entity, they count the saves of statically sharded properties (each commit or
/// merge into a static shard, and each conflict there) of up to [`TRACKED_ENTITIES`]
/// entities: the signal of adaptive shard counts (`autoshard::maintenance`).
#[derive(Clone, Default)]
pub struct Metrics {
    counters: Arc<Counters>,
    entities: Arc<Tracked>,
}

#[derive(Default)]
struct Counters {
    attempts: AtomicU64,
    commits: AtomicU64,
    conflicts: AtomicU64,
    retries: AtomicU64,
    failures: AtomicU64,
    /// `attempts` when the tracked entities were last pruned (per entity only).
    pruned_at: AtomicU64,
}

/// The counters of the tracked entities. A save of a tracked entity counts under the
/// read lock (the hot path: one hash lookup); only an entity seen for the first time
/// takes the write lock.
#[derive(Default)]
struct Tracked {
    entities: RwLock<FastMap<Key, Counters>>,
}

impl Tracked {
    /// Runs `count` on the counters of the entity at `key`, tracking it from now on.
    fn count(&self, key: &Key, count: impl Fn(&Counters)) {
        if let Some(counters) = self
            .entities
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
        {
            count(counters);
            return;
        }
        let mut entities = self
            .entities
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let limit = usize::try_from(TRACKED_ENTITIES).unwrap_or(usize::MAX);
        if entities.len() >= limit && !entities.contains_key(key) {
            prune(&mut entities);
        }
        count(entities.entry(key.clone()).or_default());
    }

    fn get(&self, key: &Key) -> Option<MetricsSnapshot> {
        let entities = self.entities.read().unwrap_or_else(PoisonError::into_inner);
        entities.get(key).map(Counters::snapshot)
    }

    fn all(&self) -> Vec<(Key, MetricsSnapshot)> {
        let entities = self.entities.read().unwrap_or_else(PoisonError::into_inner);
        entities
            .iter()
            .map(|(key, c)| (key.clone(), c.snapshot()))
            .collect()
    }

    fn clear(&self) {
        self.entities
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

/// Forgets the half of `entities` with the fewest attempts since the last pruning (the
/// busiest stay; one that was busy long ago and is idle now goes), and starts the next
/// period.
fn prune(entities: &mut FastMap<Key, Counters>) {
    let recent = |c: &Counters| {
        let attempts = c.attempts.load(Ordering::Relaxed);
        attempts.saturating_sub(c.pruned_at.load(Ordering::Relaxed))
    };
    let mut by_recent: Vec<(u64, Key)> = entities
        .iter()
        .map(|(key, c)| (recent(c), key.clone()))
        .collect();
    by_recent.sort_unstable_by_key(|(recent, _)| std::cmp::Reverse(*recent));
    for (_, key) in by_recent.split_off(by_recent.len() / 2) {
        entities.remove(&key);
    }
    for c in entities.values() {
        c.pruned_at
            .store(c.attempts.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// The counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// Transaction attempts started (first tries and retries).
    pub attempts: u64,
    /// Attempts that committed.
    pub commits: u64,
    /// Attempts that found a concurrent write and applied nothing.
    pub conflicts: u64,
    /// Attempts that were retries of a conflicting one.
    pub retries: u64,
    /// Operations that gave up: contention after the retry policy was exhausted, or an
    /// error from the store or a malformed document during an attempt.
    pub failures: u64,
}

impl MetricsSnapshot {
    /// `conflicts / attempts` (0 when nothing was attempted).
    #[must_use]
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52 in practice
    pub fn conflict_rate(&self) -> f64 {
        if self.attempts == 0 {
            0.0
        } else {
            self.conflicts as f64 / self.attempts as f64
        }
    }

    /// The counts from `earlier` to `self`.
    #[must_use]
    pub fn since(&self, earlier: &MetricsSnapshot) -> MetricsSnapshot {
        MetricsSnapshot {
            attempts: self.attempts.saturating_sub(earlier.attempts),
            commits: self.commits.saturating_sub(earlier.commits),
            conflicts: self.conflicts.saturating_sub(earlier.conflicts),
            retries: self.retries.saturating_sub(earlier.retries),
            failures: self.failures.saturating_sub(earlier.failures),
        }
    }
}

impl Metrics {
    /// Fresh counters at zero.
    #[must_use]
    pub fn new() -> Self {
        Metrics::default()
    }

    /// The current counts.
    ///
    /// ```
    /// let m = autoshard::metrics::Metrics::new();
    /// assert_eq!(m.snapshot().attempts, 0);
    /// ```
    #[must_use]
    pub fn snapshot(&self) -> MetricsSnapshot {
        self.counters.snapshot()
    }

    /// The counts of static-shard saves of the entity whose main document is at `key`
    /// (`attempts`, `commits`, `conflicts`), if it is tracked.
    ///
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[autoshard::sharded]
    /// #[derive(Entity, Debug, Clone)]
    /// struct Question {
    ///     #[id]
    ///     id: u64,
    ///     #[shardable(shards = 4, fold = sum)]
    ///     votes: i64,
    /// }
    ///
    /// impl Question {
    ///     #[shard_method]
    ///     fn vote_up(&mut self) {
    ///         self.votes += 1;
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Question::new(7, 0)).await?;
    /// db.update(&7, Question::vote_up).await?;
    /// let seven = db.metrics().entity(&Key::new("Question", "7")).unwrap();
    /// assert_eq!((seven.commits, seven.conflicts), (1, 0));
    /// assert_eq!(db.metrics().entity(&Key::new("Question", "8")), None);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn entity(&self, key: &Key) -> Option<MetricsSnapshot> {
        self.entities.get(key)
    }

    /// Every tracked entity's main document key with its counts (see
    /// [`Metrics::entity`]), in no promised order.
    #[must_use]
    pub fn entities(&self) -> Vec<(Key, MetricsSnapshot)> {
        self.entities.all()
    }

    /// Sets every counter back to zero and forgets every entity.
    pub fn reset(&self) {
        self.entities.clear();
        let c = &self.counters;
        for counter in [
            &c.attempts,
            &c.commits,
            &c.conflicts,
            &c.retries,
            &c.failures,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }

    pub(crate) fn attempt(&self, is_retry: bool) {
        self.counters.attempts.fetch_add(1, Ordering::Relaxed);
        if is_retry {
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn commit(&self) {
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn conflict(&self) {
        self.counters.conflicts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn failure(&self) {
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// One attempt to save into a static shard of the entity at `main`, and whether it
    /// conflicted (else it committed).
    pub(crate) fn entity_attempt(&self, main: &Key, conflicted: bool) {
        self.entities.count(main, |counters| {
            counters.attempts.fetch_add(1, Ordering::Relaxed);
            let outcome = if conflicted {
                &counters.conflicts
            } else {
                &counters.commits
            };
            outcome.fetch_add(1, Ordering::Relaxed);
        });
    }
}

impl Counters {
    fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            attempts: self.attempts.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
        }
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.snapshot(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(i: u64) -> Key {
        Key::new("Question", i.to_string())
    }

    #[test]
    fn tracking_past_the_limit_keeps_the_busy_entities_and_forgets_idle_ones() {
        let m = Metrics::new();
        let limit = TRACKED_ENTITIES;
        // One busy entity, then enough others, each saved once, to fill the table.
        for _ in 0..5 {
            m.entity_attempt(&entity(0), false);
        }
        for i in 1..limit {
            m.entity_attempt(&entity(i), i % 2 == 0);
        }
        assert_eq!(m.entities().len() as u64, limit);
        // One more entity: half of the table goes, the busy one stays.
        m.entity_attempt(&entity(limit), false);
        let tracked = m.entities().len() as u64;
        assert_eq!(tracked, limit / 2 + 1);
        let busy = m.entity(&entity(0)).unwrap();
        assert_eq!((busy.attempts, busy.commits, busy.conflicts), (5, 5, 0));
        assert_eq!(m.entity(&entity(limit)).unwrap().attempts, 1);
        // The next pruning counts attempts since this one: an entity busy before and idle
        // since is forgotten before one saved since.
        for i in limit + 1..limit + 1 + (limit - tracked) {
            m.entity_attempt(&entity(i), false);
            m.entity_attempt(&entity(i), false);
        }
        assert_eq!(m.entities().len() as u64, limit);
        m.entity_attempt(&entity(2 * limit + 1), false);
        assert_eq!(m.entity(&entity(0)), None);
        assert_eq!(m.entity(&entity(limit + 1)).unwrap().attempts, 2);
        // The totals are not the entities' counters.
        assert_eq!(m.snapshot().attempts, 0);
        m.reset();
        assert!(m.entities().is_empty());
    }
}
