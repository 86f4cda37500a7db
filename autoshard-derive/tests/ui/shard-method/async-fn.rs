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
    #[shard_method]
    async fn vote_up(&mut self) {
        self.votes += 1;
    }

    #[shard_fold]
    fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }
}

fn main() {}
