//! Compile-fail cases of the annotation macros, one folder per macro (`tests/ui/`).
//! Regenerate the expected output with `TRYBUILD=overwrite cargo test --test compiletest`,
//! then read every changed `.stderr` as a user would. The pass cases are `pass.rs`'s:
//! they build with the workspace, so trybuild only checks, never builds, its project.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/**/*.rs");
}
