//! The conformance suite against the memory store, directly, through `Arc`/`Box`, and
//! through every decorator (`LatencyStore`, `FaultyStore`).
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

/// A store with one flaw, to check the suite can fail and names the case.
#[derive(Debug)]
struct Broken {
    inner: MemoryStore,
    flaw: Flaw,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Flaw {
    /// `insert` overwrites a present document.
    InsertOverwrites,
    /// `get_many` and a scan page read one document at a time, letting other tasks run
    /// in between: not snapshots.
    TornReads,
}

impl Broken {
    async fn one_by_one(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        let mut out = Vec::new();
        for key in keys {
            tokio::task::yield_now().await;
            out.push(self.inner.get(key).await?);
        }
        Ok(out)
    }
}

#[async_trait::async_trait]
impl DocumentStore for Broken {
    async fn get(&self, key: &Key) -> Result<Option<Versioned>> {
        self.inner.get(key).await
    }
    async fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        if self.flaw == Flaw::TornReads {
            return self.one_by_one(keys).await;
        }
        self.inner.get_many(keys).await
    }
    async fn insert(&self, key: &Key, doc: Document) -> Result<Version> {
        if self.flaw == Flaw::InsertOverwrites {
            return self.inner.put(key, doc).await;
        }
        self.inner.insert(key, doc).await
    }
    async fn put(&self, key: &Key, doc: Document) -> Result<Version> {
        self.inner.put(key, doc).await
    }
    async fn delete(&self, key: &Key) -> Result<bool> {
        self.inner.delete(key).await
    }
    async fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        let mut page = self.inner.scan(scan).await?;
        if self.flaw == Flaw::TornReads {
            let keys: Vec<Key> = page.items.iter().map(|(k, _)| k.clone()).collect();
            let found = self.one_by_one(&keys).await?;
            page.items = keys
                .into_iter()
                .zip(found)
                .filter_map(|(k, f)| f.map(|f| (k, f)))
                .collect();
        }
        Ok(page)
    }
    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        self.inner.commit(txn).await
    }
}

/// Runs case `name` on a store with `flaw`; it must fail, naming the case.
async fn fails_with_flaw(name: &'static str, flaw: Flaw) {
    let store = Broken {
        inner: MemoryStore::new(),
        flaw,
    };
    let outcome = tokio::spawn(async move {
        conformance::run_named(name, &store).await;
    })
    .await;
    let panic = outcome.expect_err("the broken store passed").into_panic();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains(&format!("conformance case `{name}` failed")),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_store_fails_with_the_case_name() {
    fails_with_flaw("insert_conflicts_when_present", Flaw::InsertOverwrites).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_reads_fail_the_snapshot_cases() {
    fails_with_flaw("get_many_within_one_group_is_a_snapshot", Flaw::TornReads).await;
    fails_with_flaw("scan_page_within_one_group_is_a_snapshot", Flaw::TornReads).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_store_with_no_fault_armed() {
    let store = autoshard_runtime::store::FaultyStore::new(MemoryStore::new());
    conformance::run_all(&store).await;
    assert_eq!(store.faults(), 0);
    assert!(store.calls() > 0);
}
