//! [`Metrics`]: counters of the optimistic transactions a mapper runs, for benchmarks and
//! dashboards. Counting only; no timing, no logging.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Live counters of one [`crate::Mapper`] and its clones.
///
/// They count optimistic transactions: a save's commit (its main document and shard
/// updates, or a dynamic shard insert), an unsharded `update`, a child insert, group
/// transaction or delete, and each compaction round (one that finds nothing to fold
/// counts as a read-only commit). A root's `insert` and `delete` are not attempts. With
/// no store errors:
/// `attempts = commits + conflicts`, and with [`crate::RetryPolicy::none`] also
/// `attempts = commits + failures`.
#[derive(Clone, Default)]
pub struct Metrics {
    counters: Arc<Counters>,
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
    /// let m = autoshard::Metrics::new();
    /// assert_eq!(m.snapshot().attempts, 0);
    /// ```
    #[must_use]
    pub fn snapshot(&self) -> MetricsSnapshot {
        let c = &self.counters;
        MetricsSnapshot {
            attempts: c.attempts.load(Ordering::Relaxed),
            commits: c.commits.load(Ordering::Relaxed),
            conflicts: c.conflicts.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
        }
    }

    /// Sets every counter back to zero.
    pub fn reset(&self) {
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
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.snapshot(), f)
    }
}
