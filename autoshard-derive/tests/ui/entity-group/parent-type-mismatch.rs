use autoshard::prelude::*;

#[derive(Entity)]
#[entity(group_shards = 8)]
struct Question {
    #[id]
    id: u64,
}

#[derive(Entity)]
#[entity(parent = Question)]
struct Response {
    #[id]
    id: u64,
    #[parent]
    question: String,
}

fn main() {}
