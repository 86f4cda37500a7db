use autoshard::prelude::*;

// A field named like the shadow `#[autoshard::sharded]` adds for `votes`.
#[autoshard::sharded]
#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    #[shardable(shards = 4, fold = sum)]
    votes: i64,
    __autoshard_shard_votes: i64,
}

fn main() {}
