//! The whole store conformance suite on a standalone Redis server and on a 3-node Redis
//! Cluster, each started by the test (see `autoshard_test_support::redis`).

use autoshard::conformance;
use autoshard::store::{DocumentStore, RedisOptions, RedisStore};
use autoshard_test_support::redis::{namespace, Cluster, Standalone};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone() {
    let server = Standalone::start();
    let options = RedisOptions::default().namespace(namespace("conformance"));
    let store = RedisStore::connect_with(&server.url(), options)
        .await
        .unwrap();
    assert!(store.cross_group_transactions());
    conformance::run_all(&store).await;
    // Every case uses fresh kinds, so the suite runs again on the same data.
    conformance::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster() {
    let cluster = Cluster::start();
    let options = RedisOptions::default().namespace(namespace("conformance"));
    let store = RedisStore::connect_cluster_with(&cluster.urls(), options)
        .await
        .unwrap();
    assert!(!store.cross_group_transactions());
    conformance::run_all(&store).await;
}
