use autoshard::prelude::*;

#[derive(Entity)]
#[entity(kind = Question)]
struct Question {
    #[id]
    id: u64,
}

fn main() {}
