use autoshard::prelude::*;

#[derive(Entity)]
#[entity(kind = "")]
struct Question {
    #[id]
    id: u64,
}

fn main() {}
