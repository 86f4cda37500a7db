#[autoshard::sharded]
#[derive(Debug)]
struct Question {
    #[id]
    id: u64,
    #[shardable(neutral = 0)]
    votes: i64,
}

fn main() {}
