use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    views: i64,
    #[shardable(neutral = 0)]
    votes: i64,
}

impl Question {
    #[shard_fold]
    fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }

    // `views` is a field, but not a `#[shardable]` one.
    #[shard_fold]
    fn fold_views(a: i64, b: i64) -> i64 {
        a.max(b)
    }
}

fn main() {}
