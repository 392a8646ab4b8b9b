//! Imports: any object with `__dlpack__`, or a raw DLPack capsule, into a
//! [`ManagedTensor`]; any mapping of them into a [`TensorBatch`].

use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyDict, PyTuple};

use crate::ffi::{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
use crate::tensor::ManagedTensor;
use crate::tensor_batch::TensorBatch;

#[cfg(doc)]
use super::Tensor;
use super::capsule::consume;
use super::error::type_name;

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
/// in the [module documentation](crate::python).
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
