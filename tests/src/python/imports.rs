//! Python objects imported into Rust: what an import found, imports with options,
//! round trips, drops on other threads, typed and mutable views.

use dlpack_core::ffi::DLDeviceType;
use dlpack_core::python::{ImportOptions, from_dlpack_with};
use dlpack_core::{Device, FromDLPack, ManagedTensor, ToDLPack};
use ndarray::{ArrayD, IxDyn};
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::elements::TestElement;

/// Everything about an imported tensor: `dtype`, `shape`, `strides`, `ptr` (first
/// element), `read_only`, `copied`, `legacy`, `version`, `device`, and `values` (flat, C
/// order, as Python scalars).
#[pyfunction]
pub(super) fn inspect<'py>(py: Python<'py>, tensor: ManagedTensor) -> PyResult<Bound<'py, PyDict>> {
    let info = PyDict::new(py);
    let dtype = tensor.dtype().to_string();
    info.set_item("dtype", &dtype)?;
    info.set_item("shape", tensor.shape().to_vec())?;
    info.set_item("strides", tensor.strides().map(<[i64]>::to_vec))?;
    info.set_item("ptr", tensor.data_ptr() as usize)?;
    info.set_item("read_only", tensor.is_read_only())?;
    info.set_item("copied", tensor.is_copied())?;
    info.set_item("legacy", tensor.is_legacy())?;
    info.set_item("version", tensor.version().map(|v| (v.major, v.minor)))?;
    let device = tensor.device();
    info.set_item("device", (device.device_type.0, device.device_id))?;
    if device.is_cpu_accessible() {
        let values = with_dtype!(dtype.as_str(), A => flat_values::<A>(py, &tensor))?;
        info.set_item("values", values)?;
    } else {
        info.set_item("values", py.None())?;
    }
    Ok(info)
}

fn flat_values<'py, A: TestElement>(
    py: Python<'py>,
    tensor: &ManagedTensor,
) -> PyResult<Bound<'py, PyList>> {
    let view = tensor.as_array::<A, IxDyn>()?;
    let items = view
        .iter()
        .map(|&v| v.to_py(py))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// Imports `obj` and returns the address of its first element (then drops it).
#[pyfunction]
pub(super) fn import_ptr(tensor: ManagedTensor) -> usize {
    tensor.data_ptr() as usize
}

/// The options of `from_dlpack_with`, from Python's `None`-or-value arguments.
fn options(copy: Option<bool>, device: Option<(i32, i32)>, stream: Option<i64>) -> ImportOptions {
    let mut options = ImportOptions::new();
    if let Some(copy) = copy {
        options = options.copy(copy);
    }
    if let Some((device_type, device_id)) = device {
        options = options.device(Device::new(DLDeviceType(device_type), device_id));
    }
    if let Some(stream) = stream {
        options = options.stream(stream);
    }
    options
}

/// Imports `obj` passing `copy`, `device` and `stream` to its producer; returns
/// `inspect` of the result.
#[pyfunction]
#[pyo3(signature = (obj, copy = None, device = None, stream = None))]
pub(super) fn import_with<'py>(
    obj: &Bound<'py, PyAny>,
    copy: Option<bool>,
    device: Option<(i32, i32)>,
    stream: Option<i64>,
) -> PyResult<Bound<'py, PyDict>> {
    inspect(
        obj.py(),
        from_dlpack_with(obj, options(copy, device, stream))?,
    )
}

/// Imports `obj` and exports it again, without copying: Python → Rust → Python.
#[pyfunction]
pub(super) fn roundtrip(tensor: ManagedTensor) -> ManagedTensor {
    tensor
}

/// Imports `obj` into an owned `ndarray::Array` of `dtype` (a copy for any foreign
/// producer, none for our own `Array` exports) and exports that.
#[pyfunction]
pub(super) fn roundtrip_owned(tensor: ManagedTensor, dtype: &str) -> PyResult<ManagedTensor> {
    with_dtype!(dtype, A => {
        let array = ArrayD::<A>::from_dlpack(tensor)?;
        Ok(array.to_dlpack()?)
    })
}

/// Imports `obj` and drops it on a new thread, detached from the interpreter: the
/// producer's deleter runs there.
#[pyfunction]
pub(super) fn drop_on_thread(py: Python<'_>, tensor: ManagedTensor) -> PyResult<()> {
    py.detach(move || std::thread::spawn(move || drop(tensor)).join())
        .map_err(|_| PyValueError::new_err("the dropping thread panicked"))
}

/// Imports `tensor` and drops it with this thread detached from the interpreter, as C
/// code that released the GIL would.
#[pyfunction]
pub(super) fn drop_detached(py: Python<'_>, tensor: ManagedTensor) {
    py.detach(move || drop(tensor));
}

/// Imports `tensor` and drops it on a new thread while this one keeps the GIL and waits
/// for it: a deleter (or a `Drop`) that needed the GIL would wait forever.
#[pyfunction]
pub(super) fn drop_on_thread_holding_gil(tensor: ManagedTensor) -> PyResult<()> {
    std::thread::spawn(move || drop(tensor))
        .join()
        .map_err(|_| PyValueError::new_err("the dropping thread panicked"))
}

/// Imports `tensor` and views it as a float32 array (the DLPack path timed by
/// benches/bench_exchange.py); returns the view's data address.
#[pyfunction]
pub(super) fn view_f32(tensor: ManagedTensor) -> PyResult<usize> {
    Ok(tensor.as_array::<f32, IxDyn>()?.as_ptr() as usize)
}

/// Views a NumPy float32 array with rust-numpy (`PyReadonlyArray::as_array`), the
/// non-DLPack zero-copy path, as the reference for `view_f32`.
#[pyfunction]
pub(super) fn view_f32_numpy(array: numpy::PyReadonlyArrayDyn<'_, f32>) -> usize {
    array.as_array().as_ptr() as usize
}

/// Imports `obj` and views it as `bool` (any rank): the number of elements.
#[pyfunction]
pub(super) fn bool_len(tensor: ManagedTensor) -> PyResult<usize> {
    Ok(tensor.as_array::<bool, IxDyn>()?.len())
}

/// Imports `obj` (passing `copy` to its producer) and writes `value` into its first
/// `float32` element through a mutable view; with `assume_exclusive` the caller vouches
/// that nothing else uses the data. Returns the tensor.
#[pyfunction]
#[pyo3(signature = (obj, value, assume_exclusive = false, copy = None))]
pub(super) fn write_first(
    obj: &Bound<'_, PyAny>,
    value: f32,
    assume_exclusive: bool,
    copy: Option<bool>,
) -> PyResult<ManagedTensor> {
    let mut tensor = from_dlpack_with(obj, options(copy, None, None))?;
    if assume_exclusive {
        // SAFETY: the Python test that asks for this holds no other reference to the
        // data while the view lives (it only reads it afterwards).
        unsafe { tensor.assume_exclusive() };
    }
    if let Some(first) = tensor.as_array_mut::<f32, IxDyn>()?.iter_mut().next() {
        *first = value;
    }
    Ok(tensor)
}

/// Imports `obj` twice and asks each import for a mutable view while the other import
/// lives: for each, `"ok"` or the error message.
#[pyfunction]
pub(super) fn two_mutable_views(obj: &Bound<'_, PyAny>) -> PyResult<(String, String)> {
    let mut first: ManagedTensor = obj.extract()?;
    let mut second: ManagedTensor = obj.extract()?;
    let outcome = |tensor: &mut ManagedTensor| match tensor.as_array_mut::<f32, IxDyn>() {
        Ok(_) => "ok".to_owned(),
        Err(err) => err.to_string(),
    };
    Ok((outcome(&mut first), outcome(&mut second)))
}
