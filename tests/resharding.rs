//! The shard layout belongs to the entity: each scenario on the memory store, a
//! standalone Redis and a 3-node Redis Cluster started here:
//! - 48 writers vote while the entity is resharded 10 -> 40 -> 2 -> 10: every total is
//!   exact and no contention error reaches a writer;
//! - the annotation's count changes between "runs" (10 -> 4 -> 20 -> dynamic -> 10) with
//!   votes in between: every load is exact, and a delete through one annotation leaves
//!   nothing a re-insert through another would count;
//! - a keyed operation run again after a reshard is not applied twice;
//! - bad counts and missing entities are refused with typed errors.

use autoshard::prelude::*;
#[cfg(feature = "redis")]
use autoshard_test_support::redis::{namespace, Cluster, Standalone};
#[cfg(feature = "redis")]
use std::sync::Arc;

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
    for shards in [40, 2, 10] {
        db.reshard::<Hot>(&1, shards).await.unwrap();
        let seen = db.load::<Hot>(&1).await.unwrap();
        assert_eq!(seen.votes, seen.likes, "{label}: after reshard to {shards}");
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
    for shards in [0, Mapper::<S>::MAX_SHARDS + 1] {
        let refused = db.reshard::<Tally10>(&11, shards).await;
        assert!(
            matches!(refused, Err(Error::Invalid(_))),
            "{label}: {refused:?}"
        );
    }
    let missing = db.reshard::<Tally10>(&12, 4).await;
    assert!(matches!(missing, Err(Error::NotFound { .. })), "{label}");
    let dynamic = db.reshard::<Plain>(&11, 4).await;
    assert!(matches!(dynamic, Err(Error::Invalid(_))), "{label}");
    assert_eq!(db.load::<Tally10>(&11).await.unwrap().votes, 2, "{label}");
}

async fn all<S: DocumentStore + Clone + 'static>(store: S, label: &str) {
    let db = Mapper::new(store);
    resharding_under_writers_is_exact(db.clone(), label).await;
    annotation_changes_keep_every_value(db.clone(), label).await;
    keyed_operation_survives_a_reshard(db.clone(), label).await;
    bad_reshards_are_refused(db, label).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory() {
    all(MemoryStore::new(), "memory").await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_standalone() {
    let server = Standalone::start();
    let options = RedisOptions::default().namespace(namespace("reshard"));
    let store = RedisStore::connect_with(&server.url(), options)
        .await
        .unwrap();
    all(Arc::new(store), "standalone").await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster() {
    let cluster = Cluster::start();
    let options = RedisOptions::default().namespace(namespace("reshard"));
    let store = RedisStore::connect_cluster_with(&cluster.urls(), options)
        .await
        .unwrap();
    all(Arc::new(store), "cluster").await;
}
