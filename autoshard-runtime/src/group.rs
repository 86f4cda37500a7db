//! Entity groups and entity-group sharding (paper, section 2.3): the [`Child`] contract and
//! the model the mapper's child operations follow. Nothing here talks to a store; the
//! operations are methods of [`crate::Mapper`].
//!
//! # Groups
//! A *root* entity (a `Question`) and the *children* that name it as parent (its
//! `Response`s) form an entity group: the unit a store commits atomically, with one commit
//! log, as in Cloud Datastore and Megastore. A hot group (many users answering one
//! heated question) is a hot spot, so entity-group sharding spreads the children of a root
//! over `K` *sub-groups* ([`crate::Entity::GROUP_SHARDS`], declared on the root with
//! `#[entity(group_shards = K)]`; `K = 1` is the plain group).
//!
//! # Documents
//! - The root stays where it is: `{Question:42}` (plus its property shards, if any).
//! - Sub-group `k` of the root has an anchor document `{Question:42/~group:k}`, its *commit
//!   log head*: every write to the sub-group (an insert, an entity-group transaction, a delete)
//!   commits together with a rewrite of the anchor, expecting the anchor's version it
//!   read. So two writes to one sub-group conflict, like two Datastore transactions on one
//!   entity group, while writes to different sub-groups do not.
//! - A child lives at `{Question:42/~group:k}/Response:7`, `k` chosen uniformly at random
//!   when it is inserted. On Redis every member of one sub-group shares the hash tag
//!   `{Question:42/~group:k}`, so an entity-group transaction runs in one slot of a Redis Cluster,
//!   while the `K` sub-groups of one root hash to different slots.
//! - The sub-group is not stored in the child: [`crate::Mapper::load_child`] reads the `K`
//!   candidate keys in one `get_many` and expects exactly one document.
//!
//! # What stays atomic, and what does not
//! Atomic (one optimistic commit, retried per the [`crate::RetryPolicy`], typed
//! [`crate::Error::Contention`] when retries run out):
//! - inserting one child (the child and its sub-group's anchor);
//! - [`crate::Mapper::update_children`]: reading several children **of one sub-group**,
//!   changing them, and committing all of them, expecting the versions read;
//! - deleting one child.
//!
//! Not atomic once `K > 1` (the price of sharding the group, as in the paper):
//! - a transaction over children that landed in different sub-groups: it is refused with
//!   [`crate::Error::Invalid`] rather than run non-atomically. With `K = 1` every child is
//!   in the one sub-group, so any set of children can be changed atomically;
//! - reading all children ([`crate::Mapper::children`]) is a union of one scan per
//!   sub-group: each child present for the whole read is returned exactly once, but the
//!   union is not a snapshot (a child inserted meanwhile may or may not be in it);
//! - child and root are never in one transaction (the root is its own group);
//! - deleting a root with its children ([`crate::Mapper::delete_group`]) deletes the
//!   root first, then each sub-group in its own commit: a crash leaves children without a
//!   root, and running it again finishes the job.
//!
//! Child ids must be unique per root (a UUID is the easy choice): an insert checks all `K`
//! candidate keys, but two concurrent inserts of one id into two sub-groups can both
//! commit; `load_child` and `children` then report [`crate::Error::Invalid`] naming both
//! keys rather than pick one.

//!
//! # Key groups: transactions across entity groups
//! An entity group commits atomically, but many changes span entities of different groups
//! (a user's ballot and a question's count, two questions merged into one). A
//! [`KeyGroup`] (G-Store: Das, Agrawal and El Abbadi, "G-Store: A Scalable Data Store for
//! Transactional Multi key Access in the Cloud", SoCC 2010) is formed at run time over
//! root entities of any kinds and ids ([`crate::Mapper::key_group`]); while it lives it
//! owns them, its transactions ([`GroupTransaction`]) are serializable and exactly once,
//! and every other write to its members fails with [`crate::Error::Grouped`]. The
//! argument, step by step, is in the module docs of `mapper/group/key_group/` (`mod.rs`
//! and `protocol.rs`).

pub use crate::mapper::{DEFAULT_LEASE, GroupTransaction, KeyGroup, KeyGroupBuilder};

use crate::entity::Entity;

/// A root entity: one that is not a child of an entity group. The mapper's `load`,
/// `save`, `update`, `delete` and `compact` take roots only; children are reached through
/// their root (`load_child`, `update_child`, ...), since they live in one of its
/// sub-groups. Implemented by `#[derive(Entity)]` for every entity without
/// `#[entity(parent = ...)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a root entity: a child entity lives in a sub-group of its root, not in a place of its own",
    label = "not a root entity",
    note = "reach a child through its root: `load_child`, `update_child`, `update_children`, `delete_child`, `children`"
)]
pub trait Root: Entity {}

/// A child entity: `#[entity(parent = Question)]` on the struct and `#[parent]` on the
/// field holding the parent's id. Implemented by `#[derive(Entity)]`.
pub trait Child: Entity {
    /// The root entity type whose group this child belongs to (entity groups have one
    /// level: the parent is a root, never another child; the derive checks this).
    type Parent: Entity;

    /// The id of the root this child belongs to (the `#[parent]` field).
    fn parent_id(&self) -> &<Self::Parent as Entity>::Id;
}

/// What generated code uses to check a `#[parent]` field: implemented only for `Id`
/// itself, so a field of another type fails with a message that says what to write.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "the `#[parent]` field must have the parent's `#[id]` type `{Id}`, not `{Self}`",
    label = "not the parent's id type `{Id}`",
    note = "a child's `#[parent]` field holds the id of its root entity"
)]
pub trait ParentId<Id> {
    /// The field's value as the parent's id.
    fn as_parent_id(&self) -> &Id;
}

impl<Id> ParentId<Id> for Id {
    fn as_parent_id(&self) -> &Id {
        self
    }
}
