use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    #[shardable(shards = 10, fold = max)]
    best: i64,
}

fn main() {}
