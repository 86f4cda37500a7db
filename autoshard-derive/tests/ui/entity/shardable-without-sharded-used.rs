use autoshard::prelude::*;

// Forgetting `#[autoshard::sharded]`: one error, not a cascade at every use.
#[derive(Entity, Debug, Clone)]
struct Post {
    #[id]
    id: u64,
    #[shardable(shards = 4, fold = sum)]
    likes: i64,
}

impl Post {
    #[shard_method]
    fn like(&mut self) {
        self.likes += 1;
    }
}

async fn run(db: Mapper<MemoryStore>) -> autoshard::Result<()> {
    db.insert(&mut Post::new(1, 0)).await?;
    db.apply(&1, Post::like).await?;
    Ok(())
}

fn main() {
    let _ = run;
}
