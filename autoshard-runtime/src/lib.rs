//! The runtime of [autoshard](https://docs.rs/autoshard): document stores, the mapper
//! that loads sharded entities by folding their shards and saves them into one random
//! shard, and compaction of dynamic shards.
//!
//! Most users depend on the `autoshard` facade crate, which re-exports this crate and the
//! annotation macros.
//!
//! Layers, top down:
//! - [`entity`]: the contract generated code implements (`Entity`, shadows, state).
//! - [`Mapper`]: insert, load (fold), save (random shard), update with retries, delete,
//!   compaction of dynamic shards; [`compaction`] sweeps a kind with a [`Compactor`].
//! - [`store`]: the [`DocumentStore`] trait of raw operations, and its backends.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod compaction;
pub mod document;
pub mod entity;
pub mod error;
mod finite;
pub mod group;
pub mod key;
pub mod maintenance;
pub mod layout {
    //! Where the mapper puts an entity's documents, for inspecting a store (tests, tools,
    //! migrations). The mapper is the only code that decides placement (its `layout`
    //! module); these functions answer with the same keys it uses. The names of the
    //! derived kinds are not part of the API: build keys with these functions only.
    //!
    //! ```
    //! use autoshard::{layout, Key};
    //!
    //! let main = Key::new("Question", "42");
    //! let shard = layout::static_shard(&main, "votes", 3); // shard 3 of property `votes`
    //! assert!(!shard.same_group(&main)); // each static shard is a group of its own
    //! assert!(layout::compacted(&main).same_group(&layout::dynamic_group(&main)));
    //! ```
    pub use crate::mapper::layout::{
        compacted, dynamic_group, dynamic_shard, dynamic_shards_scan, static_shard,
        static_shards_scan, sub_group,
    };
}
#[doc(hidden)]
pub mod macro_support;
mod mapper;
pub mod metrics;
pub mod retry;
mod same_value;
pub mod store;
mod sync;

#[cfg(feature = "conformance")]
pub mod conformance;

/// The `redis` crate this one is built on, for [`RedisStore::from_client`] and
/// connection settings beyond a URL.
#[cfg(feature = "redis")]
pub use ::redis;
pub use compaction::{CompactionReport, Compactor, CompactorHandle};
pub use document::{Document, Value, Version, Versioned};
pub use entity::{DEFAULT_MAX_SHARDS, Entity, EntityState, Shadow, ShardedProperty, Sharding};
pub use error::{Error, FieldError, Result};
pub use group::{Child, Root};
pub use key::{EntityId, Key, KeyDecodeError};
pub use mapper::{
    CacheStats, DEFAULT_CACHE_CAPACITY, DEFAULT_WRITE_WINDOW, DYNAMIC_SHARDS_WARNING, Entities,
    KeyedOutcome, Mapper, ReadCache, ReshardReport,
};
#[allow(deprecated)]
pub use mapper::{KindReshard, Once};
pub use metrics::{Metrics, MetricsSnapshot};
pub use retry::{Backoff, RetryPolicy};
#[cfg(feature = "redis")]
pub use store::redis::{RedisOptions, RedisStore};
pub use store::{
    Commit, DocumentStore, Fold, LatencyStore, MemoryStore, Merge, Merged, Scan, ScanPage,
    Transaction, Write, WriteId,
};

/// What generated code names. Not public API: it may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::document::{Document, Value};
    pub use crate::entity::{
        Entity, EntityState, Shadow, ShardHooks, ShardedProperty, Sharding, default_max_shards,
        no_such_property,
    };
    pub use crate::error::FieldError;
    pub use crate::group::{Child, ParentId, Root};
    pub use crate::key::Key;
    pub use crate::macro_support::{
        HasShardedProperty, IntegerFold, IntegerProbe, MissingShardFold, OtherProbe, Probe,
        SetProbe, ShadowRun, ShardMethodArg, ShardedFields, StoreElement, UnionFold, decode,
        decode_field, encode, fold_max, fold_min, no_store_fold, plain_field, sharded_property,
    };
}
