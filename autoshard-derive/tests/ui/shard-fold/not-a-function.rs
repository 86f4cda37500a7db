use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    #[shardable(neutral = 0)]
    votes: i64,
}

impl Question {
    #[shard_fold]
    const fold_votes: i64 = 0;
}

fn main() {}
