//! Entity groups of the runtime's tests, declared with the real macros through the facade.

use autoshard::prelude::*;

/// A root whose group is spread over 8 sub-groups.
#[derive(Entity, Debug, Clone, PartialEq)]
#[entity(group_shards = 8)]
pub struct Topic {
    #[id]
    pub id: u64,
    pub title: String,
}

/// A child of a `Topic`.
#[derive(Entity, Debug, Clone, PartialEq)]
#[entity(parent = Topic)]
pub struct Reply {
    #[id]
    pub id: u64,
    #[parent]
    pub topic: u64,
    pub text: String,
    pub likes: i64,
}

/// A root with one group (`K = 1`): any of its children can change together.
#[derive(Entity, Debug, Clone, PartialEq)]
pub struct Thread {
    #[id]
    pub id: u64,
}

/// A child of a `Thread`.
#[derive(Entity, Debug, Clone, PartialEq)]
#[entity(parent = Thread)]
pub struct Post {
    #[id]
    pub id: u64,
    #[parent]
    pub thread: u64,
    pub points: i64,
}
