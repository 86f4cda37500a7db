//! `Board`: a sharded entity with three properties and three folds (sum, max, union),
//! static and dynamic shards, shared by the facade's tests that need more than a counter.

use autoshard::prelude::*;
use std::collections::BTreeSet;

/// Three sharded properties with three different folds: sum (built in: the store merges
/// it), max and set union (functions: read and compare-and-set).
#[autoshard::sharded]
#[derive(Entity, Debug, Clone, PartialEq)]
#[entity(kind = "Scoreboard")]
pub struct Board {
    #[id]
    pub id: String,
    pub title: String,
    pub note: Option<String>,
    #[shardable(shards = 4, fold = sum)]
    pub score: i64,
    #[shardable(neutral = 0)]
    pub peak: u64,
    #[shardable(neutral = BTreeSet::new(), shards = 3)]
    pub tags: BTreeSet<String>,
}

impl Board {
    #[shard_method]
    pub fn add(&mut self, delta: i64) {
        self.score += delta;
    }

    #[shard_method]
    pub fn observe(&mut self, value: u64) {
        self.peak = self.peak.max(value);
    }

    /// Returns whether the tag was new to the aggregate (the second run's answer).
    #[shard_method]
    pub fn tag(&mut self, tag: &str) -> bool {
        self.tags.insert(tag.to_owned())
    }

    /// Refuses to take the score below zero; on the (neutral) shadow that can panic.
    #[shard_method]
    pub fn add_checked(&mut self, delta: i64) {
        assert!(self.score + delta >= 0, "score would go negative");
        self.score += delta;
    }

    #[shard_fold]
    pub fn fold_peak(a: u64, b: u64) -> u64 {
        a.max(b)
    }

    #[shard_fold(tags)]
    pub fn union(mut a: BTreeSet<String>, b: BTreeSet<String>) -> BTreeSet<String> {
        a.extend(b);
        a
    }
}
