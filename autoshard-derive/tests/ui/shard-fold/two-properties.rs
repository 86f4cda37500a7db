use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    #[shardable(neutral = 0)]
    votes: i64,
    #[shardable(neutral = 0)]
    views: i64,
}

impl Question {
    #[shard_fold(votes, views)]
    fn sum(a: i64, b: i64) -> i64 {
        a + b
    }
}

fn main() {}
