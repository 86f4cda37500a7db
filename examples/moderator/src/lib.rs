//! A Google-Moderator-style voting app on autoshard, and the AutoShard paper's experiment
//! (section 5, Figure 6) as a benchmark.
//!
//! - [`model`]: the entities (`Question` with sharded votes, its naive twin, its twin with
//!   a fold function, `Response`).
//! - [`responses`]: the one place that writes and reads responses.
//! - [`app`]: seed questions, simulate users voting and responding, check the leaderboard.
//! - [`web`]: the voting app as a web page and a JSON API (`moderator serve`).
//! - [`load`]: a load generator against the web app's API (`moderator load`).
//! - [`bench`](mod@bench): the paper's open-loop workload in six variants (three strategies, without and with retries).
//! - [`hotspot`]: many clients on one question, against raw `HINCRBY`.
//! - [`adaptive`]: one hot question under adaptive shard counts, against fixed counts.
//! - [`latency`]: one client: medians of loads and votes, and their ratios.
//! - [`leaderboard`]: readers of every question's votes beside writers, with and without
//!   a read cache.
//! - [`backend`]: which store to run on, and connecting to it.
//! - [`report`], [`chart`]: tables, CSV, JSON and the SVG charts.
//!
//! The library prints nothing; the `moderator` binary does.

pub mod adaptive;
pub mod app;
pub mod backend;
pub mod bench;
pub mod chart;
pub mod hotspot;
pub mod latency;
pub mod leaderboard;
pub mod load;
pub mod model;
mod only;
pub mod progress;
pub mod report;
pub mod responses;
pub mod server_time;
pub mod stats;
pub mod web;
