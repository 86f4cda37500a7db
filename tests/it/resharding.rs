//! The shard layout belongs to the entity: each scenario on the memory store, a
//! standalone Redis, a 3-node Redis Cluster and a PostgreSQL server started here:
//! - 48 writers vote while the entity is resharded 10 -> 40 -> 2 -> 10: every total is
//!   exact and no contention error reaches a writer;
//! - the annotation's count changes between "runs" (10 -> 4 -> 20 -> dynamic -> 10) with
//!   votes in between: every load is exact, and a delete through one annotation leaves
//!   nothing a re-insert through another would count;
//! - a keyed operation run again after a reshard is not applied twice;
//! - bad counts and missing entities are refused with typed errors;
//! - `reshard_kind` reshards every entity of a kind;
//! - a shrink moves the retired shards' values into live ones and deletes them once the
//!   write window has passed;
//! - a fault before or after any store call of a shrink, or the shrink's future dropped
//!   at any point, leaves every load exact, and the next `drain` finishes the work;
//! - a change in doubt sent to a shard a shrink then retires is applied exactly once;
//! - saves cut short at random points (their futures dropped) and saved again, while the
//!   entity is resharded back and forth, count every vote once.

use autoshard::prelude::*;
use autoshard::store::faulty::{Fault, FaultyStore};
use autoshard::store::latency::LatencyStore;
use autoshard::{Key, layout};
use autoshard_test_support::every_store::Backend;

use std::time::Duration;

/// The write window of the drain scenarios: retired shards are deleted this long (and a
/// quarter) after their seal. The scenarios sleep twice the window where it must have
/// passed, and check what holds only within it while it has not.
const WINDOW: Duration = Duration::from_millis(500);

/// Starts at one shard: everything a grow adds, a shrink retires and drains.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(kind = "Spiky")]
struct Spiky {
    #[id]
    id: u64,
    #[shardable(neutral = 0, shards = 1)]
    votes: i64,
    #[shardable(shards = 1, fold = sum)]
    likes: i64,
}

impl Spiky {
    #[shard_method]
    fn vote(&mut self) {
        self.votes += 1;
        self.likes += 1;
    }

    #[shard_fold]
    fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }
}

/// A hot entity: `votes` folds through read and compare-and-set, `likes` is merged by
/// the store.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(kind = "Hot")]
struct Hot {
    #[id]
    id: u64,
    #[shardable(neutral = 0, shards = 10)]
    votes: i64,
    #[shardable(shards = 10, fold = sum)]
    likes: i64,
}

impl Hot {
    #[shard_method]
    fn vote(&mut self) {
        self.votes += 1;
        self.likes += 1;
    }

    #[shard_fold]
    fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }
}

macro_rules! tally {
    ($name:ident, $($shards:tt)*) => {
        /// Kind `Tally` as one deployment of the annotation declares it.
        #[autoshard::sharded]
        #[derive(Entity, Debug, Clone)]
        #[entity(kind = "Tally")]
        struct $name {
            #[id]
            id: u64,
            #[shardable(neutral = 0 $($shards)*)]
            votes: i64,
        }

        impl $name {
            #[shard_method]
            fn vote(&mut self) {
                self.votes += 1;
            }

            #[shard_fold]
            fn fold_votes(a: i64, b: i64) -> i64 {
                a + b
            }
        }
    };
}

tally!(Tally10, , shards = 10);
tally!(Tally4, , shards = 4);
tally!(Tally20, , shards = 20);
tally!(TallyDynamic,);

/// Bounded by its annotation: 2 to 8 shards.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(kind = "Tally")]
struct Bounded {
    #[id]
    id: u64,
    #[shardable(shards = 4, min = 2, max = 8, fold = sum)]
    votes: i64,
}

/// No static property to reshard.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(kind = "Tally")]
struct Plain {
    #[id]
    id: u64,
    #[shardable(neutral = 0)]
    votes: i64,
}

impl Plain {
    #[shard_fold]
    fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }
}

async fn resharding_under_writers_is_exact<S: DocumentStore + Clone + 'static>(
    db: Mapper<S>,
    label: &str,
) {
    const WRITERS: u64 = 48;
    const VOTES: u64 = 15;
    db.insert(&mut Hot::new(1, 0, 0)).await.unwrap();
    let mut writers = tokio::task::JoinSet::new();
    for _ in 0..WRITERS {
        let db = db.clone();
        writers.spawn(async move {
            for _ in 0..VOTES {
                db.update(&1, Hot::vote).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
    }
    // Where a save of both properties is one commit, a load sees both or neither of a
    // vote; on a Redis Cluster each property commits on its own, so a load may see a
    // writer's vote in one property and not yet in the other (the save's docs): at most
    // one vote per writer apart.
    let apart = if db.store().cross_group_transactions() {
        0
    } else {
        i64::try_from(WRITERS).unwrap()
    };
    for shards in [40, 2, 10] {
        db.reshard::<Hot>(&1, shards).await.unwrap();
        let seen = db.load::<Hot>(&1).await.unwrap();
        assert!(
            (seen.votes - seen.likes).abs() <= apart,
            "{label}: after reshard to {shards}: {} votes, {} likes",
            seen.votes,
            seen.likes
        );
    }
    while let Some(done) = writers.join_next().await {
        done.unwrap();
    }
    let total = i64::try_from(WRITERS * VOTES).unwrap();
    let hot = db.load::<Hot>(&1).await.unwrap();
    assert_eq!((hot.votes, hot.likes), (total, total), "{label}");
    // A reshard to the count it has changes nothing; later saves still land.
    db.reshard::<Hot>(&1, 10).await.unwrap();
    db.update(&1, Hot::vote).await.unwrap();
    let hot = db.load::<Hot>(&1).await.unwrap();
    assert_eq!((hot.votes, hot.likes), (total + 1, total + 1), "{label}");
    assert!(db.delete::<Hot>(&1).await.unwrap());
    db.insert(&mut Hot::new(1, 0, 0)).await.unwrap();
    let hot = db.load::<Hot>(&1).await.unwrap();
    assert_eq!(
        (hot.votes, hot.likes),
        (0, 0),
        "{label}: nothing comes back"
    );
}

async fn annotation_changes_keep_every_value<S: DocumentStore>(db: Mapper<S>, label: &str) {
    db.insert(&mut Tally10::new(7, 0)).await.unwrap();
    for _ in 0..30 {
        db.update(&7, Tally10::vote).await.unwrap();
    }
    assert_eq!(
        db.load::<Tally4>(&7).await.unwrap().votes,
        30,
        "{label}: 10 -> 4"
    );
    for _ in 0..30 {
        db.update(&7, Tally4::vote).await.unwrap();
    }
    assert_eq!(
        db.load::<Tally20>(&7).await.unwrap().votes,
        60,
        "{label}: 4 -> 20"
    );
    for _ in 0..30 {
        db.update(&7, Tally20::vote).await.unwrap();
    }
    assert_eq!(
        db.load::<Tally4>(&7).await.unwrap().votes,
        90,
        "{label}: 20 -> 4"
    );
    assert_eq!(
        db.load::<TallyDynamic>(&7).await.unwrap().votes,
        90,
        "{label}: 20 -> dynamic"
    );
    for _ in 0..30 {
        db.update(&7, TallyDynamic::vote).await.unwrap();
    }
    assert_eq!(db.load::<Tally10>(&7).await.unwrap().votes, 120, "{label}");
    assert_eq!(db.load::<Tally4>(&7).await.unwrap().votes, 120, "{label}");
    // A reshard through one annotation is seen through every other.
    db.reshard::<Tally4>(&7, 32).await.unwrap();
    for _ in 0..40 {
        db.update(&7, Tally4::vote).await.unwrap();
    }
    assert_eq!(db.load::<Tally10>(&7).await.unwrap().votes, 160, "{label}");
    // A delete through the smallest annotation removes every shard of every layout.
    assert!(db.delete::<Tally4>(&7).await.unwrap());
    db.insert(&mut Tally20::new(7, 5)).await.unwrap();
    assert_eq!(db.load::<Tally10>(&7).await.unwrap().votes, 5, "{label}");
    assert_eq!(
        db.load::<TallyDynamic>(&7).await.unwrap().votes,
        5,
        "{label}"
    );
}

async fn keyed_operation_survives_a_reshard<S: DocumentStore>(db: Mapper<S>, label: &str) {
    db.insert(&mut Tally10::new(9, 0)).await.unwrap();
    let first = db
        .update_once(&9, "user 17 votes", Tally10::vote)
        .await
        .unwrap();
    assert!(first.is_applied(), "{label}");
    db.reshard::<Tally10>(&9, 3).await.unwrap();
    let again = db
        .update_once(&9, "user 17 votes", Tally10::vote)
        .await
        .unwrap();
    assert!(
        !again.is_applied(),
        "{label}: applied twice across a reshard"
    );
    db.reshard::<Tally10>(&9, 64).await.unwrap();
    let again = db
        .update_once(&9, "user 17 votes", Tally4::vote)
        .await
        .unwrap();
    assert!(
        !again.is_applied(),
        "{label}: applied twice across an annotation change"
    );
    assert_eq!(db.load::<Tally20>(&9).await.unwrap().votes, 1, "{label}");
}

async fn bad_reshards_are_refused<S: DocumentStore>(db: Mapper<S>, label: &str) {
    db.insert(&mut Tally10::new(11, 2)).await.unwrap();
    for shards in [0, 65, Mapper::<S>::MAX_SHARDS + 1] {
        let refused = db.reshard::<Tally10>(&11, shards).await;
        assert!(
            matches!(refused, Err(Error::Invalid(_))),
            "{label}: {refused:?}"
        );
    }
    for shards in [1, 9] {
        let refused = db.reshard::<Bounded>(&11, shards).await;
        assert!(
            matches!(&refused, Err(Error::Invalid(m)) if m.contains("2 to 8")),
            "{label}: {refused:?}"
        );
    }
    db.reshard::<Bounded>(&11, 8).await.unwrap();
    db.reshard::<Bounded>(&11, 2).await.unwrap();
    let missing = db.reshard::<Tally10>(&12, 4).await;
    assert!(matches!(missing, Err(Error::NotFound { .. })), "{label}");
    let dynamic = db.reshard::<Plain>(&11, 4).await;
    assert!(matches!(dynamic, Err(Error::Invalid(_))), "{label}");
    assert_eq!(db.load::<Tally10>(&11).await.unwrap().votes, 2, "{label}");
}

/// The static shard documents stored for `Spiky` `id`, by property and index.
async fn stored_shards<S: DocumentStore>(store: &S, id: u64) -> Vec<(String, u32)> {
    let main = Key::new("Spiky", id.to_string());
    let mut scan = layout::static_shards_scan(&main);
    let mut found = Vec::new();
    loop {
        let page = store.scan(&scan).await.unwrap();
        for (key, _) in page.items {
            let (property, index) = key.name().rsplit_once('.').unwrap();
            found.push((property.to_owned(), index.parse().unwrap()));
        }
        match page.next {
            Some(cursor) => scan.cursor = Some(cursor),
            None => break,
        }
    }
    found.sort();
    found
}

/// Asserts that `Spiky` `id` loads `expected` votes and likes.
async fn assert_total<S: DocumentStore>(db: &Mapper<S>, id: u64, expected: i64, what: &str) {
    let spiky = db.load::<Spiky>(&id).await.unwrap();
    assert_eq!((spiky.votes, spiky.likes), (expected, expected), "{what}");
}

async fn shrink_drains_and_deletes_retired_shards<S: DocumentStore + Clone + 'static>(
    db: Mapper<S>,
    label: &str,
) {
    db.insert(&mut Spiky::new(1, 0, 0)).await.unwrap();
    db.reshard::<Spiky>(&1, 8).await.unwrap();
    let mut writers = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let db = db.clone();
        writers.spawn(async move {
            for _ in 0..10 {
                db.update(&1, Spiky::vote).await.unwrap();
            }
        });
    }
    while let Some(done) = writers.join_next().await {
        done.unwrap();
    }
    let sealed = std::time::Instant::now();
    db.reshard::<Spiky>(&1, 2).await.unwrap();
    assert_total(
        &db,
        1,
        80,
        &format!("{label}: shrunk, retired shards sealed"),
    )
    .await;
    // Six added shards per property retired, moved and sealed: kept for the window (on a
    // machine slow enough for the window to pass already, they may be gone).
    let kept = db.drain::<Spiky>(&1).await.unwrap();
    if sealed.elapsed() < WINDOW {
        assert_eq!(kept, 12, "{label}");
    } else {
        assert!(kept == 12 || kept == 0, "{label}: {kept}");
    }
    for _ in 0..5 {
        db.update(&1, Spiky::vote).await.unwrap();
    }
    assert_total(&db, 1, 85, &format!("{label}: votes after the shrink")).await;
    tokio::time::sleep(WINDOW * 2).await;
    assert_eq!(db.drain::<Spiky>(&1).await.unwrap(), 0, "{label}");
    let live: Vec<(String, u32)> = ["likes", "votes"]
        .into_iter()
        .flat_map(|p| [(p.to_owned(), 0), (p.to_owned(), 7)])
        .collect();
    assert_eq!(
        stored_shards(db.store(), 1).await,
        live,
        "{label}: retired shards deleted"
    );
    assert_total(
        &db,
        1,
        85,
        &format!("{label}: after the retired shards are deleted"),
    )
    .await;
    // Grow again: fresh shards, none of the deleted indexes reused.
    db.reshard::<Spiky>(&1, 3).await.unwrap();
    db.update(&1, Spiky::vote).await.unwrap();
    assert_total(&db, 1, 86, &format!("{label}: grown again")).await;
}

/// A shrink from 6 shards to 1 with a fault injected at its `n`-th store call, for every
/// `n` until a shrink runs without reaching the fault; then recovery.
async fn shrink_survives_a_fault_at_every_call<S: DocumentStore + Clone + 'static>(
    store: S,
    label: &str,
) {
    let faulty = FaultyStore::new(store);
    let db = Mapper::new(faulty.clone()).with_write_window(WINDOW);
    let mut id = 1000;
    for fault in [Fault::Before, Fault::After] {
        for n in 0.. {
            id += 1;
            let what = format!("{label}: {fault:?} call {n}");
            db.insert(&mut Spiky::new(id, 0, 0)).await.unwrap();
            db.reshard::<Spiky>(&id, 6).await.unwrap();
            for _ in 0..12 {
                db.update(&id, Spiky::vote).await.unwrap();
            }
            let faults_before = faulty.faults();
            faulty.fail_call(n, fault);
            let shrunk = db.reshard::<Spiky>(&id, 1).await;
            let hit = faulty.faults() > faults_before;
            faulty.clear();
            assert!(hit || shrunk.is_ok(), "{what}: {shrunk:?}");
            assert_total(&db, id, 12, &format!("{what}: right after")).await;
            db.update(&id, Spiky::vote).await.unwrap();
            assert_total(&db, id, 13, &format!("{what}: a vote after")).await;
            db.reshard::<Spiky>(&id, 1).await.unwrap();
            if !hit {
                break;
            }
        }
    }
    // Everything left over is deleted by the next drain after the window.
    tokio::time::sleep(WINDOW * 2).await;
    for id in 1001..=id {
        assert_eq!(db.drain::<Spiky>(&id).await.unwrap(), 0, "{label}: {id}");
        assert_eq!(stored_shards(&faulty, id).await.len(), 2, "{label}: {id}");
        assert_total(&db, id, 13, &format!("{label}: {id} after the drain")).await;
    }
}

/// A shrink whose future is dropped after a growing delay, each store call taking a
/// millisecond: every load exact, the next reshard finishes.
async fn shrink_dropped_at_any_point_is_exact<S: DocumentStore + Clone + 'static>(
    store: S,
    label: &str,
) {
    let slow = LatencyStore::new(store, Duration::from_millis(1))
        .with_read_latency(Duration::from_millis(1));
    let db = Mapper::new(slow).with_write_window(WINDOW);
    // A millisecond more each time, then growing faster, until a shrink completes (on a
    // slow machine a shrink takes longer): bounded by 80 tries.
    let delays = (0..40).chain((1..=40).map(|k| 40 + 20 * k));
    let mut completed = false;
    for (id, after_ms) in (5000..).zip(delays) {
        let what = format!("{label}: dropped after {after_ms} ms");
        db.insert(&mut Spiky::new(id, 0, 0)).await.unwrap();
        db.reshard::<Spiky>(&id, 5).await.unwrap();
        for _ in 0..8 {
            db.update(&id, Spiky::vote).await.unwrap();
        }
        let shrink = db.reshard::<Spiky>(&id, 1);
        let done = tokio::time::timeout(Duration::from_millis(after_ms), shrink).await;
        assert_total(&db, id, 8, &what).await;
        db.update(&id, Spiky::vote).await.unwrap();
        db.reshard::<Spiky>(&id, 1).await.unwrap();
        assert_total(&db, id, 9, &what).await;
        if done.is_ok() {
            completed = true;
            break;
        }
    }
    assert!(completed, "{label}: no shrink completed within 840 ms");
}

/// A change whose reply was lost (or that failed before reaching the store), sent to one
/// of two shards, then a shrink to one: saving again stores it exactly once, whether
/// the retired shard holds it (moved with its value) or not (sent to the live one).
async fn change_in_doubt_across_a_shrink_applies_once<S: DocumentStore + Clone + 'static>(
    store: S,
    label: &str,
) {
    let faulty = FaultyStore::new(store);
    let db = Mapper::new(faulty.clone()).with_write_window(Duration::from_mins(1));
    for (id, fault) in (6000..).zip([Fault::After, Fault::Before].repeat(8)) {
        let what = format!("{label}: {id} {fault:?}");
        db.insert(&mut Spiky::new(id, 0, 0)).await.unwrap();
        db.reshard::<Spiky>(&id, 2).await.unwrap();
        let mut spiky = db.load::<Spiky>(&id).await.unwrap();
        spiky.vote();
        faulty.fail_call(0, fault);
        assert!(db.save(&mut spiky).await.is_err(), "{what}");
        db.reshard::<Spiky>(&id, 1).await.unwrap();
        db.save(&mut spiky).await.unwrap();
        db.save(&mut spiky).await.unwrap();
        assert_total(&db, id, 1, &what).await;
    }
    // An entity loaded while there were two shards saves into the retired one after it
    // was deleted: the change goes to the live shard.
    let db = db.with_write_window(WINDOW);
    db.insert(&mut Spiky::new(6999, 0, 0)).await.unwrap();
    db.reshard::<Spiky>(&6999, 2).await.unwrap();
    let mut stale = db.load::<Spiky>(&6999).await.unwrap();
    db.reshard::<Spiky>(&6999, 1).await.unwrap();
    tokio::time::sleep(WINDOW * 2).await;
    assert_eq!(db.drain::<Spiky>(&6999).await.unwrap(), 0, "{label}");
    for _ in 0..10 {
        stale.vote();
        db.save(&mut stale).await.unwrap();
    }
    assert_total(&db, 6999, 10, &format!("{label}: stale layout")).await;
    assert_eq!(
        stored_shards(&faulty, 6999).await.len(),
        2,
        "{label}: nothing recreated"
    );
}

/// 16 writers of one entity each cast 25 votes, every save under a timeout of 0 to 3 ms
/// (its future dropped wherever it is) and saved again until stored, while the entity
/// goes 10 -> 40 -> 2 -> 30 -> 10 shards: every vote is counted once.
async fn interrupted_saves_across_reshards_count_once<S: DocumentStore + Clone + 'static>(
    store: S,
    label: &str,
) {
    let slow = LatencyStore::new(store, Duration::from_micros(500))
        .with_read_latency(Duration::from_micros(300));
    let db = Mapper::new(slow);
    db.insert(&mut Hot::new(50, 0, 0)).await.unwrap();
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..16_u64 {
        let db = db.clone();
        writers.spawn(async move {
            let mut hot = db.load::<Hot>(&50).await.unwrap();
            for n in 0..25_u64 {
                hot.vote();
                let limit = Duration::from_micros((w * 131 + n * 197) % 3000);
                if let Ok(Ok(())) = tokio::time::timeout(limit, db.save(&mut hot)).await {
                    continue;
                }
                while let Err(e) = db.save(&mut hot).await {
                    assert!(
                        matches!(e, Error::Contention { .. } | Error::Backend { .. }),
                        "a save failed: {e:?}"
                    );
                }
            }
        });
    }
    for shards in [40, 2, 30, 10] {
        tokio::time::sleep(Duration::from_millis(20)).await;
        db.reshard::<Hot>(&50, shards).await.unwrap();
    }
    while let Some(done) = writers.join_next().await {
        done.unwrap();
    }
    let hot = db.load::<Hot>(&50).await.unwrap();
    assert_eq!(
        (hot.votes, hot.likes),
        (400, 400),
        "{label}: interrupted saves"
    );
}

/// Every entity of a kind at once; one deleted meanwhile is no failure.
async fn a_whole_kind_is_resharded<S: DocumentStore>(db: Mapper<S>, label: &str) {
    for id in 400..405 {
        db.insert(&mut Spiky::new(id, 0, 0)).await.unwrap();
        db.update(&id, Spiky::vote).await.unwrap();
    }
    let report = db.reshard_kind::<Spiky>(5).await.unwrap();
    assert_eq!(report.failures, 0, "{label}");
    assert!(report.entities >= 5, "{label}: {report:?}");
    for id in 400..405 {
        assert_eq!(db.shards::<Spiky>(&id).await.unwrap(), 5, "{label}");
        db.update(&id, Spiky::vote).await.unwrap();
        assert_total(&db, id, 2, label).await;
    }
    let refused = db.reshard_kind::<Spiky>(65).await;
    assert!(matches!(refused, Err(Error::Invalid(_))), "{label}");
}

async fn all<S: DocumentStore + Clone + 'static>(store: S, label: &str) {
    let db = Mapper::new(store.clone());
    resharding_under_writers_is_exact(db.clone(), label).await;
    annotation_changes_keep_every_value(db.clone(), label).await;
    keyed_operation_survives_a_reshard(db.clone(), label).await;
    bad_reshards_are_refused(db.clone(), label).await;
    a_whole_kind_is_resharded(db.clone(), label).await;
    shrink_drains_and_deletes_retired_shards(db.with_write_window(WINDOW), label).await;
    shrink_survives_a_fault_at_every_call(store.clone(), label).await;
    shrink_dropped_at_any_point_is_exact(store.clone(), label).await;
    change_in_doubt_across_a_shrink_applies_once(store.clone(), label).await;
    interrupted_saves_across_reshards_count_once(store, label).await;
}

/// Every case on one store of the backend.
async fn on(backend: &Backend, label: &str) {
    all(backend.store("reshard").await, label).await;
}

autoshard_test_support::every_store!(on);
