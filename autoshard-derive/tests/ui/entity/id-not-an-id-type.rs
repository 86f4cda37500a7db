use autoshard::prelude::*;

#[derive(Entity)]
struct Question {
    #[id]
    id: (u32, u32),
    text: String,
}

fn main() {}
