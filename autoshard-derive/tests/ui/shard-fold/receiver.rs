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
    fn fold_votes(&self, other: i64) -> i64 {
        self.votes + other
    }
}

fn main() {}
