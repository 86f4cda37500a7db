use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    #[shardable(fold = union)]
    voters: Vec<u64>,
}

fn main() {}
