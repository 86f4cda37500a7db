//! Compile-fail and pass cases of the annotation macros, one folder per macro. Regenerate
//! the expected output with `TRYBUILD=overwrite cargo test --test compiletest`, then read
//! every changed `.stderr` as a user would.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/**/*.rs");
    t.pass("tests/pass/**/*.rs");
}
