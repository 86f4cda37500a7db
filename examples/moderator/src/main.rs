//! `moderator`: the voting app (default), the paper's benchmark (`bench`), the hot-spot
//! mode (`hotspot`), one client's latencies (`latency`) and a read-mostly page with and
//! without a read cache (`leaderboard`), on the embedded store, Redis or PostgreSQL.

use autoshard::Error;
use autoshard_moderator::adaptive::{self, AdaptiveConfig};
use autoshard_moderator::app::{self, AppConfig};
use autoshard_moderator::backend::{Backend, ModelledLatency};
use autoshard_moderator::bench::{self, BenchConfig};
use autoshard_moderator::hotspot::{self, HotspotConfig};
use autoshard_moderator::latency;
use autoshard_moderator::leaderboard::{self, LeaderboardConfig};
use autoshard_moderator::progress::Progress;
use autoshard_moderator::{chart, report};
use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// A Google-Moderator-style voting app on autoshard, and the AutoShard paper's experiment.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Seed questions, let simulated users vote and respond, print the checked leaderboard
    /// (the default).
    App(AppArgs),
    /// The paper's experiment: votes at a fixed rate over 16 questions, three strategies without and with retries.
    Bench(BenchArgs),
    /// C clients on ONE question: naive vs autoshard variants vs the raw store (HINCRBY, or a slotted counter on PostgreSQL).
    Hotspot(HotspotArgs),
    /// One client on one question: median latency of loads and votes, and their ratios.
    Latency(LatencyArgs),
    /// Readers showing every question's votes beside writers voting, without and with a read cache.
    Leaderboard(LeaderboardArgs),
}

/// Where to run.
#[derive(Args, Debug, Clone, Default)]
struct StoreArgs {
    /// Run on the Redis server at this URL (redis://HOST:PORT/).
    #[arg(long, value_name = "URL", conflicts_with_all = ["redis_cluster", "postgres"])]
    redis: Option<String>,
    /// Run on the Redis Cluster reached through these node URLs.
    #[arg(long, value_name = "URL", num_args = 1.., conflicts_with = "postgres")]
    redis_cluster: Option<Vec<String>>,
    /// Run on the PostgreSQL database at this URL
    /// (postgres://USER:PASSWORD@HOST:PORT/DBNAME), in a schema of the run's own.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// Prefix of every key written on Redis, or the schema on PostgreSQL (default: a
    /// fresh one per run).
    #[arg(long)]
    namespace: Option<String>,
}

#[derive(Args, Debug, Clone)]
struct AppArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Questions to seed.
    #[arg(long, default_value_t = 16)]
    questions: u64,
    /// Simulated users, voting and responding concurrently.
    #[arg(long, default_value_t = 300)]
    users: u64,
    /// Votes per user.
    #[arg(long, default_value_t = 20)]
    votes: u64,
    /// Responses per user.
    #[arg(long, default_value_t = 1)]
    responses: u64,
}

/// The modelled latency of the embedded store.
#[derive(Args, Debug, Clone)]
struct ModelArgs {
    /// Modelled commit latency per entity group, in ms (0 with --read-ms 0: the plain
    /// in-memory store). Ignored on Redis and PostgreSQL.
    #[arg(long, default_value_t = 100)]
    commit_ms: u64,
    /// Modelled read latency, in ms. Ignored on Redis and PostgreSQL.
    #[arg(long, default_value_t = 20)]
    read_ms: u64,
}

#[derive(Args, Debug, Clone)]
struct BenchArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    model: ModelArgs,
    /// Votes per second, over all questions.
    #[arg(long, default_value_t = 75.0)]
    rate: f64,
    /// Seconds of arrivals per variant.
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Questions the votes are spread over.
    #[arg(long, default_value_t = 16)]
    questions: u64,
    /// Write the results to this file (.csv or .json).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Draw a chart like the paper's Figure 6 into this SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
struct HotspotArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    model: ModelArgs,
    /// Concurrent client counts to try.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,64")]
    clients: Vec<usize>,
    /// Seconds per client count and target (3 by default); with `--adaptive`, seconds the
    /// clients vote per variant (40 by default).
    #[arg(long)]
    duration: Option<f64>,
    /// Instead of the targets: one question under adaptive shard counts (starting at one
    /// shard) against fixed counts of 1, 10 and 40, sampled every second; the largest
    /// `--clients` count votes.
    #[arg(long)]
    adaptive: bool,
    /// Run only the targets whose name contains one of these (e.g. `--only raw,apply`).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Write the results to this file (.csv or .json).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Draw votes/s against clients, one line per target (with `--adaptive`: votes/s and
    /// shards over time), into this SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
struct LatencyArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Rounds (each times every operation once).
    #[arg(long, default_value_t = 2000)]
    rounds: usize,
}

#[derive(Args, Debug, Clone)]
struct LeaderboardArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    model: ModelArgs,
    /// Concurrent readers, each showing the leaderboard (every question's votes) in a loop.
    #[arg(long, default_value_t = 64)]
    readers: usize,
    /// Concurrent writers, each voting on random questions in a loop.
    #[arg(long, default_value_t = 8)]
    writers: usize,
    /// Questions on the leaderboard.
    #[arg(long, default_value_t = 16)]
    questions: u64,
    /// Seconds per variant.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// The read cache's staleness bound, in ms.
    #[arg(long, default_value_t = 100)]
    staleness_ms: u64,
    /// Write the results to this file (.csv or .json).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::App(AppArgs {
        store: StoreArgs::default(),
        questions: 16,
        users: 300,
        votes: 20,
        responses: 1,
    }));
    match run(command).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

/// Runs a command; `Ok(false)` when a check failed (results printed), `Err` when it could
/// not run.
async fn run(command: Command) -> Result<bool, String> {
    let progress = Progress::stderr();
    match command {
        Command::App(args) => {
            let backend = backend(&args.store, None)?;
            let store = backend
                .connect(&namespace(&args.store))
                .await
                .map_err(chain)?;
            println!("moderator on {backend}");
            let config = AppConfig {
                questions: args.questions,
                users: args.users,
                votes_per_user: args.votes,
                responses_per_user: args.responses,
                ..AppConfig::default()
            };
            let outcome = app::run(store, &config, progress).await.map_err(chain)?;
            print!("{}", report::leaderboard(&outcome));
            if outcome.is_exact() {
                println!(
                    "check: every question holds exactly the votes and responses that committed"
                );
            } else {
                println!("check FAILED: see MISMATCH above");
            }
            Ok(outcome.is_exact())
        }
        Command::Bench(args) => {
            let backend = backend(&args.store, Some(&args.model))?;
            let config = BenchConfig {
                rate: args.rate,
                duration: seconds(args.duration)?,
                questions: args.questions,
                ..BenchConfig::default()
            };
            if !(config.rate > 0.0 && config.rate.is_finite()) || config.questions == 0 {
                return Err("--rate must be positive and --questions at least 1".into());
            }
            let format = args.out.as_deref().map(report::Format::of).transpose()?;
            println!(
                "bench on {backend}: {} votes/s over {} questions for {} s per variant",
                config.rate,
                config.questions,
                config.duration.as_secs_f64()
            );
            let results = bench::run(&backend, &namespace(&args.store), &config, progress)
                .await
                .map_err(chain)?;
            print!("{}", report::bench_table(&results));
            if let (Some(path), Some(format)) = (&args.out, format) {
                let text = report::render(format, &results, || report::bench_csv(&results))?;
                write(path, &text)?;
            }
            if let Some(path) = &args.plot {
                let title = format!(
                    "{} votes/s over {} questions, {backend}",
                    config.rate, config.questions
                );
                write(path, &chart::figure6(&results, &title))?;
            }
            Ok(results.iter().all(bench::VariantResult::totals_match))
        }
        Command::Hotspot(args) => run_hotspot(args, progress).await,
        Command::Leaderboard(args) => run_leaderboard(args, progress).await,
        Command::Latency(args) => {
            let backend = backend(&args.store, None)?;
            println!("latency on {backend}: one client, {} rounds", args.rounds);
            let rows = latency::run(&backend, &namespace(&args.store), args.rounds.max(1))
                .await
                .map_err(chain)?;
            print!("{}", latency::table(&rows));
            Ok(true)
        }
    }
}

/// The `hotspot` command: runs, prints, and writes the table and chart asked for.
async fn run_hotspot(args: HotspotArgs, progress: Progress) -> Result<bool, String> {
    if args.adaptive {
        return run_adaptive(args, progress).await;
    }
    let backend = backend(&args.store, Some(&args.model))?;
    let config = HotspotConfig {
        clients: args.clients,
        duration: seconds(args.duration.unwrap_or(3.0))?,
        only: args.only,
        ..HotspotConfig::default()
    };
    let format = args.out.as_deref().map(report::Format::of).transpose()?;
    println!(
        "hot spot on {backend}: one question, {:?} clients, {} s each",
        config.clients,
        config.duration.as_secs_f64()
    );
    let rows = hotspot::run(&backend, &namespace(&args.store), &config, progress)
        .await
        .map_err(chain)?;
    print!("{}", report::hotspot_table(&rows));
    if let (Some(path), Some(format)) = (&args.out, format) {
        let text = report::render(format, &rows, || report::hotspot_csv(&rows))?;
        write(path, &text)?;
    }
    if let Some(path) = &args.plot {
        let title = format!("Hot spot on {backend}: committed votes/s, one question");
        write(path, &chart::hotspot(&rows, &title))?;
    }
    Ok(rows.iter().all(|r| r.total_matches))
}

/// The `leaderboard` command: runs, prints, and writes the table asked for.
async fn run_leaderboard(args: LeaderboardArgs, progress: Progress) -> Result<bool, String> {
    let backend = backend(&args.store, Some(&args.model))?;
    if args.questions == 0 || args.readers == 0 || args.staleness_ms == 0 {
        return Err("--questions, --readers and --staleness-ms must be at least 1".into());
    }
    let config = LeaderboardConfig {
        readers: args.readers,
        writers: args.writers,
        questions: args.questions,
        duration: seconds(args.duration)?,
        staleness: Duration::from_millis(args.staleness_ms),
    };
    let format = args.out.as_deref().map(report::Format::of).transpose()?;
    println!(
        "leaderboard on {backend}: {} readers of {} questions, {} writers, {} s per variant, \
         cache bound {} ms",
        config.readers,
        config.questions,
        config.writers,
        config.duration.as_secs_f64(),
        config.staleness.as_millis()
    );
    let rows = leaderboard::run(&backend, &namespace(&args.store), &config, progress)
        .await
        .map_err(chain)?;
    print!("{}", report::leaderboard_table(&rows));
    if let (Some(path), Some(format)) = (&args.out, format) {
        let text = report::render(format, &rows, || report::leaderboard_csv(&rows))?;
        write(path, &text)?;
    }
    Ok(rows.iter().all(|r| r.exact))
}

/// `hotspot --adaptive`: runs, prints, and writes the samples and chart asked for.
async fn run_adaptive(args: HotspotArgs, progress: Progress) -> Result<bool, String> {
    let backend = backend(&args.store, Some(&args.model))?;
    let defaults = AdaptiveConfig::default();
    let config = AdaptiveConfig {
        clients: args
            .clients
            .iter()
            .copied()
            .max()
            .unwrap_or(defaults.clients),
        load: args.duration.map_or(Ok(defaults.load), seconds)?,
        ..defaults
    };
    let format = args.out.as_deref().map(report::Format::of).transpose()?;
    println!(
        "adaptive shard counts on {backend}: one question, {} clients, {} s of votes per \
         variant (adaptive: then {} s idle); maintainer: {}",
        config.clients,
        config.load.as_secs_f64(),
        config.idle.as_secs_f64(),
        adaptive::POLICY
    );
    let (samples, summaries) = adaptive::run(&backend, &namespace(&args.store), &config, progress)
        .await
        .map_err(chain)?;
    print!("{}", report::adaptive_table(&summaries));
    if let (Some(path), Some(format)) = (&args.out, format) {
        let text = report::render(format, &samples, || report::adaptive_csv(&samples))?;
        write(path, &text)?;
    }
    if let Some(path) = &args.plot {
        let title = format!(
            "Adaptive shard counts on {backend}: {} clients on one question",
            config.clients
        );
        write(path, &chart::adaptive(&samples, &title))?;
    }
    Ok(summaries.iter().all(|s| s.total_matches))
}

/// The backend the flags ask for; `model` is the modelled latency of the embedded store
/// (the app runs on the plain one).
fn backend(store: &StoreArgs, model: Option<&ModelArgs>) -> Result<Backend, String> {
    let backend = match (&store.redis, &store.redis_cluster, &store.postgres, model) {
        (Some(url), _, _, _) => Backend::Redis(url.clone()),
        (None, Some(urls), _, _) => Backend::RedisCluster(urls.clone()),
        (None, None, Some(url), _) => Backend::Postgres(url.clone()),
        (None, None, None, Some(m)) if m.commit_ms > 0 || m.read_ms > 0 => {
            Backend::Modelled(ModelledLatency {
                commit: Duration::from_millis(m.commit_ms),
                read: Duration::from_millis(m.read_ms),
            })
        }
        (None, None, None, _) => Backend::Memory,
    };
    backend.validate().map_err(chain)?;
    Ok(backend)
}

fn namespace(store: &StoreArgs) -> String {
    store.namespace.clone().unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        format!("moderator-{secs}-{}", std::process::id())
    })
}

fn seconds(s: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("--duration {s}: expected a positive number of seconds"))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// An error with its chain of sources, on one line.
fn chain(e: Error) -> String {
    let e: Box<dyn std::error::Error> = Box::new(e);
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let cause = s.to_string();
        if !message.contains(&cause) {
            message.push_str(": ");
            message.push_str(&cause);
        }
        source = s.source();
    }
    message
}
