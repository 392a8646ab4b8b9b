//! `dlpack_test_ext`: the Python extension that the pytest suite in `tests/python` drives.
//!
//! It makes arrays of every element type, rank and layout in Rust and hands them to
//! Python without copying, imports any `__dlpack__` object and reports what it found,
//! round-trips tensors, exports a small model as a `state_dict`-like batch, and counts
//! live exports so that tests can prove every deleter ran.

use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_core::ffi::{DLDataTypeCode, DLDeviceType, DLManagedTensorVersioned};
use dlpack_core::python::{ImportOptions, Tensor, from_dlpack_with};
use dlpack_core::{DataType, Device, Element, FromDLPack, ManagedTensor, TensorBatch, ToDLPack};
use half::{bf16, f16};
use ndarray::{Array1, Array2, ArrayD, Axis, Dimension, IxDyn, ShapeBuilder, Slice};
use num_complex::Complex;
use pyo3::IntoPyObjectExt;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyComplex, PyDict, PyList};

/// Exports whose owner is still alive (see [`Counted`]).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// An owner that counts itself in [`LIVE`] from creation to drop.
struct Counted<T>(T);

impl<T> Counted<T> {
    fn new(value: T) -> Self {
        LIVE.fetch_add(1, Ordering::SeqCst);
        Self(value)
    }
}

impl<T> Drop for Counted<T> {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<A> AsMut<[A]> for Counted<Vec<A>> {
    fn as_mut(&mut self) -> &mut [A] {
        &mut self.0
    }
}

/// A Rust element type that the tests can build from an index and report to Python.
trait TestElement: Element + Default {
    /// The value of the element at C-order flat index `i` (the formula
    /// `tests/python/helpers.py` mirrors).
    fn at(i: usize) -> Self;
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
}

fn float_at(i: usize) -> f64 {
    (i % 64) as f64 * 0.5 - 8.0
}

macro_rules! int_element {
    ($($ty:ty => $at:expr),* $(,)?) => {$(
        impl TestElement for $ty {
            fn at(i: usize) -> Self {
                let f: fn(usize) -> $ty = $at;
                f(i)
            }
            fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.into_bound_py_any(py)
            }
        }
    )*};
}

int_element! {
    bool => |i| i % 3 == 0,
    i8 => |i| (i % 100) as i8 - 50,
    i16 => |i| (i % 100) as i16 - 50,
    i32 => |i| (i % 100) as i32 - 50,
    i64 => |i| (i % 100) as i64 - 50,
    u8 => |i| (i % 200) as u8,
    u16 => |i| (i % 200) as u16,
    u32 => |i| (i % 200) as u32,
    u64 => |i| (i % 200) as u64,
    f32 => |i| float_at(i) as f32,
    f64 => float_at,
}

impl TestElement for f16 {
    fn at(i: usize) -> Self {
        f16::from_f64(float_at(i))
    }
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.to_f64().into_bound_py_any(py)
    }
}

impl TestElement for bf16 {
    fn at(i: usize) -> Self {
        bf16::from_f64(float_at(i))
    }
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.to_f64().into_bound_py_any(py)
    }
}

macro_rules! complex_element {
    ($($ty:ty),*) => {$(
        impl TestElement for Complex<$ty> {
            fn at(i: usize) -> Self {
                Complex::new(float_at(i) as $ty, -((i % 16) as $ty))
            }
            fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                Ok(PyComplex::from_doubles(py, f64::from(self.re), f64::from(self.im)).into_any())
            }
        }
    )*};
}

complex_element!(f32, f64);

/// Calls `$body` with `$A` bound to the Rust type of the dtype named `$name` (every
/// element type of `dlpack_core::for_each_element!`); an unknown name is a
/// `BufferError`.
macro_rules! with_dtype {
    ($name:expr, $A:ident => $body:expr) => {{
        let name: &str = $name;
        (|| {
            dlpack_core::for_each_element!(dtype_arm(name, $A, $body));
            Err(PyBufferError::new_err(format!("unsupported dtype {name}")))
        })()
    }};
}

/// One arm of [`with_dtype!`].
macro_rules! dtype_arm {
    ($name:ident, $A:ident, $body:expr; $ty:ty, $constant:ident, $dtype:literal) => {
        if $name == $dtype {
            type $A = $ty;
            return $body;
        }
    };
}

/// The C-order flat index of `index` in an array of extents `shape`.
fn flat_index(index: &[usize], shape: &[usize]) -> usize {
    index.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
}

/// An array of extents `shape` holding `A::at(flat index)` at every index, stored with
/// the given memory layout.
fn build_array<A: TestElement>(shape: &[usize], layout: &str) -> PyResult<ArrayD<A>> {
    let dim = IxDyn(shape);
    let mut array = match layout {
        "c" | "negative" => ArrayD::<A>::default(dim),
        "f" => ArrayD::<A>::default(dim.f()),
        "sliced" => {
            // One extra element on each side of every axis, then cut them off.
            let big: Vec<usize> = shape.iter().map(|&n| n + 2).collect();
            let mut a = ArrayD::<A>::default(IxDyn(&big));
            a.slice_each_axis_inplace(|ax| {
                let n = ax.len as isize;
                Slice::new(1.min(n), Some(n - 1), 1)
            });
            a
        }
        "stepped" => {
            // Every other element along every axis.
            let big: Vec<usize> = shape.iter().map(|&n| 2 * n).collect();
            let mut a = ArrayD::<A>::default(IxDyn(&big));
            a.slice_each_axis_inplace(|_| Slice::new(0, None, 2));
            a
        }
        other => return Err(PyValueError::new_err(format!("unknown layout {other}"))),
    };
    if layout == "negative" {
        for axis in 0..array.ndim() {
            array.invert_axis(Axis(axis));
        }
    }
    assert_eq!(
        array.shape(),
        shape,
        "layout {layout} built the wrong shape"
    );
    for (index, value) in array.indexed_iter_mut() {
        *value = A::at(flat_index(index.slice(), shape));
    }
    Ok(array)
}

/// Exports `array` counted: the owner is the array's own buffer, without a copy.
fn export_counted<A: Element>(array: ArrayD<A>) -> PyResult<ManagedTensor> {
    let shape = array.shape().to_vec();
    let strides = array.strides().to_vec();
    let (vec, offset) = array.into_raw_vec_and_offset();
    Ok(ManagedTensor::from_buffer(
        Counted::new(vec),
        offset.unwrap_or(0),
        &shape,
        &strides,
    )?)
}

/// A C-order export of `shape` whose first element is aligned to `align` bytes.
fn export_aligned<A: TestElement>(
    shape: &[usize],
    align: usize,
    counted: bool,
) -> PyResult<(ManagedTensor, usize)> {
    let n: usize = shape.iter().product();
    let pad = align.div_ceil(size_of::<A>());
    let mut vec: Vec<A> = vec![A::default(); n + pad];
    let offset = (0..=pad)
        .find(|&o| (vec.as_ptr().wrapping_add(o) as usize) % align == 0)
        .ok_or_else(|| PyValueError::new_err("cannot align"))?;
    for (i, v) in vec[offset..offset + n].iter_mut().enumerate() {
        *v = A::at(i);
    }
    let ptr = vec.as_ptr().wrapping_add(offset) as usize;
    let mut strides = vec![0isize; shape.len()];
    let mut step = 1isize;
    for (s, &n) in strides.iter_mut().zip(shape).rev() {
        *s = step;
        step *= n.max(1) as isize;
    }
    let tensor = if counted {
        ManagedTensor::from_buffer(Counted::new(vec), offset, shape, &strides)?
    } else {
        ManagedTensor::from_buffer(vec, offset, shape, &strides)?
    };
    Ok((tensor, ptr))
}

/// Makes a Rust array of `dtype` with extents `shape` and memory `layout` ("c", "f",
/// "sliced", "stepped", "negative") and exports it without copying. Returns the tensor
/// and the address of its first element as Rust saw it before the export.
///
/// `counted` exports through an owner counted by `live_exports()`; `align` (bytes, C
/// layout only) places the first element at an aligned address.
#[pyfunction]
#[pyo3(signature = (dtype, shape, layout = "c", counted = false, align = 0))]
pub(crate) fn make(
    dtype: &str,
    shape: Vec<usize>,
    layout: &str,
    counted: bool,
    align: usize,
) -> PyResult<(ManagedTensor, usize)> {
    with_dtype!(dtype, A => {
        if align > 0 {
            return export_aligned::<A>(&shape, align, counted);
        }
        let array = build_array::<A>(&shape, layout)?;
        let ptr = array.as_ptr() as usize;
        let tensor = if counted { export_counted(array)? } else { array.to_dlpack()? };
        Ok((tensor, ptr))
    })
}

/// Everything about an imported tensor: `dtype`, `shape`, `strides`, `ptr` (first
/// element), `read_only`, `copied`, `legacy`, `version`, `device`, and `values` (flat, C
/// order, as Python scalars).
#[pyfunction]
fn inspect<'py>(py: Python<'py>, tensor: ManagedTensor) -> PyResult<Bound<'py, PyDict>> {
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
fn import_ptr(tensor: ManagedTensor) -> usize {
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
fn import_with<'py>(
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
fn roundtrip(tensor: ManagedTensor) -> ManagedTensor {
    tensor
}

/// Imports `obj` into an owned `ndarray::Array` of `dtype` (a copy for any foreign
/// producer, none for our own `Array` exports) and exports that.
#[pyfunction]
fn roundtrip_owned(tensor: ManagedTensor, dtype: &str) -> PyResult<ManagedTensor> {
    with_dtype!(dtype, A => {
        let array = ArrayD::<A>::from_dlpack(tensor)?;
        Ok(array.to_dlpack()?)
    })
}

/// Imports `obj` and drops it on a new thread, detached from the interpreter: the
/// producer's deleter runs there.
#[pyfunction]
fn drop_on_thread(py: Python<'_>, tensor: ManagedTensor) -> PyResult<()> {
    py.detach(move || std::thread::spawn(move || drop(tensor)).join())
        .map_err(|_| PyValueError::new_err("the dropping thread panicked"))
}

/// Imports `tensor` and drops it with this thread detached from the interpreter, as C
/// code that released the GIL would.
#[pyfunction]
fn drop_detached(py: Python<'_>, tensor: ManagedTensor) {
    py.detach(move || drop(tensor));
}

/// Imports `tensor` and drops it on a new thread while this one keeps the GIL and waits
/// for it: a deleter (or a `Drop`) that needed the GIL would wait forever.
#[pyfunction]
fn drop_on_thread_holding_gil(tensor: ManagedTensor) -> PyResult<()> {
    std::thread::spawn(move || drop(tensor))
        .join()
        .map_err(|_| PyValueError::new_err("the dropping thread panicked"))
}

/// The number of counted exports whose owner is still alive.
#[pyfunction]
fn live_exports() -> usize {
    LIVE.load(Ordering::SeqCst)
}

/// A read-only export (an `ArcArray` still shared elsewhere when exported), handed to
/// Python as it is, flagged `READ_ONLY`, without the copy that `Tensor::new` makes its
/// consumers take: the clone is dropped before Python sees the tensor, so no Rust code
/// reads the buffer (for the tests of the flag's journey, whose consumers never write).
#[pyfunction]
#[pyo3(signature = (shape, counted = false))]
fn make_read_only(shape: Vec<usize>, counted: bool) -> PyResult<Tensor> {
    let array = build_array::<f32>(&shape, "c")?.into_shared();
    let keep = array.clone();
    let tensor = if counted {
        let shape = array.shape().to_vec();
        let strides = array.strides().to_vec();
        let owner = Counted::new(array);
        let data = owner.0.as_ptr().cast_mut().cast();
        let shape: Vec<i64> = shape.iter().map(|&n| n as i64).collect();
        let strides: Vec<i64> = strides.iter().map(|&s| s as i64).collect();
        // SAFETY:
        // - `data` is element `[0, ...]` of the shared buffer, which the owner's
        //   `ArcArray` keeps alive and unmoved; shape and strides are the array's;
        // - the tensor is `READ_ONLY`, and `ArcArray` copies on write, so nobody writes
        //   the buffer while the tensor lives;
        // - the dtype is `f32`'s.
        unsafe {
            ManagedTensor::from_owner(
                owner,
                move |_| data,
                &shape,
                Some(&strides),
                DataType::F32,
                Device::CPU,
                dlpack_core::ffi::DLPACK_FLAG_BITMASK_READ_ONLY,
            )?
        }
    } else {
        array.to_dlpack()?
    };
    drop(keep);
    // SAFETY: no Rust handle of the buffer is left (`keep` is gone, the tensor owns the
    // last one), so no Rust code reads what a consumer could write.
    Ok(unsafe { Tensor::new_unchecked(tensor) })
}

/// An `ArcArray` that Rust keeps and reads, exported through the safe path: a shared
/// export, `READ_ONLY`, whose consumers get copies (`Tensor::copies_read_only`).
#[pyclass]
struct KeptArc(ndarray::ArcArray1<f32>);

#[pymethods]
impl KeptArc {
    #[new]
    fn new(n: usize) -> Self {
        Self(Array1::from_iter((0..n).map(|i| i as f32)).into_shared())
    }

    /// A clone of the array, exported (`ArcArray: ToDLPack`), as a Python `Tensor`.
    fn export(&self) -> PyResult<ManagedTensor> {
        Ok(self.0.clone().to_dlpack()?)
    }

    /// The elements as Rust reads them.
    fn values(&self) -> Vec<f32> {
        self.0.to_vec()
    }

    /// The address of the first element.
    fn data_ptr(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

/// A counted tensor of `n` bytes of dtype `float8_e4m3fn`, which no `Element` maps.
#[pyfunction]
fn make_float8(n: usize) -> PyResult<ManagedTensor> {
    let owner = Counted::new(vec![0x38u8; n]); // 0x38 is 1.0 in float8_e4m3fn
    let dtype = DataType::new(DLDataTypeCode::kDLFloat8_e4m3fn, 8, 1);
    // SAFETY:
    // - the pointer is the start of the owner's `n` bytes, one per element, which the
    //   owner keeps alive and unmoved; every byte is a valid float8;
    // - nobody else holds the buffer; the tensor is writable.
    Ok(unsafe {
        ManagedTensor::from_owner(
            owner,
            |o| o.0.as_mut_ptr().cast(),
            &[n as i64],
            Some(&[1]),
            dtype,
            Device::CPU,
            0,
        )?
    })
}

/// A counted, empty `float32` tensor (shape `(0,)`, NULL data) on device
/// `(device_type, device_id)`: an honest tensor on any device, since it has no data.
#[pyfunction]
pub(crate) fn make_on_device(device_type: i32, device_id: i32) -> PyResult<ManagedTensor> {
    let owner = Counted::new(());
    let device = Device::new(DLDeviceType(device_type), device_id);
    // SAFETY: the tensor has no elements, so no memory is described; NULL data is
    // what the standard asks for then.
    Ok(unsafe {
        ManagedTensor::from_owner(
            owner,
            |_| core::ptr::null_mut(),
            &[0],
            Some(&[1]),
            DataType::F32,
            device,
            0,
        )?
    })
}

/// A versioned capsule over a counted tensor whose header claims major version `major`.
#[pyfunction]
fn capsule_with_major(py: Python<'_>, major: u32) -> PyResult<Bound<'_, PyAny>> {
    let (tensor, _) = make("float32", vec![3], "c", true, 0)?;
    let object = Bound::new(py, Tensor::new(tensor))?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("max_version", (1, 3))?;
    let capsule = object.call_method("__dlpack__", (), Some(&kwargs))?;
    let pointer = capsule
        .cast::<PyCapsule>()?
        .pointer_checked(Some(c"dltensor_versioned"))?
        .cast::<DLManagedTensorVersioned>();
    // SAFETY:
    // - the capsule was just made by `__dlpack__` and holds an unconsumed header of ours,
    //   which nobody else reads or writes now;
    // - `version` is a plain field of the live, aligned header.
    unsafe { (*pointer.as_ptr()).version.major = major };
    Ok(capsule)
}

/// A capsule that is not a DLPack tensor.
#[pyfunction]
fn foreign_capsule(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    PyCapsule::new_with_value(py, 0u64, c"not_a_tensor")
}

#[derive(Debug)]
struct Linear {
    weight: Array2<f32>,
    bias: Array1<f32>,
}

#[derive(Debug)]
struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl Linear {
    fn new(inputs: usize, outputs: usize, seed: f32) -> Self {
        Self {
            weight: Array2::from_shape_fn((outputs, inputs), |(o, i)| {
                seed + o as f32 * 0.25 - i as f32 * 0.125
            }),
            bias: Array1::from_shape_fn(outputs, |o| seed - o as f32 * 0.5),
        }
    }

    fn into_batch(self, prefix: &str, batch: &mut TensorBatch) -> dlpack_core::Result<()> {
        batch.insert(format!("{prefix}.weight"), self.weight.to_dlpack()?)?;
        batch.insert(format!("{prefix}.bias"), self.bias.to_dlpack()?)
    }

    fn from_batch(prefix: &str, batch: &mut TensorBatch) -> PyResult<Self> {
        let mut take = |name: &str| {
            let name = format!("{prefix}.{name}");
            batch
                .remove(&name)
                .ok_or(dlpack_core::Error::MissingTensor { name })
        };
        Ok(Self {
            weight: Array2::from_dlpack(take("weight")?)?,
            bias: Array1::from_dlpack(take("bias")?)?,
        })
    }
}

/// Tensor name → address of its first element.
type Pointers = Vec<(&'static str, usize)>;

impl Mlp {
    fn pointers(&self) -> Pointers {
        vec![
            ("fc1.weight", self.fc1.weight.as_ptr() as usize),
            ("fc1.bias", self.fc1.bias.as_ptr() as usize),
            ("fc2.weight", self.fc2.weight.as_ptr() as usize),
            ("fc2.bias", self.fc2.bias.as_ptr() as usize),
        ]
    }
}

/// A Rust MLP (`fc1`: 4 → 8, `fc2`: 8 → 2) exported as a `state_dict`-like dict of
/// tensors, without copying; also returns each tensor's Rust data address.
#[pyfunction]
fn model_state(py: Python<'_>) -> PyResult<(Bound<'_, PyDict>, Pointers)> {
    let model = Mlp {
        fc1: Linear::new(4, 8, 1.0),
        fc2: Linear::new(8, 2, -1.0),
    };
    let pointers = model.pointers();
    let mut batch = TensorBatch::new();
    model.fc1.into_batch("fc1", &mut batch)?;
    model.fc2.into_batch("fc2", &mut batch)?;
    Ok((batch.into_pyobject(py)?, pointers))
}

/// Imports an MLP strictly from a mapping (e.g. a PyTorch `state_dict`): exactly the
/// four tensors, `float32`, of the right shapes. Returns name → (shape, sum).
#[pyfunction]
fn load_model(state: TensorBatch) -> PyResult<Vec<(String, Vec<usize>, f64)>> {
    let mut batch = state;
    let model = Mlp {
        fc1: Linear::from_batch("fc1", &mut batch)?,
        fc2: Linear::from_batch("fc2", &mut batch)?,
    };
    batch.expect_empty()?;
    if model.fc1.weight.dim() != (8, 4)
        || model.fc1.bias.len() != 8
        || model.fc2.weight.dim() != (2, 8)
        || model.fc2.bias.len() != 2
    {
        return Err(PyValueError::new_err(format!("wrong shapes: {model:?}")));
    }
    let sum = |a: f32| f64::from(a);
    Ok(vec![
        (
            "fc1.weight".into(),
            model.fc1.weight.shape().to_vec(),
            sum(model.fc1.weight.sum()),
        ),
        (
            "fc1.bias".into(),
            model.fc1.bias.shape().to_vec(),
            sum(model.fc1.bias.sum()),
        ),
        (
            "fc2.weight".into(),
            model.fc2.weight.shape().to_vec(),
            sum(model.fc2.weight.sum()),
        ),
        (
            "fc2.bias".into(),
            model.fc2.bias.shape().to_vec(),
            sum(model.fc2.bias.sum()),
        ),
    ])
}

/// Imports any mapping of tensors; returns name → (dtype, shape, first-element address)
/// in the mapping's order.
#[pyfunction]
fn load_batch(batch: TensorBatch) -> Vec<(String, String, Vec<i64>, usize)> {
    batch
        .iter()
        .map(|(name, t)| {
            (
                name.to_owned(),
                t.dtype().to_string(),
                t.shape().to_vec(),
                t.data_ptr() as usize,
            )
        })
        .collect()
}

/// Imports a mapping and exports it again as a dict, without copying.
#[pyfunction]
fn roundtrip_batch(batch: TensorBatch) -> TensorBatch {
    batch
}

/// Imports `tensor` and views it as a float32 array (the DLPack path timed by
/// benches/bench_exchange.py); returns the view's data address.
#[pyfunction]
fn view_f32(tensor: ManagedTensor) -> PyResult<usize> {
    Ok(tensor.as_array::<f32, IxDyn>()?.as_ptr() as usize)
}

/// Views a NumPy float32 array with rust-numpy (`PyReadonlyArray::as_array`), the
/// non-DLPack zero-copy path, as the reference for `view_f32`.
#[pyfunction]
fn view_f32_numpy(array: numpy::PyReadonlyArrayDyn<'_, f32>) -> usize {
    array.as_array().as_ptr() as usize
}

/// A foreign producer's tensor: a boxed versioned header over `n` counted `f32`s (all
/// `1.0`), whose deleter frees the box and, if `raise`, leaves a Python exception set,
/// as a misbehaving C producer might.
#[repr(C)]
struct Foreign {
    managed: DLManagedTensorVersioned,
    data: Counted<Vec<f32>>,
    shape: [i64; 1],
    strides: [i64; 1],
    raise: bool,
}

/// The deleter of [`Foreign`] tensors.
///
/// # Safety
///
/// - `managed` is the header of a live boxed [`Foreign`], deleted once.
unsafe extern "C" fn delete_foreign(managed: *mut DLManagedTensorVersioned) {
    // SAFETY: the header is the first field of a `Foreign` made by `Box::into_raw`.
    let foreign = unsafe { Box::from_raw(managed.cast::<Foreign>()) };
    let raise = foreign.raise;
    drop(foreign);
    if raise {
        Python::attach(|py| {
            pyo3::exceptions::PyRuntimeError::new_err("a deleter that leaves an exception set")
                .restore(py);
        });
    }
}

/// The destructor of [`foreign_tensor`] capsules: the specification's, releasing the
/// tensor unless the capsule was consumed.
///
/// # Safety
///
/// - `capsule` is a live capsule made by [`foreign_tensor`]; the GIL is held.
unsafe extern "C" fn destroy_foreign(capsule: *mut pyo3::ffi::PyObject) {
    let name = c"dltensor_versioned";
    // SAFETY: a live capsule and a C string; the GIL is held.
    if unsafe { pyo3::ffi::PyCapsule_IsValid(capsule, name.as_ptr()) } != 1 {
        return;
    }
    // SAFETY: as above; the capsule is valid under this name.
    let pointer = unsafe { pyo3::ffi::PyCapsule_GetPointer(capsule, name.as_ptr()) };
    // SAFETY: an unconsumed capsule owns its `Foreign` tensor.
    unsafe { delete_foreign(pointer.cast()) };
}

/// A raw `dltensor_versioned` capsule from a foreign producer: `n` counted `float32`
/// ones whose deleter leaves a `RuntimeError` set if `raise_in_deleter`, with NULL
/// strides (C-contiguous, as producers before DLPack 1.2 may say) if `null_strides`.
#[pyfunction]
#[pyo3(signature = (n, raise_in_deleter = false, null_strides = false))]
fn foreign_tensor(
    py: Python<'_>,
    n: usize,
    raise_in_deleter: bool,
    null_strides: bool,
) -> PyResult<Bound<'_, PyAny>> {
    let mut foreign = Box::new(Foreign {
        managed: DLManagedTensorVersioned {
            version: dlpack_core::ffi::DLPackVersion::CURRENT,
            manager_ctx: core::ptr::null_mut(),
            deleter: Some(delete_foreign),
            flags: 0,
            dl_tensor: dlpack_core::ffi::DLTensor {
                data: core::ptr::null_mut(),
                device: Device::CPU.to_raw(),
                ndim: 1,
                dtype: DataType::F32.to_raw(),
                shape: core::ptr::null_mut(),
                strides: core::ptr::null_mut(),
                byte_offset: 0,
            },
        },
        data: Counted::new(vec![1.0; n]),
        shape: [n as i64],
        strides: [1],
        raise: raise_in_deleter,
    });
    foreign.managed.dl_tensor.data = foreign.data.0.as_mut_ptr().cast();
    foreign.managed.dl_tensor.shape = foreign.shape.as_mut_ptr();
    if !null_strides {
        foreign.managed.dl_tensor.strides = foreign.strides.as_mut_ptr();
    }
    let pointer = Box::into_raw(foreign).cast::<core::ffi::c_void>();
    // SAFETY:
    // - `pointer` is a boxed `Foreign` starting with its versioned header, owned by the
    //   capsule until a consumer renames it;
    // - the name is a static C string; the destructor matches the capsule's contents;
    // - the thread is attached.
    let capsule = unsafe {
        pyo3::ffi::PyCapsule_New(
            pointer,
            c"dltensor_versioned".as_ptr(),
            Some(destroy_foreign),
        )
    };
    // SAFETY: a new reference or NULL with an exception set; the thread is attached.
    unsafe { Bound::from_owned_ptr_or_err(py, capsule) }
}

/// Imports `obj` and views it as `bool` (any rank): the number of elements.
#[pyfunction]
fn bool_len(tensor: ManagedTensor) -> PyResult<usize> {
    Ok(tensor.as_array::<bool, IxDyn>()?.len())
}

/// Imports `obj` (passing `copy` to its producer) and writes `value` into its first
/// `float32` element through a mutable view; with `assume_exclusive` the caller vouches
/// that nothing else uses the data. Returns the tensor.
#[pyfunction]
#[pyo3(signature = (obj, value, assume_exclusive = false, copy = None))]
fn write_first(
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
fn two_mutable_views(obj: &Bound<'_, PyAny>) -> PyResult<(String, String)> {
    let mut first: ManagedTensor = obj.extract()?;
    let mut second: ManagedTensor = obj.extract()?;
    let outcome = |tensor: &mut ManagedTensor| match tensor.as_array_mut::<f32, IxDyn>() {
        Ok(_) => "ok".to_owned(),
        Err(err) => err.to_string(),
    };
    Ok((outcome(&mut first), outcome(&mut second)))
}

/// The Python module. It runs without the GIL on a free-threaded build (PyO3's default,
/// said here): dlpack-core relies on no interpreter lock (its import safety guide, "Without
/// the interpreter lock"), and the module's own state is atomic counters.
#[pymodule(gil_used = false)]
fn dlpack_test_ext(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(view_f32, m)?)?;
    m.add_function(wrap_pyfunction!(view_f32_numpy, m)?)?;
    m.add_function(wrap_pyfunction!(make, m)?)?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(import_ptr, m)?)?;
    m.add_function(wrap_pyfunction!(import_with, m)?)?;
    m.add_function(wrap_pyfunction!(roundtrip, m)?)?;
    m.add_function(wrap_pyfunction!(roundtrip_owned, m)?)?;
    m.add_function(wrap_pyfunction!(drop_on_thread, m)?)?;
    m.add_function(wrap_pyfunction!(drop_detached, m)?)?;
    crate::weights::add_functions(m)?;
    crate::checkpoints::add_functions(m)?;
    crate::models::add_classes(m)?;
    m.add_function(wrap_pyfunction!(drop_on_thread_holding_gil, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::to_object_then_write, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::scale_in_place, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::write_first_typed, m)?)?;
    m.add_function(wrap_pyfunction!(
        crate::exchange::scale_on_another_thread,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(live_exports, m)?)?;
    m.add_function(wrap_pyfunction!(make_read_only, m)?)?;
    m.add_class::<KeptArc>()?;
    m.add_function(wrap_pyfunction!(make_float8, m)?)?;
    m.add_function(wrap_pyfunction!(make_on_device, m)?)?;
    m.add_function(wrap_pyfunction!(capsule_with_major, m)?)?;
    m.add_function(wrap_pyfunction!(foreign_capsule, m)?)?;
    m.add_function(wrap_pyfunction!(model_state, m)?)?;
    m.add_function(wrap_pyfunction!(load_model, m)?)?;
    m.add_function(wrap_pyfunction!(load_batch, m)?)?;
    m.add_function(wrap_pyfunction!(roundtrip_batch, m)?)?;
    m.add_function(wrap_pyfunction!(foreign_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(bool_len, m)?)?;
    m.add_function(wrap_pyfunction!(write_first, m)?)?;
    m.add_function(wrap_pyfunction!(two_mutable_views, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::exchange_capsule, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::exchange_calls, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::dlpark_import, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::import_through_dunder, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::typed_ptr_f32_2d, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::read_in_place, m)?)?;
    m.add_function(wrap_pyfunction!(
        crate::exchange::typed_ptr_f32_2d_numpy,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(
        crate::exchange::view_f32_through_dunder,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::sum_f32_2d, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::typed_ptr_f32_1d, m)?)?;
    dlpack_core::python::add_to_module(m)?;
    Ok(())
}

#[cfg(test)]
mod tests;
