//! Zero-copy hand-off between [`ManagedTensor`] and the owning handles of the
//! [`dlpark`](https://docs.rs/dlpark/0.10) crate (version 0.10), so that a tensor made
//! here reaches dlpark's candle, image, safetensors and cudarc integrations, and a
//! tensor made there reaches ndarray through `ManagedTensor::as_array`.
//!
//! Both crates mirror the same C structs, so a conversion moves one pointer and its
//! ownership: `into_raw` on one side, `from_raw` on the other. No data, shape or
//! strides are copied, and the producer's deleter still runs exactly once, when the
//! last owner drops the handle. One exception: read-only memory that Rust code also
//! reads (a shared `ArcArray`'s export) goes to dlpark as a copy, since dlpark hands any
//! handle to Python, where PyTorch ignores `READ_ONLY` and would write it.
//!
//! | From | To | How | Safe? |
//! |---|---|---|---|
//! | [`ManagedTensor`] | [`dlpark::versioned::Dlpack`] | [`ManagedTensor::into_dlpark`], `TryFrom` | yes; read-only memory of Rust's as a copy |
//! | [`ManagedTensor`] | [`dlpark::legacy::Dlpack`] | [`ManagedTensor::into_dlpark_legacy`], `TryFrom` | yes; refuses `READ_ONLY` |
//! | [`dlpark::versioned::Dlpack`] | [`ManagedTensor`] | [`ManagedTensor::from_dlpark`], [`TryFromDlpack`](::dlpark::TryFromDlpack) | `unsafe` |
//! | [`dlpark::legacy::Dlpack`] | [`ManagedTensor`] | [`ManagedTensor::from_dlpark_legacy`], [`TryFromDlpack`](::dlpark::TryFromDlpack) | `unsafe` |
//!
//! A tensor keeps its pointer when the target has the same ABI. Otherwise it is wrapped
//! in a small header of the other ABI whose deleter calls the original one (as
//! [`ManagedTensor::into_raw`] and [`ManagedTensor::into_raw_legacy`] do), and such a
//! wrapper is removed again when the tensor goes back to its original ABI.
//!
//! # Why the import is `unsafe`
//!
//! A `ManagedTensor` promises that its data pointer is valid for the described
//! elements, so its checked views (`ManagedTensor::as_array`) are safe. A dlpark
//! handle promises less: `dlpark::Managed::from_raw` only requires a readable header
//! with readable shape and strides, and `dlpark::python::from_dlpack` (a safe
//! function) accepts any capsule a Python object returns. dlpark therefore makes all
//! of its own data accessors `unsafe`, and the import into a `ManagedTensor`, after
//! which data access is safe, has to be `unsafe` too. The export needs no such
//! promise: every `ManagedTensor` already satisfies what dlpark asks of a handle.
//!
#![cfg_attr(feature = "ndarray", doc = "```")]
#![cfg_attr(not(feature = "ndarray"), doc = "```ignore")]
//! use dlpack_core::{ManagedTensor, ToDLPack};
//! use dlpark::TryFromDlpack;
//! use ndarray::{Array2, ArrayViewD};
//!
//! let a = Array2::<f32>::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f32);
//! let ptr = a.as_ptr();
//! let tensor: ManagedTensor = a.to_dlpack()?;
//!
//! // Safe: ownership moves to dlpark, nothing is copied.
//! let dlpack = tensor.into_dlpark()?;
//! // SAFETY: a tensor exported by this crate satisfies DLPack's memory, lifetime and
//! // synchronization requirements, and nothing else accesses its data.
//! let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&dlpack, ()) }.unwrap();
//! assert_eq!(view.as_ptr(), ptr);
//!
//! // And back.
//! // SAFETY: as above: the handle still holds this crate's export.
//! let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }?;
//! assert_eq!(tensor.data_ptr().cast::<f32>().cast_const(), ptr);
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! # Thread safety
//!
//! Both handles are `Send` and `Sync`, under the same rule: the deleter may run on
//! any thread. A conversion keeps that guarantee in either direction.

#[cfg(doc)]
use crate::ManagedTensor;
