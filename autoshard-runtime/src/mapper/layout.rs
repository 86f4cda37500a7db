//! Where an entity's documents live: the main document and, per sharded property, its
//! shard documents. Every operation asks here instead of matching on [`Sharding`] itself,
//! so new placements (dynamic shards, entity-group sharding) are added in one place.
//! Dynamic shards (their keys, the compacted document, how loads find them) are
//! described in `dynamic`.

use crate::entity::{Entity, ShardedProperty, Sharding};
use crate::key::Key;

/// A sharded property with its index in [`Entity::PROPERTIES`] and number of static
/// shards.
#[derive(Clone, Copy, Debug)]
pub(super) struct StaticProperty {
    pub index: usize,
    pub property: &'static ShardedProperty,
    pub shards: u32,
}

/// The statically sharded properties of `E`, in field order.
pub(super) fn static_properties<E: Entity>() -> impl Iterator<Item = StaticProperty> {
    E::PROPERTIES
        .iter()
        .enumerate()
        .filter_map(|(index, property)| match property.sharding {
            Sharding::Static { shards } => Some(StaticProperty {
                index,
                property,
                shards,
            }),
            Sharding::Dynamic => None,
        })
}

/// The statically sharded properties stored in shard document `shard`.
pub(super) fn properties_in_shard<E: Entity>(shard: u32) -> impl Iterator<Item = StaticProperty> {
    static_properties::<E>().filter(move |p| p.shards > shard)
}

/// How many static shard documents `E` has (the most any property uses).
pub(super) fn static_shard_count<E: Entity>() -> u32 {
    static_properties::<E>()
        .map(|p| p.shards)
        .max()
        .unwrap_or(0)
}

/// The keys of all static shard documents of the entity at `main`, shard 0 first.
pub(super) fn static_shard_keys<E: Entity>(main: &Key) -> Vec<Key> {
    (0..static_shard_count::<E>())
        .map(|i| main.shard(i))
        .collect()
}

/// The dynamically sharded properties of `E` with their indexes, in field order.
pub(super) fn dynamic_properties<E: Entity>(
) -> impl Iterator<Item = (usize, &'static ShardedProperty)> {
    E::PROPERTIES
        .iter()
        .enumerate()
        .filter(|(_, p)| p.sharding == Sharding::Dynamic)
}

/// Whether `E` has a dynamically sharded property.
pub(super) fn has_dynamic<E: Entity>() -> bool {
    dynamic_properties::<E>().next().is_some()
}

/// Whether the shadow of property `index` holds a change worth writing: touched, and not
/// the neutral value. A shard method marks every shadow of the entity touched, and folding
/// the neutral value into a shard changes nothing, so such a shadow costs no write. When a
/// value cannot be encoded the shadow counts as changed, so the save reports the error.
pub(super) fn has_change<E: Entity>(entity: &E, index: usize) -> bool {
    entity.shadow_touched(index)
        && match (entity.shadow_value(index), E::neutral_value(index)) {
            (Ok(shadow), Ok(neutral)) => shadow != neutral,
            _ => true,
        }
}
