//! `hotspot --processes`: one operating-system process per client, each with its own
//! `Mapper` and connections, all voting from the same moment; and the worker each of
//! them runs, on a current-thread runtime (one client sends one request at a time: a
//! second thread would only add wake-ups between them).

use super::raw::Raw;
use super::{
    HotspotConfig, HotspotRow, TARGETS, Target, cpu_since, cpu_time, insert, per_vote_us,
    target_mapper, vote, votes,
};
use crate::backend::Backend;
use autoshard::prelude::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to start a worker process.
pub(super) struct Spawn<'a> {
    pub(super) program: &'a std::path::Path,
    pub(super) flags: &'a [String],
    pub(super) namespace: &'a str,
    pub(super) target: &'static str,
}

/// What one worker process did: votes committed and failed, attempts and conflicts of
/// its `Mapper`, and the CPU time it used while it voted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerTally {
    /// Votes that committed.
    pub committed: u64,
    /// Votes given up.
    pub failed: u64,
    /// The mapper's optimistic attempts.
    pub attempts: u64,
    /// Of those, the ones that conflicted.
    pub conflicts: u64,
    /// The process's CPU time while it voted (see [`cpu_time`]), `None` where unknown.
    pub cpu: Option<Duration>,
}

impl WorkerTally {
    /// The line a worker prints.
    #[must_use]
    pub fn line(&self) -> String {
        let cpu = self
            .cpu
            .map_or_else(|| "-".to_owned(), |cpu| cpu.as_micros().to_string());
        format!(
            "{} {} {} {} {cpu}",
            self.committed, self.failed, self.attempts, self.conflicts
        )
    }

    /// The tally in a worker's [`WorkerTally::line`]; `None` for any other text.
    #[must_use]
    pub fn parse(line: &str) -> Option<Self> {
        let mut words = line.split_whitespace();
        let mut n = || words.next()?.parse::<u64>().ok();
        let tally = WorkerTally {
            committed: n()?,
            failed: n()?,
            attempts: n()?,
            conflicts: n()?,
            cpu: None,
        };
        let cpu = match words.next()? {
            "-" => None,
            us => Some(Duration::from_micros(us.parse().ok()?)),
        };
        words
            .next()
            .is_none()
            .then_some(WorkerTally { cpu, ..tally })
    }
}

/// Runs `clients` worker processes of `target` (inserted here first; `raw`: the raw
/// counter, for the raw target), each voting from the same moment for the configured
/// duration, and sums what they report.
pub(super) async fn run_processes(
    store: Arc<dyn DocumentStore>,
    raw: Option<Raw>,
    target: Target,
    clients: usize,
    config: &HotspotConfig,
    spawn: &Spawn<'_>,
    bar: &indicatif::ProgressBar,
) -> Result<HotspotRow> {
    let first = Mapper::new(store).with_retry(config.retry);
    insert(&first, target).await?;
    // Time for every process to start and connect before the first vote.
    let start_ms = now_ms() + 1_000 + 50 * u64::try_from(clients).unwrap_or(u64::MAX);
    let mut children = Vec::with_capacity(clients);
    for _ in 0..clients {
        let child = tokio::process::Command::new(spawn.program)
            .arg("hotspot-worker")
            .args(spawn.flags)
            .args([
                "--namespace",
                spawn.namespace,
                "--keep",
                "--target",
                spawn.target,
            ])
            .arg("--start-ms")
            .arg(start_ms.to_string())
            .arg("--duration")
            .arg(config.duration.as_secs_f64().to_string())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::Invalid(format!("cannot start a worker process: {e}")))?;
        children.push(child);
    }
    let mut total = WorkerTally::default();
    // The workers' CPU time, while every one of them reports it.
    let mut cpu = Some(Duration::ZERO);
    for child in children {
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| Error::Invalid(format!("a worker process failed: {e}")))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let tally = text
            .lines()
            .last()
            .and_then(WorkerTally::parse)
            .filter(|_| out.status.success())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "a worker process ended with {} and printed {text:?}",
                    out.status
                ))
            })?;
        total.committed += tally.committed;
        total.failed += tally.failed;
        total.attempts += tally.attempts;
        total.conflicts += tally.conflicts;
        cpu = cpu.zip(tally.cpu).map(|(sum, one)| sum + one);
    }
    bar.finish_and_clear();
    let found = match &raw {
        Some(raw) => raw.total(spawn.namespace).await?,
        None => votes(&first, target).await?,
    };
    #[allow(clippy::cast_precision_loss)]
    let (per_sec, conflict_pct, writes_per_vote) = (
        total.committed as f64 / config.duration.as_secs_f64(),
        (total.attempts > 0).then(|| 100.0 * total.conflicts as f64 / total.attempts as f64),
        // A raw increment is one write; the mapper counts its own.
        if raw.is_some() {
            Some(1.0)
        } else {
            (total.committed > 0)
                .then(|| (total.attempts - total.conflicts) as f64 / total.committed as f64)
        },
    );
    Ok(HotspotRow {
        clients,
        target: String::new(),
        committed: total.committed,
        failed: total.failed,
        per_sec,
        ratio_to_raw: None,
        conflict_pct,
        writes_per_vote,
        total_matches: u64::try_from(found).ok() == Some(total.committed),
        rss_mib: None,
        allocs_per_vote: None,
        cpu_us_per_vote: per_vote_us(cpu, total.committed),
        node_us_per_vote: Vec::new(),
    })
}

/// One worker process of `hotspot` with processes: one client with its own `Mapper` (or
/// the raw counter) on `backend` under `namespace`, voting on `target` (a name in
/// [`TARGETS`]) from `start_ms` (milliseconds since the Unix epoch) for `duration`.
pub async fn worker(
    backend: &Backend,
    namespace: &str,
    target: &str,
    start_ms: u64,
    duration: Duration,
) -> Result<WorkerTally> {
    let Some(&(_, target)) = TARGETS.iter().find(|(name, _)| *name == target) else {
        return Err(Error::Invalid(format!("no hot-spot target `{target}`")));
    };
    // The raw counter, or a `Mapper` of this process's own.
    let voter =
        if target == Target::Raw {
            Voter::Raw(Raw::connect(backend, namespace).await?.ok_or_else(|| {
                Error::Invalid("the raw target needs Redis or PostgreSQL".to_owned())
            })?)
        } else {
            let store = backend.connect(namespace).await?;
            Voter::Mapped(Box::new(target_mapper(
                store,
                target,
                RetryPolicy::default(),
            )))
        };
    tokio::time::sleep(Duration::from_millis(start_ms.saturating_sub(now_ms()))).await;
    let cpu_before = cpu_time();
    let start = Instant::now();
    let mut tally = WorkerTally::default();
    while start.elapsed() < duration {
        let outcome = match &voter {
            Voter::Raw(raw) => raw.increment(namespace).await,
            Voter::Mapped(db) => vote(db, target).await,
        };
        match outcome {
            Ok(()) => tally.committed += 1,
            Err(e) => {
                tracing::debug!(error = %e, "hot-spot vote failed");
                tally.failed += 1;
            }
        }
    }
    tally.cpu = cpu_since(cpu_before);
    if let Voter::Mapped(db) = &voter {
        let m = db.metrics().snapshot();
        tally.attempts = m.attempts;
        tally.conflicts = m.conflicts;
    }
    Ok(tally)
}

/// What a worker process votes through.
enum Voter {
    Raw(Raw),
    Mapped(Box<Mapper<Arc<dyn DocumentStore>>>),
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
