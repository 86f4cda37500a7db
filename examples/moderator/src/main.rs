//! `moderator`: the voting app (default: a simulation; `serve`: the web app, `load`: a
//! load generator against it), the paper's benchmark (`bench`), the hot-spot mode
//! (`hotspot`), one client's latencies (`latency`) and a read-mostly page with and
//! without a read cache (`leaderboard`), on the embedded store, Redis or PostgreSQL.

use autoshard::Error;
use autoshard_moderator::adaptive::{self, AdaptiveConfig};
use autoshard_moderator::app::{self, AppConfig};
use autoshard_moderator::backend::{self, Backend, ModelledLatency};
use autoshard_moderator::bench::{self, BenchConfig};
use autoshard_moderator::hotspot::{self, HotspotConfig};
use autoshard_moderator::latency;
use autoshard_moderator::leaderboard::{self, LeaderboardConfig};
use autoshard_moderator::load::{self, LoadConfig, LoadRow};
use autoshard_moderator::model::{Question, SingleQuestion};
use autoshard_moderator::progress::Progress;
use autoshard_moderator::web::{self, WebConfig};
use autoshard_moderator::{chart, report};
use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// With the feature `count-allocations`, every allocation is counted, and `hotspot`
/// reports allocations per vote.
#[cfg(feature = "count-allocations")]
#[global_allocator]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Heap allocations (and reallocations) of this process so far.
#[cfg(feature = "count-allocations")]
fn allocations() -> u64 {
    let stats = ALLOCATOR.stats();
    u64::try_from(stats.allocations + stats.reallocations).unwrap_or(u64::MAX)
}

/// A Google-Moderator-style voting app on autoshard, and the AutoShard paper's experiment.
///
/// Without a command it runs the voting app, with the options below.
#[derive(Parser, Debug)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    app: AppArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Seed questions, let simulated users vote and respond, print the checked leaderboard
    /// (the default).
    App(AppArgs),
    /// The voting app as a web page and a JSON API (axum), on the embedded store by
    /// default; on a server it keeps what it stores, under the namespace `moderator-web`
    /// unless --namespace says otherwise.
    Serve(ServeArgs),
    /// Load against the web app's API: votes on a hot question and leaderboard reads;
    /// without --url, against the app served here on sharded and on naive documents.
    Load(LoadArgs),
    /// The paper's experiment: votes at a fixed rate over 16 questions, three strategies without and with retries.
    Bench(BenchArgs),
    /// C clients on ONE question: naive vs autoshard variants vs the raw store (HINCRBY, or a slotted counter on PostgreSQL).
    Hotspot(HotspotArgs),
    /// One client on one question: median latency of loads and votes, and their ratios.
    Latency(LatencyArgs),
    /// Readers showing every question's votes beside writers voting, without and with a read cache.
    Leaderboard(LeaderboardArgs),
    /// Delete what runs with `--keep` left under a namespace (Redis keys, a PostgreSQL schema).
    Clean(CleanArgs),
    /// One process of `hotspot --processes` (started by it, not by hand).
    #[command(hide = true)]
    HotspotWorker(WorkerArgs),
}

impl Command {
    /// Where the command runs, if it runs on a store.
    fn store_mut(&mut self) -> &mut StoreArgs {
        match self {
            Command::App(a) => &mut a.store,
            Command::Serve(a) => &mut a.store,
            Command::Load(a) => &mut a.store,
            Command::Bench(a) => &mut a.store,
            Command::Hotspot(a) => &mut a.store,
            Command::Latency(a) => &mut a.store,
            Command::Leaderboard(a) => &mut a.store,
            Command::Clean(a) => &mut a.store,
            Command::HotspotWorker(a) => &mut a.store,
        }
    }
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
    /// Keep what the run stored (by default it is deleted when the run ends; `clean`
    /// deletes it later).
    #[arg(long)]
    keep: bool,
}

#[derive(Args, Debug, Clone)]
struct WorkerArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The hot-spot target to vote through.
    #[arg(long)]
    target: String,
    /// When to start voting, in milliseconds since the Unix epoch.
    #[arg(long)]
    start_ms: u64,
    /// Seconds to vote.
    #[arg(long)]
    duration: f64,
}

/// Where `serve` runs: its data stays under one namespace across restarts.
#[derive(Args, Debug, Clone)]
struct ServeStoreArgs {
    /// Serve from the Redis server at this URL (redis://HOST:PORT/).
    #[arg(long, value_name = "URL", conflicts_with_all = ["redis_cluster", "postgres"])]
    redis: Option<String>,
    /// Serve from the Redis Cluster reached through these node URLs.
    #[arg(long, value_name = "URL", num_args = 1.., conflicts_with = "postgres")]
    redis_cluster: Option<Vec<String>>,
    /// Serve from the PostgreSQL database at this URL
    /// (postgres://USER:PASSWORD@HOST:PORT/DBNAME), in the schema `--namespace` names.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// Prefix of every key on Redis, or the schema on PostgreSQL. What visitors store is
    /// kept there across restarts (`moderator clean --namespace NAME` deletes it).
    #[arg(long, default_value = "moderator-web")]
    namespace: String,
}

impl ServeStoreArgs {
    /// The store to serve from, kept after the server stops.
    fn resolved(&self) -> StoreArgs {
        StoreArgs {
            redis: self.redis.clone(),
            redis_cluster: self.redis_cluster.clone(),
            postgres: self.postgres.clone(),
            namespace: Some(self.namespace.clone()),
            keep: true,
        }
    }
}

#[derive(Args, Debug, Clone)]
struct ServeArgs {
    #[command(flatten)]
    serve_from: ServeStoreArgs,
    /// `serve_from`, resolved.
    #[arg(skip)]
    store: StoreArgs,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: std::net::IpAddr,
    /// The port to listen on (0: any free port).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Keep each question's votes in one document (every vote an optimistic
    /// read-modify-write of it) instead of 10 shards.
    #[arg(long)]
    naive: bool,
    /// How old a leaderboard read may be, in ms (the read cache's bound).
    #[arg(long, default_value_t = 100, value_parser = at_least_one)]
    staleness_ms: u64,
}

#[derive(Args, Debug, Clone)]
struct LoadArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The app to load (http://HOST:PORT), repeatable; without it, the app is served here
    /// twice, on sharded and on naive documents, and both are loaded in turn.
    #[arg(long, value_name = "URL")]
    url: Vec<String>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 32, value_parser = clients)]
    clients: usize,
    /// Seconds per target.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
}

#[derive(Args, Debug, Clone)]
struct CleanArgs {
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Args, Debug, Clone)]
struct AppArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Questions to seed.
    #[arg(long, default_value_t = app::DEFAULT_QUESTIONS, value_parser = at_least_one)]
    questions: u64,
    /// Simulated users, voting and responding concurrently.
    #[arg(long, default_value_t = app::DEFAULT_USERS, value_parser = at_least_one)]
    users: u64,
    /// Votes per user.
    #[arg(long, default_value_t = app::DEFAULT_VOTES_PER_USER)]
    votes: u64,
    /// Responses per user.
    #[arg(long, default_value_t = app::DEFAULT_RESPONSES_PER_USER)]
    responses: u64,
}

/// The modelled latency of the embedded store.
#[derive(Args, Debug, Clone)]
struct ModelArgs {
    /// Modelled commit latency per entity group, in ms (0 with --read-ms 0: the plain
    /// in-memory store). Ignored on Redis and PostgreSQL.
    #[arg(long, default_value_t = backend::DEFAULT_COMMIT_MS)]
    commit_ms: u64,
    /// Modelled read latency, in ms. Ignored on Redis and PostgreSQL.
    #[arg(long, default_value_t = backend::DEFAULT_READ_MS)]
    read_ms: u64,
}

#[derive(Args, Debug, Clone)]
struct BenchArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    model: ModelArgs,
    /// Votes per second, over all questions (at most 50,000: every vote is a task of
    /// its own, open loop).
    #[arg(long, default_value_t = bench::DEFAULT_RATE, allow_negative_numbers = true, value_parser = rate)]
    rate: f64,
    /// Seconds of arrivals per variant.
    #[arg(long, default_value_t = bench::DEFAULT_SECONDS)]
    duration: f64,
    /// Questions the votes are spread over.
    #[arg(long, default_value_t = bench::DEFAULT_QUESTIONS, value_parser = at_least_one)]
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
    #[arg(long, value_delimiter = ',', default_value = hotspot::DEFAULT_CLIENTS, value_parser = clients)]
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
    /// Also run the raw, naive and `mapper/client` targets as one operating-system process
    /// per client, each with its own `Mapper` and connections (Redis and PostgreSQL); their
    /// ratios are to the raw command sent by as many processes.
    #[arg(long)]
    processes: bool,
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
    #[arg(long, default_value_t = 64, value_parser = clients)]
    readers: usize,
    /// Concurrent writers, each voting on random questions in a loop.
    #[arg(long, default_value_t = 8)]
    writers: usize,
    /// Questions on the leaderboard.
    #[arg(long, default_value_t = 16, value_parser = at_least_one)]
    questions: u64,
    /// Seconds per variant.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// The read cache's staleness bound, in ms.
    #[arg(long, default_value_t = 100, value_parser = at_least_one)]
    staleness_ms: u64,
    /// Write the results to this file (.csv or .json).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut command = cli.command.unwrap_or(Command::App(cli.app));
    if let Command::Serve(args) = &mut command {
        // A server keeps what visitors stored, under a namespace the next start finds.
        args.store = args.serve_from.resolved();
    }
    let store = command.store_mut();
    let explicit = store.namespace.is_some();
    store.namespace.get_or_insert_with(fresh_namespace);
    let store = store.clone();
    let clean = !store.keep && !matches!(command, Command::Clean(_));
    let outcome = if matches!(command, Command::Clean(_)) && !explicit {
        Err("clean needs the --namespace to delete".to_owned())
    } else {
        run(command).await
    };
    if clean {
        if let Err(e) = clean_up(&store).await {
            eprintln!("warning: {e}");
        }
    }
    match outcome {
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
            let format = args.out.as_deref().map(report::Format::of).transpose()?;
            writable(args.out.as_deref())?;
            writable(args.plot.as_deref())?;
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
        Command::HotspotWorker(args) => {
            let backend = backend(&args.store, None)?;
            let tally = hotspot::worker(
                &backend,
                &namespace(&args.store),
                &args.target,
                args.start_ms,
                seconds(args.duration)?,
            )
            .await
            .map_err(chain)?;
            println!("{}", tally.line());
            Ok(true)
        }
        Command::Clean(args) => {
            let deleted = clean_up(&args.store).await?;
            println!(
                "deleted {deleted} keys or schemas under {}",
                namespace(&args.store)
            );
            Ok(true)
        }
        Command::Leaderboard(args) => run_leaderboard(args, progress).await,
        Command::Serve(args) => run_serve(args).await,
        Command::Load(args) => run_load(args).await,
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
    let processes = if args.processes {
        if backend.flags().is_none() {
            return Err("--processes needs a store other processes reach (--redis, \
                        --redis-cluster or --postgres)"
                .to_owned());
        }
        Some(std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?)
    } else {
        None
    };
    let config = HotspotConfig {
        clients: args.clients,
        duration: seconds(args.duration.unwrap_or(hotspot::DEFAULT_SECONDS))?,
        only: args.only,
        processes,
        #[cfg(feature = "count-allocations")]
        allocations: Some(allocations),
        ..HotspotConfig::default()
    };
    let format = args.out.as_deref().map(report::Format::of).transpose()?;
    writable(args.out.as_deref())?;
    writable(args.plot.as_deref())?;
    let clients: Vec<String> = config.clients.iter().map(ToString::to_string).collect();
    println!(
        "hot spot on {backend}: one question, {} clients, {} s each",
        clients.join(", "),
        config.duration.as_secs_f64()
    );
    let rows = hotspot::run(&backend, &namespace(&args.store), &config, progress)
        .await
        .map_err(chain)?;
    print!("{}", report::hotspot_table(&rows));
    print!("{}", report::hotspot_nodes_table(&rows));
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
    let config = LeaderboardConfig {
        readers: args.readers,
        writers: args.writers,
        questions: args.questions,
        duration: seconds(args.duration)?,
        staleness: Duration::from_millis(args.staleness_ms),
    };
    let format = args.out.as_deref().map(report::Format::of).transpose()?;
    writable(args.out.as_deref())?;
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
    writable(args.out.as_deref())?;
    writable(args.plot.as_deref())?;
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

/// `serve`: the web app until Ctrl-C.
async fn run_serve(args: ServeArgs) -> Result<bool, String> {
    let backend = backend(&args.store, None)?;
    let store = backend
        .connect(&namespace(&args.store))
        .await
        .map_err(chain)?;
    let config = WebConfig {
        staleness: Duration::from_millis(args.staleness_ms),
    };
    let addr = std::net::SocketAddr::new(args.bind, args.port);
    let stop = async {
        // Without a Ctrl-C handler the server runs until it is killed.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let (local, server) = if args.naive {
        web::spawn::<SingleQuestion>(store, addr, config, stop).await
    } else {
        web::spawn::<Question>(store, addr, config, stop).await
    }
    .map_err(chain)?;
    let kind = if args.naive {
        "naive documents"
    } else {
        "10 shards per question"
    };
    println!(
        "moderator: serving the voting app at http://{local}/ on {backend} ({kind}, \
         namespace {}); Ctrl-C stops",
        namespace(&args.store)
    );
    server
        .await
        .map_err(|e| format!("the server's task failed: {e}"))?
        .map_err(|e| format!("serving on {local}: {e}"))?;
    Ok(true)
}

/// `load`: the load generator, against the given URLs or against the app served here on
/// sharded and on naive documents.
async fn run_load(args: LoadArgs) -> Result<bool, String> {
    let config = LoadConfig {
        clients: args.clients,
        duration: seconds(args.duration)?,
    };
    let mut targets: Vec<(String, String)> = args
        .url
        .iter()
        .map(|url| (url.clone(), url.clone()))
        .collect();
    let mut servers = Vec::new();
    if targets.is_empty() {
        let backend = backend(&args.store, None)?;
        let store = backend
            .connect(&namespace(&args.store))
            .await
            .map_err(chain)?;
        let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        let forever = std::future::pending;
        let (sharded, task) =
            web::spawn::<Question>(store.clone(), any, WebConfig::default(), forever())
                .await
                .map_err(chain)?;
        servers.push(task);
        let (naive, task) =
            web::spawn::<SingleQuestion>(store, any, WebConfig::default(), forever())
                .await
                .map_err(chain)?;
        servers.push(task);
        println!("load on the app served here on {backend}");
        targets.push(("sharded".to_owned(), format!("http://{sharded}")));
        targets.push(("naive".to_owned(), format!("http://{naive}")));
    }
    println!(
        "{} clients, {} s per target: 4 votes (each a new visitor; every 10th vote sent \
         again) to 1 leaderboard read",
        config.clients,
        config.duration.as_secs_f64()
    );
    let mut rows: Vec<LoadRow> = Vec::new();
    for (name, url) in &targets {
        rows.push(load::run(name, url, &config).await.map_err(chain)?);
    }
    for server in servers {
        server.abort();
    }
    print!("{}", report::load_table(&rows));
    Ok(rows.iter().all(LoadRow::is_exact))
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

/// The run's namespace (`main` sets one when `--namespace` is not given).
fn namespace(store: &StoreArgs) -> String {
    store.namespace.clone().unwrap_or_else(fresh_namespace)
}

fn fresh_namespace() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("moderator-{secs}-{}", std::process::id())
}

/// Deletes what the run stored under its namespace.
async fn clean_up(store: &StoreArgs) -> Result<u64, String> {
    let backend = backend(store, None)?;
    backend.clean(&namespace(store)).await.map_err(chain)
}

/// The most votes per second `bench` takes: it starts a task per vote when it is due, so
/// a rate the store cannot follow piles tasks up in memory.
const MAX_RATE: f64 = 50_000.0;

/// A count of at least one.
fn at_least_one(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) | Err(_) => Err(format!("`{s}`: expected a whole number of at least 1")),
        Ok(n) => Ok(n),
    }
}

/// A number of concurrent clients: 1 to 100,000.
fn clients(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n @ 1..=100_000) => Ok(n),
        _ => Err(format!("`{s}`: expected a whole number from 1 to 100000")),
    }
}

/// A vote rate: positive, at most [`MAX_RATE`].
fn rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= MAX_RATE => Ok(r),
        _ => Err(format!(
            "`{s}`: expected votes per second above 0 and at most {MAX_RATE}"
        )),
    }
}

/// Checks before a run that `path` can be written, so a bad `--out` or `--plot` fails
/// at once rather than after the run (an empty file stays there until the run writes it).
fn writable(path: Option<&Path>) -> Result<(), String> {
    match path {
        Some(path) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(drop)
            .map_err(|e| format!("cannot write {}: {e}", path.display())),
        None => Ok(()),
    }
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
