//! Helpers shared by the facade's integration tests.

pub mod redis;
