//! `Mapper::new` and the mapper's settings (retries, caches, coalescing, lanes, write
//! window) and accessors.

use super::write::{apply, write_ids};
use super::{A_CENTURY, DEFAULT_WRITE_WINDOW, Mapper, ReadCache};
use crate::metrics::Metrics;
use crate::retry::RetryPolicy;
use crate::store::DocumentStore;
use std::sync::Arc;
use std::time::Duration;

impl<S: DocumentStore> Mapper<S> {
    /// A mapper over `store` with the default [`RetryPolicy`] and fresh [`Metrics`].
    pub fn new(store: S) -> Self {
        Mapper {
            store,
            retry: RetryPolicy::default(),
            metrics: Metrics::new(),
            lanes: Some(Arc::new(write_ids::Lanes::new())),
            writers: Arc::default(),
            write_window: DEFAULT_WRITE_WINDOW,
            coalescer: Some(Arc::default()),
            reads: Some(Arc::default()),
            main_cache: apply::main_cache(),
            cache: None,
            released: Arc::default(),
            contended: super::group::key_group::one_shot::contended(),
        }
    }

    /// The same mapper with a read cache (off by default): loads answer from documents
    /// read at most [`ReadCache::staleness`] before, with every write this mapper (and
    /// any mapper sharing the cache) confirmed folded in, so a process always reads its
    /// own writes, and changes of other processes appear within the bound. A refill that
    /// read the store before a newer write or invalidation never replaces the newer
    /// value. See [`ReadCache`] for exactly what a cached load may return.
    ///
    /// Off by default because it changes what a load promises: without it, a load sees
    /// every write completed anywhere before it was called.
    ///
    /// ```
    /// use autoshard::prelude::*;
    /// use std::time::Duration;
    ///
    /// #[autoshard::sharded]
    /// #[derive(Entity, Debug, Clone)]
    /// struct Question {
    ///     #[id]
    ///     id: u64,
    ///     text: String,
    ///     #[shardable(shards = 10, fold = sum)]
    ///     votes: i64,
    /// }
    ///
    /// impl Question {
    ///     #[shard_method]
    ///     fn vote_up(&mut self) {
    ///         self.votes += 1;
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// use autoshard::ReadCache;
    ///
    /// let db = Mapper::new(MemoryStore::new())
    ///     .with_read_cache(ReadCache::new(Duration::from_millis(100)));
    /// db.insert(&mut Question::new(1, "Cached?".into(), 0)).await?;
    /// assert_eq!(db.load::<Question>(&1).await?.votes, 0); // read, and cached
    /// db.apply(&1, Question::vote_up).await?;
    /// assert_eq!(db.load::<Question>(&1).await?.votes, 1); // from the cache, with the vote
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_read_cache(mut self, cache: ReadCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The read cache, if the mapper has one.
    pub fn read_cache(&self) -> Option<&ReadCache> {
        self.cache.as_ref()
    }

    /// The same mapper with shared reads on (the default) or off. With them, concurrent
    /// loads of one entity through this mapper and its clones share one read of its
    /// documents; every load is still answered by a read that started after it was
    /// called, so it sees every write completed before (its own ones too). Turn them
    /// off to model independent clients, one read per load.
    ///
    /// ```
    /// use autoshard::Mapper;
    /// use autoshard::store::MemoryStore;
    ///
    /// let one_read_per_load = Mapper::new(MemoryStore::new()).with_shared_reads(false);
    /// # let _ = one_read_per_load;
    /// ```
    #[must_use]
    pub fn with_shared_reads(mut self, on: bool) -> Self {
        self.reads = on.then(Arc::default);
        self
    }

    /// The same mapper with write coalescing on (the default) or off. With it,
    /// concurrent saves of one sharded property of one entity through this mapper and its
    /// clones fold their changes into one commit while a commit of that property is in
    /// flight (group commit): each save returns when the commit holding its change is
    /// answered, with its error if it failed (the change then stays in the entity, as
    /// after any failed save). A save that finds no commit in flight sends at once, so
    /// coalescing adds no latency without contention. It applies to saves that change
    /// one statically sharded property and no unsharded field; others commit as before.
    ///
    /// ```
    /// use autoshard::Mapper;
    /// use autoshard::store::MemoryStore;
    ///
    /// let one_commit_per_save = Mapper::new(MemoryStore::new()).with_coalescing(false);
    /// # let _ = one_commit_per_save;
    /// ```
    #[must_use]
    pub fn with_coalescing(mut self, on: bool) -> Self {
        self.coalescer = on.then(Arc::default);
        self
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
    /// use autoshard::Mapper;
    /// use autoshard::store::MemoryStore;
    ///
    /// let independent = Mapper::new(MemoryStore::new()).with_shard_lanes(false);
    /// # let _ = independent;
    /// ```
    #[must_use]
    pub fn with_shard_lanes(mut self, on: bool) -> Self {
        self.lanes = on.then(|| Arc::new(write_ids::Lanes::new()));
        self
    }

    /// The same mapper with another write window (default [`DEFAULT_WRITE_WINDOW`], 10
    /// minutes): how long a shard document remembers the writes it applied, and so how
    /// long after its first attempt a save that failed with an unknown outcome
    /// ([`crate::Error::Backend`], a dropped future) can still be saved again exactly
    /// once. Later, the save fails with [`crate::Error::Expired`] instead. A longer window
    /// costs space only in documents written by many processes within it; one longer than
    /// a hundred years counts as a hundred years.
    ///
    /// ```
    /// use autoshard::Mapper;
    /// use autoshard::store::MemoryStore;
    /// use std::time::Duration;
    ///
    /// let db = Mapper::new(MemoryStore::new()).with_write_window(Duration::from_secs(3600));
    /// assert_eq!(db.write_window(), Duration::from_secs(3600));
    /// ```
    #[must_use]
    pub fn with_write_window(mut self, window: Duration) -> Self {
        self.write_window = window.min(A_CENTURY);
        self
    }

    /// How long shard documents remember the writes they applied.
    pub fn write_window(&self) -> Duration {
        self.write_window
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
