use autoshard::prelude::*;

#[derive(Entity)]
struct Question {
    #[id(auto)]
    id: u64,
}

fn main() {}
