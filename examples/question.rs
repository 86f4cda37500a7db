//! The Question of the AutoShard paper (Figure 2) on the embedded store: a thousand
//! concurrent votes land on ten shard documents, and a load folds them back into one
//! number. Run with `cargo run --example question`.

use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
struct Question {
    #[id]
    id: u64,
    text: String,
    author: String,
    /// Ten shard documents; the store adds a vote into one of them without a read.
    #[shardable(shards = 10, fold = sum)]
    votes: i64,
}

impl Question {
    /// One more vote (runs on the change to save and on the value seen).
    #[shard_method]
    fn vote_up(&mut self) {
        self.votes += 1;
    }
}

#[tokio::main]
async fn main() -> autoshard::Result<()> {
    let db = Mapper::new(MemoryStore::new());
    let text = "How do you plan to improve public education?".to_owned();
    db.insert(&mut Question::new(42, text, "Phil R".to_owned(), 76))
        .await?;

    let voters: Vec<_> = (0..1_000)
        .map(|_| {
            let db = db.clone();
            tokio::spawn(async move { db.apply(&42, Question::vote_up).await })
        })
        .collect();
    for voter in voters {
        voter.await.expect("a voter panicked")?;
    }

    let q: Question = db.load(&42).await?;
    println!("{:?} asked by {}", q.text, q.author);
    println!(
        "{} votes (76 at insert + 1,000 concurrent), kept in {} shard documents",
        q.votes,
        db.shards::<Question>(&42).await?
    );
    Ok(())
}
