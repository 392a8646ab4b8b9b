//! The consumer half of the DLPack C exchange API: a producer's table, found on the
//! producer's type and cached per type, and the owned import through it. What it does
//! for users is stated once, in "The DLPack C exchange API" of `from_dlpack`'s docs;
//! here, how.
//!
//! - **Found once per type.** A small cache holds the type and the capsule; an import in
//!   progress holds the capsule too, so an entry evicted by another thread meanwhile
//!   stays alive. The attribute is read through `type`'s own descriptors (`__mro__`,
//!   `__dict__`), and the table's `prev_api` chain walked to major version 1. Our own
//!   `Tensor`'s table is the static itself, whatever anyone did to its capsule.
//! - **Only the owning entry.** The borrowing entry (`dltensor_from_py_object_no_sync`)
//!   fills a `DLTensor` with no owner and no deleter, valid "until control returns to
//!   Python", which safe Rust cannot hold a caller to: the code that holds a view may
//!   run Python code (directly, or by releasing the interpreter to other threads; and
//!   free-threaded Python has no such moment) that frees or replaces the producer's
//!   storage, which the owned path survives (PyTorch's owned export keeps a reference
//!   to the storage).

use core::ptr::{self, NonNull};
use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::{PyBufferError, PyException, PyKeyError, PySystemError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyTuple, PyType};
use pyo3::{PyTypeInfo, intern};

use crate::ffi::{
    DLDataTypeCode, DLDeviceType, DLManagedTensorVersioned, DLPACK_EXCHANGE_API_CAPSULE_NAME,
    DLPackExchangeAPI, DLPackExchangeAPIHeader,
};
use crate::tensor::{ManagedTensor, Raw};

use crate::python::Tensor;
use crate::python::adopt::adopt;
use crate::python::error::type_name;
use crate::python::export::own_table;

/// A producer's table of major version 1, with an owning entry.
#[derive(Clone, Copy)]
struct Table(NonNull<DLPackExchangeAPI>);

// SAFETY:
// - the table is read-only data and functions that the standard makes callable from any
//   thread attached to the interpreter; a reference to the capsule that holds it is
//   kept wherever the table is (a cache entry, an import in progress).
unsafe impl Send for Table {}
// SAFETY: as above: nothing in it is written after it is published.
unsafe impl Sync for Table {}

/// One type seen on import: its table and the capsule that holds it, or `None` when it
/// has none we can use.
struct Entry {
    ty: Py<PyType>,
    table: Option<(Table, Py<PyAny>)>,
}

/// How many types the cache remembers (the oldest is forgotten first).
const CACHE_SIZE: usize = 8;

static CACHE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn cache() -> MutexGuard<'static, Vec<Entry>> {
    // A panic while holding the lock cannot leave the vector half-updated.
    CACHE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A table found for an object, and what keeps it alive while it is used.
struct Found<'py> {
    table: Table,
    /// The capsule of a foreign table (a strong reference: a cache entry evicted by
    /// another thread meanwhile cannot free it); `None` for our own static table.
    _capsule: Option<Bound<'py, PyAny>>,
}

/// The table of `obj`'s type, looked up once per type. An error of the look-up itself
/// (a `KeyboardInterrupt`, a `MemoryError`) is returned, and not cached.
fn table_of<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Found<'py>>> {
    let py = obj.py();
    if obj.is_exact_instance_of::<Tensor>() {
        // Ours (a final class): the static itself, whatever anyone did to the capsule.
        return Ok(Some(Found {
            table: Table(own_table()),
            _capsule: None,
        }));
    }
    let ty = obj.get_type();
    let found = |table: &Option<(Table, Py<PyAny>)>| {
        table.as_ref().map(|(table, capsule)| Found {
            table: *table,
            _capsule: Some(capsule.bind(py).clone()),
        })
    };
    if let Some(entry) = cache().iter().find(|e| e.ty.as_ptr() == ty.as_ptr()) {
        return Ok(found(&entry.table));
    }
    // Python code may run here (a key's `__eq__`): not under the lock.
    let table = find_table(&ty)?;
    let result = found(&table);
    let evicted = {
        let mut cache = cache();
        if cache.iter().any(|e| e.ty.as_ptr() == ty.as_ptr()) {
            None
        } else {
            let evicted = (cache.len() == CACHE_SIZE).then(|| cache.remove(0));
            cache.push(Entry {
                ty: ty.clone().unbind(),
                table,
            });
            evicted
        }
    };
    // Dropping a type may run Python code (weak reference callbacks): after the lock.
    drop(evicted);
    Ok(result)
}

/// `type.__dict__[name]`: a descriptor of `type` itself, which no metaclass can replace.
fn type_descriptor<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyAny>>,
    name: &'static str,
) -> PyResult<Bound<'py, PyAny>> {
    cell.get_or_try_init(py, || {
        PyType::type_object(py)
            .getattr(intern!(py, "__dict__"))?
            .get_item(name)
            .map(Bound::unbind)
    })
    .map(|d| d.bind(py).clone())
}

/// `descriptor.__get__(ty, type(ty))`.
fn get_from<'py>(
    descriptor: &Bound<'py, PyAny>,
    ty: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    descriptor.call_method1(intern!(ty.py(), "__get__"), (ty, ty.get_type()))
}

/// Finds `__dlpack_c_exchange_api__` as the standard ties it to a type: in the own
/// `__dict__` of a type of `ty.__mro__` (the first that has it), read through `type`'s
/// own descriptors, so that no metaclass `__getattr__` or property runs and a copied
/// capsule set on an instance does not count. It must be a capsule of the right name
/// holding a table whose chain has a major version 1 with the owning entry; anything
/// else (no such entry, another object, another version) means "no table". Errors of
/// the look-up itself are returned.
fn find_table(ty: &Bound<'_, PyType>) -> PyResult<Option<(Table, Py<PyAny>)>> {
    let py = ty.py();
    static MRO: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    static DICT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let mro = get_from(&type_descriptor(py, &MRO, "__mro__")?, ty.as_any())?;
    let dict = type_descriptor(py, &DICT, "__dict__")?;
    let name = intern!(py, "__dlpack_c_exchange_api__");
    let mut attribute = None;
    for base in mro.cast_into::<PyTuple>()?.iter() {
        match get_from(&dict, &base)?.get_item(name) {
            Ok(value) => {
                attribute = Some(value);
                break;
            }
            Err(err) if err.is_instance_of::<PyKeyError>(py) => {}
            Err(err) => return Err(err),
        }
    }
    let Some(capsule) = attribute.and_then(|a| a.cast_into::<PyCapsule>().ok()) else {
        return Ok(None);
    };
    let name = Some(DLPACK_EXCHANGE_API_CAPSULE_NAME);
    if !capsule.is_valid_checked(name) {
        return Ok(None);
    }
    let Ok(pointer) = capsule.pointer_checked(name) else {
        return Ok(None);
    };
    let mut header = pointer.cast::<DLPackExchangeAPIHeader>();
    // A chain of tables, newest first; a few links at most in practice.
    for _ in 0..16 {
        if !header.is_aligned() {
            return Ok(None);
        }
        // SAFETY:
        // - a capsule named `dlpack_exchange_api` holds a table that lives as long as the
        //   process (the standard), starting with its header, as does every `prev_api`
        //   of the chain (checked non-null and aligned);
        // - the header is the part of the struct every version keeps.
        let head = unsafe { header.as_ref() };
        if crate::error::Error::check_version(head.version).is_ok() {
            let table = header.cast::<DLPackExchangeAPI>();
            // SAFETY: a table of major version 1 is a whole `DLPackExchangeAPI`.
            let owning = unsafe { table.as_ref() }.managed_tensor_from_py_object_no_sync;
            return Ok(owning.map(|_| (Table(table), capsule.into_any().unbind())));
        }
        match NonNull::new(head.prev_api) {
            Some(prev) => header = prev,
            None => break,
        }
    }
    Ok(None)
}

/// What an import through a C exchange table gave.
pub(super) enum Imported {
    /// The tensor, adopted by the one import policy.
    Tensor(ManagedTensor),
    /// The type has no usable table (none, another object, another name, another major
    /// version, no owning entry): import by `__dlpack__`.
    NoTable,
    /// The table's entry gave a tensor that this path does not take, released at once:
    /// one not in ordinary host memory (the table's calls never wait for a device's
    /// stream; `__dlpack__` does), or a complex one (PyTorch's table does not resolve a
    /// conjugated view, which its `__dlpack__` refuses). Import by `__dlpack__`.
    Declined,
    /// The table's entry refused the object, with this exception (a `SystemError` when
    /// it set none): import by `__dlpack__`, which gives the protocol's own error if
    /// it fails too, or raise this one if the object has no `__dlpack__`.
    Refused(PyErr),
}

/// Imports `obj` through its type's C exchange API.
///
/// Every tensor the entry hands over is adopted at once, before the exception state is
/// looked at (a `PanicException` the entry left set resumes as a panic, which then
/// releases the tensor) and whatever the entry returned: a tensor handed over by an
/// entry that failed, or that succeeded with an exception set, is released once and
/// the failure reported. An exception that is not an `Exception` (`KeyboardInterrupt`,
/// `SystemExit`) is raised as it is, never retried.
pub(super) fn import(obj: &Bound<'_, PyAny>) -> PyResult<Imported> {
    let Some(found) = table_of(obj)? else {
        return Ok(Imported::NoTable);
    };
    let py = obj.py();
    // SAFETY: the table lives while `found` holds its capsule (or is our static).
    let Some(from_object) =
        (unsafe { found.table.0.as_ref() }).managed_tensor_from_py_object_no_sync
    else {
        return Ok(Imported::NoTable);
    };
    let mut out: *mut DLManagedTensorVersioned = ptr::null_mut();
    // SAFETY:
    // - `from_object` is the table's owning entry, called as the standard says: a live
    //   object whose type (or a base of it) published the table, and a writable
    //   out-pointer, from an attached thread;
    // - the standard forbids it to let a C++ exception out.
    let status = unsafe { from_object(obj.as_ptr().cast(), &mut out) };
    let handed = match NonNull::new(out) {
        // Not even the deleter can be read safely: the tensor is left to its producer.
        Some(ptr) if !ptr.is_aligned() => Some(Err(crate::error::Error::misaligned(
            "managed tensor",
            ptr.as_ptr(),
        )
        .into())),
        // SAFETY:
        // - a non-null, aligned pointer written by the entry hands us a versioned
        //   tensor: on success the standard says so; an entry that fails after writing
        //   one is outside the standard, and the tensor it wrote is taken as handed
        //   over (released once here) rather than leaked on a guess the other way;
        // - the standard makes the producer promise what `adopt` requires.
        Some(ptr) => Some(unsafe { adopt(Raw::Versioned(ptr)) }),
        None => None,
    };
    let raised = match PyErr::take(py) {
        Some(err) if !err.is_instance_of::<PyException>(py) => {
            drop(handed);
            return Err(err);
        }
        raised => raised,
    };
    if status != 0 {
        drop(handed);
        return Ok(Imported::Refused(raised.unwrap_or_else(|| {
            PySystemError::new_err(format!(
                "the DLPack C exchange API of {} failed without setting an exception",
                type_name(obj)
            ))
        })));
    }
    if let Some(err) = raised {
        // Success with an exception set is a broken producer: the tensor goes back.
        drop(handed);
        return Err(err);
    }
    let tensor = handed.ok_or_else(|| {
        PyBufferError::new_err(format!(
            "the DLPack C exchange API of {} returned no tensor",
            type_name(obj)
        ))
    })??;
    if tensor.dtype().code() == DLDataTypeCode::kDLComplex {
        // PyTorch's table exports a conjugated view without resolving the conjugation
        // (wrong values), where its `__dlpack__` refuses it: complex tensors go through
        // `__dlpack__`, whose answer is the protocol's.
        drop(tensor);
        return Ok(Imported::Declined);
    }
    if tensor.device().device_type != DLDeviceType::kDLCPU {
        // "NoSync": nothing waited for the producer's stream, and pinned or managed
        // memory that the CPU can read may still be written by a device. `__dlpack__`
        // synchronises.
        drop(tensor);
        return Ok(Imported::Declined);
    }
    Ok(Imported::Tensor(tensor))
}
