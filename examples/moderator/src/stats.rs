//! Latency summaries: mean and percentiles of recorded durations, in milliseconds.

use std::time::Duration;

/// Mean, median and 99th percentile of a set of durations, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Latency {
    /// Arithmetic mean.
    pub mean_ms: f64,
    /// Median (nearest rank).
    pub p50_ms: f64,
    /// 99th percentile (nearest rank).
    pub p99_ms: f64,
}

impl Latency {
    /// Summarises `samples` (all zero when empty).
    ///
    /// ```
    /// use autoshard_moderator::stats::Latency;
    /// use std::time::Duration;
    ///
    /// let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
    /// let l = Latency::of(samples);
    /// assert_eq!((l.mean_ms, l.p50_ms, l.p99_ms), (50.5, 50.0, 99.0));
    /// ```
    #[must_use]
    pub fn of(mut samples: Vec<Duration>) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        samples.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let total: f64 = samples.iter().copied().map(ms).sum();
        #[allow(clippy::cast_precision_loss)] // sample counts are far below 2^52
        let mean_ms = total / samples.len() as f64;
        Latency {
            mean_ms,
            p50_ms: ms(nearest_rank(&samples, 50)),
            p99_ms: ms(nearest_rank(&samples, 99)),
        }
    }
}

/// The `pct`-th percentile of sorted, non-empty `samples` by the nearest-rank method.
fn nearest_rank(samples: &[Duration], pct: usize) -> Duration {
    let rank = (pct * samples.len()).div_ceil(100).max(1);
    samples[rank.min(samples.len()) - 1]
}
