//! Several sharded properties with different shard counts on one entity: each property
//! spreads its writes over its own shards, a save commits all touched properties in one
//! transaction where the store allows it (memory, standalone Redis, PostgreSQL) and one per property
//! on a Redis Cluster, and no contention error reaches a caller with the default retry
//! policy. Conflicts per shard document are printed.

use autoshard::prelude::*;
use autoshard::store::LatencyStore;
use autoshard::store::faulty::{Fault, FaultyStore};
use autoshard_test_support::every_store::{Backend, Kind};
use autoshard_test_support::store::{Knobs, TestStore};
use std::sync::Arc;
use std::time::Duration;

/// A page with a visit counter over 8 shards and the latest visit time over 4.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
struct Page {
    #[id]
    id: u64,
    #[shardable(neutral = 0, shards = 8)]
    views: i64,
    #[shardable(neutral = 0, shards = 4)]
    last_seen: u64,
}

impl Page {
    #[shard_method]
    fn visit(&mut self, at: u64) {
        self.views += 1;
        self.last_seen = self.last_seen.max(at);
    }

    #[shard_fold]
    fn fold_views(a: i64, b: i64) -> i64 {
        a + b
    }

    #[shard_fold]
    fn fold_last_seen(a: u64, b: u64) -> u64 {
        a.max(b)
    }
}

const WRITERS: u64 = 32;
const VISITS: u64 = 25;

/// 32 writers x 25 visits through `update`, spread over `mappers` mappers (as if in that
/// many processes; the page's id is `mappers`): every visit is saved, the totals are
/// exact, and each property's shards all take writes. With one mapper its shard lanes
/// queue the writers, and the default retry policy never gives up; across mappers
/// writers still conflict in the store, so they retry patiently (server-side folds
/// remove those conflicts).
async fn writers_on_two_properties(store: Arc<dyn DocumentStore>, mappers: u64, label: &str) {
    let store = Arc::new(TestStore::new(store, Knobs::default()));
    let retry = if mappers == 1 {
        RetryPolicy::default()
    } else {
        RetryPolicy::exponential(Duration::from_millis(1), Duration::from_millis(50), 10_000)
            .with_max_elapsed(Duration::from_mins(2))
    };
    let all: Vec<_> = (0..mappers)
        .map(|_| Mapper::new(store.clone()).with_retry(retry))
        .collect();
    let db = all[0].clone();
    db.insert(&mut Page::new(mappers, 0, 0)).await.unwrap();
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let db = all[usize::try_from(w % mappers).unwrap()].clone();
            tokio::spawn(async move {
                for v in 0..VISITS {
                    db.update(&mappers, |p: &mut Page| p.visit(w * VISITS + v))
                        .await
                        .unwrap_or_else(|e| panic!("visit failed: {e}"));
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let page: Page = db.load(&mappers).await.unwrap();
    assert_eq!(
        page.views,
        i64::try_from(WRITERS * VISITS).unwrap(),
        "{label}"
    );
    assert_eq!(page.last_seen, WRITERS * VISITS - 1, "{label}");
    let (commits, conflicts, failures) = all.iter().fold((0, 0, 0), |(c, k, f), db| {
        let m = db.metrics().snapshot();
        (c + m.commits, k + m.conflicts, f + m.failures)
    });
    let per_shard = store.conflicts();
    eprintln!(
        "{label}, {mappers} mapper(s): {} visits, {commits} commits, {conflicts} conflicts; \
         conflicts per shard: {per_shard:?}",
        WRITERS * VISITS,
    );
    assert_eq!(failures, 0, "{label}");
    // Every shard of each property took writes: the versions moved past insert's.
    for (property, shards) in [("views", 8), ("last_seen", 4)] {
        for i in 0..shards {
            let shard = autoshard::layout::static_shard(&Page::key_for(&mappers), property, i);
            let doc = db.store().get(&shard).await.unwrap();
            assert!(doc.is_some(), "{label}: {shard} missing");
        }
    }
}

/// A save of two properties on a store with cross-group transactions is atomic: with a
/// store error injected at each of its calls in turn, what is stored is either neither
/// change or both, never one of them; the shadows keep what was not written, and the
/// next save writes it.
async fn failed_save_writes_no_property(store: Arc<dyn DocumentStore>, label: &str) {
    let faulty = FaultyStore::new(store);
    let db = Mapper::new(faulty.clone());
    // Past the save's last call (a read, then one commit) the fault is never reached.
    for at in 0..4 {
        let id = 100 + at;
        db.insert(&mut Page::new(id, 0, 0)).await.unwrap();
        let mut page: Page = db.load(&id).await.unwrap();
        page.visit(7);
        faulty.fail_call(at, Fault::Before);
        let failed = db.save(&mut page).await.is_err();
        faulty.clear();
        let stored: Page = db.load(&id).await.unwrap();
        let state = (stored.views, stored.last_seen);
        assert!(
            state == (0, 0) || state == (1, 7),
            "{label}: fault at call {at} left a partial save {state:?}"
        );
        assert_eq!(failed, state == (0, 0), "{label}: call {at}");
        db.save(&mut page).await.unwrap();
        let stored: Page = db.load(&id).await.unwrap();
        assert_eq!(
            (stored.views, stored.last_seen),
            (1, 7),
            "{label}: call {at}"
        );
    }
}

/// Two counters of one shard each, saved together.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
struct Pair {
    #[id]
    id: u64,
    #[shardable(neutral = 0, shards = 1)]
    left: i64,
    #[shardable(neutral = 0, shards = 1)]
    right: i64,
}

impl Pair {
    #[shard_method]
    fn bump(&mut self) {
        self.left += 1;
        self.right += 1;
    }

    #[shard_fold]
    fn fold_left(a: i64, b: i64) -> i64 {
        a + b
    }

    #[shard_fold]
    fn fold_right(a: i64, b: i64) -> i64 {
        a + b
    }
}

/// A save of two properties and a keyed update (`update_once`) keep the write records of
/// the shards they write: a save whose commit landed but whose reply was lost (its
/// changes in doubt, their write id recorded in both shards), then another mapper's save
/// of both properties, or its keyed update, into the same shards, then the first save
/// again: it finds its write id still recorded and counts once.
async fn writes_beside_a_save_in_doubt_keep_its_write_records(
    store: Arc<dyn DocumentStore>,
    label: &str,
) {
    let faulty = FaultyStore::new(store.clone());
    let first = Mapper::new(faulty.clone());
    let second = Mapper::new(store);
    for (id, beside) in [(1, "a save"), (2, "a keyed update")] {
        first.insert(&mut Pair::new(id, 0, 0)).await.unwrap();
        let mut doubted: Pair = first.load(&id).await.unwrap();
        doubted.bump();
        // The save's calls: a read, then the commit, which lands and loses its reply.
        faulty.fail_call(1, Fault::After);
        assert!(
            first.save(&mut doubted).await.is_err(),
            "{label}: the lost reply"
        );
        faulty.clear();
        if id == 1 {
            second.update(&id, Pair::bump).await.unwrap();
        } else {
            let outcome = second.update_once(&id, "bump", Pair::bump).await.unwrap();
            assert!(outcome.is_applied(), "{label}: the keyed update stored");
        }
        first.save(&mut doubted).await.unwrap();
        let stored: Pair = second.load(&id).await.unwrap();
        let context = format!("{label}, {beside} beside a save in doubt");
        assert_eq!((stored.left, stored.right), (2, 2), "{context}: each once");
    }
}

/// Writers on two properties (one and four at a time; on memory behind a modelled
/// latency, so that saves overlap), a save failing at every call, and a save in doubt
/// beside another mapper's.
async fn on(backend: &Backend, label: &str) {
    let kind = backend.kind();
    if kind == Kind::Memory {
        let latency = LatencyStore::new(MemoryStore::new(), Duration::from_millis(1));
        let latency: Arc<dyn DocumentStore> = Arc::new(latency);
        writers_on_two_properties(latency.clone(), 1, label).await;
        writers_on_two_properties(latency, 4, label).await;
    } else {
        writers_on_two_properties(backend.store("multi-1").await, 1, label).await;
        if kind != Kind::Cluster {
            writers_on_two_properties(backend.store("multi-4").await, 4, label).await;
        }
    }
    if kind != Kind::Cluster {
        failed_save_writes_no_property(backend.store("multi-fail").await, label).await;
    }
    let store = backend.store("multi-records").await;
    writes_beside_a_save_in_doubt_keep_its_write_records(store, label).await;
}

autoshard_test_support::every_store!(on);
