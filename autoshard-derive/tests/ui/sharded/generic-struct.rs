use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity)]
struct Counter<T> {
    #[id]
    id: u64,
    #[shardable(neutral = 0)]
    hits: i64,
    extra: T,
}

fn main() {}
