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
//!   array is read in place (see "NumPy arrays" below), with no call at all.
//! - A [`Tensor`] publishes the C exchange API too (`__dlpack_c_exchange_api__`), so
//!   C-level consumers import it without a Python call, and converts with
//!   `np.asarray(t)` (`__array__`) and `jnp.asarray(t)` (`__jax_array__`), without a
//!   copy.
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
//! - `stream` must be `None` for a CPU tensor: anything else is a `RuntimeError`, as
//!   NumPy 2 raises (PyTorch accepts `-1` and fails an assertion otherwise; the
//!   standard names no exception). For a device tensor it is an integer that the
//!   standard allows for that device (CUDA: `-1`, `1`, `2` or a stream handle, not
//!   `0`; ROCm: `-1`, `0` or a handle; other devices: none), else a `BufferError`. No
//!   work follows: the producer of a device tensor made its data ready before wrapping
//!   it (the contract of `from_raw` and `from_owner`), so it is ready on every stream.
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
//! [crate documentation](crate#import-safety)), through one function that every path
//! calls (a capsule, a producer's C exchange table, our table's "to object" entry, a
//! NumPy array read in place): a
//! tensor imported from Python is *shared*, since the producer keeps its own handle
//! (the NumPy array, the torch tensor, a [`Tensor`] exported twice), so it gives
//! read-only views only and `as_array_mut` is an [`Error::NotExclusive`]. It is
//! exclusive only when its producer flagged it `IS_COPIED` (a copy made for this
//! consumer alone: NumPy's and this crate's `copy=True`) or when it comes from our own
//! table's allocator. Asking for `copy=True` proves nothing by itself (PyTorch copies
//! without the flag, and a wrapper, or Python code that replaced a method, may ignore
//! the keyword), so such an import stays shared unless flagged. Like
//! every DLPack consumer, an import trusts the protocol: a capsule named
//! `dltensor_versioned` or `dltensor` (or a table's entry) must hold a valid managed
//! tensor whose memory stays valid until its deleter runs; the header is checked, and
//! views check layout, dtype and device.
//!
//! Capsules are consumed under the capsule's lock (a critical section), so one capsule
//! imported by this crate from several threads at once goes to exactly one of them. On
//! a build with a GIL that excludes every other consumer too; on a free-threaded build
//! it excludes only consumers that take the same lock (not, say, PyTorch's own
//! `from_dlpack`): do not hand one capsule to two consumers at once.
//!
//! A foreign deleter may run Python code: dropping a tensor imported from Python on a
//! thread attached to the interpreter keeps the interpreter's exception state as it
//! was, and an exception that a deleter leaves set is reported as unraisable. On a
//! thread that is not attached (whether this is so is read from the thread's own
//! state, which stays right with subinterpreters), the deleter runs as it is and takes
//! the GIL itself if it needs Python, as NumPy's and PyTorch's do. Our own headers'
//! deleters never touch Python. Under the stable ABI that state is read through a
//! function CPython exports but the stable ABI does not declare, found at run time on
//! Unix; where it cannot be found, dropping attaches to the interpreter, so a thread
//! that drops a foreign import while another holds the GIL and waits for it blocks (as
//! it would in NumPy's own deleter).
//!
//! # NumPy arrays
//!
//! NumPy has no C exchange table, so its `__dlpack__` would cost a Python call, a
//! capsule and a header allocated and freed under the GIL per import. Instead, an
//! import of a `numpy.ndarray` reads the array's own C struct, as NumPy's C API defines
//! it (the fields NumPy 1.x and 2.x share), found at run time through NumPy's own API
//! capsule in `sys.modules`: nothing is linked, NumPy is never imported by this crate,
//! and without NumPy nothing changes. The tensor is one header of ours holding a strong
//! reference to the array, released on any thread (a thread that is not attached
//! attaches to release it through CPython's GIL-state API, as NumPy's own deleter
//! does, even inside a call into an extension where foreign code released the GIL).
//!
//! It is exactly what `__dlpack__` would give: an array is read in place only when
//! NumPy's `__dlpack__` would export it as it is (booleans, integers, `float16/32/64`,
//! `complex64/128` in native byte order; strides in whole elements, divided as NumPy
//! divides them; not an array NumPy made from a DLPack tensor, whose device NumPy
//! reports); `READ_ONLY` when the array is not writeable. The header is versioned
//! (DLPack 1.3) and always carries strides, as DLPack 1.2 asks: on NumPy 1.x, whose
//! `__dlpack__` answers with a legacy header without strides for contiguous arrays and
//! refuses read-only arrays, the import describes the same elements at the same
//! addresses, and reads read-only arrays, flagged. Anything else (object, string,
//! structured, datetime, `longdouble`, byte-swapped data, strides that are not whole
//! elements, ...) goes through `__dlpack__`, so NumPy decides and its own errors are
//! raised. A subclass is read in place only while `obj.__dlpack__` is NumPy's own
//! method bound to `obj` (`np.matrix`, `np.memmap`, a subclass that does not override
//! it); a `__dlpack__` of its own, an instance attribute or a `__getattribute__` that
//! answers otherwise is called. NumPy's ABI version is checked once (1.x from 1.25, or
//! 2.x); any other NumPy, PyPy and free-threaded builds use `__dlpack__`. Options
//! ([`from_dlpack_with`]) always go through `__dlpack__`.
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
//! fn scale(mut x: DLPackArray<f32, Ix1>, factor: f32) -> PyResult<()> {
//!     // SAFETY: this function runs no Python code and keeps the interpreter while the
//!     // view lives, and its callers pass NumPy arrays or torch tensors that autograd
//!     // does not track, never JAX arrays.
//!     unsafe { x.assume_exclusive() }?;
//!     x.view_mut()?.mapv_inplace(|v| v * factor);
//!     Ok(())
//! }
//! ```
//!
//! The contract ([`DLPackArray::assume_exclusive`]) rules out JAX arrays (immutable by
//! contract, though their legacy capsules cannot say so) and torch tensors that
//! autograd tracks. Those import as any other for reading: torch's own `__dlpack__`
//! refuses a tensor that requires grad, its C exchange API does not, and a shared view
//! of one only reads; writing one through this door gives silently wrong gradients.
//!
//! # The DLPack C exchange API
//!
//! DLPack 1.3 lets a Python type publish a table of C functions as
//! `type(obj).__dlpack_c_exchange_api__` (a capsule named `"dlpack_exchange_api"`).
//!
//! - **Import.** [`from_dlpack`] (and `extract`) looks the table up once per type (a
//!   small cache that holds the type and the capsule; an import in progress holds the
//!   capsule too, so an entry evicted by another thread meanwhile stays alive), walks
//!   its `prev_api` chain to major version 1, and takes the tensor with one call of
//!   `managed_tensor_from_py_object_no_sync`. The table counts only where the standard
//!   ties it to the type: in the own `__dict__` of a type of `type(obj).__mro__`, read
//!   through `type`'s own descriptors (no metaclass `__getattr__` or property runs). An
//!   error of that look-up (a `KeyboardInterrupt`, a `MemoryError`) is raised, not
//!   cached. A type without a usable table (none, another object, another name,
//!   another major version, a NULL entry) is imported by `__dlpack__`, as is a tensor
//!   anywhere but in ordinary host memory (the table's calls never synchronise
//!   streams, and pinned or managed memory may still be written by a device;
//!   `__dlpack__` synchronises), and a complex one (PyTorch's table exports a
//!   conjugated view without resolving it, where its `__dlpack__` refuses it). An entry that refuses the object (-1) leaves the
//!   answer to `__dlpack__`, so that a failure is the protocol's own exception whatever
//!   the path (its own exception, or a `SystemError` if it set none, when the object
//!   has no `__dlpack__`; a `KeyboardInterrupt` or another exception that is not an
//!   `Exception` is raised at once). An entry that succeeds with an exception set, or
//!   with no tensor, is an error. Every tensor an entry hands over, on success or not,
//!   is released exactly once, a `PanicException` it left set included (resumed as a
//!   panic after the tensor is owned). [`from_dlpack_with`] with options always calls
//!   `__dlpack__`, whose keywords carry them.
//! - **Why not the borrowing entry.** `dltensor_from_py_object_no_sync` fills a
//!   `DLTensor` that is valid "until control returns to Python", with no owner and no
//!   deleter. A safe Rust view cannot be held to that: the code that holds it may run
//!   Python code (directly, or by releasing the interpreter to other threads) that
//!   frees or replaces the producer's storage, which the owned path survives (PyTorch's
//!   owned export keeps a reference to the storage). The owned path costs one header
//!   and is already faster than a borrowed `__dlpack__` call.
//! - **Export.** [`Tensor`]'s table answers `managed_tensor_from_py_object_no_sync`
//!   (a new versioned header over the data, as `__dlpack__(max_version=(1, 3))`
//!   gives), `dltensor_from_py_object_no_sync` (the tensor's own description, which
//!   lives as long as the object; a `READ_ONLY` tensor is refused with `BufferError`,
//!   since a `DLTensor` has no flags, and strides are always given, C-contiguous ones
//!   kept by the object when the producer gave none), `managed_tensor_to_py_object_no_sync`
//!   (a `Tensor` that takes the tensor over, by the one import policy: shared unless
//!   `IS_COPIED` or from our allocator), `managed_tensor_allocator` (a zeroed, C-order
//!   CPU tensor whose deleter frees it once; errors go to the caller's `SetError`) and
//!   `current_work_stream` (NULL: this crate launches no device work). Every entry
//!   catches panics and reports errors as the standard says (a Python exception and
//!   -1); none of them unwinds into C.
//!
//! # Layout of this module
//!
//! - `import`: [`from_dlpack`] and `FromPyObject` for tensors and batches; `c_api`
//!   (imports through a producer's C exchange table), `numpy` (NumPy arrays read in
//!   place: the subclass rule and the read policy);
//! - `npyffi`: NumPy's C layout (structs, flags, type numbers) and its API table, found
//!   and checked at run time;
//! - `export`: what a `__dlpack__` call asks for, and the header it gets; `tensor` (the
//!   [`Tensor`] class, and `ManagedTensor`/`TensorBatch` into Python), `fastcall`
//!   (`Tensor.__dlpack__` as a vectorcall method, where the ABI has it), `c_api` (the
//!   C exchange table of [`Tensor`]);
//! - `adopt`: the one import policy, which every import path calls;
//! - `capsule`: capsule names, creation, destruction and consumption;
//! - `error`: [`Error`] to the exception NumPy raises;
//! - `trampoline`: how every C entry point runs Rust code (errors and panics raised as
//!   exceptions, nothing unwinding into C).

mod adopt;
mod capsule;
mod error;
mod export;
mod import;
mod npyffi;
mod trampoline;

pub use export::{TENSOR_STUB, Tensor, add_to_module};
pub use import::{ImportOptions, from_dlpack, from_dlpack_with};

#[cfg(doc)]
use crate::{DLPackArray, Error, ManagedTensor, TensorBatch};
#[cfg(doc)]
use pyo3::{FromPyObject, IntoPyObject};
