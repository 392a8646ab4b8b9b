//! The Python bridge (feature `pyo3`): DLPack capsules for NumPy, PyTorch, JAX and every
//! other implementation of the Python array API's `__dlpack__` protocol.
//!
//! - A [`ManagedTensor`] returned to Python (any `#[pyfunction]` returning it, or
//!   [`IntoPyObject`]) becomes a [`Tensor`]: an object with `__dlpack__` and
//!   `__dlpack_device__`, so `numpy.from_dlpack(t)`, `torch.from_dlpack(t)` and
//!   `jax.dlpack.from_dlpack(t)` take it without copying. Like a NumPy array it can be
//!   exported any number of times; every capsule keeps the data alive on its own.
//! - A [`TensorBatch`] becomes a `dict` of such objects. PyTorch's `load_state_dict`
//!   takes `torch.Tensor`s only: `{k: torch.from_dlpack(v) for k, v in d.items()}` is a
//!   `state_dict` over the same memory, and `module.load_state_dict(sd, assign=True)`
//!   makes the module's parameters those tensors, with no copy (without `assign`, it
//!   copies into the module's own).
//! - Any object with `__dlpack__`, or a raw DLPack capsule, extracts into a
//!   [`ManagedTensor`] ([`FromPyObject`], [`from_dlpack`]; [`from_dlpack_with`] for a
//!   copy, a device or a stream) or, validated once, a [`DLPackArray`] (a typed
//!   argument, as rust-numpy's `PyReadonlyArray`); any mapping of them into a
//!   [`TensorBatch`]. Where the producer's type publishes the DLPack C exchange API
//!   (PyTorch 2.10 and later), the import is one C call with no Python call; a NumPy
//!   array is read in place, with no call at all.
//! - A [`Tensor`] publishes the C exchange API too (`__dlpack_c_exchange_api__`), so
//!   C-level consumers import it without a Python call, and converts with
//!   `np.asarray(t)` (`__array__`) and `jnp.asarray(t)` (`__jax_array__`), without a
//!   copy.
//! - A Rust model kept between calls is a Python object with `#[pymodel]` (feature
//!   `derive` too): its tensors are zero-copy attributes, with PyTorch's `state_dict`
//!   and `load_state_dict` ([`model`], which states who writes the memory when).
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
//! # Details
//!
//! - **Exports**: [`Tensor`] states the `__dlpack__` protocol as it implements it
//!   (keywords, copies, streams, devices), what its capsules own, and what its DLPack C
//!   exchange table answers.
//! - **Imports**: [`from_dlpack`] states the import paths, their errors, why an import
//!   is shared, and what dropping one does; [`ImportOptions`] and [`from_dlpack_with`]
//!   the keywords of a request.
//!
//! # NumPy arrays
//!
//! A `numpy.ndarray` is imported from its own C struct, without a call, whenever NumPy's
//! `__dlpack__` would export it as it is: see [NumPy arrays](from_dlpack#numpy-arrays)
//! in [`from_dlpack`].
//!
//! # bfloat16 and float8 in NumPy (`ml_dtypes`)
//!
//! NumPy has no bfloat16 or float8 type of its own; `ml_dtypes` (the package JAX uses)
//! adds them. NumPy 2.5 and later exchange such types through DLPack once a package
//! registers them (`np.dtypes.register_dlpack_dtype`, which NumPy means for the type's
//! author), and `ml_dtypes` 0.7 and later registers bfloat16 and its float8 types when
//! it is imported. So, with `numpy>=2.5` and `ml_dtypes>=0.7`, and `ml_dtypes` imported:
//!
//! - a bfloat16 or float8 tensor of Rust's becomes an `ml_dtypes` array in
//!   `np.from_dlpack(t)` and `np.asarray(t)`, without a copy (a mapped bfloat16
//!   checkpoint reaches NumPy, and JAX, as bfloat16, in place);
//! - an `ml_dtypes.bfloat16` array is a typed argument (`DLPackArray<half::bf16, D>`)
//!   without a copy. Its type number is a user type's, given at registration: the first
//!   array of such a type goes through NumPy's `__dlpack__`, whose answer (the DLPack
//!   type of that type number) is kept, so that later ones are read in place as
//!   NumPy's export gives them.
//!
//! The crate registers nothing: registration is global to the process and refuses a
//! second type for a DLPack type, so it is the dtype package's to do, as NumPy says.
//! (With `ml_dtypes` 0.6, register by hand:
//! `np.dtypes.register_dlpack_dtype((4, 16), np.dtype(ml_dtypes.bfloat16))`.) Before
//! NumPy 2.5, an `ml_dtypes` array passed to Rust and a bfloat16 tensor given to
//! `np.asarray` are refused with a message naming what to install; `np.from_dlpack`
//! raises NumPy's own error. PyTorch and JAX exchange bfloat16 in any version.
//!
//! # Writing into a caller's array, in place
//!
//! An import from Python is shared, so the safe way to hand results back is a new
//! array (return an `Array` or a [`ManagedTensor`]). A function that must fill the
//! caller's own array says, with `unsafe`, that nothing else uses it while it writes:
//!
//! ```no_run
//! use dlpack_core::DLPackArray;
//! use ndarray::Ix1;
//! use pyo3::prelude::*;
//!
//! /// Multiplies a float32 vector (NumPy, PyTorch, ...) by `factor`, in place.
//! #[pyfunction]
//! fn scale(factor: f32, mut x: DLPackArray<f32, Ix1>) -> PyResult<()> {
//!     // SAFETY: no Python code runs from the array's extraction (the last argument:
//!     // see below) to the end of the write, and the interpreter is kept; the callers
//!     // pass NumPy arrays or torch tensors, never JAX arrays (torch's autograd rule is
//!     // applied by `assume_exclusive` itself).
//!     unsafe { x.assume_exclusive() }?;
//!     x.view_mut()?.mapv_inplace(|v| v * factor);
//!     Ok(())
//! }
//! ```
//!
//! The array is the last argument, with no typed array after it: PyO3 converts
//! arguments in order, and a later argument's conversion may run Python code (the
//! caller's `__float__`, a typed array's `__dlpack__`), which could resize the array
//! after its import. The contract
//! ([`DLPackArray::assume_exclusive`]) rules out JAX arrays (immutable by contract,
//! though their legacy capsules cannot say so). Torch tensors follow torch's rule for
//! in-place operations (its requires-grad rule), read when the argument is extracted
//! (after its import, running no Python code, on the caller's thread: grad mode is per
//! thread): a tensor that
//! requires grad (a
//! `Parameter`, a view of one, a result computed from one) is refused while grad mode
//! is on (`RuntimeError`, as torch's own in-place operations raise on a leaf; autograd
//! cannot record a write made outside torch) and written under `torch.no_grad()`, where
//! optimizer steps run. The write does not bump torch's version counter: do not write a
//! tensor that a pending backward pass saved. Torch's own `__dlpack__` refuses a tensor
//! that requires grad, its C exchange API (which imports use) does not: reading one is
//! never refused (a flag that cannot be read refuses the write, not the read).
//!
//! # Arrow columns and tables
//!
//! With the `arrow` feature, every import also takes Arrow's PyCapsule interface
//! (`__arrow_c_array__`, or `__arrow_c_stream__` holding one non-empty chunk), so that
//! pyarrow arrays, chunked arrays, tables and record batches, Polars Series and
//! DataFrames, Hugging Face `datasets` batches (pyarrow tables), DuckDB and arro3 results
//! reach Rust without a copy, as a typed argument, through [`from_dlpack`] or as a
//! [`TensorBatch`]:
//!
//! - a column is one tensor: a numeric column 1-d, a fixed-size list (nested) n-d, an
//!   `arrow.fixed_shape_tensor` column n-d with its permutation as strides (see
//!   `dlpack_core::arrow`); a table (a struct column) is a batch, one tensor per column
//!   named by the column, so that `Rows::from_dlpack(batch)` turns a training table into
//!   a derived struct (fields of [`DLPackArray`] read it in place);
//! - the producer's buffers are the tensor's memory, kept until the last tensor over
//!   them is dropped, read-only (Arrow's buffers are immutable) and shared, as every
//!   import from Python is;
//! - what a tensor cannot be is refused before the data is read, naming the column and
//!   the fix: nulls, several chunks, lists of variable length, strings, booleans (bits,
//!   not bytes), dictionaries, decimals and times, buffers not aligned for their type;
//!   a producer's C structs are checked before arrow-rs reads them, and a refused
//!   array is released at once, exactly once;
//! - an object is taken by its capsules when its type has `__arrow_c_array__` or
//!   `__arrow_c_stream__`, before `__dlpack__` (pyarrow's own refuses fixed-size lists);
//!   a NumPy array, or a producer with a DLPack C exchange table, is imported as before.
//!
//! The other way, a returned [`Tensor`] has `__arrow_c_array__`: `pa.array(t)` is the
//! tensor's memory, a primitive array for 1-d, an `arrow.fixed_shape_tensor` array for
//! n-d.
//!
//! # The DLPack C exchange API
//!
//! DLPack 1.3 lets a Python type publish a table of C functions as
//! `type(obj).__dlpack_c_exchange_api__`. Imports use a producer's table (see
//! [the DLPack C exchange API](from_dlpack#the-dlpack-c-exchange-api) in
//! [`from_dlpack`]), and [`Tensor`] publishes one (see
//! [its table](Tensor#the-dlpack-c-exchange-api)).

// Layout of this module, by direction:
//
// - `import`: `from_dlpack` and `FromPyObject` for tensors and batches; `c_api` (the
//   consumer half of the C exchange API: imports through a producer's table), `numpy`
//   (NumPy arrays read in place: the subclass rule and the read policy), `torch`
//   (torch's write rule), `arrow` (Arrow's PyCapsule interface: columns and tables);
// - `export`: what a `__dlpack__` call asks for, and the header it gets; `tensor` (the
//   `Tensor` class, and `ManagedTensor`/`TensorBatch` into Python), with its children
//   `fastcall` (`Tensor.__dlpack__` as a vectorcall method, where the ABI has it) and
//   `c_api` (the producer half: `Tensor`'s C exchange table), and `arrow`
//   (`Tensor.__arrow_c_array__`); it names nothing of `model`;
// - `model`: a Rust model as a Python object (`#[pymodel]`), above `export` (its tensors
//   are `Tensor`s) and `import` (its setters and `load_state_dict` import);
// - `module`: `add_to_module`, which registers the classes of `export` and `model` in an
//   extension module, and their typing stubs;
// - shared leaves: `npyffi` (NumPy's C layout and its API table, found at run time),
//   `adopt` (the one import policy, which every import path calls), `capsule` (capsule
//   names, creation, destruction and consumption), `error` (`Error` to the exception
//   NumPy raises), `trampoline` (how every C entry point runs Rust code);
// - below `tensor`, outside this module: `crate::interpreter`, the interpreter's state
//   around foreign deleters, which `ManagedTensor`'s `Drop` calls.

mod adopt;
mod capsule;
mod error;
mod export;
mod import;
pub mod model;
mod module;
mod npyffi;
mod trampoline;

pub use export::Tensor;
pub use import::{ImportOptions, from_dlpack, from_dlpack_with};
pub use model::ModelView;
pub use module::{MODEL_STUB, TENSOR_STUB, add_to_module};

#[cfg(doc)]
use crate::{DLPackArray, Error, ManagedTensor, TensorBatch};
#[cfg(doc)]
use pyo3::{FromPyObject, IntoPyObject};
