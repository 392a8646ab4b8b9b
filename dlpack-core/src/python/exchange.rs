//! The DLPack C exchange API (DLPack 1.3): a table of C functions that a Python type
//! publishes as `type(obj).__dlpack_c_exchange_api__`, a capsule named
//! `"dlpack_exchange_api"`.
//!
//! - Consumer: [`import`] reads a producer's table (PyTorch 2.10+ has one) and takes an
//!   owned tensor with one C call instead of a `__dlpack__` call and a capsule. Tables
//!   are cached per type, with a strong reference to the type and the capsule, so an
//!   entry never outlives either.
//! - Producer: [`table_capsule`] is our [`Tensor`]'s own table, so that C-level
//!   consumers import ours without a Python call.
//!
//! Only the owning entry is used on import. The borrowing entry
//! (`dltensor_from_py_object_no_sync`) describes memory that stays valid "until control
//! returns to Python", which safe Rust cannot hold a caller to (any code can attach to
//! or detach from the interpreter, and free-threaded Python has no such moment), so a
//! view from it could outlive the memory; the owned path costs one small header more.

use core::ffi::{CStr, c_int, c_void};
use core::ptr::{self, NonNull};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, PoisonError};

use pyo3::exceptions::{PyBufferError, PySystemError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyType};
use pyo3::{ffi as pyffi, intern};

use crate::device::Device;
use crate::dtype::DataType;
use crate::error::{Error, Result as CrateResult};
use crate::ffi::{
    DLDeviceType, DLManagedTensorVersioned, DLPACK_EXCHANGE_API_CAPSULE_NAME, DLPACK_MAJOR_VERSION,
    DLPACK_MINOR_VERSION, DLPackExchangeAPI, DLPackExchangeAPIHeader, DLPackSetError,
    DLPackVersion, DLTensor,
};
use crate::layout;
use crate::tensor::ManagedTensor;

use super::error::type_name;
use super::export::versioned_header;
use super::tensor::Tensor;

// ----------------------------------------------------------------------------------
// Consumer
// ----------------------------------------------------------------------------------

/// A producer's table of major version 1.
#[derive(Clone, Copy)]
struct Table(NonNull<DLPackExchangeAPI>);

// SAFETY:
// - the table is read-only data and functions that the standard makes callable from any
//   thread attached to the interpreter, and it lives as long as the process (a cache
//   entry also keeps its capsule alive).
unsafe impl Send for Table {}
// SAFETY: as above: nothing in it is written after it is published.
unsafe impl Sync for Table {}

/// One type seen on import: its table, or `None` when it has none we can use.
struct Entry {
    ty: Py<PyType>,
    table: Option<Table>,
    _capsule: Option<Py<PyAny>>,
}

/// How many types the cache remembers (the oldest is forgotten first).
const CACHE_SIZE: usize = 8;

static CACHE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn cache() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    // A panic while holding the lock cannot leave the vector half-updated.
    CACHE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The table of `obj`'s type, looked up once per type.
fn table_of(obj: &Bound<'_, PyAny>) -> Option<Table> {
    if obj.is_exact_instance_of::<Tensor>() {
        // Ours (a final class): the static itself, whatever anyone did to the capsule.
        return Some(Table(NonNull::from(&TABLE.0)));
    }
    let ty = obj.get_type();
    if let Some(entry) = cache().iter().find(|e| e.ty.as_ptr() == ty.as_ptr()) {
        return entry.table;
    }
    // Python code may run here (a metaclass `__getattr__`): not under the lock.
    let (table, capsule) = find_table(&ty);
    let evicted = {
        let mut cache = cache();
        if cache.iter().any(|e| e.ty.as_ptr() == ty.as_ptr()) {
            None
        } else {
            let evicted = (cache.len() == CACHE_SIZE).then(|| cache.remove(0));
            cache.push(Entry {
                ty: ty.clone().unbind(),
                table,
                _capsule: capsule,
            });
            evicted
        }
    };
    // Dropping a type may run Python code (weak reference callbacks): after the lock.
    drop(evicted);
    table
}

/// Reads `ty.__dlpack_c_exchange_api__`: a capsule of the right name holding a table
/// whose chain has a major version 1 with the owning entry. Anything else (no
/// attribute, an attribute that raises, another object, another version) means "use
/// `__dlpack__`".
fn find_table(ty: &Bound<'_, PyType>) -> (Option<Table>, Option<Py<PyAny>>) {
    let py = ty.py();
    let Ok(attr) = ty.getattr(intern!(py, "__dlpack_c_exchange_api__")) else {
        return (None, None);
    };
    let Ok(capsule) = attr.cast::<PyCapsule>() else {
        return (None, None);
    };
    let name = Some(DLPACK_EXCHANGE_API_CAPSULE_NAME);
    if !capsule.is_valid_checked(name) {
        return (None, None);
    }
    let Ok(pointer) = capsule.pointer_checked(name) else {
        return (None, None);
    };
    let mut header = pointer.cast::<DLPackExchangeAPIHeader>();
    // A chain of tables, newest first; a few links at most in practice.
    for _ in 0..16 {
        if !header.is_aligned() {
            return (None, None);
        }
        // SAFETY:
        // - a capsule named `dlpack_exchange_api` holds a table that lives as long as the
        //   process (the standard), starting with its header, as does every `prev_api`
        //   of the chain (checked non-null and aligned);
        // - the header is the part of the struct every version keeps.
        let head = unsafe { header.as_ref() };
        if head.version.major == DLPACK_MAJOR_VERSION {
            let table = header.cast::<DLPackExchangeAPI>();
            // SAFETY: a table of major version 1 is a whole `DLPackExchangeAPI`.
            let owning = unsafe { table.as_ref() }.managed_tensor_from_py_object_no_sync;
            let table = owning.map(|_| Table(table));
            return (table, Some(capsule.clone().into_any().unbind()));
        }
        match NonNull::new(head.prev_api) {
            Some(prev) => header = prev,
            None => break,
        }
    }
    (None, None)
}

/// Imports `obj` through its type's C exchange API: `Ok(None)` when the type has none
/// (or the tensor is on a device, whose stream handling only `__dlpack__` has), and the
/// caller falls back to `__dlpack__`.
///
/// The tensor gets what a capsule import gets: the version and header checks of
/// `from_raw`, shared unless flagged `IS_COPIED`, and a deleter that keeps the
/// interpreter's exception state; its deleter runs exactly once on every path.
pub(super) fn import(obj: &Bound<'_, PyAny>) -> PyResult<Option<ManagedTensor>> {
    let Some(table) = table_of(obj) else {
        return Ok(None);
    };
    let py = obj.py();
    // SAFETY: a cached table lives as long as the process.
    let Some(from_object) = (unsafe { table.0.as_ref() }).managed_tensor_from_py_object_no_sync
    else {
        return Ok(None);
    };
    let mut out: *mut DLManagedTensorVersioned = ptr::null_mut();
    // SAFETY:
    // - `from_object` is the table's owning entry, called as the standard says: a live
    //   object whose type (or a base of it) published the table, and a writable
    //   out-pointer, from an attached thread;
    // - the standard forbids it to let a C++ exception out.
    let status = unsafe { from_object(obj.as_ptr().cast(), &mut out) };
    let raised = PyErr::take(py);
    if status != 0 {
        return Err(raised.unwrap_or_else(|| {
            PySystemError::new_err(format!(
                "the DLPack C exchange API of {} failed without setting an exception",
                type_name(obj)
            ))
        }));
    }
    if out.is_null() {
        return Err(raised.unwrap_or_else(|| {
            PyBufferError::new_err(format!(
                "the DLPack C exchange API of {} returned no tensor",
                type_name(obj)
            ))
        }));
    }
    if !out.is_aligned() {
        // Not even the deleter can be read safely: the tensor is left to its producer.
        return Err(Error::Misaligned {
            what: "managed tensor",
            address: out as usize,
            align: align_of::<DLManagedTensorVersioned>(),
        }
        .into());
    }
    // SAFETY:
    // - success hands us the ownership of a versioned header (checked non-null and
    //   aligned), which the handle releases once, on a failed check or when it drops;
    // - the standard makes the producer promise what `from_raw` requires (valid header,
    //   shape, strides and data, a deleter callable from any thread), except that
    //   nobody else uses the data: the handle is marked shared below before any view
    //   can be made, unless the producer copied the data for this consumer alone.
    let tensor = unsafe { ManagedTensor::from_raw(out) }?.into_python();
    if let Some(err) = raised {
        // Success with an exception set is a broken producer: the tensor goes back.
        drop(tensor);
        return Err(err);
    }
    if !tensor.device().is_cpu_accessible() {
        // "NoSync": nothing waited for the producer's stream. `__dlpack__` does.
        drop(tensor);
        return Ok(None);
    }
    Ok(Some(if tensor.is_copied() {
        tensor
    } else {
        tensor.into_shared()
    }))
}

// ----------------------------------------------------------------------------------
// Producer
// ----------------------------------------------------------------------------------

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

/// Runs an entry that the standard calls from an attached thread: an error becomes the
/// Python exception and -1, and a panic never unwinds into C.
///
/// # Safety
///
/// - the calling thread is attached to the interpreter (the standard's calling
///   convention for these entries).
unsafe fn attached(body: impl FnOnce(Python<'_>) -> PyResult<()>) -> c_int {
    // SAFETY: the caller is attached (this function's contract).
    let py = unsafe { Python::assume_attached() };
    match catch_unwind(AssertUnwindSafe(|| body(py))) {
        Ok(Ok(())) => 0,
        Ok(Err(err)) => {
            err.restore(py);
            -1
        }
        Err(_) => {
            PySystemError::new_err("dlpack-core: panic in a DLPack C exchange API entry")
                .restore(py);
            -1
        }
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
        let header = versioned_header(tensor.get().shared_ref())?;
        *out = header.into_raw();
        Ok(())
    };
    // SAFETY: the standard calls the entries from an attached thread.
    unsafe { attached(body) }
}

/// `dltensor_from_py_object_no_sync`: a description of a [`Tensor`]'s data, borrowed
/// from its header, which lives as long as the object.
unsafe extern "C" fn borrow_object(py_object: *mut c_void, out: *mut DLTensor) -> c_int {
    let body = |py: Python<'_>| {
        // SAFETY: the caller's object and out-pointer (the standard's convention).
        let tensor = unsafe { tensor_arg(py, py_object) }?;
        // SAFETY: as above.
        let out = unsafe { out_arg(out) }?;
        *out = *tensor.get().tensor().dl_tensor();
        Ok(())
    };
    // SAFETY: the standard calls the entries from an attached thread.
    unsafe { attached(body) }
}

/// `managed_tensor_to_py_object_no_sync`: a [`Tensor`] that owns `tensor`.
unsafe extern "C" fn to_object(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int {
    let body = |py: Python<'_>| {
        // (The caller may be a Python extension whose deleter runs Python code.)
        // SAFETY: the standard hands over the ownership of a valid versioned tensor
        // ("the tensor is stolen"), with what `from_raw` requires; on error its
        // deleter has run.
        let tensor = unsafe { ManagedTensor::from_raw(tensor) }?.into_python();
        // SAFETY: the caller's out-pointer (the standard's convention).
        let out = unsafe { out_arg(out_py_object) }?;
        *out = Bound::new(py, Tensor::new(tensor))?.into_ptr().cast();
        Ok(())
    };
    // SAFETY: the standard calls the entries from an attached thread.
    unsafe { attached(body) }
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
    unsafe { attached(body) }
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
    if !device.is_cpu_accessible() {
        return Err(Error::UnsupportedDevice { device });
    }
    let ndim = usize::try_from(proto.ndim).map_err(|_| Error::NegativeNdim { ndim: proto.ndim })?;
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        let shape = NonNull::new(proto.shape).ok_or(Error::NullPointer { what: "shape" })?;
        if !shape.is_aligned() {
            return Err(Error::Misaligned {
                what: "shape",
                address: shape.as_ptr() as usize,
                align: align_of::<i64>(),
            });
        }
        // SAFETY: the caller's promise: `ndim` readable values (non-null, aligned).
        unsafe { core::slice::from_raw_parts(shape.as_ptr(), ndim) }
    };
    let dtype = DataType::from_raw(proto.dtype);
    let count = layout::element_count(shape)?;
    let bytes = count
        .checked_mul(dtype.size_in_bytes())
        .filter(|&b| isize::try_from(b).is_ok())
        .ok_or(Error::Overflow { what: "byte size" })?;
    let mut buffer: Vec<u128> = Vec::new();
    buffer
        .try_reserve_exact(bytes.div_ceil(16))
        .map_err(|_| Error::AllocationFailed { bytes })?;
    buffer.resize(bytes.div_ceil(16), 0);
    // SAFETY:
    // - the buffer holds `bytes` zeroed bytes, enough for `count` elements of `dtype` in
    //   C order, 16-byte aligned, and the owner keeps it alive and unmoved (heap data);
    // - nobody else reaches it: the tensor is exclusive and writable;
    // - zero bytes are a valid value of every DLPack type (`false` for `bool`).
    unsafe {
        ManagedTensor::from_owner(
            buffer,
            |buffer| buffer.as_mut_ptr().cast(),
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
