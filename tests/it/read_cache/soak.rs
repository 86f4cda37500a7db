//! The soak of the read cache: readers and writers with a cache for a while, every read
//! checked against a log of confirmed writes (within the staleness bound, never older
//! than a confirmed own write).

use super::Poll;
use autoshard::ReadCache;
use autoshard::prelude::*;

use autoshard_test_support::store::{Knobs, TestStore};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Confirmed writes per question, each with the instant its caller saw it confirmed.
#[derive(Default)]
struct Log {
    confirmed: Mutex<Vec<Instant>>,
    attempted: AtomicI64,
}

impl Log {
    fn confirm(&self) {
        let mut confirmed = self.confirmed.lock().unwrap();
        confirmed.push(Instant::now());
    }

    /// The confirmed writes before `t`, and the instant of the first one after the
    /// `seen` oldest (the oldest write a read that saw `seen` may have missed).
    fn before(&self, t: Instant, seen: usize) -> (usize, Option<Instant>) {
        let confirmed = self.confirmed.lock().unwrap();
        let n = confirmed.partition_point(|&c| c < t);
        (n, confirmed.get(seen).copied())
    }
}

/// Checks a read of `votes` by a load called at `called` against the confirmed writes
/// of every process (`all`) and of its own (`own`); returns how stale it was (the age
/// of the oldest confirmed write it missed).
fn check_read(
    all: &Log,
    own: &Log,
    called: Instant,
    votes: i64,
    bound: Duration,
    label: &str,
) -> Duration {
    let seen = usize::try_from(votes).unwrap();
    let attempted = all.attempted.load(Ordering::SeqCst);
    assert!(
        votes <= attempted,
        "{label}: read {votes} of {attempted} attempted"
    );
    let (mine, _) = own.before(called, 0);
    assert!(
        seen >= mine,
        "{label}: read {seen} after its process confirmed {mine}"
    );
    let (old, _) = all.before(called.checked_sub(bound).unwrap_or(called), 0);
    assert!(
        seen >= old,
        "{label}: read {seen}, {old} were confirmed a bound before"
    );
    match all.before(called, seen) {
        (n, Some(missed)) if n > seen => called.saturating_duration_since(missed),
        _ => Duration::ZERO,
    }
}

/// Checks that every process reads every poll exact (its confirmed writes), once the
/// writers stopped and a bound passed; returns the number of confirmed writes.
async fn every_read_exact(
    processes: &[Mapper],
    all: &[Log],
    first: u64,
    label: &str,
    faults: bool,
) -> usize {
    let mut writes = 0;
    for (q, log) in all.iter().enumerate() {
        let confirmed = log.confirmed.lock().unwrap().len();
        writes += confirmed;
        let id = first + u64::try_from(q).unwrap();
        for db in processes {
            let votes = loop {
                // Reads may lose their answer (`faults`); the cached read then comes next.
                match db.load::<Poll>(&id).await {
                    Ok(poll) => break poll.votes,
                    Err(Error::Backend { .. }) if faults => {}
                    Err(e) => panic!("{label}: {e}"),
                }
            };
            assert_eq!(
                usize::try_from(votes).unwrap(),
                confirmed,
                "{label}: poll {q}"
            );
        }
    }
    writes
}

const QUESTIONS: u64 = 16;

/// The first poll id of the next soak (each soak votes on polls of its own).
static NEXT_SOAK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1_000);

/// 64 readers and 8 writers on 16 polls for `run`, in two processes (mappers with a cache
/// of their own, bound 100 ms), four writers and 32 readers each. Every read is at least
/// what was confirmed anywhere a bound before it was called and what its own process
/// confirmed before, and at most what was attempted; after the writers stop and a
/// bound passes, every read is exact. `faults`: loads are cut off at random (dropped
/// between their read and their fill) and one read in 8 loses its answer. Returns the
/// largest staleness observed.
pub(super) async fn soak(
    store: Arc<dyn DocumentStore>,
    label: &str,
    run: Duration,
    faults: bool,
) -> Duration {
    let bound = Duration::from_millis(100);
    let knobs = Knobs {
        lost_reads: faults.then_some(8),
        ..Knobs::default()
    };
    let reads_store: Arc<dyn DocumentStore> = Arc::new(TestStore::new(store, knobs));
    let processes: Vec<Mapper> = (0..2)
        .map(|_| Mapper::new(reads_store.clone()).with_read_cache(ReadCache::new(bound)))
        .collect();
    let first = NEXT_SOAK.fetch_add(QUESTIONS, Ordering::SeqCst);
    for id in first..first + QUESTIONS {
        let mut poll = Poll::new(id, "soak".into(), 0);
        processes[0].insert(&mut poll).await.unwrap();
    }
    let all: Arc<Vec<Log>> = Arc::new((0..QUESTIONS).map(|_| Log::default()).collect());
    let own: Vec<Arc<Vec<Log>>> = (0..2)
        .map(|_| Arc::new((0..QUESTIONS).map(|_| Log::default()).collect()))
        .collect();
    let stop = Instant::now() + run;
    let staleness = Arc::new(Mutex::new(Duration::ZERO));
    let mut tasks = Vec::new();
    for (p, db) in processes.iter().enumerate() {
        for w in 0..4u64 {
            let (db, all, own) = (db.clone(), all.clone(), own[p].clone());
            tasks.push(tokio::spawn(async move {
                let mut i = w;
                while Instant::now() < stop {
                    // A cached load (and a vote on memory) never waits: let the others run.
                    tokio::task::yield_now().await;
                    let q = usize::try_from(i % QUESTIONS).unwrap();
                    i += 3;
                    all[q].attempted.fetch_add(1, Ordering::SeqCst);
                    let id = first + u64::try_from(q).unwrap();
                    db.apply(&id, Poll::vote_up).await.unwrap();
                    all[q].confirm();
                    own[q].confirm();
                }
            }));
        }
        for r in 0..32u64 {
            let (db, all, own) = (db.clone(), all.clone(), own[p].clone());
            let (staleness, label) = (staleness.clone(), label.to_owned());
            tasks.push(tokio::spawn(async move {
                let mut i = r;
                while Instant::now() < stop {
                    // A cached load (and a vote on memory) never waits: let the others run.
                    tokio::task::yield_now().await;
                    let q = usize::try_from(i % QUESTIONS).unwrap();
                    i += 1;
                    let id = first + u64::try_from(q).unwrap();
                    let called = Instant::now();
                    let load = db.load::<Poll>(&id);
                    let votes = if faults {
                        let cut = Duration::from_micros(rand::random_range(0..400));
                        match tokio::time::timeout(cut, load).await {
                            Ok(Ok(poll)) => poll.votes,
                            Ok(Err(Error::Backend { .. })) | Err(_) => continue,
                            Ok(Err(e)) => panic!("{label}: {e}"),
                        }
                    } else {
                        load.await.unwrap().votes
                    };
                    let age = check_read(&all[q], &own[q], called, votes, bound, &label);
                    let mut largest = staleness.lock().unwrap();
                    *largest = (*largest).max(age);
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    tokio::time::sleep(bound).await;
    let writes = every_read_exact(&processes, &all, first, label, faults).await;
    let largest = *staleness.lock().unwrap();
    let stats: Vec<_> = processes
        .iter()
        .map(|db| db.read_cache().unwrap().stats())
        .collect();
    eprintln!("{label}: {writes} votes; largest staleness observed {largest:?}; {stats:?}");
    assert!(largest <= bound, "{label}: a read {largest:?} stale");
    largest
}
