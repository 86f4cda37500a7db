use autoshard::prelude::*;

#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
}

// Without the derive, the `#[parent]` field attribute must not add a second error.
#[autoshard::sharded]
struct Response {
    #[id]
    id: u64,
    #[parent]
    question: u64,
    #[shardable(neutral = 0)]
    likes: i64,
}

fn main() {}
