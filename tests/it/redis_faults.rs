//! Faults: an unreachable server, and a server killed in the middle of a run (with
//! `appendfsync always`, so a restart brings back everything it acknowledged).

use autoshard::store::{Document, DocumentStore, RedisOptions, RedisStore};
use autoshard::{Error, Key};
use autoshard_test_support::entities::Question;
use autoshard_test_support::progress::{Tally, save_until_stored, wait_until};
use autoshard_test_support::redis::{Standalone, namespace};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn doc(n: u64) -> Document {
    [("n".to_owned(), n.into())].into()
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_fails_at_connect_naming_the_address() {
    let port = closed_port();
    let options = RedisOptions::default().reconnect_retries(0);
    let err = RedisStore::connect_with(&format!("redis://127.0.0.1:{port}/"), options.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );

    let err = RedisStore::connect_cluster_with(&[format!("redis://127.0.0.1:{port}/")], options)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );

    // A password in the URL never shows up in the message.
    let err = RedisStore::connect_with(
        &format!("redis://user:s3cret@127.0.0.1:{port}/"),
        RedisOptions::default().reconnect_retries(0),
    )
    .await
    .unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(!text.contains("s3cret"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_fails_calls_and_loses_nothing_acknowledged() {
    let mut server = Standalone::start_persistent();
    let options = RedisOptions::default()
        .namespace(namespace("kill"))
        .response_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_millis(500))
        .reconnect_retries(1);
    let store = Arc::new(
        RedisStore::connect_with(&server.url(), options)
            .await
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());

    // Four writers insert fresh documents until told to stop, recording what the store
    // acknowledged and how calls failed.
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let (store, stop, tally) = (store.clone(), stop.clone(), tally.clone());
            tokio::spawn(async move {
                let (mut acked, mut errors) = (Vec::new(), Vec::new());
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = Key::new("Kill", format!("{w}-{i}"));
                    match store.insert(&key, doc(i)).await {
                        Ok(version) => {
                            acked.push((key, i, version));
                            tally.ack();
                        }
                        Err(err) => {
                            errors.push(err);
                            tally.fail();
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                    i += 1;
                }
                (acked, errors)
            })
        })
        .collect();

    wait_until("20 inserts before the kill", || tally.acked() >= 20).await;
    server.server.kill();
    // Calls made while the server is down fail with a typed error.
    let probe = store.get(&Key::new("Kill", "probe")).await.unwrap_err();
    assert!(matches!(probe, Error::Backend { .. }), "{probe:?}");
    wait_until("every writer to fail once", || tally.failed() >= 4).await;
    server.server.restart();

    // The store reconnects by itself.
    let deadline = Instant::now() + Duration::from_mins(1);
    while store.get(&Key::new("Kill", "probe")).await.is_err() {
        assert!(Instant::now() < deadline, "no reconnect after restart");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = tally.acked();
    wait_until("20 inserts after the restart", || {
        tally.acked() >= before + 20
    })
    .await;
    stop.store(true, Ordering::Relaxed);

    let (mut acked, mut errors) = (Vec::new(), Vec::new());
    for writer in writers {
        let (a, e) = writer.await.unwrap();
        acked.extend(a);
        errors.extend(e);
    }
    assert!(
        !errors.is_empty(),
        "no call failed while the server was down"
    );
    for err in &errors {
        assert!(
            matches!(err, Error::Backend { .. }),
            "untyped failure: {err:?}"
        );
        assert!(
            err.to_string()
                .contains(&format!("127.0.0.1:{}", server.server.port)),
            "{err}"
        );
    }
    assert!(
        acked.len() > 10,
        "too few writes to mean anything: {}",
        acked.len()
    );
    let keys: Vec<Key> = acked.iter().map(|(k, _, _)| k.clone()).collect();
    let stored = store.get_many(&keys).await.unwrap();
    for ((key, n, version), stored) in acked.iter().zip(stored) {
        let stored = stored.unwrap_or_else(|| panic!("acknowledged insert of {key} lost"));
        assert_eq!(stored.doc, doc(*n), "{key}");
        assert_eq!(stored.version, *version, "{key}");
    }
    eprintln!(
        "{} acknowledged inserts survived; {} calls failed while down",
        acked.len(),
        errors.len()
    );
}

/// 16 writers vote while the server (`appendfsync always`) is killed and restarted
/// twice; a writer whose save fails saves the same entity again until it is stored.
/// Every vote is acknowledged once, and the stored total is exactly the votes
/// acknowledged: a commit applied just before the kill, whose reply was lost, is found
/// recorded in its shard and not counted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn votes_saved_again_across_server_kills_count_once() {
    let mut server = Standalone::start_persistent();
    let options = RedisOptions::default()
        .namespace(namespace("kill-votes"))
        .response_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_millis(500))
        .reconnect_retries(1);
    let store = RedisStore::connect_with(&server.url(), options)
        .await
        .unwrap();
    let db = autoshard::Mapper::new(Arc::new(store));
    db.insert(&mut Question::new(1, "Killed?", 0))
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let writers: Vec<_> = (0..16)
        .map(|_| {
            let (db, stop, tally) = (db.clone(), stop.clone(), tally.clone());
            tokio::spawn(async move {
                let (mut acked, mut failures) = (0i64, 0u64);
                let mut question: Question = db.load(&1).await.unwrap();
                while !stop.load(Ordering::Relaxed) {
                    question.vote_up();
                    failures += save_until_stored(&db, &mut question, &tally).await;
                    acked += 1;
                }
                (acked, failures)
            })
        })
        .collect();

    // Each kill lands between votes acknowledged before and after it, and lasts until
    // saves have failed.
    for _ in 0..2 {
        let before = tally.acked();
        wait_until("50 votes before a kill", || tally.acked() >= before + 50).await;
        server.server.kill();
        let before = tally.failed();
        wait_until("16 failed saves", || tally.failed() >= before + 16).await;
        server.server.restart();
    }
    let before = tally.acked();
    wait_until("50 votes after the restarts", || {
        tally.acked() >= before + 50
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let (mut acked, mut failures) = (0, 0);
    for writer in writers {
        let (a, f) = writer.await.unwrap();
        acked += a;
        failures += f;
    }
    let stored = db.load::<Question>(&1).await.unwrap().votes;
    eprintln!(
        "16 writers, server killed twice: {acked} votes acknowledged, {stored} stored, \
         stored - acknowledged = {}; {failures} failed saves saved again",
        stored - acked
    );
    assert!(failures > 0, "no save failed: the kills did not land");
    assert!(acked > 100, "too few votes to mean anything: {acked}");
    assert_eq!(stored, acked);
}
