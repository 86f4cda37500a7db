//! Renders results: terminal tables, CSV and JSON. Returns strings; the binary prints or
//! writes them.

use crate::app::AppOutcome;
use crate::bench::VariantResult;
use crate::hotspot::HotspotRow;
use crate::leaderboard::LeaderboardRow;
use std::fmt::Write as _;
use std::path::Path;

/// The leaderboard, one question a line, with the check of each line.
#[must_use]
pub fn leaderboard(outcome: &AppOutcome) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4}  {:>6}  {:>9}  {:<48}  check",
        "#", "votes", "responses", "question"
    );
    for s in &outcome.leaderboard {
        let check = if s.is_exact() {
            "ok".to_owned()
        } else {
            format!(
                "MISMATCH: expected {} votes, {} responses",
                s.expected_votes, s.expected_responses
            )
        };
        let _ = writeln!(
            out,
            "{:>4}  {:>6}  {:>9}  {:<48}  {check}",
            s.id, s.votes, s.responses, s.text
        );
    }
    let _ = writeln!(
        out,
        "{} votes committed, {} gave up under contention; {} responses committed, {} gave up; in {:.1} s",
        outcome.votes_committed,
        outcome.votes_failed,
        outcome.responses_committed,
        outcome.responses_failed,
        outcome.elapsed.as_secs_f64()
    );
    out
}

/// The benchmark's table.
#[must_use]
pub fn bench_table(results: &[VariantResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<30} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>12}  totals",
        "variant",
        "attempted",
        "committed",
        "failed%",
        "tx",
        "conflicts",
        "mean ms",
        "p50 ms",
        "p99 ms",
        "committed/s"
    );
    for r in results {
        let totals = if r.totals_match() {
            format!("ok ({})", r.total_found)
        } else {
            format!(
                "MISMATCH: read {}, committed {}",
                r.total_found, r.total_expected
            )
        };
        let _ = writeln!(
            out,
            "{:<30} {:>9} {:>9} {:>8.1} {:>8} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>12.1}  {totals}",
            r.name,
            r.attempted,
            r.committed,
            r.failed_pct,
            r.transactions,
            r.conflicts,
            r.latency.mean_ms,
            r.latency.p50_ms,
            r.latency.p99_ms,
            r.committed_per_sec,
        );
        if let Some(e) = &r.first_error {
            let _ = writeln!(out, "    {} store error(s), first: {e}", r.errors);
        }
    }
    out
}

/// The hot-spot table.
#[must_use]
pub fn hotspot_table(rows: &[HotspotRow]) -> String {
    let allocs = rows.iter().any(|r| r.allocs_per_vote.is_some());
    let mut out = String::new();
    let _ = write!(
        out,
        "{:>7}  {:<27} {:>9} {:>6} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "clients",
        "target",
        "committed",
        "failed",
        "votes/s",
        "/raw",
        "conflicts",
        "wr/vote",
        "RSS MiB"
    );
    if allocs {
        let _ = write!(out, " {:>11}", "allocs/vote");
    }
    out.push_str("  totals\n");
    for r in rows {
        let opt = |x: Option<f64>, digits: usize, suffix: &str| {
            x.map_or_else(|| "n/a".to_owned(), |x| format!("{x:.digits$}{suffix}"))
        };
        let totals = if r.total_matches { "ok" } else { "MISMATCH" };
        let _ = write!(
            out,
            "{:>7}  {:<27} {:>9} {:>6} {:>9.0} {:>9} {:>9} {:>8} {:>8}",
            r.clients,
            r.target,
            r.committed,
            r.failed,
            r.per_sec,
            opt(r.ratio_to_raw, 3, ""),
            opt(r.conflict_pct, 1, "%"),
            opt(r.writes_per_vote, 2, ""),
            opt(r.rss_mib, 0, ""),
        );
        if allocs {
            let _ = write!(out, " {:>11}", opt(r.allocs_per_vote, 1, ""));
        }
        let _ = writeln!(out, "  {totals}");
    }
    out.push_str(HOTSPOT_LEGEND);
    if allocs {
        out.push_str(HOTSPOT_ALLOCS_LEGEND);
    }
    out
}

/// On a Redis Cluster: each master's server time per vote, and what one hot entity
/// would reach on dedicated nodes (see [`crate::server_time`]), beside the raw counter's
/// ceiling with as many clients. Empty when no row has node times.
#[must_use]
pub fn hotspot_nodes_table(rows: &[HotspotRow]) -> String {
    let nodes = rows
        .iter()
        .map(|r| r.node_us_per_vote.len())
        .max()
        .unwrap_or(0);
    if nodes == 0 {
        return String::new();
    }
    let mut out = String::from(
        "\nserver CPU time per vote on each master (us, main thread, INFO cpu), and the \
         votes/s the busiest master allows on a core of its own\n",
    );
    let _ = write!(out, "{:>7}  {:<27}", "clients", "target");
    for i in 1..=nodes {
        let _ = write!(out, " {:>8}", format!("node {i}"));
    }
    let _ = writeln!(out, " {:>11} {:>9}", "ceiling/s", "/raw");
    let processes = |r: &HotspotRow| r.target.ends_with(", processes");
    for r in rows.iter().filter(|r| !r.node_us_per_vote.is_empty()) {
        let _ = write!(out, "{:>7}  {:<27}", r.clients, r.target);
        for us in &r.node_us_per_vote {
            let _ = write!(out, " {us:>8.2}");
        }
        let ceiling = crate::server_time::ceiling(&r.node_us_per_vote);
        let raw = rows
            .iter()
            .find(|raw| {
                raw.clients == r.clients
                    && raw.target.starts_with("raw")
                    && processes(raw) == processes(r)
            })
            .and_then(|raw| crate::server_time::ceiling(&raw.node_us_per_vote));
        let ratio = ceiling.zip(raw).map(|(c, raw)| c / raw);
        let _ = writeln!(
            out,
            " {:>11} {:>9}",
            ceiling.map_or_else(|| "n/a".to_owned(), |c| format!("{c:.0}")),
            ratio.map_or_else(|| "n/a".to_owned(), |x| format!("{x:.3}")),
        );
    }
    out.push_str(
        "ceiling/s: 1,000,000 / the busiest master's us per vote    /raw: over the raw \
         counter's ceiling (one key, one master)\n",
    );
    out
}

/// What the columns of [`hotspot_table`] mean, printed under it.
pub const HOTSPOT_LEGEND: &str = "\
committed/failed: votes stored / given up (contention after retries, or a store error)
votes/s: committed per second    /raw: votes/s over the raw store command's, same clients
conflicts: attempts that conflicted    wr/vote: store writes per committed vote
RSS MiB: this process's memory after the row
totals: the counter read back equals the votes committed (ok) or not (MISMATCH)
";

/// The legend of the allocations column of [`hotspot_table`].
const HOTSPOT_ALLOCS_LEGEND: &str = "\
allocs/vote: heap allocations of this process while the clients voted, per committed vote
";

/// The leaderboard table, with the cached variant's ratios to the uncached one.
#[must_use]
pub fn leaderboard_table(rows: &[LeaderboardRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<9} {:>9} {:>10} {:>10} {:>9} {:>9} {:>9} {:>7} {:>6} {:>10}  totals",
        "variant",
        "pages",
        "pages/s",
        "reads/s",
        "p50 ms",
        "p99 ms",
        "votes/s",
        "failed",
        "hits",
        "stale ms"
    );
    for r in rows {
        let hits = r
            .hit_pct
            .map_or_else(|| "n/a".to_owned(), |h| format!("{h:.0}%"));
        let totals = if r.exact { "exact" } else { "MISMATCH" };
        let _ = writeln!(
            out,
            "{:<9} {:>9} {:>10.0} {:>10.0} {:>9.3} {:>9.3} {:>9.0} {:>7} {:>6} {:>10.1}  {totals}",
            r.variant,
            r.pages,
            r.pages_per_sec,
            r.reads_per_sec,
            r.page.p50_ms,
            r.page.p99_ms,
            r.votes_per_sec,
            r.failed,
            hits,
            r.staleness_ms,
        );
    }
    let find = |name: &str| rows.iter().find(|r| r.variant == name);
    if let (Some(off), Some(on)) = (find("uncached"), find("cached")) {
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        let _ = writeln!(
            out,
            "cached / uncached: reads/s {:.1}x, p50 page latency 1/{:.0}, votes/s {:.2}x",
            ratio(on.reads_per_sec, off.reads_per_sec),
            ratio(off.page.p50_ms, on.page.p50_ms),
            ratio(on.votes_per_sec, off.votes_per_sec),
        );
    }
    out
}

/// The rows of `moderator load`, with each target's votes/s over the first target's.
#[must_use]
pub fn load_table(rows: &[crate::load::LoadRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<24} {:>9} {:>8} {:>8} {:>10} {:>10} {:>10} {:>10} {:>7} {:>9} {:>9}  totals",
        "target",
        "req/s",
        "votes/s",
        "reads/s",
        "vote p50",
        "vote p99",
        "read p50",
        "read p99",
        "failed",
        "expected",
        "counted"
    );
    for r in rows {
        let totals = if r.is_exact() { "exact" } else { "MISMATCH" };
        let _ = writeln!(
            out,
            "{:<24} {:>9.0} {:>8.0} {:>8.0} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>7} {:>9} {:>9}  {totals}",
            r.target,
            r.requests_per_sec,
            r.votes_per_sec,
            r.reads_per_sec,
            r.vote.p50_ms,
            r.vote.p99_ms,
            r.read.p50_ms,
            r.read.p99_ms,
            r.failed,
            r.expected,
            r.counted,
        );
    }
    if let [first, rest @ ..] = rows {
        for r in rest {
            let ratio = if r.votes_per_sec > 0.0 {
                first.votes_per_sec / r.votes_per_sec
            } else {
                f64::NAN
            };
            let _ = writeln!(out, "votes/s {} / {}: {ratio:.2}x", first.target, r.target);
        }
    }
    let _ = writeln!(
        out,
        "latencies in ms; expected: visitors whose vote was answered (the count must equal \
         them, plus at most the visitors whose every request failed); repeats counted: {}",
        rows.iter().map(|r| r.double).sum::<u64>()
    );
    out
}

/// The leaderboard's results as CSV, one variant a row.
#[must_use]
pub fn leaderboard_csv(rows: &[LeaderboardRow]) -> String {
    let mut out = String::from(
        "variant,pages,pages_per_sec,reads_per_sec,page_p50_ms,page_p99_ms,votes,votes_per_sec,failed,hit_pct,staleness_ms,exact\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{:.1},{:.1},{:.4},{:.4},{},{:.1},{},{},{:.2},{}",
            r.variant,
            r.pages,
            r.pages_per_sec,
            r.reads_per_sec,
            r.page.p50_ms,
            r.page.p99_ms,
            r.votes,
            r.votes_per_sec,
            r.failed,
            r.hit_pct.map_or_else(String::new, |h| format!("{h:.1}")),
            r.staleness_ms,
            r.exact
        );
    }
    out
}

/// The benchmark's results as CSV, one variant a row.
#[must_use]
pub fn bench_csv(results: &[VariantResult]) -> String {
    let mut out = String::from(
        "variant,strategy,retries,attempted,committed,failed,failed_pct,errors,transactions,conflicts,mean_ms,p50_ms,p99_ms,committed_per_sec,total_found,total_expected\n",
    );
    for r in results {
        let strategy = serde_json::to_value(r.variant.strategy)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{},{strategy},{},{},{},{},{:.3},{},{},{},{:.3},{:.3},{:.3},{:.3},{},{}",
            r.name,
            r.variant.retries,
            r.attempted,
            r.committed,
            r.failed,
            r.failed_pct,
            r.errors,
            r.transactions,
            r.conflicts,
            r.latency.mean_ms,
            r.latency.p50_ms,
            r.latency.p99_ms,
            r.committed_per_sec,
            r.total_found,
            r.total_expected
        );
    }
    out
}

/// The hot-spot results as CSV, one target and client count a row.
#[must_use]
pub fn hotspot_csv(rows: &[HotspotRow]) -> String {
    let mut out = String::from(
        "clients,target,committed,failed,per_sec,ratio_to_raw,conflict_pct,writes_per_vote,total_matches,rss_mib,allocs_per_vote,node_us_per_vote\n",
    );
    let opt = |x: Option<f64>| x.map_or_else(String::new, |x| format!("{x:.4}"));
    for r in rows {
        let _ = writeln!(
            out,
            "{},\"{}\",{},{},{:.3},{},{},{},{},{},{},{}",
            r.clients,
            r.target,
            r.committed,
            r.failed,
            r.per_sec,
            opt(r.ratio_to_raw),
            opt(r.conflict_pct),
            opt(r.writes_per_vote),
            r.total_matches,
            opt(r.rss_mib),
            opt(r.allocs_per_vote),
            r.node_us_per_vote
                .iter()
                .map(|us| format!("{us:.3}"))
                .collect::<Vec<_>>()
                .join(";"),
        );
    }
    out
}

/// The adaptive run's summary, one variant a row.
#[must_use]
pub fn adaptive_table(rows: &[crate::adaptive::Summary]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:>9} {:>11} {:>11} {:>11} {:>6} {:>9} {:>5} {:>6}  totals",
        "variant", "votes/s", "last 1/4", "conflicts", "last 1/4", "peak", "after", "end", "failed"
    );
    for r in rows {
        let totals = if r.total_matches { "ok" } else { "MISMATCH" };
        let _ = writeln!(
            out,
            "{:<10} {:>9.0} {:>11.0} {:>10.1}% {:>10.1}% {:>6} {:>8.0}s {:>5} {:>6}  {totals}",
            r.variant,
            r.votes_per_sec,
            r.final_votes_per_sec,
            r.first_conflict_pct,
            r.final_conflict_pct,
            r.peak_shards,
            r.peak_after_s,
            r.end_shards,
            r.failed,
        );
    }
    out
}

/// The adaptive run's samples as CSV, one second of one variant a row.
#[must_use]
pub fn adaptive_csv(samples: &[crate::adaptive::Sample]) -> String {
    let mut out = String::from("variant,t_s,votes_per_sec,conflict_pct,shards,loaded\n");
    for s in samples {
        let _ = writeln!(
            out,
            "\"{}\",{},{},{:.2},{},{}",
            s.variant, s.t_s, s.votes_per_sec, s.conflict_pct, s.shards, s.loaded
        );
    }
    out
}

/// The output format `--out PATH` asks for, by extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `.csv`
    Csv,
    /// `.json`
    Json,
}

impl Format {
    /// The format of `path`, or an error naming the extensions understood.
    pub fn of(path: &Path) -> Result<Format, String> {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("csv") => Ok(Format::Csv),
            Some(e) if e.eq_ignore_ascii_case("json") => Ok(Format::Json),
            _ => Err(format!(
                "--out {}: the file name must end in .csv or .json",
                path.display()
            )),
        }
    }
}

/// Renders `value` as `format`, using `csv` for CSV.
pub fn render<T: serde::Serialize>(
    format: Format,
    value: &T,
    csv: impl FnOnce() -> String,
) -> Result<String, String> {
    match format {
        Format::Csv => Ok(csv()),
        Format::Json => serde_json::to_string_pretty(value).map_err(|e| e.to_string()),
    }
}
