//! [`RetryPolicy`]: when the mapper tries an optimistic transaction again after a
//! conflict, and when it gives up with [`crate::Error::Contention`].
//!
//! A policy only computes delays; it does not sleep, count or log (the mapper does).

use rand::RngExt;
use std::time::Duration;

/// How long to wait between attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backoff {
    /// Try again at once.
    Immediate,
    /// The same delay before every retry.
    Fixed(Duration),
    /// `initial · 2^(retry-1)`, capped at `max`, with "full jitter": the actual delay is
    /// uniform in `[0, that]`, so writers that conflicted together do not retry together.
    Exponential {
        /// The delay bound before the first retry.
        initial: Duration,
        /// The largest delay bound.
        max: Duration,
    },
}

/// Bounded retrying of optimistic transactions: at most `max_attempts` attempts (the
/// first one included) and no retry that would start after `max_elapsed`.
///
/// The default is exponential backoff with jitter from 5 ms up to 500 ms, at most 8
/// attempts within 5 s. A sharded save picks a fresh random shard on every retry, so a
/// few attempts almost always suffice; the time bound keeps a hot unsharded entity from
/// stalling a caller for long.
///
/// ```
/// use autoshard::RetryPolicy;
/// use std::time::Duration;
///
/// let none = RetryPolicy::none();
/// assert_eq!(none.max_attempts(), 1);
/// let fixed = RetryPolicy::fixed(Duration::from_millis(10), 3);
/// assert_eq!(fixed.delay_before_retry(1, Duration::ZERO), Some(Duration::from_millis(10)));
/// assert_eq!(fixed.delay_before_retry(3, Duration::ZERO), None); // 3 attempts made
/// let patient = RetryPolicy::default().with_max_attempts(100).with_max_elapsed(Duration::from_secs(60));
/// assert_eq!(patient.max_attempts(), 100);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    backoff: Backoff,
    max_attempts: u32,
    max_elapsed: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::exponential(Duration::from_millis(5), Duration::from_millis(500), 8)
            .with_max_elapsed(Duration::from_secs(5))
    }
}

impl RetryPolicy {
    /// One attempt, no retry: a conflict is reported at once.
    #[must_use]
    pub const fn none() -> Self {
        RetryPolicy {
            backoff: Backoff::Immediate,
            max_attempts: 1,
            max_elapsed: Duration::MAX,
        }
    }

    /// Up to `max_attempts` attempts, `delay` apart.
    #[must_use]
    pub const fn fixed(delay: Duration, max_attempts: u32) -> Self {
        RetryPolicy {
            backoff: Backoff::Fixed(delay),
            max_attempts: if max_attempts == 0 { 1 } else { max_attempts },
            max_elapsed: Duration::MAX,
        }
    }

    /// Up to `max_attempts` attempts with exponential backoff and full jitter between
    /// `initial` and `max`.
    #[must_use]
    pub const fn exponential(initial: Duration, max: Duration, max_attempts: u32) -> Self {
        RetryPolicy {
            backoff: Backoff::Exponential { initial, max },
            max_attempts: if max_attempts == 0 { 1 } else { max_attempts },
            max_elapsed: Duration::MAX,
        }
    }

    /// The same policy with at most `attempts` attempts (at least 1).
    #[must_use]
    pub const fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = if attempts == 0 { 1 } else { attempts };
        self
    }

    /// The same policy, giving up when a retry would start later than `elapsed` after the
    /// first attempt.
    #[must_use]
    pub const fn with_max_elapsed(mut self, elapsed: Duration) -> Self {
        self.max_elapsed = elapsed;
        self
    }

    /// The backoff between attempts.
    #[must_use]
    pub const fn backoff(&self) -> Backoff {
        self.backoff
    }

    /// The most attempts an operation makes.
    #[must_use]
    pub const fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The time after which no new attempt starts (`Duration::MAX`: unbounded).
    #[must_use]
    pub const fn max_elapsed(&self) -> Duration {
        self.max_elapsed
    }

    /// After `attempts_made` failed attempts, `elapsed` after the first one started: the
    /// delay before the next attempt, or `None` to give up.
    #[must_use]
    pub fn delay_before_retry(&self, attempts_made: u32, elapsed: Duration) -> Option<Duration> {
        if attempts_made >= self.max_attempts {
            return None;
        }
        let delay = match self.backoff {
            Backoff::Immediate => Duration::ZERO,
            Backoff::Fixed(delay) => delay,
            Backoff::Exponential { initial, max } => {
                let shift = attempts_made.saturating_sub(1).min(31);
                let bound = initial.saturating_mul(1u32 << shift).min(max);
                jitter(bound)
            }
        };
        if elapsed.saturating_add(delay) > self.max_elapsed {
            return None;
        }
        Some(delay)
    }
}

/// Uniform in `[0, bound]`.
fn jitter(bound: Duration) -> Duration {
    if bound.is_zero() {
        return bound;
    }
    let nanos = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rand::rng().random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_grows_and_is_capped_and_bounded() {
        let p = RetryPolicy::exponential(Duration::from_millis(10), Duration::from_millis(40), 10);
        for attempts in 1..10 {
            let d = p
                .delay_before_retry(attempts, Duration::ZERO)
                .expect("retry");
            let bound = Duration::from_millis(10 * (1 << (attempts - 1).min(2)));
            assert!(d <= bound, "attempt {attempts}: {d:?} > {bound:?}");
        }
        assert_eq!(p.delay_before_retry(10, Duration::ZERO), None);
        let timed = p.with_max_elapsed(Duration::from_millis(100));
        assert_eq!(
            timed.delay_before_retry(1, Duration::from_millis(101)),
            None
        );
    }

    #[test]
    fn none_never_retries_and_zero_attempts_means_one() {
        assert_eq!(
            RetryPolicy::none().delay_before_retry(1, Duration::ZERO),
            None
        );
        assert_eq!(RetryPolicy::fixed(Duration::ZERO, 0).max_attempts(), 1);
        let d = RetryPolicy::default();
        assert_eq!(d.max_attempts(), 8);
        assert_eq!(d.max_elapsed(), Duration::from_secs(5));
    }
}
