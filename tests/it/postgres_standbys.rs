//! PostgreSQL with synchronous standbys: an answer that acknowledges a write on the
//! strength of a read (`update_once` finding its markers, a merge answered "already
//! applied") commits a record to the log first, so it waits for the standbys as a write
//! does (`DocumentStore::make_durable`).
//!
//! The server is told to wait for a standby that never connects
//! (`synchronous_standby_names`), so every commit that writes to the log waits for good,
//! by construction: the test sees the wait in `pg_stat_activity` (`wait_event =
//! 'SyncRep'`) while the answer has not come, then clears the setting, which releases it.
//! A plain read commits nothing and would answer at once.

use autoshard::prelude::*;
use autoshard::store::postgres::tokio_postgres;
use autoshard::store::{Fold, Merge, Merged, WriteId};
use autoshard::{Key, KeyedOutcome};
use autoshard_test_support::entities::Question;
use autoshard_test_support::postgres::Postgres;
use autoshard_test_support::progress::WAIT_BOUND;
use std::future::Future;
use std::time::{Duration, Instant};

/// Sets `synchronous_standby_names` (empty: none) and waits until new sessions see it.
async fn standbys(client: &tokio_postgres::Client, url: &str, names: &str) {
    // Two statements: ALTER SYSTEM runs outside a transaction block.
    client
        .batch_execute(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{names}'"
        ))
        .await
        .unwrap();
    client
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT_BOUND;
    loop {
        let probe = session(url).await;
        let row = probe
            .query_one("SHOW synchronous_standby_names", &[])
            .await
            .unwrap();
        if row.get::<_, String>(0) == names {
            return;
        }
        assert!(Instant::now() < deadline, "the setting did not take");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A new session of the server at `url`.
async fn session(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// Waits until a commit waits for the standby, and returns the process id of the session
/// that made it (released with the others). A session sees a new
/// `synchronous_standby_names` before commits wait for it: the checkpointer publishes the
/// setting to them after its own reload, which on a busy machine comes later. A probe
/// that committed before then is followed by another.
async fn commits_wait(client: &tokio_postgres::Client, url: &str) -> i32 {
    let deadline = Instant::now() + WAIT_BOUND;
    loop {
        let probe = session(url).await;
        let pid: i32 = probe
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        // A transaction that writes to the log (here the catalog) waits at its commit.
        let commit =
            tokio::spawn(
                async move { probe.batch_execute("CREATE TEMP TABLE probe (n int)").await },
            );
        loop {
            let waiting: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' \
                     AND pid = $1",
                    &[&pid],
                )
                .await
                .unwrap()
                .get(0);
            if waiting > 0 {
                return pid;
            }
            assert!(Instant::now() < deadline, "no commit waits for the standby");
            if commit.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Runs `answer` while the server waits for a standby that never comes: it must not
/// answer before one of its commits is seen waiting for the standby; then the standby
/// requirement is dropped and its answer returned.
async fn held_for_the_standby<T: Send + 'static>(
    server: &Postgres,
    client: &tokio_postgres::Client,
    what: &str,
    answer: impl Future<Output = T> + Send + 'static,
) -> T {
    standbys(client, &server.url(), "autoshard_no_such_standby").await;
    let probe = commits_wait(client, &server.url()).await;
    let mut task = tokio::spawn(answer);
    let deadline = Instant::now() + WAIT_BOUND;
    loop {
        let waiting: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' \
                 AND pid <> $1",
                &[&probe],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(
            !task.is_finished(),
            "{what}: answered without waiting for the standby"
        );
        assert!(
            Instant::now() < deadline,
            "{what}: nothing waits for the standby"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    standbys(client, &server.url(), "").await;
    tokio::time::timeout(WAIT_BOUND, &mut task)
        .await
        .expect("released once no standby is asked for")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_found_from_a_read_wait_for_synchronous_standbys() {
    let server = Postgres::start();
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    let client = session(&server.url()).await;
    let db = Mapper::new(store.clone());
    db.insert(&mut Question::new(1, "?", 0)).await.unwrap();
    let first = db
        .update_once(&1, "vote:17", Question::vote_up)
        .await
        .unwrap();
    assert_eq!(first, KeyedOutcome::Applied(()));
    let counter = Key::new("Likes", "1");
    store
        .insert(&counter, [("n".to_owned(), 0.into())].into())
        .await
        .unwrap();
    let write = WriteId {
        writer: "w".into(),
        seq: 1,
        at_ms: 1,
        horizon_ms: 0,
    };
    let merge = Merge::new(counter.clone(), "n", Fold::SUM_I64, 1.into(), write);
    assert_eq!(store.merge(&merge).await.unwrap(), Merged::Applied);

    let again = {
        let db = db.clone();
        async move { db.update_once(&1, "vote:17", Question::vote_up).await }
    };
    let again = held_for_the_standby(&server, &client, "update_once", again).await;
    assert_eq!(again.unwrap(), KeyedOutcome::AlreadyApplied);

    let again = {
        let (store, merge) = (store.clone(), merge.clone());
        async move { store.merge(&merge).await }
    };
    let again = held_for_the_standby(&server, &client, "merge", again).await;
    assert_eq!(again.unwrap(), Merged::AlreadyApplied);

    assert_eq!(db.load::<Question>(&1).await.unwrap().votes, 1);
    let stored = store.get(&counter).await.unwrap().unwrap();
    assert_eq!(stored.doc["n"], 1);
}
