use autoshard::prelude::*;

/// An alias the macro cannot see through: the compiler reports it, once.
type Title = String;

#[autoshard::sharded]
#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    #[shardable(shards = 10, fold = sum)]
    title: Title,
}

fn main() {}
