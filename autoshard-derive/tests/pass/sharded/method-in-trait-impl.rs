// Shard methods that implement a trait's methods, return early, and use `?`: each run of
// the body is the body itself, so `return` and `?` end the run they are in.
use autoshard::entity::ShardHooks;
use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity, Default)]
struct Counter {
    #[id]
    id: i32,
    #[shardable(fold = sum)]
    total: i64,
}

trait Votes {
    fn vote(&mut self);
    fn vote_by(&mut self, by: &str) -> Result<i64, std::num::ParseIntError>;
}

impl Votes for Counter {
    #[shard_method]
    fn vote(&mut self) {
        self.total += 1;
    }

    #[shard_method]
    fn vote_by(&mut self, by: &str) -> Result<i64, std::num::ParseIntError> {
        let by: i64 = by.parse()?;
        if by == 0 {
            return Ok(self.total);
        }
        self.total += by;
        Ok(self.total)
    }
}

pub fn main() {
    let mut c = Counter::default();
    c.vote();
    assert_eq!(c.vote_by("2"), Ok(3));
    assert_eq!(c.vote_by("0"), Ok(3));
    assert!(c.vote_by("x").is_err());
    assert_eq!(c.total, 3);
    assert_eq!(c.shadow_value(0).unwrap(), serde_json::json!(3));
}
