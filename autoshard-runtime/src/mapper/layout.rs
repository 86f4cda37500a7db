//! Where an entity's documents live: the one owner of placement. Every operation asks here
//! for a key or a scan instead of building one, and the reserved `~` kinds are named nowhere
//! else: static shards ([`static_shard`], an entity group each), the dynamic-shard group
//! ([`dynamic_group`], [`dynamic_shard`], [`compacted`]), the shard layout recorded in the
//! main document ([`SHARDS`]), sealed and moved shards ([`SEALED`], [`MOVED`]), keyed
//! operations' markers ([`op_marker`]), key groups and their waiters' intents
//! ([`key_group`], [`group_intent`]), adoption records ([`ADOPTING`], [`ADOPTED`],
//! [`SHARDED`]) and entity-group sub-groups ([`sub_group`]).
//!
//! Invariant: entity kinds are Rust type names, never starting with `~`, so a derived key
//! never equals an entity's key. The full map: `docs/design/layout.md`, "Placement".

use crate::document::{Document, Value};
use crate::entity::{Entity, ShardCount, ShardCounts, ShardedProperty, Sharding};
use crate::error::{Error, FieldError, Result};
use crate::key::Key;
use crate::store::Scan;
use std::sync::{Arc, LazyLock};

mod records;
pub(in crate::mapper) use records::{
    ADOPTED, ADOPTING, Adopting, SHARDED, adopted, adopting, adoption_target, adoption_torn,
    carry_over, check_sharded, holds_plain_values,
};

/// Kind of a static shard document.
const SHARD: &str = "~shard";
/// Kind of the group that holds an entity's dynamic shards.
const DYNAMIC_GROUP: &str = "~dyn";
/// Kind of one dynamic shard document (and of the compacted one).
const DYNAMIC_SHARD: &str = "~d";
/// Name of the compacted dynamic shard document.
const COMPACTED: &str = "";
/// Kind of a sub-group of an entity group.
const SUB_GROUP: &str = "~group";
/// Kind of the marker of a keyed operation (`Mapper::update_once`).
const OP: &str = "~op";
/// Kind of a key group's state document (`Mapper::key_group`).
const KEY_GROUP: &str = "~keygroup";
/// Kind of the roots key groups' state documents are children of ([`key_group`]).
const KEY_GROUP_BUCKET: &str = "~keygroups";
/// How many roots key groups' state documents are spread over.
const KEY_GROUP_BUCKETS: u32 = 16;
/// Kind of the document that lists a key group's members and owned documents.
const KEY_GROUP_MEMBERS: &str = "~members";
/// Kind of a root entity's key-group intent document (the waiter queued for it).
const GROUP_INTENT: &str = "~intent";
/// The most static shards one property may have: what [`Mapper::MAX_SHARDS`] says.
///
/// [`Mapper::MAX_SHARDS`]: crate::mapper::Mapper::MAX_SHARDS
pub(crate) const MAX_SHARDS: u32 = 4096;
/// The most shard documents of one property a recorded layout may have loads read: its
/// shards of the insert and the added ones still read, live or retired and not yet
/// drained. A reshard gives at most [`MAX_SHARDS`] at a time and drains what it retires,
/// so only a stored value no reshard wrote comes near it; [`recorded_counts`] answers such
/// a layout `Malformed` instead of reading billions of keys.
const MAX_READ_SHARDS: u64 = 16 * MAX_SHARDS as u64;

/// The reserved property of a sharded entity's main document that holds its
/// *incarnation*: a fresh id `insert` writes, so that a write meant for an entity that
/// was deleted since never lands in a new entity inserted under the same id. Property
/// names are Rust field names, so none collides with it.
pub(super) const INCARNATION: &str = "~inc";

/// The incarnation recorded in the main document `doc` (`None` for a document written
/// without one).
pub(super) fn incarnation(doc: &Document) -> Option<&str> {
    doc.get(INCARNATION).and_then(|v| v.as_str())
}

/// The reserved property of a sharded entity's main document that records its shard
/// layout (module docs).
pub(super) const SHARDS: &str = "~shards";

/// The reserved property of a static shard retired by a shrink once it is sealed:
/// `{"into": i, "at": ms}`, the live shard of the same property its value moves into
/// and when it was sealed. A sealed shard takes no write: its [`INCARNATION`] holds
/// [`SEALED_INCARNATION`] instead of the entity's, so a guarded merge finds it missing,
/// and every compare-and-set of a static shard checks for this property.
pub(super) const SEALED: &str = "~sealed";

/// What the incarnation property of a sealed shard holds (never an incarnation, which
/// is a UUID).
pub(super) const SEALED_INCARNATION: &str = "~sealed";

/// The reserved property of a static shard that took the values of sealed shards:
/// `{"votes.12": ms}`, the name of each sealed shard whose value it holds (and when
/// that shard was sealed). A load skips a shard named here by any shard it read.
pub(super) const MOVED: &str = "~moved";

/// The seal of a static shard document (see [`SEALED`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Seal {
    /// The index of the shard its value moves into.
    pub into: u32,
    /// When it was sealed, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// The seal of the static shard document `doc`, if it is sealed.
pub(super) fn seal_of(doc: &Document) -> Option<Seal> {
    let seal = doc.get(SEALED)?;
    let field = |name: &str| seal.get(name).and_then(Value::as_u64);
    Some(Seal {
        into: field("into")
            .and_then(|i| u32::try_from(i).ok())
            .unwrap_or(0),
        at_ms: field("at").unwrap_or(0),
    })
}

/// Whether no write may go to the static shard at `key`, found as `found`, of the
/// entity whose layout is `counts`: it is sealed, or it is gone and the layout does
/// not list it as live (a retired shard deleted after its drain; a base shard, which
/// is never retired, may be created).
pub(super) fn is_retired(
    counts: Option<&ShardCounts>,
    key: &Key,
    found: Option<&Document>,
) -> bool {
    match found {
        Some(doc) => doc.contains_key(SEALED),
        None => static_shard_of(key).is_some_and(|(property, index)| {
            counts
                .and_then(|counts| count_of(counts, property))
                .is_some_and(|c| !c.is_live(index) && index >= c.base)
        }),
    }
}

/// The stored form of a seal.
pub(super) fn seal_value(seal: Seal) -> Value {
    serde_json::json!({"into": seal.into, "at": seal.at_ms})
}

/// The names of the sealed shards whose values the shard document `doc` holds, with
/// when each was sealed.
pub(super) fn moved_into(doc: &Document) -> impl Iterator<Item = (&str, u64)> {
    doc.get(MOVED)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, at)| (name.as_str(), at.as_u64().unwrap_or(0)))
}

/// The layout `E`'s annotation gives a new entity.
pub(super) fn initial_counts<E: Entity>() -> ShardCounts {
    static_annotated::<E>()
        .map(|p| (p.property.name.to_owned(), p.layout))
        .collect()
}

/// The layout recorded in the main document `doc` at `main` (`None`: it records none, as
/// for an entity stored before layouts were recorded).
///
/// # Errors
/// [`Error::Malformed`] when the record is not a layout.
pub(super) fn recorded_counts(main: &Key, doc: &Document) -> Result<Option<ShardCounts>> {
    let Some(record) = doc.get(SHARDS) else {
        return Ok(None);
    };
    let bad = |reason: &str| Error::malformed(main, FieldError::new(SHARDS, reason));
    let record = record
        .as_object()
        .ok_or_else(|| bad("expected an object of shard counts by property"))?;
    let mut counts = ShardCounts::with_capacity(record.len());
    for (property, count) in record {
        let field = |name: &str| {
            count
                .get(name)
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n >= 1)
                .ok_or_else(|| bad(&format!("`{property}.{name}` is not a count of at least 1")))
        };
        let count = ShardCount {
            shards: field("shards")?,
            base: field("base")?,
            next: field("next")?,
            from: field("from")?,
        };
        let reads = u64::from(count.base)
            + u64::from(count.next).saturating_sub(u64::from(count.from.max(count.base)));
        if count.shards > MAX_SHARDS || count.base > MAX_SHARDS || reads > MAX_READ_SHARDS {
            return Err(bad(&format!(
                "`{property}` records more shards than a layout can have ({} shards, {} \
                 at insert, {reads} read; at most {MAX_SHARDS} and {MAX_READ_SHARDS} read)",
                count.shards, count.base
            )));
        }
        let added = count.shards - count.live_base();
        if count.next < count.base + added || count.from < count.base {
            return Err(bad(&format!(
                "`{property}` lists more shards than it created"
            )));
        }
        if count.from > count.lo() {
            return Err(bad(&format!(
                "`{property}` does not read all its live shards"
            )));
        }
        counts.push((property.clone(), count));
    }
    Ok(Some(counts))
}

/// The stored form of a layout (see [`recorded_counts`]).
pub(super) fn counts_value(counts: &ShardCounts) -> Value {
    let record: serde_json::Map<String, Value> = counts
        .iter()
        .map(|(property, c)| {
            let count = serde_json::json!({
                "shards": c.shards, "base": c.base, "next": c.next, "from": c.from
            });
            (property.clone(), count)
        })
        .collect();
    Value::Object(record)
}

/// The recorded count of `property` in `counts`.
pub(super) fn count_of<'c>(counts: &'c ShardCounts, property: &str) -> Option<&'c ShardCount> {
    counts.iter().find(|(p, _)| p == property).map(|(_, c)| c)
}

/// Whether `counts` records every statically sharded property of `E`: when it does
/// not (an entity stored before layouts were recorded, or a property that was dynamic at
/// insert), a load also scans for static shards of any index.
pub(super) fn covers<E: Entity>(counts: Option<&ShardCounts>) -> bool {
    counts.is_some_and(|counts| {
        static_annotated::<E>().all(|p| count_of(counts, p.property.name).is_some())
    })
}

/// The key of static shard `index` of sharded property `property` (its field name) of
/// the entity at `main`.
#[must_use]
pub fn static_shard(main: &Key, property: &str, index: u32) -> Key {
    main.child_group(shared(SHARD), shard_name(property, index))
}

/// The text `kind` (one of this module's kinds) shared by every key that names it, so
/// that building a key copies no kind.
fn shared(kind: &'static str) -> Arc<str> {
    static KINDS: LazyLock<[Arc<str>; 3]> =
        LazyLock::new(|| [SHARD, DYNAMIC_GROUP, DYNAMIC_SHARD].map(Arc::from));
    KINDS
        .iter()
        .find(|k| ***k == *kind)
        .map_or_else(|| Arc::from(kind), Arc::clone)
}

/// `<property>.<index>`, written on the stack when it fits (without `fmt`: a shard key is
/// built on every write), then shared.
fn shard_name(property: &str, index: u32) -> Arc<str> {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(index).as_bytes();
    let len = property.len() + 1 + digits.len();
    let mut buf = [0u8; 96];
    if let Some(name) = buf.get_mut(..len) {
        let (head, tail) = name.split_at_mut(property.len());
        head.copy_from_slice(property.as_bytes());
        tail[0] = b'.';
        tail[1..].copy_from_slice(digits);
        if let Ok(name) = std::str::from_utf8(name) {
            return Arc::from(name);
        }
    }
    Arc::from(format!("{property}.{index}"))
}

/// Every static shard document under `main`, whatever its index (shards of an older,
/// larger annotation included).
#[must_use]
pub fn static_shards_scan(main: &Key) -> Scan {
    Scan::new(SHARD, Some(main.clone()))
}

/// The property and index of a static shard key from [`static_shards_scan`].
pub(crate) fn static_shard_of(key: &Key) -> Option<(&str, u32)> {
    if key.kind() != SHARD {
        return None;
    }
    let (property, index) = key.name().rsplit_once('.')?;
    Some((property, index.parse().ok()?))
}

/// The index of the static shard named `name` (a key's name, `votes.12`).
pub(super) fn shard_name_index(name: &str) -> Option<u32> {
    name.rsplit_once('.')?.1.parse().ok()
}

/// The entity group that holds the dynamic shards of the entity at `main`.
#[must_use]
pub fn dynamic_group(main: &Key) -> Key {
    main.child_group(shared(DYNAMIC_GROUP), "")
}

/// The compacted dynamic shard document of the entity at `main`.
#[must_use]
pub fn compacted(main: &Key) -> Key {
    dynamic_shard(main, COMPACTED)
}

/// The dynamic shard document of the entity at `main` named `name` (saves name theirs
/// after their write id; the empty name is the compacted document).
#[must_use]
pub fn dynamic_shard(main: &Key, name: &str) -> Key {
    dynamic_group(main).child(shared(DYNAMIC_SHARD), name)
}

/// Every dynamic shard document of the entity at `main`, the compacted one included, in
/// no promised order.
#[must_use]
pub fn dynamic_shards_scan(main: &Key) -> Scan {
    Scan::new(DYNAMIC_SHARD, Some(dynamic_group(main)))
}

/// The marker that keyed operation `op` was applied to the document at `target` (a
/// static shard, or the dynamic group) of the entity's incarnation `incarnation`: a
/// child in `target`'s entity group, so that it commits atomically with the change it
/// marks, also on a Redis Cluster. Named with the incarnation, so that a marker left by
/// an interrupted delete means nothing to a new entity under the same id.
#[must_use]
pub fn op_marker(target: &Key, incarnation: Option<&str>, op: &str) -> Key {
    target.child(OP, format!("{}:{op}", incarnation.unwrap_or("")))
}

/// Every marker of keyed operations under `target` (see [`op_marker`]).
#[must_use]
pub fn op_markers_scan(target: &Key) -> Scan {
    Scan::new(OP, Some(target.clone()))
}

/// The state document of the key group with id `id`: a child of one of
/// [`KEY_GROUP_BUCKETS`] roots, picked by the id, in the root's entity group. A scan of
/// them lists a root's children from an index in the same entity group, so that a commit
/// that inserts or deletes one keeps that index in the same step; on a Redis Cluster, in
/// the same slot, so creating or dissolving a group writes its state document in one
/// script call (the index of root documents lives in a slot of its own, which a commit
/// reaches only by steps of its own around the script). A state document stored as a
/// root document of that kind (where earlier releases put it) is listed by
/// [`key_group_scans`] too.
pub(crate) fn key_group(id: &str) -> Key {
    let bucket = id.bytes().fold(0u32, |hash, byte| {
        hash.wrapping_mul(31).wrapping_add(u32::from(byte))
    }) % KEY_GROUP_BUCKETS;
    Key::new(KEY_GROUP_BUCKET, bucket.to_string()).child(KEY_GROUP, id)
}

/// Where the state document of the key group with id `id` may be: [`key_group`], and the
/// root document of that kind where earlier releases put it.
pub(crate) fn key_group_placements(id: &str) -> [Key; 2] {
    [key_group(id), Key::new(KEY_GROUP, id)]
}

/// The document that lists the members and owned documents of the key group whose state
/// document is `group`: in the same entity group (one commit changes both), apart, so
/// that a transaction does not rewrite the list.
pub(crate) fn key_group_members(group: &Key) -> Key {
    group.child(KEY_GROUP_MEMBERS, "")
}

/// The intent document of the root entity at `main`: the key-group waiter queued for it
/// (`key_group/queue.rs`). In the entity's group, so that a group's create commit can
/// expect it; no group ever owns it.
pub(crate) fn group_intent(main: &Key) -> Key {
    main.child(GROUP_INTENT, "")
}

/// The scans that together list every key group's state document: each root's children
/// ([`key_group`]), and the root documents of that kind earlier builds wrote.
pub(crate) fn key_group_scans() -> Vec<Scan> {
    let buckets = (0..KEY_GROUP_BUCKETS).map(|bucket| {
        let root = Key::new(KEY_GROUP_BUCKET, bucket.to_string());
        Scan::new(KEY_GROUP, Some(root))
    });
    buckets.chain([Scan::new(KEY_GROUP, None)]).collect()
}

/// Sub-group `k` of the entity group of the root at `root`; its key is also the
/// sub-group's anchor document, rewritten by every commit in the sub-group.
#[must_use]
pub fn sub_group(root: &Key, k: u32) -> Key {
    root.child_group(SUB_GROUP, k.to_string())
}

/// The keys a child of `kind` named `name` may have under `root` with `k` sub-groups,
/// sub-group 0 first.
pub(crate) fn child_candidates(root: &Key, kind: &str, name: &str, k: u32) -> Vec<Key> {
    (0..k)
        .map(|i| sub_group(root, i).child(kind, name))
        .collect()
}

/// The children of `kind` in sub-group `k` of `root`.
pub(crate) fn children_scan(root: &Key, kind: &str, k: u32) -> Scan {
    Scan::new(kind, Some(sub_group(root, k)))
}

/// A sharded property with its index in [`Entity::PROPERTIES`] and its shard layout.
#[derive(Clone, Copy, Debug)]
pub(super) struct StaticProperty {
    pub index: usize,
    pub property: &'static ShardedProperty,
    pub layout: ShardCount,
}

impl StaticProperty {
    /// The key of live shard `slot` (`0..layout.shards`) of this property of the entity
    /// at `main`.
    pub(super) fn live_shard(&self, main: &Key, slot: u32) -> Key {
        static_shard(main, self.property.name, self.layout.live_index(slot))
    }
}

/// The statically sharded properties of `E` with the counts of its annotation, in field
/// order.
pub(super) fn static_annotated<E: Entity>() -> impl Iterator<Item = StaticProperty> {
    E::PROPERTIES
        .iter()
        .enumerate()
        .filter_map(|(index, property)| match property.sharding {
            Sharding::Static { shards, .. } => Some(StaticProperty {
                index,
                property,
                layout: ShardCount::initial(shards),
            }),
            Sharding::Dynamic => None,
        })
}

/// The statically sharded properties of `entity`, in field order, with the counts its
/// stored layout records (the annotation's where it records none).
pub(super) fn static_properties<E: Entity>(entity: &E) -> Vec<StaticProperty> {
    let counts = entity
        .state()
        .and_then(crate::entity::EntityState::shard_counts);
    static_annotated::<E>()
        .map(|mut p| {
            if let Some(c) = counts.and_then(|c| count_of(c, p.property.name)) {
                p.layout = *c;
            }
            p
        })
        .collect()
}

/// The keys of the static shard documents the annotation of `E` lists for the entity at
/// `main`: each static property's shards, shard 0 first, properties in field order.
pub(super) fn static_shard_keys<E: Entity>(main: &Key) -> Vec<Key> {
    static_annotated::<E>()
        .flat_map(|p| (0..p.layout.shards).map(move |i| static_shard(main, p.property.name, i)))
        .collect()
}

/// Whether the static shard document at `key` is outside `E`'s current annotation: its
/// property is not statically sharded now, or has fewer shards (documents of an older
/// annotation, which a load still folds so that no value is lost).
pub(super) fn is_former_static_shard<E: Entity>(key: &Key) -> bool {
    let Some((property, index)) = static_shard_of(key) else {
        return false;
    };
    !static_annotated::<E>().any(|p| p.property.name == property && index < p.layout.shards)
}

/// The dynamically sharded properties of `E` with their indexes, in field order.
pub(super) fn dynamic_properties<E: Entity>()
-> impl Iterator<Item = (usize, &'static ShardedProperty)> {
    E::PROPERTIES
        .iter()
        .enumerate()
        .filter(|(_, p)| p.sharding == Sharding::Dynamic)
}

/// Whether `E` has a dynamically sharded property.
pub(super) fn has_dynamic<E: Entity>() -> bool {
    dynamic_properties::<E>().next().is_some()
}
