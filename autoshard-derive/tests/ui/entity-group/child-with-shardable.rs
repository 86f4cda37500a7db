use autoshard::prelude::*;

#[derive(Entity)]
#[entity(group_shards = 8)]
struct Question {
    #[id]
    id: u64,
}

#[autoshard::sharded]
#[derive(Entity)]
#[entity(parent = Question)]
struct Response {
    #[id]
    id: u64,
    #[parent]
    question: u64,
    #[shardable(neutral = 0, shards = 4)]
    likes: i64,
}

impl Response {
    #[shard_fold]
    fn fold_likes(a: i64, b: i64) -> i64 {
        a + b
    }
}

fn main() {}
