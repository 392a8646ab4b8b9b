//! [`ToDLPack`] and [`FromDLPack`] for burn's flex CPU tensors
//! ([`burn_flex::FlexTensor`], burn 0.22), zero-copy both ways.
//!
//! | direction | memory | the [`ManagedTensor`] or tensor is |
//! |---|---|---|
//! | `FlexTensor::to_dlpack` | the tensor's `Arc<Bytes>`, shared with the header | writable and exclusive when that was the only reference; `READ_ONLY` and shared otherwise (burn never writes into shared bytes) |
//! | `FlexTensor::from_dlpack` | the producer's memory, in an allocation controller that owns the `ManagedTensor`; a copy of the elements when they leave gaps in it | any layout: negative, zero or permuted strides, offsets |
//!
//! burn's bytes are one slice, so an import lends the producer's memory only when the
//! tensor's elements fill it from their lowest to their highest byte: the bytes between
//! the elements of a column, say, belong to someone else, who may be writing them, so
//! such a layout is copied element by element (its deleter runs then).
//! burn writes in place only into bytes it holds alone, and asks their controller for
//! mutable memory first. The controller of an import lends the producer's memory only
//! when the tensor is [exclusive](ManagedTensor::is_exclusive), writable and has no
//! two elements at one address; otherwise (a `READ_ONLY` tensor, a Python import, a
//! broadcast) the first write copies it, and the producer's deleter runs then, once.
//! In every other case it runs when burn drops the last tensor that uses the bytes.
//!
//! Checked on import: the dtype (every float, integer and `bool` type both have; a
//! `bool` must hold 0 or 1), a CPU-accessible device ([`Error::UnsupportedDevice`]
//! otherwise), and the layout (extents, overflow, NULL data, element alignment, which
//! burn needs). On export, the flex layout itself, which burn does not validate: every
//! element must lie inside the tensor's bytes ([`Error::OutOfBuffer`]). Quantized and
//! `Flex32` tensors are an [`Error::Framework`].
//!
//! burn's own `Tensor<D, K>` dispatches at run time; its flex primitive is the
//! `FlexTensor`. With burn's `flex` and `extension` features:
//!
//! ```ignore
//! use burn::backend::Flex;
//! use burn::tensor::{Device, Tensor};
//! use dlpack_core::{FromDLPack, ToDLPack};
//!
//! let t = Tensor::<2>::from_data([[1.0f32, 2.0], [3.0, 4.0]], &Device::flex());
//! let flex = t.try_into_primitive::<Flex>().expect("a flex tensor");
//! let managed = flex.to_dlpack()?; // zero-copy
//! let back = Tensor::<2>::from_primitive::<Flex>(burn_flex::FlexTensor::from_dlpack(managed)?);
//! ```
//!
//! The impls are on `FlexTensor`, not on `Tensor`, because the crate that defines
//! `Tensor` (burn-tensor 0.22) has an optional dependency on tch 0.22, which cannot
//! share a lockfile with the tch 0.26 of `dlpack-tch` (both link the native `tch`
//! library): no workspace or application can hold burn-tensor 0.22 and tch 0.26
//! together. The derive accepts `FlexTensor` fields like arrays.
//!
//! This feature needs Rust 1.95, as burn does.

#[cfg(doc)]
use crate::{Error, FromDLPack, ManagedTensor, ToDLPack};
