//! A field that becomes `#[shardable]` keeps the value stored entities hold in it, on
//! every store (memory, standalone Redis, a 3-node Redis Cluster and PostgreSQL):
//! - loads count the main document's plain value once, before and after writes, with
//!   and without the read cache, while writers run;
//! - the first writes move it into the shards exactly once, even when they race each
//!   other or a call of theirs fails before or after reaching the store;
//! - a type that reads a sharded field as a plain one is refused with
//!   `Error::StillSharded`, and writes nothing.

use autoshard::ReadCache;
use autoshard::prelude::*;
use autoshard::store::faulty::{Fault, FaultyStore};
use autoshard_test_support::every_store::Backend;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// The entity as applications stored it before sharding anything.
#[derive(Entity, Debug, Clone)]
#[entity(kind = "Question")]
struct PlainQuestion {
    #[id]
    id: u64,
    text: String,
    votes: i64,
    tags: BTreeSet<String>,
}

/// The same entity once both fields are sharded: `votes` over static shards, `tags`
/// dynamically.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(kind = "Question")]
struct Question {
    #[id]
    id: u64,
    text: String,
    #[shardable(shards = 4, fold = sum)]
    votes: i64,
    #[shardable(fold = union)]
    tags: BTreeSet<String>,
}

impl Question {
    #[shard_method]
    fn vote_up(&mut self) {
        self.votes += 1;
    }

    #[shard_method]
    fn tag(&mut self, tag: &str) {
        self.tags.insert(tag.to_owned());
    }
}

type Db = Mapper<Arc<dyn DocumentStore>>;

const START: i64 = 76;
/// Writers racing to make the first writes, and the votes each casts.
const WRITERS: u64 = 6;
const VOTES: u64 = 8;

/// Stores question `id` as the plain type: 76 votes and one tag in its main document.
async fn store_plain(db: &Db, id: u64) {
    let tags = BTreeSet::from(["old".to_owned()]);
    db.insert(&mut PlainQuestion {
        id,
        text: "Why?".into(),
        votes: START,
        tags,
    })
    .await
    .unwrap();
}

/// The main document of question `id` as stored.
async fn main_doc(db: &Db, id: u64) -> autoshard::store::Document {
    let key = <Question as Entity>::key_for(&id);
    db.store().get(&key).await.unwrap().unwrap().doc
}

/// Loads, `load_many`, `aggregate` and a cached load all count the plain value once;
/// racing writers move it into the shards once, and readers meanwhile never see it
/// missing or doubled.
async fn plain_values_are_counted_once_while_writers_move_them(db: &Db, label: &str) {
    store_plain(db, 1).await;
    let cached = db
        .clone()
        .with_read_cache(ReadCache::new(Duration::from_mins(1)));
    let q = cached.load::<Question>(&1).await.unwrap();
    assert_eq!(
        (q.votes, q.tags.len()),
        (START, 1),
        "{label}: cached, before"
    );
    let q = db.load::<Question>(&1).await.unwrap();
    assert_eq!((q.votes, q.tags.len()), (START, 1), "{label}: before");
    let many = db.load_many::<Question>(&[1]).await.unwrap();
    assert_eq!(many[0].as_ref().map(|q| q.votes), Some(START), "{label}");
    let total: i64 = db.aggregate::<Question, _>(&1, "votes").await.unwrap();
    assert_eq!(total, START, "{label}: aggregate");

    let top = START + i64::try_from(WRITERS * VOTES).unwrap();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let db = db.clone();
            tokio::spawn(async move {
                for v in 0..VOTES {
                    if v % 2 == 0 {
                        db.apply(&1, Question::vote_up).await.unwrap();
                    } else {
                        db.update(&1, Question::vote_up).await.unwrap();
                    }
                }
                db.apply(&1, |q: &mut Question| q.tag(&format!("w{w}")))
                    .await
                    .unwrap();
            })
        })
        .collect();
    let reader = {
        let db = db.clone();
        tokio::spawn(async move {
            let mut last = START;
            let mut reads = 0;
            while reads < 200 {
                let q = db.load::<Question>(&1).await.unwrap();
                assert!(
                    (last..=top).contains(&q.votes),
                    "a load read {} after {last} (at most {top})",
                    q.votes
                );
                assert!(q.tags.contains("old"), "the plain tag went missing");
                last = q.votes;
                reads += 1;
                if last == top {
                    break;
                }
            }
        })
    };
    for writer in writers {
        writer.await.unwrap();
    }
    reader.await.unwrap();
    let q = db.load::<Question>(&1).await.unwrap();
    assert_eq!(q.votes, top, "{label}: after");
    assert_eq!(
        q.tags.len(),
        1 + usize::try_from(WRITERS).unwrap(),
        "{label}"
    );
    let total: i64 = db.aggregate::<Question, _>(&1, "votes").await.unwrap();
    assert_eq!(total, top, "{label}: aggregate after");
    let fresh = db
        .clone()
        .with_read_cache(ReadCache::new(Duration::from_mins(1)));
    assert_eq!(
        fresh.load::<Question>(&1).await.unwrap().votes,
        top,
        "{label}"
    );

    // The values left the main document; compaction keeps the tag's.
    let doc = main_doc(db, 1).await;
    assert!(
        !doc.contains_key("votes") && !doc.contains_key("tags"),
        "{label}: {doc:?}"
    );
    db.compact::<Question>(&1).await.unwrap();
    let q = db.load::<Question>(&1).await.unwrap();
    assert_eq!((q.votes, q.tags.len()), (top, 1 + 6), "{label}: compacted");
}

/// A call of the first write failing before or after it reaches the store, at every
/// call: the plain value is still counted once, and the next write finishes the move.
async fn an_interrupted_move_counts_the_value_once(store: Arc<dyn DocumentStore>, label: &str) {
    let faulty = FaultyStore::new(store.clone());
    let failing: Db = Mapper::new(Arc::new(faulty.clone()));
    let db: Db = Mapper::new(store);
    let mut id = 100;
    for fault in [Fault::Before, Fault::After] {
        let mut n = 0;
        loop {
            id += 1;
            store_plain(&db, id).await;
            let struck_before = faulty.faults();
            faulty.fail_call(n, fault);
            let first = failing.apply(&id, Question::vote_up).await;
            let struck = faulty.faults() > struck_before;
            faulty.clear();
            let what = format!("{label}: call {n} failing {fault:?}: {first:?}");
            let votes = db.load::<Question>(&id).await.unwrap().votes;
            match &first {
                Ok(()) => assert_eq!(votes, START + 1, "{what}"),
                // The vote itself may have landed before its reply was lost.
                Err(_) => assert!(votes == START || votes == START + 1, "{what}: {votes}"),
            }
            db.apply(&id, Question::vote_up).await.unwrap();
            let q = db.load::<Question>(&id).await.unwrap();
            assert_eq!(q.votes, votes + 1, "{what}: the next vote");
            assert_eq!(q.tags.len(), 1, "{what}: the tag");
            let doc = main_doc(&db, id).await;
            assert!(!doc.contains_key("votes"), "{what}: {doc:?}");
            if !struck {
                break; // past the last call of the first write
            }
            n += 1;
        }
        assert!(n > 4, "{label}: the first write made {n} calls");
    }
}

/// A type that reads a sharded field as a plain one is refused, and writes nothing.
async fn a_plain_type_never_reads_sharded_values(db: &Db, label: &str) {
    db.insert(&mut Question::new(7, "Sharded".into(), 5, BTreeSet::new()))
        .await
        .unwrap();
    db.apply(&7, Question::vote_up).await.unwrap();
    let before = main_doc(db, 7).await;
    let refused = |got: &Result<_>, what: &str| match got {
        Err(Error::StillSharded { property, .. }) => {
            assert!(property == "votes" || property == "tags", "{label}: {what}");
        }
        other => panic!("{label}: {what}: expected StillSharded, got {other:?}"),
    };
    refused(&db.load::<PlainQuestion>(&7).await.map(|_| ()), "load");
    refused(
        &db.update(&7, |q: &mut PlainQuestion| q.votes += 1).await,
        "update",
    );
    let mut built = PlainQuestion {
        id: 7,
        text: "Plain".into(),
        votes: 0,
        tags: BTreeSet::new(),
    };
    refused(&db.save(&mut built).await, "save");
    let message = db.load::<PlainQuestion>(&7).await.unwrap_err().to_string();
    assert!(message.contains("#[shardable]"), "{label}: {message}");
    assert_eq!(main_doc(db, 7).await, before, "{label}: nothing written");
    assert_eq!(db.load::<Question>(&7).await.unwrap().votes, 6, "{label}");
}

async fn every_case(backend: &Backend, label: &str) {
    let store = backend.store("adoption").await;
    let db: Db = Mapper::new(store.clone());
    plain_values_are_counted_once_while_writers_move_them(&db, label).await;
    a_plain_type_never_reads_sharded_values(&db, label).await;
    an_interrupted_move_counts_the_value_once(store, label).await;
}

autoshard_test_support::every_store!(every_case);
