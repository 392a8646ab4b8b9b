//! The C++ shim (`shim.cpp`) and the only `unsafe` code of this crate: ownership moves
//! across the FFI boundary here and nowhere else.

use core::ffi::{CStr, c_char, c_int, c_void};
use core::ptr;

use dlpack_core::ffi::DLManagedTensorVersioned;
use dlpack_core::{Error, ManagedTensor, Result};

unsafe extern "C" {
    fn dlpack_tch_from_dlpack(
        src: *mut DLManagedTensorVersioned,
        copy: c_int,
        out: *mut *mut c_void,
        message: *mut c_char,
        message_size: usize,
    ) -> c_int;
    fn dlpack_tch_to_dlpack(
        tensor: *const c_void,
        out: *mut *mut DLManagedTensorVersioned,
        unique: *mut c_int,
        message: *mut c_char,
        message_size: usize,
    ) -> c_int;
    fn dlpack_tch_device(
        device_type: i32,
        device_id: i32,
        torch_type: *mut c_int,
        torch_index: *mut c_int,
        message: *mut c_char,
        message_size: usize,
    ) -> c_int;
}

/// Room for libtorch's message (its first line).
struct Message([c_char; 512]);

impl Message {
    fn new() -> Self {
        Self([0; 512])
    }

    fn as_mut_ptr(&mut self) -> *mut c_char {
        self.0.as_mut_ptr()
    }

    /// The message as an [`Error::Framework`].
    fn into_error(self) -> Error {
        // The shim always terminates the message; an all-zero buffer reads as "".
        let bytes: Vec<u8> = self.0.iter().map(|&c| c as u8).collect();
        let text = CStr::from_bytes_until_nul(&bytes)
            .map(|m| m.to_string_lossy().into_owned())
            .unwrap_or_default();
        torch_error(if text.is_empty() {
            "libtorch failed without a message".to_owned()
        } else {
            text
        })
    }
}

pub(crate) fn torch_error(message: impl Into<String>) -> Error {
    Error::Framework {
        framework: "torch",
        message: message.into(),
    }
}

/// Moves `tensor` into a new torch tensor (`copy`: a copy of it, the original released
/// before this returns). The tensor's deleter runs exactly once, on every path: when
/// torch frees the storage, or before this returns on error or copy.
pub(crate) fn into_torch(tensor: ManagedTensor, copy: bool) -> Result<tch::Tensor> {
    let raw = tensor.into_raw();
    let mut out: *mut c_void = ptr::null_mut();
    let mut message = Message::new();
    // SAFETY:
    // - `raw` is a valid versioned header whose ownership moves to the shim, which
    //   calls its deleter exactly once on every path (`Owner` in shim.cpp);
    // - `out` and the message buffer are valid for writes of the sizes passed;
    // - the shim catches every C++ exception, so nothing unwinds into Rust.
    let status = unsafe {
        dlpack_tch_from_dlpack(
            raw,
            c_int::from(copy),
            &mut out,
            message.as_mut_ptr(),
            message.0.len(),
        )
    };
    if status != 0 {
        return Err(message.into_error());
    }
    // SAFETY:
    // - on success `out` is a heap-allocated `at::Tensor` made by the shim with `new`,
    //   which `tch::Tensor` owns from here on and frees once (its `Drop`).
    Ok(unsafe { tch::Tensor::from_ptr(out.cast()) })
}

/// Exports `tensor` through libtorch's converter, and says whether `tensor` was the
/// only handle of its storage.
pub(crate) fn from_torch(tensor: &tch::Tensor) -> Result<(ManagedTensor, bool)> {
    let mut out: *mut DLManagedTensorVersioned = ptr::null_mut();
    let mut unique: c_int = 0;
    let mut message = Message::new();
    // SAFETY:
    // - `tensor.as_ptr()` is the live `at::Tensor` that `tensor` owns, which the shim
    //   only reads;
    // - `out`, `unique` and the message buffer are valid for writes;
    // - the shim catches every C++ exception.
    let status = unsafe {
        dlpack_tch_to_dlpack(
            tensor.as_ptr().cast(),
            &mut out,
            &mut unique,
            message.as_mut_ptr(),
            message.0.len(),
        )
    };
    if status != 0 {
        return Err(message.into_error());
    }
    // SAFETY:
    // - `out` comes from `at::toDLPackVersioned`: a versioned header of major version 1,
    //   whose shape and strides arrays live in the header's own tensor, and whose
    //   context keeps the torch storage alive until the deleter (ATen's, callable from
    //   any thread) runs; ownership is ours;
    // - the data is on the tensor's device, writable (torch has no read-only tensors);
    // - other torch tensors may reach the storage: the handle is shared, which
    //   `from_raw_shared` allows; the caller marks it exclusive only when `unique` said
    //   that nothing else does.
    let managed = unsafe { ManagedTensor::from_raw_shared(out) }?;
    Ok((managed, unique != 0))
}

/// Declares an export exclusive: `tensor` was the only handle of its storage, whose
/// memory only torch reaches, and is gone.
pub(crate) fn into_exclusive(mut managed: ManagedTensor, consumed: tch::Tensor) -> ManagedTensor {
    drop(consumed);
    // SAFETY:
    // - the torch tensor that was the only other handle of the storage (`unique` from
    //   the shim) has just been dropped: the export's own reference is the last one;
    // - the shim said `unique` only for memory that nothing outside torch reaches
    //   (torch's allocator made it, or an exclusive tensor was handed to torch without
    //   a copy), so nobody else reads or writes the data while the handle lives.
    unsafe { managed.assume_exclusive() };
    managed
}

/// The torch device type and index for a DLPack device, mapped by ATen itself.
pub(crate) fn torch_device(device_type: i32, device_id: i32) -> Result<(c_int, c_int)> {
    let (mut kind, mut index): (c_int, c_int) = (0, 0);
    let mut message = Message::new();
    // SAFETY:
    // - the out-pointers and the message buffer are valid for writes;
    // - the shim only maps numbers (no memory is touched) and catches every exception.
    let status = unsafe {
        dlpack_tch_device(
            device_type,
            device_id,
            &mut kind,
            &mut index,
            message.as_mut_ptr(),
            message.0.len(),
        )
    };
    if status != 0 {
        return Err(message.into_error());
    }
    Ok((kind, index))
}
