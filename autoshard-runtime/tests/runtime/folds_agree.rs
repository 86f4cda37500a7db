//! The built-in folds exist twice on the client: the typed folds the generated code
//! runs (read and compare-and-set, and every load) and the reference fold of
//! `store::merge` (what every store's merge must answer, checked by the conformance
//! suite against the stores). They must agree on every input: here on random values and
//! on every value near the bounds of each integer type, for `sum`, `max`, `min` and
//! `union`.

use autoshard::prelude::*;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashSet};

/// A small deterministic generator (xorshift64*), so a failure repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Values of an integer type in `min..=max`: the bounds and their neighbours, around
/// zero, and random ones.
fn samples(min: i128, max: i128, rng: &mut Rng) -> Vec<i128> {
    let mut values: Vec<i128> = [
        min,
        min + 1,
        min + 2,
        -2,
        -1,
        0,
        1,
        2,
        max - 2,
        max - 1,
        max,
    ]
    .into_iter()
    .chain([max / 2, max / 2 + 1, min / 2, min / 2 - 1])
    .filter(|v| (min..=max).contains(v))
    .collect();
    let span = u128::try_from(max - min).unwrap() + 1;
    for _ in 0..40 {
        let offset = (u128::from(rng.next()) << 64 | u128::from(rng.next())) % span;
        values.push(min + i128::try_from(offset).unwrap());
    }
    values
}

fn encode(n: i128) -> Value {
    match i64::try_from(n) {
        Ok(n) => json!(n),
        Err(_) => json!(u64::try_from(n).unwrap()),
    }
}

/// Every pair of `values` folded by property `index` of `E` both ways: the typed fold
/// succeeds exactly when the reference does, with the same value.
fn agree<E: Entity>(index: usize, values: &[Value], same: impl Fn(&Value, &Value) -> bool) {
    let property = &E::PROPERTIES[index];
    let fold = (property.store_fold)().expect("a built-in fold the store applies");
    for a in values {
        for b in values {
            let typed = E::fold_values(index, a, b);
            let reference = fold.fold(a, b);
            match (&typed, &reference) {
                (Ok(x), Ok(Some(y))) => assert!(
                    same(x, y),
                    "{} {:?}: {a} and {b}: typed {x}, reference {y}",
                    property.name,
                    fold
                ),
                (Err(_), Err(_)) => {}
                _ => panic!(
                    "{} {fold:?}: {a} and {b}: typed {typed:?}, reference {reference:?}",
                    property.name
                ),
            }
        }
    }
}

macro_rules! integer_folds {
    ($($test:ident: $ty:ty),* $(,)?) => {$(
        #[test]
        fn $test() {
            #[autoshard::sharded]
            #[derive(Entity)]
            struct Folds {
                #[id]
                id: u64,
                #[shardable(shards = 1, fold = sum)]
                sum: $ty,
                #[shardable(neutral = <$ty>::MIN, shards = 1, fold = max)]
                max: $ty,
                #[shardable(neutral = <$ty>::MAX, shards = 1, fold = min)]
                min: $ty,
            }
            let _ = Folds::new;
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ u64::from(<$ty>::BITS));
            let values: Vec<Value> =
                samples(i128::from(<$ty>::MIN), i128::from(<$ty>::MAX), &mut rng)
                    .into_iter()
                    .map(encode)
                    .collect();
            for index in 0..3 {
                agree::<Folds>(index, &values, |x, y| x == y);
            }
        }
    )*};
}

integer_folds! {
    i8_folds_agree: i8,
    i16_folds_agree: i16,
    i32_folds_agree: i32,
    i64_folds_agree: i64,
    u8_folds_agree: u8,
    u16_folds_agree: u16,
    u32_folds_agree: u32,
    u64_folds_agree: u64,
}

/// Two encoded sets hold the same elements (the typed fold sorts a `BTreeSet`, the
/// reference keeps first-seen order).
fn same_set(x: &Value, y: &Value) -> bool {
    let set = |v: &Value| -> BTreeSet<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(Value::to_string)
            .collect()
    };
    set(x) == set(y)
}

#[test]
fn union_folds_agree() {
    #[autoshard::sharded]
    #[derive(Entity)]
    struct Sets {
        #[id]
        id: u64,
        #[shardable(shards = 1, fold = union)]
        tags: BTreeSet<String>,
        #[shardable(shards = 1, fold = union)]
        ids: HashSet<u64>,
        #[shardable(shards = 1, fold = union)]
        small: BTreeSet<i8>,
    }
    let _ = Sets::new;
    let mut rng = Rng(7);
    let pick = |pool: &[Value], rng: &mut Rng| -> Value {
        let n = rng.next() % 4;
        Value::Array(
            (0..n)
                .map(|_| pool[usize::try_from(rng.next() % pool.len() as u64).unwrap()].clone())
                .collect::<Vec<_>>()
                .into_iter()
                .fold(Vec::new(), |mut set, v| {
                    if !set.contains(&v) {
                        set.push(v);
                    }
                    set
                }),
        )
    };
    let strings: Vec<Value> = ["", "a", "b", "rust", "ünïcode", "a b"]
        .iter()
        .map(|s| json!(s))
        .collect();
    let unsigned: Vec<Value> = [0, 1, 2, u64::MAX - 1, u64::MAX]
        .iter()
        .map(|n| json!(n))
        .collect();
    let small: Vec<Value> = [-128, -1, 0, 1, 127].iter().map(|n| json!(n)).collect();
    for (index, pool) in [(0, &strings), (1, &unsigned), (2, &small)] {
        let sets: Vec<Value> = (0..30).map(|_| pick(pool, &mut rng)).collect();
        agree::<Sets>(index, &sets, same_set);
    }
}
