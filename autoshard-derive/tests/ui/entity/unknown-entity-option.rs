use autoshard::prelude::*;

#[derive(Entity)]
#[entity(kind = "Question", table = "questions")]
struct Question {
    #[id]
    id: u64,
}

fn main() {}
