//! PostgreSQL, on servers the tests start (see `autoshard_test_support::postgres`): the
//! layout of write records, connect errors, and the concurrency scenario every real store
//! runs (the conformance suite runs from `conformance.rs`).

use autoshard::store::postgres::{PostgresOptions, PostgresStore, tokio_postgres};
use autoshard::store::{
    Commit, Document, DocumentStore, Fold, Merge, Merged, Transaction, WriteId, merge,
};
use autoshard::{Error, Key};
use autoshard_test_support::entities::{Question, Tips};
use autoshard_test_support::postgres::Postgres;
use autoshard_test_support::progress::{Tally, save_until_stored, wait_until};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_and_schemas_are_refused_without_the_password() {
    let refused = PostgresStore::connect("postgres://app:s3cret@127.0.0.1:1/db").await;
    let error = refused.unwrap_err();
    let message = format!("{error:?}");
    assert!(message.contains("127.0.0.1:1"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
    // `Display` says what failed: the address and the reason, never the password.
    let shown = error.to_string();
    assert!(
        shown.starts_with("store error: connecting to PostgreSQL at 127.0.0.1:1")
            && shown.to_lowercase().contains("refused")
            && !shown.contains("s3cret"),
        "{shown}"
    );
    // In words a user can act on, not the pool's.
    assert!(
        !shown.contains("creating a new object") && shown.contains("check that the server runs"),
        "{shown}"
    );
    let refused = PostgresStore::connect("not a url").await;
    assert!(matches!(refused, Err(Error::Invalid(_))));
    let server = Postgres::start();
    let bad = PostgresOptions::default().schema("x; DROP TABLE y");
    let refused = PostgresStore::connect_with(&server.url(), bad).await;
    assert!(matches!(refused, Err(Error::Invalid(_))));
}

/// A server that takes TLS connections only: the store connects through a rustls
/// connector that trusts the server's certificate, and without TLS it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_connections_are_made_with_the_given_connector() {
    use autoshard::Key;
    use autoshard::store::Document;
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let server = Postgres::start_tls_only(&cert.cert.pem(), &cert.signing_key.serialize_pem());
    let url = format!("{}?sslmode=require", server.url());

    let plain = PostgresStore::connect(&server.url()).await;
    let refused = format!("{:?}", plain.unwrap_err());
    assert!(refused.contains("pg_hba.conf rejects"), "{refused}");

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tls = tokio_postgres_rustls::MakeRustlsConnect::new(config);
    let store = PostgresStore::connect_tls(&url, PostgresOptions::default(), tls)
        .await
        .unwrap();
    let key = Key::new("Tls", "1");
    store.insert(&key, Document::new()).await.unwrap();
    assert!(store.get(&key).await.unwrap().is_some());

    let untrusting = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let refused = PostgresStore::connect_tls(
        &url,
        PostgresOptions::default(),
        tokio_postgres_rustls::MakeRustlsConnect::new(untrusting),
    )
    .await;
    assert!(matches!(refused, Err(Error::Backend { .. })), "{refused:?}");
}

/// The concurrency scenario (64 tasks x 500 votes, naive and sharded, with and without
/// retries) on PostgreSQL, each variant in a schema of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_votes_are_exact() {
    let server = Postgres::start();
    let url = server.url();
    let connect = async |case: &str| {
        let schema = case.replace('-', "_");
        PostgresStore::connect_with(&url, PostgresOptions::default().schema(schema))
            .await
            .unwrap()
    };
    autoshard_test_support::concurrency::all_variants(connect, "postgres").await;
}

/// A store in `schema` of `server`, and a plain client of the same server.
async fn store_and_client(
    server: &Postgres,
    schema: &str,
) -> (PostgresStore, tokio_postgres::Client) {
    let store =
        PostgresStore::connect_with(&server.url(), PostgresOptions::default().schema(schema))
            .await
            .unwrap();
    let (client, connection) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    (store, client)
}

/// A values write still writes, keeping the write records, after the migration of an
/// earlier build ran again: that migration replaces the commit function it knows (the
/// one without `wv`), here with one that writes nothing, and the store's commits take
/// the other signature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_builds_migration_leaves_values_writes_alone() {
    let server = Postgres::start();
    let (store, client) = store_and_client(&server, "t_values").await;
    let key = Key::new("Question", "1");
    store
        .insert(&key, [("n".to_owned(), 1.into())].into())
        .await
        .unwrap();
    assert_eq!(
        store.merge(&merge_as(&key, "w", 3)).await.unwrap(),
        Merged::Applied
    );
    // What an earlier build's migration leaves: its own commit, writing whole documents.
    client
        .batch_execute(
            "CREATE OR REPLACE FUNCTION t_values.autoshard_commit_versioned(
                rk text[], rv bigint[], wk text[], wp text[], wn text[], wd jsonb[],
                wo boolean[], token text)
             RETURNS bigint[] LANGUAGE sql AS $f$ SELECT ARRAY[0::bigint] $f$;",
        )
        .await
        .unwrap();
    let read = store.get(&key).await.unwrap().unwrap();
    let txn = Transaction::new()
        .expect(key.clone(), Some(read.version))
        .put_values(key.clone(), [("n".to_owned(), 40.into())].into());
    assert_eq!(store.commit(&txn).await.unwrap(), Commit::Committed);
    let after = store.get(&key).await.unwrap().unwrap();
    assert_eq!(after.doc["n"], 40);
    assert_eq!(
        store.merge(&merge_as(&key, "w", 3)).await.unwrap(),
        Merged::AlreadyApplied
    );
}

/// The store's clock, read from the server and counted on between readings, never runs
/// ahead of the server's own: each answer is at most what `clock_timestamp()` says right
/// after it, on a connection of its own. Leases judged past by it have passed on the
/// server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clock_never_runs_ahead_of_the_servers() {
    let server = Postgres::start();
    let (store, client) = store_and_client(&server, "t_clock").await;
    let now = client
        .prepare("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint")
        .await
        .unwrap();
    for i in 0..500 {
        let ours = store.now_ms().await.unwrap();
        let theirs: i64 = client.query_one(&now, &[]).await.unwrap().get(0);
        let theirs = u64::try_from(theirs).unwrap();
        assert!(
            ours <= theirs,
            "answer {i}: {ours} ms, the server's clock {theirs} ms"
        );
    }
}

/// The row of `key` in the documents table, as stored.
async fn stored(client: &tokio_postgres::Client, key: &Key) -> serde_json::Value {
    let row = client
        .query_one(
            "SELECT doc FROM t_layout.autoshard_documents WHERE key = $1",
            &[&key.encode()],
        )
        .await
        .unwrap();
    row.get(0)
}

fn merge_as(key: &Key, writer: &str, seq: u64) -> Merge {
    let write = WriteId {
        writer: writer.into(),
        seq,
        at_ms: 1,
        horizon_ms: 0,
    };
    Merge::new(key.clone(), "n", Fold::SUM_I64, 2.into(), write)
}

/// The write records of `key`, from the records table: `(writer, seq, at_ms)`.
async fn records(client: &tokio_postgres::Client, key: &Key) -> Vec<(String, String, String)> {
    client
        .query(
            "SELECT writer, seq::text, at_ms::text FROM t_layout.autoshard_records \
             WHERE key = $1 ORDER BY writer",
            &[&key.encode()],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

/// Write records live in a table of their own, written by merges and commits alike, so a
/// document's row holds its values only; a document that still holds a `~w` property of
/// its own (written by an earlier build) is read with it joined and keeps guarding its
/// writers until its next write moves it into the table; a delete removes both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_records_live_apart_from_documents() {
    let server = Postgres::start();
    let (store, client) = store_and_client(&server, "t_layout").await;
    let key = Key::new("Question", "1");
    let mut doc = Document::new();
    doc.insert("n".to_owned(), 7.into());
    store.insert(&key, doc).await.unwrap();
    assert_eq!(
        store.merge(&merge_as(&key, "w", 3)).await.unwrap(),
        Merged::Applied
    );
    assert_eq!(
        stored(&client, &key).await,
        serde_json::json!({"n": 9}),
        "values only"
    );
    assert_eq!(
        records(&client, &key).await,
        [("w".into(), "3".into(), "1".into())]
    );

    // A read with records answers the entry; a commit carries it over into the table.
    let read = store.get(&key).await.unwrap().unwrap();
    assert!(
        merge::applied(Some(&read.doc), "w", 3),
        "a read with records"
    );
    let mut rewritten = read.doc.clone();
    rewritten.insert("n".to_owned(), 10.into());
    let txn = Transaction::new()
        .expect(key.clone(), Some(read.version))
        .put(key.clone(), rewritten);
    assert_eq!(store.commit(&txn).await.unwrap(), Commit::Committed);
    assert_eq!(
        stored(&client, &key).await,
        serde_json::json!({"n": 10}),
        "values only"
    );
    assert_eq!(
        records(&client, &key).await,
        [("w".into(), "3".into(), "1".into())]
    );
    assert_eq!(
        store.merge(&merge_as(&key, "w", 3)).await.unwrap(),
        Merged::AlreadyApplied
    );

    an_own_record_is_joined_and_moved(&store, &client, &key).await;

    // A delete removes both.
    assert!(store.delete(&key).await.unwrap());
    assert!(records(&client, &key).await.is_empty());
    assert!(store.get(&key).await.unwrap().is_none());
}

/// A document that still holds a `~w` property of its own (from an earlier build): read
/// joined with the table's entries, guarding its writers, moved by the next write.
async fn an_own_record_is_joined_and_moved(
    store: &PostgresStore,
    client: &tokio_postgres::Client,
    key: &Key,
) {
    client
        .execute(
            "UPDATE t_layout.autoshard_documents \
             SET doc = doc || '{\"~w\": {\"old\": [5, 2], \"w\": [1, 1]}}' WHERE key = $1",
            &[&key.encode()],
        )
        .await
        .unwrap();
    let read = store.get(key).await.unwrap().unwrap();
    assert!(merge::applied(Some(&read.doc), "old", 5), "its own entry");
    assert!(
        merge::applied(Some(&read.doc), "w", 3),
        "the table's entry wins"
    );
    assert_eq!(
        store.merge(&merge_as(key, "old", 5)).await.unwrap(),
        Merged::AlreadyApplied
    );
    assert_eq!(
        store.merge(&merge_as(key, "old", 6)).await.unwrap(),
        Merged::Applied
    );
    let read = store.get(key).await.unwrap().unwrap();
    store.put(key, read.doc).await.unwrap();
    assert_eq!(
        stored(client, key).await,
        serde_json::json!({"n": 12}),
        "moved"
    );
    assert_eq!(
        records(client, key).await,
        [
            ("old".into(), "6".into(), "1".into()),
            ("w".into(), "3".into(), "1".into())
        ]
    );
}

/// 16 writers vote while the server crashes (an immediate shutdown: every backend stops
/// mid-call) and restarts, twice: 8 save a question (a commit per vote) and 8 a counter of
/// `fold = sum` (a merge per vote), each saving the same entity again after a failed save
/// until it is stored. Every failure is a typed error whose outcome is unknown, the
/// pool's broken connections give way to new ones, and every total is exactly the votes
/// acknowledged. (A crash rarely lands between a commit and its reply; `lost_replies.rs`
/// loses such replies by construction.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn votes_saved_again_across_server_crashes_count_once() {
    let mut server = Postgres::start();
    let store =
        PostgresStore::connect_with(&server.url(), PostgresOptions::default().schema("crashes"))
            .await
            .unwrap();
    let db = autoshard::Mapper::new(Arc::new(store));
    db.insert(&mut Question::new(1, "Crashed?", 0))
        .await
        .unwrap();
    db.insert(&mut Tips::new(1, 0)).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let writers: Vec<_> = (0..16)
        .map(|writer| {
            let (db, stop, tally) = (db.clone(), stop.clone(), tally.clone());
            tokio::spawn(async move {
                let (mut votes, mut tips, mut failures) = (0i64, 0i64, 0u64);
                let mut question: Question = db.load(&1).await.unwrap();
                let mut counter: Tips = db.load(&1).await.unwrap();
                while !stop.load(Ordering::Relaxed) {
                    if writer % 2 == 0 {
                        question.vote_up();
                        failures += save_until_stored(&db, &mut question, &tally).await;
                        votes += 1;
                    } else {
                        counter.tip();
                        failures += save_until_stored(&db, &mut counter, &tally).await;
                        tips += 1;
                    }
                }
                (votes, tips, failures)
            })
        })
        .collect();

    // Each crash lands between votes acknowledged before and after it, and lasts until
    // saves have failed.
    for _ in 0..2 {
        let before = tally.acked();
        wait_until("50 votes before a crash", || tally.acked() >= before + 50).await;
        server.kill();
        let before = tally.failed();
        wait_until("16 failed saves", || tally.failed() >= before + 16).await;
        server.restart();
    }
    let before = tally.acked();
    wait_until("50 votes after the restarts", || {
        tally.acked() >= before + 50
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let (mut votes, mut tips, mut failures) = (0, 0, 0);
    for writer in writers {
        let (v, t, f) = writer.await.unwrap();
        votes += v;
        tips += t;
        failures += f;
    }
    let stored_votes = db.load::<Question>(&1).await.unwrap().votes;
    let stored_tips = db.load::<Tips>(&1).await.unwrap().total;
    eprintln!(
        "16 writers, server crashed twice: {votes} votes and {tips} tips acknowledged, \
         {stored_votes} and {stored_tips} stored; {failures} failed saves saved again"
    );
    assert!(failures > 0, "no save failed: the crashes did not land");
    assert!(votes > 50 && tips > 50, "too few writes to mean anything");
    assert_eq!(stored_votes, votes, "the question's votes");
    assert_eq!(stored_tips, tips, "the counter's tips");
}
