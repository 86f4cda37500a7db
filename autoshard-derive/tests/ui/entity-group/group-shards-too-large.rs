use autoshard::prelude::*;

#[derive(Entity)]
#[entity(group_shards = 99999999999)]
struct Question {
    #[id]
    id: u64,
}

fn main() {}
