//! Short versions of the app, the benchmark and the hot-spot mode, on the embedded store
//! and on Redis and PostgreSQL servers started here (never any other). They check exact
//! totals, never timings.

use autoshard::prelude::*;
use autoshard_moderator::app::{self, AppConfig};
use autoshard_moderator::backend::{Backend, ModelledLatency};
use autoshard_moderator::bench::{self, BenchConfig, VariantResult};
use autoshard_moderator::hotspot::{self, HotspotConfig};
use autoshard_moderator::progress::Progress;
use autoshard_moderator::{chart, report};
use autoshard_test_support::postgres::Postgres;
use autoshard_test_support::redis::{namespace, Cluster, Standalone};
use std::process::Command;
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
    assert!(outcome
        .leaderboard
        .windows(2)
        .all(|w| w[0].votes >= w[1].votes));
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
    let svg = chart::figure6(results, "smoke");
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
async fn app_on_redis_cluster() {
    let cluster = Cluster::start();
    let backend = Backend::RedisCluster(cluster.urls());
    app_is_exact(backend.connect(&namespace("app")).await.unwrap()).await;
}

#[tokio::test]
async fn bad_url_and_unreachable_server_say_so() {
    let err = Backend::Redis("http//nope".into()).validate().unwrap_err();
    assert!(
        err.to_string().contains("bad Redis URL `http//nope`"),
        "{err}"
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

#[test]
fn the_binary_runs_the_app_and_rejects_a_bad_url() {
    let exe = env!("CARGO_BIN_EXE_moderator");
    let out = Command::new(exe)
        .args(["app", "--users", "5", "--votes", "3"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("15 votes committed"), "{stdout}");
    assert!(
        stdout.contains("check: every question holds exactly"),
        "{stdout}"
    );

    let out = Command::new(exe)
        .args(["bench", "--redis", "localhost:6379"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bad Redis URL"), "{stderr}");
}
