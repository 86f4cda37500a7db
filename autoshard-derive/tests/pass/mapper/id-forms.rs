// Ids in the forms an application has at hand: a `&str` for a `String` id, a reference
// to an integer literal, a borrowed `String`; closures that infer through `entities`.
use autoshard::prelude::*;

#[derive(Entity)]
struct Page {
    #[id]
    url: String,
    visits: u64,
}

#[derive(Entity)]
struct Counter {
    #[id]
    id: u64,
    n: u64,
}

async fn calls(db: &Mapper<MemoryStore>) -> autoshard::Result<()> {
    let url = String::from("/");
    let _: Page = db.load("/").await?;
    let _: Page = db.load(&url).await?;
    let _: Page = db.load(url.as_str()).await?;
    let _ = db.load::<Counter>(&1).await?;
    db.update("/", |p: &mut Page| p.visits += 1).await?;
    db.entities::<Page>().update("/", |p| p.visits += 1).await?;
    db.entities::<Counter>().apply(&1, |c| c.n += 1).await?;
    let _gone: bool = db.delete::<Page>("/").await?;
    Ok(())
}

pub fn main() {
    let _ = calls;
}
