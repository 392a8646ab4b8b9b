//! `Tensor.__dlpack__` called the way CPython calls its own methods: a method
//! descriptor with the vectorcall convention (`METH_FASTCALL | METH_KEYWORDS`), reading
//! its four keywords itself. Compiled where the ABI has vectorcall methods (Python 3.10+,
//! or the full API); the stable ABI before 3.10 uses PyO3's `#[pymethods]` instead.
//!
//! `__dlpack__` runs once per exchange, and PyO3's generic argument parsing would cost
//! about as much as the rest of an export.

use core::ffi::CStr;
use core::ptr;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple};
use pyo3::{PyTypeInfo, ffi};

use crate::python::trampoline::trampoline;

use super::super::{DlpackArgs, export};
use super::Tensor;

/// The docstring of `Tensor.__dlpack__`, led by the text signature that `inspect` reads.
const DLPACK_DOC: &CStr =
    c"__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)
--

Exports the tensor as a DLPack capsule (Python array API `__dlpack__`).";

/// The keyword arguments of `__dlpack__`, in [`DlpackArgs`] order.
const KEYWORDS: [&str; 4] = ["stream", "max_version", "dl_device", "copy"];

/// A method descriptor of `Tensor` (what CPython makes for the methods of its own
/// types) calling [`dlpack_fastcall`].
///
/// `__dlpack__` runs once per exchange, and PyO3's generic argument parsing would cost
/// about as much as the rest of an export: this method reads its four keywords itself.
pub(super) fn method_descriptor(py: Python<'_>) -> PyResult<Py<PyAny>> {
    // Made while the type is made (once per process; once per thread that races to
    // make the type, at worst: two with the GIL, more on a free-threaded build, where
    // PyO3 lets every racing thread compute the class attributes and keeps one set):
    // it lives as long as the type, so it is never freed (32 bytes each).
    let def: &'static mut ffi::PyMethodDef = Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: c"__dlpack__".as_ptr(),
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunctionFastWithKeywords: dlpack_fastcall,
        },
        ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        ml_doc: DLPACK_DOC.as_ptr(),
    }));
    // While PyO3 fills the new type's dictionary it hands out the type itself.
    let ty = Tensor::type_object(py);
    // SAFETY:
    // - `ty` is the `Tensor` type object, which the descriptor keeps alive;
    // - `def` lives forever; `ml_name` and `ml_doc` are static C strings, and `ml_flags`
    //   announce the signature that `ml_meth` has;
    // - the thread is attached.
    let descr = unsafe { ffi::PyDescr_NewMethod(ty.as_type_ptr(), def) };
    // SAFETY: `descr` is a new reference, or NULL with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, descr) }.map(Bound::unbind)
}

/// `Tensor.__dlpack__` with CPython's vectorcall convention (`METH_FASTCALL |
/// METH_KEYWORDS`): `nargs` positional arguments, then one value per name in
/// `kwnames`, all in `args`. The C-callable shim: it turns the raw arguments into
/// borrowed objects and calls [`dlpack`] through the crate's one trampoline (an error
/// or a panic becomes a raised exception).
///
/// # Safety
///
/// - called by CPython through the method descriptor of [`method_descriptor`]: the
///   thread is attached, `slf` is a live `Tensor` (the descriptor checks its type),
///   `args` holds `nargs + len(kwnames)` live objects, and `kwnames` is NULL or a tuple
///   of strings, all borrowed for the call.
unsafe extern "C" fn dlpack_fastcall(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    let body = |py: Python<'_>| {
        // SAFETY: `slf` is a live object borrowed for the call.
        let slf = unsafe { Borrowed::from_ptr(py, slf) };
        // SAFETY: `slf` is a `Tensor`: the method descriptor checked its type before
        // calling.
        let slf = unsafe { slf.cast_unchecked::<Tensor>() };
        // SAFETY: `kwnames` is NULL or a live object borrowed for the call.
        let kwnames = unsafe { Borrowed::from_ptr_or_opt(py, kwnames) };
        let kwnames = kwnames.map(|names| names.cast::<PyTuple>()).transpose()?;
        let count = usize::try_from(nargs).unwrap_or(0) + kwnames.map_or(0, |n| n.len());
        let args: &[*mut ffi::PyObject] = if count == 0 {
            &[]
        } else {
            // SAFETY: `args` points to `nargs + len(kwnames)` object pointers, valid
            // for the call.
            unsafe { std::slice::from_raw_parts(args, count) }
        };
        let args = args.iter().map(|&arg| {
            // SAFETY: every argument is a live object borrowed for the call.
            unsafe { Borrowed::from_ptr(py, arg) }
        });
        dlpack(slf, nargs, kwnames, args).map(Bound::into_ptr)
    };
    // SAFETY: CPython calls methods on an attached thread.
    unsafe { trampoline(body) }.unwrap_or(ptr::null_mut())
}

/// `Tensor.__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)`.
#[inline]
fn dlpack<'a, 'py>(
    slf: Borrowed<'a, 'py, Tensor>,
    nargs: ffi::Py_ssize_t,
    kwnames: Option<Borrowed<'a, 'py, PyTuple>>,
    args: impl Iterator<Item = Borrowed<'a, 'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let request = parse(slf.py(), nargs, kwnames, args)?.request()?;
    export(slf.py(), slf.get(), request)
}

/// Sorts the arguments of a vectorcall by keyword: positional arguments and unknown or
/// repeated keywords are a `TypeError`, as for any Python function.
#[inline]
fn parse<'a, 'py>(
    py: Python<'py>,
    nargs: ffi::Py_ssize_t,
    kwnames: Option<Borrowed<'a, 'py, PyTuple>>,
    mut args: impl Iterator<Item = Borrowed<'a, 'py, PyAny>>,
) -> PyResult<DlpackArgs<'a, 'py>> {
    if nargs != 0 {
        return Err(PyTypeError::new_err(format!(
            "Tensor.__dlpack__() takes no positional arguments ({nargs} given)"
        )));
    }
    let mut parsed = DlpackArgs::default();
    let Some(kwnames) = kwnames else {
        return Ok(parsed);
    };
    // Keyword names are nearly always interned, as these are: a pointer comparison
    // finds them.
    static INTERNED: PyOnceLock<[Py<PyString>; 4]> = PyOnceLock::new();
    let interned = INTERNED.get_or_init(py, || KEYWORDS.map(|k| PyString::intern(py, k).unbind()));
    for name in kwnames.iter_borrowed() {
        let slot = match interned.iter().position(|k| name.is(k)) {
            Some(slot) => slot,
            None => {
                let name = name.cast::<PyString>()?;
                let text = name.to_cow()?;
                KEYWORDS.iter().position(|k| *k == text).ok_or_else(|| {
                    PyTypeError::new_err(format!(
                        "Tensor.__dlpack__() got an unexpected keyword argument '{text}'"
                    ))
                })?
            }
        };
        let value = args
            .next()
            .ok_or_else(|| PyTypeError::new_err("Tensor.__dlpack__(): missing keyword value"))?;
        if parsed.values[slot].replace(value).is_some() {
            return Err(PyTypeError::new_err(format!(
                "Tensor.__dlpack__() got multiple values for argument '{}'",
                KEYWORDS[slot]
            )));
        }
    }
    Ok(parsed)
}
