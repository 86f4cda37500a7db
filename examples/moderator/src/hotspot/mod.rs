//! The hot-spot mode: `C` concurrent clients vote on ONE question as fast as they can
//! (closed loop: each sends its next vote when the last one answered), for each `C` in
//! one run, on the same store:
//! - the raw store: on Redis `HINCRBY` (one round trip, no read, no transaction), on
//!   PostgreSQL the slotted counter people write by hand (`INSERT ... ON CONFLICT DO
//!   UPDATE SET n = n + 1` on one of 10 rows picked at random, read back with `SUM`);
//! - naive: `update` of an unsharded question (read, then compare-and-set);
//! - autoshard variants ([`TARGETS`]): `update` (load, vote, save) or `apply` (vote
//!   without a load), with the built-in `sum` fold (the store merges) or a
//!   `#[shard_fold]` function (read and compare-and-set on a shard), through one shared
//!   `Mapper` (its saves coalesce and its loads share reads) or one `Mapper` per client
//!   (as if each client were its own process), and one shared `Mapper` with coalescing
//!   and shared reads off; and `update` through one `Mapper` per client with a read
//!   cache of [`CACHE_STALENESS`] (`cached`: a load may answer what the store held that
//!   long ago, with the client's own votes always in it).
//!
//! With `processes`, the raw store, naive and autoshard targets with one `Mapper` each
//! also run as `C` operating-system processes, each one client with its own `Mapper` and
//! connections (rows `..., processes`): the deployment of several application servers on
//! one store. Every process starts voting at the same moment, the total read back must
//! equal the sum of what they committed, and the ratios of these rows are to the raw
//! command sent by as many processes.
//!
//! The ratio of each target's throughput to the raw store's says what the mapper costs on
//! a hot spot. On the embedded stores there is no raw baseline, and the ratio is left out.
//! Each row also reports the process's resident memory after it ran.
//!
//! Files: `mod.rs`, the experiment (targets, clients, rows); `processes.rs`, the runs with
//! one operating-system process per client; `raw.rs`, the raw store's counter the ratios
//! are to.

mod processes;
mod raw;
mod targets;

pub use processes::{WorkerTally, worker};
pub use targets::{CACHE_STALENESS, FoldKind, TARGETS, Target, Write};

use crate::backend::Backend;
use crate::model::{FoldFnQuestion, NaiveQuestion, Question};
use crate::progress::Progress;
use crate::server_time::{self, ServerClock};
use autoshard::ReadCache;
use autoshard::prelude::*;
use futures::future::BoxFuture;
use processes::{Spawn, run_processes};
use raw::Raw;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use targets::{chosen, name_of};

/// The hot-spot workload.
#[derive(Clone, Debug)]
pub struct HotspotConfig {
    /// The numbers of concurrent clients to try.
    pub clients: Vec<usize>,
    /// How long each client count runs, per target.
    pub duration: Duration,
    /// Retry policy of the naive and autoshard votes.
    pub retry: RetryPolicy,
    /// Run only the targets whose name contains one of these, or is the one after `=` (all
    /// when empty).
    pub only: Vec<String>,
    /// Also run the raw, naive and `mapper/client` targets as one process per client, through
    /// this program (the path of the `moderator` binary), on a store other processes can
    /// reach.
    pub processes: Option<std::path::PathBuf>,
    /// The process's heap allocations so far (from a counting global allocator): with
    /// it, each in-process row reports its allocations per committed vote.
    pub allocations: Option<fn() -> u64>,
}

/// [`HotspotConfig::default`]'s client counts (the CLI's default too).
pub const DEFAULT_CLIENTS: &str = "1,8,32,64";
/// [`HotspotConfig::default`]'s seconds per client count and target.
pub const DEFAULT_SECONDS: f64 = 3.0;

impl Default for HotspotConfig {
    fn default() -> Self {
        HotspotConfig {
            clients: DEFAULT_CLIENTS
                .split(',')
                .filter_map(|c| c.parse().ok())
                .collect(),
            duration: Duration::from_secs_f64(DEFAULT_SECONDS),
            retry: RetryPolicy::default(),
            only: Vec::new(),
            processes: None,
            allocations: None,
        }
    }
}

/// What one target did with `clients` clients.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HotspotRow {
    /// Concurrent clients.
    pub clients: usize,
    /// The target's name (see [`TARGETS`]).
    pub target: String,
    /// Votes that committed.
    pub committed: u64,
    /// Votes that failed (contention after retries, or a store error).
    pub failed: u64,
    /// Committed votes per second.
    pub per_sec: f64,
    /// `per_sec` divided by the raw store's with the same clients (Redis and PostgreSQL).
    pub ratio_to_raw: Option<f64>,
    /// Share of transaction attempts that hit a conflict, in % (`None` for the raw
    /// store, which has no optimistic transaction).
    pub conflict_pct: Option<f64>,
    /// Store writes per committed vote (below 1 when saves coalesce).
    pub writes_per_vote: Option<f64>,
    /// Whether the counter read back equals `committed`.
    pub total_matches: bool,
    /// Resident memory of this process after the row, in MiB (Linux; `None` elsewhere).
    pub rss_mib: Option<f64>,
    /// Heap allocations of this process per committed vote while the clients voted
    /// (with [`HotspotConfig::allocations`]; `None` for rows of worker processes).
    pub allocs_per_vote: Option<f64>,
    /// CPU time of the clients per committed vote while they voted, in microseconds: this
    /// process's (all its threads, user and system) for an in-process row, the sum of
    /// every worker's own for a row of worker processes (Linux, from `/proc/self/stat`;
    /// `None` elsewhere). The client's side of a vote, beside the server's.
    pub cpu_us_per_vote: Option<f64>,
    /// On a Redis Cluster, each master's CPU time per committed vote in microseconds
    /// (its main thread's, `INFO cpu`; masters in [`ServerClock::nodes`] order; see
    /// [`crate::server_time`]); empty elsewhere.
    pub node_us_per_vote: Vec<f64>,
}

/// Runs every client count against every target.
pub async fn run(
    backend: &Backend,
    namespace: &str,
    config: &HotspotConfig,
    progress: Progress,
) -> Result<Vec<HotspotRow>> {
    let raw = Raw::connect(backend, namespace).await?;
    let clock = ServerClock::of(backend).await?;
    let usec = || server_time::usec(clock.as_ref());
    let chosen = chosen(raw.as_ref(), &config.only)?;
    let mut rows = Vec::new();
    for &clients in &config.clients {
        let mut raw_rate = None;
        for &(name, target) in &chosen {
            let bar = progress.bar(
                secs(config.duration),
                &format!("{clients:>2} clients: {name}"),
            );
            let ns = format!(
                "{namespace}-c{clients}-{}",
                name.replace([' ', ',', '/'], "_")
            );
            let before = usec().await?;
            let row = match target {
                Target::Raw => {
                    let Some(raw) = &raw else { continue };
                    run_raw(raw, &ns, clients, config, &bar).await?
                }
                Target::Naive | Target::Sharded { .. } => {
                    let store = backend.connect(&ns).await?;
                    run_mapped(store, target, clients, config, &bar).await?
                }
            };
            if target == Target::Raw {
                raw_rate = Some(row.per_sec);
            }
            rows.push(HotspotRow {
                target: name.into(),
                ratio_to_raw: raw_rate.map(|raw| row.per_sec / raw),
                node_us_per_vote: server_time::per_vote(&before, &usec().await?, row.committed),
                ..row
            });
        }
        let (Some(program), Some(flags)) = (&config.processes, backend.flags()) else {
            continue;
        };
        // With processes, the ratio is to the raw command sent by as many processes.
        let mut raw_rate = None;
        for &(name, target) in &chosen {
            let per_client = matches!(
                target,
                Target::Raw
                    | Target::Naive
                    | Target::Sharded {
                        mapper_per_client: true,
                        ..
                    }
            );
            if !per_client {
                continue;
            }
            let name = format!("{}, processes", name.trim_end_matches(" mapper/client"));
            let bar = progress.bar(
                secs(config.duration),
                &format!("{clients:>2} processes: {name}"),
            );
            let ns = format!(
                "{namespace}-p{clients}-{}",
                name.replace([' ', ',', '/'], "_")
            );
            let store = backend.connect(&ns).await?;
            let spawn = Spawn {
                program,
                flags: &flags,
                namespace: &ns,
                target: name_of(target),
            };
            let raw = match target {
                Target::Raw => Raw::connect(backend, &ns).await?,
                _ => None,
            };
            let before = usec().await?;
            let row = run_processes(store, raw, target, clients, config, &spawn, &bar).await?;
            if target == Target::Raw {
                raw_rate = Some(row.per_sec);
            }
            rows.push(HotspotRow {
                target: name,
                ratio_to_raw: raw_rate.map(|raw| row.per_sec / raw),
                node_us_per_vote: server_time::per_vote(&before, &usec().await?, row.committed),
                ..row
            });
        }
    }
    Ok(rows)
}

async fn run_raw(
    raw: &Raw,
    key: &str,
    clients: usize,
    config: &HotspotConfig,
    bar: &indicatif::ProgressBar,
) -> Result<HotspotRow> {
    let (r, k) = (raw.clone(), key.to_owned());
    let op: Op = Arc::new(move || {
        let (r, k) = (r.clone(), k.clone());
        Box::pin(async move { r.increment(&k).await })
    });
    let Hammered {
        committed,
        failed,
        per_sec,
        allocs_per_vote,
        cpu_us_per_vote,
    } = hammer(vec![op; clients], config, bar).await;
    let found = raw.total(key).await?;
    Ok(HotspotRow {
        clients,
        target: String::new(),
        committed,
        failed,
        per_sec,
        ratio_to_raw: None,
        conflict_pct: None,
        writes_per_vote: Some(1.0),
        total_matches: u64::try_from(found).ok() == Some(committed),
        rss_mib: rss_mib(),
        allocs_per_vote,
        cpu_us_per_vote,
        node_us_per_vote: Vec::new(),
    })
}

async fn run_mapped(
    store: Arc<dyn DocumentStore>,
    target: Target,
    clients: usize,
    config: &HotspotConfig,
    bar: &indicatif::ProgressBar,
) -> Result<HotspotRow> {
    let per_client = matches!(
        target,
        Target::Sharded {
            mapper_per_client: true,
            ..
        }
    );
    let mapper = || target_mapper(store.clone(), target, config.retry);
    // Inserts the question and reads the total back, never through a read cache.
    let first = Mapper::new(store.clone()).with_retry(config.retry);
    insert(&first, target).await?;
    let mappers: Vec<_> = if per_client {
        (0..clients).map(|_| mapper()).collect()
    } else {
        vec![mapper()]
    };
    let ops: Vec<Op> = (0..clients)
        .map(|i| {
            // One handle per client, shared by its votes: a vote clones an `Arc`, as a
            // raw vote clones its connection, not the mapper's fields.
            let db = Arc::new(mappers[i % mappers.len()].clone());
            let op: Op = Arc::new(move || {
                let db = Arc::clone(&db);
                Box::pin(async move { vote(&db, target).await })
            });
            op
        })
        .collect();
    let Hammered {
        committed,
        failed,
        per_sec,
        allocs_per_vote,
        cpu_us_per_vote,
    } = hammer(ops, config, bar).await;
    let (mut attempts, mut conflicts) = (0, 0);
    for db in &mappers {
        let m = db.metrics().snapshot();
        attempts += m.attempts;
        conflicts += m.conflicts;
    }
    let found = votes(&first, target).await?;
    #[allow(clippy::cast_precision_loss)]
    let (conflict_pct, writes_per_vote) = (
        (attempts > 0).then(|| 100.0 * conflicts as f64 / attempts as f64),
        (committed > 0).then(|| (attempts - conflicts) as f64 / committed as f64),
    );
    Ok(HotspotRow {
        clients,
        target: String::new(),
        committed,
        failed,
        per_sec,
        ratio_to_raw: None,
        conflict_pct,
        writes_per_vote,
        total_matches: u64::try_from(found).ok() == Some(committed),
        rss_mib: rss_mib(),
        allocs_per_vote,
        cpu_us_per_vote,
        node_us_per_vote: Vec::new(),
    })
}

/// The question every client votes on.
const ID: u64 = 1;

/// The `Mapper` a client of `target` votes through: coalescing and shared reads as the
/// target says, and a read cache of [`CACHE_STALENESS`] of its own for a cached one.
fn target_mapper(
    store: Arc<dyn DocumentStore>,
    target: Target,
    retry: RetryPolicy,
) -> Mapper<Arc<dyn DocumentStore>> {
    let mapper = Mapper::new(store).with_retry(retry);
    match target {
        Target::Sharded {
            sharing, cached, ..
        } => {
            let mapper = mapper.with_coalescing(sharing).with_shared_reads(sharing);
            if cached {
                mapper.with_read_cache(ReadCache::new(CACHE_STALENESS))
            } else {
                mapper
            }
        }
        Target::Raw | Target::Naive => mapper,
    }
}

async fn insert(db: &Mapper<Arc<dyn DocumentStore>>, target: Target) -> Result<()> {
    let (text, author) = ("Hot?".to_owned(), "candidate".to_owned());
    match target {
        Target::Raw => Ok(()),
        Target::Naive => {
            db.insert(&mut NaiveQuestion {
                id: ID,
                text,
                author,
                votes: 0,
            })
            .await
        }
        Target::Sharded {
            fold: FoldKind::BuiltIn,
            ..
        } => db.insert(&mut Question::new(ID, text, author, 0)).await,
        Target::Sharded {
            fold: FoldKind::Function,
            ..
        } => db.insert(&mut FoldFnQuestion::new(ID, text, 0)).await,
    }
}

async fn vote(db: &Mapper<Arc<dyn DocumentStore>>, target: Target) -> Result<()> {
    match target {
        Target::Raw => Ok(()),
        Target::Naive => db.update(&ID, NaiveQuestion::vote_up).await,
        Target::Sharded { write, fold, .. } => match (write, fold) {
            (Write::Update, FoldKind::BuiltIn) => db.update(&ID, Question::vote_up).await,
            (Write::Apply, FoldKind::BuiltIn) => db.apply(&ID, Question::vote_up).await,
            (Write::Update, FoldKind::Function) => db.update(&ID, FoldFnQuestion::vote_up).await,
            (Write::Apply, FoldKind::Function) => db.apply(&ID, FoldFnQuestion::vote_up).await,
        },
    }
}

async fn votes(db: &Mapper<Arc<dyn DocumentStore>>, target: Target) -> Result<i64> {
    Ok(match target {
        Target::Raw => 0,
        Target::Naive => db.load::<NaiveQuestion>(&ID).await?.votes,
        Target::Sharded {
            fold: FoldKind::BuiltIn,
            ..
        } => db.load::<Question>(&ID).await?.votes,
        Target::Sharded {
            fold: FoldKind::Function,
            ..
        } => db.load::<FoldFnQuestion>(&ID).await?.votes,
    })
}

/// Resident memory of this process in MiB (`VmRSS` of `/proc/self/status`).
#[must_use]
pub fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// CPU time this process has used so far, all its threads, user and system (Linux:
/// `utime` and `stime` of `/proc/self/stat`, in the 1/100 s ticks of that file; `None`
/// elsewhere).
#[must_use]
pub fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (in parentheses, which may hold spaces): the
    // state is field 3 of the file, `utime` field 14 and `stime` field 15.
    let mut fields = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis(10 * (utime + stime)))
}

/// The CPU time this process used since [`cpu_time`] answered `before`.
fn cpu_since(before: Option<Duration>) -> Option<Duration> {
    cpu_time()
        .zip(before)
        .map(|(now, before)| now.saturating_sub(before))
}

/// `cpu` per committed vote, in microseconds.
#[allow(clippy::cast_precision_loss)]
fn per_vote_us(cpu: Option<Duration>, committed: u64) -> Option<f64> {
    cpu.filter(|_| committed > 0)
        .map(|cpu| cpu.as_secs_f64() * 1e6 / committed as f64)
}

type Op = Arc<dyn Fn() -> BoxFuture<'static, Result<()>> + Send + Sync>;

fn secs(d: Duration) -> u64 {
    d.as_secs().max(1)
}

/// What [`hammer`] measured.
struct Hammered {
    committed: u64,
    failed: u64,
    per_sec: f64,
    allocs_per_vote: Option<f64>,
    cpu_us_per_vote: Option<f64>,
}

/// Runs each of `ops` in a closed-loop task for the configured duration, measuring the
/// process's CPU time meanwhile and counting its allocations when the configuration can.
async fn hammer(ops: Vec<Op>, config: &HotspotConfig, bar: &indicatif::ProgressBar) -> Hammered {
    let duration = config.duration;
    let allocations_before = config.allocations.map(|count| count());
    let cpu_before = cpu_time();
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for op in ops {
        let (ok, failed) = (ok.clone(), failed.clone());
        tasks.spawn(async move {
            while start.elapsed() < duration {
                match op().await {
                    Ok(()) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        tracing::debug!(error = %e, "hot-spot vote failed");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        });
    }
    let ticker = {
        let bar = bar.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                bar.inc(1);
            }
        })
    };
    while tasks.join_next().await.is_some() {}
    let cpu = cpu_since(cpu_before);
    let allocations = config
        .allocations
        .zip(allocations_before)
        .map(|(count, before)| count().saturating_sub(before));
    ticker.abort();
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let committed = ok.load(Ordering::Relaxed);
    #[allow(clippy::cast_precision_loss)]
    Hammered {
        committed,
        failed: failed.load(Ordering::Relaxed),
        per_sec: committed as f64 / secs,
        allocs_per_vote: allocations
            .filter(|_| committed > 0)
            .map(|n| n as f64 / committed as f64),
        cpu_us_per_vote: per_vote_us(cpu, committed),
    }
}
