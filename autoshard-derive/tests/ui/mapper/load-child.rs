// A child lives in a sub-group of its root, so the root operations cannot reach it.
use autoshard::prelude::*;

#[derive(Entity)]
#[entity(group_shards = 4)]
struct Question {
    #[id]
    id: u64,
}

#[derive(Entity)]
#[entity(parent = Question)]
struct Response {
    #[id]
    id: u64,
    #[parent]
    question: u64,
}

async fn read(db: &Mapper<MemoryStore>) -> autoshard::Result<Response> {
    db.load::<Response>(&7).await
}

fn main() {
    let _ = read;
}
