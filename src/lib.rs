//! autoshard: annotation-driven sharding of hot-spot data objects in NoSQL document
//! stores, after the AutoShard paper (WebDB 2014). See the README for a tour.
//!
//! An entity is a struct with `#[derive(Entity)]`. A property that many clients update at
//! once (a vote counter) is marked `#[shardable]`; `#[autoshard::sharded]` on the struct
//! adds the hidden *shadow* that records this object's unsaved change of each such
//! property, `#[shard_method]` methods update the aggregate and the shadow together, and
//! a `#[shard_fold]` function combines shard values.
//!
//! ```
//! use autoshard::prelude::*;
//!
//! #[autoshard::sharded]                 // above the derive: adds the shadow fields
//! #[derive(Entity, Debug, Clone)]
//! pub struct Question {
//!     #[id]
//!     pub id: u64,
//!     pub text: String,
//!     pub author: String,
//!     #[shardable(neutral = 0, shards = 10)]
//!     pub votes: i64,
//! }
//!
//! impl Question {
//!     #[shard_method]
//!     pub fn vote_up(&mut self) {
//!         self.votes += 1;
//!     }
//!
//!     #[shard_fold]
//!     pub fn fold_votes(a: i64, b: i64) -> i64 {
//!         a + b
//!     }
//! }
//!
//! // `#[autoshard::sharded]` generates `Question::new` with every field in order.
//! let mut q = Question::new(42, "How do you plan to improve education?".into(), "Phil R".into(), 76);
//! q.vote_up();
//! assert_eq!(q.votes, 77); // the aggregate the application sees
//!
//! // What a save would fold into one shard: the change since load, not the total.
//! let change = q.shadow_value(0).unwrap();
//! assert_eq!(change, serde_json::json!(1));
//! assert_eq!(Question::PROPERTIES[0].stored_as, "shard_votes");
//! ```
//!
//! # Constructing a sharded entity
//! The shadow fields are hidden, so a sharded struct is built either with the generated
//! constructor (`Question::new(id, text, author, votes)`, every user field in declaration
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

pub use autoshard_runtime::*;

#[doc(hidden)]
pub use autoshard_runtime::__private;

pub use autoshard_derive::{shard_fold, shard_method, sharded, Entity};

/// Everything an application needs: `use autoshard::prelude::*;`.
pub mod prelude {
    pub use autoshard_derive::{shard_fold, shard_method, sharded, Entity};
    pub use autoshard_runtime::{DocumentStore, Entity, Error, Key, Result};
}
