//! The contract between generated code and the runtime: what `#[derive(Entity)]` and
//! `#[autoshard::sharded]` implement, and the hidden state a sharded struct carries.
//!
//! Nothing here talks to a store. The mapper drives these hooks; application code
//! normally never calls them.

use crate::document::{Document, Value};
use crate::error::FieldError;
use crate::key::{EntityId, Key};
use std::fmt;
use std::sync::Arc;

/// How one sharded property is spread over shard documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Sharding {
    /// A fixed number of shard documents (`#[shardable(shards = N)]`); a save folds the
    /// change into one of them, chosen uniformly at random.
    Static {
        /// Number of shards at insert, at least 1.
        shards: u32,
        /// The fewest shards a reshard gives a stored entity (`min = N`; 1 by default).
        min: u32,
        /// The most shards a reshard gives a stored entity (`max = N`; by default
        /// [`DEFAULT_MAX_SHARDS`], or `shards` when that is more).
        max: u32,
    },
    /// A new shard document per save, folded back into one by compaction
    /// (`#[shardable]` without `shards`).
    Dynamic,
}

/// The most shards a reshard gives a property whose annotation names no `max` (unless
/// its `shards` is more): hot spots that need more are rare, and the bound keeps an
/// adaptive count from running away.
pub const DEFAULT_MAX_SHARDS: u32 = 64;

/// The `max` of a property annotated `shards = N` without one.
#[must_use]
pub const fn default_max_shards(shards: u32) -> u32 {
    if shards > DEFAULT_MAX_SHARDS {
        shards
    } else {
        DEFAULT_MAX_SHARDS
    }
}

/// Static description of one `#[shardable]` field.
#[derive(Clone, Copy, Debug)]
pub struct ShardedProperty {
    /// The Rust field name, e.g. `"votes"`.
    pub name: &'static str,
    /// The property name in shard documents, e.g. `"shard_votes"`.
    pub stored_as: &'static str,
    /// Static or dynamic sharding.
    pub sharding: Sharding,
    /// The store-level fold of `#[shardable(fold = ...)]`, which the store applies itself
    /// ([`crate::DocumentStore::merge`]), with the range of the field's type; `None` for
    /// a `#[shard_fold]` function, or a built-in fold of a type the store does not fold
    /// (`fold = max` of strings, a union of other elements): those fold through read and
    /// compare-and-set.
    pub store_fold: fn() -> Option<crate::Fold>,
}

impl ShardedProperty {
    /// The number of static shards, or `None` for a dynamic property.
    #[must_use]
    pub fn static_shards(&self) -> Option<u32> {
        match self.sharding {
            Sharding::Static { shards, .. } => Some(shards),
            Sharding::Dynamic => None,
        }
    }
}

/// A struct mapped to a document, implemented by `#[derive(Entity)]`: its kind, its id,
/// its main document, and the description of its sharded properties.
///
/// The mapper also needs hooks into the hidden shadow fields of a sharded struct (the
/// change of each property since the last save, the bookkeeping of its shards); generated
/// code implements them in a trait of their own, which is not part of the API, so that
/// they stay out of an application's way (and out of its method completions).
///
/// ```
/// use autoshard::prelude::*;
///
/// #[autoshard::sharded]
/// #[derive(Entity)]
/// #[entity(kind = "Q")]
/// struct Question {
///     #[id]
///     id: u64,
///     #[shardable(shards = 10, fold = sum)]
///     votes: i64,
/// }
///
/// assert_eq!(Question::KIND, "Q");
/// assert_eq!(Question::PROPERTIES[0].name, "votes");
/// assert_eq!(Question::PROPERTIES[0].static_shards(), Some(10));
/// assert_eq!(Question::new(42, 0).key().encode(), "{Q:42}");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an entity",
    label = "not an entity",
    note = "add `#[derive(Entity)]` to `{Self}`"
)]
pub trait Entity: ShardHooks + Sized + Send + Sync + 'static {
    /// The type of the `#[id]` field.
    type Id: EntityId;

    /// The document kind, the struct name unless `#[entity(kind = "...")]` says otherwise.
    const KIND: &'static str;

    /// The sharded properties, in field order. Empty for an unsharded entity.
    const PROPERTIES: &'static [ShardedProperty] = &[];

    /// Entity-group sharding: how many sub-groups the entity group of this kind is spread
    /// over. On a root (`#[entity(group_shards = 8)]`) its own count; on a child kind
    /// (`#[entity(parent = Question)]`) its root's. 1, the default, is a plain group. See
    /// [`crate::group`].
    const GROUP_SHARDS: u32 = 1;

    /// The kind of the root whose group this kind's entities belong to, `None` for a root.
    /// Child entities are read and written with the child operations of the mapper
    /// (`load_child`, `children`, `update_children`, ...), not `load`/`save`.
    const PARENT_KIND: Option<&'static str> = None;

    /// The value of the `#[id]` field.
    fn id(&self) -> &Self::Id;

    /// For a child entity, the key of its root's main document (from the `#[parent]`
    /// field); `None` for a root. A child's own document lives in one sub-group of that
    /// root (see [`crate::group`]), so [`Entity::key`] is not its address.
    fn parent_key(&self) -> Option<Key> {
        None
    }

    /// The key of the main document of the entity with this id.
    fn key_for(id: &Self::Id) -> Key {
        Key::new(Self::KIND, id.to_key_name())
    }

    /// The key of this entity's main document.
    fn key(&self) -> Key {
        Self::key_for(self.id())
    }

    /// The main document: every property except the id and the sharded properties.
    fn to_document(&self) -> Result<Document, FieldError>;

    /// Whether [`Entity::to_document`] would answer `saved` (its error when it would
    /// fail): what `apply` and `save` ask to learn that the main document is unchanged.
    /// `#[derive(Entity)]` answers it field by field, without building the document.
    fn encodes_as(&self, saved: &Document) -> Result<bool, FieldError> {
        Ok(self.to_document()? == *saved)
    }

    /// Rebuilds an entity from its id and main document. Sharded properties start at their
    /// neutral value (the mapper then folds the shards in), shadows untouched,
    /// [`EntityState`] empty.
    fn from_document(id: Self::Id, doc: &Document) -> Result<Self, FieldError>;
}

/// The sharded hooks of an entity: what the mapper reads and resets in the hidden shadow
/// and state fields of a struct rewritten by `#[autoshard::sharded]`. `#[derive(Entity)]`
/// implements it (with these defaults, which describe an entity with no sharded property).
/// Not public API: it may change in any release.
///
/// `property` arguments index [`Entity::PROPERTIES`]; generated code returns a
/// [`FieldError`] (never panics) for an index out of range.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an entity",
    label = "not an entity",
    note = "add `#[derive(Entity)]` to `{Self}`"
)]
pub trait ShardHooks {
    /// Folds one stored shard value of `property` into the aggregate field.
    fn fold_stored(&mut self, property: usize, stored: &Value) -> Result<(), FieldError> {
        let _ = stored;
        Err(no_such_property::<Self>(property))
    }

    /// Whether a shard method changed the shadow of `property` since the last reset.
    fn shadow_touched(&self, property: usize) -> bool {
        let _ = property;
        false
    }

    /// The shadow of `property`, encoded (the neutral value when untouched).
    fn shadow_value(&self, property: usize) -> Result<Value, FieldError> {
        Err(no_such_property::<Self>(property))
    }

    /// `fold(stored, shadow)` for `property`, encoded; `stored = None` stands for a shard
    /// document without this property (the neutral value).
    fn fold_shadow_into(
        &self,
        property: usize,
        stored: Option<&Value>,
    ) -> Result<Value, FieldError> {
        let _ = stored;
        Err(no_such_property::<Self>(property))
    }

    /// The aggregate (the field's current value), encoded.
    fn aggregate_value(&self, property: usize) -> Result<Value, FieldError> {
        Err(no_such_property::<Self>(property))
    }

    /// The neutral value of `property`, encoded.
    fn neutral_value(property: usize) -> Result<Value, FieldError> {
        Err(no_such_property::<Self>(property))
    }

    /// Folds two encoded shard values of `property` with its `#[shard_fold]` function.
    fn fold_values(property: usize, a: &Value, b: &Value) -> Result<Value, FieldError> {
        let _ = (a, b);
        Err(no_such_property::<Self>(property))
    }

    /// Resets the shadow of `property` to neutral (untouched).
    fn reset_shadow(&mut self, property: usize) {
        let _ = property;
    }

    /// The mapper's bookkeeping stored inside a sharded entity; `None` for unsharded ones.
    fn state(&self) -> Option<&EntityState> {
        None
    }

    /// Mutable access to [`ShardHooks::state`].
    fn state_mut(&mut self) -> Option<&mut EntityState> {
        None
    }
}

/// The error the default sharded hooks return: the entity has no such property.
#[must_use]
pub fn no_such_property<E: ?Sized>(property: usize) -> FieldError {
    let name = std::any::type_name::<E>();
    let name = name.rsplit("::").next().unwrap_or(name);
    FieldError::new(
        format!("#{property}"),
        format!("`{name}` has no sharded property with this index"),
    )
}

/// The local change of one sharded property since the last save (the paper's
/// `shard_votes`). Untouched means neutral; a shard method makes it touched.
///
/// Like [`EntityState`], it is bookkeeping: it compares equal to every other shadow, so
/// `#[derive(PartialEq)]` on an entity compares the values an application sees.
pub struct Shadow<T> {
    value: Option<T>,
}

impl<T> Shadow<T> {
    /// An untouched shadow.
    #[must_use]
    pub const fn new() -> Self {
        Shadow { value: None }
    }

    /// Whether a shard method has set this shadow since the last reset.
    #[must_use]
    pub fn is_touched(&self) -> bool {
        self.value.is_some()
    }

    /// The value, if touched.
    #[must_use]
    pub fn get(&self) -> Option<&T> {
        self.value.as_ref()
    }

    /// Takes the value out, leaving the shadow untouched.
    pub fn take(&mut self) -> Option<T> {
        self.value.take()
    }

    /// Sets the value (touched).
    pub fn set(&mut self, value: T) {
        self.value = Some(value);
    }

    /// Back to untouched (neutral).
    pub fn reset(&mut self) {
        self.value = None;
    }
}

impl<T> Default for Shadow<T> {
    fn default() -> Self {
        Shadow::new()
    }
}

impl<T: Clone> Clone for Shadow<T> {
    fn clone(&self) -> Self {
        Shadow {
            value: self.value.clone(),
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for Shadow<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) => f.debug_tuple("Shadow").field(value).finish(),
            None => f.write_str("Shadow(neutral)"),
        }
    }
}

impl<T> PartialEq for Shadow<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> Eq for Shadow<T> {}

/// What the mapper remembers inside a sharded entity between load and save: the main
/// document as last loaded or saved, so `save` writes the main document only when an
/// unsharded property changed (dirty tracking); and the changes a save took from the
/// shadows but has not seen committed yet, each with the write id it was sent under, so
/// that saving again after an error or a dropped future applies it exactly once.
#[derive(Clone, Default)]
pub struct EntityState {
    /// Shared with the mapper's cache of main documents, which hands the same document to
    /// every `apply` of the entity.
    saved_main: Option<Arc<Document>>,
    /// The incarnation of the stored entity this value was loaded from or inserted as
    /// (`""` for one stored without); `None` for a value built in code.
    incarnation: Option<String>,
    /// Indexed by property; empty until a save stages a change.
    pending: Vec<Pending>,
    /// The shard counts the stored entity records (see `mapper/layout.rs`), by field
    /// name; `None` for a value built in code or stored without a record.
    shard_counts: Option<Arc<ShardCounts>>,
    /// Whether the stored main document holds values of sharded properties that belong
    /// in the shards (stored before the field was sharded, see `mapper/write/adopt.rs`): the
    /// next save moves them.
    adoption: bool,
}

/// The shard layout a stored entity records for its statically sharded properties, by
/// field name (see `mapper/layout.rs`, which reads and writes it).
pub(crate) type ShardCounts = Vec<(String, ShardCount)>;

/// The recorded layout of one statically sharded property (see `mapper/layout.rs`).
///
/// Shard indexes are never reused: `0..base` are the shards of the insert, and every
/// shard a grow adds beyond them takes the next unused index (`next`). Saves fold into
/// the *live* shards: the first `min(shards, base)` base shards and the last
/// `shards - base` (if positive) added ones, `lo()..next`. Loads read the base shards
/// and `from..next`: added shards retired by a shrink (`from..lo()`) stay read until
/// their values are drained into live shards and they are deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShardCount {
    /// How many shards saves fold into.
    pub(crate) shards: u32,
    /// The count at insert, which never changes: the base shards stay for the entity's
    /// life, and keyed operations place their markers in them, so running one again
    /// finds its marker whatever the count is now.
    pub(crate) base: u32,
    /// One past the highest shard index ever created.
    pub(crate) next: u32,
    /// The lowest added shard index still read (`next` when none is).
    pub(crate) from: u32,
}

impl ShardCount {
    /// The layout of a new entity with `shards` shards.
    pub(crate) fn initial(shards: u32) -> Self {
        ShardCount {
            shards,
            base: shards,
            next: shards,
            from: shards,
        }
    }

    /// How many base shards are live.
    pub(crate) fn live_base(&self) -> u32 {
        self.shards.min(self.base)
    }

    /// The lowest live added shard index (`next` when no added shard is live).
    pub(crate) fn lo(&self) -> u32 {
        self.next - (self.shards - self.live_base())
    }

    /// The index of live shard `slot` (`0..shards`).
    pub(crate) fn live_index(&self, slot: u32) -> u32 {
        if slot < self.live_base() {
            slot
        } else {
            self.lo() + (slot - self.live_base())
        }
    }

    /// Whether saves fold into shard `index`.
    pub(crate) fn is_live(&self, index: u32) -> bool {
        index < self.live_base() || (self.lo()..self.next).contains(&index)
    }

    /// Whether loads read shard `index`.
    pub(crate) fn is_read(&self, index: u32) -> bool {
        index < self.base || (self.from..self.next).contains(&index)
    }

    /// The shard indexes loads read.
    pub(crate) fn read_indexes(&self) -> impl Iterator<Item = u32> + use<> {
        (0..self.base).chain(self.from.max(self.base)..self.next)
    }

    /// The added shards retired and not yet deleted: drained, or to be drained.
    pub(crate) fn retired(&self) -> std::ops::Range<u32> {
        self.from.max(self.base)..self.lo()
    }
}

/// A change of one sharded property taken from its shadow by a save and not yet known
/// to be stored.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Pending {
    /// The encoded change (the fold of the shadows staged); `None`: nothing pending.
    pub(crate) value: Option<Value>,
    /// Set while a commit carrying `value` may have been applied: from just before it is
    /// sent until its answer is known.
    pub(crate) sent: Option<Sent>,
}

/// Where and under which write id a pending change was sent.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sent {
    /// The write id the shard document records once it applied it, fixed at the first send.
    pub(crate) write: crate::store::WriteId,
    /// The document it was folded into (a static shard, or the new dynamic one).
    pub(crate) shard: Key,
    /// What was sent under this id when it is more than the pending change: the fold of
    /// the changes of several saves coalesced into one commit (see `mapper/write/coalesce.rs`).
    /// Sending it again sends all of it; the other saves then find it applied.
    pub(crate) value: Option<Value>,
}

impl EntityState {
    /// Fresh state: nothing loaded, so the next save writes the main document.
    #[must_use]
    pub const fn new() -> Self {
        EntityState {
            saved_main: None,
            incarnation: None,
            pending: Vec::new(),
            shard_counts: None,
            adoption: false,
        }
    }

    /// The shard layout the stored entity records, if any.
    pub(crate) fn shard_counts(&self) -> Option<&ShardCounts> {
        self.shard_counts.as_deref()
    }

    /// Whether the stored main document holds values that the next save moves into the
    /// shards (see `mapper/write/adopt.rs`).
    pub(crate) fn adoption_pending(&self) -> bool {
        self.adoption
    }

    /// Records whether the stored main document holds values that belong in the shards.
    pub(crate) fn set_adoption_pending(&mut self, pending: bool) {
        self.adoption = pending;
    }

    /// Records the shard layout of the stored entity.
    pub(crate) fn set_shard_counts(&mut self, counts: Option<Arc<ShardCounts>>) {
        self.shard_counts = counts;
    }

    /// Moves the changes pending in `from` (none of them sent with an unknown outcome)
    /// into this state, which must have none.
    pub(crate) fn take_pending_from(&mut self, from: &mut EntityState) {
        self.pending = std::mem::take(&mut from.pending);
        for pending in &mut self.pending {
            pending.sent = None;
        }
    }

    /// The main document as last loaded or saved.
    #[must_use]
    pub fn saved_main(&self) -> Option<&Document> {
        self.saved_main.as_deref()
    }

    /// Records the main document just loaded or saved.
    pub fn set_saved_main(&mut self, doc: Document) {
        self.saved_main = Some(Arc::new(doc));
    }

    /// [`EntityState::set_saved_main`] with a document shared with others.
    pub(crate) fn share_saved_main(&mut self, doc: Arc<Document>) {
        self.saved_main = Some(doc);
    }

    /// Forgets the saved main document (the next save writes it).
    pub fn clear(&mut self) {
        self.saved_main = None;
    }

    /// Whether a save took a change of some property that is not known to be stored
    /// yet (after an error, a conflict that ran out of retries, or a dropped future).
    /// The next save stores it exactly once.
    #[must_use]
    pub fn has_pending(&self) -> bool {
        self.pending.iter().any(|p| p.value.is_some())
    }

    /// The incarnation of the stored entity this value was loaded from or inserted as.
    pub(crate) fn incarnation(&self) -> Option<&str> {
        self.incarnation.as_deref()
    }

    /// Records the incarnation of the stored entity.
    pub(crate) fn set_incarnation(&mut self, incarnation: Option<String>) {
        self.incarnation = incarnation;
    }

    /// The pending change of `property` (empty when none).
    pub(crate) fn pending(&self, property: usize) -> Pending {
        self.pending.get(property).cloned().unwrap_or_default()
    }

    /// Mutable access to the pending change of `property`.
    pub(crate) fn pending_mut(&mut self, property: usize) -> &mut Pending {
        if self.pending.len() <= property {
            self.pending.resize_with(property + 1, Pending::default);
        }
        &mut self.pending[property]
    }
}

impl fmt::Debug for EntityState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match (self.saved_main.is_some(), self.has_pending()) {
            (_, true) => "EntityState(pending)",
            (true, false) => "EntityState(loaded)",
            (false, false) => "EntityState(new)",
        })
    }
}

impl PartialEq for EntityState {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for EntityState {}
