//! Shared helpers for the integration tests, and (feature `python`) the Python test
//! extension `dlpack_test_ext` that the pytest suite in `tests/python` imports.

#[cfg(feature = "python")]
mod checkpoints;
#[cfg(feature = "python")]
mod exchange;
#[cfg(feature = "python")]
mod python;
#[cfg(feature = "python")]
mod weights;
