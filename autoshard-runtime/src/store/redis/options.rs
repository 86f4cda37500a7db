//! [`RedisOptions`]: how a [`super::RedisStore`] connects and names its keys.

use super::names::Names;
use crate::error::{Error, Result};
use std::time::Duration;

/// Options of a [`RedisStore`](super::RedisStore); start from [`RedisOptions::default`].
///
/// ```
/// use autoshard::store::redis::RedisOptions;
/// use std::time::Duration;
///
/// let options = RedisOptions::default()
///     .namespace("votes-app")
///     .pool_size(4)
///     .response_timeout(Duration::from_secs(2));
/// assert_eq!(options.namespace, "votes-app");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedisOptions {
    /// Prefix of every Redis key the store uses, followed by `:` (none when empty).
    /// Must not contain `{` or `}`. Default `autoshard`.
    pub namespace: String,
    /// Multiplexed connections to a standalone server, used round-robin. Default 2.
    /// (A cluster connection multiplexes over one connection per node.)
    pub pool_size: usize,
    /// Timeout of each connection attempt. Default 2 s.
    pub connect_timeout: Duration,
    /// Timeout of each request. Default 5 s. With
    /// [`RedisOptions::wait_for_replicas`], a write's request also waits up to
    /// [`RedisOptions::replica_timeout`] for the replicas on top of this.
    pub response_timeout: Duration,
    /// Reconnection attempts after a connection drops (and at connect). Default 2. On a
    /// Redis Cluster, the retries of one request: with them, a request fails as timed
    /// out after at most `(reconnect_retries + 1) × (connect_timeout + response_timeout)`
    /// (with the replicas' wait, when writes wait for them) and half a second between
    /// attempts, 22 s by default, whatever it waits for.
    pub reconnect_retries: usize,
    /// Replicas that must acknowledge each write before it succeeds (`WAIT` after the
    /// write script); 0, the default, waits for none. See
    /// [`RedisOptions::wait_for_replicas`].
    pub wait_for_replicas: u32,
    /// How long a write waits for [`RedisOptions::wait_for_replicas`] replicas. Default
    /// 1 s.
    pub replica_timeout: Duration,
}

/// The least and most a Redis Cluster connection waits between a request's attempts, in
/// milliseconds.
pub(super) const RETRY_WAIT_MS: (u64, u64) = (20, 500);

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            namespace: "autoshard".to_owned(),
            pool_size: 2,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(5),
            reconnect_retries: 2,
            wait_for_replicas: 0,
            replica_timeout: Duration::from_secs(1),
        }
    }
}

impl RedisOptions {
    /// Sets [`RedisOptions::namespace`].
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Sets [`RedisOptions::pool_size`] (at least 1).
    #[must_use]
    pub fn pool_size(mut self, pool_size: usize) -> Self {
        self.pool_size = pool_size.max(1);
        self
    }

    /// Sets [`RedisOptions::connect_timeout`].
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`RedisOptions::response_timeout`].
    #[must_use]
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Sets [`RedisOptions::reconnect_retries`].
    #[must_use]
    pub fn reconnect_retries(mut self, retries: usize) -> Self {
        self.reconnect_retries = retries;
        self
    }

    /// Makes every write wait until `replicas` replicas acknowledged it, for at most
    /// `timeout`, so that a failover (a replica promoted after its master died) loses no
    /// write that succeeded.
    ///
    /// Without it (the default), Redis replicates asynchronously: a write the master
    /// answered but had not yet sent to a replica is lost when that replica is promoted,
    /// although its writer was told it succeeded. With it, a write that fewer replicas
    /// acknowledged in time fails with [`crate::Error::Backend`], an unknown outcome: the
    /// mapper keeps the change with its write id, and the next save of the entity sends
    /// it again, applied exactly once. Each write then costs a round trip to a replica,
    /// and fails while its master has fewer than `replicas` replicas (after a failover,
    /// until the old master rejoins as a replica or another one is added).
    ///
    /// ```
    /// use autoshard::store::redis::RedisOptions;
    /// use std::time::Duration;
    ///
    /// // A cluster with one replica per master: a failover keeps every vote that succeeded.
    /// let options = RedisOptions::default().wait_for_replicas(1, Duration::from_millis(500));
    /// assert_eq!(options.wait_for_replicas, 1);
    /// ```
    #[must_use]
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_for_replicas = replicas;
        self.replica_timeout = timeout;
        self
    }

    /// How long a request may take before the client gives up on it: the response
    /// timeout, plus the replica timeout when writes wait for replicas (a write's `WAIT`
    /// answers only once the replicas did or that time ran out).
    pub(super) fn request_timeout(&self) -> Duration {
        if self.wait_for_replicas > 0 {
            self.response_timeout.saturating_add(self.replica_timeout)
        } else {
            self.response_timeout
        }
    }

    /// On a Redis Cluster: how long connecting anew may take (a connect and a first
    /// answer), and how long one request may take with all its attempts and the waits
    /// between them ([`RETRY_WAIT_MS`]), past which it fails as timed out.
    pub(super) fn cluster_bounds(&self) -> (Duration, Duration) {
        let connect = self.connect_timeout.saturating_add(self.request_timeout());
        let retries = u32::try_from(self.reconnect_retries).unwrap_or(u32::MAX);
        let waits = Duration::from_millis(RETRY_WAIT_MS.1).saturating_mul(retries);
        let request = connect
            .saturating_mul(retries.saturating_add(1))
            .saturating_add(waits);
        (connect, request)
    }

    pub(super) fn names(&self) -> Result<Names> {
        let prefix = if self.namespace.is_empty() {
            String::new()
        } else {
            format!("{}:", self.namespace)
        };
        Names::new(&prefix).ok_or_else(|| {
            Error::Invalid(format!(
                "Redis namespace `{}` must not contain `{{` or `}}` (it would move hash tags)",
                self.namespace
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::RedisOptions;
    use std::time::Duration;

    #[test]
    fn a_cluster_request_is_bounded_by_every_attempt_and_the_waits_between() {
        let (connect, request) = RedisOptions::default().cluster_bounds();
        assert_eq!(connect, Duration::from_secs(7));
        assert_eq!(request, Duration::from_secs(22));
        let replicas = RedisOptions::default().wait_for_replicas(1, Duration::from_secs(1));
        assert_eq!(replicas.cluster_bounds().1, Duration::from_secs(25));
        let mut huge = RedisOptions::default()
            .connect_timeout(Duration::MAX)
            .response_timeout(Duration::MAX)
            .wait_for_replicas(1, Duration::MAX);
        huge.reconnect_retries = usize::MAX;
        assert_eq!(huge.cluster_bounds(), (Duration::MAX, Duration::MAX));
    }
}
