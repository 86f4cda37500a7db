use autoshard::prelude::*;

#[derive(Entity)]
#[entity(kind = "Question")]
#[entity(kind = "Poll")]
struct Question {
    #[id]
    id: u64,
}

fn main() {}
