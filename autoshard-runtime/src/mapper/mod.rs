//! The [`Mapper`]: entities in, documents out. It drives the hooks of [`Entity`](crate::Entity) and talks
//! to a [`DocumentStore`]; it holds no entity cache and no connection of its own.
//!
//! One module per operation: `insert` (and `delete`), `load`, `save`, `update`,
//! `compact`; dynamic shards (save, consistent reads) in `dynamic`; the operations on
//! children of entity groups in `children`. What they share, below them: `layout` (the one
//! owner of where every document lives), `attempt` (optimistic attempts, retries,
//! paging), `codec` (folding documents into entities, decode errors) and `lanes` (at
//! most one write per shard document at a time within a process).

mod attempt;
mod children;
mod codec;
mod compact;
mod dynamic;
mod insert;
mod lanes;
pub(crate) mod layout;
mod load;
mod save;
mod update;

pub use compact::{CompactionReport, DEFAULT_BATCH, DEFAULT_ROUNDS};

use crate::metrics::Metrics;
use crate::retry::RetryPolicy;
use crate::store::DocumentStore;
use std::fmt;
use std::sync::Arc;

/// Persists [`Entity`](crate::Entity) values in a [`DocumentStore`], sharding hot properties as the
/// `AutoShard` paper describes (section 4): `load` folds all shards, `save` folds the local
/// change (the shadow) into one uniformly random shard in an optimistic transaction.
///
/// Cloning is cheap when `S` is (an `Arc`, [`crate::MemoryStore`]); clones share the
/// [`Metrics`].
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
/// use autoshard::{Mapper, MemoryStore};
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
pub struct Mapper<S = Arc<dyn DocumentStore>> {
    store: S,
    retry: RetryPolicy,
    metrics: Metrics,
    /// Shard lanes, shared by clones (see `lanes`); `None` when turned off.
    lanes: Option<Arc<lanes::Lanes>>,
}

impl<S: DocumentStore> Mapper<S> {
    /// A mapper over `store` with the default [`RetryPolicy`] and fresh [`Metrics`].
    pub fn new(store: S) -> Self {
        Mapper {
            store,
            retry: RetryPolicy::default(),
            metrics: Metrics::new(),
            lanes: Some(Arc::new(lanes::Lanes::new())),
        }
    }

    /// The same mapper with another retry policy (metrics stay shared).
    #[must_use]
    pub fn with_retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// The same mapper with its shard lanes on (the default) or off. With lanes, the
    /// saves of this mapper and its clones fold into a given shard document one at a
    /// time and prefer shards no other task is writing, so writers of one process queue
    /// instead of conflicting; writers of different processes still meet in the
    /// store's optimistic commit. Turn them off to model fully independent clients (the
    /// paper's experiment does). Exactness never depends on them.
    ///
    /// ```
    /// use autoshard::{Mapper, MemoryStore};
    ///
    /// let independent = Mapper::new(MemoryStore::new()).with_shard_lanes(false);
    /// # let _ = independent;
    /// ```
    #[must_use]
    pub fn with_shard_lanes(mut self, on: bool) -> Self {
        self.lanes = on.then(|| Arc::new(lanes::Lanes::new()));
        self
    }

    /// The retry policy of optimistic transactions.
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.retry
    }

    /// Counters of the transactions this mapper and its clones ran.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The store underneath.
    pub fn store(&self) -> &S {
        &self.store
    }
}

impl<S: Clone> Clone for Mapper<S> {
    fn clone(&self) -> Self {
        Mapper {
            store: self.store.clone(),
            retry: self.retry,
            metrics: self.metrics.clone(),
            lanes: self.lanes.clone(),
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
