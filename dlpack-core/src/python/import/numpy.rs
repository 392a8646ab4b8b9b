//! NumPy arrays read in place: the import of a `numpy.ndarray` without calling its
//! `__dlpack__`, for the arrays whose `__dlpack__` would give exactly what is read here.
//!
//! NumPy has no DLPack C exchange table, so the protocol path costs a Python call, a
//! capsule and NumPy's header (allocated, then freed under the GIL) on every import.
//! Here the array's own C struct is read instead, as NumPy's C API defines it
//! (`PyArrayObject_fields` and `PyArray_Descr` in `ndarraytypes.h`: the fields read are
//! the same in NumPy 1.x and 2.x), and the tensor is one header of ours that holds a
//! strong reference to the array.
//!
//! - **Found at run time.** NumPy's C API is its `_ARRAY_API` capsule, looked up in
//!   `sys.modules` (never imported: while NumPy is not loaded, no object is an array)
//!   and checked once: its table is NumPy's (it names the module's `ndarray` type), of
//!   the ABI of NumPy 1.x (from 1.25, whose `__dlpack__` exports what is read here) or
//!   2.x. Any other NumPy, an interpreter without NumPy, PyPy, GraalPy and
//!   free-threaded builds: `__dlpack__`, as for any producer.
//! - **Only what `__dlpack__` would give as it is.** An array is read here only when
//!   NumPy's own `__dlpack__` (`numpy/_core/src/multiarray/dlpack.c`) would export it
//!   as read: a numeric dtype in native byte order (booleans, integers, `float16/32/64`,
//!   `complex64/128`), strides that are whole elements (or a layout NumPy exports
//!   without asking), and an outermost base that is not a capsule (an array NumPy made
//!   from a DLPack tensor reports that tensor's device). Everything else, refusals
//!   included, goes through `__dlpack__`, so that NumPy itself decides and its errors
//!   are the ones raised. Rank, shape, strides (bytes divided by the item size, as
//!   NumPy divides them) and the data pointer are copied into the header; `READ_ONLY`
//!   is set when the array is not `WRITEABLE`.
//! - **Only where `__dlpack__` is NumPy's.** An exact `numpy.ndarray` (whose type is
//!   immutable and whose instances have no `__dict__`), or an instance of a subclass
//!   whose `obj.__dlpack__` resolves to NumPy's own method bound to `obj` (a subclass
//!   with its own `__dlpack__`, a `__getattribute__` that answers otherwise, or an
//!   instance attribute is honoured: its `__dlpack__` is called).
//! - **The same policy.** The tensor goes through [`adopt`] like every import: shared,
//!   `READ_ONLY` when the array is. Its owner releases the array on any thread, attaching
//!   through CPython's GIL-state API where the thread is not attached.

use core::ffi::{c_char, c_int, c_long, c_longlong, c_short, c_uint, c_void};
use core::ptr::NonNull;
use std::sync::OnceLock;
#[cfg(not(any(PyPy, GraalPy, Py_GIL_DISABLED)))]
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::exceptions::{PyAttributeError, PyException};
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyDict};

use crate::device::Device;
use crate::dtype::DataType;
use crate::ffi::{DLDataTypeCode, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_READ_ONLY};
use crate::tensor::{Desc, ManagedTensor, build};

use crate::interpreter::release_reference;
use crate::python::adopt::adopt;

/// NumPy's array object up to the fields read here: `PyArrayObject_fields`, whose
/// first members are the same in NumPy 1.x and 2.x (ABI versions `0x01000009` and
/// `0x02000000`).
#[repr(C)]
struct ArrayObject {
    ob_base: ffi::PyObject,
    data: *mut c_char,
    nd: c_int,
    dimensions: *const isize,
    strides: *const isize,
    base: *mut ffi::PyObject,
    descr: *const Descr,
    flags: c_int,
}

/// NumPy's dtype object up to `type_num`: the prefix that `PyArray_Descr` keeps in
/// NumPy 1.x and 2.x (item size and alignment moved in 2.0, so they are not read: the
/// item size of the numeric types follows from the type number).
#[repr(C)]
struct Descr {
    ob_base: ffi::PyObject,
    typeobj: *mut ffi::PyTypeObject,
    kind: c_char,
    type_: c_char,
    byteorder: c_char,
    flags: c_char,
    type_num: c_int,
}

/// `NPY_ARRAY_C_CONTIGUOUS`.
const C_CONTIGUOUS: c_int = 0x0001;
/// `NPY_ARRAY_WRITEABLE`.
const WRITEABLE: c_int = 0x0400;
/// `NPY_MAXDIMS` of NumPy 2 (NumPy 1.x: 32).
const MAX_DIMS: c_int = 64;
/// The byte-order character of data in the other byte order than this machine's
/// (`NPY_OPPBYTE`).
const SWAPPED: c_char = if cfg!(target_endian = "little") {
    b'>' as c_char
} else {
    b'<' as c_char
};

/// The element type and item size of a builtin NumPy type number that NumPy's
/// `__dlpack__` exports as it is; `None` for every other (`longdouble`, whose export
/// depends on the platform, object, string, datetime, structured and user types).
fn element_type(type_num: c_int) -> Option<(DataType, usize)> {
    const BOOL: DLDataTypeCode = DLDataTypeCode::kDLBool;
    const INT: DLDataTypeCode = DLDataTypeCode::kDLInt;
    const UINT: DLDataTypeCode = DLDataTypeCode::kDLUInt;
    const FLOAT: DLDataTypeCode = DLDataTypeCode::kDLFloat;
    const COMPLEX: DLDataTypeCode = DLDataTypeCode::kDLComplex;
    let (code, bytes) = match type_num {
        0 => (BOOL, 1),
        1 => (INT, 1),
        2 => (UINT, 1),
        3 => (INT, size_of::<c_short>()),
        4 => (UINT, size_of::<c_short>()),
        5 => (INT, size_of::<c_int>()),
        6 => (UINT, size_of::<c_int>()),
        7 => (INT, size_of::<c_long>()),
        8 => (UINT, size_of::<c_long>()),
        9 => (INT, size_of::<c_longlong>()),
        10 => (UINT, size_of::<c_longlong>()),
        11 => (FLOAT, 4),
        12 => (FLOAT, 8),
        14 => (COMPLEX, 8),
        15 => (COMPLEX, 16),
        23 => (FLOAT, 2),
        _ => return None,
    };
    // At most 16 bytes: the bit count fits `u8`.
    Some((DataType::new(code, (bytes * 8) as u8, 1), bytes))
}

/// NumPy's C API, as far as it is used here.
struct Api {
    /// `PyArray_Type`: a static type of NumPy's extension, which is never unloaded.
    ndarray: NonNull<ffi::PyTypeObject>,
    /// The C function of NumPy's `ndarray.__dlpack__` (the `ml_meth` of its method
    /// definition), found on the first subclass instance seen.
    dlpack: OnceLock<usize>,
}

// SAFETY:
// - `ndarray` is the address of a static type object that lives as long as the
//   process and is only read (compared) here; `dlpack` is an address compared only.
unsafe impl Send for Api {}
// SAFETY: as above; nothing behind the pointer is written through it.
unsafe impl Sync for Api {}

/// NumPy's API, once found.
static API: OnceLock<Api> = OnceLock::new();

/// The address of the last table found under NumPy's name that is not a NumPy this
/// module knows (0: none), so that it is not examined again at every import. (Not a
/// permanent "no": a module under NumPy's name may be replaced from Python, by a test
/// double for instance, and the real one put back.)
#[cfg(not(any(PyPy, GraalPy, Py_GIL_DISABLED)))]
static REJECTED: AtomicUsize = AtomicUsize::new(0);

/// NumPy's API, if NumPy is loaded and known. An error of the look-up that is not an
/// `Exception` (a `KeyboardInterrupt`) is raised; any other means "not now".
fn api(py: Python<'_>) -> PyResult<Option<&'static Api>> {
    if let Some(api) = API.get() {
        return Ok(Some(api));
    }
    match find_api(py) {
        Ok(Some(found)) => Ok(Some(API.get_or_init(|| found))),
        Ok(None) => Ok(None),
        Err(err) if err.is_instance_of::<PyException>(py) => Ok(None),
        Err(err) => Err(err),
    }
}

/// NumPy's API if it was found by an earlier import (no look-up).
#[inline]
fn api_found() -> Option<&'static Api> {
    API.get()
}

/// Looks NumPy's API up in `sys.modules` (nothing is imported here): `None` while it is
/// not there, or when what is there is not a NumPy this module knows.
///
/// What is found under NumPy's name is checked before any entry of its table is called:
/// the capsule's table lies in the same library as the module's `ndarray` type (Unix:
/// `dladdr`; an extension module's statics), and its entry 2 is that type, as in
/// NumPy's `PyArray_API`. (Elsewhere the module under NumPy's name is trusted to be
/// NumPy's, as every extension that imports NumPy's C API trusts it.)
#[cfg(not(any(PyPy, GraalPy, Py_GIL_DISABLED)))]
fn find_api(py: Python<'_>) -> PyResult<Option<Api>> {
    // SAFETY: the thread is attached (`py`).
    let modules = unsafe { ffi::PyImport_GetModuleDict() };
    // SAFETY: a borrowed reference to the interpreter's module dictionary (non-null),
    // which lives as long as the interpreter; a new reference is taken.
    let modules = unsafe { Bound::from_borrowed_ptr(py, modules) };
    let modules = modules.cast_into::<PyDict>()?;
    // (Errors of the look-up, a key's `__eq__` that raises, are the caller's.)
    let mut module = None;
    for name in [
        intern!(py, "numpy._core._multiarray_umath"),
        intern!(py, "numpy.core._multiarray_umath"),
    ] {
        module = modules.get_item(name)?;
        if module.is_some() {
            break;
        }
    }
    let Some(module) = module else {
        return Ok(None);
    };
    // (A module still being initialised has no `_ARRAY_API` yet: an `AttributeError`,
    // and the look-up is made again at the next import.)
    let capsule = module.getattr(intern!(py, "_ARRAY_API"))?;
    let ndarray = module.getattr(intern!(py, "ndarray"))?;
    // NumPy's capsule has no name (`PyCapsule_GetPointer` with NULL checks that).
    let table = match capsule.cast::<PyCapsule>() {
        Ok(capsule) => capsule.pointer_checked(None).ok(),
        Err(_) => None,
    };
    let Some(table) = table else {
        return Ok(None);
    };
    let table = table.as_ptr().cast::<*const c_void>();
    if REJECTED.load(Ordering::Relaxed) == table as usize {
        return Ok(None);
    }
    let reject = || {
        REJECTED.store(table as usize, Ordering::Relaxed);
        Ok(None)
    };
    // SAFETY: a live object; the thread is attached.
    let is_type = unsafe { ffi::PyType_Check(ndarray.as_ptr()) } != 0;
    if !is_type || !table.is_aligned() || !same_library(table.cast(), ndarray.as_ptr().cast()) {
        return reject();
    }
    let entry = |index: usize| {
        // SAFETY: a table in the library of NumPy's `ndarray` type (checked above), as
        // NumPy's `PyArray_API` is, which has more than 211 entries in every NumPy
        // since 1.4; entry 2 is read first, and the others only once it proved the
        // table NumPy's.
        unsafe { table.wrapping_add(index).read() }
    };
    // Entry 2 is `&PyArray_Type`: it must be the module's `ndarray` type before any
    // entry is called (another capsule of the module, `_UFUNC_API`, is nameless too).
    if entry(2) != ndarray.as_ptr().cast_const().cast() {
        return reject();
    }
    let version = |index: usize| {
        let f = entry(index);
        (!f.is_null()).then(|| {
            // SAFETY: entries 0 and 211 of NumPy's table are `unsigned int
            // PyArray_GetNDArrayCVersion(void)` and `unsigned int
            // PyArray_GetNDArrayCFeatureVersion(void)` in every NumPy since 1.4 (the
            // function pointer has that type).
            let f = unsafe {
                core::mem::transmute::<*const c_void, unsafe extern "C" fn() -> c_uint>(f)
            };
            // SAFETY: these functions only return a constant; any thread may call them.
            unsafe { f() }
        })
    };
    let known = match version(0) {
        Some(0x0200_0000) => true,
        // NumPy 1.22 (API version 15) added `__dlpack__`, and 1.25 (API version 17)
        // the export of booleans, which this module reads.
        Some(0x0100_0009) => version(211).is_some_and(|feature| feature >= 0x11),
        _ => false,
    };
    match NonNull::new(ndarray.as_ptr().cast::<ffi::PyTypeObject>()) {
        Some(ndarray) if known => Ok(Some(Api {
            ndarray,
            dlpack: OnceLock::new(),
        })),
        _ => reject(),
    }
}

/// Whether `a` and `b` lie in the same loaded library (or executable), by `dladdr`.
#[cfg(all(unix, not(any(PyPy, GraalPy, Py_GIL_DISABLED))))]
fn same_library(a: *const c_void, b: *const c_void) -> bool {
    let base = |address: *const c_void| {
        let mut info = core::mem::MaybeUninit::<libc::Dl_info>::uninit();
        // SAFETY: `dladdr` only reads the process's tables of loaded objects and fills
        // `info` when it returns non-zero; any address may be asked about.
        let found = unsafe { libc::dladdr(address, info.as_mut_ptr()) } != 0;
        // SAFETY: filled by `dladdr`, which found the address.
        found.then(|| unsafe { info.assume_init() }.dli_fbase)
    };
    matches!((base(a), base(b)), (Some(x), Some(y)) if !x.is_null() && x == y)
}

/// (No `dladdr`: the module under NumPy's name is trusted, as NumPy's own C API users
/// trust it.)
#[cfg(not(any(unix, PyPy, GraalPy, Py_GIL_DISABLED)))]
fn same_library(_: *const c_void, _: *const c_void) -> bool {
    true
}

/// PyPy and GraalPy (whose objects are not NumPy's C structs as they are in CPython)
/// and free-threaded CPython (where another thread may change an array's struct while
/// it is read): `__dlpack__`.
#[cfg(any(PyPy, GraalPy, Py_GIL_DISABLED))]
fn find_api(_py: Python<'_>) -> PyResult<Option<Api>> {
    Ok(None)
}

/// The owner of a tensor read from a NumPy array: a strong reference to the array,
/// released on any thread (attaching to the interpreter when the thread is not).
pub(super) struct ArrayRef(NonNull<ffi::PyObject>);

// SAFETY:
// - the reference is only released (by `Drop`, which attaches to the interpreter when
//   the thread is not attached) and never used otherwise; reference counts are the
//   interpreter's, changed only by attached threads.
unsafe impl Send for ArrayRef {}
// SAFETY: nothing is reachable through `&ArrayRef`.
unsafe impl Sync for ArrayRef {}

impl Drop for ArrayRef {
    fn drop(&mut self) {
        release_reference(self.0);
    }
}

/// Imports `obj` if it is exactly a `numpy.ndarray` and NumPy's API was already found
/// (the first import of an array finds it through [`import`]): one comparison for
/// anything else.
#[inline]
pub(super) fn import_exact(obj: &Bound<'_, PyAny>) -> PyResult<Option<ManagedTensor>> {
    match api_found() {
        Some(api) if is_exact(obj, api) => read(obj, api),
        _ => Ok(None),
    }
}

/// Imports `obj` if it is a NumPy array (of `numpy.ndarray` or of a subclass whose
/// `__dlpack__` is NumPy's) that NumPy's `__dlpack__` would export as it is; `None`
/// leaves it to `__dlpack__`. Errors: those of looking up a subclass instance's
/// `__dlpack__` (but `AttributeError`, left to `__dlpack__` too), and a header that
/// cannot be allocated.
pub(super) fn import(obj: &Bound<'_, PyAny>) -> PyResult<Option<ManagedTensor>> {
    let Some(api) = api(obj.py())? else {
        return Ok(None);
    };
    if is_exact(obj, api) || dlpack_is_numpys(obj, api)? {
        read(obj, api)
    } else {
        Ok(None)
    }
}

#[inline]
fn is_exact(obj: &Bound<'_, PyAny>, api: &Api) -> bool {
    obj.get_type_ptr() == api.ndarray.as_ptr()
}

/// Whether `obj` is an instance of a subclass of `numpy.ndarray` whose `obj.__dlpack__`
/// is NumPy's own method bound to `obj`, as `obj.__dlpack__(...)` would find it (so a
/// `__dlpack__` of the subclass's, an instance attribute, or a `__getattribute__` that
/// answers something else is honoured).
fn dlpack_is_numpys(obj: &Bound<'_, PyAny>, api: &Api) -> PyResult<bool> {
    // SAFETY: `obj` is a live object and `ndarray` a live type; the thread is attached.
    if unsafe { ffi::PyObject_TypeCheck(obj.as_ptr(), api.ndarray.as_ptr()) } == 0 {
        return Ok(false);
    }
    let py = obj.py();
    let method = match obj.getattr(intern!(py, "__dlpack__")) {
        Ok(method) => method,
        Err(err) if err.is_instance_of::<PyAttributeError>(py) => return Ok(false),
        Err(err) => return Err(err),
    };
    let function = |method: &Bound<'_, PyAny>| {
        // SAFETY: a live object; the thread is attached.
        if unsafe { ffi::PyCFunction_Check(method.as_ptr()) } == 0 {
            return None;
        }
        // SAFETY: a built-in function or method object (checked); the thread is
        // attached. The self it is bound to, only compared.
        let bound_to = unsafe { ffi::PyCFunction_GetSelf(method.as_ptr()) };
        // SAFETY: as above; its C function, only compared.
        let function = unsafe { ffi::PyCFunction_GetFunction(method.as_ptr()) };
        Some((bound_to, function.map_or(0, |f| f as usize)))
    };
    let numpys = match api.dlpack.get() {
        Some(&numpys) => numpys,
        None => {
            // NumPy's method descriptor bound to `obj`, whatever its subclass did.
            // SAFETY: `ndarray` is a live type object; the thread is attached.
            let ndarray = unsafe { Bound::from_borrowed_ptr(py, api.ndarray.as_ptr().cast()) };
            let bound = ndarray
                .getattr(intern!(py, "__dlpack__"))?
                .call_method1(intern!(py, "__get__"), (obj,))?;
            match function(&bound) {
                Some((_, numpys)) if numpys != 0 => *api.dlpack.get_or_init(|| numpys),
                _ => return Ok(false),
            }
        }
    };
    Ok(function(&method)
        .is_some_and(|(bound_to, found)| bound_to == obj.as_ptr() && found == numpys))
}

/// Reads a NumPy array (an instance of `numpy.ndarray` or a subclass, checked by the
/// caller) into a tensor, if NumPy's `__dlpack__` would export it as it is.
fn read(obj: &Bound<'_, PyAny>, api: &Api) -> PyResult<Option<ManagedTensor>> {
    let array = obj.as_ptr().cast::<ArrayObject>();
    // SAFETY:
    // - `obj` is an instance of `PyArray_Type` (or a subclass) of a NumPy whose ABI
    //   version says that its objects start with these fields, so they can be read; an
    //   array's type cannot change (`ndarray.__class__` cannot be assigned);
    // - NumPy changes them only while holding the GIL, which this thread holds.
    let a = unsafe { &*array };
    if !(0..=MAX_DIMS).contains(&a.nd) || a.descr.is_null() || a.data.is_null() {
        return Ok(None);
    }
    // SAFETY: a NumPy array's `descr` is a live dtype (checked non-null), whose first
    // fields are these in NumPy 1.x and 2.x; the GIL is held.
    let descr = unsafe { &*a.descr };
    let Some((dtype, itemsize)) = element_type(descr.type_num) else {
        return Ok(None);
    };
    if descr.byteorder == SWAPPED {
        return Ok(None);
    }
    let ndim = a.nd as usize;
    let (dims, strides): (&[isize], &[isize]) = if ndim == 0 {
        (&[], &[])
    } else {
        // A NumPy array of rank `nd > 0` has `nd` extents and `nd` strides (in bytes)
        // at these non-null, aligned pointers, alive while the array is and changed
        // only under the GIL; they are copied into the header below, before the GIL
        // can be released.
        // SAFETY: the extents, as above.
        let dims = unsafe { core::slice::from_raw_parts(a.dimensions, ndim) };
        // SAFETY: the strides, as above.
        let strides = unsafe { core::slice::from_raw_parts(a.strides, ndim) };
        (dims, strides)
    };
    // What NumPy's `__dlpack__` checks before it exports (the item size is at most 16).
    let itemsize = itemsize as isize;
    if a.flags & C_CONTIGUOUS == 0 {
        let size = dims.iter().try_fold(1isize, |n, &d| n.checked_mul(d));
        if size != Some(1)
            && dims
                .iter()
                .zip(strides)
                .any(|(&d, &s)| d != 1 && s % itemsize != 0)
        {
            return Ok(None);
        }
    }
    // NumPy reports the device of the DLPack tensor an array was made from (its
    // outermost base, a capsule): left to `__dlpack__`.
    let mut base = a.base;
    // `base` is NULL or a live object that the array (or an array base) keeps alive;
    // the GIL is held.
    // SAFETY: a live object and a live type; the thread is attached.
    while !base.is_null() && unsafe { ffi::PyObject_TypeCheck(base, api.ndarray.as_ptr()) } != 0 {
        // SAFETY: an instance of `ndarray` (checked), read as an array.
        base = unsafe { (*base.cast::<ArrayObject>()).base };
    }
    // SAFETY: a live object; the thread is attached.
    if !base.is_null() && unsafe { ffi::PyCapsule_CheckExact(base) } != 0 {
        return Ok(None);
    }
    let flags = if a.flags & WRITEABLE == 0 {
        DLPACK_FLAG_BITMASK_READ_ONLY
    } else {
        0
    };
    let data = a.data.cast::<c_void>();
    // A new strong reference (never NULL), which the owner releases.
    let Some(reference) = NonNull::new(obj.clone().into_ptr()) else {
        return Ok(None);
    };
    let owner = ArrayRef(reference);
    let describe = |_: &mut ArrayRef, shape: &mut [i64], strides_out: &mut [i64]| {
        for (((extent, stride), &d), &s) in shape.iter_mut().zip(strides_out).zip(dims).zip(strides)
        {
            *extent = d as i64;
            // In elements, truncated as NumPy's division truncates.
            *stride = (s / itemsize) as i64;
        }
        Ok(Desc {
            data,
            dtype,
            device: Device::CPU,
            byte_offset: 0,
            flags,
        })
    };
    // SAFETY:
    // - the header describes the array's own data (its pointer, extents and strides in
    //   whole elements of its dtype, which NumPy guarantees lie in its buffer), which
    //   lives as long as the array, and the owner holds a strong reference to it;
    // - the tensor is marked shared by `adopt` before any view is made, so nothing
    //   writes through it while Python holds the array; `READ_ONLY` follows NumPy's
    //   `WRITEABLE` flag;
    // - for `bool` arrays, NumPy keeps 0 or 1 in every byte only by convention: views
    //   check the bytes, as they do for any import.
    let tensor = unsafe { build::<DLManagedTensorVersioned, _>(owner, ndim, describe) }
        .map_err(PyErr::from)?;
    // SAFETY: our own header, handed over: its deleter drops the owner once, from any
    // thread; the data requirements are those stated above.
    unsafe { adopt(tensor.into_raw_as_is()) }.map(Some)
}
