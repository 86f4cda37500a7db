// The hooks the mapper drives (shadows, state) are not part of what an application sees:
// the prelude does not bring them into scope.
use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity)]
struct Question {
    #[id]
    id: u64,
    #[shardable(shards = 4, fold = sum)]
    votes: i64,
}

fn main() {
    let q = Question::new(1, 0);
    let _ = q.shadow_value(0);
}
