//! Entities of the runtime's tests, declared with the real macros through the facade.

use autoshard::prelude::*;

/// A question whose votes are spread over 10 static shards (sum).
#[autoshard::sharded(constructor = false)]
#[derive(Entity, Debug, Clone, Default, PartialEq)]
pub struct Question {
    #[id]
    pub id: u64,
    pub text: String,
    #[shardable(neutral = 0, shards = 10)]
    pub votes: i64,
}

impl Question {
    /// A fresh question.
    pub fn new(id: u64, text: &str, votes: i64) -> Self {
        Question {
            id,
            text: text.to_owned(),
            votes,
            ..Default::default()
        }
    }

    #[shard_method]
    pub fn vote_up(&mut self) {
        self.votes += 1;
    }

    #[shard_fold]
    pub fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }
}

/// The unsharded twin: votes live in the main document (the paper's naive variant).
#[derive(Entity, Debug, Clone, PartialEq)]
pub struct NaiveQuestion {
    #[id]
    pub id: u64,
    pub text: String,
    pub votes: i64,
}

impl NaiveQuestion {
    pub fn vote_up(&mut self) {
        self.votes += 1;
    }
}

/// A dynamically sharded hit counter: every save adds a shard document.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
pub struct Counter {
    #[id]
    pub id: u64,
    #[shardable(neutral = 0)]
    pub hits: i64,
}

impl Counter {
    #[shard_method]
    pub fn hit(&mut self) {
        self.hits += 1;
    }

    #[shard_fold]
    pub fn fold_hits(a: i64, b: i64) -> i64 {
        a + b
    }
}

/// A bank account for key-group transfers: a plain count of transfers out, and a sharded
/// balance.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
pub struct Account {
    #[id]
    pub id: u64,
    pub transfers: u64,
    #[shardable(neutral = 0, shards = 4)]
    pub balance: i64,
}

impl Account {
    /// Adds `amount` (takes it out when negative).
    #[shard_method]
    pub fn deposit(&mut self, amount: i64) {
        self.balance += amount;
    }

    #[shard_fold]
    pub fn fold_balance(a: i64, b: i64) -> i64 {
        a + b
    }
}

/// A counter whose increments are store merges (`fold = sum`: one round trip, no read).
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
pub struct Tips {
    #[id]
    pub id: u64,
    #[shardable(shards = 4, fold = sum)]
    pub total: i64,
}

impl Tips {
    /// One more.
    #[shard_method]
    pub fn tip(&mut self) {
        self.total += 1;
    }
}
