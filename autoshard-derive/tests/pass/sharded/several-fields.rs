use std::collections::BTreeSet;

use autoshard::entity::ShardHooks;
use autoshard::prelude::*;

#[autoshard::sharded]
#[derive(Entity, Debug, Clone, PartialEq)]
pub struct Product {
    #[id]
    pub sku: String,
    pub name: String,
    #[shardable(neutral = 0, shards = 8)]
    pub sold: u64,
    #[shardable(neutral = i64::MAX)]
    pub lowest_price: i64,
    #[shardable(neutral = BTreeSet::new(), shards = 2)]
    pub buyers: BTreeSet<u32>,
}

impl Product {
    #[shard_method]
    pub fn sell(&mut self, buyer: u32, price: i64) -> u64 {
        self.sold += 1;
        self.lowest_price = self.lowest_price.min(price);
        self.buyers.insert(buyer);
        self.sold
    }

    #[shard_fold]
    pub fn fold_sold(a: u64, b: u64) -> u64 {
        a + b
    }

    #[shard_fold]
    pub fn fold_lowest_price(a: i64, b: i64) -> i64 {
        a.min(b)
    }

    #[shard_fold(buyers)]
    pub fn union(mut a: BTreeSet<u32>, b: BTreeSet<u32>) -> BTreeSet<u32> {
        a.extend(b);
        a
    }
}

pub fn main() {
    let mut p = Product::new("sku-1".into(), "lamp".into(), 3, 40, BTreeSet::new());
    assert_eq!(p.sell(7, 35), 4);
    assert_eq!(p.lowest_price, 35);
    assert_eq!(Product::PROPERTIES.len(), 3);
    assert_eq!(p.shadow_value(0).unwrap(), serde_json::json!(1));
}
