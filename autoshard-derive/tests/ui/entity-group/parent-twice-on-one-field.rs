use autoshard::prelude::*;

#[derive(Entity)]
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
    #[parent]
    question: u64,
}

fn main() {}
