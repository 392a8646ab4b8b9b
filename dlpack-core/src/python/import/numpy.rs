//! NumPy arrays read in place: the subclass rule and the read policy, as "NumPy arrays"
//! in `from_dlpack`'s docs states them for users; NumPy's C layout and API table are
//! [`npyffi`](crate::python::npyffi)'s. The tensor is one header of ours that holds a
//! strong reference to the array (a [`ForeignOwner`]: its memory is NumPy's).
//!
//! - **What NumPy's `__dlpack__` would give as it is.** [`read`] makes the checks of
//!   NumPy's own export (`numpy/_core/src/multiarray/dlpack.c`): a type number that
//!   NumPy exports as it is, native byte order, strides that are whole elements unless
//!   NumPy exports the layout without asking (C-contiguous, or one element), and an
//!   outermost base that is not a capsule. Anything else is `None`, so that
//!   `__dlpack__` runs and NumPy's own errors are raised. Rank, shape, strides (bytes
//!   divided by the item size, truncated as NumPy divides them) and the data pointer
//!   are copied into the header; `READ_ONLY` is set when the array is not `WRITEABLE`.
//! - **Where `__dlpack__` is NumPy's.** An exact `numpy.ndarray` needs no more check
//!   (its type is immutable and its instances have no `__dict__`); an instance of a
//!   subclass is read only when `obj.__dlpack__` is NumPy's C function bound to `obj`
//!   ([`dlpack_is_numpys`]).
//! - **The same policy.** The tensor goes through [`adopt`] like every import: shared,
//!   `READ_ONLY` when the array is. Its owner releases the array on any thread, attaching
//!   through CPython's GIL-state API where the thread is not attached.

use core::ffi::{c_int, c_void};
use core::ptr::NonNull;
use std::sync::OnceLock;

use pyo3::exceptions::{PyAttributeError, PyBufferError};
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;

use crate::device::Device;
use crate::ffi::{DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_READ_ONLY};
use crate::interpreter::release_reference;
use crate::python::adopt::adopt;
use crate::python::error::{numpy_hint, with_hint};
use crate::python::npyffi::{
    Api, ArrayObject, C_CONTIGUOUS, MAX_DIMS, SWAPPED, USER_DEFINED, WRITEABLE, api, api_found,
    element_type, learn_user_type, user_element_type,
};
use crate::tensor::{Desc, ForeignOwner, ManagedTensor, build};

/// The C function of NumPy's `ndarray.__dlpack__` (the `ml_meth` of its method
/// definition), found on the first subclass instance seen.
static NUMPY_DLPACK: OnceLock<usize> = OnceLock::new();

/// Releases the strong reference to an array that a tensor read from it owns (its
/// [`ForeignOwner`]'s), on any thread: attaching to the interpreter when the thread is
/// not.
fn release_array(array: NonNull<c_void>) {
    release_reference(array.cast());
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

/// The type number of `obj`'s dtype if `obj` is exactly a `numpy.ndarray` (NumPy's API
/// already found) whose dtype is a user type (`ml_dtypes.bfloat16`, ...); `None` for
/// anything else.
pub(super) fn user_type_of(obj: &Bound<'_, PyAny>) -> Option<c_int> {
    let api = api_found()?;
    if !is_exact(obj, api) {
        return None;
    }
    // SAFETY:
    // - `obj` is exactly a `numpy.ndarray` (checked) of a NumPy whose ABI says its
    //   objects start with these fields; the GIL is held, under which NumPy changes
    //   them;
    // - a non-null `descr` is a live dtype whose first fields are `Descr`'s.
    let descr = unsafe { (*obj.as_ptr().cast::<ArrayObject>()).descr };
    if descr.is_null() {
        return None;
    }
    // SAFETY: as above.
    let type_num = unsafe { (*descr).type_num };
    (type_num >= USER_DEFINED).then_some(type_num)
}

/// After NumPy's own `__dlpack__` exported `obj` as `tensor`: if `obj` is exactly a
/// `numpy.ndarray` of a user type, the DLPack type NumPy gave that type number is kept,
/// so that the next array of that type is read in place ([`read`]) as NumPy's export
/// would give it.
///
/// Only legacy user types are kept (type numbers below NumPy's `StringDType`'s,
/// `NPY_VSTRING`: NumPy gives every instance of such a type one item size), and only
/// when the DLPack type's size is the array's item size, so that the extents and strides
/// read in place are those of the array's own elements.
pub(super) fn learn(obj: &Bound<'_, PyAny>, tensor: &ManagedTensor) {
    let Some(type_num) = user_type_of(obj).filter(|&n| n < VARIABLE_STRING) else {
        return;
    };
    let py = obj.py();
    let itemsize = obj
        .getattr(intern!(py, "itemsize"))
        .and_then(|n| n.extract::<usize>());
    if itemsize.is_ok_and(|n| n == tensor.dtype().size_in_bytes()) {
        learn_user_type(type_num, tensor.dtype());
    }
}

/// `NPY_VSTRING`, `StringDType`'s type number: the first past NumPy's legacy user types.
const VARIABLE_STRING: c_int = 2056;

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
    let numpys = match NUMPY_DLPACK.get() {
        Some(&numpys) => numpys,
        None => {
            // NumPy's method descriptor bound to `obj`, whatever its subclass did.
            // SAFETY: `ndarray` is a live type object; the thread is attached.
            let ndarray = unsafe { Bound::from_borrowed_ptr(py, api.ndarray.as_ptr().cast()) };
            let bound = ndarray
                .getattr(intern!(py, "__dlpack__"))?
                .call_method1(intern!(py, "__get__"), (obj,))?;
            match function(&bound) {
                Some((_, numpys)) if numpys != 0 => *NUMPY_DLPACK.get_or_init(|| numpys),
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
    let Some((dtype, itemsize)) =
        element_type(descr.type_num).or_else(|| user_element_type(descr.type_num))
    else {
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
    // SAFETY: `release_array` releases the reference once, on any thread (attaching to
    // the interpreter when the thread is not); reference counts are the interpreter's,
    // changed only by attached threads, and the reference is used for nothing else.
    let owner = unsafe { ForeignOwner::new(reference.cast(), release_array) };
    let describe = |_: &mut ForeignOwner, shape: &mut [i64], strides_out: &mut [i64]| {
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

/// `err`, raised by `obj.__dlpack__`, with what to install or register when `obj` is a
/// NumPy array of one of `ml_dtypes`' types (bfloat16, the float8 types, ...), which
/// NumPy exchanges through DLPack from 2.5, once registered: see [`numpy_hint`]. Any
/// other error (another user type's, NumPy's `StringDType`'s) is returned as it is.
pub(super) fn user_type_hint(obj: &Bound<'_, PyAny>, err: PyErr) -> PyErr {
    let py = obj.py();
    if user_type_of(obj).is_none() || !err.is_instance_of::<PyBufferError>(py) {
        return err;
    }
    let Ok(dtype) = obj.getattr(intern!(py, "dtype")) else {
        return err;
    };
    let of_ml_dtypes = dtype
        .getattr(intern!(py, "type"))
        .and_then(|t| t.getattr(intern!(py, "__module__")))
        .is_ok_and(|m| m.eq("ml_dtypes").unwrap_or(false));
    let Some(name) = dtype.str().ok().filter(|_| of_ml_dtypes) else {
        return err;
    };
    with_hint(py, err, &numpy_hint(py, &name.to_string_lossy()))
}
