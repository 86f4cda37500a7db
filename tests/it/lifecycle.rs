//! An entity's lifecycle: a save or update of an entity that was never inserted, or was
//! deleted since it was loaded (also when a new entity was inserted under the same id
//! since: another incarnation), fails with `Error::NotFound` and writes nothing, so a
//! delete is never undone by a late save; and a delete, even one cut short, leaves
//! nothing that a new entity under the same id would count. Concurrent
//! `insert_if_absent` calls for one id insert it once, and an insert that loses a race,
//! however late its writes arrive, changes nothing of the entity that won. Every store
//! runs every case.

use autoshard::prelude::*;
use autoshard::store::faulty::{Fault, FaultyStore};
use autoshard_test_support::board::Board;
use autoshard_test_support::every_store::Backend;
use autoshard_test_support::store::{Gate, Knobs, TestStore};
use std::collections::BTreeSet;
use std::sync::Arc;

fn board(id: &str) -> Board {
    Board::new(id.to_owned(), "t".into(), None, 1, 2, BTreeSet::new())
}

/// Every document the entity `id` has in the store: main, static and dynamic shards.
async fn documents(store: &dyn DocumentStore, id: &str) -> usize {
    let main = Board::key_for(&id.to_owned());
    let mut n = usize::from(store.get(&main).await.unwrap().is_some());
    for scan in [
        autoshard::layout::static_shards_scan(&main),
        autoshard::layout::dynamic_shards_scan(&main),
    ] {
        let mut scan = scan.limit(1000);
        loop {
            let page = store.scan(&scan).await.unwrap();
            n += page.items.len();
            match page.next {
                Some(cursor) => scan.cursor = Some(cursor),
                None => break,
            }
        }
    }
    n
}

fn not_found<T: std::fmt::Debug>(outcome: &Result<T>, label: &str) {
    assert!(
        matches!(outcome, Err(Error::NotFound { .. })),
        "{label}: expected NotFound, got {outcome:?}"
    );
}

/// Saves and updates of entities that do not exist write nothing.
async fn sequential(store: Arc<dyn DocumentStore>, label: &str) {
    let db = Mapper::new(store.clone());

    // Never inserted: with a static change, a dynamic change, an unsharded change.
    let mut ghost = board("ghost");
    ghost.add(3);
    not_found(&db.save(&mut ghost).await, label);
    ghost.title = "new".into();
    not_found(&db.save(&mut ghost).await, label);
    not_found(
        &db.update(&"ghost".to_owned(), |b: &mut Board| b.add(1))
            .await,
        label,
    );
    assert_eq!(
        documents(store.as_ref(), "ghost").await,
        0,
        "{label}: ghost"
    );

    // Deleted since it was loaded.
    db.insert(&mut board("gone")).await.unwrap();
    let mut loaded: Board = db.load(&"gone".to_owned()).await.unwrap();
    assert!(db.delete::<Board>(&"gone".to_owned()).await.unwrap());
    assert_eq!(
        documents(store.as_ref(), "gone").await,
        0,
        "{label}: deleted"
    );
    loaded.add(5); // score (static), peak (dynamic), tags (static)
    not_found(&db.save(&mut loaded).await, label);
    loaded.title = "renamed".into();
    not_found(&db.save(&mut loaded).await, label);
    not_found(
        &db.update(&"gone".to_owned(), |b: &mut Board| b.add(1))
            .await,
        label,
    );
    assert_eq!(
        documents(store.as_ref(), "gone").await,
        0,
        "{label}: resurrected"
    );

    // A re-insert under the same id starts from its own values only, and the value
    // loaded from the deleted entity never writes into it: another incarnation.
    db.insert(&mut board("gone")).await.unwrap();
    let fresh: Board = db.load(&"gone".to_owned()).await.unwrap();
    assert_eq!((fresh.score, fresh.peak), (1, 2), "{label}");
    not_found(&db.save(&mut loaded).await, label);
    let after: Board = db.load(&"gone".to_owned()).await.unwrap();
    assert_eq!(
        (after.score, after.peak, after.title.as_str()),
        (1, 2, "t"),
        "{label}"
    );
    let mut current = after;
    current.add(5);
    db.save(&mut current).await.unwrap();
    assert_eq!(
        db.load::<Board>(&"gone".to_owned()).await.unwrap().score,
        6,
        "{label}"
    );
}

/// A delete cut short by a store error at any of its calls: deleting again finishes it,
/// and whatever it left, a new entity under the same id counts none of it.
async fn interrupted_delete_leaves_nothing_counted(store: Arc<dyn DocumentStore>, label: &str) {
    let faulty = FaultyStore::new(store);
    let db = Mapper::new(faulty.clone());
    for at in 0..10 {
        let id = format!("cut-{at}");
        db.insert(&mut board(&id)).await.unwrap();
        for v in 0..3 {
            db.update(&id, |b: &mut Board| {
                b.add(10);
                b.observe(100 + v);
            })
            .await
            .unwrap();
        }
        faulty.fail_call(at, Fault::Before);
        let cut = db.delete::<Board>(&id).await;
        faulty.clear();
        if cut.is_ok() {
            continue;
        }
        // The main document may be gone already, or still there.
        if db.insert(&mut board(&id)).await.is_err() {
            db.delete::<Board>(&id).await.unwrap();
            db.insert(&mut board(&id)).await.unwrap();
        }
        let fresh: Board = db.load(&id).await.unwrap();
        assert_eq!(
            (fresh.score, fresh.peak),
            (1, 2),
            "{label}: fault at call {at}"
        );
    }
}

/// Updates racing a delete: each update either lands before the delete (which then
/// removes it) or fails with `NotFound`; nothing is left behind.
async fn updates_race_delete(store: Arc<dyn DocumentStore>, label: &str) {
    let db = Mapper::new(store.clone());
    for round in 0..10 {
        let id = format!("race-{round}");
        db.insert(&mut board(&id)).await.unwrap();
        let updates: Vec<_> = (0..8)
            .map(|_| {
                let (db, id) = (db.clone(), id.clone());
                tokio::spawn(async move {
                    db.update(&id, |b: &mut Board| {
                        b.add(1);
                        b.title = "racing".into();
                    })
                    .await
                })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(db.delete::<Board>(&id).await.unwrap(), "{label}");
        for update in updates {
            match update.await.unwrap() {
                Ok(()) | Err(Error::NotFound { .. }) => {}
                Err(e) => panic!("{label}: update failed with {e}"),
            }
        }
        // A delete that raced a save may leave shards it had not reached yet; deleting
        // again must leave nothing, and no save may have recreated the main document.
        db.delete::<Board>(&id).await.unwrap();
        assert_eq!(
            documents(store.as_ref(), &id).await,
            0,
            "{label}: round {round}"
        );
    }
}

/// Concurrent `insert_if_absent` calls for one id: exactly one stores its entity, the
/// others answer that it existed, and the entity then counts every vote.
async fn inserts_if_absent_race(store: Arc<dyn DocumentStore>, label: &str) {
    let db = Mapper::new(store);
    for round in 0..5 {
        let id = format!("once-{round}");
        let inserts: Vec<_> = (0..8)
            .map(|_| {
                let (db, id) = (db.clone(), id.clone());
                tokio::spawn(async move { db.insert_if_absent(&mut board(&id)).await })
            })
            .collect();
        let mut inserted = 0;
        for insert in inserts {
            inserted += usize::from(insert.await.unwrap().unwrap());
        }
        assert_eq!(inserted, 1, "{label}: round {round}");
        for v in 0..5 {
            db.update(&id, |b: &mut Board| {
                b.add(1);
                b.observe(10 + v);
            })
            .await
            .unwrap();
        }
        let loaded: Board = db.load(&id).await.unwrap();
        assert_eq!(
            (loaded.score, loaded.peak),
            (6, 14),
            "{label}: round {round}"
        );
    }
}

/// An insert whose first write is held until another insert of the same id finished and
/// the entity took votes: the late one answers that the entity existed, and every vote
/// stays counted.
async fn late_losing_insert_changes_nothing(store: Arc<dyn DocumentStore>, label: &str) {
    let gate = Gate::default();
    let knobs = Knobs {
        write_gate: Some(gate.clone()),
        ..Knobs::default()
    };
    let late = Mapper::new(TestStore::new(store.clone(), knobs));
    let db = Mapper::new(store);
    let id = "late".to_owned();
    gate.arm();
    let loser = {
        let id = id.clone();
        tokio::spawn(async move { late.insert_if_absent(&mut board(&id)).await })
    };
    gate.wait_held().await;
    assert!(
        db.insert_if_absent(&mut board(&id)).await.unwrap(),
        "{label}"
    );
    for v in 0..10 {
        db.update(&id, |b: &mut Board| {
            b.add(1);
            b.observe(100 + v);
        })
        .await
        .unwrap();
    }
    gate.release();
    let inserted = loser.await.unwrap().unwrap();
    assert!(
        !inserted,
        "{label}: the late insert answers that the entity existed"
    );
    let loaded: Board = db.load(&id).await.unwrap();
    assert_eq!((loaded.score, loaded.peak), (11, 109), "{label}");
}

async fn every_case(backend: &Backend, label: &str) {
    let store = backend.store("life").await;
    inserts_if_absent_race(store.clone(), label).await;
    late_losing_insert_changes_nothing(store.clone(), label).await;
    sequential(store.clone(), label).await;
    updates_race_delete(store.clone(), label).await;
    interrupted_delete_leaves_nothing_counted(store, label).await;
}

autoshard_test_support::every_store!(every_case);
