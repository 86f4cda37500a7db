//! Layout changes of stored entities, while writers run.
//!
//! - `reshard`: the number of static shards of an entity (grow, shrink).
//! - `drain`: the values of the shards a shrink retired moved into live ones.
//! - `compact`: dynamic shards folded back into the compacted document.

pub(in crate::mapper) mod compact;
pub(in crate::mapper) mod drain;
pub(in crate::mapper) mod reshard;
