//! Entity groups and entity-group sharding through the macros, on the memory
//! store with a modelled commit latency, a standalone Redis server, a 3-node Redis
//! Cluster and a PostgreSQL server:
//! - 64 tasks insert responses to one question at once, with the group as one sub-group
//!   (K = 1) and spread over K = 8: the union of the sub-groups holds every inserted
//!   response exactly once and nothing else; the conflicts and insert throughput of each
//!   variant are printed (never asserted as timings);
//! - transfers between two children of one sub-group keep their sum under concurrency,
//!   and a transaction across sub-groups is refused;
//! - load, delete of one child, delete of a root with its children, misuse errors.

use autoshard::Child;
use autoshard::metrics::MetricsSnapshot;
use autoshard::prelude::*;
use autoshard::store::{LatencyStore, Scan};
use autoshard_test_support::every_store::{Backend, Kind};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

type Db = Mapper<Arc<dyn DocumentStore>>;

const TASKS: usize = 64;
const INSERTS_PER_TASK: usize = 5;

#[derive(Entity, Debug, Clone)]
#[entity(kind = "Question")]
struct Question {
    #[id]
    id: u64,
    text: String,
}

#[derive(Entity, Debug, Clone)]
#[entity(kind = "HotQuestion", group_shards = 8)]
struct HotQuestion {
    #[id]
    id: u64,
    text: String,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[entity(parent = Question)]
struct Response {
    #[id]
    id: Uuid,
    #[parent]
    question: u64,
    text: String,
    points: i64,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[entity(kind = "HotResponse", parent = HotQuestion)]
struct HotResponse {
    #[id]
    id: Uuid,
    #[parent]
    question: u64,
    text: String,
    points: i64,
}

/// A root of the tests: built from an id.
trait TestRoot: autoshard::group::Root<Id = u64> {
    fn make(id: u64) -> Self;
}

/// A response kind of the tests, with the root `Self::Parent`.
trait Resp: Child<Id = Uuid, Parent: TestRoot> + Clone + std::fmt::Debug {
    fn make(question: u64, id: Uuid, points: i64) -> Self;
    fn points_mut(&mut self) -> &mut i64;
}

macro_rules! test_kinds {
    ($($root:ident / $resp:ident),*) => {$(
        impl TestRoot for $root {
            fn make(id: u64) -> Self {
                $root { id, text: format!("question {id}") }
            }
        }
        impl Resp for $resp {
            fn make(question: u64, id: Uuid, points: i64) -> Self {
                $resp { id, question, text: format!("response {id}"), points }
            }
            fn points_mut(&mut self) -> &mut i64 {
                &mut self.points
            }
        }
    )*};
}
test_kinds!(Question / Response, HotQuestion / HotResponse);

/// Retries until every insert is in (bounded far beyond what the tests need).
fn patient() -> RetryPolicy {
    RetryPolicy::exponential(Duration::from_millis(1), Duration::from_millis(50), 10_000)
        .with_max_elapsed(Duration::from_mins(2))
}

fn modelled_memory() -> Arc<dyn DocumentStore> {
    // A slow, serialized commit log per entity group (Datastore-like, scaled down).
    Arc::new(LatencyStore::new(
        MemoryStore::new(),
        Duration::from_millis(2),
    ))
}

/// How many children each sub-group of `root` holds, straight from the store.
async fn per_sub_group<R: Resp>(db: &Db, root: u64) -> BTreeMap<u32, usize> {
    let root = <R::Parent as Entity>::key_for(&root);
    let mut out = BTreeMap::new();
    for k in 0..R::GROUP_SHARDS {
        let page = db
            .store()
            .scan(&Scan::new(R::KIND, Some(autoshard::layout::sub_group(&root, k))).limit(100_000))
            .await
            .unwrap();
        assert!(page.next.is_none());
        if !page.items.is_empty() {
            out.insert(k, page.items.len());
        }
    }
    out
}

/// Operations per second, for the printed report.
fn per_sec(count: usize, elapsed: Duration) -> f64 {
    f64::from(u32::try_from(count).unwrap_or(u32::MAX)) / elapsed.as_secs_f64()
}

struct InsertRun {
    inserted: usize,
    elapsed: Duration,
    metrics: MetricsSnapshot,
}

/// 64 tasks insert responses to one question at once. The union of the sub-groups must
/// hold exactly the responses whose insert succeeded, each once.
async fn concurrent_inserts<R: Resp>(store: Arc<dyn DocumentStore>, label: &str) -> InsertRun {
    let db = Arc::new(Mapper::new(store).with_retry(patient()));
    db.insert(&mut R::Parent::make(1)).await.unwrap();
    let before = db.metrics().snapshot();
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let db = Arc::clone(&db);
            tokio::spawn(async move {
                let (mut ok, mut failed) = (Vec::new(), Vec::new());
                for _ in 0..INSERTS_PER_TASK {
                    let id = Uuid::new_v4();
                    match db.insert(&mut R::make(1, id, 0)).await {
                        Ok(()) => ok.push(id),
                        Err(e) if e.is_contention() => failed.push(id),
                        Err(e) => panic!("insert failed: {e}"),
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    let (mut ok, mut failed) = (Vec::new(), HashSet::new());
    for task in tasks {
        let (o, f) = task.await.unwrap();
        ok.extend(o);
        failed.extend(f);
    }
    let elapsed = started.elapsed();
    let metrics = db.metrics().snapshot().since(&before);

    let children: Vec<R> = db.children(&1).await.unwrap();
    let mut seen = HashSet::new();
    for child in &children {
        assert!(seen.insert(*child.id()), "{label}: duplicated {child:?}");
        assert!(
            !failed.contains(child.id()),
            "{label}: a failed insert is stored"
        );
    }
    let expected: HashSet<Uuid> = ok.iter().copied().collect();
    assert_eq!(seen, expected, "{label}: responses lost or invented");
    assert_eq!(
        ok.len(),
        TASKS * INSERTS_PER_TASK,
        "{label}: inserts gave up"
    );

    let spread = per_sub_group::<R>(&db, 1).await;
    assert_eq!(
        spread.values().sum::<usize>(),
        ok.len(),
        "{label}: {spread:?}"
    );
    if R::GROUP_SHARDS == 1 {
        assert_eq!(spread.keys().copied().collect::<Vec<_>>(), [0], "{label}");
    } else {
        assert!(
            spread.len() > 1,
            "{label}: 320 random placements used one sub-group: {spread:?}"
        );
    }
    let k = R::GROUP_SHARDS;
    let rate = per_sec(ok.len(), elapsed);
    eprintln!(
        "{label} K={k}: {} inserts by {TASKS} tasks in {:.2} s = {rate:.0} inserts/s; \
         attempts {}, conflicts {}, retries {}, failures {}; per sub-group {spread:?}",
        ok.len(),
        elapsed.as_secs_f64(),
        metrics.attempts,
        metrics.conflicts,
        metrics.retries,
        metrics.failures,
    );
    InsertRun {
        inserted: ok.len(),
        elapsed,
        metrics,
    }
}

/// K = 1 against K = 8 on fresh stores; returns both runs.
async fn insert_variants(
    connect: impl AsyncFn(&str) -> Arc<dyn DocumentStore>,
    label: &str,
) -> (InsertRun, InsertRun) {
    let plain = concurrent_inserts::<Response>(connect("k1").await, label).await;
    let sharded = concurrent_inserts::<HotResponse>(connect("k8").await, label).await;
    eprintln!(
        "{label}: conflicts K=1 {} vs K=8 {}; throughput K=1 {:.0}/s vs K=8 {:.0}/s",
        plain.metrics.conflicts,
        sharded.metrics.conflicts,
        per_sec(plain.inserted, plain.elapsed),
        per_sec(sharded.inserted, sharded.elapsed),
    );
    (plain, sharded)
}

/// Concurrent transfers between the children of one sub-group keep their sum; a
/// transfer across sub-groups is refused.
async fn transfers<R: Resp>(store: Arc<dyn DocumentStore>, label: &str) {
    const CHILDREN: i64 = 20;
    const START: i64 = 100;
    let db = Arc::new(Mapper::new(store).with_retry(patient()));
    db.insert(&mut R::Parent::make(7)).await.unwrap();
    let mut by_group: BTreeMap<Key, Vec<Uuid>> = BTreeMap::new();
    for _ in 0..CHILDREN {
        let id = Uuid::new_v4();
        db.insert(&mut R::make(7, id, START)).await.unwrap();
        let key = db.child_key::<R>(&7, &id).await.unwrap();
        by_group.entry(key.group()).or_default().push(id);
    }
    // 20 children in at most 8 sub-groups: one holds at least 3.
    let (_, pair) = by_group.iter().max_by_key(|(_, ids)| ids.len()).unwrap();
    let (first, second) = (pair[0], pair[1]);

    let tasks: Vec<_> = (0..16)
        .map(|t: i64| {
            let db = Arc::clone(&db);
            tokio::spawn(async move {
                for i in 0..15i64 {
                    let (from, to) = if (t + i) % 2 == 0 {
                        (first, second)
                    } else {
                        (second, first)
                    };
                    let amount = i % 4 + 1 + t % 2;
                    db.update_children(&7, &[from, to], |rs: &mut [R]| {
                        *rs[0].points_mut() -= amount;
                        *rs[1].points_mut() += amount;
                    })
                    .await
                    .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let a_now = db.load_child::<R>(&7, &first).await.unwrap();
    let b_now = db.load_child::<R>(&7, &second).await.unwrap();
    let (mut a_now, mut b_now) = (a_now, b_now);
    let sum = *a_now.points_mut() + *b_now.points_mut();
    assert_eq!(sum, 2 * START, "{label}: a transfer was not atomic");
    // Every transfer applied exactly once (no lost update): a's net change.
    let mut net_a = 0;
    for t in 0..16i64 {
        for i in 0..15i64 {
            let amount = i % 4 + 1 + t % 2;
            net_a += if (t + i) % 2 == 0 { -amount } else { amount };
        }
    }
    assert_eq!(
        *a_now.points_mut(),
        START + net_a,
        "{label}: a transfer was lost"
    );
    let total: i64 = db
        .children::<R>(&7)
        .await
        .unwrap()
        .iter_mut()
        .map(|r| *r.points_mut())
        .sum();
    assert_eq!(total, START * CHILDREN, "{label}: total changed");
    let metrics = db.metrics().snapshot();
    eprintln!(
        "{label} K={}: 240 transfers, {} conflicts, moved {}",
        R::GROUP_SHARDS,
        metrics.conflicts,
        *a_now.points_mut() - START
    );

    if by_group.len() > 1 {
        let mut groups = by_group.values();
        let (left, right) = (groups.next().unwrap()[0], groups.next().unwrap()[0]);
        let across = db
            .update_children(&7, &[left, right], |_: &mut [R]| ())
            .await;
        assert!(
            matches!(&across, Err(Error::Invalid(m)) if m.contains("one sub-group")),
            "{label}: {across:?}"
        );
    } else {
        assert_eq!(R::GROUP_SHARDS, 1, "{label}");
    }
}

/// Load, misuse, delete of one child, delete of the group (twice).
async fn lifecycle<R: Resp>(store: Arc<dyn DocumentStore>, label: &str) {
    let db: Db = Mapper::new(store);
    let orphan = db.insert(&mut R::make(3, Uuid::new_v4(), 0)).await;
    assert!(
        matches!(orphan, Err(Error::NotFound { .. })),
        "{label}: {orphan:?}"
    );
    db.insert(&mut R::Parent::make(3)).await.unwrap();
    let ids: Vec<Uuid> = (0..12).map(|_| Uuid::new_v4()).collect();
    for (i, id) in ids.iter().enumerate() {
        db.insert(&mut R::make(3, *id, i64::try_from(i).unwrap()))
            .await
            .unwrap();
    }
    let again = db.insert(&mut R::make(3, ids[0], 0)).await;
    assert!(
        matches!(again, Err(Error::AlreadyExists { .. })),
        "{label}: {again:?}"
    );
    let mut fifth = db.load_child::<R>(&3, &ids[5]).await.unwrap();
    assert_eq!(*fifth.points_mut(), 5, "{label}");
    let unknown = Uuid::new_v4();
    let missing = db.load_child::<R>(&3, &unknown).await;
    assert!(
        matches!(&missing, Err(Error::ChildNotFound { root, kind, id })
            if *root == <R::Parent as Entity>::key_for(&3) && kind == R::KIND
                && *id == unknown.to_string()),
        "{label}: {missing:?}"
    );
    let elsewhere = db.load_child::<R>(&4, &ids[5]).await;
    assert!(
        matches!(&elsewhere, Err(Error::ChildNotFound { root, .. })
            if *root == <R::Parent as Entity>::key_for(&4)),
        "{label}: {elsewhere:?}"
    );
    let no_child = db.update_child(&3, &unknown, |r: &mut R| *r.points_mut() += 1);
    assert!(
        matches!(no_child.await, Err(Error::ChildNotFound { .. })),
        "{label}"
    );

    let doubled = db
        .update_child(&3, &ids[5], |r: &mut R| {
            *r.points_mut() *= 2;
            *r.points_mut()
        })
        .await
        .unwrap();
    assert_eq!(doubled, 10, "{label}");
    let renamed = db.update_child(&3, &ids[5], |r: &mut R| *r = R::make(4, ids[5], 0));
    assert!(matches!(renamed.await, Err(Error::Invalid(_))), "{label}");

    assert!(db.delete_child::<R>(&3, &ids[0]).await.unwrap(), "{label}");
    assert!(!db.delete_child::<R>(&3, &ids[0]).await.unwrap(), "{label}");
    assert_eq!(db.children::<R>(&3).await.unwrap().len(), 11, "{label}");

    assert!(db.delete_group::<R>(&3).await.unwrap(), "{label}");
    assert!(db.children::<R>(&3).await.unwrap().is_empty(), "{label}");
    let root = <R::Parent as Entity>::key_for(&3);
    assert!(db.store().get(&root).await.unwrap().is_none(), "{label}");
    for k in 0..R::GROUP_SHARDS {
        let anchor = autoshard::layout::sub_group(&root, k);
        assert!(db.store().get(&anchor).await.unwrap().is_none(), "{label}");
    }
    assert!(!db.delete_group::<R>(&3).await.unwrap(), "{label}: re-run");
    let late = db.insert(&mut R::make(3, Uuid::new_v4(), 0)).await;
    assert!(
        matches!(late, Err(Error::NotFound { .. })),
        "{label}: {late:?}"
    );
}

async fn all_semantics(connect: impl AsyncFn(&str) -> Arc<dyn DocumentStore>, label: &str) {
    transfers::<Response>(connect("transfer-k1").await, label).await;
    transfers::<HotResponse>(connect("transfer-k8").await, label).await;
    lifecycle::<Response>(connect("life-k1").await, label).await;
    lifecycle::<HotResponse>(connect("life-k8").await, label).await;
}

/// Inserts with one and with eight sub-groups, then the group semantics; on memory behind
/// a modelled commit log per group, on a Redis Cluster with the slots of the sub-groups.
async fn on(backend: &Backend, label: &str) {
    let connect = async |case: &str| match backend.kind() {
        Kind::Memory => modelled_memory(),
        _ => backend.store(case).await,
    };
    let (plain, sharded) = insert_variants(connect, label).await;
    if backend.kind() == Kind::Memory {
        // The model serializes commits per (sub-)group: one log is the bottleneck, eight
        // are not. Counts, not timings.
        assert!(
            plain.metrics.conflicts > sharded.metrics.conflicts,
            "K=8 did not reduce conflicts: {} vs {}",
            plain.metrics.conflicts,
            sharded.metrics.conflicts
        );
    }
    all_semantics(connect, label).await;

    if let Backend::Cluster(cluster) = backend {
        // Hash tags: the members of one sub-group share a slot; the sub-groups of one root
        // spread over slots.
        let slot = |key: &Key| cluster.nodes[0].cli(&["cluster", "keyslot", &key.encode()]);
        let root = HotQuestion::key_for(&42);
        let mut slots = std::collections::BTreeSet::new();
        for k in 0..HotQuestion::GROUP_SHARDS {
            let anchor = autoshard::layout::sub_group(&root, k);
            let member = anchor.child("HotResponse", Uuid::new_v4().to_string());
            assert_eq!(slot(&anchor), slot(&member));
            slots.insert(slot(&anchor));
        }
        assert!(slots.len() > 1, "8 sub-groups in one slot: {slots:?}");
        assert_ne!(slot(&root), slot(&autoshard::layout::sub_group(&root, 0)));
    }
}

autoshard_test_support::every_store!(on);
