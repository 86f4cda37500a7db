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
//!   and shared reads off.
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

use crate::backend::Backend;
use crate::model::{FoldFnQuestion, NaiveQuestion, Question};
use crate::progress::Progress;
use crate::server_time::{self, ServerClock};
use autoshard::prelude::*;
use futures::future::BoxFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The hot-spot workload.
#[derive(Clone, Debug)]
pub struct HotspotConfig {
    /// The numbers of concurrent clients to try.
    pub clients: Vec<usize>,
    /// How long each client count runs, per target.
    pub duration: Duration,
    /// Retry policy of the naive and autoshard votes.
    pub retry: RetryPolicy,
    /// Run only the targets whose name contains one of these (all when empty).
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
    /// On a Redis Cluster, each master's CPU time per committed vote in microseconds
    /// (its main thread's, `INFO cpu`; masters in [`ServerClock::nodes`] order; see
    /// [`crate::server_time`]); empty elsewhere.
    pub node_us_per_vote: Vec<f64>,
}

/// How a vote reaches the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// `update`: load the question, vote, save.
    Update,
    /// `apply`: vote without loading the votes.
    Apply,
}

/// The fold of the sharded votes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoldKind {
    /// `fold = sum`: merged by the store.
    BuiltIn,
    /// A `#[shard_fold]` function: read and compare-and-set.
    Function,
}

/// One thing the clients hammer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The raw store: `HINCRBY` on a plain Redis hash, a slotted counter on PostgreSQL.
    Raw,
    /// `update` of [`NaiveQuestion`].
    Naive,
    /// A sharded question.
    Sharded {
        /// How votes are written.
        write: Write,
        /// The votes' fold.
        fold: FoldKind,
        /// One `Mapper` per client instead of one shared by all.
        mapper_per_client: bool,
        /// Coalesced saves and shared reads (the default) or neither.
        sharing: bool,
    },
}

const fn sharded(write: Write, fold: FoldKind, mapper_per_client: bool, sharing: bool) -> Target {
    Target::Sharded {
        write,
        fold,
        mapper_per_client,
        sharing,
    }
}

/// Every target, by name, in the order they run.
pub const TARGETS: [(&str, Target); 8] = [
    ("raw HINCRBY", Target::Raw),
    ("naive update", Target::Naive),
    (
        "update sum",
        sharded(Write::Update, FoldKind::BuiltIn, false, true),
    ),
    (
        "update sum unshared",
        sharded(Write::Update, FoldKind::BuiltIn, false, false),
    ),
    (
        "update fold-fn",
        sharded(Write::Update, FoldKind::Function, false, true),
    ),
    (
        "apply sum",
        sharded(Write::Apply, FoldKind::BuiltIn, false, true),
    ),
    (
        "update sum mapper/client",
        sharded(Write::Update, FoldKind::BuiltIn, true, true),
    ),
    (
        "apply sum mapper/client",
        sharded(Write::Apply, FoldKind::BuiltIn, true, true),
    ),
];

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
    let chosen: Vec<(&str, Target)> = TARGETS
        .iter()
        .filter_map(|&(name, target)| match (target, &raw) {
            (Target::Raw, None) => None,
            (Target::Raw, Some(raw)) => Some((raw.name(), target)),
            _ => Some((name, target)),
        })
        .filter(|(name, _)| {
            config.only.is_empty() || config.only.iter().any(|o| name.contains(o.as_str()))
        })
        .collect();
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

/// The name of `target` in [`TARGETS`].
fn name_of(target: Target) -> &'static str {
    TARGETS
        .iter()
        .find(|(_, t)| *t == target)
        .map_or("", |(name, _)| name)
}

/// How to start a worker process.
struct Spawn<'a> {
    program: &'a std::path::Path,
    flags: &'a [String],
    namespace: &'a str,
    target: &'static str,
}

/// What one worker process did: votes committed and failed, attempts and conflicts of
/// its `Mapper`.
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
}

impl WorkerTally {
    /// The line a worker prints.
    #[must_use]
    pub fn line(&self) -> String {
        format!(
            "{} {} {} {}",
            self.committed, self.failed, self.attempts, self.conflicts
        )
    }

    fn parse(line: &str) -> Option<Self> {
        let mut n = line.split_whitespace().map(str::parse::<u64>);
        let tally = WorkerTally {
            committed: n.next()?.ok()?,
            failed: n.next()?.ok()?,
            attempts: n.next()?.ok()?,
            conflicts: n.next()?.ok()?,
        };
        n.next().is_none().then_some(tally)
    }
}

/// Runs `clients` worker processes of `target` (inserted here first; `raw`: the raw
/// counter, for the raw target), each voting from the same moment for the configured
/// duration, and sums what they report.
async fn run_processes(
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
            Voter::Mapped(Box::new(
                Mapper::new(store).with_retry(RetryPolicy::default()),
            ))
        };
    tokio::time::sleep(Duration::from_millis(start_ms.saturating_sub(now_ms()))).await;
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
    let (per_client, sharing) = match target {
        Target::Sharded {
            mapper_per_client,
            sharing,
            ..
        } => (mapper_per_client, sharing),
        Target::Raw | Target::Naive => (false, true),
    };
    let mapper = || {
        Mapper::new(store.clone())
            .with_retry(config.retry)
            .with_coalescing(sharing)
            .with_shared_reads(sharing)
    };
    let first = mapper();
    insert(&first, target).await?;
    let mappers: Vec<_> = if per_client {
        (0..clients).map(|_| mapper()).collect()
    } else {
        vec![first.clone()]
    };
    let ops: Vec<Op> = (0..clients)
        .map(|i| {
            let db = mappers[i % mappers.len()].clone();
            let op: Op = Arc::new(move || {
                let db = db.clone();
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
        node_us_per_vote: Vec::new(),
    })
}

/// The question every client votes on.
const ID: u64 = 1;

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
}

/// Runs each of `ops` in a closed-loop task for the configured duration, counting the
/// process's allocations meanwhile when the configuration can.
async fn hammer(ops: Vec<Op>, config: &HotspotConfig, bar: &indicatif::ProgressBar) -> Hammered {
    let duration = config.duration;
    let allocations_before = config.allocations.map(|count| count());
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
    }
}

/// The raw store's counter: the baseline of the ratios.
#[derive(Clone)]
enum Raw {
    Redis(RawRedis),
    Postgres(RawPostgres),
}

impl Raw {
    /// The raw counter of `backend` (its PostgreSQL table in `namespace`'s schema); `None`
    /// on the embedded stores.
    async fn connect(backend: &Backend, namespace: &str) -> Result<Option<Raw>> {
        Ok(match backend {
            Backend::Redis(url) => Some(Raw::Redis(RawRedis::connect_standalone(url).await?)),
            Backend::RedisCluster(urls) => Some(Raw::Redis(RawRedis::connect_cluster(urls).await?)),
            Backend::Postgres(url) => Some(Raw::Postgres(
                RawPostgres::connect(url, &crate::backend::schema_of(namespace)).await?,
            )),
            Backend::Memory | Backend::Modelled(_) => None,
        })
    }

    fn name(&self) -> &'static str {
        match self {
            Raw::Redis(_) => "raw HINCRBY",
            Raw::Postgres(_) => "raw slotted counter",
        }
    }

    async fn increment(&self, key: &str) -> Result<()> {
        match self {
            Raw::Redis(r) => r.hincrby(key).await,
            Raw::Postgres(p) => p.increment(key).await,
        }
    }

    async fn total(&self, key: &str) -> Result<i64> {
        match self {
            Raw::Redis(r) => r.hget(key).await,
            Raw::Postgres(p) => p.total(key).await,
        }
    }
}

/// The slotted counter on PostgreSQL (GitHub's and PlanetScale's pattern for a hot
/// counter row): 10 rows per counter, each increment an upsert of one picked at random
/// in its own transaction, the total their `SUM`. A pool as large as the store's.
#[derive(Clone)]
struct RawPostgres {
    pool: deadpool_postgres::Pool,
    increment: Arc<str>,
    total: Arc<str>,
}

impl RawPostgres {
    const SLOTS: i32 = 10;

    async fn connect(url: &str, schema: &str) -> Result<RawPostgres> {
        let config = crate::backend::postgres_config(url)?;
        let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(16)
            .build()
            .map_err(|e| Error::backend("PostgreSQL pool", e.to_string()))?;
        let table = format!("\"{schema}\".slotted_counter");
        let raw = RawPostgres {
            pool,
            increment: format!(
                "INSERT INTO {table} (counter, slot, n) VALUES ($1, $2, 1) \
                 ON CONFLICT (counter, slot) DO UPDATE SET n = {table}.n + 1"
            )
            .into(),
            total: format!("SELECT coalesce(sum(n), 0)::bigint FROM {table} WHERE counter = $1")
                .into(),
        };
        let client = raw.client().await?;
        client
            .batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
                 CREATE TABLE IF NOT EXISTS {table} (
                     counter text, slot integer, n bigint NOT NULL,
                     PRIMARY KEY (counter, slot)
                 );"
            ))
            .await
            .map_err(fail_pg)?;
        Ok(raw)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool
            .get()
            .await
            .map_err(|e| Error::backend("cannot reach PostgreSQL", e.to_string()))
    }

    async fn increment(&self, key: &str) -> Result<()> {
        let slot = rand::random_range(0..Self::SLOTS);
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&self.increment)
            .await
            .map_err(fail_pg)?;
        client
            .execute(&statement, &[&key, &slot])
            .await
            .map_err(fail_pg)?;
        Ok(())
    }

    async fn total(&self, key: &str) -> Result<i64> {
        let client = self.client().await?;
        let row = client
            .query_one(&*self.total, &[&key])
            .await
            .map_err(fail_pg)?;
        Ok(row.get(0))
    }
}

fn fail_pg(e: tokio_postgres::Error) -> Error {
    Error::backend("raw PostgreSQL statement failed", e)
}

/// Plain Redis connections for the `HINCRBY` baseline: on a standalone server two
/// multiplexed connections used in turn (the store's default pool), on a cluster one
/// cluster connection.
#[derive(Clone)]
enum RawRedis {
    Standalone(Arc<[redis::aio::ConnectionManager; 2]>, Arc<AtomicU64>),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl RawRedis {
    async fn connect_standalone(url: &str) -> Result<RawRedis> {
        // The URL may hold a password: messages name the address only.
        let target = crate::backend::redis_target(url);
        let fail =
            |e: redis::RedisError| Error::backend(format!("cannot reach Redis at {target}"), e);
        let client = redis::Client::open(url).map_err(fail)?;
        let a = client.get_connection_manager().await.map_err(fail)?;
        let b = client.get_connection_manager().await.map_err(fail)?;
        Ok(RawRedis::Standalone(Arc::new([a, b]), Arc::default()))
    }

    async fn connect_cluster(urls: &[String]) -> Result<RawRedis> {
        let fail = |e: redis::RedisError| {
            Error::backend(
                format!(
                    "cannot reach Redis Cluster at {}",
                    urls.iter()
                        .map(|u| crate::backend::redis_target(u))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                e,
            )
        };
        let client = redis::cluster::ClusterClient::new(urls.to_vec()).map_err(fail)?;
        Ok(RawRedis::Cluster(
            client.get_async_connection().await.map_err(fail)?,
        ))
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let fail = |e: redis::RedisError| Error::backend("raw Redis command failed", e);
        match self {
            RawRedis::Standalone(conns, next) => {
                let i = usize::from(next.fetch_add(1, Ordering::Relaxed) % 2 == 1);
                let mut conn = conns[i].clone();
                cmd.query_async(&mut conn).await.map_err(fail)
            }
            RawRedis::Cluster(conn) => cmd.query_async(&mut conn.clone()).await.map_err(fail),
        }
    }

    async fn hincrby(&self, key: &str) -> Result<()> {
        let _: i64 = self
            .query(redis::cmd("HINCRBY").arg(key).arg("votes").arg(1))
            .await?;
        Ok(())
    }

    async fn hget(&self, key: &str) -> Result<i64> {
        let found: Option<i64> = self.query(redis::cmd("HGET").arg(key).arg("votes")).await?;
        Ok(found.unwrap_or(0))
    }
}
