//! Measurement, not a test (it asserts nothing about speed): key groups after G-Store's
//! section 6 (Das, Agrawal and El Abbadi, SoCC 2010), scaled to one machine, on a
//! standalone Redis, a 3-node Redis Cluster (where groups take the grouping protocol) and
//! a PostgreSQL cluster, all started here.
//!
//! 1. Each client owns disjoint accounts (groups of 10 or 50 keys; 8 or 64 clients) and
//!    runs 10 or 100 operations on them with 10 ms of think time between two. An
//!    operation reads two random accounts and moves 1 from one to the other. *Grouped*:
//!    the client forms a key group over its accounts, runs each operation as a group
//!    transaction, and dissolves the group; the time of creating and dissolving the group
//!    is spread over its operations. *One-shot*: each operation is a one-shot transaction
//!    over its two accounts (`once()`: on standalone Redis and PostgreSQL, one lookup of
//!    both and one commit, no group; on the cluster, a group formed and dissolved per
//!    operation); beside it, on the stores that read a lookup atomically, the same through
//!    a store that says it does not (the two reads, a commit that checks them, and one
//!    commit). *Plain*: the same reads and writes without a group (the two loads,
//!    then the two deposits, each pair sent concurrently). The table gives the mean
//!    latency per operation of each, and the ratios to plain (the paper reports 10–30%
//!    overhead for groups).
//! 2. Group creation and dissolution latency against group size; on standalone Redis
//!    also the server's own time per creation (`INFO commandstats`): in the commit
//!    script (`EVALSHA`) and in the read of the members (`EXEC`).
//! 3. A mixed workload: 10 clients move money between 2 to 5 random accounts of 20 in
//!    one-shot transactions, while one auditor reads all 20 in one one-shot transaction
//!    and checks the total, for a few seconds; with waiting off (a refused transaction,
//!    `Error::Grouped` or `Error::Contention`, is run again after 1 ms) and on
//!    (`KeyGroupBuilder::wait`); on the stores that read a lookup atomically, also with
//!    the reads checked by a commit. It reports transfers/s, audits/s, and per committed
//!    transfer the refusals (`Error::Grouped`) and the conflicts (`Error::Contention`).
//!
//! ```sh
//! cargo bench -p autoshard-integration --bench key_groups
//! # one part, on some stores: KEY_GROUPS_ONLY is any of mixed, latency, create;
//! # KEY_GROUPS_STORES any of standalone, cluster, postgres (both comma-separated)
//! KEY_GROUPS_ONLY=create KEY_GROUPS_STORES=standalone cargo bench -p autoshard-integration --bench key_groups
//! ```

use autoshard::group::GroupTransaction;
use autoshard::prelude::*;
use autoshard::store::{DocumentStore, RedisOptions, RedisStore};
use autoshard_test_support::entities::Account;
use autoshard_test_support::postgres::Postgres;
use autoshard_test_support::redis::{Cluster, Standalone, namespace};
use autoshard_test_support::store::{Knobs, TestStore};
use rand::{RngExt, SeedableRng};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const THINK: Duration = Duration::from_millis(10);

/// Whether `name` is among the comma-separated names of the environment variable `var`
/// (every name when it is unset).
fn chosen(var: &str, name: &str) -> bool {
    std::env::var(var).map_or(true, |names| names.split(',').any(|n| n.trim() == name))
}

/// Two distinct random accounts of `ids`.
fn pick(rng: &mut rand::rngs::StdRng, ids: &[u64]) -> [u64; 2] {
    let a = rng.random_range(0..ids.len());
    let b = (a + rng.random_range(1..ids.len())) % ids.len();
    [ids[a], ids[b]]
}

/// Moves 1 from the first account of `pair` to the second in `txn`, and commits.
async fn move_one(mut txn: GroupTransaction<'_, '_, Arc<dyn DocumentStore>>, pair: &[u64]) {
    let mut accounts = txn.load_many::<Account>(pair).await.expect("load");
    accounts[0].deposit(-1);
    accounts[1].deposit(1);
    for account in &mut accounts {
        txn.save(account).expect("save");
    }
    txn.commit().await.expect("commit");
}

/// How a client runs its operations.
#[derive(Clone, Copy)]
enum Mode {
    /// In one key group over all its accounts.
    Grouped,
    /// Each in a one-shot transaction over its two accounts.
    OneShot,
    /// Without a transaction: two loads, two applies.
    Plain,
}

/// One client's run: the total time its operations took (group creation and dissolution
/// included when grouped).
async fn client(db: Arc<Mapper>, ids: Vec<u64>, ops: usize, mode: Mode, seed: u64) -> Duration {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut busy = Duration::ZERO;
    if let Mode::OneShot = mode {
        for _ in 0..ops {
            tokio::time::sleep(THINK).await;
            let [a, b] = pick(&mut rng, &ids);
            let start = Instant::now();
            let txn = db
                .key_group()
                .member::<Account>(&a)
                .member::<Account>(&b)
                .once()
                .await
                .expect("once");
            move_one(txn, &[a, b]).await;
            busy += start.elapsed();
        }
    } else if let Mode::Grouped = mode {
        let start = Instant::now();
        let group = ids
            .iter()
            .fold(
                db.key_group(),
                autoshard::group::KeyGroupBuilder::member::<Account>,
            )
            .create()
            .await
            .expect("create");
        busy += start.elapsed();
        for _ in 0..ops {
            tokio::time::sleep(THINK).await;
            let pair = pick(&mut rng, &ids);
            let start = Instant::now();
            move_one(group.transaction().await, &pair).await;
            busy += start.elapsed();
        }
        let start = Instant::now();
        group.dissolve().await.expect("dissolve");
        busy += start.elapsed();
    } else {
        for _ in 0..ops {
            tokio::time::sleep(THINK).await;
            let [a, b] = pick(&mut rng, &ids);
            let start = Instant::now();
            db.load_many::<Account>(&[a, b]).await.expect("load");
            let (x, y) = tokio::join!(
                db.apply(&a, |acc: &mut Account| acc.deposit(-1)),
                db.apply(&b, |acc: &mut Account| acc.deposit(1))
            );
            x.and(y).expect("apply");
            busy += start.elapsed();
        }
    }
    busy
}

/// The mean latency per operation of `clients` clients with groups of `size` keys.
async fn run(db: &Arc<Mapper>, size: u64, clients: u64, ops: usize, mode: Mode) -> f64 {
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let ids: Vec<u64> = (c * size + 1..=(c + 1) * size).collect();
            tokio::spawn(client(db.clone(), ids, ops, mode, c))
        })
        .collect();
    let mut total = Duration::ZERO;
    for task in tasks {
        total += task.await.unwrap();
    }
    #[allow(clippy::cast_precision_loss)]
    let per_op = total.as_secs_f64() * 1e6 / (clients as f64 * ops as f64);
    per_op
}

/// The accounts of the mixed workload.
const MIXED: std::ops::RangeInclusive<u64> = 10_001..=10_020;
/// How long each run of the mixed workload lasts.
const MIXED_RUN: Duration = Duration::from_secs(3);
/// How long a waiting transaction of the mixed workload waits at most.
const MIXED_WAIT: Duration = Duration::from_secs(30);

/// One one-shot transaction over `ids` (waiting when `wait`): loads them, and moves up
/// to 5 from the first to another when `transfer`, else checks that they hold
/// `expected` together.
async fn one_shot(
    db: &Mapper,
    ids: &[u64],
    wait: bool,
    transfer: Option<&mut rand::rngs::StdRng>,
    expected: i64,
) -> Result<()> {
    let mut builder = ids.iter().fold(
        db.key_group(),
        autoshard::group::KeyGroupBuilder::member::<Account>,
    );
    if wait {
        builder = builder.wait(MIXED_WAIT);
    }
    let mut txn = builder.once().await?;
    let mut accounts = txn.load_many::<Account>(ids).await?;
    if let Some(rng) = transfer {
        let amount = accounts[0].balance.min(5);
        let to = rng.random_range(1..accounts.len());
        accounts[0].deposit(-amount);
        accounts[to].deposit(amount);
        for account in &mut accounts {
            txn.save(account)?;
        }
    } else {
        let total: i64 = accounts.iter().map(|a| a.balance).sum();
        assert_eq!(total, expected, "an audit saw another total");
    }
    txn.commit().await
}

/// The mixed workload for `MIXED_RUN`: transfers/s, audits/s, and per committed transfer
/// the refusals (`Error::Grouped`: a member owned, or queued for) and the conflicts
/// (`Error::Contention`: a member changed since the transfer read it).
async fn mixed_run(db: &Arc<Mapper>, wait: bool) -> (f64, f64, f64, f64) {
    let expected = 1_000 * i64::try_from(MIXED.count()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (transfers, audits, refusals, conflicts) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let refused = |e: &Error| matches!(e, Error::Grouped { .. } | Error::Contention { .. });
    let mut tasks = Vec::new();
    for c in 0..10u64 {
        let (db, stop, transfers) = (db.clone(), stop.clone(), transfers.clone());
        let (refusals, conflicts) = (refusals.clone(), conflicts.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(c);
            let all: Vec<u64> = MIXED.collect();
            while !stop.load(Ordering::Relaxed) {
                let size = rng.random_range(2..=5);
                let mut ids = all.clone();
                for i in 0..size {
                    let j = rng.random_range(i..ids.len());
                    ids.swap(i, j);
                }
                ids.truncate(size);
                match one_shot(&db, &ids, wait, Some(&mut rng), 0).await {
                    Ok(()) => transfers.fetch_add(1, Ordering::Relaxed),
                    Err(e) if refused(&e) => {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        match e {
                            Error::Contention { .. } => conflicts.fetch_add(1, Ordering::Relaxed),
                            _ => refusals.fetch_add(1, Ordering::Relaxed),
                        }
                    }
                    Err(e) => panic!("a transfer: {e}"),
                };
            }
        }));
    }
    {
        let (db, stop, audits) = (db.clone(), stop.clone(), audits.clone());
        tasks.push(tokio::spawn(async move {
            let all: Vec<u64> = MIXED.collect();
            while !stop.load(Ordering::Relaxed) {
                match one_shot(&db, &all, wait, None, expected).await {
                    Ok(()) => {
                        audits.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) if refused(&e) => tokio::time::sleep(Duration::from_millis(1)).await,
                    Err(e) => panic!("an audit: {e}"),
                }
            }
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(MIXED_RUN).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    let (t, a, r, c) = (
        transfers.load(Ordering::Relaxed) as f64,
        audits.load(Ordering::Relaxed) as f64,
        refusals.load(Ordering::Relaxed) as f64,
        conflicts.load(Ordering::Relaxed) as f64,
    );
    (t / secs, a / secs, r / t.max(1.0), c / t.max(1.0))
}

/// The mixed workload, waiting off and on, through `db` and, where given, through
/// `checked` (the same store without snapshot lookups).
async fn mixed(label: &str, db: &Arc<Mapper>, checked: Option<&Arc<Mapper>>) {
    for id in MIXED {
        db.insert(&mut Account::new(id, 0, 1_000)).await.unwrap();
    }
    println!("\n{label}: 10 clients transfer within 2-5 of 20 accounts, one auditor reads all 20");
    println!(
        "reads                waiting  transfers/s  audits/s  refusals/transfer  conflicts/transfer"
    );
    let runs = [("one lookup", Some(db)), ("checked by a commit", checked)];
    for (reads, db) in runs.into_iter().filter_map(|(r, db)| Some((r, db?))) {
        for wait in [false, true] {
            let (t, a, r, c) = mixed_run(db, wait).await;
            let wait = if wait { "on" } else { "off" };
            println!("{reads:<19}  {wait:>7}  {t:>11.0}  {a:>8.1}  {r:>17.2}  {c:>18.2}");
        }
    }
}

async fn bench(label: &str, store: Arc<dyn DocumentStore>, server: Option<ServerTime>) {
    // The same store, without snapshot lookups: one-shot transactions check their reads
    // with a commit there, as on a store that does not read atomically across groups.
    let checked: Option<Arc<Mapper>> = store.snapshot_lookups().then(|| {
        let knobs = Knobs {
            snapshot_lookups: Some(false),
            ..Knobs::default()
        };
        let store: Arc<dyn DocumentStore> = Arc::new(TestStore::new(store.clone(), knobs));
        Arc::new(Mapper::new(store))
    });
    let db = Arc::new(Mapper::new(store));
    if chosen("KEY_GROUPS_ONLY", "mixed") {
        mixed(label, &db, checked.as_ref()).await;
    }
    for id in 1..=64 * 50 {
        db.insert(&mut Account::new(id, 0, 1_000)).await.unwrap();
    }
    if chosen("KEY_GROUPS_ONLY", "latency") {
        latency(label, &db, checked.as_ref()).await;
    }
    if chosen("KEY_GROUPS_ONLY", "create") {
        creation(label, &db, server).await;
    }
}

/// Part 1: the mean latency per operation, grouped, one-shot and plain.
async fn latency(label: &str, db: &Arc<Mapper>, checked: Option<&Arc<Mapper>>) {
    println!(
        "\n{label}: mean latency per operation, group create/dissolve spread over its operations \
         (one-shot checked: one-shot with its reads checked by a commit, as without snapshot lookups)"
    );
    println!(
        "keys/group  clients  ops/group  grouped µs  one-shot µs  one-shot checked µs  plain µs  grouped/plain  one-shot/plain  checked/plain"
    );
    for size in [10, 50] {
        for clients in [8, 64] {
            for ops in [10, 100] {
                let plain = run(db, size, clients, ops, Mode::Plain).await;
                let grouped = run(db, size, clients, ops, Mode::Grouped).await;
                let once = run(db, size, clients, ops, Mode::OneShot).await;
                let (checked, ratio) = match checked {
                    Some(checked) => {
                        let us = run(checked, size, clients, ops, Mode::OneShot).await;
                        (format!("{us:.0}"), format!("{:.2}", us / plain))
                    }
                    None => ("n/a".to_owned(), "n/a".to_owned()),
                };
                println!(
                    "{size:>10}  {clients:>7}  {ops:>9}  {grouped:>10.0}  {once:>11.0}  {checked:>19}  {plain:>8.0}  {:>13.2}  {:>14.2}  {ratio:>13}",
                    grouped / plain,
                    once / plain
                );
            }
        }
    }
}

/// The time a standalone Redis server spends in commands, from `INFO commandstats`.
struct ServerTime(redis::aio::MultiplexedConnection);

impl ServerTime {
    async fn connect(url: &str) -> ServerTime {
        let client = redis::Client::open(url).unwrap();
        ServerTime(client.get_multiplexed_async_connection().await.unwrap())
    }

    async fn reset(&mut self) {
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut self.0)
            .await
            .unwrap();
    }

    /// Microseconds spent in each command since the last reset, by name (`evalsha`,
    /// `exec`, ...; commands a script or a `MULTI` ran are counted in it too).
    async fn usec(&mut self) -> Vec<(String, u64)> {
        let text: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.0)
            .await
            .unwrap();
        text.lines()
            .filter_map(|line| {
                let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let usec = fields.split(',').find_map(|f| f.strip_prefix("usec="))?;
                Some((name.to_owned(), usec.parse().ok()?))
            })
            .collect()
    }
}

/// Part 2: group creation and dissolution against group size, and the server's time per
/// creation where `server` tells it.
async fn creation(label: &str, db: &Arc<Mapper>, mut server: Option<ServerTime>) {
    println!(
        "\n{label}: group creation and dissolution against group size (one client, mean of 5; \
         server: its time per creation in the commit script and in the read, where known)"
    );
    println!("keys/group  create ms  dissolve ms  server script ms  server read ms");
    for size in [2u64, 10, 50, 100, 200] {
        let (mut create, mut dissolve) = (Duration::ZERO, Duration::ZERO);
        let (mut script, mut read) = (0, 0);
        for _ in 0..5 {
            if let Some(server) = &mut server {
                server.reset().await;
            }
            let start = Instant::now();
            let group = (1..=size)
                .fold(db.key_group(), |g, id| g.member::<Account>(&id))
                .create()
                .await
                .unwrap();
            create += start.elapsed();
            if let Some(server) = &mut server {
                for (name, usec) in server.usec().await {
                    match name.as_str() {
                        "evalsha" => script += usec,
                        "exec" => read += usec,
                        _ => {}
                    }
                }
            }
            let start = Instant::now();
            group.dissolve().await.unwrap();
            dissolve += start.elapsed();
        }
        let server_ms = |usec: u64| {
            server.as_ref().map_or_else(
                || "n/a".to_owned(),
                |_| {
                    format!(
                        "{:.2}",
                        Duration::from_micros(usec).as_secs_f64() * 1e3 / 5.0
                    )
                },
            )
        };
        println!(
            "{size:>10}  {:>9.2}  {:>11.2}  {:>16}  {:>14}",
            create.as_secs_f64() * 1e3 / 5.0,
            dissolve.as_secs_f64() * 1e3 / 5.0,
            server_ms(script),
            server_ms(read)
        );
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        if chosen("KEY_GROUPS_STORES", "standalone") {
            let server = Standalone::start();
            let options = RedisOptions::default().namespace(namespace("bench_keygroups"));
            let redis = RedisStore::connect_with(&server.url(), options)
                .await
                .unwrap();
            let server_time = ServerTime::connect(&server.url()).await;
            bench("Redis (standalone)", Arc::new(redis), Some(server_time)).await;
        }
        if chosen("KEY_GROUPS_STORES", "cluster") {
            let cluster = Cluster::start();
            let options = RedisOptions::default().namespace(namespace("bench_keygroups"));
            let redis = RedisStore::connect_cluster_with(&cluster.urls(), options)
                .await
                .unwrap();
            bench("Redis Cluster (3 nodes)", Arc::new(redis), None).await;
        }
        if chosen("KEY_GROUPS_STORES", "postgres") {
            let postgres = Postgres::start();
            bench(
                "PostgreSQL",
                postgres.shared_store("bench_keygroups").await,
                None,
            )
            .await;
        }
    });
}
