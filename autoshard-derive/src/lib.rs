//! Procedural macros of autoshard. Use them through the `autoshard` crate.
