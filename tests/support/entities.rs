//! The hand-written `Entity` impls of the runtime's tests (exactly what the macros
//! generate), shared rather than copied: `Question` (10 static shards) and
//! `NaiveQuestion` (votes in the main document).

#![allow(dead_code)]

include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/autoshard-runtime/tests/support/entities.rs"
));
