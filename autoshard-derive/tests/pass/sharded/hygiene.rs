// Generated code must name only `::core`, `::std` and `::autoshard::__private`: these
// local items shadow the prelude names an unqualified path would pick up.
#![allow(dead_code, non_camel_case_types)]
#![no_implicit_prelude]

extern crate autoshard;
extern crate std;

use std::string::String;

struct Result;
struct Ok;
struct Err;
struct Option;
struct Some;
struct None;
struct Vec;
struct Box;
struct Clone;
struct Default;
struct Document;
struct Value;
struct Entity;
struct serde;
struct serde_json;
mod core {}

#[::autoshard::sharded]
#[derive(::autoshard::Entity)]
struct Question {
    #[id]
    id: u64,
    text: String,
    #[shardable(neutral = 0, shards = 10)]
    votes: i64,
}

impl Question {
    #[::autoshard::shard_method]
    fn vote_up(&mut self, by: i64) -> i64 {
        self.votes += by;
        self.votes
    }

    #[::autoshard::shard_fold]
    fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }
}

pub fn main() {
    let mut q = Question::new(1, String::new(), 0);
    let _ = q.vote_up(2);
}
