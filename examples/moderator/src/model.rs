//! The application's entities, written exactly as a user of `autoshard` writes them.
//!
//! - [`Question`]: the hot spot. Its `votes` are sharded over 10 static shards with the
//!   built-in `sum` fold, so a vote is one merge into one random shard (no read, no
//!   conflict) instead of a transaction on the question's document.
//! - [`FoldFnQuestion`]: the same with a `#[shard_fold]` function, folded by read and
//!   compare-and-set on a shard (the paper's scheme), for the hot-spot benchmark.
//! - [`AdaptiveQuestion`]: the same, starting at one shard, for adaptive shard counts.
//! - [`NaiveQuestion`]: the same question without annotations, the paper's naive baseline
//!   (every vote is an optimistic read-modify-write of the one document).
//! - [`Response`]: an answer to a question.
//! - [`Board`]: the web app's list of questions, a set sharded with the built-in `union`
//!   fold, so asking questions never contends.
//! - [`SingleQuestion`] and [`SingleResponse`]: the web app's questions on naive
//!   documents (`serve --naive`): every vote is an optimistic read-modify-write of the
//!   question's one votes document.
//!
//! This module holds data and the methods that change it, nothing that talks to a store.

use autoshard::prelude::*;
use std::collections::BTreeSet;

/// How many shards a question's `votes` are spread over (the paper's setting).
pub const VOTE_SHARDS: u32 = 10;

/// How many sub-groups a question's entity group (its responses) is spread over.
pub const RESPONSE_SUB_GROUPS: u32 = 8;

/// A question users vote up, with its votes sharded (paper, Figure 2), and the root of an
/// entity group of [`Response`]s spread over 8 sub-groups (paper, section 2.3).
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(group_shards = 8)]
pub struct Question {
    /// The question's number.
    #[id]
    pub id: u64,
    /// What is asked.
    pub text: String,
    /// Who asked.
    pub author: String,
    /// Up-votes so far: the sum of the 10 shards, which the store adds up itself.
    #[shardable(shards = 10, fold = sum)]
    pub votes: i64,
}

impl Question {
    /// One more vote. Runs on the shadow and on the aggregate (`#[shard_method]`).
    #[shard_method]
    pub fn vote_up(&mut self) {
        self.votes += 1;
    }

    /// `n` more votes (fewer for a negative `n`): what merging a duplicate moves.
    #[shard_method]
    pub fn add_votes(&mut self, n: i64) {
        self.votes += n;
    }
}

/// [`Question`] with its fold written as a function: the store cannot apply it, so a
/// vote reads a shard, folds, and commits expecting the version read.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
pub struct FoldFnQuestion {
    /// The question's number.
    #[id]
    pub id: u64,
    /// What is asked.
    pub text: String,
    /// Up-votes so far: the fold of the 10 shards with [`FoldFnQuestion::fold_votes`].
    #[shardable(neutral = 0, shards = 10)]
    pub votes: i64,
}

impl FoldFnQuestion {
    /// One more vote.
    #[shard_method]
    pub fn vote_up(&mut self) {
        self.votes += 1;
    }

    /// Votes add up.
    #[shard_fold]
    #[must_use]
    pub fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }
}

/// [`FoldFnQuestion`] starting at one shard, for adaptive shard counts: a reshard (by
/// hand or by `autoshard::maintenance`) gives it 1 to 64.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
pub struct AdaptiveQuestion {
    /// The question's number.
    #[id]
    pub id: u64,
    /// Up-votes so far.
    #[shardable(neutral = 0, shards = 1, min = 1, max = 64)]
    pub votes: i64,
}

impl AdaptiveQuestion {
    /// One more vote.
    #[shard_method]
    pub fn vote_up(&mut self) {
        self.votes += 1;
    }

    /// Votes add up.
    #[shard_fold]
    #[must_use]
    pub fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }
}

/// The same question without sharding: `votes` lives in the question's document.
#[derive(Entity, Debug, Clone)]
pub struct NaiveQuestion {
    /// The question's number.
    #[id]
    pub id: u64,
    /// What is asked.
    pub text: String,
    /// Who asked.
    pub author: String,
    /// Up-votes so far.
    pub votes: i64,
}

impl NaiveQuestion {
    /// One more vote.
    pub fn vote_up(&mut self) {
        self.votes += 1;
    }
}

/// A user's response to a question: a child in the question's entity group, placed in one
/// of its 8 sub-groups at random. See [`crate::responses`] for the one place that writes
/// and reads them.
#[derive(Entity, Debug, Clone)]
#[entity(parent = Question)]
pub struct Response {
    /// Unique per response: `<question>-<user>-<n>`.
    #[id]
    pub id: String,
    /// The question answered: the root of this response's entity group.
    #[parent]
    pub question: u64,
    /// Who answered.
    pub author: String,
    /// The answer.
    pub text: String,
}

/// The web app's list of questions: their ids, a set spread over 4 shards and folded
/// with the built-in `union` (the store adds an id to one shard; a read unites them).
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
pub struct Board {
    /// The board's number ([`Board::MAIN`] for the web app's sharded questions).
    #[id]
    pub id: u64,
    /// The ids of the questions asked.
    #[shardable(shards = 4, fold = union)]
    pub questions: BTreeSet<u64>,
}

impl Board {
    /// The id of the board of the web app's sharded questions.
    pub const MAIN: u64 = 1;

    /// Lists one more question.
    #[shard_method]
    pub fn list(&mut self, question: u64) {
        self.questions.insert(question);
    }
}

/// [`Question`] on naive documents, for the web app's `--naive` mode: its votes are one
/// document (a single shard), so every vote is an optimistic read-modify-write of it.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
pub struct SingleQuestion {
    /// The question's number.
    #[id]
    pub id: u64,
    /// What is asked.
    pub text: String,
    /// Who asked.
    pub author: String,
    /// Up-votes so far, in one document.
    #[shardable(shards = 1, fold = sum)]
    pub votes: i64,
}

impl SingleQuestion {
    /// One more vote.
    #[shard_method]
    pub fn vote_up(&mut self) {
        self.votes += 1;
    }

    /// `n` more votes (fewer for a negative `n`): what merging a duplicate moves.
    #[shard_method]
    pub fn add_votes(&mut self, n: i64) {
        self.votes += n;
    }
}

/// [`Response`] to a [`SingleQuestion`].
#[derive(Entity, Debug, Clone)]
#[entity(parent = SingleQuestion)]
pub struct SingleResponse {
    /// Unique per response.
    #[id]
    pub id: String,
    /// The question answered.
    #[parent]
    pub question: u64,
    /// Who answered.
    pub author: String,
    /// The answer.
    pub text: String,
}

/// The `n`-th of the 16 sample questions' texts (cycled for larger `n`).
#[must_use]
pub fn sample_text(n: u64) -> String {
    const TEXTS: [&str; 16] = [
        "How do you plan to improve education?",
        "What will you do about public transport?",
        "Should the library open on Sundays?",
        "How will you fund the new hospital?",
        "What is your position on bike lanes?",
        "Will you publish the city budget online?",
        "How do you plan to create jobs?",
        "What about affordable housing?",
        "Should school lunches be free?",
        "How will you reduce air pollution?",
        "Will you keep the night buses?",
        "What is your plan for the old harbour?",
        "How will you support small businesses?",
        "Should the city switch to open-source software?",
        "How will you make streets safer?",
        "What would you change first?",
    ];
    let i = usize::try_from(n).unwrap_or(0) % TEXTS.len();
    TEXTS[i].to_owned()
}
