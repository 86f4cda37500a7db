//! Connections to a standalone server (a small pool of multiplexed, reconnecting
//! `ConnectionManager`s, used round-robin) or to a Redis Cluster (one `ClusterConnection`,
//! which multiplexes over one connection per node and follows slot moves).
//!
//! A pooled standalone connection reconnects by itself after it sees its connection
//! closed, but not after a timeout: one the network stopped carrying without closing it
//! would time out every request until the operating system gives up on it. So a request
//! that times out has its pooled connection replaced ([`Pool`]), as a cluster connection
//! that stops answering is (below).
//!
//! A cluster connection that stops answering is replaced. While slots move between
//! masters (a node added and given slots, or drained), a `MOVED` answer makes redis-rs's
//! `ClusterConnection` (1.8) refresh its slot map, and that refresh can wait for ever:
//! it needs the write half of the connection's internal lock, a request in flight queued
//! for the read half before it (tokio's lock hands the lock to waiters in order, polled
//! or not), and the connection polls no request in flight until the refresh is done.
//! From then on every request waits in the connection's queue until its response
//! timeout, while a fresh connection from the same client answers at once
//! (`tests/it/redis_rebalance.rs` shows both; valkey-glide's fork of redis-rs fixed the
//! same deadlock by making that lock synchronous). So a request that times out or loses
//! its connection marks the connection it used stale, and one task connects anew
//! (bounded by the connect and response timeouts) and puts the fresh connection in its
//! place; requests in flight finish on the old one, whose task is left behind. A
//! timed-out write is an unknown outcome either way (the store contract), which the
//! mapper resolves by sending it again under its write id.
//!
//! redis-rs enforces the response timeout per attempt, and retries inside the connection
//! (after a reconnect, a `MOVED`, a `TRYAGAIN`); a request on a connection `connect_cluster`
//! made is also bounded as a whole, by every attempt's connect and response timeouts and
//! the waits between them (`ClusterConns::request_bound`): past that it fails as timed
//! out, whatever the connection is waiting for, so no call waits for ever.
//!
//! Nothing here holds per-request server state: the store never uses WATCH, so requests
//! of many tasks may share a connection safely (see the module docs of the store).

use super::RedisOptions;
use super::options::RETRY_WAIT_MS;
use super::slots::{Node, SlotTable, Slots};
use crate::error::{Error, Result};
use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClientBuilder;
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::SingleNodeRoutingInfo;
use ::redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// One connection handle, cheap to clone.
#[derive(Clone)]
pub(super) enum Conn {
    /// A pooled connection to a standalone server, which slot of the pool it is, the
    /// generation of that slot, and where to report it stale.
    Single(ConnectionManager, usize, u64, Arc<Pool>),
    /// A cluster connection, the generation it is of, and where to report it stale.
    Cluster(ClusterConnection, u64, Arc<ClusterConns>),
}

impl Conn {
    /// Sends `pipeline` (not atomic; its replies come back as they are, errors included)
    /// to the cluster node `node`, whatever slots its keys are in (see `slots`). On a
    /// standalone server, to the server.
    pub(super) async fn on_node(
        &mut self,
        pipeline: Pipeline,
        count: usize,
        node: &Node,
    ) -> ::redis::RedisResult<Vec<Value>> {
        match self {
            Conn::Single(c, slot, generation, pool) => {
                let answer = c.req_packed_commands(&pipeline, 0, count).await;
                pool.watch(*slot, *generation, answer)
            }
            Conn::Cluster(c, generation, conns) => {
                let route = SingleNodeRoutingInfo::ByAddress {
                    host: node.host.clone(),
                    port: node.port,
                };
                let answer = c.route_pipeline(pipeline, 0, count, route);
                conns.watch(*generation, bounded(conns.request_bound, answer).await)
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c, slot, generation, pool) => {
                let (slot, generation, pool) = (*slot, *generation, pool.clone());
                let answer = c.req_packed_command(cmd);
                Box::pin(async move { pool.watch(slot, generation, answer.await) })
            }
            Conn::Cluster(c, generation, conns) => {
                let (generation, conns) = (*generation, conns.clone());
                let answer = c.req_packed_command(cmd);
                Box::pin(async move {
                    conns.watch(generation, bounded(conns.request_bound, answer).await)
                })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c, slot, generation, pool) => {
                let (slot, generation, pool) = (*slot, *generation, pool.clone());
                let answer = c.req_packed_commands(pipeline, offset, count);
                Box::pin(async move { pool.watch(slot, generation, answer.await) })
            }
            Conn::Cluster(c, generation, conns) => {
                let (generation, conns) = (*generation, conns.clone());
                let answer = c.req_packed_commands(pipeline, offset, count);
                Box::pin(async move {
                    conns.watch(generation, bounded(conns.request_bound, answer).await)
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c, ..) => c.get_db(),
            Conn::Cluster(c, ..) => c.get_db(),
        }
    }
}

/// The connection to a cluster, replaced by a fresh one from `client` when a request on
/// it times out or loses its connection (module docs).
pub(super) struct ClusterConns {
    client: ::redis::cluster::ClusterClient,
    current: RwLock<(ClusterConnection, u64)>,
    /// Whether a task is connecting anew.
    replacing: AtomicBool,
    /// How many connections were replaced.
    replaced: AtomicU64,
    /// How long connecting anew may take before it is given up (and tried again at the
    /// next failed request).
    connect_bound: Duration,
    /// How long one request may take, its retries included, before it fails as timed
    /// out (module docs); `None` for a client built elsewhere, whose timeouts apply alone.
    request_bound: Option<Duration>,
    /// The master of each slot, for reads sent to a node at once (`slots`).
    slots: Slots,
}

/// `answer`, or a timeout error (which marks the connection stale) once `bound` has
/// passed; `answer` alone without a bound.
async fn bounded<T>(
    bound: Option<Duration>,
    answer: impl Future<Output = ::redis::RedisResult<T>>,
) -> ::redis::RedisResult<T> {
    let Some(bound) = bound else {
        return answer.await;
    };
    tokio::time::timeout(bound, answer)
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {bound:?}, every attempt's timeouts and retries"),
            )
            .into())
        })
}

impl ClusterConns {
    fn get(self: &Arc<Self>) -> Conn {
        let current = self
            .current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Conn::Cluster(current.0.clone(), current.1, self.clone())
    }

    /// Passes `answer` through; a timeout or a lost connection on generation
    /// `generation` has a task replace it (one at a time; a request on an older
    /// generation changes nothing).
    fn watch<T>(
        self: &Arc<Self>,
        generation: u64,
        answer: ::redis::RedisResult<T>,
    ) -> ::redis::RedisResult<T> {
        if let Err(e) = &answer {
            let stale = e.is_timeout() || e.is_io_error() || e.is_connection_dropped();
            let current = self.current.read().map_or(0, |c| c.1);
            if stale && generation == current && !self.replacing.swap(true, Ordering::SeqCst) {
                let conns = self.clone();
                tokio::spawn(async move { conns.replace(generation).await });
            }
        }
        answer
    }

    /// The slot table, or `None` while there is none; then one task fetches it (see
    /// `slots` for how often).
    fn slot_table(self: &Arc<Self>) -> Option<Arc<SlotTable>> {
        let table = self.slots.table();
        if table.is_none() && self.slots.may_fetch() {
            let conns = self.clone();
            tokio::spawn(async move { conns.fetch_slots().await });
        }
        table
    }

    /// Reads `CLUSTER SLOTS` into the slot table.
    async fn fetch_slots(self: &Arc<Self>) {
        let reply = ::redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async::<Value>(&mut self.get())
            .await;
        let table = match reply {
            Ok(reply) => SlotTable::parse(&reply),
            Err(error) => {
                tracing::debug!(%error, "Redis Cluster: CLUSTER SLOTS failed; reads go key by key");
                None
            }
        };
        self.slots.fetched(table);
    }

    async fn replace(&self, generation: u64) {
        let fresh = tokio::time::timeout(self.connect_bound, self.client.get_async_connection())
            .await
            .unwrap_or_else(|_| {
                Err(::redis::RedisError::from((
                    ::redis::ErrorKind::Io,
                    "connecting anew timed out",
                )))
            });
        match fresh {
            Ok(fresh) => {
                let mut current = self
                    .current
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if current.1 == generation {
                    *current = (fresh, generation + 1);
                    self.replaced.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        generation = generation + 1,
                        "Redis Cluster: a connection that stopped answering was replaced"
                    );
                }
            }
            Err(error) => {
                tracing::warn!(%error, "Redis Cluster: connecting anew failed; the next failed request tries again");
            }
        }
        self.replacing.store(false, Ordering::SeqCst);
    }
}

/// The pooled connections to a standalone server, used round-robin. A connection whose
/// request timed out is replaced by a fresh one (module docs): redis-rs's
/// `ConnectionManager` reconnects after a connection it sees closed, but not after a
/// timeout, so a connection the network stopped carrying without closing it (a
/// partition, a firewall or load balancer that dropped its state) would time out every
/// request sent on it until the operating system gives up on it.
pub(super) struct Pool {
    client: ::redis::Client,
    config: ConnectionManagerConfig,
    /// Each slot's connection and its generation (how many times it was replaced).
    slots: Vec<RwLock<(ConnectionManager, u64)>>,
    /// Whether a task is connecting anew for each slot.
    replacing: Vec<AtomicBool>,
    next: AtomicUsize,
    /// How long connecting anew may take before it is given up (and tried again at the
    /// next timed-out request).
    connect_bound: Duration,
}

impl Pool {
    fn get(self: &Arc<Self>) -> Conn {
        let slot = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let current = self.slots[slot]
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Conn::Single(current.0.clone(), slot, current.1, self.clone())
    }

    /// Passes `answer` through; a timeout on generation `generation` of `slot` has a task
    /// replace that connection (one at a time per slot; a request on an older
    /// generation changes nothing).
    fn watch<T>(
        self: &Arc<Self>,
        slot: usize,
        generation: u64,
        answer: ::redis::RedisResult<T>,
    ) -> ::redis::RedisResult<T> {
        if let Err(e) = &answer
            && e.is_timeout()
        {
            let current = self.slots[slot].read().map_or(0, |c| c.1);
            if generation == current && !self.replacing[slot].swap(true, Ordering::SeqCst) {
                let pool = self.clone();
                tokio::spawn(async move { pool.replace(slot, generation).await });
            }
        }
        answer
    }

    async fn replace(&self, slot: usize, generation: u64) {
        let fresh = ConnectionManager::new_with_config(self.client.clone(), self.config.clone());
        match tokio::time::timeout(self.connect_bound, fresh).await {
            Ok(Ok(fresh)) => {
                let mut current = self.slots[slot]
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if current.1 == generation {
                    *current = (fresh, generation + 1);
                    tracing::info!(
                        slot,
                        "Redis: a connection whose request timed out was replaced"
                    );
                }
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "Redis: connecting anew failed; the next timed-out request tries again");
            }
            Err(_) => {
                tracing::warn!(
                    "Redis: connecting anew timed out; the next timed-out request tries again"
                );
            }
        }
        self.replacing[slot].store(false, Ordering::SeqCst);
    }
}

enum Kind {
    Standalone(Arc<Pool>),
    Cluster(Arc<ClusterConns>),
}

/// The connections of one store, and the address(es) they talk to (for error messages;
/// never the URL, which may hold a password).
pub(super) struct Connections {
    kind: Kind,
    endpoint: String,
}

impl fmt::Debug for Connections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mode, pool, replaced) = match &self.kind {
            Kind::Standalone(pool) => ("standalone", pool.slots.len(), 0),
            Kind::Cluster(conns) => ("cluster", 1, conns.replaced.load(Ordering::Relaxed)),
        };
        f.debug_struct("Connections")
            .field("mode", &mode)
            .field("endpoint", &self.endpoint)
            .field("pool", &pool)
            .field("replaced", &replaced)
            .finish()
    }
}

/// The `host:port` of a URL, for messages; the URL itself may carry a password.
fn address(url: &str) -> Result<String> {
    match url.into_connection_info() {
        Ok(info) => Ok(info.addr().to_string()),
        Err(err) => Err(Error::backend(
            "invalid Redis URL (not shown: it may hold a password)",
            err,
        )),
    }
}

impl Connections {
    /// Opens `options.pool_size` connections to one server, failing if the first does.
    pub(super) async fn standalone(url: &str, options: &RedisOptions) -> Result<Self> {
        let endpoint = address(url)?;
        let client = ::redis::Client::open(url)
            .map_err(|err| Error::backend(format!("connecting to Redis at {endpoint}"), err))?;
        Self::standalone_client(client, options).await
    }

    /// Opens `options.pool_size` connections through `client`, failing if the first does.
    pub(super) async fn standalone_client(
        client: ::redis::Client,
        options: &RedisOptions,
    ) -> Result<Self> {
        let endpoint = client.get_connection_info().addr().to_string();
        let fail = |err| Error::backend(format!("connecting to Redis at {endpoint}"), err);
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(Some(options.request_timeout()))
            .set_number_of_retries(options.reconnect_retries)
            .set_min_delay(std::time::Duration::from_millis(20))
            .set_max_delay(std::time::Duration::from_millis(500));
        let mut pool = Vec::with_capacity(options.pool_size);
        for _ in 0..options.pool_size.max(1) {
            let mut manager = ConnectionManager::new_with_config(client.clone(), config.clone())
                .await
                .map_err(fail)?;
            if pool.is_empty() {
                // A server that wants a password accepts the connection and refuses the
                // first command: find out now, not at the first write.
                ::redis::cmd("PING")
                    .query_async::<()>(&mut manager)
                    .await
                    .map_err(fail)?;
            }
            pool.push(manager);
        }
        tracing::debug!(%endpoint, pool = pool.len(), "connected to Redis");
        let pool = Pool {
            client,
            config,
            replacing: pool.iter().map(|_| AtomicBool::new(false)).collect(),
            slots: pool.into_iter().map(|c| RwLock::new((c, 0))).collect(),
            next: AtomicUsize::new(0),
            // Every attempt of connecting anew, with the waits between them.
            connect_bound: options.cluster_bounds().1,
        };
        Ok(Connections {
            kind: Kind::Standalone(Arc::new(pool)),
            endpoint,
        })
    }

    /// Connects to a cluster through any of its nodes.
    pub(super) async fn cluster(urls: &[&str], options: &RedisOptions) -> Result<Self> {
        let endpoint = urls
            .iter()
            .map(|url| address(url))
            .collect::<Result<Vec<_>>>()?
            .join(", ");
        if urls.is_empty() {
            return Err(Error::Invalid(
                "connect_cluster needs at least one node URL".into(),
            ));
        }
        let fail = |err| Error::backend(format!("connecting to Redis Cluster at {endpoint}"), err);
        let client = ClusterClientBuilder::new(urls.to_vec())
            .connection_timeout(options.connect_timeout)
            .response_timeout(options.request_timeout())
            .retries(options.reconnect_retries as u32)
            .min_retry_wait(RETRY_WAIT_MS.0)
            .max_retry_wait(RETRY_WAIT_MS.1)
            .build()
            .map_err(fail)?;
        let (connect, request) = options.cluster_bounds();
        Self::cluster_client(&client, endpoint, connect, Some(request)).await
    }

    /// Connects to a cluster through `client`, checking that it answers; `endpoint` names
    /// it in messages; `connect_bound` and `request_bound` as in [`ClusterConns`].
    pub(super) async fn cluster_client(
        client: &::redis::cluster::ClusterClient,
        endpoint: String,
        connect_bound: Duration,
        request_bound: Option<Duration>,
    ) -> Result<Self> {
        let fail = |err| Error::backend(format!("connecting to Redis Cluster at {endpoint}"), err);
        let conn = client.get_async_connection().await.map_err(fail)?;
        let conns = Arc::new(ClusterConns {
            client: client.clone(),
            current: RwLock::new((conn, 0)),
            replacing: AtomicBool::new(false),
            replaced: AtomicU64::new(0),
            connect_bound,
            request_bound,
            slots: Slots::default(),
        });
        // The client connects lazily to some nodes; make sure the cluster answers now.
        ::redis::cmd("PING")
            .query_async::<Value>(&mut conns.get())
            .await
            .map_err(fail)?;
        if conns.slots.may_fetch() {
            conns.fetch_slots().await;
        }
        tracing::debug!(%endpoint, "connected to Redis Cluster");
        Ok(Connections {
            kind: Kind::Cluster(conns),
            endpoint,
        })
    }

    /// A connection for one request (round-robin over the pool).
    pub(super) fn get(&self) -> Conn {
        match &self.kind {
            Kind::Standalone(pool) => pool.get(),
            Kind::Cluster(conns) => conns.get(),
        }
    }

    /// Runs `request` on a connection; on a standalone server again on the next pooled
    /// connection while the one it took turns out to have been dropped, at most once per
    /// pooled connection. A connection that the server or the network closed while it
    /// sat idle in the pool (a restart, a cut) fails its next request, after which it
    /// reconnects: a request need not fail for that. Only for requests that may arrive
    /// twice: reads, and merges (applied at most once under their write id). Any other
    /// write is never sent again here: its outcome is unknown, which the mapper resolves
    /// under its write id. Refused connections (no server there) are not tried again:
    /// connecting already waited for it.
    pub(super) async fn again_if_dropped<T, F, Fut>(
        &self,
        mut request: F,
    ) -> ::redis::RedisResult<T>
    where
        F: FnMut(Conn) -> Fut,
        Fut: Future<Output = ::redis::RedisResult<T>>,
    {
        let attempts = match &self.kind {
            Kind::Standalone(pool) => pool.slots.len() + 1,
            Kind::Cluster(_) => 1,
        };
        let mut sent = 0;
        loop {
            sent += 1;
            match request(self.get()).await {
                Err(e) if sent < attempts && dropped(&e) => {
                    tracing::debug!(error = %e, "Redis: a request met a dropped connection; sent again");
                }
                answer => return answer,
            }
        }
    }

    /// The master of each cluster slot as last fetched (`slots`); `None` on a standalone
    /// server, and while the table is being fetched again.
    pub(super) fn slot_table(&self) -> Option<Arc<SlotTable>> {
        match &self.kind {
            Kind::Standalone(_) => None,
            Kind::Cluster(conns) => conns.slot_table(),
        }
    }

    /// Drops `stale`, which sent a read to a node that no longer serves one of its keys
    /// (`slots`).
    pub(super) fn drop_slot_table(&self, stale: &Arc<SlotTable>) {
        if let Kind::Cluster(conns) = &self.kind {
            conns.slots.drop_stale(stale);
        }
    }

    /// Whether this is a Redis Cluster.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self.kind, Kind::Cluster(_))
    }

    /// The address(es), for messages.
    pub(super) fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

/// Whether `e` says the connection it was sent on had been closed (not that no server
/// listens, nor a timeout).
fn dropped(e: &::redis::RedisError) -> bool {
    e.is_connection_dropped() && !e.is_connection_refusal() && !e.is_timeout()
}

#[cfg(test)]
mod tests {
    use super::bounded;
    use std::time::Duration;

    #[tokio::test]
    async fn a_request_past_its_bound_fails_as_timed_out() {
        let never = std::future::pending::<::redis::RedisResult<()>>();
        let error = bounded(Some(Duration::from_millis(5)), never)
            .await
            .unwrap_err();
        assert!(error.is_timeout(), "{error}");
        let answered = bounded(Some(Duration::from_mins(1)), async { Ok(7) }).await;
        assert_eq!(answered.unwrap(), 7);
        assert_eq!(bounded(None, async { Ok(8) }).await.unwrap(), 8);
    }
}
