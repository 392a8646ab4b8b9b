//! Python interop (feature `pyo3`): DLPack capsules for NumPy, PyTorch, JAX and every
//! other implementation of the Python array API's `__dlpack__` protocol.
//!
//! - A [`ManagedTensor`] returned to Python (any `#[pyfunction]` returning it, or
//!   [`IntoPyObject`]) becomes a [`Tensor`]: an object with `__dlpack__` and
//!   `__dlpack_device__`, so `numpy.from_dlpack(t)`, `torch.from_dlpack(t)` and
//!   `jax.dlpack.from_dlpack(t)` take it without copying. Like a NumPy array it can be
//!   exported any number of times; every capsule keeps the data alive on its own.
//! - A [`TensorBatch`] becomes a `dict` of such objects: a PyTorch `state_dict` in all
//!   but name, ready for `module.load_state_dict`.
//! - Any object with `__dlpack__`, or a raw DLPack capsule, extracts into a
//!   [`ManagedTensor`] ([`FromPyObject`], [`from_dlpack`]); any mapping of them into a
//!   [`TensorBatch`].
//! - [`Error`] converts into the exception NumPy raises in the same situation.
//!
//! ```no_run
//! use dlpack_core::{ManagedTensor, ToDLPack, python::from_dlpack};
//! use ndarray::{Array2, Ix2};
//! use pyo3::prelude::*;
//!
//! /// An array made in Rust, handed to Python without a copy.
//! #[pyfunction]
//! fn make() -> PyResult<ManagedTensor> {
//!     Ok(Array2::<f32>::eye(3).to_dlpack()?)
//! }
//!
//! /// The sum of any `__dlpack__` array (NumPy, PyTorch, JAX, ...), read in place.
//! #[pyfunction]
//! fn total(x: ManagedTensor) -> PyResult<f32> {
//!     Ok(x.as_array::<f32, Ix2>()?.sum())
//! }
//!
//! # fn main() -> PyResult<()> {
//! Python::attach(|py| {
//!     let np = py.import("numpy")?;
//!     let a = np.call_method1("ones", ((2, 3),))?;
//!     let t = from_dlpack(&a)?; // the same as `a.extract::<ManagedTensor>()`
//!     assert_eq!(t.shape(), &[2, 3]);
//!     Ok(())
//! })
//! # }
//! ```
//!
//! # The `__dlpack__` protocol, as [`Tensor`] implements it
//!
//! `__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)` follows the
//! Python array API standard:
//!
//! - `max_version` of `None` or a major version below 1 gets a legacy `"dltensor"`
//!   capsule (`DLManagedTensor`; JAX asks this way), anything else a
//!   `"dltensor_versioned"` capsule (`DLManagedTensorVersioned`, version 1.3) carrying
//!   the tensor's `READ_ONLY` flag.
//! - `copy=True` copies into a fresh C-order buffer (flagged `IS_COPIED` in a versioned
//!   capsule); `copy=False` never copies; `copy=None` copies only when it must: a
//!   `READ_ONLY` tensor asked for as a legacy capsule, which cannot say it is read-only.
//!   With `copy=False` that case is a `BufferError`, as in NumPy.
//! - `stream` must be `None` for a CPU tensor (`ValueError`, as NumPy). For other
//!   devices it is accepted and ignored: this crate has no streams, so the producer of a
//!   device tensor must have made its data ready before wrapping it.
//! - `dl_device` may be `None`, the tensor's own device, or `(1, 0)` (CPU) when the CPU
//!   can access the memory; anything else is a `BufferError`.
//! - `__dlpack_device__()` returns the tensor's own `(device_type, device_id)`. A tensor
//!   on a device the CPU cannot access exports fine as long as no copy is needed.
//!
//! A shared export (no copy) does not carry `IS_COPIED`, even if the tensor had it: the
//! capsule's consumer shares the memory with every other consumer of the same object.
//!
//! `__dlpack__` runs once per exchange, so it is a method like those of CPython's own
//! types (a vectorcall method descriptor reading its four keywords itself), not a
//! `#[pymethods]` method: an export costs what NumPy's own costs (one allocation, one
//! reference count, one capsule). Its deleter never needs the GIL.
//!
//! # Capsules and ownership
//!
//! Capsules are made with `PyCapsule_New` and static names. Their destructor calls the
//! DLPack deleter only if the capsule was never consumed (still named `dltensor` or
//! `dltensor_versioned`), exactly as the DLPack Python specification's reference code
//! does. On import, a capsule is renamed `used_dltensor[_versioned]` immediately before
//! ownership passes to the new [`ManagedTensor`] (whose `Drop` calls the deleter), so
//! every deleter runs exactly once on every path; a capsule that is already used is an
//! error, never a double free. A versioned capsule whose major version is not 1 is
//! refused with a `BufferError` and left unrenamed, so its producer's destructor frees it.
//!
//! A capsule that a consumer tampered with is never freed on a guess: renamed to
//! anything but its two DLPack names without being consumed, or with its pointer
//! replaced (the destructor compares it with the capsule's context, set to the same
//! pointer when the capsule is made), its tensor is leaked and the problem reported as
//! an unraisable `RuntimeError`. The destructor never hands the dying capsule to
//! Python (an unraisable hook that took a reference would run it again).
//!
//! Deleters may run on any thread. The deleter of a capsule made here only drops a
//! reference count; when that frees a tensor imported from Python, the foreign deleter
//! takes the GIL itself (NumPy and PyTorch do).
//!
//! # Soundness of imports
//!
//! Imports follow the crate's one rule (see "Import safety" in the
//! [crate documentation](crate#import-safety)): a tensor imported from Python is
//! *shared*, since the producer keeps its own handle (the NumPy array, the torch
//! tensor, a [`Tensor`] exported twice), so it gives read-only views only and
//! `as_array_mut` is an [`Error::NotExclusive`]. An import of a copy
//! ([`from_dlpack_with`] with `copy` of `Some(true)`, or a capsule its producer flagged
//! `IS_COPIED`) is exclusive. Like every DLPack consumer, an import trusts the
//! protocol: a capsule named `dltensor_versioned` or `dltensor` must hold a valid
//! managed tensor whose memory stays valid until its deleter runs; the header is
//! checked, and views check layout, dtype and device.
//!
//! Capsules are consumed under the capsule's lock (a critical section, for
//! free-threaded Python), so one capsule imported from several threads at once goes to
//! exactly one of them. A foreign deleter may run Python code: dropping a tensor
//! imported from Python keeps the interpreter's exception state as it was, and an
//! exception that a deleter leaves set is reported as unraisable.

use core::ffi::{CStr, c_void};
use core::ptr::{self, NonNull};
use std::sync::Arc;

use ndarray::IxDyn;
use pyo3::exceptions::{
    PyAttributeError, PyBufferError, PyKeyError, PyMemoryError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyDict, PyInt, PyTuple};
use pyo3::{IntoPyObject, ffi, intern};
#[cfg(any(Py_3_10, not(Py_LIMITED_API)))]
use pyo3::{PyTypeInfo, types::PyString};

use crate::batch::TensorBatch;
use crate::device::Device;
use crate::dtype::{DataType, Element};
use crate::error::Error;
use crate::ffi::{
    DLDeviceType, DLManagedTensor, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED,
    DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION,
};
use crate::layout;
use crate::tensor::{Abi, Desc, ManagedTensor, Raw, build, delete};
use crate::traits::ToDLPack;

/// Name of an unconsumed legacy capsule.
const LEGACY: &CStr = c"dltensor";
/// Name of a consumed legacy capsule.
const USED_LEGACY: &CStr = c"used_dltensor";
/// Name of an unconsumed versioned capsule.
const VERSIONED: &CStr = c"dltensor_versioned";
/// Name of a consumed versioned capsule.
const USED_VERSIONED: &CStr = c"used_dltensor_versioned";

// ---------------------------------------------------------------------------------------
// Errors.
// ---------------------------------------------------------------------------------------

impl From<Error> for PyErr {
    /// The exception NumPy raises in the same situation: `BufferError` when data cannot
    /// be exchanged through DLPack (unsupported device, version, lanes or element type, a
    /// malformed or misaligned header, a read-only tensor asked for as a legacy capsule),
    /// `TypeError` when a supported element type or the rank differs from the Rust
    /// type's, `KeyError` for a missing batch entry, and `ValueError` otherwise. Errors
    /// about a named tensor of a batch are classified by their cause and keep the name
    /// in the message.
    fn from(err: Error) -> Self {
        let message = err.to_string();
        match err.root() {
            Error::UnsupportedDevice { .. }
            | Error::UnsupportedVersion { .. }
            | Error::UnsupportedLanes { .. }
            | Error::ReadOnlyLegacy
            | Error::NullPointer { .. }
            | Error::Misaligned { .. }
            | Error::NegativeNdim { .. }
            | Error::NullData { .. } => PyBufferError::new_err(message),
            Error::DtypeMismatch { found, .. } if !is_known_dtype(*found) => {
                PyBufferError::new_err(message)
            }
            Error::DtypeMismatch { .. } | Error::NdimMismatch { .. } => {
                PyTypeError::new_err(message)
            }
            Error::MissingTensor { .. } => PyKeyError::new_err(message),
            Error::AllocationFailed { .. } => PyMemoryError::new_err(message),
            Error::NotExclusive => PyBufferError::new_err(message),
            _ => PyValueError::new_err(message),
        }
    }
}

/// Whether `dtype` is one that NumPy, PyTorch or JAX exchange through DLPack (and that
/// an [`Element`] type can map): a mismatch with it is the caller's type error, while any
/// other type cannot be exchanged at all.
fn is_known_dtype(dtype: DataType) -> bool {
    [
        DataType::BOOL,
        DataType::I8,
        DataType::I16,
        DataType::I32,
        DataType::I64,
        DataType::U8,
        DataType::U16,
        DataType::U32,
        DataType::U64,
        DataType::F16,
        DataType::BF16,
        DataType::F32,
        DataType::F64,
        DataType::C64,
        DataType::C128,
    ]
    .contains(&dtype)
}

fn buffer_error(message: impl Into<String>) -> PyErr {
    PyBufferError::new_err(message.into())
}

// ---------------------------------------------------------------------------------------
// Export: the `Tensor` class.
// ---------------------------------------------------------------------------------------

/// A [`ManagedTensor`] as a Python object (`dlpack_core.Tensor`) that any DLPack
/// consumer accepts: `numpy.from_dlpack`, `torch.from_dlpack`,
/// `jax.dlpack.from_dlpack`, `array_api_strict.from_dlpack`, ...
///
/// Made by returning a [`ManagedTensor`] to Python, or with [`Tensor::new`]. Every
/// `__dlpack__` call makes a new capsule that shares the data and keeps it alive; the
/// tensor's deleter runs when the object and every capsule and consumer array made from
/// it are gone. See the [module documentation](self) for the protocol details.
///
/// Python attributes: `shape` and `strides` (tuples; `strides` in elements, `None` if the
/// producer gave none), `ndim`, `dtype` (a NumPy-style name such as `"float32"`),
/// `device` (such as `"cpu:0"`), `read_only`, and `data_ptr()` (the address of the first
/// element).
#[pyclass(frozen, module = "dlpack_core", name = "Tensor")]
pub struct Tensor {
    tensor: Arc<ManagedTensor>,
}

impl Tensor {
    /// Wraps a tensor for Python.
    pub fn new(tensor: ManagedTensor) -> Self {
        Self {
            tensor: Arc::new(tensor),
        }
    }

    /// The tensor.
    pub fn tensor(&self) -> &ManagedTensor {
        &self.tensor
    }

    /// The shared handle of the tensor, which capsules made by `__dlpack__` also hold.
    pub fn shared(&self) -> Arc<ManagedTensor> {
        Arc::clone(&self.tensor)
    }

    fn repr(&self) -> String {
        let t = &*self.tensor;
        let shape = t
            .shape()
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let comma = if t.ndim() == 1 { "," } else { "" };
        let read_only = if t.is_read_only() {
            ", read_only=True"
        } else {
            ""
        };
        format!(
            "Tensor(shape=({shape}{comma}), dtype={}, device={}{read_only})",
            t.dtype(),
            t.device()
        )
    }
}

impl From<ManagedTensor> for Tensor {
    fn from(tensor: ManagedTensor) -> Self {
        Self::new(tensor)
    }
}

#[pymethods]
impl Tensor {
    /// `__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)`: a
    /// method descriptor around [`dlpack_fastcall`], CPython's fastest calling convention.
    #[cfg(any(Py_3_10, not(Py_LIMITED_API)))]
    #[classattr]
    #[pyo3(name = "__dlpack__")]
    fn dlpack_method(py: Python<'_>) -> PyResult<Py<PyAny>> {
        method_descriptor(py)
    }

    /// Exports the tensor as a DLPack capsule (Python array API `__dlpack__`). The
    /// stable ABI before Python 3.10 has no vectorcall methods: PyO3 sorts the keywords
    /// here, and the same [`DlpackArgs::request`] reads them.
    #[cfg(all(Py_LIMITED_API, not(Py_3_10)))]
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<&Bound<'py, PyAny>>,
        copy: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = DlpackArgs {
            values: [stream, max_version, dl_device, copy].map(|v| v.map(Bound::as_borrowed)),
        };
        export(py, &self.tensor, args.request()?)
    }

    /// `(device_type, device_id)` in DLPack numbering: `(1, 0)` for the CPU.
    fn __dlpack_device__(&self) -> (i32, i32) {
        let device = self.tensor.device();
        (device.device_type.0, device.device_id)
    }

    /// The extents.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.tensor.shape())
    }

    /// The strides in elements, or `None` (C-contiguous) if the producer gave none.
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.tensor
            .strides()
            .map(|s| PyTuple::new(py, s))
            .transpose()
    }

    /// The number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.tensor.ndim()
    }

    /// The element type, named as NumPy names it (`"float32"`, `"bool"`, ...).
    #[getter]
    fn dtype(&self) -> String {
        self.tensor.dtype().to_string()
    }

    /// The device, as `"cpu:0"`, `"cuda:1"`, ...
    #[getter]
    fn device(&self) -> String {
        self.tensor.device().to_string()
    }

    /// Whether the producer forbids writes.
    #[getter]
    fn read_only(&self) -> bool {
        self.tensor.is_read_only()
    }

    /// The address of the first element.
    fn data_ptr(&self) -> usize {
        self.tensor.data_ptr() as usize
    }

    fn __repr__(&self) -> String {
        self.repr()
    }
}

impl<'py> IntoPyObject<'py> for ManagedTensor {
    type Target = Tensor;
    type Output = Bound<'py, Tensor>;
    type Error = PyErr;

    /// Wraps the tensor in a [`Tensor`] object; nothing is copied.
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, Tensor>> {
        Bound::new(py, Tensor::new(self))
    }
}

impl<'py> IntoPyObject<'py> for TensorBatch {
    type Target = PyDict;
    type Output = Bound<'py, PyDict>;
    type Error = PyErr;

    /// A `dict` from name to [`Tensor`], in batch order; nothing is copied.
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (name, tensor) in self {
            dict.set_item(name, tensor)?;
        }
        Ok(dict)
    }
}

/// A `(a, b)` argument of `__dlpack__`: anything else is a `TypeError`, as in NumPy.
fn pair<'py, T: FromPyObjectOwned<'py>>(arg: &Bound<'py, PyAny>) -> PyResult<(T, T)> {
    let (a, b) = two(arg)?;
    match (a.extract(), b.extract()) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        _ => Err(not_two_integers()),
    }
}

/// The major version of a `max_version=(major, minor)` argument: a tuple of two
/// integers, like [`pair`]'s, of which only the major matters.
fn major_version(arg: &Bound<'_, PyAny>) -> PyResult<i64> {
    let (major, minor) = two(arg)?;
    if !minor.is_instance_of::<PyInt>() && minor.extract::<i64>().is_err() {
        return Err(not_two_integers());
    }
    major.extract().map_err(|_| not_two_integers())
}

/// The two items of a tuple of length two.
fn two<'a, 'py>(
    arg: &'a Bound<'py, PyAny>,
) -> PyResult<(Borrowed<'a, 'py, PyAny>, Borrowed<'a, 'py, PyAny>)> {
    let mut items = arg
        .cast::<PyTuple>()
        .ok()
        .filter(|t| t.len() == 2)
        .map(|t| t.iter_borrowed())
        .into_iter()
        .flatten();
    match (items.next(), items.next()) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(PyTypeError::new_err(format!(
            "expected None or a tuple of two integers, got {}",
            type_name(arg)
        ))),
    }
}

fn not_two_integers() -> PyErr {
    PyTypeError::new_err("expected None or a tuple of two integers")
}

// ---------------------------------------------------------------------------------------
// `Tensor.__dlpack__`, called the way CPython calls its own methods.
// ---------------------------------------------------------------------------------------

/// The docstring of `Tensor.__dlpack__`, led by the text signature that `inspect` reads.
#[cfg(any(Py_3_10, not(Py_LIMITED_API)))]
const DLPACK_DOC: &CStr =
    c"__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)
--

Exports the tensor as a DLPack capsule (Python array API `__dlpack__`).";

/// The keyword arguments of `__dlpack__`, in [`DlpackArgs`] order.
#[cfg(any(Py_3_10, not(Py_LIMITED_API)))]
const KEYWORDS: [&str; 4] = ["stream", "max_version", "dl_device", "copy"];

/// A method descriptor of `Tensor` (what CPython makes for the methods of its own
/// types) calling [`dlpack_fastcall`].
///
/// `__dlpack__` runs once per exchange, and PyO3's generic argument parsing would cost
/// about as much as the rest of an export: this method reads its four keywords itself.
#[cfg(any(Py_3_10, not(Py_LIMITED_API)))]
fn method_descriptor(py: Python<'_>) -> PyResult<Py<PyAny>> {
    // Made while the type is made (once per process; twice at worst, if two threads
    // race to make the type): it lives as long as the type, so it is never freed.
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
/// `kwnames`, all in `args`.
///
/// # Safety
///
/// - called by CPython through the method descriptor of [`method_descriptor`]: the
///   thread is attached, `slf` is a live `Tensor` (the descriptor checks its type),
///   `args` holds `nargs + len(kwnames)` live objects, and `kwnames` is NULL or a tuple
///   of strings, all borrowed for the call.
#[cfg(any(Py_3_10, not(Py_LIMITED_API)))]
unsafe extern "C" fn dlpack_fastcall(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls methods on an attached thread.
    let py = unsafe { Python::assume_attached() };
    let outcome = std::panic::catch_unwind(|| {
        // SAFETY: `slf` is a live object borrowed for the call.
        let slf = unsafe { Borrowed::from_ptr(py, slf) };
        // SAFETY: `slf` is a `Tensor`: the method descriptor checked its type before
        // calling.
        let slf = unsafe { slf.cast_unchecked::<Tensor>() };
        // SAFETY: `kwnames` is NULL or a live object borrowed for the call.
        let kwnames = unsafe { Borrowed::from_ptr_or_opt(py, kwnames) };
        let names = match kwnames {
            Some(names) => names.cast::<PyTuple>()?.len(),
            None => 0,
        };
        let count = usize::try_from(nargs).unwrap_or(0) + names;
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
        let request = DlpackArgs::parse(py, nargs, kwnames, args)?.request()?;
        export(py, &slf.get().tensor, request)
    });
    let err = match outcome {
        Ok(Ok(capsule)) => return capsule.into_ptr(),
        Ok(Err(err)) => err,
        Err(payload) => pyo3::panic::PanicException::new_err(panic_message(&*payload)),
    };
    err.restore(py);
    ptr::null_mut()
}

/// The text of a panic's payload.
#[cfg(any(Py_3_10, not(Py_LIMITED_API)))]
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic in __dlpack__".to_owned())
}

/// The keyword arguments of one `__dlpack__` call, `None` where absent.
#[derive(Default)]
struct DlpackArgs<'a, 'py> {
    values: [Option<Borrowed<'a, 'py, PyAny>>; 4],
}

impl<'a, 'py> DlpackArgs<'a, 'py> {
    /// Sorts the arguments of a vectorcall by keyword: positional arguments and unknown
    /// or repeated keywords are a `TypeError`, as for any Python function.
    #[cfg(any(Py_3_10, not(Py_LIMITED_API)))]
    fn parse(
        py: Python<'py>,
        nargs: ffi::Py_ssize_t,
        kwnames: Option<Borrowed<'a, 'py, PyAny>>,
        mut args: impl Iterator<Item = Borrowed<'a, 'py, PyAny>>,
    ) -> PyResult<Self> {
        if nargs != 0 {
            return Err(PyTypeError::new_err(format!(
                "Tensor.__dlpack__() takes no positional arguments ({nargs} given)"
            )));
        }
        let mut parsed = Self::default();
        let Some(kwnames) = kwnames else {
            return Ok(parsed);
        };
        // Keyword names are nearly always interned, as these are: a pointer comparison
        // finds them.
        static INTERNED: PyOnceLock<[Py<PyString>; 4]> = PyOnceLock::new();
        let interned =
            INTERNED.get_or_init(py, || KEYWORDS.map(|k| PyString::intern(py, k).unbind()));
        for name in kwnames.cast::<PyTuple>()?.iter_borrowed() {
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
            let value = args.next().ok_or_else(|| {
                PyTypeError::new_err("Tensor.__dlpack__(): missing keyword value")
            })?;
            if parsed.values[slot].replace(value).is_some() {
                return Err(PyTypeError::new_err(format!(
                    "Tensor.__dlpack__() got multiple values for argument '{}'",
                    KEYWORDS[slot]
                )));
            }
        }
        Ok(parsed)
    }

    /// Reads the request from the arguments: `stream` may be anything, `max_version`
    /// and `dl_device` `None` or a tuple of two integers, `copy` `None` or a `bool`.
    fn request(&self) -> PyResult<Request> {
        let given = |slot: usize| self.values[slot].filter(|v| !v.is_none());
        let [stream, max_version, dl_device, copy] = [0, 1, 2, 3].map(given);
        let major: Option<i64> = max_version.map(|v| major_version(&v)).transpose()?;
        let dl_device: Option<(i32, i32)> = dl_device.map(|v| pair(&v)).transpose()?;
        let copy = copy
            .map(|v| {
                v.extract::<bool>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "copy must be None or a bool, got {}",
                        type_name(&v)
                    ))
                })
            })
            .transpose()?;
        Ok(Request {
            stream: stream.is_some(),
            legacy: major.is_none_or(|major| major < 1),
            dl_device: dl_device.map(|(ty, id)| Device::new(DLDeviceType(ty), id)),
            copy,
        })
    }
}

/// What a `__dlpack__` caller asked for.
#[derive(Clone, Copy, Debug)]
struct Request {
    stream: bool,
    legacy: bool,
    dl_device: Option<Device>,
    copy: Option<bool>,
}

/// Answers one `__dlpack__` call: a fresh header over `shared` (or over a copy), in a
/// capsule.
fn export<'py>(
    py: Python<'py>,
    shared: &Arc<ManagedTensor>,
    request: Request,
) -> PyResult<Bound<'py, PyAny>> {
    let tensor = &**shared;
    let own = tensor.device();
    if request.stream && own.device_type == DLDeviceType::kDLCPU {
        return Err(PyValueError::new_err(
            "only stream=None is supported for a CPU tensor",
        ));
    }
    // Where the consumer wants the data, as the header will say.
    let device = match request.dl_device {
        None => own,
        Some(wanted) if wanted == own => own,
        Some(wanted) if wanted == Device::CPU && own.is_cpu_accessible() => Device::CPU,
        Some(wanted) => {
            return Err(buffer_error(format!(
                "unsupported device requested: cannot export a tensor on {own} to {wanted}"
            )));
        }
    };
    let needs_copy = request.legacy && tensor.is_read_only();
    let copy = match request.copy {
        Some(true) => true,
        Some(false) if needs_copy => {
            return Err(buffer_error(
                "a read-only tensor can only be exported as a legacy (unversioned) DLPack \
                 capsule by copying, and copy=False forbids that; ask for max_version=(1, 0)",
            ));
        }
        Some(false) => false,
        None => needs_copy,
    };
    let (owner, device, flags) = if copy {
        if !own.is_cpu_accessible() {
            return Err(buffer_error(format!(
                "cannot copy a tensor on {own}: only CPU-accessible memory can be copied"
            )));
        }
        // A copy lives in ordinary host memory: it can be sent to `None` (the consumer
        // follows the data) or to the CPU, not to another kind of device.
        if let Some(wanted) = request.dl_device.filter(|&d| d != Device::CPU) {
            return Err(buffer_error(format!(
                "unsupported device requested: a copy is made on cpu:0, not {wanted}"
            )));
        }
        let copied = Arc::new(copy_tensor(tensor)?);
        (copied, Device::CPU, DLPACK_FLAG_BITMASK_IS_COPIED)
    } else {
        let flags = tensor.flags() & !DLPACK_FLAG_BITMASK_IS_COPIED;
        (Arc::clone(shared), device, flags)
    };
    // A legacy header cannot say "read-only": the rules above copy or refuse first.
    if request.legacy && flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0 {
        return Err(Error::ReadOnlyLegacy.into());
    }
    let header = if request.legacy {
        header::<DLManagedTensor>(owner, device, flags)
    } else {
        header::<DLManagedTensorVersioned>(owner, device, flags)
    };
    into_capsule(py, header?)
}

/// A new header of ABI `M` describing the data of `owner` on `device`, which it keeps
/// alive.
fn header<M: Abi>(
    owner: Arc<ManagedTensor>,
    device: Device,
    flags: u64,
) -> PyResult<ManagedTensor> {
    // Fold `byte_offset` into the pointer where addresses are plain byte addresses:
    // older PyTorch ignores `byte_offset` on import.
    let flat = device.is_cpu_accessible()
        || matches!(
            device.device_type,
            DLDeviceType::kDLCUDA | DLDeviceType::kDLROCM
        );
    let ndim = owner.ndim();
    let describe = move |owner: &mut Arc<ManagedTensor>, shape: &mut [i64], strides: &mut [i64]| {
        let source = &**owner;
        shape.copy_from_slice(source.shape());
        match source.strides() {
            Some(given) => strides.copy_from_slice(given),
            None => layout::c_strides(shape, strides),
        }
        Ok(Desc {
            data: if flat {
                source.data_ptr()
            } else {
                source.data()
            },
            dtype: source.dtype(),
            device,
            byte_offset: if flat { 0 } else { source.byte_offset() },
            flags,
        })
    };
    // SAFETY:
    // - the shape, strides, dtype and data pointer are the source's own, read from the
    //   owner `Arc` at its final address (plus its `byte_offset` when folded, which is
    //   where its first element lies); the `Arc` keeps the source alive, so its
    //   producer keeps that memory valid until the last `Arc` is dropped, by this
    //   header's deleter or elsewhere; `device` is the source's own, or the CPU when
    //   the CPU can access it;
    // - writes: `flags` keeps the source's `READ_ONLY` bit, and `export` asks for a
    //   legacy header (which cannot carry flags) only over writable or freshly copied
    //   data. Other holders of the same `Arc` may write the same memory, as other
    //   holders of a NumPy array may: a Python consumer is never promised exclusive
    //   access (see "Import safety" in the crate documentation).
    Ok(unsafe { build::<M, Arc<ManagedTensor>>(owner, ndim, describe) }?)
}

/// Moves a header into a new capsule whose destructor frees it unless it was consumed.
fn into_capsule(py: Python<'_>, tensor: ManagedTensor) -> PyResult<Bound<'_, PyAny>> {
    // `export` makes legacy headers only over writable or freshly copied data (checked
    // there).
    match tensor.into_raw_as_is() {
        Raw::Versioned(ptr) => capsule(py, ptr, VERSIONED, destroy_versioned),
        Raw::Legacy(ptr) => capsule(py, ptr, LEGACY, destroy_legacy),
    }
}

/// A capsule named `name` owning the managed tensor at `pointer`; its context is the
/// same pointer, so that the destructor frees only the tensor it was made with.
fn capsule<'py, M: Abi>(
    py: Python<'py>,
    pointer: NonNull<M>,
    name: &'static CStr,
    destructor: unsafe extern "C" fn(*mut ffi::PyObject),
) -> PyResult<Bound<'py, PyAny>> {
    let tensor = pointer;
    let pointer = pointer.as_ptr().cast::<c_void>();
    // SAFETY:
    // - `pointer` is a non-null managed tensor of the kind `name` announces, whose
    //   ownership the capsule takes: `destructor` frees it unless a consumer renamed the
    //   capsule (and so took ownership);
    // - `name` is a `'static` C string, as capsules require (they keep the pointer);
    // - `destructor` may run on any thread holding the GIL; the thread is attached now.
    let capsule = unsafe { ffi::PyCapsule_New(pointer, name.as_ptr(), Some(destructor)) };
    // SAFETY: `capsule` is a new reference, or NULL with an exception set; attached.
    let capsule = match unsafe { Bound::from_owned_ptr_or_err(py, capsule) } {
        Ok(capsule) => capsule,
        Err(err) => {
            // SAFETY: the capsule was not made, so we still own the header: freed once.
            unsafe { delete(tensor) };
            return Err(err);
        }
    };
    // SAFETY: `capsule` is a live capsule; the context is an opaque pointer it keeps.
    if unsafe { ffi::PyCapsule_SetContext(capsule.as_ptr(), pointer) } != 0 {
        // Not possible for a valid capsule; its destructor then leaks the tensor.
        return Err(PyErr::fetch(py));
    }
    Ok(capsule)
}

/// The destructor of the legacy capsules made here.
///
/// # Safety
///
/// - `capsule` is a live capsule object made by [`into_capsule`], and the thread holds
///   the GIL (Python calls capsule destructors that way).
unsafe extern "C" fn destroy_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: the caller passes a live capsule made with these names, holding the GIL.
    unsafe { destroy::<DLManagedTensor>(capsule, LEGACY, USED_LEGACY) }
}

/// The destructor of the versioned capsules made here.
///
/// # Safety
///
/// - as for [`destroy_legacy`].
unsafe extern "C" fn destroy_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: the caller passes a live capsule made with these names, holding the GIL.
    unsafe { destroy::<DLManagedTensorVersioned>(capsule, VERSIONED, USED_VERSIONED) }
}

/// The DLPack Python specification's capsule destructor: releases the tensor unless the
/// capsule was consumed. It never panics, keeps any exception in flight, and never hands
/// the dying capsule to an API that could take a reference to it (which would run this
/// destructor again on a freed object).
///
/// A capsule renamed to anything but its two DLPack names, or whose pointer no longer
/// matches the tensor it was made with, has been tampered with: its tensor is leaked
/// rather than freed on a guess, and the problem reported as an unraisable exception.
///
/// # Safety
///
/// - `capsule` is a live capsule made by [`capsule`] with the name `name`, being
///   destroyed; while it is named `name` and its pointer is its context, the pointer is
///   an unconsumed `M` that the capsule owns;
/// - the thread holds the GIL.
unsafe fn destroy<M: Abi>(capsule: *mut ffi::PyObject, name: &CStr, used: &CStr) {
    // SAFETY: `capsule` is a live object and `used` a C string; the GIL is held.
    if unsafe { ffi::PyCapsule_IsValid(capsule, used.as_ptr()) } == 1 {
        // Consumed: the consumer owns the tensor and calls the deleter.
        return;
    }
    // SAFETY: CPython destroys capsules on an attached thread.
    let py = unsafe { Python::assume_attached() };
    with_exception_saved(py, || {
        // SAFETY: `capsule` is a live object and `name` a C string; the GIL is held.
        if unsafe { ffi::PyCapsule_IsValid(capsule, name.as_ptr()) } != 1 {
            // SAFETY: as above; the name stays valid while the capsule lives.
            let found = unsafe { ffi::PyCapsule_GetName(capsule) };
            let found = if found.is_null() {
                "NULL".to_owned()
            } else {
                // SAFETY: a capsule's name is a NUL-terminated string it keeps alive.
                format!("{:?}", unsafe { CStr::from_ptr(found) })
            };
            report_unraisable(
                py,
                format!(
                    "a DLPack capsule was destroyed unconsumed under the name {found}: \
                     its tensor is leaked, since the renaming consumer may own it"
                ),
            );
            return;
        }
        // SAFETY: a valid capsule named `name` (checked above); the GIL is held.
        let pointer = unsafe { ffi::PyCapsule_GetPointer(capsule, name.as_ptr()) };
        // SAFETY: as above; a NULL context is returned without an exception.
        let context = unsafe { ffi::PyCapsule_GetContext(capsule) };
        match NonNull::new(pointer.cast::<M>()) {
            Some(tensor) if pointer == context => {
                // SAFETY:
                // - under its unconsumed name, with the pointer it was made with, the
                //   capsule owns this tensor;
                // - nobody else calls its deleter: consumers rename the capsule first.
                unsafe { delete(tensor) }
            }
            _ => report_unraisable(
                py,
                "a DLPack capsule's pointer was replaced: the tensor it was made with is \
                 leaked, and the new pointer is left alone"
                    .to_owned(),
            ),
        }
    });
}

/// Runs `f`, which releases a tensor whose deleter may run Python code, keeping the
/// thread's exception state as it was: an exception in flight (capsules die during
/// unwinding too) stays in flight, and one that `f` leaves set (a foreign deleter
/// should not, but may) is reported as unraisable instead of surfacing in unrelated
/// code.
///
/// It uses the C API rather than `PyErr::take`, which resumes a Rust panic when it
/// takes a `PanicException`: a destructor cannot unwind.
fn with_exception_saved(py: Python<'_>, f: impl FnOnce()) {
    let _ = py;
    // SAFETY: the thread is attached (`py`).
    let saved = unsafe { SavedException::take() };
    f();
    // SAFETY: the thread is attached.
    if !unsafe { ffi::PyErr_Occurred() }.is_null() {
        // SAFETY: an exception is set, and the thread is attached; no object is given.
        unsafe { ffi::PyErr_WriteUnraisable(ptr::null_mut()) };
    }
    // SAFETY: the thread is attached, and no exception is set now.
    unsafe { saved.restore() };
}

/// Releases a tensor imported from Python (see [`with_exception_saved`]): attached to
/// the interpreter if it still runs, since the deleter may take the GIL anyway.
pub(crate) fn release_python_tensor(release: impl FnOnce()) {
    let mut release = Some(release);
    Python::try_attach(|py| {
        if let Some(release) = release.take() {
            with_exception_saved(py, release);
        }
    });
    // The interpreter is gone (or finalizing): the deleter runs as it is.
    if let Some(release) = release {
        release();
    }
}

/// Reports `message` as an unraisable `RuntimeError` (printed by `sys.unraisablehook`).
fn report_unraisable(py: Python<'_>, message: String) {
    pyo3::exceptions::PyRuntimeError::new_err(message).write_unraisable(py, None);
}

/// The exception state of the thread, taken out of it.
struct SavedException {
    #[cfg(Py_3_12)]
    exception: *mut ffi::PyObject,
    #[cfg(not(Py_3_12))]
    parts: [*mut ffi::PyObject; 3],
}

impl SavedException {
    /// Takes the exception in flight, if any, leaving none set.
    ///
    /// # Safety
    ///
    /// - the thread is attached.
    unsafe fn take() -> Self {
        #[cfg(Py_3_12)]
        {
            Self {
                // SAFETY: the thread is attached; a new reference or NULL.
                exception: unsafe { ffi::PyErr_GetRaisedException() },
            }
        }
        #[cfg(not(Py_3_12))]
        {
            let mut parts = [ptr::null_mut(); 3];
            let [ty, value, traceback] = &mut parts;
            // SAFETY: three writable out-pointers; the thread is attached.
            unsafe { ffi::PyErr_Fetch(ty, value, traceback) };
            Self { parts }
        }
    }

    /// Sets the saved exception again (nothing if there was none).
    ///
    /// # Safety
    ///
    /// - the thread is attached and no exception is set.
    unsafe fn restore(self) {
        #[cfg(Py_3_12)]
        // SAFETY: takes back the reference `take` returned (NULL sets nothing).
        unsafe {
            ffi::PyErr_SetRaisedException(self.exception)
        };
        #[cfg(not(Py_3_12))]
        {
            let [ty, value, traceback] = self.parts;
            // SAFETY: takes back the references `PyErr_Fetch` returned.
            #[allow(deprecated)]
            unsafe {
                ffi::PyErr_Restore(ty, value, traceback)
            };
        }
    }
}

/// A copy of a CPU-accessible tensor into a fresh C-order buffer (a versioned tensor,
/// writable, on the CPU).
fn copy_tensor(tensor: &ManagedTensor) -> PyResult<ManagedTensor> {
    fn copy<A: Element>(tensor: &ManagedTensor) -> PyResult<ManagedTensor> {
        let view = tensor.as_array::<A, IxDyn>()?;
        Ok(crate::ndarray::copy_standard(view)?.to_dlpack()?)
    }
    let dtype = tensor.dtype();
    macro_rules! dispatch {
        ($($ty:ty),* $(,)?) => {$(
            if dtype == <$ty as Element>::DTYPE {
                return copy::<$ty>(tensor);
            }
        )*};
    }
    dispatch!(bool, i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);
    #[cfg(feature = "half")]
    dispatch!(half::f16, half::bf16);
    #[cfg(feature = "complex")]
    dispatch!(num_complex::Complex<f32>, num_complex::Complex<f64>);
    Err(unsupported_dtype(dtype))
}

fn unsupported_dtype(dtype: DataType) -> PyErr {
    buffer_error(format!("unsupported dtype {dtype}: cannot copy it"))
}

// ---------------------------------------------------------------------------------------
// Import.
// ---------------------------------------------------------------------------------------

/// Imports any object with `__dlpack__` (NumPy, PyTorch, JAX, CuPy, a [`Tensor`], ...)
/// or a raw DLPack capsule, without copying.
///
/// Calls `obj.__dlpack__(max_version=(1, 3))`, and `obj.__dlpack__()` if that raises
/// `TypeError` (producers that predate DLPack 1.0); accepts either capsule kind in
/// return, whatever was asked. The tensor is not validated beyond its header: views
/// (`as_array`) check dtype, device and layout. Errors: `TypeError` for an object that
/// is neither a capsule nor has `__dlpack__`, or a capsule of another kind;
/// `BufferError` for a versioned capsule of an unsupported major version; `ValueError`
/// for a capsule that was already consumed; whatever the producer raised.
///
/// The same as `obj.extract::<ManagedTensor>()`. The tensor is shared (no mutable
/// views): the producer keeps its own handle to the memory. See "Soundness of imports"
/// in the [module documentation](self).
pub fn from_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<ManagedTensor> {
    from_dlpack_with(obj, None)
}

/// [`from_dlpack`], passing `copy` to the producer's `__dlpack__`: `Some(true)` asks
/// for a copy (the result is then the caller's alone: an exclusive tensor, which gives
/// mutable views), `Some(false)` forbids one.
///
/// With `copy` given there is no retry without keywords: a producer that does not
/// understand `copy` raises its `TypeError`. A raw capsule is taken as it is.
pub fn from_dlpack_with(obj: &Bound<'_, PyAny>, copy: Option<bool>) -> PyResult<ManagedTensor> {
    let py = obj.py();
    if let Ok(capsule) = obj.cast::<PyCapsule>() {
        return consume(capsule);
    }
    let method = match obj.getattr(intern!(py, "__dlpack__")) {
        Ok(method) => method,
        Err(err) if err.is_instance_of::<PyAttributeError>(py) => {
            return Err(PyTypeError::new_err(format!(
                "expected an object with __dlpack__ or a DLPack capsule, got {}",
                type_name(obj)
            )));
        }
        Err(err) => return Err(err),
    };
    // The version this crate speaks, as a tuple made once (tuples are immutable).
    static MAX_VERSION: PyOnceLock<Py<PyTuple>> = PyOnceLock::new();
    let max_version = MAX_VERSION.get_or_try_init(py, || {
        PyTuple::new(py, [DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION]).map(Bound::unbind)
    })?;
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "max_version"), max_version)?;
    if let Some(copy) = copy {
        kwargs.set_item(intern!(py, "copy"), copy)?;
    }
    let capsule = match method.call((), Some(&kwargs)) {
        Ok(capsule) => capsule,
        // A producer that predates DLPack 1.0 does not know `max_version`.
        Err(err) if copy.is_none() && err.is_instance_of::<PyTypeError>(py) => method.call0()?,
        Err(err) => return Err(err),
    };
    let capsule = capsule.cast::<PyCapsule>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{}.__dlpack__ returned {}, not a capsule",
            type_name(obj),
            type_name(&capsule)
        ))
    })?;
    let mut tensor = consume(capsule)?;
    if copy == Some(true) {
        // SAFETY: asked for `copy=True`, the producer must copy (the array API
        // standard), so nothing else reaches the data; PyTorch does not flag the copy
        // `IS_COPIED`, so the request is what proves it.
        unsafe { tensor.assume_exclusive() };
    }
    Ok(tensor)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "an object".to_owned(), |n| n.to_string())
}

/// Takes ownership of the tensor in a DLPack capsule, renaming it `used_*`.
///
/// The tensor is shared (see "Import safety" in the crate documentation) unless its
/// producer flagged it `IS_COPIED`; its deleter runs with the interpreter's exception
/// state kept intact, whoever drops it.
fn consume(capsule: &Bound<'_, PyCapsule>) -> PyResult<ManagedTensor> {
    // One consumer at a time, with or without a GIL (free-threaded Python): the name is
    // checked and changed under the capsule's lock, and no Python code runs meanwhile.
    let raw =
        pyo3::sync::critical_section::with_critical_section(capsule.as_any(), || take(capsule))?;
    // SAFETY:
    // - the capsule held the tensor and is now renamed, so its destructor will not call
    //   the deleter: ownership passed to us, and the handle calls the deleter once, on
    //   a failed check below or when it drops;
    // - the DLPack protocol makes the producer promise what `from_raw` requires (valid
    //   header, shape, strides and data, a deleter callable from any thread), except
    //   that nobody else uses the data: the handle is marked shared before any view
    //   can be made, unless the producer copied the data for this consumer alone.
    let tensor = unsafe { ManagedTensor::adopt(raw) }.into_python().check()?;
    Ok(if tensor.is_copied() {
        tensor
    } else {
        tensor.into_shared()
    })
}

/// Checks that `capsule` holds an unconsumed DLPack tensor of major version 1 and
/// renames it `used_*`: from then on its destructor leaves the tensor to the caller.
fn take(capsule: &Bound<'_, PyCapsule>) -> PyResult<Raw> {
    if capsule.is_valid_checked(Some(VERSIONED)) {
        let pointer = capsule
            .pointer_checked(Some(VERSIONED))?
            .cast::<DLManagedTensorVersioned>();
        check_aligned(pointer)?;
        // SAFETY:
        // - by the DLPack protocol a capsule named `dltensor_versioned` holds a readable
        //   `DLManagedTensorVersioned` (checked non-null and aligned above);
        // - `version` is in the prefix that every major version keeps stable.
        let version = unsafe { (*pointer.as_ptr()).version };
        if version.major != DLPACK_MAJOR_VERSION {
            // Leave the capsule unconsumed: its producer's destructor calls the deleter.
            return Err(Error::UnsupportedVersion {
                major: version.major,
                minor: version.minor,
            }
            .into());
        }
        rename(capsule, USED_VERSIONED)?;
        return Ok(Raw::Versioned(pointer));
    }
    if capsule.is_valid_checked(Some(LEGACY)) {
        let pointer = capsule
            .pointer_checked(Some(LEGACY))?
            .cast::<DLManagedTensor>();
        check_aligned(pointer)?;
        rename(capsule, USED_LEGACY)?;
        return Ok(Raw::Legacy(pointer));
    }
    if capsule.is_valid_checked(Some(USED_VERSIONED)) || capsule.is_valid_checked(Some(USED_LEGACY))
    {
        return Err(PyValueError::new_err(
            "the DLPack capsule was already consumed: a capsule can be imported only once",
        ));
    }
    let name = match capsule.name()? {
        // SAFETY: the name is read at once, before any Python code could rename the
        // capsule or free the string.
        Some(name) => format!("{:?}", unsafe { name.as_cstr() }),
        None => "NULL".to_owned(),
    };
    Err(PyTypeError::new_err(format!(
        "expected a DLPack capsule named \"dltensor_versioned\" or \"dltensor\", \
         got a capsule named {name}"
    )))
}

fn check_aligned<T>(pointer: NonNull<T>) -> PyResult<()> {
    if pointer.is_aligned() {
        return Ok(());
    }
    Err(Error::Misaligned {
        what: "managed tensor",
        address: pointer.as_ptr() as usize,
        align: align_of::<T>(),
    }
    .into())
}

fn rename(capsule: &Bound<'_, PyCapsule>, name: &'static CStr) -> PyResult<()> {
    // SAFETY:
    // - `capsule` is a live capsule and the thread is attached;
    // - `name` is `'static`: the capsule keeps the pointer.
    if unsafe { ffi::PyCapsule_SetName(capsule.as_ptr(), name.as_ptr()) } != 0 {
        return Err(PyErr::fetch(capsule.py()));
    }
    Ok(())
}

impl<'a, 'py> FromPyObject<'a, 'py> for ManagedTensor {
    type Error = PyErr;

    /// Imports any object with `__dlpack__`, or a raw DLPack capsule: see
    /// [`from_dlpack`].
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        from_dlpack(&obj)
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for TensorBatch {
    type Error = PyErr;

    /// Imports every value of a mapping (a `dict`, a PyTorch `state_dict`, ...) with
    /// [`from_dlpack`], named by its key, in the mapping's order. Keys must be strings.
    /// On error, the tensors imported so far are released and the exception gets a note
    /// naming the tensor.
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        let items = match obj.call_method0(intern!(py, "items")) {
            Ok(items) => items,
            Err(err) if err.is_instance_of::<PyAttributeError>(py) => {
                return Err(PyTypeError::new_err(format!(
                    "expected a mapping of names to DLPack tensors, got {}",
                    type_name(&obj)
                )));
            }
            Err(err) => return Err(err),
        };
        let mut batch = TensorBatch::new();
        for item in items.try_iter()? {
            let (name, value): (String, Bound<'py, PyAny>) = item?.extract()?;
            let tensor = from_dlpack(&value).inspect_err(|err| {
                // Best effort: exceptions have no notes before Python 3.11.
                let note = format!("while importing tensor `{name}`");
                let _ = err.value(py).call_method1(intern!(py, "add_note"), (note,));
            })?;
            batch.insert(name, tensor)?;
        }
        Ok(batch)
    }
}
