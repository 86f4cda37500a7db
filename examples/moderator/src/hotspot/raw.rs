//! The raw store's counter, the baseline of every ratio: `HINCRBY` on Redis, the slotted
//! counter people write by hand on PostgreSQL.

use crate::backend::Backend;
use autoshard::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The raw store's counter: the baseline of the ratios.
#[derive(Clone)]
pub(super) enum Raw {
    Redis(RawRedis),
    Postgres(RawPostgres),
}

impl Raw {
    /// The raw counter of `backend` (its PostgreSQL table in `namespace`'s schema); `None`
    /// on the embedded stores.
    pub(super) async fn connect(backend: &Backend, namespace: &str) -> Result<Option<Raw>> {
        Ok(match backend {
            Backend::Redis(url) => Some(Raw::Redis(RawRedis::connect_standalone(url).await?)),
            Backend::RedisCluster(urls) => Some(Raw::Redis(RawRedis::connect_cluster(urls).await?)),
            Backend::Postgres(url) => Some(Raw::Postgres(
                RawPostgres::connect(url, &crate::backend::schema_of(namespace)).await?,
            )),
            Backend::Memory | Backend::Modelled(_) => None,
        })
    }

    pub(super) fn name(&self) -> &'static str {
        match self {
            Raw::Redis(_) => "raw HINCRBY",
            Raw::Postgres(_) => "raw slotted counter",
        }
    }

    pub(super) async fn increment(&self, key: &str) -> Result<()> {
        match self {
            Raw::Redis(r) => r.hincrby(key).await,
            Raw::Postgres(p) => p.increment(key).await,
        }
    }

    pub(super) async fn total(&self, key: &str) -> Result<i64> {
        match self {
            Raw::Redis(r) => r.hget(key).await,
            Raw::Postgres(p) => p.total(key).await,
        }
    }
}

/// The slotted counter on PostgreSQL (GitHub's and PlanetScale's pattern for a hot
/// counter row): 10 rows per counter, each increment an upsert of one picked at random
/// in its own transaction, the total their `SUM`. A pool as large as the store's.
#[derive(Clone)]
pub(super) struct RawPostgres {
    pool: deadpool_postgres::Pool,
    increment: Arc<str>,
    total: Arc<str>,
}

impl RawPostgres {
    const SLOTS: i32 = 10;

    async fn connect(url: &str, schema: &str) -> Result<RawPostgres> {
        let config = crate::backend::postgres_config(url)?;
        let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(16)
            .build()
            .map_err(|e| Error::backend("PostgreSQL pool", e.to_string()))?;
        let table = format!("\"{schema}\".slotted_counter");
        let raw = RawPostgres {
            pool,
            increment: format!(
                "INSERT INTO {table} (counter, slot, n) VALUES ($1, $2, 1) \
                 ON CONFLICT (counter, slot) DO UPDATE SET n = {table}.n + 1"
            )
            .into(),
            total: format!("SELECT coalesce(sum(n), 0)::bigint FROM {table} WHERE counter = $1")
                .into(),
        };
        let client = raw.client().await?;
        client
            .batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
                 CREATE TABLE IF NOT EXISTS {table} (
                     counter text, slot integer, n bigint NOT NULL,
                     PRIMARY KEY (counter, slot)
                 );"
            ))
            .await
            .map_err(fail_pg)?;
        Ok(raw)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool
            .get()
            .await
            .map_err(|e| Error::backend("cannot reach PostgreSQL", e.to_string()))
    }

    async fn increment(&self, key: &str) -> Result<()> {
        let slot = rand::random_range(0..Self::SLOTS);
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&self.increment)
            .await
            .map_err(fail_pg)?;
        client
            .execute(&statement, &[&key, &slot])
            .await
            .map_err(fail_pg)?;
        Ok(())
    }

    async fn total(&self, key: &str) -> Result<i64> {
        let client = self.client().await?;
        let row = client
            .query_one(&*self.total, &[&key])
            .await
            .map_err(fail_pg)?;
        Ok(row.get(0))
    }
}

fn fail_pg(e: tokio_postgres::Error) -> Error {
    Error::backend("raw PostgreSQL statement failed", e)
}

/// Plain Redis connections for the `HINCRBY` baseline: on a standalone server two
/// multiplexed connections used in turn (the store's default pool), on a cluster one
/// cluster connection.
#[derive(Clone)]
pub(super) enum RawRedis {
    Standalone(Arc<[redis::aio::ConnectionManager; 2]>, Arc<AtomicU64>),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl RawRedis {
    async fn connect_standalone(url: &str) -> Result<RawRedis> {
        // The URL may hold a password: messages name the address only.
        let target = crate::backend::redis_target(url);
        let fail =
            |e: redis::RedisError| Error::backend(format!("cannot reach Redis at {target}"), e);
        let client = redis::Client::open(url).map_err(fail)?;
        let a = client.get_connection_manager().await.map_err(fail)?;
        let b = client.get_connection_manager().await.map_err(fail)?;
        Ok(RawRedis::Standalone(Arc::new([a, b]), Arc::default()))
    }

    async fn connect_cluster(urls: &[String]) -> Result<RawRedis> {
        let fail = |e: redis::RedisError| {
            Error::backend(
                format!(
                    "cannot reach Redis Cluster at {}",
                    urls.iter()
                        .map(|u| crate::backend::redis_target(u))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
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
