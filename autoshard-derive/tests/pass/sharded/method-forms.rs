// Shard methods with patterns, generics, `impl Trait` and reference arguments, a fold
// whose property is named explicitly, and a struct-level doc comment and visibility.
use autoshard::entity::ShardHooks;
use autoshard::prelude::*;

mod model {
    use autoshard::prelude::*;

    /// A counter in a child module, used from its parent.
    #[autoshard::sharded]
    #[derive(Entity, Default)]
    pub struct Counter {
        #[id]
        pub id: i32,
        #[shardable(neutral = 0)]
        pub r#total: i64,
    }
}

use model::Counter;

impl Counter {
    #[shard_method]
    pub fn add_pair(&mut self, (a, b): (i64, i64)) {
        self.total += a + b;
    }

    #[shard_method]
    pub fn add_into<T: Into<i64> + Clone>(&mut self, value: T) {
        self.total += value.into();
    }

    #[shard_method]
    pub fn add_impl(&mut self, value: impl Into<i64> + Clone) {
        self.total += value.into();
    }

    #[shard_method]
    pub fn add_len(&mut self, text: &str) -> &i64 {
        self.total += i64::try_from(text.len()).unwrap_or(i64::MAX);
        &self.total
    }

    #[shard_method]
    pub fn add_mut(&mut self, mut value: i64) {
        value *= 2;
        self.total += value;
    }

    #[shard_fold(total)]
    fn sum(a: i64, b: i64) -> i64 {
        a + b
    }
}

pub fn main() {
    let mut c = Counter { id: 1, ..Default::default() };
    c.add_pair((1, 2));
    c.add_into(3_i32);
    c.add_impl(4_i8);
    assert_eq!(*c.add_len("ab"), 12);
    c.add_mut(1);
    assert_eq!(c.total, 14);
    assert_eq!(c.shadow_value(0).unwrap(), serde_json::json!(14));
}
