use autoshard::prelude::*;

struct Question {
    id: u64,
}

#[derive(Entity)]
#[entity(parent = Question)]
struct Response {
    #[id]
    id: u64,
    #[parent]
    question: u64,
}

fn main() {}
