//! Compile-fail tests of `#[derive(ToDLPack, FromDLPack)]`: see `tests/compiletest.rs`.
