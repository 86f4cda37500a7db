//! The mapper end to end, with entities declared by the real macros: the behaviour every
//! save, load and update must keep. The concurrent votes run through the harness of the
//! concurrency scenarios (`autoshard_test_support::concurrency`), counting the mapper's
//! attempts exactly on the memory store.

use autoshard_runtime::entity::ShardHooks;
use autoshard_runtime::{
    Document, DocumentStore, Entity, Error, Key, LatencyStore, Mapper, MemoryStore, RetryPolicy,
};
use autoshard_test_support::concurrency::{self, TASKS};
use autoshard_test_support::entities::{NaiveQuestion, Question};
use autoshard_test_support::store::{Knobs, TestStore};
use std::sync::Arc;
use std::time::Duration;

const START: i64 = 1000;

/// Retries that do not run out in these tests.
fn patient() -> RetryPolicy {
    RetryPolicy::exponential(Duration::from_micros(50), Duration::from_millis(2), 100_000)
        .with_max_elapsed(Duration::from_mins(2))
}

async fn sharded_mapper<S: DocumentStore + Clone + 'static>(
    store: S,
    policy: RetryPolicy,
) -> Mapper<S> {
    // One commit per save, so that the tests can count them (`coalescing` below).
    let db = Mapper::new(store).with_retry(policy).with_coalescing(false);
    db.insert(&mut Question::new(1, "Hot?", START))
        .await
        .expect("insert");
    db
}

async fn naive_mapper<S: DocumentStore + Clone + 'static>(
    store: S,
    policy: RetryPolicy,
) -> Mapper<S> {
    let db = Mapper::new(store).with_retry(policy);
    db.insert(&mut NaiveQuestion {
        id: 1,
        text: "Hot?".into(),
        votes: START,
    })
    .await
    .expect("insert");
    db
}

/// Each task loads once and saves after every vote; failed votes are dropped (shadow and
/// aggregate rolled back). Answers the number of votes that were saved.
async fn sharded_votes<S: DocumentStore + Clone + 'static>(db: &Mapper<S>, votes: u64) -> u64 {
    concurrency::from_tasks(|| {
        let db = db.clone();
        async move {
            let mut q: Question = db.load(&1).await.expect("load");
            let mut saved = 0;
            for _ in 0..votes {
                q.vote_up();
                match db.save(&mut q).await {
                    Ok(()) => saved += 1,
                    Err(Error::Contention { .. }) => {
                        q.reset_shadow(0);
                        q.votes -= 1;
                    }
                    Err(e) => panic!("save: {e}"),
                }
            }
            saved
        }
    })
    .await
}

/// Each task calls `update` once per vote. Answers the number of successful updates.
async fn naive_votes<S: DocumentStore + Clone + 'static>(db: &Mapper<S>, votes: u64) -> u64 {
    let db = db.clone();
    concurrency::votes(votes, move || {
        let db = db.clone();
        async move { db.update(&1, |q: &mut NaiveQuestion| q.vote_up()).await }
    })
    .await
}

fn total(votes: u64) -> i64 {
    START + i64::try_from(votes).expect("small")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_votes_with_retries_are_exact() {
    let db = sharded_mapper(MemoryStore::new(), patient()).await;
    let saved = sharded_votes(&db, 500).await;
    assert_eq!(saved, TASKS * 500);
    assert_eq!(
        db.load::<Question>(&1).await.expect("load").votes,
        START + 32_000
    );
    let m = db.metrics().snapshot();
    eprintln!("sharded_votes_with_retries_are_exact: {m:?}");
    assert_eq!(m.commits, 32_000, "{m:?}");
    assert_eq!(m.failures, 0, "{m:?}");
    assert_eq!(m.attempts, m.commits + m.conflicts, "{m:?}");
    assert_eq!(m.retries, m.conflicts, "{m:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_votes_without_retries_count_every_commit_once() {
    let db = sharded_mapper(MemoryStore::new(), RetryPolicy::none()).await;
    let saved = sharded_votes(&db, 500).await;
    let m = db.metrics().snapshot();
    eprintln!("sharded_votes_without_retries_count_every_commit_once: {m:?}");
    assert_eq!(m.attempts, TASKS * 500, "{m:?}");
    assert_eq!(m.attempts, m.commits + m.failures, "{m:?}");
    assert_eq!(m.commits, saved, "{m:?}");
    assert_eq!(m.retries, 0);
    assert_eq!(
        db.load::<Question>(&1).await.expect("load").votes,
        total(m.commits)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naive_votes_with_retries_are_exact() {
    let db = naive_mapper(MemoryStore::new(), patient()).await;
    let saved = naive_votes(&db, 500).await;
    assert_eq!(saved, 32_000);
    assert_eq!(
        db.load::<NaiveQuestion>(&1).await.expect("load").votes,
        START + 32_000
    );
    let m = db.metrics().snapshot();
    eprintln!("naive_votes_with_retries_are_exact: {m:?}");
    assert_eq!((m.commits, m.failures), (32_000, 0), "{m:?}");
    assert_eq!(m.attempts, m.commits + m.conflicts, "{m:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naive_votes_without_retries_count_every_commit_once() {
    let db = naive_mapper(MemoryStore::new(), RetryPolicy::none()).await;
    let saved = naive_votes(&db, 500).await;
    let m = db.metrics().snapshot();
    eprintln!("naive_votes_without_retries_count_every_commit_once: {m:?}");
    assert_eq!(m.attempts, 32_000, "{m:?}");
    assert_eq!(m.attempts, m.commits + m.failures, "{m:?}");
    assert_eq!(m.commits, saved);
    assert_eq!(
        db.load::<NaiveQuestion>(&1).await.expect("load").votes,
        total(m.commits)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_store_sees_conflicts_and_stays_exact() {
    let slow = || LatencyStore::new(MemoryStore::new(), Duration::from_millis(2));

    let db = sharded_mapper(slow(), patient()).await;
    assert_eq!(sharded_votes(&db, 10).await, TASKS * 10);
    assert_eq!(
        db.load::<Question>(&1).await.expect("load").votes,
        total(TASKS * 10)
    );
    let sharded = db.metrics().snapshot();
    assert_eq!(sharded.attempts, sharded.commits + sharded.conflicts);

    let db = naive_mapper(slow(), patient()).await;
    assert_eq!(naive_votes(&db, 3).await, TASKS * 3);
    assert_eq!(
        db.load::<NaiveQuestion>(&1).await.expect("load").votes,
        total(TASKS * 3)
    );
    let naive = db.metrics().snapshot();
    assert_eq!(naive.attempts, naive.commits + naive.conflicts);
    // 64 writers on one slow key must collide; no timing is asserted.
    assert!(naive.conflicts > 0, "{naive:?}");

    let db = sharded_mapper(slow(), RetryPolicy::none()).await;
    let saved = sharded_votes(&db, 5).await;
    let m = db.metrics().snapshot();
    assert_eq!(m.attempts, m.commits + m.failures);
    assert_eq!(m.commits, saved);
    assert_eq!(
        db.load::<Question>(&1).await.expect("load").votes,
        total(saved)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_writes_main_and_every_shard() {
    let store = MemoryStore::new();
    let db = Mapper::new(store.clone());
    let mut q = Question::new(5, "Shards?", 40);
    q.vote_up(); // before insert: stored as part of the value at insert, not again later
    db.insert(&mut q).await.expect("insert");
    // Main, 10 static shards, and the empty compacted dynamic shard (see `dynamic`).
    assert_eq!(store.len(), 12);
    let main = q.key();
    // The unsharded fields, and the entity's incarnation (a fresh id per insert).
    let mut stored = store.get(&main).await.unwrap().unwrap().doc;
    let incarnation = stored.remove("~inc").expect("an incarnation");
    assert!(incarnation.as_str().is_some_and(|i| !i.is_empty()));
    // The shard layout the annotation gives, which the entity keeps from now on.
    let layout = stored.remove("~shards").expect("a shard layout");
    assert_eq!(
        layout,
        serde_json::json!({"votes": {"shards": 10, "base": 10, "next": 10, "from": 10}})
    );
    // The sharded properties, so that a type reading one as a plain field is refused.
    let sharded = stored.remove("~sharded").expect("the sharded properties");
    assert_eq!(sharded, serde_json::json!(["votes"]));
    assert_eq!(
        stored,
        Document::from([("text".to_owned(), "Shards?".into())])
    );
    for i in 0..10 {
        let shard = store
            .get(&autoshard_runtime::layout::static_shard(&main, "votes", i))
            .await
            .unwrap()
            .expect("shard");
        let want = if i == 0 { 41 } else { 0 };
        assert_eq!(
            shard.doc,
            Document::from([
                ("shard_votes".to_owned(), want.into()),
                ("~inc".to_owned(), incarnation.clone()),
            ]),
            "shard {i}: its value and the entity's incarnation"
        );
    }
    db.save(&mut q).await.expect("save");
    assert_eq!(
        db.metrics().snapshot().attempts,
        0,
        "nothing to save after insert"
    );
    assert_eq!(db.load::<Question>(&5).await.unwrap().votes, 41);
    assert!(
        matches!(db.insert(&mut Question::new(5, "x", 0)).await, Err(Error::AlreadyExists { key }) if key == main)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_alone_does_not_write_the_main_document() {
    let store = MemoryStore::new();
    let db = Mapper::new(store.clone());
    db.insert(&mut Question::new(1, "Dirty?", 0)).await.unwrap();
    let main = Question::key_for(&1);
    let version = |s: MemoryStore, k: Key| async move { s.get(&k).await.unwrap().unwrap().version };
    let v0 = version(store.clone(), main.clone()).await;

    let mut q: Question = db.load(&1).await.unwrap();
    q.vote_up();
    db.save(&mut q).await.unwrap();
    assert_eq!(
        version(store.clone(), main.clone()).await,
        v0,
        "a vote rewrote the main document"
    );

    q.text = "Edited".into();
    q.vote_up();
    db.save(&mut q).await.unwrap();
    let v1 = version(store.clone(), main.clone()).await;
    assert_ne!(v1, v0, "an edit was not written");

    q.vote_up();
    db.save(&mut q).await.unwrap();
    assert_eq!(
        version(store.clone(), main.clone()).await,
        v1,
        "the saved edit was written again"
    );
    db.save(&mut q).await.unwrap(); // nothing changed: nothing written
    assert_eq!(db.metrics().snapshot().commits, 3);
    let loaded: Question = db.load(&1).await.unwrap();
    assert_eq!((loaded.text.as_str(), loaded.votes), ("Edited", 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_documents_are_typed_errors_naming_key_and_property() {
    let store = MemoryStore::new();
    let db = Mapper::new(store.clone()).with_retry(RetryPolicy::none());
    let main = Question::key_for(&1);

    // Foreign document at a main key: no `text`.
    store
        .put(&main, Document::from([("title".to_owned(), "x".into())]))
        .await
        .unwrap();
    match db.load::<Question>(&1).await {
        Err(Error::Malformed { key, field, .. }) => {
            assert_eq!((key, field.as_str()), (main.clone(), "text"));
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    // Wrong type at a main key.
    store
        .put(&main, Document::from([("text".to_owned(), 5.into())]))
        .await
        .unwrap();
    assert!(
        matches!(db.load::<Question>(&1).await, Err(Error::Malformed { field, .. }) if field == "text")
    );
    match db.update(&1, |q: &mut NaiveQuestion| q.vote_up()).await {
        Err(Error::NotFound { .. }) => {}
        other => panic!("NaiveQuestion/1 does not exist: {other:?}"),
    }
    let naive_key = NaiveQuestion::key_for(&1);
    store
        .put(
            &naive_key,
            Document::from([
                ("text".to_owned(), "t".into()),
                ("votes".to_owned(), "many".into()),
            ]),
        )
        .await
        .unwrap();
    assert!(matches!(
        db.update(&1, |q: &mut NaiveQuestion| q.vote_up()).await,
        Err(Error::Malformed { key, field, .. }) if key == naive_key && field == "votes"
    ));

    // A good main document, a malformed shard.
    store
        .put(&main, Document::from([("text".to_owned(), "ok".into())]))
        .await
        .unwrap();
    store
        .put(
            &autoshard_runtime::layout::static_shard(&main, "votes", 3),
            Document::from([("shard_votes".to_owned(), "banana".into())]),
        )
        .await
        .unwrap();
    match db.load::<Question>(&1).await {
        Err(Error::Malformed { key, field, reason }) => {
            assert_eq!(
                key,
                autoshard_runtime::layout::static_shard(&main, "votes", 3)
            );
            assert_eq!(field, "votes", "{reason}");
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    // Foreign shard documents (other fields only) count as neutral.
    store
        .put(
            &autoshard_runtime::layout::static_shard(&main, "votes", 3),
            Document::from([("other".to_owned(), 1.into())]),
        )
        .await
        .unwrap();
    assert_eq!(db.load::<Question>(&1).await.unwrap().votes, 0);

    // Saving into malformed shards: typed error, shadow kept.
    let mut q: Question = db.load(&1).await.unwrap();
    for i in 0..10 {
        store
            .put(
                &autoshard_runtime::layout::static_shard(&main, "votes", i),
                Document::from([("shard_votes".to_owned(), serde_json::json!({"a": 1}))]),
            )
            .await
            .unwrap();
    }
    q.vote_up();
    match db.save(&mut q).await {
        Err(Error::Malformed { key, field, .. }) => {
            assert_eq!(key.parent(), Some(main.clone()));
            assert_eq!(field, "votes");
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    // The change is kept, pending, for the next save.
    assert!(q.state().unwrap().has_pending());
    // Failed operations: the update of a missing entity, the malformed update, the save.
    assert_eq!(db.metrics().snapshot().failures, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_save_keeps_the_shadow_for_the_next_save() {
    // No cross-group transactions: exercises the shards-first insert path.
    let store = Arc::new(TestStore::new(
        MemoryStore::new(),
        Knobs {
            cross_group_transactions: Some(false),
            ..Knobs::default()
        },
    ));
    let db = Mapper::new(Arc::clone(&store)).with_retry(RetryPolicy::fixed(Duration::ZERO, 3));
    db.insert(&mut Question::new(1, "Retry?", 10))
        .await
        .unwrap();
    let mut q: Question = db.load(&1).await.unwrap();
    q.vote_up();
    q.vote_up();

    store.force_conflicts(3);
    match db.save(&mut q).await {
        Err(Error::Contention { key, attempts }) => {
            assert_eq!(attempts, 3);
            assert_eq!(key.parent(), Some(q.key()));
        }
        other => panic!("expected Contention, got {other:?}"),
    }
    assert!(q.state().unwrap().has_pending(), "the change was dropped");
    assert_eq!(db.load::<Question>(&1).await.unwrap().votes, 10);

    store.force_conflicts(2); // two conflicts, then a commit
    db.save(&mut q).await.unwrap();
    assert!(!q.shadow_touched(0) && !q.state().unwrap().has_pending());
    assert_eq!(db.load::<Question>(&1).await.unwrap().votes, 12);
    let m = db.metrics().snapshot();
    assert_eq!(
        (m.attempts, m.commits, m.conflicts, m.retries, m.failures),
        (6, 1, 5, 4, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_delete_and_the_default_store_type() {
    let db: Mapper = Mapper::new(Arc::new(MemoryStore::new()) as Arc<dyn DocumentStore>);
    db.insert(&mut Question::new(9, "Gone?", 1)).await.unwrap();
    let votes = db
        .update(&9, |q: &mut Question| {
            q.vote_up();
            q.votes
        })
        .await
        .unwrap();
    assert_eq!(votes, 2);
    assert_eq!(db.load::<Question>(&9).await.unwrap().votes, 2);
    assert!(db.delete::<Question>(&9).await.unwrap());
    assert!(!db.delete::<Question>(&9).await.unwrap());
    for i in 0..10 {
        assert_eq!(
            db.store()
                .get(&autoshard_runtime::layout::static_shard(
                    &Question::key_for(&9),
                    "votes",
                    i
                ))
                .await
                .unwrap(),
            None
        );
    }
    assert!(matches!(
        db.load::<Question>(&9).await,
        Err(Error::NotFound { .. })
    ));
    db.insert(&mut Question::new(9, "Back", 0)).await.unwrap();
    assert_eq!(db.load::<Question>(&9).await.unwrap().votes, 0);
}
