//! The [`Tensor`] class: a [`ManagedTensor`] as a Python object with `__dlpack__`, and
//! [`ManagedTensor`] / [`TensorBatch`] into Python.

#[cfg(feature = "arrow")]
mod arrow;
mod c_api;
#[cfg(any(Py_3_10, not(Py_LIMITED_API)))]
mod fastcall;
mod torch;

pub(in crate::python) use c_api::own_table;

use std::sync::{Arc, OnceLock};

use pyo3::exceptions::{PyBufferError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};
use pyo3::{IntoPyObject, intern};

use crate::batch::TensorBatch;
use crate::ffi::DLDataTypeCode;
use crate::python::error::{numpy_hint, with_hint};
use crate::tensor::ManagedTensor;

/// A [`ManagedTensor`] as a Python object that any DLPack consumer accepts:
/// `numpy.from_dlpack`, `torch.from_dlpack`, `jax.dlpack.from_dlpack`,
/// `array_api_strict.from_dlpack`, ...
///
/// Made by returning a [`ManagedTensor`] to Python, or with [`Tensor::new`]. Every
/// `__dlpack__` call makes a new capsule that shares the data and keeps it alive; the
/// tensor's deleter runs when the object and every capsule and consumer array made from
/// it are gone.
///
/// Python attributes: `shape` and `strides` (tuples; `strides` in elements, `None` if the
/// producer gave none), `ndim`, `dtype` (a NumPy-style name such as `"float32"`),
/// `device` (such as `"cpu:0"`), `read_only`, `copies_read_only` (see
/// [`Tensor::copies_read_only`]), and `data_ptr()` (the address of the first element).
/// The typing stub is [`TENSOR_STUB`](crate::python::TENSOR_STUB).
///
/// An extension exposes the class (for `isinstance` and type annotations) with
/// [`add_to_module`](crate::python::add_to_module), which also names it after the
/// module: `your_extension.Tensor`. Until then (or in an extension that never adds
/// it), the type calls itself `dlpack_core.Tensor`.
///
/// PyTorch takes a `Tensor` where it takes its own (it is tensor-like: it has
/// `__torch_function__`, which `torch.overrides.is_tensor_like` looks for): a PyTorch
/// function or method given one (`torch.add(t, 1)`, `param.copy_(t)`) gets
/// `torch.from_dlpack(t)` instead, without a copy, so `module.load_state_dict(sd)` takes
/// a model's `state_dict()` as it is. Only `load_state_dict(sd, assign=True)` needs
/// PyTorch's own tensors (`torch.nn.Parameter` accepts nothing else):
/// `{k: torch.from_dlpack(v) for k, v in sd.items()}`, or PyTorch's
/// `torch.__future__.set_swap_module_params_on_conversion(True)`, under which
/// `assign=True` goes through `__torch_function__` too. Either way the module's
/// parameters are the tensors' memory. PyTorch is imported only when PyTorch calls the
/// protocol.
///
/// A `Tensor` cannot be pickled or copied with `copy`: it shares memory with its
/// producer, which another process cannot reach. Pickling it (`pickle.dumps`,
/// `torch.save` of a model's `state_dict()`) is a `TypeError` that says to copy it into
/// an array first (`numpy.from_dlpack(t, copy=True)`, `torch.from_dlpack(t).clone()`).
///
/// # The `__dlpack__` protocol
///
/// `__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)` follows the
/// Python array API standard:
///
/// - `max_version` of `None` or a major version below 1 gets a legacy `"dltensor"`
///   capsule (`DLManagedTensor`; JAX asks this way), anything else a
///   `"dltensor_versioned"` capsule (`DLManagedTensorVersioned`, version 1.3) carrying
///   the tensor's `READ_ONLY` flag.
/// - `copy=True` copies into a fresh C-order buffer (flagged `IS_COPIED` in a versioned
///   capsule); `copy=False` never copies; `copy=None` copies only when it must: a
///   `READ_ONLY` tensor asked for as a legacy capsule, which cannot say it is read-only,
///   and a read-only tensor of Rust's own memory, which PyTorch would write
///   ([`Tensor::copies_read_only`]). With `copy=False` those cases are a `BufferError`,
///   as in NumPy.
/// - `stream` must be `None` for a CPU tensor: anything else is a `RuntimeError`, as
///   NumPy 2 raises (PyTorch accepts `-1` and fails an assertion otherwise; the
///   standard names no exception). For a device tensor it is an integer that the
///   standard allows for that device (CUDA: `-1`, `1`, `2` or a stream handle, not
///   `0`; ROCm: `-1`, `0` or a handle; other devices: none), else a `BufferError`. No
///   work follows: the producer of a device tensor made its data ready before wrapping
///   it (the contract of `from_raw` and `from_owner`), so it is ready on every stream.
/// - `dl_device` may be `None`, the tensor's own device, or `(1, 0)` (CPU) when the CPU
///   can access the memory; anything else is a `BufferError`.
/// - `__dlpack_device__()` returns the tensor's own `(device_type, device_id)`. A tensor
///   on a device the CPU cannot access exports fine as long as no copy is needed.
///
/// A shared export (no copy) does not carry `IS_COPIED`, even if the tensor had it: the
/// capsule's consumer shares the memory with every other consumer of the same object.
///
/// An export costs what NumPy's own costs (one allocation, one reference count, one
/// capsule): `__dlpack__` is a method like those of CPython's own types, which reads
/// its four keywords itself.
///
/// # Capsules
///
/// A capsule's destructor frees its tensor only if no consumer took it, as the DLPack
/// Python specification says, so every deleter runs exactly once whether the capsule
/// is consumed or not. A capsule that a consumer tampered with (renamed to anything but
/// its two DLPack names without being consumed, or with its pointer replaced) is never
/// freed on a guess: its tensor is leaked and the problem reported as an unraisable
/// `RuntimeError`.
///
/// Deleters may run on any thread. The deleter of a capsule made here only drops a
/// reference count and never needs the GIL; when that frees a tensor imported from
/// Python, the producer's own deleter takes the GIL itself (NumPy's and PyTorch's do).
///
/// # The DLPack C exchange API
///
/// `Tensor.__dlpack_c_exchange_api__` (DLPack 1.3) is a capsule named
/// `"dlpack_exchange_api"` over the type's table of C functions, through which C-level
/// consumers import a `Tensor` without a Python call:
///
/// - `managed_tensor_from_py_object_no_sync`: a new versioned header over the data, as
///   `__dlpack__(max_version=(1, 3))` gives;
/// - `dltensor_from_py_object_no_sync`: the tensor's own description, which lives as
///   long as the object; a `READ_ONLY` tensor is refused with `BufferError`, since a
///   `DLTensor` has no flags, and strides are always given (C-contiguous ones, kept by
///   the object, when the producer gave none);
/// - `managed_tensor_to_py_object_no_sync`: a `Tensor` that takes the tensor over,
///   shared as every import is (see [`from_dlpack`](crate::python::from_dlpack)) unless
///   flagged `IS_COPIED` or made by this table's allocator;
/// - `managed_tensor_allocator`: a zeroed, C-order CPU tensor whose deleter frees it
///   once; errors go to the caller's `SetError`;
/// - `current_work_stream`: NULL, since this crate launches no device work.
///
/// Every entry reports errors as the standard says (a Python exception and -1, a panic
/// included); none of them unwinds into C.
#[pyclass(frozen, name = "Tensor", module = "dlpack_core")]
pub struct Tensor {
    tensor: Arc<ManagedTensor>,
    /// Whether consumers get copies of the data (see [`Tensor::copies_read_only`]).
    copies_read_only: bool,
    /// C-contiguous strides, made when a C consumer borrows the description of a
    /// tensor whose producer gave none (DLPack 1.2 and later require strides).
    c_strides: OnceLock<Box<[i64]>>,
}

impl Tensor {
    /// Wraps a tensor for Python. A read-only tensor over memory that Rust code may
    /// still read (made by this crate: a shared `ArcArray`, a burn tensor with other
    /// handles, a `from_owner` tensor flagged `READ_ONLY`) reaches consumers as copies:
    /// see [`copies_read_only`](Self::copies_read_only).
    pub fn new(tensor: ManagedTensor) -> Self {
        let copies = tensor.is_rust_immutable();
        Self::wrap(tensor, copies)
    }

    /// Wraps a tensor for Python without the read-only rule of [`new`](Self::new): a
    /// read-only tensor of Rust's memory is exported without a copy, flagged
    /// `READ_ONLY`, to every consumer.
    ///
    /// # Safety
    ///
    /// - no consumer of the object writes the tensor's memory while Rust code may read
    ///   it (through another handle of the same buffer: a clone of an `ArcArray`, ...).
    ///   NumPy, JAX and array-api-strict honour the `READ_ONLY` flag; PyTorch does not
    ///   (`torch.from_dlpack` makes a writable tensor of it, and an in-place operation
    ///   writes the memory), nor does a consumer of a legacy capsule or of a borrowed
    ///   `DLTensor`, which are refused or copied anyway.
    pub unsafe fn new_unchecked(tensor: ManagedTensor) -> Self {
        Self::wrap(tensor, false)
    }

    fn wrap(mut tensor: ManagedTensor, copies_read_only: bool) -> Self {
        tensor.mark_exposed();
        Self {
            tensor: Arc::new(tensor),
            copies_read_only,
            c_strides: OnceLock::new(),
        }
    }

    /// Whether every consumer gets a copy of the data (flagged `IS_COPIED`), never the
    /// memory itself: true for a read-only tensor over CPU memory of Rust's, under a
    /// header this crate made (see [`new`](Self::new); a producer's read-only tensor,
    /// or a NumPy array read in place, is the producer's memory and handed on as it
    /// came). Rust code may read that memory through other handles
    /// as immutable, and PyTorch, the most common consumer, ignores DLPack's read-only
    /// flag: `torch.from_dlpack` makes a writable tensor of it, whose in-place
    /// operations would write memory that Rust reads as immutable (undefined behaviour
    /// in Rust, from safe code on both sides). A consumer cannot be told apart at
    /// `__dlpack__`, so every consumer gets a copy; `copy=False` is a `BufferError`.
    /// A writable tensor (an owned `Array`, moved; an `ArcArray` that was the only
    /// handle) is shared without a copy; a read-only tensor that came from Python is
    /// handed on as it came.
    pub fn copies_read_only(&self) -> bool {
        self.copies_read_only
    }

    /// The tensor's C-contiguous strides, made once and kept as long as the object.
    pub(super) fn c_strides(&self) -> PyResult<&[i64]> {
        if let Some(strides) = self.c_strides.get() {
            return Ok(strides);
        }
        let shape = self.tensor.shape();
        let mut strides = Vec::new();
        strides.try_reserve_exact(shape.len()).map_err(|_| {
            crate::error::Error::AllocationFailed {
                bytes: shape.len().saturating_mul(8),
            }
        })?;
        strides.resize(shape.len(), 0);
        crate::layout::c_strides(shape, &mut strides);
        Ok(self.c_strides.get_or_init(|| strides.into_boxed_slice()))
    }

    /// The tensor.
    pub fn tensor(&self) -> &ManagedTensor {
        &self.tensor
    }

    /// A new reference to the tensor's handle (an `Arc`), which capsules made by
    /// `__dlpack__` also hold.
    pub fn to_arc(&self) -> Arc<ManagedTensor> {
        Arc::clone(&self.tensor)
    }

    /// Whether this object holds the only reference to the tensor's handle: no capsule
    /// made by `__dlpack__`, and no consumer array made from one, is alive.
    pub(crate) fn is_only_handle(&self) -> bool {
        Arc::strong_count(&self.tensor) == 1
    }

    /// The tensor's handle, borrowed.
    pub(super) fn handle(&self) -> &Arc<ManagedTensor> {
        &self.tensor
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
    /// method descriptor with CPython's fastest calling convention (see `fastcall`).
    #[cfg(any(Py_3_10, not(Py_LIMITED_API)))]
    #[classattr]
    #[pyo3(name = "__dlpack__")]
    fn dlpack_method(py: Python<'_>) -> PyResult<Py<PyAny>> {
        fastcall::method_descriptor(py)
    }

    /// Exports the tensor as a DLPack capsule (Python array API `__dlpack__`). The
    /// stable ABI before Python 3.10 has no vectorcall methods: PyO3 sorts the keywords
    /// here, and the same `DlpackArgs::request` reads them.
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
        let args = super::DlpackArgs {
            values: [stream, max_version, dl_device, copy].map(|v| v.map(Bound::as_borrowed)),
        };
        super::export(py, self, args.request()?)
    }

    /// The DLPack C exchange API (DLPack 1.3): a capsule named `"dlpack_exchange_api"`
    /// over this type's table of C functions, through which C-level consumers import a
    /// `Tensor` without a Python call.
    #[classattr]
    #[pyo3(name = "__dlpack_c_exchange_api__")]
    fn dlpack_c_exchange_api(py: Python<'_>) -> PyResult<Py<PyAny>> {
        c_api::table_capsule(py)
    }

    /// NumPy's conversion protocol (`np.asarray(t)`, `np.array(t)`, and whatever
    /// converts through NumPy): the tensor as a NumPy array by `numpy.from_dlpack`,
    /// without a copy unless `copy=True` asks for one or `dtype` needs a conversion;
    /// `copy=False` with a `dtype` that needs one is a `ValueError`, as NumPy 2 says.
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let numpy = py.import(intern!(py, "numpy"))?;
        let kwargs = PyDict::new(py);
        if let Some(copy) = copy {
            kwargs.set_item(intern!(py, "copy"), copy)?;
        }
        let array = numpy
            .call_method(intern!(py, "from_dlpack"), (slf,), Some(&kwargs))
            .map_err(|err| {
                let dtype = slf.get().tensor.dtype();
                // bfloat16 and the float8, float6 and float4 types: NumPy has them only
                // through a dtype package (ml_dtypes), registered with NumPy 2.5.
                let code = dtype.code();
                // (NumPy's refusal only: a KeyboardInterrupt or MemoryError goes as it is.)
                let refused = err.is_instance_of::<PyBufferError>(py)
                    || err.is_instance_of::<PyRuntimeError>(py);
                if refused
                    && (code == DLDataTypeCode::kDLBfloat
                        || (DLDataTypeCode::kDLFloat8_e3m4.0..=DLDataTypeCode::kDLFloat4_e2m1fn.0)
                            .contains(&code.0))
                {
                    with_hint(py, err, &numpy_hint(py, &dtype.to_string()))
                } else {
                    err
                }
            })?;
        let Some(dtype) = dtype.filter(|d| !d.is_none()) else {
            return Ok(array);
        };
        let wanted = numpy.call_method1(intern!(py, "dtype"), (dtype,))?;
        if array.getattr(intern!(py, "dtype"))?.eq(&wanted)? {
            return Ok(array);
        }
        if copy == Some(false) {
            return Err(PyValueError::new_err(format!(
                "Unable to avoid copy while creating an array as requested: the tensor \
                 holds {}, not {wanted}",
                slf.get().tensor.dtype()
            )));
        }
        array.call_method1(intern!(py, "astype"), (wanted,))
    }

    /// JAX's conversion hook for `jnp.asarray(t)` and `jnp.array(t)`:
    /// `jax.dlpack.from_dlpack(t)`. JAX's constructors leave DLPack out on purpose and
    /// would read `dtype`, which here is a name, not a NumPy dtype. JAX 0.10 no longer
    /// calls the hook for a `Tensor` given straight to a JAX function (`jnp.sin(t)`
    /// raises a `ValueError`): convert it with `jnp.asarray(t)` first.
    fn __jax_array__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        py.import(intern!(py, "jax.dlpack"))?
            .call_method1(intern!(py, "from_dlpack"), (slf,))
    }

    /// PyTorch's protocol for tensor-like objects: PyTorch's functions and methods take
    /// a `Tensor` (`torch.add(t, 1)`, `param.copy_(t)`, and so `Module.load_state_dict`
    /// of a model's `state_dict()`), each `Tensor` of the call converted by
    /// `torch.from_dlpack`, without a copy. PyTorch is imported only when PyTorch calls
    /// this.
    #[classmethod]
    #[pyo3(signature = (func, types, args = None, kwargs = None))]
    fn __torch_function__<'py>(
        cls: &Bound<'py, PyType>,
        func: &Bound<'py, PyAny>,
        types: &Bound<'py, PyAny>,
        args: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        torch::torch_function(cls, func, types, args, kwargs)
    }

    /// Arrow's PyCapsule interface (feature `arrow`): `pa.array(t)`, `pl.Series(t)` and
    /// every consumer of the interface take the tensor without a copy, a 1-d tensor as a
    /// primitive array, an n-d one as an `arrow.fixed_shape_tensor` array (rows along
    /// the first axis). A C-order tensor of the CPU is required (a permutation of the
    /// cell's axes is written as the extension's `permutation`). A read-only tensor of
    /// Rust's memory is handed over as a copy, as `__dlpack__` hands it (see
    /// [`copies_read_only`](Self::copies_read_only)). `requested_schema` is a hint the
    /// interface lets a producer ignore: the array comes as the tensor is.
    #[cfg(feature = "arrow")]
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        drop(requested_schema);
        arrow::arrow_c_array(py, self)
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

    /// Whether consumers get copies: a read-only tensor of Rust's memory (see
    /// [`Tensor::copies_read_only`]).
    #[getter]
    #[pyo3(name = "copies_read_only")]
    fn copies_read_only_attr(&self) -> bool {
        self.copies_read_only
    }

    /// The address of the first element.
    fn data_ptr(&self) -> usize {
        self.tensor.data_ptr() as usize
    }

    fn __repr__(&self) -> String {
        self.repr()
    }

    /// Refuses to pickle (and `copy`) the tensor, with what to do instead.
    fn __reduce__(&self) -> PyResult<()> {
        Err(pyo3::exceptions::PyTypeError::new_err(
            "cannot pickle a DLPack Tensor: it shares memory with its producer; copy it into \
             an array first, for example numpy.from_dlpack(t, copy=True) for NumPy, or \
             torch.from_dlpack(t).clone() for PyTorch (torch.save)",
        ))
    }
}

impl<'py> IntoPyObject<'py> for ManagedTensor {
    type Target = Tensor;
    type Output = Bound<'py, Tensor>;
    type Error = PyErr;

    /// Wraps the tensor in a [`Tensor`] object ([`Tensor::new`]); nothing is copied
    /// here.
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
