use autoshard::prelude::*;

// Kinds starting with `~` name autoshard's own documents (shards, sub-groups).
#[derive(Entity)]
#[entity(kind = "~shard")]
struct Question {
    #[id]
    id: u64,
}

fn main() {}
