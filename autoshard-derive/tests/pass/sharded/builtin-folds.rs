//! Built-in folds: `sum` and `union` need no `neutral` (the type's default is theirs),
//! `max` and `min` take one; shard methods work on them as on any sharded field.
use autoshard::prelude::*;
use std::collections::{BTreeSet, HashSet};

#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
struct Question {
    #[id]
    id: u64,
    #[shardable(shards = 10, fold = sum)]
    votes: u32,
    #[shardable(neutral = i64::MIN, shards = 4, fold = max)]
    best: i64,
    #[shardable(neutral = u8::MAX, fold = min)]
    lowest: u8,
    #[shardable(shards = 2, fold = union)]
    tags: BTreeSet<String>,
    #[shardable(fold = union)]
    voters: HashSet<u64>,
}

impl Question {
    #[shard_method]
    fn vote(&mut self, user: u64, score: i64) {
        self.votes += 1;
        self.best = self.best.max(score);
        self.voters.insert(user);
    }
}

pub fn main() {
    let mut q = Question::new(1, 0, i64::MIN, u8::MAX, BTreeSet::new(), HashSet::new());
    q.vote(7, 3);
    assert_eq!((q.votes, q.best), (1, 3));
}
