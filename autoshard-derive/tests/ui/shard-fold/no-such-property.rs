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
    // A typo: no sharded field is called `vote`.
    #[shard_fold]
    fn fold_vote(a: i64, b: i64) -> i64 {
        a + b
    }
}

fn main() {}
