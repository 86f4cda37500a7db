use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity)]
struct Question(u64, #[shardable(neutral = 0)] i64);

fn main() {}
