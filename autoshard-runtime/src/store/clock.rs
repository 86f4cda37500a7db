//! A server's clock, read at most once per [`FRESH`] and counted on between two readings:
//! what [`DocumentStore::now_ms`](super::DocumentStore::now_ms) answers on a store with a
//! server (Redis, PostgreSQL). Key groups read the clock to set a lease before each
//! commit that starts one (a one-shot commit on a Redis Cluster, a group's creation), and
//! a round trip to the server for each would cost them one step in the critical path.
//!
//! The answer between two readings is the last reading plus the time elapsed since its
//! reply came back here, less [`MARGIN`]: never ahead of the server's clock. The server
//! read its clock before it sent the reply, so by the time the reply is here, its clock
//! shows at least the reading, and both clocks then advance by the same time, up to
//! their difference in rate, which [`MARGIN`] covers over [`FRESH`] (2,000 parts per
//! million; clocks that NTP disciplines differ by far less). So a lease judged past by
//! this answer has passed by the server's clock, and a lease set from it ends no later
//! than one set from a reading. A server clock stepped backwards breaks this, as it
//! breaks every lease.

use crate::error::Result;
use crate::sync::lock;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a reading is counted on before the server's clock is read again.
pub(crate) const FRESH: Duration = Duration::from_millis(500);

/// How much an answer between readings stays behind the reading plus the time elapsed.
pub(crate) const MARGIN: Duration = Duration::from_millis(1);

/// The last reading of a server's clock (module docs).
#[derive(Debug, Default)]
pub(crate) struct ServerClock {
    last: Mutex<Option<Reading>>,
}

/// A reading of a server's clock, and when its reply came back.
#[derive(Clone, Copy, Debug)]
struct Reading {
    server_ms: u64,
    received: Instant,
}

impl Reading {
    /// The server's clock at `now` by this reading (module docs), or `None` once the
    /// reading is no longer fresh.
    fn at(self, now: Instant) -> Option<u64> {
        let elapsed = now.checked_duration_since(self.received)?;
        if elapsed >= FRESH {
            return None;
        }
        let counted = elapsed.saturating_sub(MARGIN).as_millis();
        Some(
            self.server_ms
                .saturating_add(u64::try_from(counted).unwrap_or(u64::MAX)),
        )
    }
}

impl ServerClock {
    /// The server's clock in milliseconds: counted on from the last reading while it is
    /// fresh, else read with `read` (module docs).
    pub(crate) async fn now_ms(&self, read: impl Future<Output = Result<u64>>) -> Result<u64> {
        self.now_ms_by(Instant::now, read).await
    }

    /// [`ServerClock::now_ms`] with the time here told by `here`.
    async fn now_ms_by(
        &self,
        here: impl Fn() -> Instant,
        read: impl Future<Output = Result<u64>>,
    ) -> Result<u64> {
        if let Some(ms) = self.last().and_then(|r| r.at(here())) {
            return Ok(ms);
        }
        let server_ms = read.await?;
        let reading = Reading {
            server_ms,
            received: here(),
        };
        *lock(&self.last) = Some(reading);
        Ok(server_ms)
    }

    fn last(&self) -> Option<Reading> {
        *lock(&self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(server_ms: u64, received: Instant) -> Reading {
        Reading {
            server_ms,
            received,
        }
    }

    #[test]
    fn a_fresh_reading_counts_on_with_the_time_elapsed_less_the_margin() {
        let received = Instant::now();
        let at = |ms: u64| reading(1_000, received).at(received + Duration::from_millis(ms));
        assert_eq!(at(0), Some(1_000));
        assert_eq!(at(1), Some(1_000));
        assert_eq!(at(2), Some(1_001));
        assert_eq!(at(250), Some(1_249));
        assert_eq!(at(499), Some(1_498));
    }

    #[test]
    fn a_reading_is_not_counted_on_once_stale() {
        let received = Instant::now();
        let r = reading(1_000, received);
        assert_eq!(r.at(received + FRESH), None);
        assert_eq!(r.at(received + FRESH * 10), None);
    }

    #[test]
    fn a_reading_from_after_now_is_not_counted_on() {
        let received = Instant::now() + Duration::from_secs(1);
        assert_eq!(reading(1_000, received).at(Instant::now()), None);
    }

    #[test]
    fn a_reading_near_the_end_of_time_saturates() {
        let received = Instant::now();
        let at = reading(u64::MAX - 1, received).at(received + Duration::from_millis(100));
        assert_eq!(at, Some(u64::MAX));
    }

    #[tokio::test]
    async fn the_clock_is_read_again_only_once_its_reading_is_stale() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let clock = ServerClock::default();
        let start = Instant::now();
        let (reads, server) = (AtomicU64::new(0), AtomicU64::new(5_000));
        let read = || async {
            reads.fetch_add(1, Ordering::SeqCst);
            Ok(server.load(Ordering::SeqCst))
        };
        let after = |ms: u64| move || start + Duration::from_millis(ms);
        assert_eq!(clock.now_ms_by(after(0), read()).await.unwrap(), 5_000);
        server.store(9_000, Ordering::SeqCst);
        assert_eq!(clock.now_ms_by(after(300), read()).await.unwrap(), 5_299);
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        assert_eq!(clock.now_ms_by(after(500), read()).await.unwrap(), 9_000);
        assert_eq!(clock.now_ms_by(after(501), read()).await.unwrap(), 9_000);
        assert_eq!(clock.now_ms_by(after(503), read()).await.unwrap(), 9_002);
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_reading_is_not_kept() {
        let clock = ServerClock::default();
        let failed = clock
            .now_ms(async { Err(crate::Error::backend("clock", "lost")) })
            .await;
        assert!(failed.is_err());
        assert!(clock.last().is_none());
    }
}
