//! The DLPack C exchange API (DLPack 1.3): a table of C functions that a Python type
//! publishes as `type(obj).__dlpack_c_exchange_api__`, a capsule named
//! `"dlpack_exchange_api"`.
//!
//! - `consumer`: [`import`] reads a producer's table (PyTorch 2.10+ has one) and takes
//!   an owned tensor with one C call instead of a `__dlpack__` call and a capsule.
//! - `producer`: [`table_capsule`], our [`Tensor`](super::Tensor)'s own table, so that
//!   C-level consumers import ours without a Python call.

mod consumer;
mod producer;

pub(in crate::python) use consumer::{Imported, import};
pub(in crate::python) use producer::table_capsule;
