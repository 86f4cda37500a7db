//! Running a write script, and with [`RedisOptions::wait_for_replicas`] waiting until
//! replicas hold it.
//!
//! Redis replicates asynchronously: a master answers a write before any replica has it.
//! When the master dies and a replica is promoted (a Redis Cluster failover, or Sentinel),
//! the writes the replica had not received yet are gone, although their writers were
//! told they succeeded; a mapper does not send a change again once it was answered.
//!
//! With `wait_for_replicas(n, timeout)`, each write script (`commit`, `insert`, `put`,
//! `delete`, `merge`) is followed by `WAIT n timeout` in the same pipeline, so on the
//! same connection: the server answers it once `n` replicas acknowledged everything the
//! connection wrote before it, or at the timeout with how many did. Fewer than `n` makes
//! the write [`crate::Error::Backend`]: an unknown outcome, as a lost reply is (the
//! master applied it; a failover may still lose it). The mapper then keeps the change
//! with its write id and sends it again on the next save: the write record, replicated
//! in the same step as the value, tells the new master whether it holds the change, so
//! it applies exactly once. A write answered `Ok` is on `n` replicas, and a Redis
//! Cluster promotes the replica with the most recent data, so with one replica per
//! master and `n = 1` a failover loses no acknowledged write.
//!
//! The scan-index updates a cluster makes around a script (module docs of the store)
//! are not waited for: an index entry lost in a failover hides a root document or a
//! static shard from scans of its kind until it is written again, never a value from a
//! load.
//!
//! What it costs: a write returns after a round trip to the slowest of the `n` replicas,
//! and the commands queued behind it on the same multiplexed connection wait with it.
//! A promoted master without a replica fails every write until one joins.

use super::call::ScriptCall;
use super::{RedisOptions, RedisStore};
use crate::error::Result;
use ::redis::{ErrorKind, ServerErrorKind, Value};
use std::fmt;
use std::time::Duration;

/// The replicas every write waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Replicas {
    count: u32,
    timeout: Duration,
}

impl Replicas {
    /// What `options` ask for; `None` when writes do not wait.
    pub(super) fn from_options(options: &RedisOptions) -> Option<Self> {
        (options.wait_for_replicas > 0).then_some(Replicas {
            count: options.wait_for_replicas,
            timeout: options.replica_timeout,
        })
    }

    /// `WAIT`'s timeout in milliseconds: at least 1 (0 would wait for ever).
    fn timeout_ms(self) -> u64 {
        u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

impl RedisStore {
    /// Runs the write script `call`, then waits for the replicas the options ask for
    /// (module docs); `what` names the write in errors (built only for one).
    pub(super) async fn run_write<W: fmt::Display>(
        &self,
        call: &ScriptCall<'_>,
        what: impl Fn() -> W + Send + Sync,
    ) -> Result<Value> {
        let mut conn = self.conns.get();
        let Some(replicas) = self.replicas else {
            return call
                .run(&mut conn)
                .await
                .map_err(|e| self.backend(what(), e));
        };
        let mut pipe = ::redis::pipe();
        pipe.add_command(call.cmd().clone())
            .cmd("WAIT")
            .arg(replicas.count)
            .arg(replicas.timeout_ms());
        let answer = match pipe.query_async::<(Value, u64)>(&mut conn).await {
            // A server that does not know the script (a fresh or promoted one) ran
            // nothing: load it and send the pipeline again.
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                call.load(&mut conn)
                    .await
                    .map_err(|e| self.backend(what(), e))?;
                pipe.query_async::<(Value, u64)>(&mut conn).await
            }
            answer => answer,
        };
        let (reply, acknowledged) = answer.map_err(|e| self.backend(what(), e))?;
        if acknowledged < u64::from(replicas.count) {
            return Err(self.backend(
                what(),
                format!(
                    "{acknowledged} of the {} replicas asked for acknowledged the write \
                     within {:?}; it may be lost in a failover",
                    replicas.count, replicas.timeout
                ),
            ));
        }
        Ok(reply)
    }
}
