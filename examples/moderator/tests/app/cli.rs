//! The `moderator` binary as a user runs it: its options and their defaults, what it
//! prints and refuses, and what it leaves on a Redis server started here (never any
//! other).

use autoshard_test_support::redis::Standalone;
use std::process::Command;

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
