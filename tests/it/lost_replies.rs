//! Replies lost after the server carried out a write, made by construction: the store
//! reaches its server through a proxy (`autoshard_test_support::proxy`) that holds the
//! server's replies, passes on those that came before the write landed (a second store,
//! connected directly, reads it), and then cuts the connection. The write answers an error, and saving
//! the same entity again (or running the same keyed operation again) must find it applied
//! rather than apply it twice; the store's connections must give way to new ones. On the
//! stores with a connection of their own to cut: standalone Redis and PostgreSQL (the
//! fault injection of `exactly_once.rs` covers every store at the store's interface).

use autoshard::group::GroupTransaction;
use autoshard::prelude::*;
use autoshard::store::{DocumentStore, PostgresOptions, PostgresStore, RedisOptions, RedisStore};
use autoshard::{KeyedOutcome, Result};
use autoshard_test_support::entities::{Account, Question, Tips};
use autoshard_test_support::postgres::Postgres;
use autoshard_test_support::proxy::Proxy;
use autoshard_test_support::redis::{Standalone, namespace};
use std::sync::Arc;
use std::time::Duration;

/// Runs `write` through `proxy`, its reply lost once `landed` (read through the direct
/// store) says the server carried it out ([`Proxy::lose_reply`]). Returns what `write`
/// answered: an error whose outcome is unknown, or `Ok` when the mapper sent it again
/// itself.
async fn reply_lost<T>(
    proxy: &Proxy,
    write: impl Future<Output = Result<T>>,
    landed: impl AsyncFn() -> bool,
) -> Result<T> {
    let answer = proxy.lose_reply(write, landed).await;
    if let Err(e) = &answer {
        assert!(matches!(e, Error::Backend { .. }), "{e:?}");
    }
    answer
}

/// Runs `write` until it succeeds, at most four times, each failure an error whose
/// outcome is unknown: a write sent on a pooled connection that the cut left broken fails
/// (a read or a merge on one is sent again, `store/redis/connection.rs`).
async fn again<T>(mut write: impl AsyncFnMut() -> Result<T>) -> T {
    for _ in 0..3 {
        match write().await {
            Ok(answer) => return answer,
            Err(e) => assert!(matches!(e, Error::Backend { .. }), "{e:?}"),
        }
    }
    write().await.unwrap()
}

/// Saves `entity`, its reply lost once `landed` says the server carried the save out,
/// and saves it again after an error.
async fn saved_despite_a_lost_reply<E: autoshard::group::Root>(
    db: &Mapper<Arc<dyn DocumentStore>>,
    proxy: &Proxy,
    entity: &mut E,
    landed: impl AsyncFn() -> bool,
) {
    if reply_lost(proxy, db.save(entity), landed).await.is_err() {
        again(async || db.save(entity).await).await;
    }
}

/// A save, an `update_once` and a save of a `fold = sum` property, each carried out by
/// the server and its reply lost, then sent again: each counts once.
async fn writes_whose_reply_is_lost_count_once(
    through: Arc<dyn DocumentStore>,
    direct: Arc<dyn DocumentStore>,
    proxy: &Proxy,
    label: &str,
) {
    let db = Mapper::new(through);
    let reader = Mapper::new(direct);
    reader
        .insert(&mut Question::new(1, "Lost?", 0))
        .await
        .unwrap();
    reader.insert(&mut Tips::new(1, 0)).await.unwrap();
    let votes = async || reader.load::<Question>(&1).await.unwrap().votes;
    let tips = async || reader.load::<Tips>(&1).await.unwrap().total;

    // A shard commit (a fold function).
    let mut question: Question = db.load(&1).await.unwrap();
    question.vote_up();
    saved_despite_a_lost_reply(&db, proxy, &mut question, async || votes().await == 1).await;
    assert_eq!(votes().await, 1, "{label}: a vote saved again");
    // A read after a cut reads at once, on a connection that works.
    let _ = reply_lost(
        proxy,
        db.insert(&mut Question::new(2, "Cut", 0)),
        async || reader.load::<Question>(&2).await.is_ok(),
    )
    .await;
    assert_eq!(db.load::<Question>(&1).await.unwrap().votes, 1, "{label}");

    // A store merge (`fold = sum`).
    let mut counter: Tips = db.load(&1).await.unwrap();
    counter.tip();
    saved_despite_a_lost_reply(&db, proxy, &mut counter, async || tips().await == 1).await;
    assert_eq!(tips().await, 1, "{label}: a tip saved again");

    // A keyed operation.
    let tip = |t: &mut Tips| t.tip();
    let first = reply_lost(proxy, db.update_once(&1, "tip:reader 7", tip), async || {
        tips().await == 2
    })
    .await;
    let second = again(async || db.update_once(&1, "tip:reader 7", tip).await).await;
    if first.is_err() {
        assert_eq!(second, KeyedOutcome::AlreadyApplied, "{label}");
    }
    assert_eq!(tips().await, 2, "{label}: a keyed tip run again");

    // And the store goes on through new connections.
    question.vote_up();
    again(async || db.save(&mut question).await).await;
    counter.tip();
    again(async || db.save(&mut counter).await).await;
    assert_eq!(
        (votes().await, tips().await),
        (2, 3),
        "{label}: after the cuts"
    );
}

/// Moves 10 from account 1 to account 2 in `txn`, its commit's reply lost once the
/// direct read shows account 1 at `from_after`: the transfer lands whole, once, whatever
/// the commit answered.
async fn transfer_reply_lost(
    mut txn: GroupTransaction<'_, '_, Arc<dyn DocumentStore>>,
    proxy: &Proxy,
    reader: &Mapper<Arc<dyn DocumentStore>>,
    from_after: i64,
    label: &str,
) {
    let mut accounts = txn.load_many::<Account>(&[1, 2]).await.unwrap();
    accounts[0].deposit(-10);
    accounts[1].deposit(10);
    for account in &mut accounts {
        txn.save(account).unwrap();
    }
    let balance = async |id: u64| reader.load::<Account>(&id).await.unwrap().balance;
    let answer = reply_lost(proxy, txn.commit(), async || balance(1).await == from_after).await;
    eprintln!("{label}: a transfer whose reply was lost answered {answer:?}");
    assert_eq!(
        (balance(1).await, balance(2).await),
        (from_after, 100 - from_after),
        "{label}: a transfer whose reply was lost"
    );
}

/// A one-shot transfer and a transfer in a key group, each carried out by the server and
/// its commit's reply lost: each moves the money once, whole.
async fn transfers_whose_reply_is_lost_move_once(
    through: Arc<dyn DocumentStore>,
    direct: Arc<dyn DocumentStore>,
    proxy: &Proxy,
    label: &str,
) {
    let db = Mapper::new(through);
    let reader = Mapper::new(direct);
    reader.insert(&mut Account::new(1, 0, 100)).await.unwrap();
    reader.insert(&mut Account::new(2, 0, 0)).await.unwrap();
    let group = || db.key_group().member::<Account>(&1).member::<Account>(&2);

    let txn = again(async || group().once().await).await;
    transfer_reply_lost(txn, proxy, &reader, 90, label).await;

    let formed = again(async || group().create().await).await;
    transfer_reply_lost(formed.transaction().await, proxy, &reader, 80, label).await;
    // After the cut the dissolve may meet a pooled connection the cut broke (a write: its
    // error is the caller's); the lease frees the members then.
    if let Err(e) = formed.dissolve().await {
        assert!(matches!(e, Error::Backend { .. }), "{label}: {e:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_standalone() {
    let server = Standalone::start();
    let proxy = Proxy::start(([127, 0, 0, 1], server.server.port).into()).await;
    let ns = namespace("lost-replies");
    let connect = async |url: String| {
        let options = RedisOptions::default().namespace(ns.clone());
        let store = RedisStore::connect_with(&url, options).await.unwrap();
        Arc::new(store) as Arc<dyn DocumentStore>
    };
    let through = connect(format!("redis://127.0.0.1:{}/", proxy.port())).await;
    let direct = connect(server.url()).await;
    writes_whose_reply_is_lost_count_once(
        through.clone(),
        direct.clone(),
        &proxy,
        "redis standalone",
    )
    .await;
    transfers_whose_reply_is_lost_move_once(through, direct, &proxy, "redis standalone").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let server = Postgres::start();
    let proxy = Proxy::start(([127, 0, 0, 1], server.port()).into()).await;
    let connect = async |port: u16| {
        let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
        let options = PostgresOptions::default().schema("lost_replies");
        let store = PostgresStore::connect_with(&url, options).await.unwrap();
        Arc::new(store) as Arc<dyn DocumentStore>
    };
    let through = connect(proxy.port()).await;
    let direct = connect(server.port()).await;
    writes_whose_reply_is_lost_count_once(through.clone(), direct.clone(), &proxy, "postgres")
        .await;
    transfers_whose_reply_is_lost_move_once(through, direct, &proxy, "postgres").await;
}

/// The response timeout of the stores whose replies a test holds until they give up.
/// Held requests wait for it in full, so it is short; it is long beside any request that
/// gets its answer, and each such request is sent again after an error anyway (`again`),
/// so a busy slow machine makes a test slower, not red.
const SHORT_TIMEOUT: Duration = Duration::from_secs(2);

/// A standalone Redis started for one test, a proxy in front of it, and two mappers in
/// the namespace of the test's `case`: `db` through the proxy (a pool of `pool`
/// connections, [`SHORT_TIMEOUT`]) and `reader` connected directly. The server and the
/// proxy live as long as this.
struct Through {
    /// Runs until the test ends.
    _server: Standalone,
    proxy: Proxy,
    db: Mapper<Arc<dyn DocumentStore>>,
    reader: Mapper<Arc<dyn DocumentStore>>,
}

impl Through {
    async fn start(case: &str, pool: usize) -> Self {
        let server = Standalone::start();
        let proxy = Proxy::start(([127, 0, 0, 1], server.server.port).into()).await;
        let options = RedisOptions::default()
            .namespace(namespace(case))
            .pool_size(pool);
        let url = format!("redis://127.0.0.1:{}/", proxy.port());
        let through = options.clone().response_timeout(SHORT_TIMEOUT);
        let through = RedisStore::connect_with(&url, through).await.unwrap();
        let direct = RedisStore::connect_with(&server.url(), options)
            .await
            .unwrap();
        Through {
            _server: server,
            proxy,
            db: Mapper::new(Arc::new(through) as Arc<dyn DocumentStore>),
            reader: Mapper::new(Arc::new(direct) as Arc<dyn DocumentStore>),
        }
    }

    /// [`Through::start`], with question 1 inserted, asking `text`.
    async fn with_question(case: &str, pool: usize, text: &str) -> Self {
        let through = Self::start(case, pool).await;
        let mut question = Question::new(1, text, 0);
        through.reader.insert(&mut question).await.unwrap();
        through
    }
}

/// Saves `counter`, whose last tip went out with an unknown outcome and landed (the
/// store holds `total`), again until stored: still `total`, and one more tip after it
/// counts.
async fn sent_again_counts_once(
    db: &Mapper<Arc<dyn DocumentStore>>,
    reader: &Mapper<Arc<dyn DocumentStore>>,
    counter: &mut Tips,
    total: i64,
) {
    again(async || db.save(counter).await).await;
    assert_eq!(reader.load::<Tips>(&1).await.unwrap().total, total, "once");
    counter.tip();
    again(async || db.save(counter).await).await;
    assert_eq!(
        again(async || db.load::<Tips>(&1).await).await.total,
        total + 1
    );
}

/// A counter stored through `reader` and tipped once through `db`, its merge stored: the
/// server knows the merge's script (Redis) or the connection has its statement prepared
/// (PostgreSQL) before a test holds or cuts anything.
async fn tipped_once(
    db: &Mapper<Arc<dyn DocumentStore>>,
    reader: &Mapper<Arc<dyn DocumentStore>>,
) -> Tips {
    reader.insert(&mut Tips::new(1, 0)).await.unwrap();
    let mut counter: Tips = again(async || db.load(&1).await).await;
    counter.tip();
    again(async || db.save(&mut counter).await).await;
    counter
}

/// A reply that comes after the store stopped waiting for it (its response timeout) is
/// never taken for the reply of a later request on the same connection: a merge whose
/// reply is held past the timeout answers an error whose outcome is unknown, its reply
/// then arrives, and the requests after it (on a pool of one connection) get their own
/// answers; the merge sent again counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_late_replies_answer_no_other_request() {
    let through = Through::with_question("late-replies", 1, "Late?").await;
    let Through {
        proxy, db, reader, ..
    } = &through;
    let mut counter = tipped_once(db, reader).await;
    counter.tip();
    proxy.hold_replies();
    // The reply is held until the store gives up: the timeout comes by itself.
    let answer = db.save(&mut counter).await;
    assert!(matches!(answer, Err(Error::Backend { .. })), "{answer:?}");
    proxy.resume();
    for _ in 0..3 {
        let question: Question = again(async || db.load(&1).await).await;
        assert_eq!((question.text.as_str(), question.votes), ("Late?", 0));
    }
    sent_again_counts_once(db, reader, &mut counter, 2).await;
}

/// A PostgreSQL server that stops answering fails calls within the response timeout, not
/// when the operating system gives up on the connection: a merge whose reply never comes
/// answers an error whose outcome is unknown (the server carried it out), the connection
/// it used is not handed out again, and the merge sent again counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_calls_the_server_stops_answering_fail_within_the_response_timeout() {
    let server = Postgres::start();
    let proxy = Proxy::start(([127, 0, 0, 1], server.port()).into()).await;
    let connect = async |port: u16, timeout: Duration| {
        let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
        // One connection: the merge's statement is prepared on it before replies stop.
        let options = PostgresOptions::default()
            .schema("unanswered")
            .pool_size(1)
            .response_timeout(timeout);
        let store = PostgresStore::connect_with(&url, options).await.unwrap();
        Arc::new(store) as Arc<dyn DocumentStore>
    };
    let db = Mapper::new(connect(proxy.port(), SHORT_TIMEOUT).await);
    let reader = Mapper::new(connect(server.port(), Duration::from_secs(30)).await);
    let mut counter = tipped_once(&db, &reader).await;
    counter.tip();

    proxy.hold_replies();
    // Bounded here only so that a call waiting for ever fails the test instead of hanging
    // it; the store's own timeout ends the call long before.
    let answer = tokio::time::timeout(
        autoshard_test_support::START_UP_BOUND,
        db.save(&mut counter),
    )
    .await
    .expect("the save waited for ever for a server that stopped answering");
    assert!(matches!(answer, Err(Error::Backend { .. })), "{answer:?}");
    assert_eq!(
        reader.load::<Tips>(&1).await.unwrap().total,
        2,
        "carried out"
    );

    proxy.resume();
    sent_again_counts_once(&db, &reader, &mut counter, 2).await;
}

/// A standalone Redis connection that the network stops carrying without closing it (a
/// partition, a firewall or load balancer that dropped its state; `Proxy::stall`) is
/// replaced once a request on it times out: calls fail with errors whose outcome is
/// unknown a bounded number of times, then go through fresh connections, where every
/// request on the stalled ones would time out until the operating system gave up on
/// them; the merge sent again counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_connections_that_stop_answering_are_replaced() {
    let through = Through::start("stalled", 2).await;
    let Through {
        proxy, db, reader, ..
    } = &through;
    let mut counter = tipped_once(db, reader).await;

    counter.tip();
    proxy.stall();
    // A count, not a time: each failure is one request that timed out on a stalled
    // connection, and a pool of two needs a few at most.
    let mut failures = 0;
    while let Err(e) = db.save(&mut counter).await {
        assert!(matches!(e, Error::Backend { .. }), "{e:?}");
        failures += 1;
        assert!(
            failures < 20,
            "still failing after {failures} timed-out saves"
        );
    }
    assert_eq!(reader.load::<Tips>(&1).await.unwrap().total, 2, "once");
    for _ in 0..4 {
        assert_eq!(again(async || db.load::<Tips>(&1).await).await.total, 2);
    }
}

/// A merge (`fold = sum`) fails on no pooled connection that a restart or a cut closed
/// while it sat idle: it is sent again on the next one, which a merge may be (it applies
/// at most once under its write id; `store/redis/connection.rs`). Each of the saves after
/// the cut goes through on its first call, and every tip counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_merges_go_through_connections_a_cut_closed() {
    let through = Through::start("merges-after-a-cut", 4).await;
    let Through {
        proxy, db, reader, ..
    } = &through;
    let mut counter = tipped_once(db, reader).await;

    let saves = saved_across_cuts(proxy, db, &mut counter, Tips::tip).await;
    assert_eq!(reader.load::<Tips>(&1).await.unwrap().total, 1 + saves);
}

/// Cuts every connection through `proxy` [`CUTS`] times, and after each cut changes
/// `entity` and saves it [`SAVES_PER_CUT`] times: each save must succeed on its first
/// call. Answers how many changes were saved.
async fn saved_across_cuts<E: autoshard::group::Root>(
    proxy: &Proxy,
    db: &Mapper<Arc<dyn DocumentStore>>,
    entity: &mut E,
    change: impl Fn(&mut E),
) -> i64 {
    for cut in 1..=CUTS {
        proxy.cut();
        for save in 1..=SAVES_PER_CUT {
            change(entity);
            let saved = db.save(entity).await;
            assert!(saved.is_ok(), "cut {cut}, save {save}: {saved:?}");
        }
    }
    i64::from(CUTS * SAVES_PER_CUT)
}

/// How many times [`saved_across_cuts`] cuts the connections.
const CUTS: u32 = 3;
/// How many saves follow each cut in [`saved_across_cuts`].
const SAVES_PER_CUT: u32 = 8;

/// A save of a fold-function property (a compare-and-set commit of a shard under the
/// save's write id) fails on no pooled connection that a restart or a cut closed while it
/// sat idle: the save reads the shard before it commits, and the read, sent again on the
/// next pooled connection while the one it took was dropped, meets every dropped one
/// first, so the commit goes out on a connection that answers. Each of the saves after
/// the cut goes through on its first call, and every vote counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_shard_commits_go_through_connections_a_cut_closed() {
    let through = Through::with_question("commits-after-a-cut", 4, "Cut?").await;
    let Through {
        proxy, db, reader, ..
    } = &through;
    let mut question: Question = again(async || db.load(&1).await).await;
    question.vote_up();
    again(async || db.save(&mut question).await).await;

    let saves = saved_across_cuts(proxy, db, &mut question, Question::vote_up).await;
    assert_eq!(reader.load::<Question>(&1).await.unwrap().votes, 1 + saves);
}
