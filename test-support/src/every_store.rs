//! One harness for the suites that run on every store: [`Backend`] starts the server a
//! kind of store needs (none for memory) and hands out stores, each under a namespace
//! (a schema on PostgreSQL) of its own; [`every_store!`](crate::every_store) writes the
//! four tests, one per store, that call a suite's `async fn(&Backend, &str)`.
//!
//! ```ignore
//! async fn every_case(backend: &Backend, label: &str) {
//!     let db = Mapper::new(backend.store("votes").await);
//!     // ...
//! }
//! autoshard_test_support::every_store!(every_case);
//! ```

use crate::postgres::Postgres;
#[cfg(feature = "redis")]
use crate::redis::namespace;
use crate::redis::{Cluster, Standalone};
use autoshard::store::{DocumentStore, MemoryStore};
#[cfg(feature = "redis")]
use autoshard::store::{RedisOptions, RedisStore};
use std::sync::Arc;

/// The kinds of store every suite runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Memory,
    Standalone,
    Cluster,
    Postgres,
}

impl Kind {
    /// How tests name it in their messages.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Memory => "memory",
            Kind::Standalone => "standalone",
            Kind::Cluster => "cluster",
            Kind::Postgres => "postgres",
        }
    }
}

/// A running backend of one kind: its server (stopped when dropped) and the stores it
/// hands out.
pub enum Backend {
    Memory,
    Standalone(Standalone),
    Cluster(Cluster),
    Postgres(Postgres),
}

impl Backend {
    /// Starts the server `kind` needs.
    pub fn start(kind: Kind) -> Backend {
        match kind {
            Kind::Memory => Backend::Memory,
            Kind::Standalone => Backend::Standalone(Standalone::start()),
            Kind::Cluster => Backend::Cluster(Cluster::start()),
            Kind::Postgres => Backend::Postgres(Postgres::start()),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Backend::Memory => Kind::Memory,
            Backend::Standalone(_) => Kind::Standalone,
            Backend::Cluster(_) => Kind::Cluster,
            Backend::Postgres(_) => Kind::Postgres,
        }
    }

    /// A store under a namespace of its own, named after `case` (a fresh, empty
    /// `MemoryStore` on memory).
    pub async fn store(&self, case: &str) -> Arc<dyn DocumentStore> {
        match self {
            Backend::Memory => Arc::new(MemoryStore::new()),
            #[cfg(feature = "redis")]
            Backend::Standalone(server) => {
                let options = RedisOptions::default().namespace(namespace(case));
                Arc::new(
                    RedisStore::connect_with(&server.url(), options)
                        .await
                        .expect("connect to the test server"),
                )
            }
            #[cfg(feature = "redis")]
            Backend::Cluster(cluster) => {
                let options = RedisOptions::default().namespace(namespace(case));
                Arc::new(
                    RedisStore::connect_cluster_with(&cluster.urls(), options)
                        .await
                        .expect("connect to the test cluster"),
                )
            }
            Backend::Postgres(server) => server.shared_store(case).await,
            #[cfg(not(feature = "redis"))]
            Backend::Standalone(_) | Backend::Cluster(_) => {
                panic!("the Redis stores need autoshard-test-support's `redis` feature")
            }
        }
    }
}

/// Four tests, `memory`, `redis_standalone`, `redis_cluster` and `postgres`, each
/// starting its backend and running `$suite(&backend, label)`.
#[macro_export]
macro_rules! every_store {
    ($suite:path) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn memory() {
            $crate::every_store::run($crate::every_store::Kind::Memory, $suite).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn redis_standalone() {
            $crate::every_store::run($crate::every_store::Kind::Standalone, $suite).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn redis_cluster() {
            $crate::every_store::run($crate::every_store::Kind::Cluster, $suite).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn postgres() {
            $crate::every_store::run($crate::every_store::Kind::Postgres, $suite).await;
        }
    };
}

/// Starts the backend of `kind` and runs `suite` on it, labelled with the kind.
pub async fn run<F>(kind: Kind, suite: F)
where
    F: AsyncFnOnce(&Backend, &str),
{
    let backend = Backend::start(kind);
    suite(&backend, kind.label()).await;
}
