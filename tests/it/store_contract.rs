//! The mapper relies on the written `DocumentStore` contract and on nothing more: a store
//! that meets the contract but lists scan pages in another order, or splits scans into
//! smaller pages (it passes the conformance suite: `conformance.rs`), works with `load`
//! and `compact`, also while compactions race loads and saves.

use autoshard::prelude::*;
use autoshard_test_support::store::{Knobs, TestStore};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A store that lists every scan page in descending key order and, with `max_page`,
/// never returns more than that many documents per page. Both are allowed by the
/// contract: no order is promised, and a page may hold fewer documents than asked.
fn reordered(max_page: Option<usize>) -> TestStore<MemoryStore> {
    TestStore::new(
        MemoryStore::new(),
        Knobs {
            reverse_pages: true,
            max_page,
            ..Knobs::default()
        },
    )
}

fn reversed() -> TestStore<MemoryStore> {
    reordered(None)
}

fn reversed_small_pages() -> TestStore<MemoryStore> {
    reordered(Some(3))
}

/// A dynamically sharded counter.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
struct Tally {
    #[id]
    id: u64,
    #[shardable(neutral = 0)]
    n: i64,
    #[shardable(neutral = 0, shards = 4)]
    fixed: i64,
}

impl Tally {
    #[shard_method]
    fn add(&mut self, by: i64) {
        self.n += by;
        self.fixed += by;
    }

    #[shard_fold]
    fn fold_n(a: i64, b: i64) -> i64 {
        a + b
    }

    #[shard_fold]
    fn fold_fixed(a: i64, b: i64) -> i64 {
        a + b
    }
}

/// Saves, then compaction, then loads: exact, and compaction ends with one document.
async fn compact_and_load(store: TestStore<MemoryStore>) {
    let db = Mapper::new(Arc::new(store));
    db.insert(&mut Tally::new(1, 5, 5)).await.unwrap();
    for _ in 0..20 {
        db.update(&1, |t: &mut Tally| t.add(2)).await.unwrap();
    }
    let loaded: Tally = db.load(&1).await.unwrap();
    assert_eq!((loaded.n, loaded.fixed), (45, 45));
    let report = db.compact::<Tally>(&1).await.unwrap();
    assert_eq!(report.shards_folded, 20);
    let scan = autoshard::layout::dynamic_shards_scan(&Tally::key_for(&1));
    let mut left = 0;
    let mut page_scan = scan.clone();
    loop {
        let page = db.store().scan(&page_scan).await.unwrap();
        left += page.items.len();
        match page.next {
            Some(cursor) => page_scan.cursor = Some(cursor),
            None => break,
        }
    }
    assert_eq!(left, 1, "compaction leaves the compacted document only");
    let loaded: Tally = db.load(&1).await.unwrap();
    assert_eq!((loaded.n, loaded.fixed), (45, 45));
}

#[tokio::test]
async fn compact_and_load_do_not_depend_on_scan_order() {
    compact_and_load(reversed()).await;
}

#[tokio::test]
async fn compact_and_load_work_when_the_store_splits_scans_into_pages() {
    compact_and_load(reversed_small_pages()).await;
}

/// Writers, compactors and readers at once on a store that reorders and splits pages:
/// every load sees a total between the votes confirmed before it started and the votes
/// attempted, and the final total is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loads_stay_exact_while_compaction_races_on_a_paging_store() {
    const WRITERS: u64 = 4;
    const VOTES: u64 = 150;
    let db = Mapper::new(Arc::new(reversed_small_pages()));
    db.insert(&mut Tally::new(7, 0, 0)).await.unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let confirmed = Arc::new(std::sync::atomic::AtomicU64::new(0));

    let mut tasks = Vec::new();
    for _ in 0..WRITERS {
        let (db, confirmed) = (db.clone(), confirmed.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..VOTES {
                db.update(&7, |t: &mut Tally| t.add(1)).await.unwrap();
                confirmed.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    let compactor = {
        let (db, done) = (db.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                db.compact_in_batches::<Tally>(&7, 4, 4).await.unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    let reader = {
        let (db, done, confirmed) = (db.clone(), done.clone(), confirmed.clone());
        tokio::spawn(async move {
            let mut loads = 0u32;
            while !done.load(Ordering::SeqCst) {
                let before = confirmed.load(Ordering::SeqCst);
                let t: Tally = db.load(&7).await.unwrap();
                let n = u64::try_from(t.n).unwrap();
                assert!(
                    n >= before && n <= WRITERS * VOTES,
                    "load saw {n}, confirmed before it {before}"
                );
                loads += 1;
            }
            loads
        })
    };
    for task in tasks {
        task.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    compactor.await.unwrap();
    let loads = reader.await.unwrap();
    assert!(loads > 0);
    let t: Tally = db.load(&7).await.unwrap();
    let total = i64::try_from(WRITERS * VOTES).unwrap();
    assert_eq!((t.n, t.fixed), (total, total));
}
