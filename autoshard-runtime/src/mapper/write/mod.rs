//! The write path: every operation that changes an entity, and the machinery that keeps
//! each change applied exactly once.
//!
//! - `insert`: `insert` and `delete`.
//! - `save`: `save`, which stages each sharded change and writes it.
//! - `apply`: `apply`, a sharded change without reading the shards, and its cache of main
//!   documents.
//! - `update`: `update` (load, change, save).
//! - `keyed`: `update_once`, a change applied once per operation name.
//! - `static_shard`: the static-shard writer (one property's change into one shard), and
//!   the one fold of a change into a static shard.
//! - `coalesce`: write coalescing (concurrent saves of one property folded into one
//!   commit), and the claims that tell each save what became of its change.
//! - `dynamic`: the dynamic-shard writer (a new shard document per change).
//! - `write_ids`: pending changes, the write ids that make sending one again safe, the
//!   write window a change may be sent again within, and the shard lanes (which shard a
//!   write goes to, and the writer it is sent under).
//! - `adopt`: values stored before a field was sharded move into its shards.

pub(in crate::mapper) mod adopt;
pub(in crate::mapper) mod apply;
pub(in crate::mapper) mod coalesce;
pub(in crate::mapper) mod dynamic;
pub(in crate::mapper) mod insert;
pub(in crate::mapper) mod keyed;
pub(in crate::mapper) mod save;
pub(in crate::mapper) mod static_shard;
pub(in crate::mapper) mod update;
pub(in crate::mapper) mod write_ids;
