use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    #[shardable(neutral = 0, shards = 10)]
    votes: i64,
}

impl Question {
    #[shard_method]
    fn vote_up(&mut self) {
        self.votes += 1;
    }
}

fn main() {}
