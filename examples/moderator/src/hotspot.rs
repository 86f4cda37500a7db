//! The hot-spot mode: `C` concurrent clients vote on ONE question as fast as they can
//! (closed loop: each sends its next vote when the last one answered), naive versus
//! autoshard versus raw `HINCRBY` on the same Redis, for each `C` in one run.
//!
//! `HINCRBY` is the ceiling: one round trip, no read, no transaction. The ratio of each
//! variant's throughput to it says what the mapper's transactions cost on a hot spot.
//! On the embedded stores there is no `HINCRBY`, and the ratio is left out.

use crate::backend::Backend;
use crate::bench::{insert_question, vote, votes_of, Strategy};
use crate::progress::Progress;
use autoshard::prelude::*;
use futures::future::BoxFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The hot-spot workload.
#[derive(Clone, Debug)]
pub struct HotspotConfig {
    /// The numbers of concurrent clients to try.
    pub clients: Vec<usize>,
    /// How long each client count runs, per target.
    pub duration: Duration,
    /// Retry policy of the naive and autoshard votes.
    pub retry: RetryPolicy,
}

impl Default for HotspotConfig {
    fn default() -> Self {
        HotspotConfig {
            clients: vec![1, 8, 32, 64],
            duration: Duration::from_secs(3),
            retry: RetryPolicy::default(),
        }
    }
}

/// What one target did with `clients` clients.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HotspotRow {
    /// Concurrent clients.
    pub clients: usize,
    /// `raw HINCRBY`, `naive` or `autoshard`.
    pub target: String,
    /// Votes that committed.
    pub committed: u64,
    /// Votes that failed (contention after retries, or a store error).
    pub failed: u64,
    /// Committed votes per second.
    pub per_sec: f64,
    /// `per_sec` divided by raw `HINCRBY`'s with the same clients (Redis only).
    pub ratio_to_hincrby: Option<f64>,
    /// Share of transaction attempts that hit a conflict, in % (`None` for raw
    /// `HINCRBY`, which has no transaction).
    pub conflict_pct: Option<f64>,
    /// Whether the counter read back equals `committed`.
    pub total_matches: bool,
}

/// Runs every client count against every target.
pub async fn run(
    backend: &Backend,
    namespace: &str,
    config: &HotspotConfig,
    progress: Progress,
) -> Result<Vec<HotspotRow>> {
    let raw = match backend {
        Backend::Redis(url) => Some(RawRedis::connect_standalone(url).await?),
        Backend::RedisCluster(urls) => Some(RawRedis::connect_cluster(urls).await?),
        Backend::Memory | Backend::Modelled(_) => None,
    };
    let mut rows = Vec::new();
    for &clients in &config.clients {
        let mut raw_rate = None;
        if let Some(raw) = &raw {
            let key = format!("{namespace}-c{clients}:hincrby");
            let (r, k) = (raw.clone(), key.clone());
            let op: Op = Arc::new(move || {
                let (r, k) = (r.clone(), k.clone());
                Box::pin(async move { r.hincrby(&k).await })
            });
            let bar = progress.bar(
                secs(config.duration),
                &format!("{clients:>2} clients: raw HINCRBY"),
            );
            let (committed, failed, per_sec) = hammer(clients, config.duration, op, &bar).await;
            let found = raw.hget(&key).await?;
            raw_rate = Some(per_sec);
            rows.push(HotspotRow {
                clients,
                target: "raw HINCRBY".into(),
                committed,
                failed,
                per_sec,
                ratio_to_hincrby: Some(1.0),
                conflict_pct: None,
                total_matches: u64::try_from(found).ok() == Some(committed),
            });
        }
        for strategy in [Strategy::Naive, Strategy::Autoshard] {
            let name = match strategy {
                Strategy::Naive => "naive",
                Strategy::Autoshard => "autoshard",
            };
            let store = backend
                .connect(&format!("{namespace}-c{clients}-{name}"))
                .await?;
            let db = Mapper::new(store).with_retry(config.retry);
            insert_question(&db, strategy, 1).await?;
            let voter = db.clone();
            let op: Op = Arc::new(move || {
                let db = voter.clone();
                Box::pin(async move { vote(&db, strategy, 1).await })
            });
            let bar = progress.bar(
                secs(config.duration),
                &format!("{clients:>2} clients: {name}"),
            );
            let (committed, failed, per_sec) = hammer(clients, config.duration, op, &bar).await;
            let metrics = db.metrics().snapshot();
            let found = votes_of(&db, strategy, 1).await?;
            #[allow(clippy::cast_precision_loss)]
            let conflict_pct = (metrics.attempts > 0)
                .then(|| 100.0 * metrics.conflicts as f64 / metrics.attempts as f64);
            rows.push(HotspotRow {
                clients,
                target: name.into(),
                committed,
                failed,
                per_sec,
                ratio_to_hincrby: raw_rate.map(|raw| per_sec / raw),
                conflict_pct,
                total_matches: u64::try_from(found).ok() == Some(committed),
            });
        }
    }
    Ok(rows)
}

type Op = Arc<dyn Fn() -> BoxFuture<'static, Result<()>> + Send + Sync>;

fn secs(d: Duration) -> u64 {
    d.as_secs().max(1)
}

/// Runs `op` in `clients` closed-loop tasks for `duration`; (ok, failed, ok per second).
async fn hammer(
    clients: usize,
    duration: Duration,
    op: Op,
    bar: &indicatif::ProgressBar,
) -> (u64, u64, f64) {
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (op, ok, failed) = (op.clone(), ok.clone(), failed.clone());
        tasks.spawn(async move {
            while start.elapsed() < duration {
                match op().await {
                    Ok(()) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        tracing::debug!(error = %e, "hot-spot vote failed");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        });
    }
    let ticker = {
        let bar = bar.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                bar.inc(1);
            }
        })
    };
    while tasks.join_next().await.is_some() {}
    ticker.abort();
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let ok = ok.load(Ordering::Relaxed);
    #[allow(clippy::cast_precision_loss)]
    (ok, failed.load(Ordering::Relaxed), ok as f64 / secs)
}

/// Plain Redis connections for the `HINCRBY` baseline: on a standalone server two
/// multiplexed connections used in turn (the store's default pool), on a cluster one
/// cluster connection.
#[derive(Clone)]
enum RawRedis {
    Standalone(Arc<[redis::aio::ConnectionManager; 2]>, Arc<AtomicU64>),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl RawRedis {
    async fn connect_standalone(url: &str) -> Result<RawRedis> {
        let fail = |e: redis::RedisError| Error::backend(format!("cannot reach Redis at {url}"), e);
        let client = redis::Client::open(url).map_err(fail)?;
        let a = client.get_connection_manager().await.map_err(fail)?;
        let b = client.get_connection_manager().await.map_err(fail)?;
        Ok(RawRedis::Standalone(Arc::new([a, b]), Arc::default()))
    }

    async fn connect_cluster(urls: &[String]) -> Result<RawRedis> {
        let fail = |e: redis::RedisError| {
            Error::backend(
                format!("cannot reach Redis Cluster at {}", urls.join(", ")),
                e,
            )
        };
        let client = redis::cluster::ClusterClient::new(urls.to_vec()).map_err(fail)?;
        Ok(RawRedis::Cluster(
            client.get_async_connection().await.map_err(fail)?,
        ))
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let fail = |e: redis::RedisError| Error::backend("raw Redis command failed", e);
        match self {
            RawRedis::Standalone(conns, next) => {
                let i = usize::from(next.fetch_add(1, Ordering::Relaxed) % 2 == 1);
                let mut conn = conns[i].clone();
                cmd.query_async(&mut conn).await.map_err(fail)
            }
            RawRedis::Cluster(conn) => cmd.query_async(&mut conn.clone()).await.map_err(fail),
        }
    }

    async fn hincrby(&self, key: &str) -> Result<()> {
        let _: i64 = self
            .query(redis::cmd("HINCRBY").arg(key).arg("votes").arg(1))
            .await?;
        Ok(())
    }

    async fn hget(&self, key: &str) -> Result<i64> {
        let found: Option<i64> = self.query(redis::cmd("HGET").arg(key).arg("votes")).await?;
        Ok(found.unwrap_or(0))
    }
}
