use autoshard::prelude::*;

#[derive(Entity)]
struct Question {
    #[id]
    #[id]
    id: u64,
}

fn main() {}
