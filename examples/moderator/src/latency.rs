//! The latency mode: one client, one question, each operation timed many times in
//! turn (interleaved, so drift of the machine or the server hits them all alike): the
//! medians of a load with and without sharded votes, and of a vote by naive `update`,
//! autoshard `update` (built-in sum and a `#[shard_fold]` function) and `apply`.

use crate::backend::Backend;
use crate::model::{FoldFnQuestion, NaiveQuestion, Question};
use autoshard::prelude::*;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The operations timed, in the order they run in each round.
pub const OPERATIONS: [&str; 6] = [
    "load unsharded",
    "load 10 shards",
    "naive update",
    "update sum",
    "update fold-fn",
    "apply sum",
];

/// The median and 99th percentile of one operation, in microseconds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LatencyRow {
    /// One of [`OPERATIONS`].
    pub operation: String,
    /// Median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
}

/// Times every operation `rounds` times on `backend`.
pub async fn run(backend: &Backend, namespace: &str, rounds: usize) -> Result<Vec<LatencyRow>> {
    let store = backend.connect(namespace).await?;
    let db: Mapper<Arc<dyn DocumentStore>> = Mapper::new(store);
    let (text, author) = ("Hot?".to_owned(), "candidate".to_owned());
    db.insert(&mut NaiveQuestion {
        id: 1,
        text: text.clone(),
        author: author.clone(),
        votes: 0,
    })
    .await?;
    db.insert(&mut Question::new(1, text.clone(), author, 0))
        .await?;
    db.insert(&mut FoldFnQuestion::new(1, text, 0)).await?;
    let mut samples = vec![Vec::with_capacity(rounds); OPERATIONS.len()];
    for _ in 0..rounds {
        for (i, times) in samples.iter_mut().enumerate() {
            let start = Instant::now();
            match i {
                0 => drop(db.load::<NaiveQuestion>(&1).await?),
                1 => drop(db.load::<Question>(&1).await?),
                2 => db.update(&1, NaiveQuestion::vote_up).await?,
                3 => db.update(&1, Question::vote_up).await?,
                4 => db.update(&1, FoldFnQuestion::vote_up).await?,
                _ => db.apply(&1, Question::vote_up).await?,
            }
            times.push(start.elapsed());
        }
    }
    Ok(OPERATIONS
        .iter()
        .zip(samples)
        .map(|(name, mut times)| {
            times.sort_unstable();
            LatencyRow {
                operation: (*name).to_owned(),
                p50_us: micros(percentile(&times, 50)),
                p99_us: micros(percentile(&times, 99)),
            }
        })
        .collect())
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() - 1) * p / 100]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The table, with the ratios the hot-path goals are stated in.
#[must_use]
pub fn table(rows: &[LatencyRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<18} {:>10} {:>10}", "operation", "p50 µs", "p99 µs");
    for r in rows {
        let _ = writeln!(
            out,
            "{:<18} {:>10.0} {:>10.0}",
            r.operation, r.p50_us, r.p99_us
        );
    }
    let p50 = |name: &str| rows.iter().find(|r| r.operation == name).map(|r| r.p50_us);
    let ratio = |a: &str, b: &str| p50(a).zip(p50(b)).map(|(a, b)| a / b);
    if let Some(r) = ratio("load 10 shards", "load unsharded") {
        let _ = writeln!(out, "10-shard load / unsharded load (p50): {r:.2}x");
    }
    for vote in ["update sum", "update fold-fn", "apply sum"] {
        if let Some(r) = ratio("naive update", vote) {
            let _ = writeln!(
                out,
                "votes/s of `{vote}` / naive update (1 client, from p50): {r:.2}x"
            );
        }
    }
    out
}
