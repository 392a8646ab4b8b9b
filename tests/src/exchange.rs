//! The DLPack C exchange API from the consumer's side of the tests: producer tables
//! that misbehave in every way the standard leaves open (for a Python class to
//! publish), a peer consumer (dlpark) for the timings, and typed arguments.

use core::ffi::{c_int, c_void};
use core::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_core::ffi::{
    DLManagedTensorVersioned, DLPACK_EXCHANGE_API_CAPSULE_NAME, DLPackExchangeAPI,
    DLPackExchangeAPIHeader, DLPackVersion,
};
use dlpack_core::python::Tensor;
use dlpack_core::{DLPackArray, ManagedTensor};
use ndarray::{Ix1, Ix2, IxDyn};
use pyo3::exceptions::{PyValueError, PyZeroDivisionError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// How many times a table's owning entry was called.
static CALLS: AtomicUsize = AtomicUsize::new(0);

/// A producer table that lives as long as the process.
struct Table(DLPackExchangeAPI);

// SAFETY: nothing in a table is ever written; `prev_api` points to another static.
unsafe impl Sync for Table {}

const fn table(
    major: u32,
    prev_api: *mut DLPackExchangeAPIHeader,
    from_object: Option<dlpack_core::ffi::DLPackManagedTensorFromPyObjectNoSync>,
) -> Table {
    Table(DLPackExchangeAPI {
        header: DLPackExchangeAPIHeader {
            version: DLPackVersion { major, minor: 3 },
            prev_api,
        },
        managed_tensor_allocator: None,
        managed_tensor_from_py_object_no_sync: from_object,
        managed_tensor_to_py_object_no_sync: None,
        dltensor_from_py_object_no_sync: None,
        current_work_stream: None,
    })
}

static OK: Table = table(1, ptr::null_mut(), Some(counted_tensor));
static FAIL_WITH_EXCEPTION: Table = table(1, ptr::null_mut(), Some(fail_with_exception));
static FAIL_SILENTLY: Table = table(1, ptr::null_mut(), Some(fail_silently));
static SUCCESS_WITH_EXCEPTION: Table = table(1, ptr::null_mut(), Some(success_with_exception));
static NULL_TENSOR: Table = table(1, ptr::null_mut(), Some(null_tensor));
static PINNED: Table = table(1, ptr::null_mut(), Some(pinned_tensor));
static FAIL_WITH_TENSOR: Table = table(1, ptr::null_mut(), Some(fail_with_tensor));
static PANIC_WITH_TENSOR: Table = table(1, ptr::null_mut(), Some(panic_with_tensor));
static NULL_ENTRY: Table = table(1, ptr::null_mut(), None);
static MAJOR_2: Table = table(2, ptr::null_mut(), Some(counted_tensor));
// A newer table first, then (through `prev_api`) the version-1 one a consumer uses.
static MAJOR_2_THEN_1: Table = table(
    2,
    ptr::from_ref(&OK.0.header).cast_mut(),
    Some(fail_with_exception),
);

/// A counted `float32` tensor `[1, 2, 3]` for the caller.
unsafe extern "C" fn counted_tensor(
    _object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    CALLS.fetch_add(1, Ordering::SeqCst);
    let Ok((tensor, _)) = super::python::make("float32", vec![3], "c", true, 0) else {
        return -1;
    };
    // SAFETY: the consumer's writable out-pointer (the standard's convention).
    unsafe { *out = tensor.into_raw() };
    0
}

/// Fails as the standard says: -1 with a Python exception set.
unsafe extern "C" fn fail_with_exception(
    _object: *mut c_void,
    _out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    CALLS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the standard calls the entries from an attached thread.
    let py = unsafe { Python::assume_attached() };
    PyZeroDivisionError::new_err("the producer failed").restore(py);
    -1
}

/// Fails without setting an exception (a broken producer).
unsafe extern "C" fn fail_silently(
    _object: *mut c_void,
    _out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    CALLS.fetch_add(1, Ordering::SeqCst);
    -1
}

/// Succeeds, handing over a counted tensor, but leaves an exception set (a broken
/// producer).
unsafe extern "C" fn success_with_exception(
    object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let status = unsafe { counted_tensor(object, out) };
    // SAFETY: the standard calls the entries from an attached thread.
    let py = unsafe { Python::assume_attached() };
    PyValueError::new_err("left set by the producer").restore(py);
    status
}

/// A counted, empty tensor in pinned host memory (`kDLCUDAHost`), which the CPU can
/// read but a device may still be writing: the consumer must not read it without the
/// stream synchronisation that only `__dlpack__` does.
unsafe extern "C" fn pinned_tensor(
    _object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    CALLS.fetch_add(1, Ordering::SeqCst);
    let Ok(tensor) = super::python::make_on_device(3, 0) else {
        return -1;
    };
    // SAFETY: the consumer's writable out-pointer (the standard's convention).
    unsafe { *out = tensor.into_raw() };
    0
}

/// Fails with an exception set, but hands over a counted tensor all the same (a broken
/// producer): the consumer must release it.
unsafe extern "C" fn fail_with_tensor(
    object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { counted_tensor(object, out) };
    // SAFETY: the standard calls the entries from an attached thread.
    let py = unsafe { Python::assume_attached() };
    PyValueError::new_err("failed, with a tensor").restore(py);
    -1
}

/// Succeeds, handing over a counted tensor, with a `PanicException` set (a broken
/// producer written with PyO3): taking it resumes the panic, which must not lose the
/// tensor.
unsafe extern "C" fn panic_with_tensor(
    object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let status = unsafe { counted_tensor(object, out) };
    // SAFETY: the standard calls the entries from an attached thread.
    let py = unsafe { Python::assume_attached() };
    pyo3::panic::PanicException::new_err("a panic left behind").restore(py);
    status
}

/// Succeeds without a tensor (a broken producer).
unsafe extern "C" fn null_tensor(
    _object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    CALLS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the consumer's writable out-pointer (the standard's convention).
    unsafe { *out = ptr::null_mut() };
    0
}

/// A `dlpack_exchange_api` capsule over one of the tables above, for a Python class to
/// publish as `__dlpack_c_exchange_api__`.
#[pyfunction]
pub(crate) fn exchange_capsule(py: Python<'_>, kind: &str) -> PyResult<Py<PyAny>> {
    let table = match kind {
        "ok" => &OK,
        "fail_with_exception" => &FAIL_WITH_EXCEPTION,
        "fail_silently" => &FAIL_SILENTLY,
        "success_with_exception" => &SUCCESS_WITH_EXCEPTION,
        "null_tensor" => &NULL_TENSOR,
        "fail_with_tensor" => &FAIL_WITH_TENSOR,
        "pinned" => &PINNED,
        "panic_with_tensor" => &PANIC_WITH_TENSOR,
        "null_entry" => &NULL_ENTRY,
        "major_2" => &MAJOR_2,
        "major_2_then_1" => &MAJOR_2_THEN_1,
        _ => return Err(PyValueError::new_err(format!("no table {kind:?}"))),
    };
    let pointer = ptr::from_ref(&table.0).cast_mut().cast::<c_void>();
    // SAFETY:
    // - `pointer` is a non-null pointer to a static, and the capsule has no destructor;
    // - the name is a `'static` C string; the thread is attached.
    let capsule = unsafe {
        pyo3::ffi::PyCapsule_New(pointer, DLPACK_EXCHANGE_API_CAPSULE_NAME.as_ptr(), None)
    };
    // SAFETY: a new reference, or NULL with an exception set.
    Ok(unsafe { Bound::from_owned_ptr_or_err(py, capsule) }?.unbind())
}

/// How many times the tables' owning entries were called.
#[pyfunction]
pub(crate) fn exchange_calls() -> usize {
    CALLS.load(Ordering::SeqCst)
}

/// A peer consumer: dlpark 0.10's import of `obj` (its C exchange API path where the
/// type has one); returns the data address.
#[pyfunction]
pub(crate) fn dlpark_import(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    let imported = dlpark::python::from_dlpack(obj.as_borrowed(), None, None)?;
    let tensor = imported
        .validate()
        .map_err(|err| PyValueError::new_err(err.to_string()))?;
    Ok(tensor.data_ptr() as usize)
}

/// The import without the C exchange API: `obj.__dlpack__(max_version=(1, 3))`, then
/// the capsule's.
fn through_dunder(obj: &Bound<'_, PyAny>) -> PyResult<ManagedTensor> {
    let kwargs = pyo3::types::PyDict::new(obj.py());
    kwargs.set_item("max_version", (1, 3))?;
    let capsule = obj.call_method("__dlpack__", (), Some(&kwargs))?;
    dlpack_core::python::from_dlpack(&capsule)
}

/// [`through_dunder`]; returns the data address.
#[pyfunction]
pub(crate) fn import_through_dunder(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    Ok(through_dunder(obj)?.data_ptr() as usize)
}

/// [`through_dunder`], then a `float32` view; returns its address.
#[pyfunction]
pub(crate) fn view_f32_through_dunder(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    let tensor = through_dunder(obj)?;
    Ok(tensor.as_array::<f32, IxDyn>()?.as_ptr() as usize)
}

/// The deleter of `tensor`'s versioned header, which is then released.
fn deleter_of(tensor: ManagedTensor) -> Option<usize> {
    let raw = tensor.into_raw();
    // SAFETY: `into_raw` hands over a live versioned header, read once here.
    let deleter = unsafe { (*raw).deleter }.map(|f| f as usize);
    // SAFETY: the header just given up, taken back once (shared: nothing is viewed).
    drop(unsafe { ManagedTensor::from_raw_shared(raw) });
    deleter
}

/// Whether the import of a NumPy array `obj` read the array in place (a header of this
/// crate's, whose deleter is ours) rather than by its `__dlpack__` (NumPy's header and
/// deleter). (A legacy capsule would come back wrapped in a header of ours: this is for
/// NumPy arrays, whose `__dlpack__` gives versioned ones.)
#[pyfunction]
pub(crate) fn read_in_place(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    let imported = deleter_of(dlpack_core::python::from_dlpack(obj)?);
    let ours = deleter_of(ManagedTensor::from_buffer(vec![0u8], 0, &[1], &[1])?);
    Ok(imported == ours)
}

/// A typed argument: the sum of a 2-d `float32` array from any producer.
#[pyfunction]
pub(crate) fn sum_f32_2d(x: DLPackArray<f32, Ix2>) -> f32 {
    x.view().sum()
}

/// A typed argument: the address of a 2-d `float32` array from any producer, as a
/// user's `#[pyfunction]` takes it (the reference: [`typed_ptr_f32_2d_numpy`]).
#[pyfunction]
pub(crate) fn typed_ptr_f32_2d(x: DLPackArray<f32, Ix2>) -> usize {
    x.view().as_ptr() as usize
}

/// The same array through [`DLPackArray::new`] of an imported `ManagedTensor`: the
/// typed argument's import and checks without torch's in-place rule, the anchor of
/// what that rule costs a read (`benches/bench_instructions.py`).
#[pyfunction]
pub(crate) fn typed_ptr_f32_2d_unruled(x: ManagedTensor) -> PyResult<usize> {
    let x = DLPackArray::<f32, Ix2>::new(x)?;
    Ok(x.view().as_ptr() as usize)
}

/// rust-numpy's typed argument for the same: the address of a 2-d `float32` NumPy
/// array (`PyReadonlyArray2::as_array`).
#[pyfunction]
pub(crate) fn typed_ptr_f32_2d_numpy(x: numpy::PyReadonlyArray2<'_, f32>) -> usize {
    x.as_array().as_ptr() as usize
}

/// A typed argument: the address of a 1-d `float32` array from any producer.
#[pyfunction]
pub(crate) fn typed_ptr_f32_1d(x: DLPackArray<f32, Ix1>) -> usize {
    x.view().as_ptr() as usize
}

/// A typed `bfloat16` argument (an `ml_dtypes.bfloat16` NumPy array, a JAX or PyTorch
/// bfloat16 array): the address of its first element and its values as `float32`.
#[pyfunction]
pub(crate) fn typed_bf16_1d(x: DLPackArray<half::bf16, Ix1>) -> (usize, Vec<f32>) {
    let view = x.view();
    (
        view.as_ptr() as usize,
        view.iter().map(|v| v.to_f32()).collect(),
    )
}

/// Hands the managed tensor at `address` (the caller gives up its ownership) to our
/// table's "to object" entry, then writes `value` into its first `float64` element the
/// way safe Rust can write an exclusive tensor: through `Tensor::shared`, once the
/// object is gone, and `Arc::get_mut`.
#[pyfunction]
pub(crate) fn to_object_then_write(py: Python<'_>, address: usize, value: f64) -> PyResult<()> {
    let capsule = py
        .get_type::<Tensor>()
        .getattr("__dlpack_c_exchange_api__")?
        .cast_into::<PyCapsule>()?;
    let table = capsule
        .pointer_checked(Some(DLPACK_EXCHANGE_API_CAPSULE_NAME))?
        .cast::<DLPackExchangeAPI>();
    // SAFETY: our own table, a static.
    let to_object = unsafe { table.as_ref() }
        .managed_tensor_to_py_object_no_sync
        .ok_or_else(|| PyValueError::new_err("no to-object entry"))?;
    let mut out: *mut c_void = ptr::null_mut();
    // SAFETY: the caller hands over a managed tensor at `address` ("the tensor is
    // stolen"); `out` is writable; the thread is attached.
    if unsafe { to_object(address as *mut DLManagedTensorVersioned, &mut out) } != 0 {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: success gives a new reference to a `Tensor`.
    let object = unsafe { Bound::from_owned_ptr(py, out.cast()) }.cast_into::<Tensor>()?;
    let mut shared = object.get().to_arc();
    drop(object);
    let tensor = Arc::get_mut(&mut shared)
        .ok_or_else(|| PyValueError::new_err("the tensor is still referenced"))?;
    if let Some(first) = tensor.as_array_mut::<f64, IxDyn>()?.iter_mut().next() {
        *first = value;
    }
    Ok(())
}

/// Multiplies a float32 vector by `factor` in the caller's own memory: the in-place
/// recipe of the `python` module's docs (the array last, see its docs).
#[pyfunction]
pub(crate) fn scale_in_place(factor: f32, mut x: DLPackArray<f32, Ix1>) -> PyResult<()> {
    // SAFETY: no Python code runs from the array's extraction (the last argument) to the
    // end of the write, and the interpreter is kept; the tests pass NumPy arrays and
    // torch tensors (whose autograd rule `assume_exclusive` applies), never JAX arrays.
    unsafe { x.assume_exclusive() }?;
    x.view_mut()?.mapv_inplace(|v| v * factor);
    Ok(())
}

/// [`scale_in_place`] with the door opened and the write made on another thread, while
/// this one keeps the interpreter and waits.
#[pyfunction]
pub(crate) fn scale_on_another_thread(factor: f32, mut x: DLPackArray<f32, Ix1>) -> PyResult<()> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: as `scale_in_place`; this thread runs no Python code, and the
                // one that holds the interpreter waits for it.
                unsafe { x.assume_exclusive() }?;
                x.view_mut()?.mapv_inplace(|v| v * factor);
                Ok::<(), dlpack_core::Error>(())
            })
            .join()
            .expect("the writing thread does not panic")
    })?;
    Ok(())
}

/// Writes `value` into the first element of a typed argument without vouching for it
/// (no `assume_exclusive`): the mistake whose error must tell the extension's author
/// the fix.
#[pyfunction]
pub(crate) fn write_first_typed(mut x: DLPackArray<f32, Ix1>, value: f32) -> PyResult<()> {
    if let Some(first) = x.view_mut()?.iter_mut().next() {
        *first = value;
    }
    Ok(())
}
