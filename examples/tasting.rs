//! A tasting poll: 200 guests score one wine at once (sum, max and union folds) and leave
//! notes as children in its entity group. `cargo run --example tasting`.
use autoshard::prelude::*;
use std::collections::BTreeSet;

#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(group_shards = 4)]
struct Wine {
    #[id]
    name: String,
    region: String,
    #[shardable(shards = 8, fold = sum)]
    scores: u32,
    #[shardable(shards = 8, fold = sum)]
    total: u32,
    #[shardable(neutral = 0, shards = 4, fold = max)]
    best: u8,
    #[shardable(fold = union)]
    tasters: BTreeSet<String>,
}

impl Wine {
    #[shard_method]
    fn score(&mut self, guest: String, points: u8) {
        self.scores += 1;
        self.total += u32::from(points);
        self.best = self.best.max(points);
        self.tasters.insert(guest);
    }

    fn average(&self) -> f64 {
        if self.scores == 0 {
            0.0
        } else {
            f64::from(self.total) / f64::from(self.scores)
        }
    }
}

#[derive(Entity, Debug)]
#[entity(parent = Wine)]
struct Note {
    #[id]
    id: uuid::Uuid,
    #[parent]
    wine: String,
    guest: String,
    text: String,
}

#[tokio::main]
async fn main() -> autoshard::Result<()> {
    let db = Mapper::new(MemoryStore::new());
    let wines = db.entities::<Wine>();
    wines
        .insert(&mut Wine::new(
            "Barolo 2019".into(),
            "Piedmont".into(),
            0,
            0,
            0,
            BTreeSet::new(),
        ))
        .await?;

    let mut tasks = Vec::new();
    for guest in 0..200u32 {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("guest-{}", guest % 50);
            let points = (guest % 10 + 1) as u8;
            db.entities::<Wine>()
                .apply("Barolo 2019", |w| w.score(name.clone(), points))
                .await?;
            if guest % 40 == 0 {
                let mut note = Note {
                    id: uuid::Uuid::new_v4(),
                    wine: "Barolo 2019".into(),
                    guest: name,
                    text: "tar and roses".into(),
                };
                db.insert(&mut note).await?;
            }
            Ok::<_, autoshard::Error>(())
        }));
    }
    for task in tasks {
        task.await.expect("task")?;
    }

    let wine = wines.load("Barolo 2019").await?;
    let notes = db.children::<Note>("Barolo 2019").await?;
    println!(
        "{} ({}): {} scores, average {:.2}, best {}, {} tasters, {} notes",
        wine.name,
        wine.region,
        wine.scores,
        wine.average(),
        wine.best,
        wine.tasters.len(),
        notes.len()
    );
    assert_eq!(wine.scores, 200);
    assert_eq!(wine.best, 10);
    assert_eq!(wine.tasters.len(), 50);
    assert_eq!(notes.len(), 5);
    for note in &notes {
        assert_eq!(note.wine, "Barolo 2019");
        let _ = (&note.guest, &note.text);
    }
    Ok(())
}
