//! The read path: what a load reads, how it folds, and what spares it a round trip.
//!
//! - `load`: one entity, its main document and shards in one lookup, folded; the
//!   dynamic-shard half of a load (scans checked against compaction); concurrent loads of
//!   one entity served by one read.
//! - `batch`: `load_many`, `aggregate` and `aggregates`.
//! - `snapshot`: what one read found, and its fold (every load folds there).
//! - `cache`: the optional [`ReadCache`](crate::ReadCache): caching only.

pub(in crate::mapper) mod batch;
pub(in crate::mapper) mod cache;
pub(in crate::mapper) mod load;
pub(in crate::mapper) mod snapshot;
