//! [`Metrics`]: counters of the optimistic transactions a mapper runs, for benchmarks and
//! dashboards, in total and for each of the busiest entities. Counting only; no timing,
//! no logging.

use crate::key::Key;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many entities [`Metrics::entities`] keeps counters for: the busiest, by a
/// frequency-aware eviction (`moka`'s `TinyLFU`).
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
#[derive(Clone)]
pub struct Metrics {
    counters: Arc<Counters>,
    entities: moka::sync::Cache<Key, Arc<Counters>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            counters: Arc::default(),
            entities: moka::sync::Cache::new(TRACKED_ENTITIES),
        }
    }
}

#[derive(Default)]
struct Counters {
    attempts: AtomicU64,
    commits: AtomicU64,
    conflicts: AtomicU64,
    retries: AtomicU64,
    failures: AtomicU64,
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
        self.entities.get(key).map(|c| c.snapshot())
    }

    /// Every tracked entity's main document key with its counts (see
    /// [`Metrics::entity`]), in no promised order.
    #[must_use]
    pub fn entities(&self) -> Vec<(Key, MetricsSnapshot)> {
        self.entities
            .iter()
            .map(|(key, c)| ((*key).clone(), c.snapshot()))
            .collect()
    }

    /// Sets every counter back to zero and forgets every entity.
    pub fn reset(&self) {
        self.entities.invalidate_all();
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
        let counters = self.entities.get_with_by_ref(main, Arc::default);
        counters.attempts.fetch_add(1, Ordering::Relaxed);
        let outcome = if conflicted {
            &counters.conflicts
        } else {
            &counters.commits
        };
        outcome.fetch_add(1, Ordering::Relaxed);
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
