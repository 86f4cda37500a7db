//! [`Maintainer`]: the one background worker of an entity kind, with one shutdown
//! handle: compaction of dynamic shards (the [`Compactor`]'s sweeps) and adaptive shard
//! counts ([`Adaptive`]), each on its own schedule, on one tokio task.
//!
//! # Adaptive shard counts
//! Every [`Adaptive::interval`] the maintainer reads the per-entity counters of its
//! mapper ([`crate::Metrics::entities`]: the static-shard save attempts and conflicts of
//! each entity this process writes) and, for each entity of its kind, the rate of the
//! last interval:
//! - **hot**: a conflict rate above [`Adaptive::target`];
//! - **cold**: fewer save attempts per second than [`Adaptive::cold_below`] and a
//!   conflict rate under a quarter of the target;
//! - anything between is *steady*, which resets both streaks.
//!
//! After [`Adaptive::grow_after`] hot intervals in a row the entity's count doubles; after
//! [`Adaptive::shrink_after`] cold ones it halves, or drops to the annotation's `min` when
//! no save came at all. Counts stay within the annotation's `min` and `max`
//! (`#[shardable(shards = 1, min = 1, max = 64)]`). For [`Adaptive::hold`] after a change
//! the entity is left alone (its counters reflect the old layout and the transition), and
//! the band between cold and hot keeps a count that brought the conflict rate under the
//! target from shrinking while the load lasts, so the count does not oscillate. Every
//! change is a [`Mapper::reshard`]; the shards a shrink retires are drained then, and
//! deleted by a later [`Mapper::drain`] the maintainer runs once the write window has
//! passed.
//!
//! Adaptive counts are **off** unless [`Maintainer::adapt`] turns them on: a reshard
//! writes to the store and changes what every load reads, the signal is this process's
//! own saves (a maintainer in each of several processes sees only its own conflicts, and
//! [`Adaptive::hold`] is per process), and saves through a built-in fold never conflict,
//! so they give no signal. A kind whose hot spots are known is better served by its
//! annotation; turn adaptation on for kinds whose hot spots come and go.

use crate::compaction::{CompactionReport, Compactor, Worker};
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::{EntityId, Key};
use crate::mapper::Mapper;
use crate::metrics::MetricsSnapshot;
use crate::store::DocumentStore;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The policy of adaptive shard counts (module docs). Build it from
/// [`Adaptive::default`] and the setters.
///
/// ```
/// use autoshard::maintenance::Adaptive;
/// use std::time::Duration;
///
/// let policy = Adaptive::default()
///     .target(0.02)
///     .interval(Duration::from_millis(500));
/// assert_eq!(policy.target_rate(), 0.02);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Adaptive {
    target: f64,
    interval: Duration,
    grow_after: u32,
    shrink_after: u32,
    cold_below: f64,
    hold: Duration,
}

impl Default for Adaptive {
    /// Grow above 5% conflicts for 2 s in a row, shrink after 30 s under one save per
    /// second, look every second, leave an entity alone for 5 s after a change.
    fn default() -> Self {
        Adaptive {
            target: 0.05,
            interval: Duration::from_secs(1),
            grow_after: 2,
            shrink_after: 30,
            cold_below: 1.0,
            hold: Duration::from_secs(5),
        }
    }
}

impl Adaptive {
    /// The conflict rate (conflicts per save attempt, 0 to 1) above which an entity is
    /// hot.
    #[must_use]
    pub fn target(mut self, rate: f64) -> Self {
        self.target = if rate.is_finite() {
            rate.clamp(0.0, 1.0)
        } else {
            0.05
        };
        self
    }

    /// How often the counters are read (at least 10 ms).
    #[must_use]
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval.max(Duration::from_millis(10));
        self
    }

    /// How many hot intervals in a row double the count (at least 1).
    #[must_use]
    pub fn grow_after(mut self, intervals: u32) -> Self {
        self.grow_after = intervals.max(1);
        self
    }

    /// How many cold intervals in a row halve the count (at least 1).
    #[must_use]
    pub fn shrink_after(mut self, intervals: u32) -> Self {
        self.shrink_after = intervals.max(1);
        self
    }

    /// Save attempts per second under which an entity is cold.
    #[must_use]
    pub fn cold_below(mut self, per_second: f64) -> Self {
        self.cold_below = if per_second.is_finite() {
            per_second.max(0.0)
        } else {
            1.0
        };
        self
    }

    /// How long an entity is left alone after its count changed.
    #[must_use]
    pub fn hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// The target conflict rate.
    #[must_use]
    pub fn target_rate(&self) -> f64 {
        self.target
    }

    /// What the counters of one entity over one interval say.
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52 in practice
    fn classify(&self, delta: &MetricsSnapshot) -> Heat {
        let rate = delta.conflict_rate();
        let per_second = delta.attempts as f64 / self.interval.as_secs_f64();
        if rate > self.target {
            Heat::Hot
        } else if delta.attempts == 0 {
            Heat::Idle
        } else if per_second < self.cold_below && rate < self.target / 4.0 {
            Heat::Cold
        } else {
            Heat::Steady
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Heat {
    Hot,
    Steady,
    Cold,
    Idle,
}

/// What a [`Maintainer`] did, summed over its runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MaintenanceReport {
    /// The compaction sweeps.
    pub compaction: CompactionReport,
    /// Entities whose count adaptation raised.
    pub grown: u64,
    /// Entities whose count adaptation lowered.
    pub shrunk: u64,
    /// Reshards and drains that failed (logged; tried again later).
    pub failures: u64,
}

/// The background worker of kind `E` (module docs): compaction, adaptive shard counts,
/// or both, on one task.
///
/// ```
/// use autoshard::maintenance::{Adaptive, Maintainer};
/// use autoshard::prelude::*;
/// use std::time::Duration;
///
/// #[autoshard::sharded]
/// #[derive(Entity, Debug, Clone)]
/// struct Question {
///     #[id]
///     id: u64,
///     #[shardable(neutral = 0, shards = 1, max = 16)]
///     votes: i64,
/// }
///
/// impl Question {
///     #[shard_method]
///     fn vote_up(&mut self) {
///         self.votes += 1;
///     }
///
///     #[shard_fold]
///     fn fold_votes(a: i64, b: i64) -> i64 {
///         a + b
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> autoshard::Result<()> {
/// let db = Mapper::new(MemoryStore::new());
/// db.insert(&mut Question::new(1, 0)).await?;
/// let handle = Maintainer::<Question, _>::new(db.clone())
///     .compact_every(Duration::from_secs(60))
///     .adapt(Adaptive::default())
///     .spawn();
/// db.update(&1, Question::vote_up).await?;
/// let report = handle.shutdown().await?;
/// assert_eq!(report.failures, 0);
/// # Ok(())
/// # }
/// ```
pub struct Maintainer<E, S> {
    mapper: Mapper<S>,
    compaction: Option<(Compactor<E, S>, Duration)>,
    adaptive: Option<Adaptive>,
    _kind: PhantomData<fn() -> E>,
}

impl<E: Root, S: DocumentStore + Clone + 'static> Maintainer<E, S> {
    /// A maintainer of kind `E` over `mapper` that does nothing until told to.
    pub fn new(mapper: Mapper<S>) -> Self {
        Maintainer {
            mapper,
            compaction: None,
            adaptive: None,
            _kind: PhantomData,
        }
    }

    /// Sweeps the kind's dynamic shards (a [`Compactor`] with its defaults) at start and
    /// then every `interval`, measured from the end of one sweep to the start of the
    /// next.
    #[must_use]
    pub fn compact_every(mut self, interval: Duration) -> Self {
        self.compaction = Some((Compactor::new(self.mapper.clone()), interval));
        self
    }

    /// Sweeps with this compactor (its batch and rounds) instead.
    #[must_use]
    pub fn compactor(mut self, compactor: Compactor<E, S>, interval: Duration) -> Self {
        self.compaction = Some((compactor, interval));
        self
    }

    /// Adapts the shard counts of the kind's entities by `policy` (module docs).
    #[must_use]
    pub fn adapt(mut self, policy: Adaptive) -> Self {
        self.adaptive = Some(policy);
        self
    }

    /// Runs the maintenance on a tokio task until [`MaintenanceHandle::shutdown`] (or
    /// until the handle is dropped).
    #[must_use = "dropping the handle stops the maintainer"]
    pub fn spawn(self) -> MaintenanceHandle {
        let (stop, stopped) = watch::channel(false);
        let Maintainer {
            mapper,
            compaction,
            adaptive,
            ..
        } = self;
        let task = tokio::spawn(async move {
            let compacting = {
                let stopped = stopped.clone();
                async move {
                    match compaction {
                        Some((compactor, interval)) => {
                            compactor.sweep_every(interval, stopped).await
                        }
                        None => CompactionReport::default(),
                    }
                }
            };
            let adapting = {
                let mut stopped = stopped.clone();
                async move {
                    let mut report = MaintenanceReport::default();
                    let Some(policy) = adaptive else {
                        return report;
                    };
                    let mut controller = Controller::<E>::new(policy);
                    let mut ticks = tokio::time::interval(controller.policy.interval);
                    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        tokio::select! {
                            biased;
                            _ = stopped.changed() => break,
                            _ = ticks.tick() => {}
                        }
                        tokio::select! {
                            biased;
                            _ = stopped.changed() => break,
                            () = controller.tick(&mapper, &mut report) => {}
                        }
                    }
                    report
                }
            };
            let (compaction, mut report) = tokio::join!(compacting, adapting);
            report.compaction = compaction;
            report
        });
        MaintenanceHandle {
            worker: Worker { stop, task },
        }
    }
}

impl<E, S: fmt::Debug> fmt::Debug for Maintainer<E, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Maintainer")
            .field("kind", &std::any::type_name::<E>())
            .field("mapper", &self.mapper)
            .field(
                "compaction",
                &self.compaction.as_ref().map(|(_, every)| every),
            )
            .field("adaptive", &self.adaptive)
            .finish()
    }
}

/// The running task of [`Maintainer::spawn`].
#[derive(Debug)]
pub struct MaintenanceHandle {
    worker: Worker<MaintenanceReport>,
}

impl MaintenanceHandle {
    /// Stops the maintainer and waits for it; answers what it did. Work in progress is
    /// abandoned between two store calls, which every step allows (a compaction commit
    /// or a reshard step is applied or not; the next run finishes it).
    pub async fn shutdown(self) -> Result<MaintenanceReport> {
        self.worker.shutdown("maintenance task").await
    }
}

/// What the controller remembers of one entity.
#[derive(Debug)]
struct Track {
    last: MetricsSnapshot,
    hot: u32,
    cold: u32,
    /// Whether every cold interval of the streak had no save at all.
    idle: bool,
    changed: Option<Instant>,
    /// The count it set last (`None`: not known).
    shards: Option<u32>,
    /// When the shards a shrink retired can be deleted.
    drain_at: Option<Instant>,
}

/// The adaptive loop's state: one [`Track`] per entity of kind `E` seen in the metrics.
struct Controller<E> {
    policy: Adaptive,
    tracks: HashMap<Key, Track>,
    _kind: PhantomData<fn() -> E>,
}

impl<E: Root> Controller<E> {
    fn new(policy: Adaptive) -> Self {
        Controller {
            policy,
            tracks: HashMap::new(),
            _kind: PhantomData,
        }
    }

    /// One look at the counters, and the reshards and drains they call for.
    async fn tick<S: DocumentStore>(&mut self, mapper: &Mapper<S>, report: &mut MaintenanceReport) {
        let Some(bounds) = crate::mapper::shard_bounds::<E>() else {
            return;
        };
        let now = Instant::now();
        let mut gone = Vec::new();
        for (key, snapshot) in mapper.metrics().entities() {
            if key.kind() != E::KIND || key.parent().is_some() {
                continue;
            }
            let Some(id) = E::Id::from_key_name(key.name()) else {
                continue;
            };
            let track = self.tracks.entry(key.clone()).or_insert_with(Track::new);
            let heat = self.policy.classify(&snapshot.since(&track.last));
            track.last = snapshot;
            if track.drain_at.is_some_and(|at| at <= now) {
                match mapper.drain::<E>(&id).await {
                    Ok(0) => track.drain_at = None,
                    Ok(_) => track.drain_at = Some(now + mapper.write_window() / 4),
                    Err(e) => {
                        report.failures += 1;
                        tracing::warn!(key = %key, error = %e, "maintenance: drain failed");
                    }
                }
            }
            let Some(grow) = track.observe(heat, &self.policy, now) else {
                continue;
            };
            match track
                .resize::<E, S>(mapper, &id, grow, bounds, &self.policy)
                .await
            {
                Ok(Some(grown)) if grown => report.grown += 1,
                Ok(Some(_)) => report.shrunk += 1,
                Ok(None) => {}
                Err(Error::NotFound { .. }) => gone.push(key),
                Err(e) => {
                    report.failures += 1;
                    tracing::warn!(key = %key, error = %e, "maintenance: reshard failed");
                }
            }
        }
        for key in gone {
            self.tracks.remove(&key);
        }
    }
}

impl Track {
    fn new() -> Self {
        Track {
            last: MetricsSnapshot::default(),
            hot: 0,
            cold: 0,
            idle: true,
            changed: None,
            shards: None,
            drain_at: None,
        }
    }

    /// Adds one interval of `heat` to the streaks: `Some(true)` to grow, `Some(false)` to
    /// shrink, `None` to leave the count.
    fn observe(&mut self, heat: Heat, policy: &Adaptive, now: Instant) -> Option<bool> {
        if self
            .changed
            .is_some_and(|at| now.duration_since(at) < policy.hold)
        {
            (self.hot, self.cold, self.idle) = (0, 0, true);
            return None;
        }
        match heat {
            Heat::Hot => (self.hot, self.cold, self.idle) = (self.hot + 1, 0, true),
            Heat::Cold | Heat::Idle => {
                self.hot = 0;
                self.cold += 1;
                self.idle &= heat == Heat::Idle;
            }
            Heat::Steady => (self.hot, self.cold, self.idle) = (0, 0, true),
        }
        if self.hot >= policy.grow_after {
            Some(true)
        } else if self.cold >= policy.shrink_after {
            Some(false)
        } else {
            None
        }
    }

    /// Doubles the count (`grow`) or halves it (to `min` after idle intervals only),
    /// within `bounds`: `Some(grown)` when it changed it.
    async fn resize<E: Root, S: DocumentStore>(
        &mut self,
        mapper: &Mapper<S>,
        id: &E::Id,
        grow: bool,
        (min, max): (u32, u32),
        policy: &Adaptive,
    ) -> Result<Option<bool>> {
        let idle = self.idle;
        (self.hot, self.cold, self.idle) = (0, 0, true);
        let current = match self.shards {
            Some(shards) => shards,
            None => mapper.shards::<E>(id).await?,
        };
        self.shards = Some(current);
        let wanted = if grow {
            current.saturating_mul(2)
        } else if idle {
            min
        } else {
            current / 2
        }
        .clamp(min, max);
        if wanted == current {
            return Ok(None);
        }
        tracing::info!(
            kind = E::KIND,
            from = current,
            to = wanted,
            "maintenance: reshard"
        );
        if let Err(e) = mapper.reshard::<E>(id, wanted).await {
            self.shards = None;
            return Err(e);
        }
        self.changed = Some(Instant::now());
        self.shards = Some(wanted);
        if wanted < current {
            let keep = mapper.write_window() + mapper.write_window() / 4;
            // Never, for an interval too long to count to.
            self.drain_at = Instant::now().checked_add(keep.saturating_add(policy.interval));
        }
        Ok(Some(wanted > current))
    }
}
