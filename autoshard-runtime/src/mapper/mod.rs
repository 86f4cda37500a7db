//! The [`Mapper`]: entities in, documents out. It drives the hooks of
//! [`Entity`](crate::Entity) and talks to a [`DocumentStore`]; it holds no connection of
//! its own.
//!
//! The folders follow the path a call takes:
//! - `read/`: `load` (with its dynamic-shard half and its shared reads), batch loads and
//!   aggregates, what a read found and its fold (`snapshot`), and the read cache;
//! - `write/`: `insert` and `delete`, `save`, `apply`, `update`, keyed operations
//!   (`update_once`), the static-shard writer with its coalescing, the dynamic-shard
//!   writer, pending changes with their write ids and the shard lanes, and adoption;
//! - `reshape/`: layout changes, resharding and compaction;
//! - `group/`: the entity-group operations.
//!
//! Here, what they all share: `config` (the constructor and settings), `layout` (the one
//! owner of where every document lives), `codec` (documents into entities, folds, decode
//! errors), `attempt` (optimistic attempts, retries, paging) and `entities` (the
//! [`Entities`] handle of one kind). The hand-over of a lead from one call to the next,
//! on which coalesced saves and shared reads stand, is `crate::sync`'s, not the
//! mapper's. The arguments behind the write path, the read cache and resharding are in
//! the repository's `docs/design/`.
//!
//! One vote, `db.apply(&42, Question::vote_up)` of a `fold = sum` property, crosses six
//! mapper files:
//! 1. `write/apply.rs`: `apply` takes the main document from its small cache (or reads
//!    it), `codec.rs` decodes it (`from_main_reusing`), the change runs, and `save_as`
//!    (in `write/save.rs`) takes over;
//! 2. `write/save.rs`: `save_as` asks `layout.rs` for the static properties
//!    (`static_properties`), has `write/static_shard.rs` resend a change in doubt
//!    (`resend_single`: none), and stages the shadow's change as pending (`stage`, in
//!    `write/write_ids.rs`);
//! 3. `write/static_shard.rs`: `save_single` submits the change to the property's
//!    [`Coalescer`](write::coalesce::Coalescer); leading, `send_batch` holds a shard's
//!    lane and its writer (`hold`, in `write_ids.rs`), fixes the write id
//!    (`Writer::begin`) and the claims (`take_claims`), and `merge_fixed` sends one
//!    [`Merge`](crate::store::Merge) to the store; `confirmed` (in `write_ids.rs`) tells
//!    the read cache, when there is one.
//!
//! One uncached load, `db.load::<Question>(&42)`, crosses four:
//! 1. `read/load.rs`: `load` plans one lookup (`first_read`: the main document and the
//!    static shards `layout.rs` names, and the dynamic-shard scans); `read_entity_with`
//!    runs it, shared with concurrent loads, reading again while the recorded layout
//!    lists shards it did not read, and takes the further scan pages (`extra_shards`);
//! 2. `read/snapshot.rs`: the [`Snapshot`](read::snapshot::Snapshot) found decides which
//!    documents count (`folding`), folds each sharded property (`values`) and builds the
//!    entity (`assemble`);
//! 3. `codec.rs`: `with_values` decodes the main document (`from_main`) and sets each
//!    folded value.

// The constructor and settings, then the operations, in the order the docs of `Mapper`
// list them (rustdoc keeps source order): the everyday ones first, then batches and keyed
// updates, then entity groups and maintenance.
mod config;

mod read;
mod write;

mod entities;

mod group;
mod reshape;

// What the operations share.
mod attempt;
mod codec;
pub(crate) mod layout;

pub use entities::Entities;
pub use group::key_group::{DEFAULT_LEASE, GroupTransaction, KeyGroup, KeyGroupBuilder};
pub use read::cache::{CacheStats, DEFAULT_CACHE_CAPACITY, ReadCache};
pub use read::load::DYNAMIC_SHARDS_WARNING;
pub use reshape::compact::{CompactionReport, DEFAULT_BATCH, DEFAULT_ROUNDS};
pub use reshape::reshard::ReshardReport;
pub(crate) use reshape::reshard::shard_bounds;
pub use write::keyed::KeyedOutcome;
pub use write::write_ids::DEFAULT_WRITE_WINDOW;

/// The longest a duration the caller gives the mapper counts for (a write window, a read
/// cache's staleness, a key group's wait): a hundred years. A longer one, up to
/// `Duration::MAX` for "forever", counts as this, so that no deadline or sum of
/// durations the mapper computes from it overflows.
pub(crate) const A_CENTURY: std::time::Duration = std::time::Duration::from_hours(100 * 365 * 24);

/// The former name of [`KeyedOutcome`], which reads less like `std::sync::Once`.
#[deprecated(note = "renamed `KeyedOutcome`")]
pub type Once<R> = KeyedOutcome<R>;

/// The former name of [`ReshardReport`], named like the other reports.
#[deprecated(note = "renamed `ReshardReport`")]
pub type KindReshard = ReshardReport;

use crate::metrics::Metrics;
use crate::retry::RetryPolicy;
use crate::store::DocumentStore;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Persists [`Entity`](crate::Entity) values in a [`DocumentStore`], sharding hot properties as the
/// `AutoShard` paper describes (section 4): `load` folds all shards, `save` folds the local
/// change (the shadow) into one uniformly random shard, as a merge the store applies
/// itself for a built-in fold (`#[shardable(fold = sum)]`), or in an optimistic
/// transaction for a `#[shard_fold]` function.
///
/// Operations that take an id take it borrowed, in any form that turns into the id with
/// `to_owned`: `&42`, `&id`, and `"/"` (or `&string`) for a `String` id. The entity type
/// comes from a turbofish (`db.load::<Question>(&42)`), the binding (`let q: Question =
/// ...`) or the closure's argument (`|q: &mut Question|`); an id alone cannot name it,
/// since many kinds share an id type. [`Mapper::entities`] fixes the kind once, and then
/// closures infer.
///
/// Cloning is cheap when `S` is (an `Arc`, [`crate::MemoryStore`]); clones share the
/// [`Metrics`], the shard lanes, the coalescing of concurrent saves
/// ([`Mapper::with_coalescing`]) and the sharing of concurrent loads
/// ([`Mapper::with_shared_reads`]): share one mapper across the tasks of a process.
///
/// ```
/// use autoshard::prelude::*;
///
/// #[autoshard::sharded]
/// #[derive(Entity, Debug, Clone)]
/// struct Question {
///     #[id]
///     id: u64,
///     text: String,
///     #[shardable(neutral = 0, shards = 10)]
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
/// let mut question = Question::new(42, "Sharding?".into(), 76); // votes sharded over 10 shards
/// db.insert(&mut question).await?; // main document + 10 shards; shard 0 holds 76
///
/// let mut q: Question = db.load(&42).await?; // votes = fold of all shards
/// q.vote_up(); // aggregate 77, shadow +1
/// db.save(&mut q).await?; // folds +1 into ONE random shard; the main doc is unchanged
/// assert_eq!(db.load::<Question>(&42).await?.votes, 77);
/// assert_eq!(db.metrics().snapshot().commits, 1);
/// # Ok(())
/// # }
/// ```
///
/// # Errors, dropped futures, and running again
/// Every method can fail with [`crate::Error::Backend`] (the store failed) or be
/// cancelled by dropping its future (a timeout, a client gone). What is then stored, and
/// what to do, per method:
///
/// | Method | After an error or a dropped future |
/// |---|---|
/// | `load`, `children`, `load_child`, `child_key` | nothing was written; run it again |
/// | `save` | the entity keeps every change not known to be stored; **save the same entity again**: each change is stored exactly once (within the write window, [`Mapper::with_write_window`]) |
/// | `update` | its change may or may not be stored, and the entity holding it is gone; running `update` again may apply it twice. Use `update_once` when a change must not be applied twice |
/// | `update_once` | run it again with the same operation name: applied exactly once |
/// | `apply` | like `update`: its change may or may not be stored; use `update_once` when it must not be applied twice |
/// | `insert` | inserted or not (one commit; on a Redis Cluster, shard documents may be left that a later insert overwrites); running it again answers `AlreadyExists` if it was |
/// | `delete`, `delete_child`, `delete_group` | run it again: deleting what is gone is a no-op |
/// | `compact`, `compact_in_batches`, [`Compactor::run_once`](crate::compaction::Compactor::run_once), [`CompactorHandle::shutdown`](crate::compaction::CompactorHandle::shutdown) | each batch commits atomically; run it again |
/// | `update_children`, `update_child` | one commit in one sub-group: applied or not; like `update`, running it again may apply it twice |
pub struct Mapper<S = Arc<dyn DocumentStore>> {
    store: S,
    retry: RetryPolicy,
    metrics: Metrics,
    /// Shard lanes, shared by clones (see `write/write_ids.rs`); `None` when turned off.
    lanes: Option<Arc<write::write_ids::Lanes>>,
    /// Writers for saves that hold no lane, shared by clones (see `write/write_ids.rs`).
    writers: Arc<write::write_ids::Pool>,
    /// How long shard documents remember a writer's last write (see `write/write_ids.rs`).
    write_window: Duration,
    /// Properties with a commit in flight and the saves queued behind it, shared by
    /// clones (see `write/coalesce.rs`); `None` when coalescing is off.
    coalescer: Option<Arc<write::coalesce::Coalescer>>,
    /// Loads in flight per entity and the loads waiting for the next read, shared by
    /// clones (see `read/load.rs`); `None` when reads are not shared.
    reads: Option<Arc<read::load::SharedLoads>>,
    /// Main documents `apply` reuses, shared by clones (see `apply`).
    main_cache: write::apply::MainCache,
    /// Loaded entities reused for a bounded time (see `read/cache.rs`); `None` unless given one.
    cache: Option<ReadCache>,
    /// Told when a key group of this mapper or a clone is dissolved: the waiters for
    /// members in this process look again (see `group/key_group/queue.rs`).
    released: Arc<tokio::sync::Notify>,
    /// Members whose one-shot commit lately met a change, shared by clones (see
    /// `group/key_group/one_shot.rs`).
    contended: group::key_group::one_shot::Contended,
}

impl<S: Clone> Clone for Mapper<S> {
    fn clone(&self) -> Self {
        Mapper {
            store: self.store.clone(),
            retry: self.retry,
            metrics: self.metrics.clone(),
            lanes: self.lanes.clone(),
            writers: self.writers.clone(),
            write_window: self.write_window,
            coalescer: self.coalescer.clone(),
            reads: self.reads.clone(),
            main_cache: self.main_cache.clone(),
            cache: self.cache.clone(),
            released: self.released.clone(),
            contended: self.contended.clone(),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for Mapper<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapper")
            .field("store", &self.store)
            .field("retry", &self.retry)
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
    }
}
