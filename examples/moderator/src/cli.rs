//! The command line: the commands, their flags, and the checks of flag values.

use autoshard_moderator::{app, backend, bench, hotspot};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// A Google-Moderator-style voting app on autoshard, and the AutoShard paper's experiment.
///
/// Without a command it runs the voting app, with the options below.
#[derive(Parser, Debug)]
#[command(version, args_conflicts_with_subcommands = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    #[command(flatten)]
    pub(crate) app: AppArgs,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
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
    pub(crate) fn store_mut(&mut self) -> &mut StoreArgs {
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
pub(crate) struct StoreArgs {
    /// Run on the Redis server at this URL (redis://HOST:PORT/).
    #[arg(long, value_name = "URL", conflicts_with_all = ["redis_cluster", "postgres"])]
    pub(crate) redis: Option<String>,
    /// Run on the Redis Cluster reached through these node URLs.
    #[arg(long, value_name = "URL", num_args = 1.., conflicts_with = "postgres")]
    pub(crate) redis_cluster: Option<Vec<String>>,
    /// Run on the PostgreSQL database at this URL
    /// (postgres://USER:PASSWORD@HOST:PORT/DBNAME), in a schema of the run's own.
    #[arg(long, value_name = "URL")]
    pub(crate) postgres: Option<String>,
    /// Prefix of every key written on Redis, or the schema on PostgreSQL (default: a
    /// fresh one per run).
    #[arg(long)]
    pub(crate) namespace: Option<String>,
    /// Keep what the run stored (by default it is deleted when the run ends; `clean`
    /// deletes it later).
    #[arg(long)]
    pub(crate) keep: bool,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct WorkerArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// The hot-spot target to vote through.
    #[arg(long)]
    pub(crate) target: String,
    /// When to start voting, in milliseconds since the Unix epoch.
    #[arg(long)]
    pub(crate) start_ms: u64,
    /// Seconds to vote.
    #[arg(long)]
    pub(crate) duration: f64,
}

/// Where `serve` runs: its data stays under one namespace across restarts.
#[derive(Args, Debug, Clone)]
pub(crate) struct ServeStoreArgs {
    /// Serve from the Redis server at this URL (redis://HOST:PORT/).
    #[arg(long, value_name = "URL", conflicts_with_all = ["redis_cluster", "postgres"])]
    pub(crate) redis: Option<String>,
    /// Serve from the Redis Cluster reached through these node URLs.
    #[arg(long, value_name = "URL", num_args = 1.., conflicts_with = "postgres")]
    pub(crate) redis_cluster: Option<Vec<String>>,
    /// Serve from the PostgreSQL database at this URL
    /// (postgres://USER:PASSWORD@HOST:PORT/DBNAME), in the schema `--namespace` names.
    #[arg(long, value_name = "URL")]
    pub(crate) postgres: Option<String>,
    /// Prefix of every key on Redis, or the schema on PostgreSQL. What visitors store is
    /// kept there across restarts (`moderator clean --namespace NAME` deletes it).
    #[arg(long, default_value = "moderator-web")]
    pub(crate) namespace: String,
}

impl ServeStoreArgs {
    /// The store to serve from, kept after the server stops.
    pub(crate) fn resolved(&self) -> StoreArgs {
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
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) serve_from: ServeStoreArgs,
    /// `serve_from`, resolved.
    #[arg(skip)]
    pub(crate) store: StoreArgs,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) bind: std::net::IpAddr,
    /// The port to listen on (0: any free port).
    #[arg(long, default_value_t = 8080)]
    pub(crate) port: u16,
    /// Keep each question's votes in one document (every vote an optimistic
    /// read-modify-write of it) instead of 10 shards.
    #[arg(long)]
    pub(crate) naive: bool,
    /// How old a leaderboard read may be, in ms (the read cache's bound).
    #[arg(long, default_value_t = 100, value_parser = at_least_one)]
    pub(crate) staleness_ms: u64,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct LoadArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// The app to load (http://HOST:PORT), repeatable; without it, the app is served here
    /// twice, on sharded and on naive documents, and both are loaded in turn.
    #[arg(long, value_name = "URL")]
    pub(crate) url: Vec<String>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 32, value_parser = clients)]
    pub(crate) clients: usize,
    /// Seconds per target.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) duration: f64,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct CleanArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct AppArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Questions to seed.
    #[arg(long, default_value_t = app::DEFAULT_QUESTIONS, value_parser = at_least_one)]
    pub(crate) questions: u64,
    /// Simulated users, voting and responding concurrently.
    #[arg(long, default_value_t = app::DEFAULT_USERS, value_parser = at_least_one)]
    pub(crate) users: u64,
    /// Votes per user.
    #[arg(long, default_value_t = app::DEFAULT_VOTES_PER_USER)]
    pub(crate) votes: u64,
    /// Responses per user.
    #[arg(long, default_value_t = app::DEFAULT_RESPONSES_PER_USER)]
    pub(crate) responses: u64,
}

/// The modelled latency of the embedded store.
#[derive(Args, Debug, Clone)]
pub(crate) struct ModelArgs {
    /// Modelled commit latency per entity group, in ms (0 with --read-ms 0: the plain
    /// in-memory store). Ignored on Redis and PostgreSQL.
    #[arg(long, default_value_t = backend::DEFAULT_COMMIT_MS)]
    pub(crate) commit_ms: u64,
    /// Modelled read latency, in ms. Ignored on Redis and PostgreSQL.
    #[arg(long, default_value_t = backend::DEFAULT_READ_MS)]
    pub(crate) read_ms: u64,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// Votes per second, over all questions (at most 50,000: every vote is a task of
    /// its own, open loop).
    #[arg(long, default_value_t = bench::DEFAULT_RATE, allow_negative_numbers = true, value_parser = rate)]
    pub(crate) rate: f64,
    /// Seconds of arrivals per variant.
    #[arg(long, default_value_t = bench::DEFAULT_SECONDS)]
    pub(crate) duration: f64,
    /// Questions the votes are spread over.
    #[arg(long, default_value_t = bench::DEFAULT_QUESTIONS, value_parser = at_least_one)]
    pub(crate) questions: u64,
    /// Run only the variants whose name contains one of these (e.g. `--only "fold-fn"`),
    /// or is the one after `=` (`--only "=naive w/ Tx retry"`).
    #[arg(long, value_delimiter = ',')]
    pub(crate) only: Vec<String>,
    /// Write the results to this file (.csv or .json).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Draw a chart like the paper's Figure 6 into this SVG file.
    #[arg(long)]
    pub(crate) plot: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct HotspotArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// Concurrent client counts to try.
    #[arg(long, value_delimiter = ',', default_value = hotspot::DEFAULT_CLIENTS, value_parser = clients)]
    pub(crate) clients: Vec<usize>,
    /// Seconds per client count and target (3 by default); with `--adaptive`, seconds the
    /// clients vote per variant (40 by default).
    #[arg(long)]
    pub(crate) duration: Option<f64>,
    /// Instead of the targets: one question under adaptive shard counts (starting at one
    /// shard) against fixed counts of 1, 10 and 40, sampled every second; the largest
    /// `--clients` count votes.
    #[arg(long)]
    pub(crate) adaptive: bool,
    /// Run only the targets whose name contains one of these (e.g. `--only raw,apply`), or
    /// is the one after `=` (`--only "=apply sum"`).
    #[arg(long, value_delimiter = ',')]
    pub(crate) only: Vec<String>,
    /// Also run the raw, naive and `mapper/client` targets as one operating-system process
    /// per client, each with its own `Mapper` and connections (Redis and PostgreSQL); their
    /// ratios are to the raw command sent by as many processes.
    #[arg(long)]
    pub(crate) processes: bool,
    /// Write the results to this file (.csv or .json).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Draw votes/s against clients, one line per target (with `--adaptive`: votes/s and
    /// shards over time), into this SVG file.
    #[arg(long)]
    pub(crate) plot: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct LatencyArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Rounds (each times every operation once).
    #[arg(long, default_value_t = 2000)]
    pub(crate) rounds: usize,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct LeaderboardArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// Concurrent readers, each showing the leaderboard (every question's votes) in a loop.
    #[arg(long, default_value_t = 64, value_parser = clients)]
    pub(crate) readers: usize,
    /// Concurrent writers, each voting on random questions in a loop.
    #[arg(long, default_value_t = 8)]
    pub(crate) writers: usize,
    /// Questions on the leaderboard.
    #[arg(long, default_value_t = 16, value_parser = at_least_one)]
    pub(crate) questions: u64,
    /// Seconds per variant.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) duration: f64,
    /// The read cache's staleness bound, in ms.
    #[arg(long, default_value_t = 100, value_parser = at_least_one)]
    pub(crate) staleness_ms: u64,
    /// Write the results to this file (.csv or .json).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

/// The most votes per second `bench` takes: it starts a task per vote when it is due, so
/// a rate the store cannot follow piles tasks up in memory.
pub(crate) const MAX_RATE: f64 = 50_000.0;

/// A count of at least one.
pub(crate) fn at_least_one(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) | Err(_) => Err(format!("`{s}`: expected a whole number of at least 1")),
        Ok(n) => Ok(n),
    }
}

/// A number of concurrent clients: 1 to 100,000.
pub(crate) fn clients(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n @ 1..=100_000) => Ok(n),
        _ => Err(format!("`{s}`: expected a whole number from 1 to 100000")),
    }
}

/// A vote rate: positive, at most [`MAX_RATE`].
pub(crate) fn rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= MAX_RATE => Ok(r),
        _ => Err(format!(
            "`{s}`: expected votes per second above 0 and at most {MAX_RATE}"
        )),
    }
}
