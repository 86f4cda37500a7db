//! The [`Mapper`]: entities in, documents out. It drives the hooks of
//! [`Entity`](crate::Entity) and talks to a [`DocumentStore`]; it holds no connection of
//! its own.
//!
//! The folders follow the path a call takes:
//! - `read/`: `load`, batch loads and aggregates, what a read found and its fold
//!   (`snapshot`), shared reads, the read cache, and the dynamic-shard half of loads;
//! - `write/`: `insert` and `delete`, `save` and `apply`, `update`, keyed operations
//!   (`update_once`), the static- and dynamic-shard writers, coalescing, the choice of a
//!   shard, pending changes with their write ids, and adoption;
//! - `reshape/`: layout changes, resharding and compaction;
//! - `group/`: the entity-group operations.
//!
//! Here, what they all share: `config` (the constructor and settings), `layout` (the one
//! owner of where every document lives), `codec` (documents into entities, folds, decode
//! errors), `attempt` (optimistic attempts, retries, paging), `relay` (one leader per
//! slot, for coalesced saves and shared reads) and `entities` (the [`Entities`] handle of
//! one kind). The arguments behind the write path, the read cache and resharding are in
//! the repository's `docs/design/`.
//!
//! One vote, `db.apply(&42, Question::vote_up)` of a `fold = sum` property, crosses nine
//! files:
//! 1. `write/apply.rs`: `apply` takes the main document from its small cache (or reads
//!    it), and `codec.rs` decodes it (`from_main`); the change runs; `save` (in
//!    `write/save.rs`) asks `layout/` for the static properties;
//! 2. `write/static_shard.rs`: `resend_single` finds no change in doubt; `write/write_ids.rs`
//!    stages the shadow's change as pending (`stage`);
//! 3. `static_shard.rs`: `save_single` hands the change to `write/coalesce.rs`
//!    (`Coalescer::submit`), which leads the property through `relay.rs` (`Relay::join`);
//! 4. `static_shard.rs`: `send_batch` takes a shard, its lane and writer from
//!    `write/shard_choice.rs` (`hold`), fixes the write id (`Writer::begin`, in
//!    `write_ids.rs`) and the claims (`coalesce::take_claims`), and `merge_fixed` sends
//!    one [`Merge`](crate::store::Merge) to the store.
//!
//! One uncached load, `db.load::<Question>(&42)`, crosses seven:
//! 1. `read/load.rs`: `load` plans one lookup (`first_read`: the main document and the
//!    static shards `layout/` names, and the dynamic-shard scans of `read/dynamic.rs`);
//!    `read_entity_with` runs it once per entity at a time through `read/shared.rs` (led
//!    through `relay.rs`), reading again while the recorded layout lists shards it did not
//!    read;
//! 2. `read/dynamic.rs`: `extra_shards` reads whatever further scan pages there are;
//! 3. `read/snapshot.rs`: the [`Snapshot`](read::snapshot::Snapshot) found decides which
//!    documents count (`folding`) and folds each sharded property (`values`);
//! 4. `codec.rs`: `from_main` decodes the main document and each folded value is set.

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
mod relay;

pub use entities::Entities;
pub use group::key_group::{GroupTransaction, KeyGroup, KeyGroupBuilder, DEFAULT_LEASE};
pub use read::cache::{CacheStats, ReadCache, DEFAULT_CACHE_CAPACITY};
pub use read::dynamic::DYNAMIC_SHARDS_WARNING;
pub use reshape::compact::{CompactionReport, DEFAULT_BATCH, DEFAULT_ROUNDS};
pub use reshape::reshard::ReshardReport;
pub use write::keyed::KeyedOutcome;
pub use write::write_ids::DEFAULT_WRITE_WINDOW;

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
    /// Shard lanes, shared by clones (see `write/shard_choice.rs`); `None` when turned off.
    lanes: Option<Arc<write::shard_choice::Lanes>>,
    /// Writers for saves that hold no lane, shared by clones (see `write/write_ids.rs`).
    writers: Arc<write::write_ids::Pool>,
    /// How long shard documents remember a writer's last write (see `write/write_ids.rs`).
    write_window: Duration,
    /// Properties with a commit in flight and the saves queued behind it, shared by
    /// clones (see `write/coalesce.rs`); `None` when coalescing is off.
    coalescer: Option<Arc<write::coalesce::Coalescer>>,
    /// Loads in flight per entity and the loads waiting for the next read, shared by
    /// clones (see `read/shared.rs`); `None` when reads are not shared.
    reads: Option<Arc<read::shared::SharedReads>>,
    /// Main documents `apply` reuses, shared by clones (see `apply`).
    main_cache: write::apply::MainCache,
    /// Loaded entities reused for a bounded time (see `read/cache.rs`); `None` unless given one.
    cache: Option<ReadCache>,
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
