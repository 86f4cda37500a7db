//! autoshard: annotation-driven sharding of hot-spot data objects in NoSQL document
//! stores. See the README for a tour.

pub use autoshard_runtime::*;

/// Everything an application needs: `use autoshard::prelude::*;`.
pub mod prelude {
    pub use autoshard_runtime::{DocumentStore, Entity, Error, Key, Result};
}
