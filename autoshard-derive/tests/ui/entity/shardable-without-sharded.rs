use autoshard::prelude::*;

#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    #[shardable(neutral = 0, shards = 10)]
    votes: i64,
}

fn main() {}
