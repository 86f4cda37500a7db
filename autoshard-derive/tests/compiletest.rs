//! Compile-fail cases of the annotation macros, one folder per macro (`ui/`). Regenerate
//! the expected output with `TRYBUILD=overwrite cargo test -p autoshard-derive-tests --test
//! compiletest`, then read every changed `.stderr` as a user would. The pass cases are `pass.rs`'s:
//! they build with the workspace, so trybuild only checks, never builds, its project.

#[test]
fn ui() {
    // The expected output is the compiler's alone. CI builds the workspace through Clippy
    // (`RUSTC_WORKSPACE_WRAPPER`, see `.ci/run`), which trybuild's own cargo would inherit
    // and whose lints would then join the cases' output.
    for lint_wrapper in ["RUSTC_WORKSPACE_WRAPPER", "CLIPPY_ARGS"] {
        std::env::remove_var(lint_wrapper);
    }
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/**/*.rs");
}
