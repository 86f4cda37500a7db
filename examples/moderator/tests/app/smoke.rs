//! Short versions of the app, the benchmark and the hot-spot mode, on the embedded store
//! and on Redis and PostgreSQL servers started here (never any other). They check exact
//! totals, never timings.

use autoshard::prelude::*;
use autoshard_moderator::app::{self, AppConfig};
use autoshard_moderator::backend::{Backend, ModelledLatency};
use autoshard_moderator::bench::{self, BenchConfig, VariantResult};
use autoshard_moderator::hotspot::{self, HotspotConfig, WorkerTally};
use autoshard_moderator::progress::Progress;
use autoshard_moderator::{chart, report};
use autoshard_test_support::postgres::Postgres;
use autoshard_test_support::redis::{Cluster, Standalone, namespace};
use std::sync::Arc;
use std::time::Duration;

fn small_app() -> AppConfig {
    AppConfig {
        questions: 16,
        users: 24,
        votes_per_user: 10,
        responses_per_user: 2,
        ..AppConfig::default()
    }
}

fn short_bench() -> BenchConfig {
    BenchConfig {
        rate: 120.0,
        duration: Duration::from_millis(500),
        ..BenchConfig::default()
    }
}

fn short_hotspot() -> HotspotConfig {
    HotspotConfig {
        clients: vec![1, 4],
        duration: Duration::from_millis(300),
        ..HotspotConfig::default()
    }
}

async fn app_is_exact(store: Arc<dyn DocumentStore>) {
    let config = small_app();
    let outcome = app::run(store, &config, Progress::hidden()).await.unwrap();
    assert!(outcome.is_exact(), "{}", report::leaderboard(&outcome));
    assert_eq!(outcome.leaderboard.len(), 16);
    assert_eq!(outcome.votes_committed + outcome.votes_failed, 24 * 10);
    assert_eq!(outcome.responses_committed, 24 * 2);
    let votes: i64 = outcome.leaderboard.iter().map(|s| s.votes).sum();
    let seeded: i64 = (0..16).map(|i| 3 * i).sum();
    assert_eq!(
        votes,
        seeded + i64::try_from(outcome.votes_committed).unwrap()
    );
    assert!(
        outcome
            .leaderboard
            .windows(2)
            .all(|w| w[0].votes >= w[1].votes)
    );
}

fn check_bench(results: &[VariantResult]) {
    let table = report::bench_table(results);
    assert_eq!(results.len(), 6, "{table}");
    for r in results {
        assert!(r.totals_match(), "{table}");
        assert_eq!(r.attempted, 60, "{table}");
        assert_eq!(r.committed + r.failed, r.attempted, "{table}");
        assert_eq!(r.errors, 0, "{table}");
        if r.variant.retries {
            assert_eq!(r.committed, r.attempted, "retrying until success: {table}");
        }
    }
    let csv = report::bench_csv(results);
    assert_eq!(csv.lines().count(), 7);
    let svg = chart::figure6(results, "smoke").expect("the chart draws");
    assert!(svg.starts_with("<svg") && svg.matches("<rect").count() >= 2 * 6 + 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_on_memory_store() {
    app_is_exact(Arc::new(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_and_hotspot_on_modelled_memory_store() {
    let backend = Backend::Modelled(ModelledLatency {
        commit: Duration::from_millis(5),
        read: Duration::from_millis(1),
    });
    let results = bench::run(&backend, "smoke", &short_bench(), Progress::hidden())
        .await
        .unwrap();
    check_bench(&results);
    let rows = hotspot::run(&backend, "smoke", &short_hotspot(), Progress::hidden())
        .await
        .unwrap();
    // Every target but raw HINCRBY (Redis only), for 2 client counts.
    assert_eq!(rows.len(), 2 * (hotspot::TARGETS.len() - 1), "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r.total_matches && r.ratio_to_raw.is_none()),
        "{}",
        report::hotspot_table(&rows)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_bench_and_hotspot_on_redis() {
    let server = Standalone::start();
    let backend = Backend::Redis(server.url());
    app_is_exact(backend.connect(&namespace("app")).await.unwrap()).await;
    let results = bench::run(
        &backend,
        &namespace("bench"),
        &short_bench(),
        Progress::hidden(),
    )
    .await
    .unwrap();
    check_bench(&results);
    let rows = hotspot::run(
        &backend,
        &namespace("hot"),
        &short_hotspot(),
        Progress::hidden(),
    )
    .await
    .unwrap();
    let table = report::hotspot_table(&rows);
    assert_eq!(rows.len(), 2 * hotspot::TARGETS.len(), "{table}");
    assert!(rows.iter().all(|r| r.total_matches), "{table}");
    assert!(rows.iter().all(|r| r.ratio_to_raw.is_some()), "{table}");
    assert!(
        rows.iter()
            .filter(|r| r.target == "raw HINCRBY")
            .all(|r| r.failed == 0 && r.committed > 0),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_bench_and_hotspot_on_postgres() {
    let server = Postgres::start();
    let url = server.url();
    let backend = Backend::Postgres(url.clone());
    assert!(!backend.to_string().contains("postgres://"), "{backend}");
    app_is_exact(backend.connect("app").await.unwrap()).await;
    let results = bench::run(&backend, "bench", &short_bench(), Progress::hidden())
        .await
        .unwrap();
    check_bench(&results);
    let rows = hotspot::run(&backend, "hot", &short_hotspot(), Progress::hidden())
        .await
        .unwrap();
    let table = report::hotspot_table(&rows);
    assert_eq!(rows.len(), 2 * hotspot::TARGETS.len(), "{table}");
    assert!(rows.iter().all(|r| r.total_matches), "{table}");
    assert!(
        rows.iter()
            .filter(|r| r.target == "raw slotted counter")
            .all(|r| r.failed == 0 && r.committed > 0 && r.ratio_to_raw == Some(1.0)),
        "{table}"
    );
    let err = Backend::Postgres("postgres://u:s3cret@127.0.0.1:1/db".into())
        .connect("x")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("127.0.0.1:1") && !err.to_string().contains("s3cret"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_and_hotspot_on_redis_cluster() {
    let cluster = Cluster::start();
    let backend = Backend::RedisCluster(cluster.urls());
    app_is_exact(backend.connect(&namespace("app")).await.unwrap()).await;
    // Each row reports the server time per vote of each of the 3 masters.
    let config = HotspotConfig {
        clients: vec![4],
        only: vec!["HINCRBY".into(), "apply sum".into()],
        ..short_hotspot()
    };
    let rows = hotspot::run(&backend, &namespace("hot"), &config, Progress::hidden())
        .await
        .unwrap();
    assert!(rows.len() >= 2, "{rows:?}");
    for row in &rows {
        assert!(row.total_matches, "{row:?}");
        assert_eq!(row.node_us_per_vote.len(), 3, "{row:?}");
        assert!(
            row.node_us_per_vote
                .iter()
                .all(|us| us.is_finite() && *us >= 0.0)
        );
        assert!(row.node_us_per_vote.iter().any(|us| *us > 0.0), "{row:?}");
    }
    let table = report::hotspot_nodes_table(&rows);
    assert!(
        table.contains("ceiling/s") && table.contains("node 3"),
        "{table}"
    );
    assert!(report::hotspot_csv(&rows).contains(';'));
}

#[tokio::test]
async fn bad_url_and_unreachable_server_say_so() {
    let err = Backend::Redis("http//nope".into()).validate().unwrap_err();
    assert!(err.to_string().contains("bad Redis URL"), "{err}");
    assert!(
        !err.to_string().contains("nope"),
        "the URL is not repeated: {err}"
    );
    let err = Backend::RedisCluster(vec![]).validate().unwrap_err();
    assert!(err.to_string().contains("at least one node"), "{err}");
    // Port 1 on loopback: nothing listens there.
    let err = Backend::Redis("redis://127.0.0.1:1/".into())
        .connect("x")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot reach Redis at redis://127.0.0.1:1/"),
        "{err}"
    );
}

/// The hot-spot table of `rows` has the column `in_table` in its header (not only in its
/// legend), and their CSV the column `in_csv`.
fn assert_columns(rows: &[hotspot::HotspotRow], in_table: &str, in_csv: &str) {
    let table = report::hotspot_table(rows);
    let header = table.lines().next().unwrap_or_default();
    assert!(header.contains(in_table), "{table}");
    let csv = report::hotspot_csv(rows);
    let columns = csv.lines().next().unwrap_or_default();
    assert!(columns.split(',').any(|c| c == in_csv), "{csv}");
}

#[tokio::test]
async fn hotspot_only_matching_no_target_says_which_there_are() {
    let config = HotspotConfig {
        only: vec!["nosuch".to_owned()],
        ..short_hotspot()
    };
    let err = hotspot::run(&Backend::Memory, "only", &config, Progress::hidden())
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("--only nosuch") && message.contains("apply sum mapper/client"),
        "{message}"
    );
    // No raw target on the embedded store: it is not offered.
    assert!(!message.contains("HINCRBY"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hotspot_reports_the_clients_cpu_time_per_vote() {
    let config = HotspotConfig {
        clients: vec![2],
        only: vec!["apply sum".to_owned()],
        ..short_hotspot()
    };
    let rows = hotspot::run(&Backend::Memory, "cpu", &config, Progress::hidden())
        .await
        .unwrap();
    let table = report::hotspot_table(&rows);
    assert!(!rows.is_empty(), "{table}");
    for row in &rows {
        assert!(
            row.cpu_us_per_vote
                .is_some_and(|us| us.is_finite() && us >= 0.0),
            "{table}"
        );
    }
    assert_columns(&rows, "cpu µs/vote", "cpu_us_per_vote");
}

#[test]
fn process_cpu_time_counts_up_while_this_process_computes() {
    let before = hotspot::cpu_time().expect("/proc/self/stat on Linux");
    // Computes until the clock has moved two of its 10 ms ticks: 20 ms of this thread's
    // time, which any machine gives it long before the guard of two minutes.
    let started = std::time::Instant::now();
    let mut spins = 0_u64;
    while hotspot::cpu_time().unwrap() < before + Duration::from_millis(20) {
        spins = std::hint::black_box(spins + 1);
        assert!(
            started.elapsed() < Duration::from_mins(2),
            "the CPU time did not move while computing: {:?}",
            hotspot::cpu_time()
        );
    }
    assert!(spins > 0);
}

#[test]
fn a_worker_tally_reads_back_from_its_line() {
    let tally = WorkerTally {
        committed: 120,
        failed: 2,
        attempts: 130,
        conflicts: 8,
        cpu: Some(Duration::from_micros(1_234_567)),
    };
    assert_eq!(tally.line(), "120 2 130 8 1234567");
    assert_eq!(WorkerTally::parse(&tally.line()), Some(tally));
    let unknown = WorkerTally { cpu: None, ..tally };
    assert_eq!(unknown.line(), "120 2 130 8 -");
    assert_eq!(WorkerTally::parse(&unknown.line()), Some(unknown));
    for bad in [
        "",
        "120 2 130 8",
        "120 2 130 8 1 9",
        "120 2 x 8 1",
        "120 2 130 8 -1",
    ] {
        assert_eq!(WorkerTally::parse(bad), None, "{bad:?}");
    }
}

/// A stand-in for the counting allocator of `--features count-allocations`: every call
/// answers 10 more allocations than the last.
fn ten_more_each_call() -> u64 {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    COUNT.fetch_add(10, std::sync::atomic::Ordering::Relaxed) + 10
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hotspot_reports_allocations_per_vote_with_a_counter() {
    let config = HotspotConfig {
        clients: vec![2],
        only: vec!["apply sum".to_owned()],
        allocations: Some(ten_more_each_call),
        ..short_hotspot()
    };
    let rows = hotspot::run(&Backend::Memory, "allocs", &config, Progress::hidden())
        .await
        .unwrap();
    let table = report::hotspot_table(&rows);
    assert!(!rows.is_empty(), "{table}");
    for row in &rows {
        // The counter moved by 10 between the start and the end of the voting.
        #[allow(clippy::cast_precision_loss)]
        let expected = 10.0 / row.committed as f64;
        assert_eq!(row.allocs_per_vote, Some(expected), "{table}");
    }
    assert_columns(&rows, "allocs/vote", "allocs_per_vote");
    // Without a counter, no column.
    let plain = hotspot::run(
        &Backend::Memory,
        "plain",
        &HotspotConfig {
            allocations: None,
            ..config
        },
        Progress::hidden(),
    )
    .await
    .unwrap();
    assert!(plain.iter().all(|r| r.allocs_per_vote.is_none()));
    assert!(!report::hotspot_table(&plain).contains("allocs/vote"));
}
