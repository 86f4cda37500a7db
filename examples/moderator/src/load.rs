//! `moderator load`: a load generator against the web app's HTTP API.
//!
//! Each of `clients` tasks loops for `duration`: four votes on one hot question (asked at
//! the start), each as a new visitor (its own `visitor` cookie), then one read of the
//! leaderboard. Every tenth vote is sent again with the same visitor, which must answer
//! `counted: false`. Afterwards the hot question's count must equal the visitors whose
//! vote was answered: a vote counts once per visitor, whatever was sent twice.

use crate::stats::Latency;
use crate::web::board::{QuestionView, VoteView};
use autoshard::{Error, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to send.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Concurrent clients.
    pub clients: usize,
    /// How long they send.
    pub duration: Duration,
}

/// What one target answered.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LoadRow {
    /// The target's name.
    pub target: String,
    /// Requests answered `2xx`, per second.
    pub requests_per_sec: f64,
    /// Votes answered, per second.
    pub votes_per_sec: f64,
    /// Leaderboard reads answered, per second.
    pub reads_per_sec: f64,
    /// Latency of the votes.
    pub vote: Latency,
    /// Latency of the reads.
    pub read: Latency,
    /// Requests that failed (an error status or no answer).
    pub failed: u64,
    /// Visitors whose vote was answered: the count the hot question must hold.
    pub expected: i64,
    /// Visitors whose every vote failed: each may or may not have counted.
    pub unsure: i64,
    /// The hot question's count read back after the run.
    pub counted: i64,
    /// Repeated votes answered `counted: true` (must be 0).
    pub double: u64,
}

impl LoadRow {
    /// Whether the count is exact: every answered visitor once, no repeat counted.
    #[must_use]
    pub fn is_exact(&self) -> bool {
        self.double == 0
            && self.counted >= self.expected
            && self.counted <= self.expected + self.unsure
    }
}

#[derive(Default)]
struct Tally {
    votes: Vec<Duration>,
    reads: Vec<Duration>,
    failed: u64,
    answered: i64,
    unsure: i64,
    double: u64,
}

fn fail(what: &str, e: impl std::fmt::Display) -> Error {
    Error::backend(format!("load: {what}"), e.to_string())
}

/// Runs the load against the app at `url` (`http://HOST:PORT`), named `target`.
pub async fn run(target: &str, url: &str, config: &LoadConfig) -> Result<LoadRow> {
    let url = url.trim_end_matches('/').to_owned();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(config.clients)
        .build()
        .map_err(|e| fail("HTTP client", e))?;
    let asked: QuestionView = http
        .post(format!("{url}/api/questions"))
        .json(&serde_json::json!({ "text": "Hot question of the load test", "author": "load" }))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| fail(&format!("asking at {url}"), e))?
        .json()
        .await
        .map_err(|e| fail("reading the question asked", e))?;
    let started = Instant::now();
    let deadline = started + config.duration;
    let url: Arc<str> = url.into();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..config.clients {
        let (http, url) = (http.clone(), url.clone());
        clients.spawn(async move { client(&http, &url, asked.id, deadline).await });
    }
    let mut all = Tally::default();
    while let Some(done) = clients.join_next().await {
        let t = done.map_err(|e| fail("a client's task", e))?;
        all.votes.extend(t.votes);
        all.reads.extend(t.reads);
        all.failed += t.failed;
        all.answered += t.answered;
        all.unsure += t.unsure;
        all.double += t.double;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let read_back: serde_json::Value = http
        .get(format!("{url}/api/questions/{}", asked.id))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| fail("reading the count back", e))?
        .json()
        .await
        .map_err(|e| fail("reading the count back", e))?;
    let counted = read_back["question"]["votes"].as_i64().unwrap_or(-1);
    #[allow(clippy::cast_precision_loss)] // request counts are far below 2^52
    let per_sec = |n: usize| n as f64 / elapsed;
    Ok(LoadRow {
        target: target.to_owned(),
        requests_per_sec: per_sec(all.votes.len() + all.reads.len()),
        votes_per_sec: per_sec(all.votes.len()),
        reads_per_sec: per_sec(all.reads.len()),
        vote: Latency::of(all.votes),
        read: Latency::of(all.reads),
        failed: all.failed,
        expected: all.answered,
        unsure: all.unsure,
        counted,
        double: all.double,
    })
}

/// One client's loop until `deadline`.
async fn client(http: &reqwest::Client, url: &str, question: u64, deadline: Instant) -> Tally {
    let mut t = Tally::default();
    let mut n: u64 = 0;
    let mut last: Option<(String, bool)> = None;
    while Instant::now() < deadline {
        n += 1;
        if n.is_multiple_of(5) {
            let sent = Instant::now();
            let answer = http.get(format!("{url}/api/questions")).send().await;
            let read = match answer.and_then(reqwest::Response::error_for_status) {
                Ok(r) => r.json::<Vec<QuestionView>>().await.is_ok(),
                Err(_) => false,
            };
            if read {
                t.reads.push(sent.elapsed());
            } else {
                t.failed += 1;
            }
            continue;
        }
        // Every tenth vote sends the previous visitor's again.
        let repeat = last.clone().filter(|_| n % 10 == 9);
        let visitor = match &repeat {
            Some((v, _)) => v.clone(),
            None => format!("{:032x}", rand::random::<u128>()),
        };
        let sent = Instant::now();
        let answer = http
            .post(format!("{url}/api/questions/{question}/vote"))
            .header("cookie", format!("visitor={visitor}"))
            .send()
            .await;
        let voted = match answer.and_then(reqwest::Response::error_for_status) {
            Ok(r) => r.json::<VoteView>().await.ok(),
            Err(_) => None,
        };
        if voted.is_some() {
            t.votes.push(sent.elapsed());
        } else {
            t.failed += 1;
        }
        let answered = match (repeat, voted) {
            // A repeat of an answered vote must not count again.
            (Some((_, true)), Some(v)) => {
                t.double += u64::from(v.counted);
                true
            }
            (Some((_, true)), None) => true,
            // A repeat of a vote that failed: its answer settles the visitor.
            (Some((_, false)), Some(_)) => {
                t.unsure -= 1;
                t.answered += 1;
                true
            }
            (Some((_, false)), None) => false,
            (None, Some(_)) => {
                t.answered += 1;
                true
            }
            (None, None) => {
                t.unsure += 1;
                false
            }
        };
        last = Some((visitor, answered));
    }
    t
}
