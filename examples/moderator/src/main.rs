//! `moderator`: the voting app (default: a simulation; `serve`: the web app, `load`: a
//! load generator against it), the paper's benchmark (`bench`), the hot-spot mode
//! (`hotspot`), one client's latencies (`latency`) and a read-mostly page with and
//! without a read cache (`leaderboard`), on the embedded store, Redis or PostgreSQL.

mod cli;

use autoshard::Error;
use autoshard_moderator::adaptive::{self, AdaptiveConfig};
use autoshard_moderator::app::{self, AppConfig};
use autoshard_moderator::backend::{Backend, ModelledLatency};
use autoshard_moderator::bench::{self, BenchConfig};
use autoshard_moderator::hotspot::{self, HotspotConfig};
use autoshard_moderator::latency;
use autoshard_moderator::leaderboard::{self, LeaderboardConfig};
use autoshard_moderator::load::{self, LoadConfig, LoadRow};
use autoshard_moderator::model::{Question, SingleQuestion};
use autoshard_moderator::progress::Progress;
use autoshard_moderator::web::{self, WebConfig};
use autoshard_moderator::{chart, report};
use clap::Parser;
use cli::{
    BenchArgs, Cli, Command, HotspotArgs, LeaderboardArgs, LoadArgs, ModelArgs, ServeArgs,
    StoreArgs,
};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// With the feature `count-allocations`, this counting allocator is the program's, and
/// `hotspot` reports allocations per vote. Without it, it is compiled but not installed
/// (so every build checks it).
#[cfg_attr(feature = "count-allocations", global_allocator)]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Heap allocations (and reallocations) of this process so far.
fn allocations() -> u64 {
    let stats = ALLOCATOR.stats();
    u64::try_from(stats.allocations + stats.reallocations).unwrap_or(u64::MAX)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::App(cli.app));
    // A worker process of `hotspot --processes` is one client sending one request at a
    // time: one thread runs it, as such an application process would. Everything else
    // runs on every core.
    let runtime = match command {
        Command::HotspotWorker(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        _ => tokio::runtime::Runtime::new(),
    };
    match runtime {
        Ok(runtime) => runtime.block_on(main_with(command)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::from(2)
        }
    }
}

async fn main_with(mut command: Command) -> ExitCode {
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
    if clean && let Err(e) = clean_up(&store).await {
        eprintln!("warning: {e}");
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
        Command::Bench(args) => run_bench(args, progress).await,
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

/// `moderator bench`: the chosen variants, their table, and the CSV or JSON and the chart
/// asked for; `Ok(false)` when a variant's total does not match.
async fn run_bench(args: BenchArgs, progress: Progress) -> Result<bool, String> {
    let backend = backend(&args.store, Some(&args.model))?;
    let config = BenchConfig {
        rate: args.rate,
        duration: seconds(args.duration)?,
        questions: args.questions,
        ..BenchConfig::default()
    };
    let variants = bench::chosen(&args.only).map_err(chain)?;
    out_format(args.out.as_deref())?;
    writable(args.out.as_deref())?;
    writable(args.plot.as_deref())?;
    println!(
        "bench on {backend}: {} votes/s over {} questions for {} s per variant",
        config.rate,
        config.questions,
        config.duration.as_secs_f64()
    );
    let results = bench::run_variants(
        &backend,
        &namespace(&args.store),
        &config,
        &variants,
        progress,
    )
    .await
    .map_err(chain)?;
    print!("{}", report::bench_table(&results));
    write_out(args.out.as_deref(), &results, || {
        report::bench_csv(&results)
    })?;
    if let Some(path) = &args.plot {
        let title = format!(
            "{} votes/s over {} questions, {backend}",
            config.rate, config.questions
        );
        write(path, &chart::figure6(&results, &title)?)?;
    }
    Ok(results.iter().all(bench::VariantResult::totals_match))
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
        allocations: cfg!(feature = "count-allocations").then_some(allocations as fn() -> u64),
        ..HotspotConfig::default()
    };
    out_format(args.out.as_deref())?;
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
    write_out(args.out.as_deref(), &rows, || report::hotspot_csv(&rows))?;
    if let Some(path) = &args.plot {
        let title = format!("Hot spot on {backend}: committed votes/s, one question");
        write(path, &chart::hotspot(&rows, &title)?)?;
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
    out_format(args.out.as_deref())?;
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
    write_out(args.out.as_deref(), &rows, || {
        report::leaderboard_csv(&rows)
    })?;
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
    out_format(args.out.as_deref())?;
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
    write_out(args.out.as_deref(), &samples, || {
        report::adaptive_csv(&samples)
    })?;
    if let Some(path) = &args.plot {
        let title = format!(
            "Adaptive shard counts on {backend}: {} clients on one question",
            config.clients
        );
        write(path, &chart::adaptive(&samples, &title)?)?;
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

/// The format `--out` asks for by its file's extension (checked before a run starts).
fn out_format(out: Option<&Path>) -> Result<Option<report::Format>, String> {
    out.map(report::Format::of).transpose()
}

/// Writes `value` to `out`, when given, as CSV (`csv`) or JSON by the file's extension.
fn write_out<T: serde::Serialize>(
    out: Option<&Path>,
    value: &T,
    csv: impl FnOnce() -> String,
) -> Result<(), String> {
    match (out, out_format(out)?) {
        (Some(path), Some(format)) => write(path, &report::render(format, value, csv)?),
        _ => Ok(()),
    }
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
