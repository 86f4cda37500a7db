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
//! What a read showed: an answer that acknowledges a write because a read found it
//! stored (a write id recorded, a marker present) rests on state that may be on the
//! master alone: the write it stands for may have failed its `WAIT`; a read sends no
//! `WAIT` at all; and from Redis 7.2 on, a `WAIT` after a script that wrote nothing
//! covers only what its connection wrote before, which need not include that write
//! (another pooled connection, another process made it).
//! [`DocumentStore::make_durable`](crate::store::DocumentStore::make_durable) makes it
//! durable: a write that changes nothing (`INCRBY` of the entity group's version counter
//! by 0, in the slot of what was read) and `WAIT` on the same connection. A master's
//! replication stream is ordered, so a replica that acknowledged that write holds
//! everything the read saw. `merge.lua` makes the same write itself when it answers
//! `already`, so the `WAIT` after it covers the write it stands for. Only answers that
//! rest on a read pay it: a write that applies its change is covered by its own `WAIT`.
//!
//! The scan-index updates a cluster makes around a script (module docs of the store)
//! are not waited for: an index entry lost in a failover hides a root document or a
//! static shard from scans of its kind until it is written again, never a value from a
//! load.
//!
//! A merge that meets a pooled connection the server or the network closed is sent again
//! on the next one (`run_merge_write`): it applies at most once under its write id, and
//! a copy that finds it applied answers `already` after the write above, so the `WAIT`
//! after it covers the first copy too. Other writes answer the error, their outcome
//! unknown.
//!
//! What it costs: a write returns after a round trip to the slowest of the `n` replicas,
//! and the commands queued behind it on the same multiplexed connection wait with it.
//! A promoted master without a replica fails every write until one joins.

use super::call::ScriptCall;
use super::connection::Conn;
use super::{RedisOptions, RedisStore};
use crate::error::Result;
use crate::key::Key;
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
        let answer = self.send_write(self.conns.get(), call).await;
        self.acknowledged(answer, what)
    }

    /// [`RedisStore::run_write`] of a merge, which applies at most once under its write
    /// id however often it arrives: sent again on the next pooled connection when the
    /// one it took turns out to have been dropped (`Connections::again_if_dropped`), so
    /// a restart or a cut that closed idle pooled connections fails no merge. A server
    /// that received the first one and applied it answers the second `already`.
    pub(super) async fn run_merge_write<W: fmt::Display>(
        &self,
        call: &ScriptCall<'_>,
        what: impl Fn() -> W + Send + Sync,
    ) -> Result<Value> {
        let answer = self
            .conns
            .again_if_dropped(|conn| self.send_write(conn, call))
            .await;
        self.acknowledged(answer, what)
    }

    /// Sends `call` on `conn`, with `WAIT` for the replicas the options ask for in the
    /// same pipeline: the reply, and how many replicas acknowledged (`None` without
    /// `WAIT`).
    async fn send_write(
        &self,
        mut conn: Conn,
        call: &ScriptCall<'_>,
    ) -> ::redis::RedisResult<(Value, Option<u64>)> {
        match self.replicas {
            None => call.run(&mut conn).await.map(|reply| (reply, None)),
            Some(replicas) => {
                let (reply, acknowledged) = self
                    .send_and_wait(&mut conn, call.cmd(), Some(call), replicas)
                    .await?;
                Ok((reply, Some(acknowledged)))
            }
        }
    }

    /// The reply of a write, or the error that it failed or that fewer replicas than
    /// asked for acknowledged it in time.
    fn acknowledged<W: fmt::Display>(
        &self,
        answer: ::redis::RedisResult<(Value, Option<u64>)>,
        what: impl Fn() -> W + Send + Sync,
    ) -> Result<Value> {
        let (reply, acknowledged) = answer.map_err(|e| self.backend(what(), e))?;
        if let (Some(replicas), Some(acknowledged)) = (self.replicas, acknowledged)
            && acknowledged < u64::from(replicas.count)
        {
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

    /// [`DocumentStore::make_durable`](crate::store::DocumentStore::make_durable) (module
    /// docs, "What a read showed"): per master that holds one of `keys` (per entity
    /// group on a cluster, the one server otherwise), a write that changes nothing, then
    /// `WAIT` on the same connection. Nothing to do without replicas to wait for.
    pub(super) async fn make_durable(&self, keys: &[Key]) -> Result<()> {
        let Some(replicas) = self.replicas else {
            return Ok(());
        };
        let mut groups: Vec<&Key> = Vec::new();
        for key in keys {
            if groups.is_empty() || (self.is_cluster() && !groups.iter().any(|g| g.same_group(key)))
            {
                groups.push(key);
            }
        }
        futures::future::try_join_all(groups.into_iter().map(|key| {
            let mut touch = ::redis::cmd("INCRBY");
            touch.arg(self.names.counter(key)).arg(0);
            async move {
                let what = || format!("making what was read of `{key}` durable");
                let mut conn = self.conns.get();
                let answer = self.send_and_wait(&mut conn, &touch, None, replicas).await;
                self.acknowledged(answer.map(|(reply, n)| (reply, Some(n))), what)
            }
        }))
        .await
        .map(drop)
    }

    /// Sends `cmd` and `WAIT` for `replicas` in one pipeline, on `conn`: the reply and
    /// how many replicas acknowledged it. `script`: the call `cmd` is, loaded and sent
    /// again when the server does not know it.
    async fn send_and_wait(
        &self,
        conn: &mut Conn,
        cmd: &::redis::Cmd,
        script: Option<&ScriptCall<'_>>,
        replicas: Replicas,
    ) -> ::redis::RedisResult<(Value, u64)> {
        let mut pipe = ::redis::pipe();
        pipe.add_command(cmd.clone())
            .cmd("WAIT")
            .arg(replicas.count)
            .arg(replicas.timeout_ms());
        match (pipe.query_async::<(Value, u64)>(conn).await, script) {
            // A server that does not know the script (a fresh or promoted one) ran
            // nothing: load it and send the pipeline again.
            (Err(e), Some(call)) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                call.load(conn).await?;
                pipe.query_async::<(Value, u64)>(conn).await
            }
            (answer, _) => answer,
        }
    }
}
