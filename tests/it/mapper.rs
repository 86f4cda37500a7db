//! The macros and the mapper together, end to end on the embedded `MemoryStore`: the
//! README's `Question` (insert, load folds the shards, a vote lands in one shard), several
//! sharded properties with different folds, and exact totals under concurrency.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use autoshard::ReadCache;
use autoshard::prelude::*;
use autoshard::store::{Scan, Version};
use serde_json::json;

#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
struct Question {
    #[id]
    id: u64,
    text: String,
    author: String,
    #[shardable(neutral = 0, shards = 10)]
    votes: i64,
}

impl Question {
    #[shard_method]
    fn vote_up(&mut self) {
        self.votes += 1;
    }

    #[shard_fold]
    fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }
}

use autoshard_test_support::board::Board;

fn question(id: u64, votes: i64) -> Question {
    Question::new(id, "Why shard?".into(), "Phil R".into(), votes)
}

/// The `votes` field of every static shard document of `main`, shard 0 first.
async fn shard_votes(store: &MemoryStore, main: &Key) -> Vec<i64> {
    let mut votes = Vec::new();
    for i in 0..10 {
        let doc = store
            .get(&autoshard::layout::static_shard(main, "votes", i))
            .await
            .unwrap();
        let shard = doc.expect("every static shard exists after insert");
        votes.push(shard.doc["shard_votes"].as_i64().unwrap());
    }
    votes
}

#[tokio::test]
async fn design_example_round_trip() {
    let db = Mapper::new(MemoryStore::new());
    db.insert(&mut question(42, 76)).await.unwrap();

    let main = Question::key_for(&42);
    assert_eq!(
        shard_votes(db.store(), &main).await,
        [76, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    let stored = db.store().get(&main).await.unwrap().unwrap();
    assert_eq!(stored.doc["text"], json!("Why shard?"));
    assert!(
        !stored.doc.contains_key("votes"),
        "the main document holds no shard value"
    );

    let mut q: Question = db.load(&42).await.unwrap();
    assert_eq!((q.votes, q.text.as_str()), (76, "Why shard?"));
    q.vote_up();
    assert_eq!(q.votes, 77);
    db.save(&mut q).await.unwrap();

    let votes = shard_votes(db.store(), &main).await;
    assert_eq!(votes.iter().sum::<i64>(), 77);
    let initial = [76, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let changed = votes
        .iter()
        .zip(initial)
        .filter(|(now, then)| **now != *then)
        .count();
    assert_eq!(changed, 1, "the vote lands in exactly one shard: {votes:?}");
    assert_eq!(db.load::<Question>(&42).await.unwrap().votes, 77);

    // A second save without a new vote writes nothing: the shadow was reset.
    let before = db.metrics().snapshot();
    db.save(&mut q).await.unwrap();
    assert_eq!(db.metrics().snapshot().commits, before.commits);

    assert!(matches!(
        db.load::<Question>(&7).await,
        Err(Error::NotFound { .. })
    ));
    assert!(db.delete::<Question>(&42).await.unwrap());
    assert!(matches!(
        db.load::<Question>(&42).await,
        Err(Error::NotFound { .. })
    ));
    let left = db.store().scan(&Scan::new("Question", None)).await.unwrap();
    assert!(
        left.items.is_empty(),
        "delete removes the main document: {left:?}"
    );
    assert_eq!(
        db.store()
            .get(&autoshard::layout::static_shard(&main, "votes", 3))
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn several_folds_through_the_store() {
    let db = Mapper::new(MemoryStore::new());
    let mut board = Board::new(
        "b/1:{x}".into(),
        "league".into(),
        None,
        10,
        5,
        BTreeSet::from(["start".into()]),
    );
    db.insert(&mut board).await.unwrap();

    let mut b: Board = db.load(&"b/1:{x}".to_owned()).await.unwrap();
    b.add(3);
    b.observe(4); // below the stored peak: the max stays 5
    b.tag("rust");
    db.save(&mut b).await.unwrap();
    let mut b: Board = db.load(&"b/1:{x}".to_owned()).await.unwrap();
    b.observe(9);
    b.add(-1);
    db.save(&mut b).await.unwrap();

    let b: Board = db.load(&"b/1:{x}".to_owned()).await.unwrap();
    assert_eq!(b.score, 12);
    assert_eq!(b.peak, 9);
    assert_eq!(
        b.tags,
        BTreeSet::from(["rust".to_owned(), "start".to_owned()])
    );
    assert_eq!(b.title, "league");
}

/// The versions of every static shard document of a `Board` (score: 4, tags: 3).
async fn shard_versions(store: &MemoryStore, main: &Key) -> Vec<Option<Version>> {
    let mut versions = Vec::new();
    for (property, shards) in [("score", 4), ("tags", 3)] {
        for i in 0..shards {
            versions.push(
                store
                    .get(&autoshard::layout::static_shard(main, property, i))
                    .await
                    .unwrap()
                    .map(|d| d.version),
            );
        }
    }
    versions
}

/// A shard method marks every shadow touched; a save must not write shards for the
/// properties it did not change.
#[tokio::test]
async fn save_skips_shadows_left_at_neutral() {
    let db = Mapper::new(MemoryStore::new());
    let id = "quiet".to_owned();
    db.insert(&mut Board::new(
        id.clone(),
        "t".into(),
        None,
        0,
        0,
        BTreeSet::new(),
    ))
    .await
    .unwrap();
    let main = Board::key_for(&id);
    let before = shard_versions(db.store(), &main).await;

    let mut b: Board = db.load(&id).await.unwrap();
    let commits = db.metrics().snapshot().commits;
    b.add(1);
    db.save(&mut b).await.unwrap();
    assert_eq!(
        db.metrics().snapshot().commits,
        commits + 1,
        "one shard commit, for score only"
    );
    let after = shard_versions(db.store(), &main).await;
    assert_eq!(before.iter().zip(&after).filter(|(a, b)| a != b).count(), 1);
}

/// 32 tasks x 50 votes each through `update`, with retries: the total is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_votes_are_exact() {
    const TASKS: i64 = 32;
    const VOTES: i64 = 50;
    let db = Arc::new(
        Mapper::new(MemoryStore::new()).with_retry(RetryPolicy::fixed(
            std::time::Duration::from_millis(1),
            1_000,
        )),
    );
    db.insert(&mut question(1, 1_000)).await.unwrap();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let db = Arc::clone(&db);
            tokio::spawn(async move {
                for _ in 0..VOTES {
                    let mut q: Question = db.load(&1).await.unwrap();
                    q.vote_up();
                    db.save(&mut q).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        db.load::<Question>(&1).await.unwrap().votes,
        1_000 + TASKS * VOTES
    );
}

#[autoshard::sharded]
#[derive(Entity, Debug)]
struct Page {
    #[id]
    url: String,
    title: String,
    #[shardable(shards = 4, fold = sum)]
    visits: u64,
}

impl Page {
    #[shard_method]
    fn visit(&mut self) {
        self.visits += 1;
    }
}

#[tokio::test]
async fn string_ids_are_accepted_borrowed_and_owned() {
    let db = Mapper::new(MemoryStore::new());
    db.insert(&mut Page::new("/a".into(), "A".into(), 0))
        .await
        .unwrap();
    let owned = String::from("/a");
    db.apply("/a", |p: &mut Page| p.visit()).await.unwrap();
    db.apply(&owned, |p: &mut Page| p.visit()).await.unwrap();
    db.update(owned.as_str(), |p: &mut Page| p.visit())
        .await
        .unwrap();
    let page: Page = db.load("/a").await.unwrap();
    assert_eq!((page.url.as_str(), page.visits), ("/a", 3));
    assert_eq!(db.load::<Page>(&owned).await.unwrap().visits, 3);
    assert!(matches!(
        db.load::<Page>("/b").await,
        Err(Error::NotFound { .. })
    ));
    assert!(db.delete::<Page>("/a").await.unwrap());
    assert!(!db.delete::<Page>(&owned).await.unwrap());
}

#[tokio::test]
async fn entities_handle_runs_the_mapper_operations_on_one_kind() {
    let db = Mapper::new(MemoryStore::new());
    let pages = db.entities::<Page>();
    pages
        .insert(&mut Page::new("/".into(), "Home".into(), 0))
        .await
        .unwrap();
    pages.apply("/", Page::visit).await.unwrap();
    let total = pages
        .update("/", |p| {
            p.visit();
            p.visits
        })
        .await
        .unwrap();
    assert_eq!(total, 2);
    let once = pages.update_once("/", "op-1", Page::visit).await.unwrap();
    assert!(once.is_applied());
    let again = pages.update_once("/", "op-1", Page::visit).await.unwrap();
    assert!(!again.is_applied());
    let mut page = pages.load("/").await.unwrap();
    page.visit();
    pages.save(&mut page).await.unwrap();
    let many = pages
        .load_many(&["/".to_string(), "/none".to_string()])
        .await
        .unwrap();
    assert_eq!(many[0].as_ref().map(|p| p.visits), Some(4));
    assert!(many[1].is_none());
    // The handle shares the mapper: what it wrote, the mapper reads.
    assert_eq!(db.load::<Page>("/").await.unwrap().visits, 4);
    assert_eq!(format!("{pages:?}"), r#"Entities { kind: "Page" }"#);
    assert!(pages.delete("/").await.unwrap());
    assert!(pages.load("/").await.is_err());
}

/// A gauge with a plain float, floats in a list, and a sharded float folded by the
/// entity's own function.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
struct Gauge {
    #[id]
    id: u64,
    reading: f64,
    history: Vec<Option<f64>>,
    #[shardable(neutral = 0.0, shards = 4)]
    total: f64,
}

impl Gauge {
    #[shard_method]
    fn add(&mut self, amount: f64) {
        self.total += amount;
    }

    #[shard_fold]
    fn fold_total(a: f64, b: f64) -> f64 {
        a + b
    }
}

/// A float that JSON cannot hold (NaN, infinite), in a plain property, inside a list or
/// in a sharded property, fails the write with an error naming the property, and nothing
/// is written: before, it was stored as `null` and every load of the entity failed.
#[tokio::test]
async fn floats_json_cannot_hold_fail_the_write_and_nothing_is_written() {
    let db = Mapper::new(MemoryStore::new());
    let gauge = |reading: f64, last: f64| Gauge::new(1, reading, vec![None, Some(last)], 0.0);
    let refused = |got: Result<()>, property: &str, what: &str| match got {
        Err(Error::Malformed { field, reason, .. }) => {
            assert_eq!(field, property, "{what}");
            assert!(reason.contains("not finite"), "{what}: {reason}");
        }
        other => panic!("{what}: expected Malformed, got {other:?}"),
    };
    refused(
        db.insert(&mut gauge(f64::NAN, 1.0)).await,
        "reading",
        "insert of NaN",
    );
    refused(
        db.insert(&mut gauge(1.0, f64::INFINITY)).await,
        "history",
        "insert in a list",
    );
    assert!(matches!(
        db.load::<Gauge>(&1).await,
        Err(Error::NotFound { .. })
    ));

    db.insert(&mut gauge(2.5, 1.0)).await.unwrap();
    db.apply(&1, |g: &mut Gauge| g.add(1.5)).await.unwrap();
    let got = db
        .update(&1, |g: &mut Gauge| g.reading = f64::NEG_INFINITY)
        .await;
    refused(got, "reading", "update to -inf");
    let got = db.apply(&1, |g: &mut Gauge| g.add(f64::NAN)).await;
    refused(got, "total", "apply of NaN");
    let loaded = db.load::<Gauge>(&1).await.unwrap();
    assert_eq!((loaded.reading, loaded.total), (2.5, 1.5));
    assert_eq!(loaded.history, vec![None, Some(1.0)]);
}

/// `Duration::MAX` (for "forever") as a write window, a read cache's staleness, a key
/// group's wait and its lease is taken as a very long time, and every operation works:
/// before, a reshard under such a window, the cache's construction and a waiting group
/// panicked on an overflow.
#[tokio::test]
async fn durations_up_to_duration_max_count_as_forever() {
    let db = Mapper::new(MemoryStore::new())
        .with_write_window(Duration::MAX)
        .with_read_cache(ReadCache::new(Duration::MAX));
    assert!(db.write_window() >= Duration::from_hours(99 * 365 * 24));
    db.insert(&mut question(1, 0)).await.unwrap();
    db.apply(&1, Question::vote_up).await.unwrap();
    db.reshard::<Question>(&1, 4).await.unwrap();
    db.reshard::<Question>(&1, 2).await.unwrap();
    db.drain::<Question>(&1).await.unwrap();
    assert_eq!(db.load::<Question>(&1).await.unwrap().votes, 1);

    let group = db
        .key_group()
        .member::<Question>(&1)
        .wait(Duration::MAX)
        .lease(Duration::MAX)
        .create()
        .await
        .unwrap();
    group.renew(Duration::MAX).await.unwrap();
    group.dissolve().await.unwrap();
    let once = db
        .key_group()
        .member::<Question>(&1)
        .lease(Duration::MAX)
        .once()
        .await
        .unwrap();
    once.commit().await.unwrap();
}

/// Unsharded fields of every shape serde gives, beside a sharded counter.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
struct Shapes {
    #[id]
    id: u64,
    text: String,
    letter: char,
    count: u32,
    flag: bool,
    maybe: Option<i64>,
    ratio: f64,
    tags: Vec<String>,
    mood: Mood,
    meters: Meters,
    held: Option<Meters>,
    #[shardable(shards = 2, fold = sum)]
    likes: i64,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
enum Mood {
    Calm,
    Loud(u8),
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
struct Meters(u32);

impl Shapes {
    #[shard_method]
    fn like(&mut self) {
        self.likes += 1;
    }
}

fn shapes(id: u64) -> Shapes {
    Shapes::new(
        id,
        "a".into(),
        'x',
        1,
        false,
        None,
        0.5,
        vec!["t".into()],
        Mood::Calm,
        Meters(3),
        Some(Meters(1)),
        0,
    )
}

type Change = fn(&mut Shapes);

/// Each change of one unsharded field, by name: `apply` must refuse it, `save` must
/// write it. The first leaves every field as it is.
fn field_changes() -> Vec<(&'static str, Change)> {
    vec![
        ("nothing", |_| {}),
        ("text", |s| s.text.push('b')),
        ("text, to equal length", |s| s.text = "b".into()),
        ("letter", |s| s.letter = 'y'),
        ("count", |s| s.count = 2),
        ("flag", |s| s.flag = true),
        ("maybe", |s| s.maybe = Some(0)),
        ("ratio", |s| s.ratio = 1.5),
        ("tags", |s| s.tags.push("u".into())),
        ("mood", |s| s.mood = Mood::Loud(1)),
        ("meters", |s| s.meters = Meters(4)),
        ("held", |s| s.held = Some(Meters(2))),
        ("held, to none", |s| s.held = None),
    ]
}

#[tokio::test]
async fn apply_refuses_and_save_writes_a_change_of_any_unsharded_field() {
    let db = Mapper::new(MemoryStore::new());
    for (i, (field, change)) in field_changes().into_iter().enumerate() {
        let id = u64::try_from(i).unwrap();
        db.insert(&mut shapes(id)).await.unwrap();
        let main = Shapes::key_for(&id);
        let version = db.store().get(&main).await.unwrap().unwrap().version;
        let applied = db
            .apply(&id, |s: &mut Shapes| {
                change(s);
                s.like();
            })
            .await;
        let mut loaded: Shapes = db.load(&id).await.unwrap();
        if field == "nothing" {
            applied.unwrap();
            assert_eq!(loaded.likes, 1, "{field}");
        } else {
            assert!(
                matches!(applied, Err(Error::Invalid(_))),
                "{field}: {applied:?}"
            );
            assert_eq!(loaded.likes, 0, "{field}: nothing written");
        }
        change(&mut loaded);
        loaded.like();
        db.save(&mut loaded).await.unwrap();
        let stored = db.store().get(&main).await.unwrap().unwrap();
        let rewritten = stored.version != version;
        assert_eq!(
            rewritten,
            field != "nothing",
            "{field}: main document rewritten"
        );
        let reloaded: Shapes = db.load(&id).await.unwrap();
        assert_eq!(
            reloaded.to_document().unwrap(),
            loaded.to_document().unwrap(),
            "{field}"
        );
        assert_eq!(reloaded.likes, loaded.likes, "{field}");
    }
}
