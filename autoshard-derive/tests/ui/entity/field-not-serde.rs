use autoshard::prelude::*;

struct Author {
    name: String,
}

#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    author: Author,
}

fn main() {}
