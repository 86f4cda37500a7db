//! autoshard: annotation-driven sharding of hot-spot data objects in NoSQL document
//! stores, after the AutoShard paper (WebDB 2014). The README has the tour,
//! `docs/guide.md` the consistency model and the limits, `docs/results.md` the benchmark
//! figures.
//!
//! A property that many clients update at once (a vote counter) becomes a bottleneck in a
//! store with optimistic, per-document transactions. autoshard stores it as shard
//! documents: a save folds the local change into one shard, a load folds all shards.
//! No update is lost, counted twice, or brought back after a delete.
//!
//! # Start here
//! 1. Annotate a struct: [`derive(Entity)`](macro@Entity) with an `#[id]` field,
//!    [`#[autoshard::sharded]`](macro@sharded) above it, `#[shardable(..)]` on the hot
//!    property, its fold as `fold = sum | max | min | union` or a
//!    [`#[shard_fold]`](macro@shard_fold) function, and
//!    [`#[shard_method]`](macro@shard_method)s that change it. `use autoshard::prelude::*`
//!    brings all of them.
//! 2. Make a [`Mapper`] over a store from [`store`]: [`store::MemoryStore`]
//!    (embedded), [`store::RedisStore`] (feature `redis`, on by default),
//!    `store::PostgresStore` (feature `postgres`).
//! 3. Call its operations: [`insert`](Mapper::insert), [`load`](Mapper::load),
//!    [`save`](Mapper::save), [`update`](Mapper::update), [`apply`](Mapper::apply) (the
//!    hot path: one round trip, no read), [`delete`](Mapper::delete);
//!    [`Mapper::entities`] gives them for one kind, with closures that infer. Every
//!    failure is an [`Error`].
//!
//! These pages show what the features you built with enable: `cargo doc -p autoshard
//! --all-features --no-deps --open` builds them all (PostgreSQL and TLS included), as
//! docs.rs does.
//!
//! ```
//! use autoshard::prelude::*;
//!
//! #[autoshard::sharded]                 // above the derive: adds the hidden shadow fields
//! #[derive(Entity, Debug, Clone)]
//! pub struct Question {
//!     #[id]
//!     pub id: u64,
//!     pub text: String,
//!     #[shardable(shards = 10, fold = sum)] // 10 shard documents, summed by the store
//!     pub votes: i64,
//! }
//!
//! impl Question {
//!     #[shard_method]
//!     pub fn vote_up(&mut self) {
//!         self.votes += 1;
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> autoshard::Result<()> {
//! let db = Mapper::new(MemoryStore::new());
//! // `#[autoshard::sharded]` generates `Question::new` with every field in order.
//! db.insert(&mut Question::new(42, "How do you plan to improve education?".into(), 76)).await?;
//!
//! // Two clients load, vote and save at once: each save folds its own change (+1) into
//! // one shard, so neither overwrites the other.
//! let (mut a, mut b) = (db.load::<Question>(&42).await?, db.load::<Question>(&42).await?);
//! a.vote_up();
//! b.vote_up();
//! db.save(&mut a).await?;
//! db.save(&mut b).await?;
//!
//! // The hot path: the change goes to the store without reading the entity first.
//! db.apply(&42, |q: &mut Question| q.vote_up()).await?;
//! assert_eq!(db.load::<Question>(&42).await?.votes, 79);
//! # Ok(())
//! # }
//! ```
//!
//! # Then
//! - Entity groups (children stored beside their root, spread over sub-groups):
//!   [`group`] and [`Child`].
//! - Dynamic sharding (`#[shardable]` without `shards`) and its compaction: [`compaction`].
//! - Changing a stored entity's shard count online: [`Mapper::reshard`]; adapting it to
//!   the load: [`maintenance`].
//! - Keyed, at-most-once updates: [`Mapper::update_once`]; many entities in one read:
//!   [`Mapper::load_many`]; a bounded-staleness cache of loads: [`ReadCache`].
//! - Retries and their limits: [`RetryPolicy`]; counters: [`metrics`] (and the `tracing`
//!   spans and `metrics` feature in the guide's "Observability", `docs/guide.md`).
//!
//! # Constructing a sharded entity
//! The shadow fields are hidden, so a sharded struct is built either with the generated
//! constructor (`Question::new(id, text, votes)`, every user field in declaration
//! order; rename it with `#[autoshard::sharded(constructor = with_fields)]` or turn it off
//! with `constructor = false`) or, when the struct derives `Default`, with struct update
//! syntax: `Question { id: 42, votes: 76, ..Default::default() }`.
//!
//! # Limits
//! - The body of a `#[shard_method]` runs twice; it should change only sharded fields
//!   (a change to another field happens twice), and its arguments must be `Clone`.
//! - A `#[shardable]` field's type must be `Clone` and serde `Serialize` +
//!   `Deserialize`; its fold must be commutative and associative with `neutral` as
//!   identity.
//! - Entities are structs with named fields and no generic parameters.
//! - An id field is an integer, a `String` or a `uuid::Uuid` (with `uuid` in the
//!   application's own dependencies, feature `serde`).
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use autoshard_runtime::{
    CacheStats, Child, DEFAULT_CACHE_CAPACITY, DEFAULT_WRITE_WINDOW, DYNAMIC_SHARDS_WARNING,
    Entities, Entity, EntityId, Error, FieldError, Key, KeyDecodeError, KeyedOutcome, Mapper,
    ReadCache, ReshardReport, Result, RetryPolicy,
};
#[allow(deprecated)]
pub use autoshard_runtime::{KindReshard, Once};

pub use autoshard_runtime::{
    compaction, entity, group, layout, maintenance, metrics, retry, store,
};

/// The `redis` crate the Redis store is built on, for
/// [`RedisStore::from_client`](store::RedisStore::from_client) and connection settings
/// beyond a URL.
#[cfg(feature = "redis")]
pub use autoshard_runtime::redis;

#[cfg(feature = "conformance")]
pub use autoshard_runtime::conformance;

#[doc(hidden)]
pub use autoshard_runtime::__private;

// Every item of the runtime also stays reachable at the root (`autoshard::MemoryStore`,
// `autoshard::Document`, ...), as it was before the facade was curated, so that code
// written against those paths keeps compiling. The docs show only the curated paths.
#[doc(hidden)]
pub use autoshard_runtime::*;

/// `#[derive(Entity)]`: maps a struct with named fields to a document.
///
/// - Exactly one field is `#[id]` (an integer, `String` or `uuid::Uuid`).
/// - The kind is the struct's name; `#[entity(kind = "...")]` overrides it.
/// - Every other field is a property of the main document, converted with serde; a field
///   whose type is written `Option<_>` may be absent from a document (it reads as `None`),
///   any other absent field is a [`FieldError`].
/// - `#[shardable]` fields need [`macro@sharded`] above the derive.
/// - Entity groups ([`group`]): `#[entity(group_shards = K)]` on a root spreads its group
///   over `K` sub-groups (an integer literal, at least 1; default 1). A child kind says
///   `#[entity(parent = Root)]` and marks the field holding its root's id `#[parent]` (its
///   type must be `Root`'s `#[id]` type); it then implements [`Child`], and the mapper's
///   child operations (`insert`, `load_child`, `children`, `update_children`,
///   `delete_group`, ...) place and find it in its root's sub-groups.
///
/// ```
/// use autoshard::prelude::*;
///
/// #[derive(Entity)]
/// #[entity(group_shards = 8)]
/// struct Question {
///     #[id]
///     id: u64,
///     text: String,
/// }
///
/// #[derive(Entity, Debug)]
/// #[entity(parent = Question)]
/// struct Response {
///     #[id]
///     id: uuid::Uuid,
///     #[parent]
///     question: u64,
///     text: String,
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> autoshard::Result<()> {
/// let db = Mapper::new(MemoryStore::new());
/// db.insert(&mut Question { id: 42, text: "Education?".into() }).await?;
/// for text in ["Crucial", "Ads"] {
///     let mut r = Response { id: uuid::Uuid::new_v4(), question: 42, text: text.into() };
///     db.insert(&mut r).await?; // into one of Question 42's 8 sub-groups, at random
/// }
/// assert_eq!(db.children::<Response>(&42).await?.len(), 2); // the union of all 8
/// # Ok(())
/// # }
/// ```
///
/// ```
/// use autoshard::prelude::*;
///
/// #[derive(Entity, Debug, PartialEq)]
/// #[entity(kind = "Person")]
/// struct User {
///     #[id]
///     id: u32,
///     name: String,
///     nickname: Option<String>,
/// }
///
/// let user = User { id: 7, name: "Ann".into(), nickname: None };
/// let doc = user.to_document().unwrap();
/// assert_eq!(doc.len(), 2); // name and nickname; the id is in the key
/// assert_eq!(user.key().encode(), "{Person:7}");
/// assert_eq!(User::from_document(7, &doc).unwrap(), user);
/// ```
pub use autoshard_derive::Entity;

/// `#[autoshard::sharded]`: rewrites an entity struct so its `#[shardable]` fields can be
/// sharded. Write it *above* `#[derive(Entity)]`.
///
/// For every `#[shardable(neutral = EXPR, shards = N)]` field `f` it adds a hidden field
/// `__autoshard_shard_f: Shadow<T>`, the unsaved change of `f` since the last load or
/// save (the paper's `shard_votes`), and one `__autoshard_state: EntityState` field for
/// the mapper; they have the struct's visibility, are `#[doc(hidden)]`, and get
/// `#[serde(skip)]` when the struct derives serde's traits. `neutral` is the value the
/// fold leaves unchanged (0 for a sum), `shards = N` asks for `N` static shards, and
/// without `shards` the property is sharded dynamically.
///
/// `neutral` is any expression of the field's type, not only a literal: a set's identity
/// is `BTreeSet::new()` (the `#[shard_fold]` example below), a struct's may be
/// `Stats::default()`. It is evaluated each time a neutral value is needed (a fresh
/// shadow, an empty shard), so it must give the same value every time: a function call
/// is fine when it is pure, and the macro cannot check that a value is the fold's
/// identity, so a wrong one shows as wrong totals, never as an error.
///
/// **Dynamic sharding needs compaction.** A dynamic property gets a new shard document
/// per save (no write ever contends), and every load reads all of them until compaction
/// folds them back: run [`Mapper::compact`](crate::Mapper::compact) yourself, or a
/// [`compaction::Compactor`] or [`maintenance::Maintainer`] in the background. Without
/// one, loads grow slower with every save, and the mapper logs a warning (`tracing`,
/// once per process) when a load reads more than
/// [`DYNAMIC_SHARDS_WARNING`] dynamic shards of one
/// entity. Pick `shards = N` unless writes must never conflict or the number of
/// writers is unbounded.
///
/// `N` is
/// the count at insert: each stored entity records its own, which
/// [`Mapper::reshard`](crate::Mapper::reshard) changes online within the bounds
/// `min = ..` (1 by default) and `max = ..` ([`entity::DEFAULT_MAX_SHARDS`], or `N` when more),
/// e.g. `#[shardable(shards = 4, min = 1, max = 256, fold = sum)]`; at most 4,096.
///
/// It also generates a constructor `new` taking every field you wrote, in order; rename
/// it with `#[autoshard::sharded(constructor = other_name)]` or leave it out with
/// `constructor = false`. A struct that derives `Default` can also be built with
/// `..Default::default()`.
///
/// Every sharded field needs a fold: a [`macro@shard_fold`] function, or a built-in
/// `fold = sum | max | min | union` that the store applies itself, in one round trip
/// without a read or a conflict ([`store::DocumentStore::merge`]): `sum` on integer fields
/// (exact over the type's range, [`Error::Overflow`] beyond it: the store checks each
/// shard's sum when it folds a save in, the load checks the total), `max` and `min` on
/// integers, `union` on `BTreeSet`/`HashSet` fields (of strings or integers on the
/// store; other values go through read and compare-and-set with the same fold). `sum`
/// and `union` need no `neutral` (0 and the empty set).
///
/// ```
/// use autoshard::prelude::*;
/// use std::collections::BTreeSet;
///
/// #[autoshard::sharded]
/// #[derive(Entity)]
/// struct Question {
///     #[id]
///     id: u64,
///     #[shardable(shards = 10, fold = sum)]
///     votes: i64,
///     #[shardable(neutral = 0, shards = 4, fold = max)]
///     best_score: u32,
///     #[shardable(fold = union)] // dynamic: a new shard per save, needs compaction
///     tags: BTreeSet<String>,
/// }
///
/// impl Question {
///     #[shard_method]
///     fn vote(&mut self, score: u32) {
///         self.votes += 1;
///         self.best_score = self.best_score.max(score);
///     }
/// }
///
/// let mut q = Question::new(1, 0, 0, BTreeSet::new());
/// q.vote(7);
/// assert_eq!((q.votes, q.best_score), (1, 7));
/// ```
///
/// ```
/// use autoshard::prelude::*;
///
/// #[autoshard::sharded]
/// #[derive(Entity, Default)]
/// struct Page {
///     #[id]
///     url: String,
///     #[shardable(neutral = 0)] // no `shards`: dynamic sharding (compact it)
///     visits: u64,
/// }
///
/// impl Page {
///     #[shard_fold]
///     fn fold_visits(a: u64, b: u64) -> u64 {
///         a + b
///     }
/// }
///
/// let a = Page::new("/".into(), 3);
/// let b = Page { url: "/".into(), visits: 3, ..Default::default() };
/// assert_eq!(a.visits, b.visits);
/// assert_eq!(Page::PROPERTIES[0].static_shards(), None);
/// ```
pub use autoshard_derive::sharded;

/// `#[shard_method]`: a `&mut self` method whose changes to sharded fields are recorded
/// in the shadows as well as applied to the aggregate (paper, Figure 4).
///
/// The signature stays the same. The body runs twice: first with every sharded field
/// swapped for its shadow (the neutral value if untouched), then on the aggregate; the
/// method returns the second run's value. Hence:
/// - every argument must be `Clone` (the first run gets a clone);
/// - the body should change only sharded fields: a change to any other field, or any
///   other side effect, happens twice. [`Mapper::apply`](crate::Mapper::apply) and
///   [`Mapper::update_once`](crate::Mapper::update_once) refuse a method that changes
///   another field ([`Error::Invalid`], nothing written); on an
///   entity you loaded, [`Mapper::save`](crate::Mapper::save) stores the field as the
///   method left it, changed once per run. Change other fields outside the method;
/// - after a call every sharded field's shadow counts as touched.
///
/// If the body panics during the first run, the aggregates are swapped back before the
/// panic propagates.
///
/// ```
/// use autoshard::prelude::*;
///
/// #[autoshard::sharded]
/// #[derive(Entity)]
/// struct Question {
///     #[id]
///     id: u64,
///     #[shardable(neutral = 0, shards = 10)]
///     votes: i64,
/// }
///
/// impl Question {
///     /// Adds `n` votes and returns the new total.
///     #[shard_method]
///     fn vote(&mut self, n: i64) -> i64 {
///         self.votes += n;
///         self.votes
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
/// db.insert(&mut Question::new(1, 76)).await?;
/// let (mut a, mut b) = (db.load::<Question>(&1).await?, db.load::<Question>(&1).await?);
/// assert_eq!(a.vote(2), 78); // the aggregate: what this copy has seen, plus its change
/// assert_eq!(b.vote(1), 77);
/// db.save(&mut a).await?; // folds +2 (a's shadow) into one shard, not 78
/// db.save(&mut b).await?; // folds +1
/// assert_eq!(db.load::<Question>(&1).await?.votes, 79);
/// # Ok(())
/// # }
/// ```
pub use autoshard_derive::shard_method;

/// `#[shard_fold]`: the fold of a sharded property, an associated function
/// `fn(T, T) -> T` without `self`. It must be commutative and associative, with the
/// property's `neutral` value as identity; it need not be a sum (max, min, set union...).
///
/// It folds the property its name gives: `fold_votes` folds `votes`; a function with
/// another name says which with `#[shard_fold(votes)]`. Every sharded property has
/// exactly one fold.
///
/// ```
/// use std::collections::BTreeSet;
/// use autoshard::prelude::*;
///
/// #[autoshard::sharded]
/// #[derive(Entity)]
/// struct Post {
///     #[id]
///     id: u64,
///     #[shardable(neutral = BTreeSet::new(), shards = 4)]
///     likers: BTreeSet<String>,
/// }
///
/// impl Post {
///     #[shard_fold(likers)]
///     fn union(mut a: BTreeSet<String>, b: BTreeSet<String>) -> BTreeSet<String> {
///         a.extend(b);
///         a
///     }
///
///     #[shard_method]
///     fn like(&mut self, who: String) {
///         self.likers.insert(who);
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> autoshard::Result<()> {
/// let db = Mapper::new(MemoryStore::new());
/// db.insert(&mut Post::new(1, BTreeSet::new())).await?;
/// for who in ["ann", "bob", "ann"] {
///     db.apply(&1, |p: &mut Post| p.like(who.into())).await?;
/// }
/// let likers = db.load::<Post>(&1).await?.likers; // `union` folded over the 4 shards
/// assert_eq!(likers, BTreeSet::from(["ann".to_string(), "bob".to_string()]));
/// # Ok(())
/// # }
/// ```
pub use autoshard_derive::shard_fold;

/// Everything an application needs: `use autoshard::prelude::*;`.
pub mod prelude {
    pub use autoshard_derive::{Entity, shard_fold, shard_method, sharded};
    pub use autoshard_runtime::store::{DocumentStore, MemoryStore};
    #[cfg(feature = "postgres")]
    pub use autoshard_runtime::store::{PostgresOptions, PostgresStore};
    #[cfg(feature = "redis")]
    pub use autoshard_runtime::store::{RedisOptions, RedisStore};
    pub use autoshard_runtime::{Child, Entity, Error, Key, Mapper, Result, RetryPolicy};
}

/// Runs the README's Rust example as a doctest, so it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
