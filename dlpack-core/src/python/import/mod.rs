//! Imports: any object with `__dlpack__`, or a raw DLPack capsule, into a
//! [`ManagedTensor`]; any mapping of them into a [`TensorBatch`].

#[cfg(feature = "arrow")]
mod arrow;
mod c_api;
mod numpy;
mod torch;

use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyCapsule, PyString, PyTuple};

use crate::batch::TensorBatch;
#[cfg(feature = "ndarray")]
use crate::bridge::ndarray::DLPackArray;
use crate::device::Device;
#[cfg(feature = "ndarray")]
use crate::dtype::Element;
#[cfg(feature = "ndarray")]
use crate::error::Error;
use crate::ffi::{DLDeviceType, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
use crate::tensor::ManagedTensor;

#[cfg(doc)]
use super::Tensor;
use super::capsule::consume;
use super::error::{buffer_error, type_name};
#[cfg(feature = "ndarray")]
use super::error::{conversion_hint, py_tuple, python_message};
use c_api::Imported;

/// Imports any object with `__dlpack__` (NumPy, PyTorch, JAX, CuPy, a [`Tensor`], ...)
/// or a raw DLPack capsule, without copying.
///
/// When the object's type publishes the DLPack C exchange API
/// (`type(obj).__dlpack_c_exchange_api__`: PyTorch 2.10 and later, a [`Tensor`]), the
/// tensor comes from one C call, with no Python call at all (see
/// [below](#the-dlpack-c-exchange-api)). A NumPy array that NumPy's `__dlpack__` would
/// export as it is, is read in place, with no call (see [below](#numpy-arrays)).
/// Otherwise this calls `obj.__dlpack__(max_version=(1, 3))`, and `obj.__dlpack__()`
/// if that raises `TypeError` (producers that predate DLPack 1.0); either capsule kind
/// is accepted in return, whatever was asked. The tensor is not validated beyond its
/// header: views (`as_array`) check dtype, device and layout. Errors: `TypeError` for
/// an object that is neither a capsule nor has `__dlpack__`, or a capsule of another
/// kind; `BufferError` for a versioned capsule of an unsupported major version (left
/// unconsumed, so that its producer frees it); `ValueError` for a capsule that was
/// already consumed; whatever the producer raised.
///
/// The same as `obj.extract::<ManagedTensor>()`. The tensor is shared (no mutable
/// views): the producer keeps its own handle to the memory (see
/// [below](#soundness)).
///
/// # Soundness
///
/// Imports follow the crate's one rule (see the
/// [import safety guide](crate::guide::import_safety)), the same on every path (a capsule, a
/// producer's C exchange table, a NumPy array read in place, our table's "to object"
/// entry): a tensor imported from Python is *shared*, since the producer keeps its own
/// handle (the NumPy array, the torch tensor, a [`Tensor`] exported twice), so it gives
/// read-only views only and `as_array_mut` is an [`Error::NotExclusive`]. It is
/// exclusive only when its producer flagged it `IS_COPIED` (a copy made for this
/// consumer alone: NumPy's and this crate's `copy=True`) or when it comes from our own
/// table's allocator. Asking for `copy=True` proves nothing by itself (PyTorch copies
/// without the flag, and a wrapper, or Python code that replaced a method, may ignore
/// the keyword), so such an import stays shared unless flagged. Like every DLPack
/// consumer, an import trusts the protocol: a capsule named `dltensor_versioned` or
/// `dltensor` (or a table's entry) must hold a valid managed tensor whose memory stays
/// valid until its deleter runs; the header is checked, and views check layout, dtype
/// and device.
///
/// Capsules are consumed under the capsule's lock (a critical section), so one capsule
/// imported by this crate from several threads at once goes to exactly one of them. On
/// a build with a GIL that excludes every other consumer too; on a free-threaded build
/// it excludes only consumers that take the same lock (not, say, PyTorch's own
/// `from_dlpack`): do not hand one capsule to two consumers at once.
///
/// # Dropping an import
///
/// A foreign deleter may run Python code: dropping a tensor imported from Python on a
/// thread attached to the interpreter keeps the interpreter's exception state as it
/// was, and an exception that a deleter leaves set is reported as unraisable. On a
/// thread that is not attached, the deleter runs as it is and takes the GIL itself if
/// it needs Python, as NumPy's and PyTorch's do. Our own headers' deleters never touch
/// Python. Under the stable ABI, where whether a thread is attached can be read only
/// on Unix, dropping elsewhere attaches to the interpreter, so a thread that drops a
/// foreign import while another holds the GIL and waits for it blocks (as it would in
/// NumPy's own deleter).
///
/// # NumPy arrays
///
/// NumPy has no C exchange table, so its `__dlpack__` would cost a Python call, a
/// capsule and a header allocated and freed under the GIL per import. Instead, an
/// import of a `numpy.ndarray` reads the array's own C struct, as NumPy's C API defines
/// it (the fields NumPy 1.x and 2.x share), found at run time through NumPy's own API
/// capsule in `sys.modules`: nothing is linked, NumPy is never imported by this crate,
/// and without NumPy nothing changes. The tensor is one header of ours holding a strong
/// reference to the array, released on any thread.
///
/// It is exactly what `__dlpack__` would give: an array is read in place only when
/// NumPy's `__dlpack__` would export it as it is (booleans, integers, `float16/32/64`,
/// `complex64/128` in native byte order; strides in whole elements, divided as NumPy
/// divides them; not an array NumPy made from a DLPack tensor, whose device NumPy
/// reports); `READ_ONLY` when the array is not writeable. The header is versioned
/// (DLPack 1.3) and always carries strides, as DLPack 1.2 asks: on NumPy 1.x, whose
/// `__dlpack__` answers with a legacy header without strides for contiguous arrays and
/// refuses read-only arrays, the import describes the same elements at the same
/// addresses, and reads read-only arrays, flagged. Anything else (object, string,
/// structured, datetime, `longdouble`, byte-swapped data, strides that are not whole
/// elements, ...) goes through `__dlpack__`, so NumPy decides and its own errors are
/// raised. An array of a user type (`ml_dtypes.bfloat16` and the float8 types, which
/// NumPy 2.5 exports once registered) is read in place as the DLPack type NumPy's own
/// `__dlpack__` gave an earlier array of that type number, exactly, and goes through
/// `__dlpack__` until then ([bfloat16 and float8 in NumPy](crate::python#bfloat16-and-float8-in-numpy-ml_dtypes)).
/// A subclass is read in place only while `obj.__dlpack__` is NumPy's own
/// method bound to `obj` (`np.matrix`, `np.memmap`, a subclass that does not override
/// it); a `__dlpack__` of its own, an instance attribute or a `__getattribute__` that
/// answers otherwise is called. NumPy's ABI version is checked once (1.x from 1.25, or
/// 2.x); any other NumPy, PyPy and free-threaded builds use `__dlpack__`. Options
/// ([`from_dlpack_with`]) always go through `__dlpack__`.
///
/// # The DLPack C exchange API
///
/// A producer's table (a capsule named `"dlpack_exchange_api"`) is looked up once per
/// type, and the tensor taken with one call of its owning entry,
/// `managed_tensor_from_py_object_no_sync`. The table counts only where the standard
/// ties it to the type: in the own `__dict__` of a type of `type(obj).__mro__` (no
/// metaclass `__getattr__` or property runs). An error of that look-up (a
/// `KeyboardInterrupt`, a `MemoryError`) is raised, not cached. A type without a usable
/// table (none, another object, another name, another major version, a NULL entry) is
/// imported by `__dlpack__`, as is a tensor anywhere but in ordinary host memory (the
/// table's calls never synchronise streams, and pinned or managed memory may still be
/// written by a device; `__dlpack__` synchronises), and a complex one (PyTorch's table
/// exports a conjugated view without resolving it, where its `__dlpack__` refuses it).
///
/// An entry that refuses the object (-1) leaves the answer to `__dlpack__`, so that a
/// failure is the protocol's own exception whatever the path (the entry's own
/// exception, or a `SystemError` if it set none, when the object has no `__dlpack__`;
/// a `KeyboardInterrupt` or another exception that is not an `Exception` is raised at
/// once). An entry that succeeds with an exception set, or with no tensor, is an
/// error. Every tensor an entry hands over, on success or not, is released exactly
/// once. [`from_dlpack_with`] with options always calls `__dlpack__`, whose keywords
/// carry them.
///
/// The borrowing entry (`dltensor_from_py_object_no_sync`) is never used: it describes
/// memory valid "until control returns to Python", which a safe Rust view cannot be
/// held to. The owned path costs one header, and is still faster than a `__dlpack__`
/// call.
pub fn from_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<ManagedTensor> {
    from_dlpack_with(obj, ImportOptions::new())
}

/// What [`from_dlpack_with`] asks a producer for: the `copy`, `dl_device` and `stream`
/// keywords of `__dlpack__`, as the Python array API standard defines them.
///
/// ```
/// use dlpack_core::Device;
/// use dlpack_core::python::ImportOptions;
///
/// // A copy in host memory, whatever device the data is on.
/// let to_host = ImportOptions::new().device(Device::CPU).copy(true);
/// assert_eq!(to_host.copy, Some(true));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportOptions {
    /// `Some(true)` asks for a copy; the tensor is exclusive (mutable views) when its
    /// producer flags the copy `IS_COPIED` (NumPy and this crate do; PyTorch does
    /// not), and shared otherwise: the request alone proves nothing, since a producer,
    /// a wrapper of one, or Python code that replaced a method may ignore it. To write
    /// a shared import, copy it on the Rust side (`Array::from_dlpack` makes an owned
    /// copy). `Some(false)` forbids a copy (the producer raises `BufferError` if it
    /// would need one); `None` lets the producer decide.
    pub copy: Option<bool>,
    /// The device the data must be on (`dl_device`): passed only when it is not where
    /// the data already is (which `__dlpack_device__` says), and checked on the
    /// result. `None`: wherever the data is.
    pub device: Option<Device>,
    /// The stream on which the caller will use a device tensor (`-1`: no
    /// synchronisation; CUDA `1`: the legacy default stream, ...); the producer makes
    /// the data ready on it. Not passed when the data is, or is copied, in host memory,
    /// where the standard allows no stream. `None`: the standard's default (the legacy
    /// default stream).
    pub stream: Option<i64>,
}

impl ImportOptions {
    /// No keywords: the producer's defaults, as [`from_dlpack`] asks.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            copy: None,
            device: None,
            stream: None,
        }
    }

    /// Asks for a copy (`true`) or forbids one (`false`).
    #[must_use]
    pub const fn copy(mut self, copy: bool) -> Self {
        self.copy = Some(copy);
        self
    }

    /// Asks for the data on `device`.
    #[must_use]
    pub const fn device(mut self, device: Device) -> Self {
        self.device = Some(device);
        self
    }

    /// Asks for the data to be ready on `stream`.
    #[must_use]
    pub const fn stream(mut self, stream: i64) -> Self {
        self.stream = Some(stream);
        self
    }
}

/// [`from_dlpack`], asking the producer for a copy, a device or a stream.
///
/// With any option given there is no retry without keywords (a producer that does not
/// understand them raises its `TypeError`) and no C exchange API (whose calls take no
/// options). `__dlpack_device__` is called when a device or a stream is given, as the
/// array API standard's `from_dlpack` does. A result on another device than the one
/// asked for is a `BufferError`. A raw capsule is taken as it is.
///
/// ```no_run
/// use dlpack_core::Device;
/// use dlpack_core::python::{ImportOptions, from_dlpack_with};
/// use pyo3::prelude::*;
///
/// /// A CPU copy of any tensor (a CUDA one included), the caller's alone when its
/// /// producer says so (see `ImportOptions::copy`).
/// fn host_copy(obj: &Bound<'_, PyAny>) -> PyResult<dlpack_core::ManagedTensor> {
///     from_dlpack_with(obj, ImportOptions::new().device(Device::CPU).copy(true))
/// }
/// ```
pub fn from_dlpack_with(obj: &Bound<'_, PyAny>, options: ImportOptions) -> PyResult<ManagedTensor> {
    let py = obj.py();
    if let Ok(capsule) = obj.cast::<PyCapsule>() {
        return consume(capsule);
    }
    let plain = options == ImportOptions::new();
    // The producer type's C functions, when it has them: no Python call at all. An
    // entry that refuses the object leaves the answer to `__dlpack__`, so that a
    // failure is the protocol's own exception whatever the path.
    let mut refused = None;
    if plain {
        // A NumPy array, once NumPy's C API is known: its struct, read in place.
        if let Some(tensor) = numpy::import_exact(obj)? {
            return Ok(tensor);
        }
        match c_api::import(obj)? {
            Imported::Tensor(tensor) => return Ok(tensor),
            Imported::NoTable => {
                // The first NumPy array seen, a subclass instance, or another type.
                if let Some(tensor) = numpy::import(obj)? {
                    return Ok(tensor);
                }
                // A column of an Arrow producer (pyarrow, Polars, ...), by its capsules.
                #[cfg(feature = "arrow")]
                if let Some(tensor) = arrow::import_column(obj)? {
                    return Ok(tensor);
                }
            }
            // A type with a C exchange table (a `Tensor`, PyTorch's) that declines a
            // device or complex tensor, which its `__dlpack__` then takes: never read
            // through Arrow's interface, even where it has one.
            Imported::Declined => {
                if let Some(tensor) = numpy::import(obj)? {
                    return Ok(tensor);
                }
            }
            Imported::Refused(err) => refused = Some(err),
        }
    }
    let capsule = match request(obj, options) {
        Ok(capsule) => capsule,
        // A producer that predates DLPack 1.0 does not know `max_version`.
        Err(err) if plain && err.is_instance_of::<PyTypeError>(py) => call_dlpack(obj, &[])?,
        Err(err) if err.is_instance_of::<PyAttributeError>(py) => {
            if obj.hasattr(intern!(py, "__dlpack__"))? {
                return Err(err);
            }
            if let Some(refused) = refused {
                return Err(refused);
            }
            return Err(PyTypeError::new_err(format!(
                "expected an object with __dlpack__ or a DLPack capsule, got {}",
                type_name(obj)
            )));
        }
        Err(err) => return Err(numpy::user_type_hint(obj, err)),
    };
    let capsule = capsule.cast::<PyCapsule>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{}.__dlpack__ returned {}, not a capsule",
            type_name(obj),
            type_name(&capsule)
        ))
    })?;
    let tensor = consume(capsule)?;
    // NumPy's own export of an array of a user type: its DLPack type, kept for the next
    // array of that type, which is then read in place.
    numpy::learn(obj, &tensor);
    if let Some(wanted) = options.device.filter(|&d| d != tensor.device()) {
        return Err(buffer_error(format!(
            "asked {}.__dlpack__ for a tensor on {wanted}, got one on {}",
            type_name(obj),
            tensor.device()
        )));
    }
    Ok(tensor)
}

/// `obj.__dlpack__(max_version=(1, 3), ...)` with the keywords `options` calls for.
fn request<'py>(obj: &Bound<'py, PyAny>, options: ImportOptions) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    // The version this crate speaks, as a tuple made once (tuples are immutable).
    static MAX_VERSION: PyOnceLock<Py<PyTuple>> = PyOnceLock::new();
    let max_version = MAX_VERSION
        .get_or_try_init(py, || {
            PyTuple::new(py, [DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION]).map(Bound::unbind)
        })?
        .bind(py)
        .clone()
        .into_any();
    let mut keywords = vec![(intern!(py, "max_version"), max_version)];
    if options.device.is_some() || options.stream.is_some() {
        let source = source_device(obj)?;
        let target = options.device.unwrap_or(source);
        if let Some(wanted) = options.device.filter(|&d| d != source) {
            let pair = (wanted.device_type.0, wanted.device_id);
            keywords.push((intern!(py, "dl_device"), pair.into_pyobject(py)?.into_any()));
        }
        let host = |d: Device| d.device_type == DLDeviceType::kDLCPU;
        if let Some(stream) = options.stream.filter(|_| !host(source) && !host(target)) {
            keywords.push((intern!(py, "stream"), stream.into_pyobject(py)?.into_any()));
        }
    }
    if let Some(copy) = options.copy {
        let copy = PyBool::new(py, copy).to_owned().into_any();
        keywords.push((intern!(py, "copy"), copy));
    }
    call_dlpack(obj, &keywords)
}

/// `obj.__dlpack_device__()` as a [`Device`].
fn source_device(obj: &Bound<'_, PyAny>) -> PyResult<Device> {
    let (device_type, device_id): (i32, i32) = obj
        .call_method0(intern!(obj.py(), "__dlpack_device__"))?
        .extract()?;
    Ok(Device::new(DLDeviceType(device_type), device_id))
}

/// `obj.__dlpack__(**keywords)`: a vectorcall with keyword names where the ABI has one
/// (no bound method, no `dict`), an ordinary call elsewhere.
fn call_dlpack<'py>(
    obj: &Bound<'py, PyAny>,
    keywords: &[(&Bound<'py, PyString>, Bound<'py, PyAny>)],
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let name = intern!(py, "__dlpack__");
    #[cfg(any(Py_3_12, not(any(Py_LIMITED_API, PyPy))))]
    {
        // The keyword names of the common call, as a tuple made once.
        static MAX_VERSION_ONLY: PyOnceLock<Py<PyTuple>> = PyOnceLock::new();
        let names = if keywords.len() == 1 {
            MAX_VERSION_ONLY
                .get_or_try_init(py, || PyTuple::new(py, [keywords[0].0]).map(Bound::unbind))?
                .bind(py)
                .clone()
        } else {
            PyTuple::new(py, keywords.iter().map(|(name, _)| name))?
        };
        debug_assert!(
            keywords
                .iter()
                .zip(names.iter())
                .all(|((a, _), b)| a.is(&b))
        );
        let mut args = [core::ptr::null_mut(); 5];
        args[0] = obj.as_ptr();
        for (slot, (_, value)) in args[1..].iter_mut().zip(keywords) {
            *slot = value.as_ptr();
        }
        let names = if keywords.is_empty() {
            core::ptr::null_mut()
        } else {
            names.as_ptr()
        };
        // SAFETY:
        // - `name` is a `str`; `args` holds `1 + keywords.len()` (at most 5) live
        //   objects, borrowed for the call: the receiver, then one value per name of
        //   `names` (a tuple of `str`, or NULL when there are no keywords);
        // - `nargsf` counts the receiver only: every other argument is a keyword;
        // - the thread is attached (`py`).
        let result =
            unsafe { pyo3::ffi::PyObject_VectorcallMethod(name.as_ptr(), args.as_ptr(), 1, names) };
        // SAFETY: a new reference, or NULL with an exception set.
        unsafe { Bound::from_owned_ptr_or_err(py, result) }
    }
    #[cfg(not(any(Py_3_12, not(any(Py_LIMITED_API, PyPy)))))]
    {
        let kwargs = pyo3::types::PyDict::new(py);
        for (key, value) in keywords {
            kwargs.set_item(key, value)?;
        }
        obj.call_method(name, (), Some(&kwargs))
    }
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
        // A table of an Arrow producer (pyarrow, Polars, `datasets`, ...), by column.
        #[cfg(feature = "arrow")]
        if let Some(batch) = arrow::import_table(&obj)? {
            return Ok(batch);
        }
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
            let (key, value): (Bound<'py, PyAny>, Bound<'py, PyAny>) = item?.extract()?;
            let name = match key.cast::<PyString>() {
                Ok(name) => name.to_cow()?.into_owned(),
                Err(_) => {
                    return Err(PyTypeError::new_err(format!(
                        "tensor names must be str, got {}",
                        type_name(&key)
                    )));
                }
            };
            let tensor = from_dlpack(&value).inspect_err(|err| {
                // Best effort: exceptions have no notes before Python 3.11.
                let note = format!("while importing tensor '{name}'");
                let _ = err.value(py).call_method1(intern!(py, "add_note"), (note,));
            })?;
            batch.insert(name, tensor)?;
        }
        Ok(batch)
    }
}

#[cfg(feature = "ndarray")]
impl<'a, 'py, A: Element, D: ndarray::Dimension + 'static> FromPyObject<'a, 'py>
    for DLPackArray<A, D>
{
    type Error = PyErr;

    /// Imports any object with `__dlpack__` ([`from_dlpack`]) and validates it as an
    /// array of `A` with `D`'s rank, once: `#[pyfunction] fn f(x: DLPackArray<f32,
    /// Ix2>)` takes NumPy, PyTorch, JAX, ... arrays as rust-numpy's
    /// `PyReadonlyArray2<f32>` takes NumPy's. An array that does not fit (dtype, rank,
    /// device, layout) is a `TypeError` naming what was expected and what was found, to
    /// which PyO3 adds the argument's name as a note (`while processing 'x'`, printed
    /// under the message in a traceback); the producer's own errors pass through. The
    /// array is shared (read-only views), as every import from Python; its in-place
    /// door, [`DLPackArray::assume_exclusive`], follows torch's autograd rule.
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        // A NumPy array read in place: no torch tensor, and no Python code run ...
        let (tensor, write_rule) = match numpy::import_exact(&obj)? {
            Some(tensor) => (tensor, torch::WriteRule::Allowed),
            // ... else whether torch's rule applies, before the import (finding torch
            // may run Python code, which cannot touch memory not yet imported).
            None => {
                let write_rule = torch::write_rule(&obj)?;
                (from_dlpack(&obj)?, write_rule)
            }
        };
        let array = DLPackArray::try_new(tensor).map_err(|(err, tensor)| {
            let found = format!(
                "{} with shape {} on {}",
                tensor.dtype(),
                py_tuple(tensor.shape()),
                tensor.device()
            );
            // The producer's deleter runs before the exception is made.
            drop(tensor);
            let rank = match D::NDIM {
                Some(ndim) => format!("{ndim} dimension{}", if ndim == 1 { "" } else { "s" }),
                None => "any number of dimensions".to_owned(),
            };
            let hint = match err {
                Error::DtypeMismatch { .. } => conversion_hint(A::DTYPE)
                    .map(|hint| format!("; {hint}"))
                    .unwrap_or_default(),
                _ => String::new(),
            };
            PyTypeError::new_err(format!(
                "expected a DLPack array of {} with {rank}, got {found} ({}){hint}",
                A::DTYPE,
                python_message(&err)
            ))
        })?;
        // The rule itself, after the import (which may have run the class's own
        // `__dlpack__`), with C calls only.
        let refused_write = write_rule.after_import(&obj)?;
        Ok(array.refusing_writes(refused_write.map(torch::TorchRefusal::refusal)))
    }
}
