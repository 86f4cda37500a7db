use autoshard::prelude::*;
use autoshard::entity::Sharding;

#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
pub struct Question {
    #[id]
    pub id: u64,
    #[shardable(shards = 4, min = 2, max = 4096, fold = sum)]
    pub votes: i64,
    #[shardable(neutral = 0, shards = 100)]
    pub views: u64,
    #[shardable(neutral = 0, shards = 1, fold = max)]
    pub peak: u64,
}

impl Question {
    #[shard_fold]
    fn fold_views(a: u64, b: u64) -> u64 {
        a + b
    }
}

pub fn main() {
    let bounds: Vec<Sharding> = Question::PROPERTIES.iter().map(|p| p.sharding).collect();
    assert_eq!(
        bounds,
        [
            Sharding::Static { shards: 4, min: 2, max: 4096 },
            // Without `max`: the default, or `shards` when that is more.
            Sharding::Static { shards: 100, min: 1, max: 100 },
            Sharding::Static { shards: 1, min: 1, max: autoshard::entity::DEFAULT_MAX_SHARDS },
        ]
    );
}
