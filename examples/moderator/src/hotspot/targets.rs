//! What `hotspot` measures: the targets, each a way a vote reaches the store, by name.

use super::raw::Raw;
use autoshard::prelude::*;
use std::time::Duration;

/// The staleness bound of the read cache of the `cached` targets: a load answers from
/// what a load of this `Mapper` read at most this long ago, with the votes this `Mapper`
/// confirmed since folded in (the module docs of `autoshard::ReadCache`).
pub const CACHE_STALENESS: Duration = Duration::from_millis(100);

/// How a vote reaches the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// `update`: load the question, vote, save.
    Update,
    /// `apply`: vote without loading the votes.
    Apply,
}

/// The fold of the sharded votes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoldKind {
    /// `fold = sum`: merged by the store.
    BuiltIn,
    /// A `#[shard_fold]` function: read and compare-and-set.
    Function,
}

/// One thing the clients hammer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The raw store: `HINCRBY` on a plain Redis hash, a slotted counter on PostgreSQL.
    Raw,
    /// `update` of [`NaiveQuestion`](crate::model::NaiveQuestion).
    Naive,
    /// A sharded question.
    Sharded {
        /// How votes are written.
        write: Write,
        /// The votes' fold.
        fold: FoldKind,
        /// One `Mapper` per client instead of one shared by all.
        mapper_per_client: bool,
        /// Coalesced saves and shared reads (the default) or neither.
        sharing: bool,
        /// Loads through a read cache of [`CACHE_STALENESS`] (one per `Mapper`).
        cached: bool,
    },
}

const fn sharded(write: Write, fold: FoldKind, mapper_per_client: bool, sharing: bool) -> Target {
    Target::Sharded {
        write,
        fold,
        mapper_per_client,
        sharing,
        cached: false,
    }
}

/// Every target, by name, in the order they run.
pub const TARGETS: [(&str, Target); 10] = [
    ("raw HINCRBY", Target::Raw),
    ("naive update", Target::Naive),
    (
        "update sum",
        sharded(Write::Update, FoldKind::BuiltIn, false, true),
    ),
    (
        "update sum unshared",
        sharded(Write::Update, FoldKind::BuiltIn, false, false),
    ),
    (
        "update fold-fn",
        sharded(Write::Update, FoldKind::Function, false, true),
    ),
    (
        "apply sum",
        sharded(Write::Apply, FoldKind::BuiltIn, false, true),
    ),
    (
        "update sum mapper/client",
        sharded(Write::Update, FoldKind::BuiltIn, true, true),
    ),
    (
        "update fold-fn mapper/client",
        sharded(Write::Update, FoldKind::Function, true, true),
    ),
    (
        "apply sum mapper/client",
        sharded(Write::Apply, FoldKind::BuiltIn, true, true),
    ),
    (
        "update sum cached mapper/client",
        Target::Sharded {
            write: Write::Update,
            fold: FoldKind::BuiltIn,
            mapper_per_client: true,
            sharing: true,
            cached: true,
        },
    ),
];

/// The targets `hotspot` runs, by name, in order: those `only` picks (all when it is
/// empty, see [`crate::only`]), raw only where the store has a raw command.
/// [`Error::Invalid`] when `only` leaves none, naming the targets there are.
pub(super) fn chosen(raw: Option<&Raw>, only: &[String]) -> Result<Vec<(&'static str, Target)>> {
    let available: Vec<(&'static str, Target)> = TARGETS
        .iter()
        .filter_map(|&(name, target)| match (target, raw) {
            (Target::Raw, None) => None,
            (Target::Raw, Some(raw)) => Some((raw.name(), target)),
            _ => Some((name, target)),
        })
        .collect();
    crate::only::pick(available, only, "the targets on this store")
}

/// The name of `target` in [`TARGETS`].
pub(super) fn name_of(target: Target) -> &'static str {
    TARGETS
        .iter()
        .find(|(_, t)| *t == target)
        .map_or("", |(name, _)| name)
}
