//! The producer half of the DLPack C exchange API: our [`Tensor`]'s table, with all
//! five entries (what each answers is stated for users in `Tensor`'s docs, "The DLPack
//! C exchange API").

use core::ffi::{CStr, c_int, c_void};
use core::ptr::{self, NonNull};
use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::exceptions::{PyBufferError, PySystemError};
use pyo3::ffi as pyffi;
use pyo3::prelude::*;

use crate::device::Device;
use crate::dtype::DataType;
use crate::error::{Error, Result as CrateResult};
use crate::ffi::{
    DLDeviceType, DLManagedTensorVersioned, DLPACK_EXCHANGE_API_CAPSULE_NAME, DLPACK_MAJOR_VERSION,
    DLPACK_MINOR_VERSION, DLPackExchangeAPI, DLPackExchangeAPIHeader, DLPackSetError,
    DLPackVersion, DLTensor,
};
use crate::layout;
use crate::tensor::{AlignedBytes, ManagedTensor, Raw};

use crate::python::adopt::{Allocation, adopt};
use crate::python::error::type_name;
use crate::python::trampoline::trampoline;

use super::super::versioned_header;
use super::Tensor;

/// Our table, immutable and alive as long as the process.
struct OwnTable(DLPackExchangeAPI);

// SAFETY: nothing in the table is ever written; `prev_api` is NULL.
unsafe impl Sync for OwnTable {}

static TABLE: OwnTable = OwnTable(DLPackExchangeAPI {
    header: DLPackExchangeAPIHeader {
        version: DLPackVersion {
            major: DLPACK_MAJOR_VERSION,
            minor: DLPACK_MINOR_VERSION,
        },
        prev_api: ptr::null_mut(),
    },
    managed_tensor_allocator: Some(allocate),
    managed_tensor_from_py_object_no_sync: Some(from_object),
    managed_tensor_to_py_object_no_sync: Some(to_object),
    dltensor_from_py_object_no_sync: Some(borrow_object),
    current_work_stream: Some(current_work_stream),
});

/// Our table, for imports of our own [`Tensor`] (whatever anyone did to its capsule).
pub(in crate::python) fn own_table() -> NonNull<DLPackExchangeAPI> {
    NonNull::from(&TABLE.0)
}

/// `Tensor.__dlpack_c_exchange_api__`: a capsule over our table (which it does not own).
pub(super) fn table_capsule(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let table = ptr::from_ref(&TABLE.0).cast_mut().cast::<c_void>();
    // SAFETY:
    // - `table` is a non-null pointer to a static that lives as long as the process, and
    //   the capsule has no destructor, so nothing ever frees it;
    // - the name is a `'static` C string; the thread is attached.
    let capsule =
        unsafe { pyffi::PyCapsule_New(table, DLPACK_EXCHANGE_API_CAPSULE_NAME.as_ptr(), None) };
    // SAFETY: a new reference, or NULL with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, capsule) }.map(Bound::unbind)
}

/// Runs the body of an entry that the standard calls from an attached thread, through
/// the crate's one trampoline, and returns the entry's C status: 0, or -1 with the
/// error (or a panic) raised as the exception.
///
/// # Safety
///
/// - the calling thread is attached to the interpreter (the standard's calling
///   convention for these entries).
unsafe fn run_entry(body: impl FnOnce(Python<'_>) -> PyResult<()>) -> c_int {
    // SAFETY: the caller is attached (this function's contract).
    match unsafe { trampoline(body) } {
        Some(()) => 0,
        None => -1,
    }
}

/// `managed_tensor_from_py_object_no_sync`: a new versioned header over a [`Tensor`]'s
/// data, as `__dlpack__(max_version=(1, 3))` makes.
unsafe extern "C" fn from_object(
    py_object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    let body = |py: Python<'_>| {
        // SAFETY: the caller's object and out-pointer (the standard's convention).
        let tensor = unsafe { tensor_arg(py, py_object) }?;
        // SAFETY: as above.
        let out = unsafe { out_arg(out) }?;
        let header = versioned_header(tensor.get())?;
        *out = header.into_raw();
        Ok(())
    };
    // SAFETY: the standard calls the entries from an attached thread.
    unsafe { run_entry(body) }
}

/// `dltensor_from_py_object_no_sync`: a description of a [`Tensor`]'s data, borrowed
/// from its header, which lives as long as the object.
///
/// A `DLTensor` has no flags, so a consumer may write what it describes: a `READ_ONLY`
/// tensor is refused (`BufferError`), as a legacy capsule of it would be without a
/// copy. Strides are always given, as DLPack 1.2 and later require: a tensor whose
/// producer gave none gets C-contiguous strides kept by the object.
unsafe extern "C" fn borrow_object(py_object: *mut c_void, out: *mut DLTensor) -> c_int {
    let body = |py: Python<'_>| {
        // SAFETY: the caller's object and out-pointer (the standard's convention).
        let object = unsafe { tensor_arg(py, py_object) }?;
        // SAFETY: as above.
        let out = unsafe { out_arg(out) }?;
        let object = object.get();
        let tensor = object.tensor();
        if tensor.is_read_only() {
            return Err(PyBufferError::new_err(
                "a read-only tensor cannot be described by a DLTensor, which has no flags: \
                 import it with managed_tensor_from_py_object_no_sync",
            ));
        }
        let mut description = *tensor.dl_tensor();
        if description.strides.is_null() && description.ndim > 0 {
            description.strides = object.c_strides()?.as_ptr().cast_mut();
        }
        *out = description;
        Ok(())
    };
    // SAFETY: the standard calls the entries from an attached thread.
    unsafe { run_entry(body) }
}

/// `managed_tensor_to_py_object_no_sync`: a [`Tensor`] that owns `tensor`.
unsafe extern "C" fn to_object(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int {
    let body = |py: Python<'_>| {
        let tensor = NonNull::new(tensor).ok_or_else(|| PySystemError::new_err("NULL tensor"))?;
        Error::check_aligned("managed tensor", tensor.as_ptr())?;
        // SAFETY:
        // - the standard hands over the ownership of a versioned tensor ("the tensor is
        //   stolen"), with what the protocol promises a consumer, which `adopt`
        //   requires; on error its deleter has run;
        // - like every import it is shared (the tensor may come from a producer that
        //   keeps its own handle: a NumPy export, `toDLPack`, a kernel's output over
        //   its input), unless its producer flagged it `IS_COPIED` or it comes from
        //   our own allocator.
        let tensor = unsafe { adopt(Raw::Versioned(tensor)) }?;
        // SAFETY: the caller's out-pointer (the standard's convention).
        let out = unsafe { out_arg(out_py_object) }?;
        *out = Bound::new(py, Tensor::new(tensor))?.into_ptr().cast();
        Ok(())
    };
    // SAFETY: the standard calls the entries from an attached thread.
    unsafe { run_entry(body) }
}

/// `current_work_stream`: this crate runs no device work, so there is no stream to
/// report: NULL (the default stream), for every device.
unsafe extern "C" fn current_work_stream(
    _device_type: DLDeviceType,
    _device_id: i32,
    out: *mut *mut c_void,
) -> c_int {
    let body = |_: Python<'_>| {
        // SAFETY: the caller's out-pointer (the standard's convention).
        *unsafe { out_arg(out) }? = ptr::null_mut();
        Ok(())
    };
    // SAFETY: the standard calls the entries from an attached thread.
    unsafe { run_entry(body) }
}

/// `managed_tensor_allocator`: a zeroed, C-contiguous CPU tensor shaped like
/// `prototype`, whose deleter frees it once. Does not need the interpreter.
unsafe extern "C" fn allocate(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: Option<DLPackSetError>,
) -> c_int {
    let report = |kind: &CStr, message: String| {
        if let Some(set_error) = set_error {
            let message = std::ffi::CString::new(message).unwrap_or_default();
            // SAFETY: the caller's error callback, with its context and two C strings
            // that live through the call.
            unsafe { set_error(error_ctx, kind.as_ptr(), message.as_ptr()) };
        }
        -1
    };
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller passes a readable prototype (or NULL), whose shape holds
        // `ndim` values (checked non-null and aligned by `prototype_tensor`).
        unsafe { allocated_like(prototype) }
    }));
    match result {
        Ok(Ok(tensor)) if !out.is_null() => {
            // SAFETY: `out` is the caller's writable out-pointer (checked non-null).
            unsafe { *out = tensor.into_raw() };
            0
        }
        Ok(Ok(_)) => report(c"ValueError", "NULL out-pointer".to_owned()),
        Ok(Err(Error::AllocationFailed { bytes })) => {
            report(c"MemoryError", format!("cannot allocate {bytes} bytes"))
        }
        Ok(Err(err)) => report(c"BufferError", err.to_string()),
        Err(_) => report(c"RuntimeError", "panic while allocating".to_owned()),
    }
}

/// A zeroed CPU tensor like `prototype`.
///
/// # Safety
///
/// - `prototype` is NULL or points to a readable `DLTensor` whose `shape` (when `ndim`
///   is positive) points to `ndim` readable values.
unsafe fn allocated_like(prototype: *const DLTensor) -> CrateResult<ManagedTensor> {
    // SAFETY: the caller's promise (NULL is refused).
    let proto = unsafe { prototype.as_ref() }.ok_or(Error::NullPointer { what: "prototype" })?;
    let device = Device::from_raw(proto.device);
    // Ordinary host memory only: pinned or managed memory is not what a zeroed heap
    // buffer is.
    if device.device_type != DLDeviceType::kDLCPU {
        return Err(Error::UnsupportedDevice { device });
    }
    let ndim = usize::try_from(proto.ndim).map_err(|_| Error::NegativeNdim { ndim: proto.ndim })?;
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        let shape = NonNull::new(proto.shape).ok_or(Error::NullPointer { what: "shape" })?;
        Error::check_aligned("shape", shape.as_ptr())?;
        // SAFETY: the caller's promise: `ndim` readable values (non-null, aligned).
        unsafe { core::slice::from_raw_parts(shape.as_ptr(), ndim) }
    };
    let dtype = DataType::from_raw(proto.dtype);
    let count = layout::element_count(shape)?;
    let bytes = count
        .checked_mul(dtype.size_in_bytes())
        .filter(|&b| isize::try_from(b).is_ok())
        .ok_or(Error::Overflow { what: "byte size" })?;
    let buffer = Allocation(AlignedBytes::zeroed(bytes)?);
    // SAFETY:
    // - the buffer holds `bytes` zeroed bytes, enough for `count` elements of `dtype` in
    //   C order, 64-byte aligned, and the owner keeps it alive and unmoved (heap data);
    // - nobody else reaches it: the tensor is exclusive and writable;
    // - zero bytes are a valid value of every DLPack type (`false` for `bool`).
    unsafe {
        ManagedTensor::from_owner(
            buffer,
            |buffer| buffer.0.as_mut_ptr().cast(),
            shape,
            None,
            dtype,
            Device::CPU,
            0,
        )
    }
}

/// The [`Tensor`] behind an entry's object argument.
///
/// # Safety
///
/// - `object` is NULL or a live Python object, borrowed for the call.
unsafe fn tensor_arg<'py>(py: Python<'py>, object: *mut c_void) -> PyResult<Bound<'py, Tensor>> {
    let object = object.cast::<pyffi::PyObject>();
    if object.is_null() {
        return Err(PySystemError::new_err("NULL object"));
    }
    // SAFETY: a non-null live object (the contract), borrowed for the call.
    let object = unsafe { Bound::from_borrowed_ptr(py, object) };
    object.cast_into::<Tensor>().map_err(|err| {
        let found = type_name(err.into_inner().as_any());
        pyo3::exceptions::PyTypeError::new_err(format!("expected a Tensor object, got {found}"))
    })
}

/// An entry's out-pointer, checked non-null.
///
/// # Safety
///
/// - `out` is NULL or valid for writes of a `T` for the lifetime `'a`.
unsafe fn out_arg<'a, T>(out: *mut T) -> PyResult<&'a mut T> {
    // SAFETY: writable or NULL (the contract); NULL is refused.
    unsafe { out.as_mut() }.ok_or_else(|| PySystemError::new_err("NULL out-pointer"))
}
