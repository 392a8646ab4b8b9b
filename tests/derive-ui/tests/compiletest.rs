//! Compile-fail tests of the derive: each `ui/*.rs` must fail to compile with exactly the
//! errors in its `.stderr`. After an intended change of a message, regenerate with
//! `TRYBUILD=overwrite` and review the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/*.rs");
}
