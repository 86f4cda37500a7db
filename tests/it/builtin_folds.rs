//! Built-in folds (`#[shardable(fold = ...)]`) and write coalescing through the mapper:
//! saves merge on the store without conflicts, values round-trip for every fold, an
//! overflow keeps the change, concurrent saves share commits and stay exact, and every
//! save of a batch whose commit fails gets the error and keeps its change, and `apply`
//! changes sharded properties without a load. Every store runs every case.

use autoshard::entity::ShardHooks;
use autoshard::prelude::*;
use autoshard::store::faulty::{Fault, FaultyStore};
use autoshard_test_support::every_store::Backend;
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

/// One property per built-in fold, static and dynamic.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
struct Post {
    #[id]
    id: u64,
    title: String,
    #[shardable(shards = 10, fold = sum)]
    likes: i64,
    #[shardable(neutral = 0, shards = 4, fold = max)]
    best: u64,
    #[shardable(neutral = i32::MAX, fold = min)]
    lowest: i32,
    #[shardable(shards = 3, fold = union)]
    tags: BTreeSet<String>,
    #[shardable(fold = union)]
    readers: HashSet<u64>,
    /// One shard: the store's check of a shard's sum is then the check of the total.
    #[shardable(shards = 1, fold = sum)]
    tiny: i8,
}

impl Post {
    fn fresh(id: u64) -> Post {
        Post::new(
            id,
            "t".into(),
            0,
            0,
            i32::MAX,
            BTreeSet::new(),
            HashSet::new(),
            0,
        )
    }

    #[shard_method]
    fn like(&mut self) {
        self.likes += 1;
    }

    #[shard_method]
    fn read(&mut self, reader: u64, score: u64, mark: i32, tag: &str) {
        self.readers.insert(reader);
        self.best = self.best.max(score);
        self.lowest = self.lowest.min(mark);
        self.tags.insert(tag.to_owned());
    }

    #[shard_method]
    fn bump_tiny(&mut self, by: i8) {
        self.tiny += by;
    }
}

type Db = Mapper<Arc<dyn DocumentStore>>;

/// Values of every fold survive save and load, across several loads and saves, on
/// static and dynamic shards; big integers stay exact.
async fn every_fold_round_trips(store: Arc<dyn DocumentStore>, label: &str) {
    let db: Db = Mapper::new(store);
    db.insert(&mut Post::fresh(1)).await.unwrap();
    for i in 0..6_u64 {
        let mut post: Post = db.load(&1).await.unwrap();
        post.like();
        let mark = i32::try_from(i).unwrap() - 3;
        post.read(u64::MAX - i, 10 * i, mark, &format!("tag \"{}\"/é", i % 3));
        db.save(&mut post).await.unwrap();
    }
    let post: Post = db.load(&1).await.unwrap();
    assert_eq!(post.likes, 6, "{label}");
    assert_eq!(post.best, 50, "{label}");
    assert_eq!(post.lowest, -3, "{label}");
    assert_eq!(post.tags.len(), 3, "{label}: {:?}", post.tags);
    assert_eq!(
        post.readers,
        (0..6).map(|i| u64::MAX - i).collect(),
        "{label}"
    );
}

/// 32 tasks x 50 likes through one mapper: every save returns `Ok`, the total is exact,
/// and a built-in fold never conflicts (every attempt commits); coalescing makes the
/// commits fewer than the saves, and turning it off makes them equal.
async fn concurrent_likes_never_conflict(store: Arc<dyn DocumentStore>, label: &str) {
    for coalescing in [true, false] {
        let db: Db = Mapper::new(store.clone()).with_coalescing(coalescing);
        let id = 2 + u64::from(coalescing);
        db.insert(&mut Post::fresh(id)).await.unwrap();
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let db = db.clone();
                tokio::spawn(async move {
                    let mut post: Post = db.load(&id).await.unwrap();
                    for _ in 0..50 {
                        post.like();
                        db.save(&mut post).await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let m = db.metrics().snapshot();
        let post: Post = db.load(&id).await.unwrap();
        eprintln!("{label}, coalescing {coalescing}: {m:?}");
        assert_eq!(post.likes, 32 * 50, "{label}");
        assert_eq!((m.conflicts, m.failures), (0, 0), "{label}: {m:?}");
        if coalescing {
            assert!(
                m.commits < 32 * 50,
                "{label}: no save shared a commit: {m:?}"
            );
        } else {
            assert_eq!(m.commits, 32 * 50, "{label}: {m:?}");
        }
    }
}

/// A sum beyond the field's type fails with `Overflow` and keeps the change pending;
/// the stored value is untouched, and the entity saves once the change fits again. (Two
/// values loaded at 120 each add 5: each sees 125, the store would hold 130.)
async fn overflow_keeps_the_change(store: Arc<dyn DocumentStore>, label: &str) {
    let db: Db = Mapper::new(store);
    db.insert(&mut Post::fresh(4)).await.unwrap();
    db.update(&4, |p: &mut Post| p.bump_tiny(120))
        .await
        .unwrap();
    let mut first: Post = db.load(&4).await.unwrap();
    let mut second: Post = db.load(&4).await.unwrap();
    first.bump_tiny(5);
    db.save(&mut first).await.unwrap();
    second.bump_tiny(5);
    let err = db.save(&mut second).await.unwrap_err();
    assert!(matches!(err, Error::Overflow { .. }), "{label}: {err:?}");
    assert!(second.state().unwrap().has_pending(), "{label}");
    assert_eq!(db.load::<Post>(&4).await.unwrap().tiny, 125, "{label}");
    second.bump_tiny(-10);
    db.save(&mut second).await.unwrap();
    assert_eq!(db.load::<Post>(&4).await.unwrap().tiny, 120, "{label}");
}

/// 16 tasks like concurrently while one merge in 4 fails after it was applied (its reply
/// lost): every save whose batch failed gets the error and keeps its change, and saving
/// again stores each like exactly once.
async fn failed_batches_keep_every_change(store: Arc<dyn DocumentStore>, label: &str) {
    let faulty = FaultyStore::new(store);
    let db: Db = Mapper::new(Arc::new(faulty.clone()) as Arc<dyn DocumentStore>);
    db.insert(&mut Post::fresh(5)).await.unwrap();
    faulty.fail_randomly(4, Fault::After);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let db = db.clone();
            tokio::spawn(async move {
                let mut post: Post = loop {
                    if let Ok(post) = db.load(&5).await {
                        break post;
                    }
                };
                let mut failed = 0;
                for _ in 0..40 {
                    post.like();
                    while let Err(err) = db.save(&mut post).await {
                        assert!(matches!(err, Error::Backend { .. }), "{err:?}");
                        // Every save of a batch gets the error the batch's call got,
                        // with what failed and why.
                        let text = err.to_string();
                        assert!(
                            text.contains("(FaultyStore)") && text.contains("injected fault"),
                            "{text}"
                        );
                        assert!(post.state().unwrap().has_pending());
                        failed += 1;
                    }
                }
                failed
            })
        })
        .collect();
    let mut failed = 0;
    for task in tasks {
        failed += task.await.unwrap();
    }
    faulty.clear();
    assert!(
        failed > 16,
        "{label}: too few failures to mean anything: {failed}"
    );
    assert_eq!(db.load::<Post>(&5).await.unwrap().likes, 16 * 40, "{label}");
}

async fn every_case(backend: &Backend, label: &str) {
    every_fold_round_trips(backend.store("round-trip").await, label).await;
    concurrent_likes_never_conflict(backend.store("concurrent").await, label).await;
    overflow_keeps_the_change(backend.store("overflow").await, label).await;
    failed_batches_keep_every_change(backend.store("failed").await, label).await;
    apply_without_a_load(backend.store("apply").await, label).await;
}

/// `apply` changes sharded properties without loading them, never writes into a deleted
/// entity (also when it reused the main document of one it applied to before), applies
/// to the entity stored when it runs after a delete and insert, and refuses a change to
/// an unsharded field.
async fn apply_without_a_load(store: Arc<dyn DocumentStore>, label: &str) {
    let db: Db = Mapper::new(store);
    db.insert(&mut Post::fresh(6)).await.unwrap();
    for _ in 0..5 {
        db.apply(&6, Post::like).await.unwrap();
    }
    db.apply(&6, |p: &mut Post| p.read(9, 4, -1, "x"))
        .await
        .unwrap();
    let post: Post = db.load(&6).await.unwrap();
    assert_eq!((post.likes, post.best, post.lowest), (5, 4, -1), "{label}");
    assert!(db.delete::<Post>(&6).await.unwrap());
    let gone = db.apply(&6, Post::like).await;
    assert!(
        matches!(gone, Err(Error::NotFound { .. })),
        "{label}: {gone:?}"
    );
    db.insert(&mut Post::fresh(6)).await.unwrap();
    db.apply(&6, Post::like).await.unwrap();
    assert_eq!(db.load::<Post>(&6).await.unwrap().likes, 1, "{label}");
    // Replaced while this mapper still holds the old main document: the like goes to
    // the new entity, once.
    db.delete::<Post>(&6).await.unwrap();
    db.insert(&mut Post::fresh(6)).await.unwrap();
    db.apply(&6, Post::like).await.unwrap();
    assert_eq!(db.load::<Post>(&6).await.unwrap().likes, 1, "{label}");
    let renamed = db.apply(&6, |p: &mut Post| p.title = "new".into()).await;
    assert!(
        matches!(renamed, Err(Error::Invalid(_))),
        "{label}: {renamed:?}"
    );
    assert_eq!(db.load::<Post>(&6).await.unwrap().title, "t", "{label}");
    let never = db.apply(&7, Post::like).await;
    assert!(
        matches!(never, Err(Error::NotFound { .. })),
        "{label}: {never:?}"
    );
}

autoshard_test_support::every_store!(every_case);
