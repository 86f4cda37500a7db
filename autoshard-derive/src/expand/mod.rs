//! Code generation, from the checked model only: one module per macro (`entity`,
//! `sharded`, `shard_method`, `shard_fold`), the derive's parts (`hooks`, `group`), and
//! the dummy impls emitted beside errors. The hidden names the macros share are in
//! `internals::names`.

pub mod dummy;
pub mod entity;
mod group;
mod hooks;
pub mod shard_fold;
pub mod shard_method;
pub mod sharded;
#[cfg(test)]
mod snapshot;
