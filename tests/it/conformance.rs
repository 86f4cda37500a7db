//! The store conformance suite (`autoshard::conformance`), run from here alone, on every
//! store through the `every_store!` harness: memory (directly, through `Arc` and `Box`,
//! through each decorator of the library, and through a test store that lists scan pages
//! in reverse and splits them, as the contract allows), standalone Redis, a 3-node Redis
//! Cluster and PostgreSQL (also in a second schema of the same database). Every case uses
//! fresh kinds, so the suite also runs twice on the same data. The tests of the suite
//! itself (a broken store fails it, naming the case) are `autoshard-runtime`'s
//! `tests/runtime/conformance_suite.rs`.

use autoshard::conformance;
use autoshard::store::{DocumentStore, FaultyStore, LatencyStore, MemoryStore};
use autoshard_test_support::every_store::{Backend, Kind};
use autoshard_test_support::store::{Knobs, TestStore};
use std::sync::Arc;
use std::time::Duration;

async fn suite(backend: &Backend, _label: &str) {
    let store = backend.store("conformance").await;
    // A Redis Cluster commits within one entity group only; the others across groups.
    assert_eq!(
        store.cross_group_transactions(),
        backend.kind() != Kind::Cluster
    );
    conformance::run_all(&store).await;
    match backend.kind() {
        Kind::Memory => through_every_decorator().await,
        Kind::Postgres => {
            conformance::run_all(&store).await;
            conformance::run_all(&backend.store("conformance second").await).await;
        }
        Kind::Standalone => conformance::run_all(&store).await,
        Kind::Cluster => {}
    }
}

/// The memory store directly, behind `Box<dyn>`, and through every decorator: each one
/// forwards the contract unchanged.
async fn through_every_decorator() {
    let direct = MemoryStore::new();
    conformance::run_all(&direct).await;
    conformance::run_all(&direct).await;
    let boxed: Box<dyn DocumentStore> = Box::new(MemoryStore::new());
    conformance::run_all(&boxed).await;
    let latency = LatencyStore::new(MemoryStore::new(), Duration::from_millis(1))
        .with_read_latency(Duration::from_micros(100));
    conformance::run_all(&latency).await;
    let latency: Arc<dyn DocumentStore> = Arc::new(LatencyStore::new(
        MemoryStore::new(),
        Duration::from_millis(1),
    ));
    conformance::run_all(&latency).await;
    let faulty = FaultyStore::new(MemoryStore::new());
    conformance::run_all(&faulty).await;
    assert_eq!(faulty.faults(), 0);
    assert!(faulty.calls() > 0);
    for max_page in [None, Some(3)] {
        let reordered = TestStore::new(
            MemoryStore::new(),
            Knobs {
                reverse_pages: true,
                max_page,
                ..Knobs::default()
            },
        );
        conformance::run_all(&reordered).await;
    }
}

autoshard_test_support::every_store!(suite);
