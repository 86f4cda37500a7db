use autoshard::prelude::*;

#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    #[id]
    slug: String,
}

fn main() {}
