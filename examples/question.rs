//! The Question of the AutoShard paper (Figure 2), without a store: construct it, vote,
//! and look at what a save would write. Run with `cargo run --example question`.

use autoshard::prelude::*;
use autoshard::FieldError;

#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
struct Question {
    #[id]
    id: u64,
    text: String,
    author: String,
    #[shardable(neutral = 0, shards = 10)]
    votes: i64,
}

impl Question {
    /// One more vote.
    #[shard_method]
    fn vote_up(&mut self) {
        self.votes += 1;
    }

    /// Votes add up.
    #[shard_fold]
    fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }
}

fn main() -> Result<(), FieldError> {
    let mut q = Question::new(
        42,
        "How do you plan to improve public education?".to_owned(),
        "Phil R".to_owned(),
        76,
    );
    q.vote_up();
    let property = &Question::PROPERTIES[0];
    println!("key:            {}", q.key().encode());
    println!("main document:  {:?}", q.to_document()?);
    println!("votes (seen):   {}", q.votes);
    println!(
        "change to save: {} = {}, folded into one of {:?} shards",
        property.stored_as,
        q.shadow_value(0)?,
        property.static_shards()
    );
    println!(
        "a shard holding 10 becomes {}",
        q.fold_shadow_into(0, Some(&serde_json::json!(10)))?
    );
    Ok(())
}
