//! The Python test extension `dlpack_test_ext` (feature `python`), which the pytest suite
//! in `python/` imports, and its Rust unit tests (an embedded interpreter). Without the
//! feature the library is empty: the package is there for its cross-crate tests
//! (`tests/`), the derive's compile-fail cases (`ui/`), the examples that need other
//! frameworks (`examples/`) and the benchmarks whose anchors are other crates
//! (`benches/`). Where each kind of test goes: this package's README.md.

#[cfg(feature = "python")]
mod checkpoints;
#[cfg(feature = "python")]
mod exchange;
#[cfg(feature = "python")]
mod models;
#[cfg(feature = "python")]
mod python;
#[cfg(feature = "python")]
mod weights;
