use autoshard::prelude::*;

/// An alias the macro cannot see through: the compiler reports it, once.
type Voters = Vec<u64>;

#[autoshard::sharded]
#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    #[shardable(fold = union)]
    voters: Voters,
}

fn main() {}
