//! What autoshard's own tests share (not published): test servers that the tests start
//! and stop themselves, and test entities declared with the real macros.
//!
//! - [`redis`]: a standalone `redis-server` or a 3-node Redis Cluster on free loopback
//!   ports in a temporary directory, killed when dropped; never a server someone else
//!   started.
//! - [`postgres`]: a fresh PostgreSQL cluster (`initdb`) on a free loopback port in a
//!   temporary directory, run as the `postgres` user under root, shut down when dropped.
//! - [`concurrency`]: 64 tasks x 500 votes, sharded and naive, with and without retries.
//! - [`entities`]: `Question` (10 static shards), `NaiveQuestion` (votes in the main
//!   document), `Counter` (dynamic shards), `Account` (key-group transfers), `Tips` (a
//!   `fold = sum` counter: store merges).
//! - [`groups`]: entity groups: `Topic`/`Reply` (8 sub-groups), `Thread`/`Post` (one).
//! - [`board`]: `Board`, three properties with three folds (sum, max, union).
//! - [`every_store`]: one harness that runs a suite on memory, standalone Redis, a Redis
//!   Cluster and PostgreSQL (`every_store!`).
//! - [`progress`]: writers' acknowledged and failed calls, and waits for those counts.
//! - [`proxy`]: a TCP proxy in front of a test server that loses replies on demand.
//! - [`store`]: `TestStore`, the one store decorator tests configure instead of writing
//!   their own (page order and size, torn reads, counted or forced conflicts).

// Test plumbing: a server that cannot start fails the test that asked for it.
#![allow(clippy::missing_panics_doc, clippy::must_use_candidate, missing_docs)]

pub mod board;
pub mod concurrency;
pub mod entities;
pub mod every_store;
pub mod groups;
pub mod postgres;
pub mod progress;
pub mod proxy;
pub mod redis;
pub mod store;

/// How long a test server may take to start (answer its first ping, reach a healthy
/// cluster state, accept connections) before the test fails: a bound for a broken
/// server, far above what a start takes on a busy slow machine. The waits poll and end
/// as soon as the server is ready, and stop at once when its process exits.
pub const START_UP_BOUND: std::time::Duration = std::time::Duration::from_mins(2);
