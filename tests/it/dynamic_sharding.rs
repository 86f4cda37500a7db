//! Dynamic property sharding and compaction, each scenario on the memory store,
//! a standalone Redis, a 3-node Redis Cluster and a PostgreSQL server started here:
//! - 32 writers save while compaction runs again and again: the total is exact, and a
//!   compaction leaves one shard document plus at most the saves that raced it;
//! - loads racing compaction (no writers) always see the exact total;
//! - a fault before or after every store call of a compaction: the total stays exact
//!   after recovery and a second compaction, which leaves one document;
//! - a property moved static -> dynamic -> static keeps its value;
//! - a save on a dynamic property is one insert and no read.

use autoshard::compaction::Compactor;
use autoshard::prelude::*;
use autoshard::store::faulty::{Fault, FaultyStore};
use autoshard_test_support::every_store::Backend;
use autoshard_test_support::store::{Knobs, TestStore};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A dynamically sharded counter, kind `Hits`.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(kind = "Hits")]
struct Counter {
    #[id]
    id: u64,
    label: String,
    #[shardable(neutral = 0)]
    hits: i64,
}

impl Counter {
    #[shard_method]
    fn hit(&mut self, n: i64) {
        self.hits += n;
    }

    #[shard_fold]
    fn fold_hits(a: i64, b: i64) -> i64 {
        a + b
    }
}

/// The same kind with 4 static shards: a redeploy that changed the annotation.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(kind = "Hits")]
struct StaticHits {
    #[id]
    id: u64,
    label: String,
    #[shardable(neutral = 0, shards = 4)]
    hits: i64,
}

impl StaticHits {
    #[shard_method]
    fn hit(&mut self, n: i64) {
        self.hits += n;
    }

    #[shard_fold]
    fn fold_hits(a: i64, b: i64) -> i64 {
        a + b
    }
}

fn hits(id: u64, start: i64) -> Counter {
    Counter::new(id, format!("counter {id}"), start)
}

/// How many dynamic shard documents entity `id` has.
async fn dynamic_docs<S: DocumentStore>(store: &S, id: u64) -> usize {
    let mut scan =
        autoshard::layout::dynamic_shards_scan(&Key::new("Hits", id.to_string())).limit(500);
    let mut n = 0;
    loop {
        let page = store.scan(&scan).await.unwrap();
        n += page.items.len();
        match page.next {
            Some(cursor) => scan.cursor = Some(cursor),
            None => return n,
        }
    }
}

const WRITERS: u64 = 32;
const SAVES: u64 = 40;

async fn writers_race_compaction<S: DocumentStore + 'static>(store: Arc<S>, label: &str) {
    // Saves never conflict with each other, only with a compaction commit (they expect
    // the compacted document unchanged); compactors conflict with each other. Both retry.
    let patient =
        RetryPolicy::exponential(Duration::from_micros(100), Duration::from_millis(5), 1000)
            .with_max_elapsed(Duration::from_mins(1));
    let db = Mapper::new(store.clone()).with_retry(patient);
    let compacting = Mapper::new(store.clone()).with_retry(patient);
    db.insert(&mut hits(1, 7)).await.unwrap();
    let started = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));

    // Three compactors at once: they conflict with each other, and must not lose or
    // double-count what another one folded meanwhile.
    let compactors: Vec<_> = (0..3)
        .map(|_| {
            let (db, stop) = (compacting.clone(), stop.clone());
            tokio::spawn(async move {
                let mut folded = 0;
                while !stop.load(Ordering::SeqCst) {
                    // Small batches: one compaction is several commits racing the saves.
                    folded += db
                        .compact_in_batches::<Counter>(&1, 4, 4)
                        .await
                        .unwrap()
                        .shards_folded;
                    tokio::task::yield_now().await;
                }
                folded
            })
        })
        .collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (db, started, done) = (db.clone(), started.clone(), done.clone());
            tokio::spawn(async move {
                let loaded: Counter = db.load(&1).await.unwrap();
                for i in 0..SAVES {
                    started.fetch_add(1, Ordering::SeqCst);
                    let mut h = loaded.clone();
                    h.hit(1 + i64::from(w == 0 && i == 0)); // one save adds 2
                    db.save(&mut h).await.unwrap();
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();

    // A compaction in the middle of the writes: what remains is the compacted document
    // plus at most the saves that were not complete when it started.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let complete_before = done.load(Ordering::SeqCst);
    compacting.compact::<Counter>(&1).await.unwrap();
    let left = dynamic_docs(&*store, 1).await as u64;
    let raced = started.load(Ordering::SeqCst) - complete_before;
    assert!(
        left <= 1 + raced,
        "{label}: {left} documents after compaction, {raced} saves raced it"
    );

    for w in writers {
        w.await.unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let mut folded = 0;
    for c in compactors {
        folded += c.await.unwrap();
    }
    let expected = 7 + i64::try_from(WRITERS * SAVES).unwrap() + 1;
    assert_eq!(
        db.load::<Counter>(&1).await.unwrap().hits,
        expected,
        "{label}"
    );
    let report = db.compact::<Counter>(&1).await.unwrap();
    assert_eq!(dynamic_docs(&*store, 1).await, 1, "{label}");
    assert_eq!(
        db.load::<Counter>(&1).await.unwrap().hits,
        expected,
        "{label}"
    );
    eprintln!("{label}: compactor folded {folded} shards while writing, {report:?} after");
}

/// Loads running while compaction moves values between documents see the exact total
/// every time (a racing scan is detected and repeated, never double-counted or short):
/// loads in one page (the stores' own), and loads in pages of 300 while compaction folds
/// 400 documents per commit, past the point such a load has reached.
async fn loads_race_compaction<S: DocumentStore + Clone + 'static>(store: S, label: &str) {
    const SHARDS: i64 = 2400;
    const TASKS: i64 = 16;
    let db = Mapper::new(store.clone());
    // Scans of at most 300 documents a page, so that a load reads the dynamic shards in
    // several steps and compaction can run between them.
    let small_pages = Knobs {
        max_page: Some(300),
        ..Knobs::default()
    };
    let paged = Mapper::new(TestStore::new(store.clone(), small_pages));
    db.insert(&mut hits(2, 0)).await.unwrap();
    let (mut exact, mut contended) = (0, 0);
    for round in 1..=3 {
        let base: Counter = db.load(&2).await.unwrap();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let (db, base) = (db.clone(), base.clone());
                tokio::spawn(async move {
                    for _ in 0..SHARDS / TASKS {
                        let mut h = base.clone();
                        h.hit(1);
                        db.save(&mut h).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let total = SHARDS * round;
        let compactor = {
            let db = db.clone();
            tokio::spawn(async move {
                loop {
                    let r = db.compact_in_batches::<Counter>(&2, 400, 1).await.unwrap();
                    if r.commits == 0 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        };
        let mut n = 0;
        while !compactor.is_finished() {
            n += 1;
            let loaded = if n % 4 != 0 {
                paged.load::<Counter>(&2).await
            } else {
                db.load::<Counter>(&2).await
            };
            match loaded {
                Ok(h) => {
                    assert_eq!(h.hits, total, "{label}: a load racing compaction");
                    exact += 1;
                }
                Err(e) if e.is_contention() => contended += 1,
                Err(e) => panic!("{label}: {e}"),
            }
        }
        compactor.await.unwrap();
        assert_eq!(db.load::<Counter>(&2).await.unwrap().hits, total, "{label}");
    }
    eprintln!("{label}: {exact} exact loads racing compaction, {contended} gave up on contention");
}

/// Faults before and after every store call of a compaction.
async fn faults_during_compaction<S: DocumentStore + Clone + 'static>(store: S, label: &str) {
    let db = Mapper::new(store.clone());
    let mut id = 100;
    for fault in [Fault::Before, Fault::After] {
        for call in 0.. {
            id += 1;
            db.insert(&mut hits(id, 3)).await.unwrap();
            for _ in 0..20 {
                db.update(&id, |h: &mut Counter| h.hit(2)).await.unwrap();
            }
            let expected = 3 + 20 * 2;
            let faulty = FaultyStore::new(store.clone());
            let compactor = Mapper::new(faulty.clone());
            faulty.fail_call(call, fault);
            // Batches of 8 over 21 documents: three commits, faults between them too.
            let outcome = compactor.compact_in_batches::<Counter>(&id, 8, 64).await;
            if faulty.faults() == 0 {
                outcome.unwrap();
                assert!(call > 3, "{label}: only {call} calls");
                break;
            }
            assert!(outcome.is_err(), "{label}: {fault:?} call {call}");
            let after_crash = db.load::<Counter>(&id).await.unwrap().hits;
            assert_eq!(after_crash, expected, "{label}: {fault:?} call {call}");
            db.compact::<Counter>(&id).await.unwrap();
            assert_eq!(db.load::<Counter>(&id).await.unwrap().hits, expected);
            assert_eq!(dynamic_docs(&store, id).await, 1, "{label}");
        }
    }
}

/// static (4 shards) -> dynamic -> static, and a compaction in between.
async fn static_dynamic_migration<S: DocumentStore>(store: S, label: &str) {
    let db = Mapper::new(store);
    let mut s = StaticHits::new(7, "moving".into(), 10);
    db.insert(&mut s).await.unwrap();
    for _ in 0..5 {
        db.update(&7, |h: &mut StaticHits| h.hit(1)).await.unwrap();
    }
    // Redeployed with `#[shardable(neutral = 0)]`: the static shards are still folded.
    assert_eq!(db.load::<Counter>(&7).await.unwrap().hits, 15, "{label}");
    for _ in 0..7 {
        db.update(&7, |h: &mut Counter| h.hit(1)).await.unwrap();
    }
    assert_eq!(db.load::<Counter>(&7).await.unwrap().hits, 22, "{label}");
    db.compact::<Counter>(&7).await.unwrap();
    assert_eq!(db.load::<Counter>(&7).await.unwrap().hits, 22, "{label}");
    // And back to static: the dynamic shards are still folded.
    assert_eq!(db.load::<StaticHits>(&7).await.unwrap().hits, 22, "{label}");
    for _ in 0..3 {
        db.update(&7, |h: &mut StaticHits| h.hit(1)).await.unwrap();
    }
    assert_eq!(db.load::<StaticHits>(&7).await.unwrap().hits, 25, "{label}");
    assert_eq!(db.load::<Counter>(&7).await.unwrap().hits, 25, "{label}");
    // Inserted dynamic, loaded static.
    db.insert(&mut hits(8, 4)).await.unwrap();
    db.update(&8, |h: &mut Counter| h.hit(1)).await.unwrap();
    assert_eq!(db.load::<StaticHits>(&8).await.unwrap().hits, 5, "{label}");
    assert!(db.delete::<Counter>(&8).await.unwrap());
    assert_eq!(dynamic_docs(db.store(), 8).await, 0, "{label}");
}

/// A dynamic save is a read of the main document and one write of a new document; a
/// neutral shadow makes no call.
async fn save_is_a_read_and_one_write<S: DocumentStore + Clone>(store: S, label: &str) {
    let faulty = FaultyStore::new(store);
    let db = Mapper::new(faulty.clone());
    db.insert(&mut hits(9, 0)).await.unwrap();
    let mut h: Counter = db.load(&9).await.unwrap();
    h.hit(5);
    let before = faulty.calls();
    db.save(&mut h).await.unwrap();
    assert_eq!(faulty.calls() - before, 2, "{label}: a dynamic save");
    h.hit(0); // touched, but neutral
    db.save(&mut h).await.unwrap();
    assert_eq!(faulty.calls() - before, 2, "{label}: a neutral shadow");
    assert_eq!(dynamic_docs(&faulty, 9).await, 2, "{label}"); // compacted + one
    let report = Compactor::<Counter, _>::new(db.clone())
        .run_once()
        .await
        .unwrap();
    assert_eq!((report.entities, report.shards_folded), (1, 1), "{label}");
    let idle = faulty.calls();
    let report = Compactor::<Counter, _>::new(db.clone())
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.commits, 0, "{label}");
    // An idle sweep: one scan of the roots and one of the entity's shards.
    assert_eq!(faulty.calls() - idle, 2, "{label}");
}

/// A load of a statically sharded entity is one store call: a `lookup` of the main
/// document and its shards with the first page of the scan for dynamic shards, which
/// finds the (empty) compacted document and so needs no second, checking read. (A
/// decorator forwards `lookup`, so the store's own one-call lookup is what it counts.)
async fn static_load_is_one_lookup<S: DocumentStore + Clone>(store: S, label: &str) {
    let faulty = FaultyStore::new(store);
    let db = Mapper::new(faulty.clone());
    db.insert(&mut StaticHits::new(11, "static".into(), 6))
        .await
        .unwrap();
    let before = faulty.calls();
    assert_eq!(db.load::<StaticHits>(&11).await.unwrap().hits, 6, "{label}");
    assert_eq!(faulty.calls() - before, 1, "{label}: a static load");
}

/// A shard document whose value does not decode: compaction fails naming that document,
/// and moves or deletes nothing; once the value is repaired, it compacts.
async fn compaction_refuses_undecodable_values<S: DocumentStore + Clone>(store: S, label: &str) {
    let db = Mapper::new(store.clone());
    db.insert(&mut hits(12, 0)).await.unwrap(); // the compacted document holds no value
    let main = Counter::key_for(&12);
    // Named to be listed before the saves' UUIDs on stores that list in key order.
    let bad = autoshard::layout::dynamic_shard(&main, "0-bad");
    store
        .put(&bad, [("shard_hits".to_owned(), "many".into())].into())
        .await
        .unwrap();
    // Loads fail on the bad value too; saves write new documents beside it.
    let mut counter = hits(12, 0);
    for _ in 0..3 {
        counter.hit(2);
        db.save(&mut counter).await.unwrap();
    }
    let before = dynamic_docs(&store, 12).await;
    match db.compact::<Counter>(&12).await {
        Err(Error::Malformed { key, field, .. }) => {
            assert_eq!(key, bad, "{label}");
            assert_eq!(field, "hits", "{label}");
        }
        other => panic!("{label}: expected Malformed at {bad}, got {other:?}"),
    }
    assert_eq!(
        dynamic_docs(&store, 12).await,
        before,
        "{label}: nothing moved"
    );
    assert!(store.get(&bad).await.unwrap().is_some(), "{label}");
    store
        .put(&bad, [("shard_hits".to_owned(), 4.into())].into())
        .await
        .unwrap();
    db.compact::<Counter>(&12).await.unwrap();
    assert_eq!(dynamic_docs(&store, 12).await, 1, "{label}");
    assert_eq!(db.load::<Counter>(&12).await.unwrap().hits, 10, "{label}");
    assert!(db.delete::<Counter>(&12).await.unwrap(), "{label}");
}

async fn all<S: DocumentStore + Clone + 'static>(store: S, label: &str) {
    compaction_refuses_undecodable_values(store.clone(), label).await;
    save_is_a_read_and_one_write(store.clone(), label).await;
    static_load_is_one_lookup(store.clone(), label).await;
    static_dynamic_migration(store.clone(), label).await;
    faults_during_compaction(store.clone(), label).await;
    writers_race_compaction(Arc::new(store.clone()), label).await;
    loads_race_compaction(store, label).await;
}

/// Every case on one store of the backend.
async fn on(backend: &Backend, label: &str) {
    all(backend.store("dyn").await, label).await;
}

autoshard_test_support::every_store!(on);
