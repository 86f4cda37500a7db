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

/// Runs the binary with `args`: (exit code, stdout, stderr).
fn moderator(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_moderator"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn hotspot_output_names_its_client_counts_and_explains_its_columns() {
    let (code, stdout, stderr) = moderator(&[
        "hotspot",
        "--clients",
        "1,2",
        "--duration",
        "0.1",
        "--only",
        "naive",
    ]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("one question, 1, 2 clients"), "{stdout}");
    for column in [
        "/raw:",
        "conflicts:",
        "wr/vote:",
        "totals:",
        "committed/failed:",
    ] {
        assert!(stdout.contains(column), "no legend for {column}:\n{stdout}");
    }
}

#[test]
fn bench_runs_only_the_variants_its_only_option_names() {
    let (code, stdout, stderr) = moderator(&[
        "bench",
        "--only",
        "=naive w/o Tx retry,fold-fn",
        "--duration",
        "0.2",
        "--rate",
        "20",
        "--commit-ms",
        "0",
        "--read-ms",
        "0",
    ]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    for ran in [
        "naive w/o Tx retry",
        "autoshard fold-fn w/o Tx retry",
        "autoshard fold-fn w/ Tx retry",
    ] {
        assert!(stdout.contains(ran), "{ran} did not run:\n{stdout}");
    }
    for left_out in ["naive w/ Tx retry", "autoshard sum"] {
        assert!(!stdout.contains(left_out), "{left_out} ran:\n{stdout}");
    }
    let (code, stdout, stderr) = moderator(&["bench", "--only", "nosuch"]);
    assert_ne!(code, Some(0), "{stdout}");
    assert!(
        stderr.contains("--only nosuch") && stderr.contains("autoshard sum w/ Tx retry"),
        "{stderr}"
    );
}

#[test]
fn the_app_takes_its_options_without_a_command_and_help_lists_them() {
    let (code, stdout, stderr) = moderator(&["--users", "4", "--votes", "2"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("8 votes committed"), "{stdout}");
    let (code, help, _) = moderator(&["--help"]);
    assert_eq!(code, Some(0));
    for option in [
        "--redis",
        "--postgres",
        "--questions",
        "--keep",
        "leaderboard",
        "clean",
    ] {
        assert!(help.contains(option), "--help lacks {option}:\n{help}");
    }
}

#[test]
fn serve_help_states_what_serve_does_with_its_data() {
    let (code, help, stderr) = moderator(&["serve", "--help"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(help.contains("[default: moderator-web]"), "{help}");
    assert!(help.contains("kept there across restarts"), "{help}");
    for wrong in ["--keep", "fresh one per run", "deleted when the run ends"] {
        assert!(
            !help.contains(wrong),
            "serve --help says {wrong:?}:\n{help}"
        );
    }
}

#[test]
fn bad_numbers_are_refused_before_any_work() {
    for args in [
        &["--questions", "0"][..],
        &["bench", "--rate", "-5"],
        &["bench", "--rate", "1e9"],
        &["bench", "--questions", "0"],
        &["hotspot", "--clients", "0"],
        &["hotspot", "--clients", "8,0"],
        &["leaderboard", "--readers", "0"],
    ] {
        let (code, stdout, stderr) = moderator(args);
        assert_eq!(code, Some(2), "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains("expected"), "{args:?}: {stderr}");
    }
    // An unwritable --plot fails at once, not after the (here very long) run.
    let (code, _, stderr) = moderator(&[
        "bench",
        "--duration",
        "100000",
        "--plot",
        "/nonexistent-dir/figure.svg",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot write /nonexistent-dir/figure.svg"),
        "{stderr}"
    );
}

/// Keys whose name starts with `prefix` on `server`.
fn keys(server: &Standalone, prefix: &str) -> usize {
    server
        .server
        .cli(&["--scan", "--pattern", &format!("{prefix}*")])
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

#[test]
fn runs_clean_up_after_themselves_unless_kept() {
    let server = Standalone::start();
    let url = server.url();
    let run = |extra: &[&str]| {
        let mut args = vec!["--redis", &url, "--namespace", "fixed", "--users", "3"];
        args.extend(extra);
        moderator(&args)
    };
    // The same fixed namespace twice: nothing is left behind, so the rerun starts empty.
    for _ in 0..2 {
        let (code, stdout, stderr) = run(&[]);
        assert_eq!(code, Some(0), "{stdout}{stderr}");
        assert_eq!(keys(&server, "fixed"), 0, "{stdout}");
    }
    let (code, stdout, stderr) = run(&["--keep"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(keys(&server, "fixed:") > 0);
    let (code, stdout, stderr) = moderator(&["clean", "--redis", &url, "--namespace", "fixed"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(keys(&server, "fixed"), 0, "{stdout}");
    let (code, _, stderr) = moderator(&["clean", "--redis", &url]);
    assert_eq!(code, Some(2), "clean needs a namespace: {stderr}");
}

#[test]
fn passwords_are_never_printed_and_connect_errors_say_what_failed() {
    let server = Standalone::start();
    let port = server.server.port;
    server
        .server
        .cli(&["CONFIG", "SET", "requirepass", "s3cret"]);
    let with = |password: &str| format!("redis://:{password}@127.0.0.1:{port}/");

    let (code, stdout, stderr) = moderator(&["--redis", &with("s3cret"), "--users", "3"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("Redis at redis://127.0.0.1:{port}/0")),
        "{stdout}"
    );

    // No password: refused at connect (PING), not at the first write.
    let (code, stdout, stderr) = moderator(&["--redis", &format!("redis://127.0.0.1:{port}/")]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(!stderr.contains("is a server running there"), "{stderr}");
    assert!(
        stderr.contains("NOAUTH") || stderr.contains("uthentication"),
        "{stderr}"
    );

    let (code, stdout, stderr) = moderator(&["--redis", &with("wrong-one")]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(!stderr.contains("is a server running there"), "{stderr}");
    for text in [&stdout, &stderr] {
        assert!(
            !text.contains("wrong-one") && !text.contains("s3cret"),
            "{text}"
        );
    }

    let (code, _, stderr) =
        moderator(&["--redis", &format!("redis://:s3cret@127.0.0.1:{port}/99")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("DB index") || stderr.contains("out of range"),
        "{stderr}"
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
