//! Measurement, not a test: the client-side work of one vote, as heap allocations counted
//! by a counting global allocator (`stats_alloc`, as the voting app's `count-allocations`
//! feature counts them), on the embedded store (so the store's own work is a
//! map lookup and the count is the mapper's). Per vote, for `apply` and `update` of a
//! `fold = sum` property through one shared `Mapper`, beside the store's `merge` called
//! directly (what a vote cannot do with less).
//!
//! ```sh
//! cargo bench -p autoshard-integration --bench allocations
//! ```

use autoshard::Key;
use autoshard::prelude::*;
use autoshard::store::{Fold, Merge, WriteId};

// Counts every allocation of the process around the system allocator.
#[global_allocator]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
struct Question {
    #[id]
    id: u64,
    text: String,
    #[shardable(shards = 10, fold = sum)]
    votes: i64,
}

impl Question {
    #[shard_method]
    fn vote_up(&mut self) {
        self.votes += 1;
    }
}

const VOTES: u64 = 10_000;

/// Runs `vote` `VOTES` times (after a warm-up) and prints allocations and bytes per vote.
async fn per_vote<F, Fut>(label: &str, mut vote: F)
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for i in 0..100 {
        vote(i).await;
    }
    let region = stats_alloc::Region::new(ALLOCATOR);
    for i in 0..VOTES {
        vote(1_000 + i).await;
    }
    // Allocations and reallocations, as the voting app's `allocs/vote` column counts them.
    let change = region.change();
    let calls = change.allocations + change.reallocations;
    let bytes = change.bytes_allocated;
    #[allow(clippy::cast_precision_loss)]
    let (calls, bytes) = (calls as f64 / VOTES as f64, bytes as f64 / VOTES as f64);
    println!("{label:<40} {calls:>8.1} {bytes:>10.0}");
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    println!("{VOTES} votes one after the other on MemoryStore, after 100 to warm up");
    println!("{:<40} {:>8} {:>10}", "per vote", "allocs", "bytes");
    let store = MemoryStore::new();
    let key = Key::new("Raw", "1");
    store
        .insert(&key, [("n".to_owned(), 0.into())].into())
        .await
        .expect("insert");
    per_vote("store merge (the floor)", |seq| {
        let store = store.clone();
        let key = key.clone();
        async move {
            let write = WriteId {
                writer: "w".into(),
                seq,
                at_ms: 0,
                horizon_ms: 0,
            };
            let merge = Merge::new(key, "n", Fold::SUM_I64, 1.into(), write);
            let merged = store.merge(&merge).await.expect("merge");
            assert_eq!(merged, autoshard::store::Merged::Applied);
        }
    })
    .await;

    let db = Mapper::new(MemoryStore::new());
    db.insert(&mut Question::new(1, "Hot?".into(), 0))
        .await
        .expect("insert");
    per_vote("apply sum, shared Mapper", |_| {
        let db = db.clone();
        async move { db.apply(&1, Question::vote_up).await.expect("apply") }
    })
    .await;
    per_vote("update sum, shared Mapper", |_| {
        let db = db.clone();
        async move { db.update(&1, Question::vote_up).await.expect("update") }
    })
    .await;
    let total = db.load::<Question>(&1).await.expect("load").votes;
    assert_eq!(
        total,
        i64::try_from(2 * (100 + VOTES)).unwrap(),
        "every vote counted"
    );
}
