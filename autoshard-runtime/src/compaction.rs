//! Compaction of dynamic shards: the [`Compactor`] sweeps every entity of one kind and
//! folds each entity's dynamic shard documents back into one ([`Mapper::compact`]).
//!
//! The paper (section 2.2) leaves this to "an independent batch process, e.g., run
//! nightly". Here it is either a one-shot call ([`Compactor::run_once`], for a cron job
//! or a CLI) or a tokio task on an interval ([`Compactor::spawn`]) stopped with
//! [`CompactorHandle::shutdown`].
//!
//! # Guarantees
//! Each fold is one optimistic commit inside the entity's dynamic-shard group (one Redis
//! Cluster slot): it deletes exactly the shard documents it read, at the versions it read,
//! and writes their fold into the compacted document. Saves write new keys and never
//! contend with it; two compactors conflict and one of them scans again. A crash at any
//! point leaves either the state before a commit or the state after it, so no value is
//! lost or counted twice, and running the compactor again finishes the job.
//!
//! # Cost
//! A sweep scans the kind's root documents in pages of [`Compactor::batch`], and per
//! entity the first page of its dynamic shards: an idle sweep (nothing to fold) makes
//! scans only, no writes. It works through entities one at a time, so it adds at most
//! one request at a time to the store's load.
//!
//! This module does not decide the storage layout; see the mapper's `dynamic` module
//! docs (re-stated on [`Mapper::compact`]).

use crate::error::Result;
use crate::group::Root;
use crate::key::EntityId;
use crate::mapper::Mapper;
use crate::store::{DocumentStore, Scan};
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use crate::mapper::{CompactionReport, DEFAULT_BATCH, DEFAULT_ROUNDS};

/// Sweeps all entities of kind `E` and compacts their dynamic shards.
///
/// ```
/// use autoshard::prelude::*;
///
/// #[autoshard::sharded]
/// #[derive(Entity, Debug, Clone)]
/// struct Counter {
///     #[id]
///     id: u64,
///     #[shardable(neutral = 0)] // no `shards`: a new shard document per save
///     hits: i64,
/// }
///
/// impl Counter {
///     #[shard_method]
///     fn hit(&mut self) {
///         self.hits += 1;
///     }
///
///     #[shard_fold]
///     fn fold_hits(a: i64, b: i64) -> i64 {
///         a + b
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> autoshard::Result<()> {
/// use autoshard::compaction::Compactor;
/// use std::time::Duration;
///
/// let db = Mapper::new(MemoryStore::new());
/// for id in 0..3 {
///     db.insert(&mut Counter::new(id, 0)).await?;
///     for _ in 0..4 {
///         db.update(&id, |c: &mut Counter| c.hit()).await?;
///     }
/// }
///
/// // One-shot, e.g. from a cron job:
/// let report = Compactor::<Counter, _>::new(db.clone()).run_once().await?;
/// assert_eq!((report.entities, report.shards_folded), (3, 12));
///
/// // Or in the background, every 50 ms, until shut down:
/// let handle = Compactor::<Counter, _>::new(db.clone()).spawn(Duration::from_millis(50));
/// db.update(&0, |c: &mut Counter| c.hit()).await?;
/// tokio::time::sleep(Duration::from_millis(120)).await;
/// let total = handle.shutdown().await?;
/// assert!(total.sweeps >= 1);
/// assert_eq!(db.load::<Counter>(&0).await?.hits, 5);
/// # Ok(())
/// # }
/// ```
pub struct Compactor<E, S> {
    mapper: Mapper<S>,
    batch: usize,
    rounds: u32,
    _kind: PhantomData<fn() -> E>,
}

impl<E: Root, S: DocumentStore> Compactor<E, S> {
    /// A compactor of kind `E` over `mapper`'s store (and retry policy, for conflicts
    /// with other compactors), with batches of [`DEFAULT_BATCH`] and at most
    /// [`DEFAULT_ROUNDS`] commits per entity and sweep.
    pub fn new(mapper: Mapper<S>) -> Self {
        Compactor {
            mapper,
            batch: DEFAULT_BATCH,
            rounds: DEFAULT_ROUNDS,
            _kind: PhantomData,
        }
    }

    /// Documents per scan page and per commit (at least 2).
    #[must_use]
    pub fn batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(2);
        self
    }

    /// Commits per entity and sweep (at least 1).
    #[must_use]
    pub fn rounds(mut self, rounds: u32) -> Self {
        self.rounds = rounds.max(1);
        self
    }

    /// One sweep over every root entity of kind `E`. An entity whose compaction fails is
    /// logged and counted in [`CompactionReport::failures`]; the sweep goes on. An error
    /// of the sweep's own scan ends it.
    pub async fn run_once(&self) -> Result<CompactionReport> {
        let mut report = CompactionReport {
            sweeps: 1,
            ..CompactionReport::default()
        };
        let mut scan = Scan::new(E::KIND, None).limit(self.batch);
        loop {
            let page = self.mapper.store().scan(&scan).await?;
            for (key, _) in &page.items {
                let Some(id) = E::Id::from_key_name(key.name()) else {
                    tracing::warn!(key = %key, "compactor: not an id of this kind; skipped");
                    continue;
                };
                match self
                    .mapper
                    .compact_in_batches::<E>(&id, self.batch, self.rounds)
                    .await
                {
                    Ok(done) => report.add(&done),
                    Err(e) => {
                        report.entities += 1;
                        report.failures += 1;
                        tracing::warn!(key = %key, error = %e, "compactor: entity failed");
                    }
                }
            }
            match page.next {
                Some(cursor) => scan.cursor = Some(cursor),
                None => break,
            }
        }
        tracing::info!(
            kind = E::KIND,
            entities = report.entities,
            shards_folded = report.shards_folded,
            commits = report.commits,
            conflicts = report.conflicts,
            failures = report.failures,
            "compaction sweep"
        );
        Ok(report)
    }
}

impl<E: Root, S: DocumentStore + 'static> Compactor<E, S> {
    /// Runs a sweep now and then every `interval` (measured from the end of one sweep to
    /// the start of the next) on a tokio task, until [`CompactorHandle::shutdown`]. A
    /// failed sweep is logged and retried at the next tick.
    /// Dropping the handle stops the task too (after its current store call).
    #[must_use = "dropping the handle stops the compactor"]
    pub fn spawn(self, interval: Duration) -> CompactorHandle {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(async move { self.sweep_every(interval, stopped).await });
        CompactorHandle {
            worker: Worker { stop, task },
        }
    }

    /// Sweeps now and then every `interval` until `stopped` changes (or its sender is
    /// gone); the totals. A failed sweep is logged and counted, and the next one goes on.
    pub(crate) async fn sweep_every(
        &self,
        interval: Duration,
        mut stopped: watch::Receiver<bool>,
    ) -> CompactionReport {
        let mut total = CompactionReport::default();
        loop {
            tokio::select! {
                biased;
                _ = stopped.changed() => break,
                sweep = self.run_once() => match sweep {
                    Ok(report) => total.add(&report),
                    Err(e) => {
                        total.failures += 1;
                        tracing::warn!(kind = E::KIND, error = %e, "compaction sweep failed");
                    }
                },
            }
            tokio::select! {
                _ = stopped.changed() => break,
                () = tokio::time::sleep(interval) => {}
            }
        }
        total
    }
}

impl<E, S: fmt::Debug> fmt::Debug for Compactor<E, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compactor")
            .field("kind", &std::any::type_name::<E>())
            .field("mapper", &self.mapper)
            .field("batch", &self.batch)
            .field("rounds", &self.rounds)
            .finish()
    }
}

/// The running task of [`Compactor::spawn`].
#[derive(Debug)]
pub struct CompactorHandle {
    worker: Worker<CompactionReport>,
}

/// A background task and the channel that stops it, for the handles of this crate's
/// workers.
#[derive(Debug)]
pub(crate) struct Worker<R> {
    pub(crate) stop: watch::Sender<bool>,
    pub(crate) task: JoinHandle<R>,
}

impl<R> Worker<R> {
    /// Tells the task to stop and waits for its answer (`what` names it in errors).
    pub(crate) async fn shutdown(self, what: &str) -> Result<R> {
        // An error only means the task has already ended (it then holds the receiver no
        // more); joining it below reports how.
        let _ = self.stop.send(true);
        self.task
            .await
            .map_err(|e| crate::Error::backend(what.to_owned(), e))
    }
}

impl CompactorHandle {
    /// Stops the compactor and waits for it; answers the totals of all its sweeps. A
    /// sweep in progress is abandoned between two store calls, which is safe (module
    /// docs): at most its current commit is applied. Dropping this future (or the
    /// handle) stops the task as well, without waiting for it.
    pub async fn shutdown(self) -> Result<CompactionReport> {
        self.worker.shutdown("compactor task").await
    }
}
