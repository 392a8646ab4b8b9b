//! Zero-copy DLPack exchange between [`tch`] (libtorch) tensors and
//! [`dlpack_core`]'s [`ManagedTensor`], through libtorch's own converter
//! (`at::fromDLPackVersioned` / `at::toDLPackVersioned`) behind a small C++ shim.
//!
//! ```
//! use dlpack_core::ToDLPack;
//! use dlpack_tch::{ManagedTensorExt, TensorExt};
//! use dlpack_core::ndarray::{Array2, Ix2};
//!
//! let a = Array2::<f32>::from_shape_fn((4, 3), |(i, j)| (i * 3 + j) as f32);
//! let ptr = a.as_ptr();
//! // ndarray → torch: the buffer moves, nothing is copied.
//! let t: tch::Tensor = a.to_dlpack()?.into_tch()?;
//! assert_eq!(t.data_ptr() as *const f32, ptr);
//! // torch → ndarray: rows 1..3, viewed from Rust in the same memory.
//! let rows = t.narrow(0, 1, 2).into_managed()?;
//! let view = rows.as_array::<f32, Ix2>()?;
//! assert_eq!(view.as_ptr(), ptr.wrapping_add(3));
//! assert_eq!(view.row(1).to_vec(), [6.0, 7.0, 8.0]);
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! # What crosses, and what it costs
//!
//! | direction | zero-copy when | otherwise |
//! |---|---|---|
//! | [`ManagedTensorExt::into_tch`] | the tensor is [exclusive](ManagedTensor::is_exclusive) and writable | one copy (torch has no read-only tensors, and a torch tensor is a mutable view) |
//! | [`TensorExt::into_managed`], [`TensorExt::to_managed`] | always | — |
//!
//! - The producer's deleter is handed to libtorch and runs exactly once: when the last
//!   torch tensor that views the storage dies (views made with `narrow`, `view`,
//!   `transpose`... keep it alive), or before `into_tch` returns if libtorch refuses the
//!   tensor or the tensor is copied.
//! - A torch export keeps the storage alive until the [`ManagedTensor`] is dropped. It
//!   is exclusive (mutable views allowed) only from [`into_managed`](TensorExt::into_managed)
//!   of a tensor that was the only handle of its storage (no weak reference to it
//!   either), over memory that only torch reaches: memory torch's own allocator made
//!   (not pinned host memory, which a device copy may still be writing), or a tensor
//!   handed to torch by [`into_tch`](ManagedTensorExt::into_tch) without a copy. Otherwise it is shared,
//!   so `as_array_mut` is refused while torch, or whoever lent torch the memory
//!   (`Tensor::from_blob`, a NumPy array behind `from_numpy`, another DLPack producer,
//!   a mapped file), can still write it. A view made by `narrow`, `select`,
//!   `transpose`... keeps its base tensor (torch tracks it for autograd), so its export
//!   is shared.
//! - `byte_offset` is folded into the data pointer (libtorch ignores it); negative
//!   strides, which torch cannot represent, are an [`Error::Framework`](dlpack_core::Error::Framework); `bool` data is
//!   checked to hold only 0 and 1 (on the CPU), since other bytes are undefined
//!   behaviour in C++ as in Rust.
//! - libtorch's errors (a dtype or device it lacks, a tensor that requires grad, a
//!   conjugated view) come back as [`Error::Framework`](dlpack_core::Error::Framework) with libtorch's one-line message;
//!   no C++ exception ever unwinds into Rust.
//! - CUDA and other devices take the same code path: the pointer and the device move,
//!   the memory is never touched by this crate.
//!
//! # In a `#[derive(ToDLPack, FromDLPack)]` struct
//!
//! A `tch::Tensor` field is exchanged by the [`tensor`] module:
//!
//! ```
//! use dlpack_core::{FromDLPack, ToDLPack};
//!
//! #[derive(ToDLPack, FromDLPack)]
//! struct Layer {
//!     weight: ndarray::Array2<f32>,
//!     #[dlpack(with = "dlpack_tch::tensor")]
//!     bias: tch::Tensor,
//! }
//! ```
//!
//! # Building
//!
//! This crate needs libtorch 2.13.0 (the version tch 0.26 is made for) and a C++17
//! compiler. The simplest libtorch is PyTorch's wheel: `pip install torch==2.13.0`, then
//! build with `LIBTORCH_USE_PYTORCH=1` and that Python first on `PATH`. Test binaries of
//! this crate find libtorch by their rpath; other binaries need `LD_LIBRARY_PATH`, as
//! with tch itself. The `doc-only` feature builds the documentation without libtorch.

mod shim;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use dlpack_core::ffi::DLDeviceType;
use dlpack_core::{DataType, Device, ManagedTensor, Result, TensorBatch};

/// Conversions of a [`ManagedTensor`] into torch.
pub trait ManagedTensorExt: Sized {
    /// Hands the tensor to libtorch: a `tch::Tensor` over the same memory, which owns
    /// the producer's deleter from then on (zero-copy). A tensor that is
    /// [shared](ManagedTensor::is_exclusive) or `READ_ONLY` is copied once instead, since
    /// every torch tensor is writable; the original's deleter then runs before this
    /// returns.
    ///
    /// # Errors
    ///
    /// The tensor is dropped (its deleter runs once) and [`Error`](dlpack_core::Error) returned when its
    /// layout cannot be viewed safely (negative extents, an overflowing span, NULL or
    /// misaligned data, `bool` bytes other than 0 and 1), when torch cannot represent it
    /// (negative strides), or when libtorch refuses it ([`Error::Framework`](dlpack_core::Error::Framework): a dtype or
    /// device torch lacks).
    fn into_tch(self) -> Result<tch::Tensor>;
}

impl ManagedTensorExt for ManagedTensor {
    fn into_tch(self) -> Result<tch::Tensor> {
        check_for_torch(&self)?;
        let copy = self.is_read_only() || !self.is_exclusive();
        shim::into_torch(self, copy)
    }
}

/// Conversions of a `tch::Tensor` into a [`ManagedTensor`].
pub trait TensorExt {
    /// Exports the tensor without a copy, consuming this handle: the [`ManagedTensor`]
    /// keeps the storage alive. It is exclusive when this handle was the only one of
    /// its storage (no other tensor, view or autograd node reaches it) and the memory
    /// is torch's alone (made by torch's allocator, or handed over by
    /// [`ManagedTensorExt::into_tch`] without a copy), shared otherwise.
    ///
    /// # Errors
    ///
    /// [`Error::Framework`](dlpack_core::Error::Framework) for what DLPack cannot carry: a tensor that requires grad
    /// (export `detach()`, as PyTorch asks), a conjugate or negative view (export
    /// `resolve_conj()` / `resolve_neg()`), a sparse or quantized tensor.
    fn into_managed(self) -> Result<ManagedTensor>;

    /// Exports the tensor without a copy, keeping this handle: the [`ManagedTensor`] is
    /// shared, since torch can still write the memory.
    ///
    /// # Errors
    ///
    /// As [`into_managed`](Self::into_managed).
    fn to_managed(&self) -> Result<ManagedTensor>;
}

impl TensorExt for tch::Tensor {
    fn into_managed(self) -> Result<ManagedTensor> {
        let (managed, unique) = shim::from_torch(&self)?;
        Ok(if unique {
            shim::into_exclusive(managed, self)
        } else {
            managed
        })
    }

    fn to_managed(&self) -> Result<ManagedTensor> {
        shim::from_torch(self).map(|(managed, _)| managed)
    }
}

/// The `tch` device of a DLPack device, as libtorch maps it (CUDA ordinals carry over;
/// ROCm maps to CUDA on ROCm builds of libtorch).
///
/// # Errors
///
/// [`Error::Framework`](dlpack_core::Error::Framework) for a device libtorch or tch does not have.
pub fn tch_device(device: Device) -> Result<tch::Device> {
    const CPU: i32 = 0;
    const CUDA: i32 = 1;
    const VULKAN: i32 = 10;
    const MPS: i32 = 13;
    let (kind, index) = shim::torch_device(device.device_type.0, device.device_id)?;
    match kind {
        CPU => Ok(tch::Device::Cpu),
        CUDA => Ok(tch::Device::Cuda(usize::try_from(index).unwrap_or(0))),
        VULKAN => Ok(tch::Device::Vulkan),
        MPS => Ok(tch::Device::Mps),
        _ => Err(shim::torch_error(format!(
            "device {device} has no tch::Device (torch device type {kind})"
        ))),
    }
}

/// The DLPack device of a `tch` device.
pub fn dlpack_device(device: tch::Device) -> Device {
    match device {
        tch::Device::Cpu => Device::CPU,
        tch::Device::Cuda(index) => Device::new(
            DLDeviceType::kDLCUDA,
            i32::try_from(index).unwrap_or(i32::MAX),
        ),
        tch::Device::Mps => Device::new(DLDeviceType::kDLMetal, 0),
        tch::Device::Vulkan => Device::new(DLDeviceType::kDLVulkan, 0),
    }
}

/// What libtorch would accept without checking, checked here: the layout must be one
/// that torch can address without leaving the allocation, and `bool` bytes valid.
fn check_for_torch(tensor: &ManagedTensor) -> Result<()> {
    if let Some(strides) = tensor.strides() {
        if let Some(axis) = strides.iter().position(|&s| s < 0) {
            return Err(shim::torch_error(format!(
                "stride {} of axis {axis} is negative, which torch tensors cannot have \
                 (copy the array into standard order first)",
                strides[axis]
            )));
        }
    }
    // Extents, overflow, NULL data and the address space, as the core checks them.
    let span = tensor.byte_span()?;
    // libtorch reads elements of its own alignment: the element size, up to 16 bytes.
    let item = tensor.dtype().size_in_bytes();
    span.check_aligned(if item.is_power_of_two() {
        item.min(16)
    } else {
        1
    })?;
    let dtype = tensor.dtype();
    if span.elements > 0 && dtype == DataType::BOOL && tensor.device().is_cpu_accessible() {
        // A view of every distinct byte checks each is 0 or 1.
        tensor.as_array::<bool, dlpack_core::ndarray::IxDyn>()?;
    }
    Ok(())
}

/// Exchange of a `tch::Tensor` field in a `#[derive(ToDLPack, FromDLPack)]` struct:
/// `#[dlpack(with = "dlpack_tch::tensor")]`.
///
/// Export consumes the field with [`TensorExt::into_managed`]; import makes it with
/// [`ManagedTensorExt::into_tch`] (zero-copy for exclusive, writable tensors).
pub mod tensor {
    use dlpack_core::{FromDLPack, ManagedTensor, ToDLPack};

    use super::{ManagedTensorExt, Result, TensorBatch, TensorExt};

    /// Exports `tensor` as the batch entry named `prefix`.
    ///
    /// # Errors
    ///
    /// As [`TensorExt::into_managed`], and a duplicate name.
    pub fn to_dlpack_into(
        tensor: tch::Tensor,
        prefix: &str,
        batch: &mut TensorBatch,
    ) -> Result<()> {
        let managed = tensor.into_managed().map_err(|e| e.in_tensor(prefix))?;
        managed.to_dlpack_into(prefix, batch)
    }

    /// Takes the batch entry named `prefix` into a `tch::Tensor`.
    ///
    /// # Errors
    ///
    /// [`Error::MissingTensor`](dlpack_core::Error::MissingTensor) when there is none,
    /// and as [`ManagedTensorExt::into_tch`], with the name attached.
    pub fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<tch::Tensor> {
        let managed = ManagedTensor::from_dlpack_in(prefix, batch)?;
        managed.into_tch().map_err(|e| e.in_tensor(prefix))
    }
}
