//! The runtime's concurrency scenario on real Redis: 64 tasks x 500 votes on one
//! question, sharded (10 static shards) and naive, with and without retries, on a
//! standalone server and on a 3-node cluster. Totals must be exact: the stored votes
//! equal the votes reported saved, and with (patient) retries every vote is saved.

use autoshard::store::{RedisOptions, RedisStore};
use autoshard_test_support::concurrency::all_variants;
use autoshard_test_support::redis::{Cluster, Standalone, namespace};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone() {
    let server = Standalone::start();
    let url = server.url();
    let connect = async |case: &str| {
        RedisStore::connect_with(&url, RedisOptions::default().namespace(namespace(case)))
            .await
            .unwrap()
    };
    all_variants(connect, "standalone").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster() {
    let cluster = Cluster::start();
    let urls = cluster.urls();
    let connect = async |case: &str| {
        RedisStore::connect_cluster_with(&urls, RedisOptions::default().namespace(namespace(case)))
            .await
            .unwrap()
    };
    all_variants(connect, "cluster").await;
}
