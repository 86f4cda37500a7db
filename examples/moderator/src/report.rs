//! Renders results: terminal tables (`comfy-table`), CSV (`csv`) and JSON (`serde_json`).
//! Returns strings; the binary prints or writes them.

use crate::app::AppOutcome;
use crate::bench::VariantResult;
use crate::hotspot::HotspotRow;
use crate::leaderboard::LeaderboardRow;
use comfy_table::{CellAlignment, Table, presets};
use std::fmt::Write as _;
use std::path::Path;

/// A terminal table without borders: `header`, then `rows`; every column right-aligned but
/// those whose index is in `left`.
fn table(header: &[&str], left: &[usize], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut table = Table::new();
    table
        .load_preset(presets::NOTHING)
        .set_header(header.to_vec());
    for row in rows {
        table.add_row(row);
    }
    for (i, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, 2));
        if !left.contains(&i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    let mut out = String::new();
    for line in table.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// CSV text: `header`, then `rows`, quoted where a field needs it.
fn csv_text(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut writer = csv::Writer::from_writer(Vec::new());
    // Writing into memory: the writer's only errors are those of the `Vec` (none).
    let _ = writer.write_record(header);
    for row in rows {
        let _ = writer.write_record(&row);
    }
    writer
        .into_inner()
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// `x` with `digits` decimals and `suffix`, or `n/a`.
fn or_na(x: Option<f64>, digits: usize, suffix: &str) -> String {
    x.map_or_else(|| "n/a".to_owned(), |x| format!("{x:.digits$}{suffix}"))
}

/// `x` with `digits` decimals, or an empty field.
fn or_empty(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(String::new, |x| format!("{x:.digits$}"))
}

/// The leaderboard, one question a line, with the check of each line.
#[must_use]
pub fn leaderboard(outcome: &AppOutcome) -> String {
    let rows = outcome.leaderboard.iter().map(|s| {
        let check = if s.is_exact() {
            "ok".to_owned()
        } else {
            format!(
                "MISMATCH: expected {} votes, {} responses",
                s.expected_votes, s.expected_responses
            )
        };
        vec![
            s.id.to_string(),
            s.votes.to_string(),
            s.responses.to_string(),
            s.text.clone(),
            check,
        ]
    });
    let mut out = table(
        &["#", "votes", "responses", "question", "check"],
        &[3, 4],
        rows,
    );
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
    let rows = results.iter().map(|r| {
        let totals = if r.totals_match() {
            format!("ok ({})", r.total_found)
        } else {
            format!(
                "MISMATCH: read {}, committed {}",
                r.total_found, r.total_expected
            )
        };
        vec![
            r.name.clone(),
            r.attempted.to_string(),
            r.committed.to_string(),
            format!("{:.1}", r.failed_pct),
            r.transactions.to_string(),
            r.conflicts.to_string(),
            format!("{:.1}", r.latency.mean_ms),
            format!("{:.1}", r.latency.p50_ms),
            format!("{:.1}", r.latency.p99_ms),
            format!("{:.1}", r.committed_per_sec),
            totals,
        ]
    });
    out.push_str(&table(
        &[
            "variant",
            "attempted",
            "committed",
            "failed%",
            "tx",
            "conflicts",
            "mean ms",
            "p50 ms",
            "p99 ms",
            "committed/s",
            "totals",
        ],
        &[0, 10],
        rows,
    ));
    for r in results {
        if let Some(e) = &r.first_error {
            let _ = writeln!(out, "{}: {} store error(s), first: {e}", r.name, r.errors);
        }
    }
    out
}

/// The hot-spot table.
#[must_use]
pub fn hotspot_table(rows: &[HotspotRow]) -> String {
    let allocs = rows.iter().any(|r| r.allocs_per_vote.is_some());
    let cpu = rows.iter().any(|r| r.cpu_us_per_vote.is_some());
    let mut header = vec![
        "clients",
        "target",
        "committed",
        "failed",
        "votes/s",
        "/raw",
        "conflicts",
        "wr/vote",
        "RSS MiB",
    ];
    if cpu {
        header.push("cpu µs/vote");
    }
    if allocs {
        header.push("allocs/vote");
    }
    header.push("totals");
    let lines = rows.iter().map(|r| {
        let mut line = vec![
            r.clients.to_string(),
            r.target.clone(),
            r.committed.to_string(),
            r.failed.to_string(),
            format!("{:.0}", r.per_sec),
            or_na(r.ratio_to_raw, 3, ""),
            or_na(r.conflict_pct, 1, "%"),
            or_na(r.writes_per_vote, 2, ""),
            or_na(r.rss_mib, 0, ""),
        ];
        if cpu {
            line.push(or_na(r.cpu_us_per_vote, 1, ""));
        }
        if allocs {
            line.push(or_na(r.allocs_per_vote, 1, ""));
        }
        line.push(if r.total_matches { "ok" } else { "MISMATCH" }.to_owned());
        line
    });
    let mut out = table(&header, &[1, header.len() - 1], lines);
    out.push_str(HOTSPOT_LEGEND);
    if cpu {
        out.push_str(HOTSPOT_CPU_LEGEND);
    }
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
    let node_names: Vec<String> = (1..=nodes).map(|i| format!("node {i}")).collect();
    let mut header = vec!["clients", "target"];
    header.extend(node_names.iter().map(String::as_str));
    header.extend(["ceiling/s", "/raw"]);
    let processes = |r: &HotspotRow| r.target.ends_with(", processes");
    let lines = rows
        .iter()
        .filter(|r| !r.node_us_per_vote.is_empty())
        .map(|r| {
            let mut line = vec![r.clients.to_string(), r.target.clone()];
            line.extend(r.node_us_per_vote.iter().map(|us| format!("{us:.2}")));
            line.resize(2 + nodes, String::new());
            let ceiling = crate::server_time::ceiling(&r.node_us_per_vote);
            let raw = rows
                .iter()
                .find(|raw| {
                    raw.clients == r.clients
                        && raw.target.starts_with("raw")
                        && processes(raw) == processes(r)
                })
                .and_then(|raw| crate::server_time::ceiling(&raw.node_us_per_vote));
            line.push(or_na(ceiling, 0, ""));
            line.push(or_na(ceiling.zip(raw).map(|(c, raw)| c / raw), 3, ""));
            line
        });
    let mut out = String::from(
        "\nserver CPU time per vote on each master (us, main thread, INFO cpu), and the \
         votes/s the busiest master allows on a core of its own\n",
    );
    out.push_str(&table(&header, &[1], lines));
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

/// The legend of the CPU column of [`hotspot_table`].
const HOTSPOT_CPU_LEGEND: &str = "\
cpu µs/vote: the clients' CPU time (this process's, or its worker processes') per committed vote
";

/// The legend of the allocations column of [`hotspot_table`].
const HOTSPOT_ALLOCS_LEGEND: &str = "\
allocs/vote: heap allocations of this process while the clients voted, per committed vote
";

/// The leaderboard table, with the cached variant's ratios to the uncached one.
#[must_use]
pub fn leaderboard_table(rows: &[LeaderboardRow]) -> String {
    let lines = rows.iter().map(|r| {
        vec![
            r.variant.clone(),
            r.pages.to_string(),
            format!("{:.0}", r.pages_per_sec),
            format!("{:.0}", r.reads_per_sec),
            format!("{:.3}", r.page.p50_ms),
            format!("{:.3}", r.page.p99_ms),
            format!("{:.0}", r.votes_per_sec),
            r.failed.to_string(),
            or_na(r.hit_pct, 0, "%"),
            format!("{:.1}", r.staleness_ms),
            if r.exact { "exact" } else { "MISMATCH" }.to_owned(),
        ]
    });
    let mut out = table(
        &[
            "variant", "pages", "pages/s", "reads/s", "p50 ms", "p99 ms", "votes/s", "failed",
            "hits", "stale ms", "totals",
        ],
        &[0, 10],
        lines,
    );
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
    let lines = rows.iter().map(|r| {
        vec![
            r.target.clone(),
            format!("{:.0}", r.requests_per_sec),
            format!("{:.0}", r.votes_per_sec),
            format!("{:.0}", r.reads_per_sec),
            format!("{:.2}", r.vote.p50_ms),
            format!("{:.2}", r.vote.p99_ms),
            format!("{:.2}", r.read.p50_ms),
            format!("{:.2}", r.read.p99_ms),
            r.failed.to_string(),
            r.expected.to_string(),
            r.counted.to_string(),
            if r.is_exact() { "exact" } else { "MISMATCH" }.to_owned(),
        ]
    });
    let mut out = table(
        &[
            "target", "req/s", "votes/s", "reads/s", "vote p50", "vote p99", "read p50",
            "read p99", "failed", "expected", "counted", "totals",
        ],
        &[0, 11],
        lines,
    );
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
    csv_text(
        &[
            "variant",
            "pages",
            "pages_per_sec",
            "reads_per_sec",
            "page_p50_ms",
            "page_p99_ms",
            "votes",
            "votes_per_sec",
            "failed",
            "hit_pct",
            "staleness_ms",
            "exact",
        ],
        rows.iter().map(|r| {
            vec![
                r.variant.clone(),
                r.pages.to_string(),
                format!("{:.1}", r.pages_per_sec),
                format!("{:.1}", r.reads_per_sec),
                format!("{:.4}", r.page.p50_ms),
                format!("{:.4}", r.page.p99_ms),
                r.votes.to_string(),
                format!("{:.1}", r.votes_per_sec),
                r.failed.to_string(),
                or_empty(r.hit_pct, 1),
                format!("{:.2}", r.staleness_ms),
                r.exact.to_string(),
            ]
        }),
    )
}

/// The benchmark's results as CSV, one variant a row.
#[must_use]
pub fn bench_csv(results: &[VariantResult]) -> String {
    csv_text(
        &[
            "variant",
            "strategy",
            "retries",
            "attempted",
            "committed",
            "failed",
            "failed_pct",
            "errors",
            "transactions",
            "conflicts",
            "mean_ms",
            "p50_ms",
            "p99_ms",
            "committed_per_sec",
            "total_found",
            "total_expected",
        ],
        results.iter().map(|r| {
            vec![
                r.name.clone(),
                // As JSON names it.
                serde_json::to_value(r.variant.strategy)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                r.variant.retries.to_string(),
                r.attempted.to_string(),
                r.committed.to_string(),
                r.failed.to_string(),
                format!("{:.3}", r.failed_pct),
                r.errors.to_string(),
                r.transactions.to_string(),
                r.conflicts.to_string(),
                format!("{:.3}", r.latency.mean_ms),
                format!("{:.3}", r.latency.p50_ms),
                format!("{:.3}", r.latency.p99_ms),
                format!("{:.3}", r.committed_per_sec),
                r.total_found.to_string(),
                r.total_expected.to_string(),
            ]
        }),
    )
}

/// The hot-spot results as CSV, one target and client count a row; the servers' times
/// per vote (a Redis Cluster's masters) in one field, separated by `;`.
#[must_use]
pub fn hotspot_csv(rows: &[HotspotRow]) -> String {
    csv_text(
        &[
            "clients",
            "target",
            "committed",
            "failed",
            "per_sec",
            "ratio_to_raw",
            "conflict_pct",
            "writes_per_vote",
            "total_matches",
            "rss_mib",
            "allocs_per_vote",
            "cpu_us_per_vote",
            "node_us_per_vote",
        ],
        rows.iter().map(|r| {
            vec![
                r.clients.to_string(),
                r.target.clone(),
                r.committed.to_string(),
                r.failed.to_string(),
                format!("{:.3}", r.per_sec),
                or_empty(r.ratio_to_raw, 4),
                or_empty(r.conflict_pct, 4),
                or_empty(r.writes_per_vote, 4),
                r.total_matches.to_string(),
                or_empty(r.rss_mib, 4),
                or_empty(r.allocs_per_vote, 4),
                or_empty(r.cpu_us_per_vote, 4),
                r.node_us_per_vote
                    .iter()
                    .map(|us| format!("{us:.3}"))
                    .collect::<Vec<_>>()
                    .join(";"),
            ]
        }),
    )
}

/// The adaptive run's summary, one variant a row.
#[must_use]
pub fn adaptive_table(rows: &[crate::adaptive::Summary]) -> String {
    let lines = rows.iter().map(|r| {
        vec![
            r.variant.clone(),
            format!("{:.0}", r.votes_per_sec),
            format!("{:.0}", r.final_votes_per_sec),
            format!("{:.1}%", r.first_conflict_pct),
            format!("{:.1}%", r.final_conflict_pct),
            r.peak_shards.to_string(),
            format!("{:.0}s", r.peak_after_s),
            r.end_shards.to_string(),
            r.failed.to_string(),
            if r.total_matches { "ok" } else { "MISMATCH" }.to_owned(),
        ]
    });
    table(
        &[
            "variant",
            "votes/s",
            "last 1/4",
            "conflicts",
            "last 1/4",
            "peak",
            "after",
            "end",
            "failed",
            "totals",
        ],
        &[0, 9],
        lines,
    )
}

/// The adaptive run's samples as CSV, one second of one variant a row.
#[must_use]
pub fn adaptive_csv(samples: &[crate::adaptive::Sample]) -> String {
    csv_text(
        &[
            "variant",
            "t_s",
            "votes_per_sec",
            "conflict_pct",
            "shards",
            "loaded",
        ],
        samples.iter().map(|s| {
            vec![
                s.variant.clone(),
                s.t_s.to_string(),
                s.votes_per_sec.to_string(),
                format!("{:.2}", s.conflict_pct),
                s.shards.to_string(),
                s.loaded.to_string(),
            ]
        }),
    )
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
