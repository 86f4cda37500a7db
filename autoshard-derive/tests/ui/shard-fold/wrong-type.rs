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
    fn fold_votes(a: u8, b: u8) -> u8 {
        a + b
    }
}

fn main() {}
