use autoshard::prelude::*;

#[derive(Entity)]
struct Question {
    number: u64,
    text: String,
}

fn main() {}
