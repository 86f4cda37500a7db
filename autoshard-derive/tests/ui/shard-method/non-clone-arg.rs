use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    #[shardable(neutral = 0)]
    votes: i64,
}

struct Ballot {
    weight: i64,
}

impl Question {
    #[shard_method]
    fn vote_with(&mut self, ballot: Ballot) {
        self.votes += ballot.weight;
    }

    #[shard_fold]
    fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }
}

fn main() {}
