//! The dlpark bridge (feature `dlpark`): see the guide page `guide::dlpark` for
//! what it does and why its import is `unsafe`.

use core::mem::{align_of, offset_of, size_of};

use ::dlpark::TryFromDlpack;
use ::dlpark::ffi as dp;
use ::dlpark::{legacy, versioned};

use crate::error::{Error, Result};
use crate::ffi;
use crate::tensor::ManagedTensor;
use crate::tensor::ReadOnlyLegacyError;

// The hand-offs below rest on three facts, stated here once:
//
// (A) ABI: the two crates' mirrors of `dlpack.h` are the same C structs (asserted
//     below), so a pointer to one is a valid pointer to the other, and either crate's
//     deleter type accepts the other's struct.
// (B) Ownership: a pointer from `into_raw` on either side carries the duty to call the
//     deleter once; the receiving handle takes that duty over, and the deleter, an
//     `extern "C"` function, cannot unwind.
// (C) Threads and headers: both crates let any thread call the deleter
//     (`ManagedTensor: Send`, dlpark's `ManagedTensorBase` contract), and both require
//     that the header, shape and strides stay readable and unchanged until the
//     deleter runs (`ManagedTensor::from_raw`, `dlpark::Managed::from_raw`; this
//     crate's own headers keep them in the allocation the deleter frees).
//
// The two crates' mirrors of `dlpack.h` must be the same C structs: same sizes,
// alignments and field offsets, and field types whose every bit pattern is valid on
// both sides (integers, raw pointers, `Option` of a function pointer, and dlpark's
// `DlpackFlags`, a `repr(transparent)` bitflags `u64` that keeps unknown bits). The
// integer newtypes differ only in signedness (`DLDeviceType` is `i32` here and
// `c_uint` there) and the deleters only in the pointee type of their argument, which
// keeps the function pointers ABI-compatible (see "ABI compatibility" in the
// documentation of `fn` pointers).
const _: () = {
    macro_rules! same_layout {
        ($ours:ty, $theirs:ty, [$($field:ident),*]) => {
            assert!(size_of::<$ours>() == size_of::<$theirs>());
            assert!(align_of::<$ours>() == align_of::<$theirs>());
            $(assert!(offset_of!($ours, $field) == offset_of!($theirs, $field));)*
        };
    }
    same_layout!(ffi::DLPackVersion, dp::DLPackVersion, [major, minor]);
    same_layout!(ffi::DLDeviceType, dp::DLDeviceType, []);
    same_layout!(ffi::DLDevice, dp::DLDevice, [device_type, device_id]);
    same_layout!(ffi::DLDataTypeCode, dp::DLDataTypeCode, []);
    same_layout!(ffi::DLDataType, dp::DLDataType, [code, bits, lanes]);
    same_layout!(
        ffi::DLTensor,
        dp::DLTensor,
        [data, device, ndim, dtype, shape, strides, byte_offset]
    );
    same_layout!(
        ffi::DLManagedTensor,
        dp::DLManagedTensor,
        [dl_tensor, manager_ctx, deleter]
    );
    same_layout!(
        ffi::DLManagedTensorVersioned,
        dp::DLManagedTensorVersioned,
        [version, manager_ctx, deleter, flags, dl_tensor]
    );
    assert!(size_of::<u64>() == size_of::<::dlpark::DlpackFlags>());
    assert!(align_of::<u64>() == align_of::<::dlpark::DlpackFlags>());
    assert!(ffi::DLPACK_MAJOR_VERSION == dp::DLPACK_MAJOR_VERSION);
};

impl ManagedTensor {
    /// Hands this tensor over to dlpark as a versioned handle, without copying, unless
    /// it is read-only memory that Rust code also reads (a shared `ArcArray`'s export, a
    /// burn tensor with other handles, a `from_owner` tensor flagged `READ_ONLY`): that
    /// is handed over as a copy (flagged `IS_COPIED`), since dlpark makes a Python
    /// capsule of any handle, and PyTorch writes a `READ_ONLY` tensor as if it were
    /// writable, which would write memory that Rust reads as immutable. (The `unsafe`
    /// [`into_dlpark_unchecked`](Self::into_dlpark_unchecked) hands it over as it is.)
    ///
    /// A versioned tensor moves as it is (the same pointer); a legacy one is wrapped
    /// in a versioned header (flags 0) whose deleter calls the legacy deleter. The
    /// deleter runs once, when the returned handle is dropped.
    ///
    /// The handle satisfies DLPack's memory, lifetime and synchronization
    /// requirements in so far as this tensor did (for a tensor made by this crate:
    /// fully; a shared one, such as a model field's share
    /// ([`is_exclusive`](Self::is_exclusive) is false), is still written by its other
    /// holders, so do not import it mutably), which is what dlpark's `unsafe` imports, such as
    /// [`TryFromDlpack`] for `ndarray::ArrayViewD` or `candle_core::Tensor`, ask of
    /// their caller. Like [`into_raw`](Self::into_raw), it can be
    /// imported back with [`from_dlpark`](Self::from_dlpark).
    ///
    /// # Errors
    ///
    /// Only for a copy: [`Error::AllocationFailed`] when it cannot be allocated (a
    /// broadcast too large for memory), and the errors of a layout that cannot be
    /// copied; the tensor is dropped (its deleter runs once).
    pub fn into_dlpark(self) -> Result<versioned::Dlpack> {
        let tensor = if self.is_rust_immutable() {
            self.copy_as_bytes(true)?
        } else {
            self
        };
        // SAFETY: a copy is nobody else's; any other tensor is no read-only memory of
        // Rust's (`is_rust_immutable`), so a consumer's writes reach no Rust reader.
        Ok(unsafe { tensor.into_dlpark_unchecked() })
    }

    /// [`into_dlpark`](Self::into_dlpark) without its copy of read-only memory of
    /// Rust's: the tensor is handed over as it is, flagged as it is.
    ///
    /// # Safety
    ///
    /// - no consumer of the handle writes the tensor's memory while Rust code may read
    ///   it through another handle: in particular, the handle does not reach PyTorch
    ///   (through dlpark's Python conversion), which ignores `READ_ONLY`.
    pub unsafe fn into_dlpark_unchecked(self) -> versioned::Dlpack {
        let raw = self.into_raw();
        // SAFETY:
        // - `raw` is an initialised `DLManagedTensorVersioned` that `into_raw` gave up
        //   to us, and a valid dlpark struct (A);
        // - dlpark's handle now calls the deleter, once (B);
        // - header, shape and strides stay valid until then, and any thread may call
        //   the deleter (C).
        match unsafe { versioned::Dlpack::from_raw(raw.cast::<dp::DLManagedTensorVersioned>()) } {
            Ok(dlpack) => dlpack,
            // `into_raw` never returns NULL, and every `ManagedTensor` has major
            // version 1 (`from_raw` rejects the others, and this crate writes 1.3).
            Err(err) => unreachable!("dlpark refused a valid DLPack 1.x tensor: {err}"),
        }
    }

    /// Hands this tensor over to dlpark as a legacy (pre-1.0) handle, for consumers
    /// that only take `DLManagedTensor`, without copying.
    ///
    /// A legacy tensor moves as it is; a versioned one is wrapped in a legacy header
    /// whose deleter calls the versioned deleter. The deleter runs once, when the
    /// returned handle is dropped.
    ///
    /// # Errors
    ///
    /// A tensor flagged `READ_ONLY` cannot be expressed in the legacy ABI, whose
    /// consumers assume they may write. It comes back, untouched, inside the
    /// [`ReadOnlyLegacyError`] ([`ReadOnlyLegacyError::into_tensor`]); dropping the
    /// error drops the tensor, which runs its deleter once.
    pub fn into_dlpark_legacy(self) -> Result<legacy::Dlpack, ReadOnlyLegacyError> {
        let raw = self.into_raw_legacy()?;
        // SAFETY:
        // - `raw` is an initialised `DLManagedTensor` that `into_raw_legacy` gave up to
        //   us, and a valid dlpark struct (A);
        // - dlpark's handle now calls the deleter, once (B);
        // - header, shape and strides stay valid until then, and any thread may call
        //   the deleter (C).
        match unsafe { legacy::Dlpack::from_raw(raw.cast::<dp::DLManagedTensor>()) } {
            Ok(dlpack) => Ok(dlpack),
            // A legacy tensor has no version to reject, and `raw` is never NULL.
            Err(err) => unreachable!("dlpark refused a non-null legacy tensor: {err}"),
        }
    }

    /// Takes over a tensor that dlpark owns, without copying: the same pointer, whose
    /// deleter now runs when the returned `ManagedTensor` is dropped.
    ///
    /// A tensor that this crate exported comes back as it left, so it is recognized
    /// again: `Array::from_dlpack`, for instance, reclaims the array without a copy.
    /// (The wrapper that [`into_dlpark`](Self::into_dlpark) puts around a legacy
    /// tensor stays until the tensor goes back to the legacy ABI.)
    ///
    /// # Errors
    ///
    /// The checks of [`ManagedTensor::from_raw`]: a major version other than 1,
    /// a negative `ndim`, a NULL or misaligned `shape`, a misaligned `strides`. The
    /// deleter has run once when the error is returned.
    ///
    /// # Safety
    ///
    /// What [`ManagedTensor::from_raw`] requires of the pointer, beyond what a dlpark
    /// handle already guarantees (an initialised header with readable, unchanging
    /// shape and strides, and a deleter that may be called once from any thread):
    ///
    /// - `data + byte_offset` addresses memory on `device` that holds the elements
    ///   described by shape, strides and dtype, valid for reads until the deleter is
    ///   called, and for writes unless the `READ_ONLY` flag is set;
    /// - while the tensor lives nobody else writes that memory, and while a mutable
    ///   view borrowed from it lives nobody else reads it either.
    ///
    /// A handle made by dlpark's producers (`ndarray`, `candle`, `image`, ...) meets
    /// the first point by their `finish` contract; the second is up to the caller,
    /// for instance by dropping or not mutating the candle tensor an export came
    /// from, or by exporting it with the `READ_ONLY` flag.
    pub unsafe fn from_dlpark(tensor: versioned::Dlpack) -> Result<Self> {
        let raw = tensor.into_raw().cast::<ffi::DLManagedTensorVersioned>();
        // SAFETY:
        // - `raw` is an initialised, aligned `DLManagedTensorVersioned` (a dlpark
        //   handle holds nothing else) that `into_raw` gave up to us (A);
        // - the `ManagedTensor` now calls the deleter, once (B);
        // - header, shape and strides stay valid until then, and any thread may call
        //   the deleter (C);
        // - the data requirements are the caller's (this function's `# Safety`).
        unsafe { Self::from_raw(raw) }
    }

    /// Takes over a legacy tensor that dlpark owns, without copying: the same
    /// pointer, whose deleter now runs when the returned `ManagedTensor` is dropped.
    ///
    /// Like every legacy tensor it is treated as writable (see
    /// [`from_raw_legacy`](Self::from_raw_legacy)). The wrapper that
    /// [`into_dlpark_legacy`](Self::into_dlpark_legacy) puts around a versioned tensor
    /// stays until the tensor goes back to the versioned ABI.
    ///
    /// # Errors
    ///
    /// The checks of [`ManagedTensor::from_raw_legacy`]; the deleter has run once
    /// when the error is returned.
    ///
    /// # Safety
    ///
    /// As for [`from_dlpark`](Self::from_dlpark); in addition, since a legacy tensor
    /// cannot say it is read-only, the producer must allow writes to the data.
    pub unsafe fn from_dlpark_legacy(tensor: legacy::Dlpack) -> Result<Self> {
        let raw = tensor.into_raw().cast::<ffi::DLManagedTensor>();
        // SAFETY:
        // - `raw` is an initialised, aligned `DLManagedTensor` that `into_raw` gave up
        //   to us (A);
        // - the `ManagedTensor` now calls the deleter, once (B);
        // - header, shape and strides stay valid until then, and any thread may call
        //   the deleter (C);
        // - the data requirements, writes included, are the caller's.
        unsafe { Self::from_raw_legacy(raw) }
    }
}

/// Moves the tensor into a dlpark versioned handle (read-only memory of Rust's as a
/// copy): [`ManagedTensor::into_dlpark`].
impl TryFrom<ManagedTensor> for versioned::Dlpack {
    type Error = Error;

    fn try_from(tensor: ManagedTensor) -> Result<Self> {
        tensor.into_dlpark()
    }
}

/// Moves the tensor into a dlpark legacy handle, unless it is `READ_ONLY`:
/// [`ManagedTensor::into_dlpark_legacy`].
impl TryFrom<ManagedTensor> for legacy::Dlpack {
    type Error = ReadOnlyLegacyError;

    fn try_from(tensor: ManagedTensor) -> Result<Self, ReadOnlyLegacyError> {
        tensor.into_dlpark_legacy()
    }
}

/// dlpark's conversion trait: [`ManagedTensor::from_dlpark`].
impl TryFromDlpack<versioned::Dlpack> for ManagedTensor {
    type Error = Error;

    /// Takes over the tensor without copying; see [`ManagedTensor::from_dlpark`].
    ///
    /// # Safety
    ///
    /// The requirements of [`ManagedTensor::from_dlpark`]. Beyond the trait's DLPack
    /// requirements, they include exclusivity: nobody else writes the data while the
    /// tensor lives, or reads it while a mutable view of it lives.
    unsafe fn try_from_dlpack(dlpack: versioned::Dlpack, _context: ()) -> Result<Self> {
        // SAFETY: the caller upholds `from_dlpark`'s requirements (see `# Safety`).
        unsafe { Self::from_dlpark(dlpack) }
    }
}

/// dlpark's conversion trait: [`ManagedTensor::from_dlpark_legacy`].
impl TryFromDlpack<legacy::Dlpack> for ManagedTensor {
    type Error = Error;

    /// Takes over the tensor without copying; see
    /// [`ManagedTensor::from_dlpark_legacy`].
    ///
    /// # Safety
    ///
    /// The requirements of [`ManagedTensor::from_dlpark_legacy`], exclusivity and
    /// writability included.
    unsafe fn try_from_dlpack(dlpack: legacy::Dlpack, _context: ()) -> Result<Self> {
        // SAFETY: the caller upholds `from_dlpark_legacy`'s requirements.
        unsafe { Self::from_dlpark_legacy(dlpack) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ManagedTensor>();
        check::<versioned::Dlpack>();
        check::<legacy::Dlpack>();
        check::<ReadOnlyLegacyError>();
    }

    #[test]
    fn read_only_error_message_matches_the_crate_error() {
        let tensor = ManagedTensor::from_buffer_with_flags::<u8, _>(
            vec![1u8, 2],
            0,
            &[2],
            &[1],
            ffi::DLPACK_FLAG_BITMASK_READ_ONLY,
        )
        .unwrap();
        let err = tensor.into_dlpark_legacy().err().unwrap();
        assert_eq!(err.to_string(), Error::ReadOnlyLegacy.to_string());
        assert!(err.tensor().is_read_only());
        assert_eq!(Error::from(err), Error::ReadOnlyLegacy);
    }
}
