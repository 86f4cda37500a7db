//! The conformance suite against the memory store, directly and through `Arc`/`Box`.
#![cfg(feature = "conformance")]

use autoshard_runtime::{
    conformance, Commit, Document, DocumentStore, Key, LatencyStore, MemoryStore, Result, Scan,
    ScanPage, Transaction, Version, Versioned,
};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store() {
    conformance::run_all(&MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_through_arc_dyn() {
    let store: Arc<dyn DocumentStore> = Arc::new(MemoryStore::new());
    conformance::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_through_box_dyn() {
    let store: Box<dyn DocumentStore> = Box::new(MemoryStore::new());
    conformance::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_runs_twice_on_one_store() {
    let store = MemoryStore::new();
    conformance::run_all(&store).await;
    conformance::run_all(&store).await;
}

#[test]
fn case_names_are_unique() {
    let names: Vec<_> = conformance::case_names().collect();
    let unique: std::collections::BTreeSet<_> = names.iter().collect();
    assert_eq!(names.len(), unique.len());
    assert!(names.len() >= 20);
}

/// A store whose `insert` overwrites, to check the suite can fail and names the case.
#[derive(Debug)]
struct InsertOverwrites(MemoryStore);

#[async_trait::async_trait]
impl DocumentStore for InsertOverwrites {
    async fn get(&self, key: &Key) -> Result<Option<Versioned>> {
        self.0.get(key).await
    }
    async fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        self.0.get_many(keys).await
    }
    async fn insert(&self, key: &Key, doc: Document) -> Result<Version> {
        self.0.put(key, doc).await
    }
    async fn put(&self, key: &Key, doc: Document) -> Result<Version> {
        self.0.put(key, doc).await
    }
    async fn delete(&self, key: &Key) -> Result<bool> {
        self.0.delete(key).await
    }
    async fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        self.0.scan(scan).await
    }
    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        self.0.commit(txn).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_store_fails_with_the_case_name() {
    let store = InsertOverwrites(MemoryStore::new());
    let outcome = tokio::spawn(async move {
        conformance::run_named("insert_conflicts_when_present", &store).await;
    })
    .await;
    let panic = outcome.expect_err("the broken store passed").into_panic();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("conformance case `insert_conflicts_when_present` failed"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_store_over_memory() {
    let store = LatencyStore::new(MemoryStore::new(), Duration::from_millis(1))
        .with_read_latency(Duration::from_micros(100));
    conformance::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_store_through_arc_dyn() {
    let store: Arc<dyn DocumentStore> = Arc::new(LatencyStore::new(
        MemoryStore::new(),
        Duration::from_millis(1),
    ));
    conformance::run_all(&store).await;
}
