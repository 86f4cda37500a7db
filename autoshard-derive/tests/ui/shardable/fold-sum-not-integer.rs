use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    #[shardable(shards = 10, fold = sum)]
    title: String,
}

fn main() {}
