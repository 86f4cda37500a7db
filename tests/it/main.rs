//! autoshard's integration tests, one binary with a module per feature (as cargo's own
//! `tests/testsuite/main.rs`): every store (memory, standalone Redis, a Redis Cluster,
//! PostgreSQL), faults, concurrency. Each test starts the servers it needs
//! (`autoshard-test-support`) on free loopback ports and stops them afterwards.
//!
//! ```sh
//! ./scripts/test                                # the whole workspace, servers found or installed
//! cargo test -p autoshard-integration --test it exactly_once::   # one module
//! ```

mod adaptive;
mod adoption;
mod builtin_folds;
mod conformance;
mod dynamic_sharding;
mod entity_groups;
mod exactly_once;
mod key_groups;
mod lifecycle;
mod lost_replies;
mod mapper;
mod multi_property;
mod observability;
mod postgres_standbys;
mod postgres_store;
mod read_cache;
mod redis_concurrency;
mod redis_failover;
mod redis_faults;
mod redis_rebalance;
mod redis_store;
mod replica_acks;
mod resharding;
mod sharded_entity;
mod shared_reads;
mod store_contract;
mod stored_values;
