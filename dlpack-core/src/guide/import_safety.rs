//! Import safety: which imports give mutable views, and what each one trusts.
//!
//! One rule holds for every way a tensor enters this crate (raw pointers, Python,
//! dlpark, tch, burn, your own containers): **no safe code path yields a mutable view
//! of memory that another live handle can reach, and read-only views rely only on what
//! the DLPack protocol promises.** A [`ManagedTensor`] is therefore *exclusive* or
//! *shared* ([`ManagedTensor::is_exclusive`]). Path by path, what makes a tensor
//! exclusive, and what is trusted:
//!
//! | the tensor comes from | access | because (what is trusted) |
//! |---|---|---|
//! | an export of an owned `Array`, `ManagedTensor::from_buffer`, any copy this crate makes | exclusive | the tensor holds the only handle to its buffer (nothing trusted) |
//! | `unsafe` `from_raw`, `from_raw_legacy`, `from_owner`, `from_dlpark` | exclusive | the caller's promise (their `# Safety` sections) |
//! | `unsafe` `from_raw_shared` | shared | the caller's promise that the header is valid |
//! | a `Parameter`'s share (`TensorField::share`: a model field handed to Python) | shared, writable | the field still reads the buffer, and copies before its own writes; no other Rust handle of it exists |
//! | a burn `FlexTensor` (feature `burn`) | exclusive when no other burn tensor shares its bytes (the `Arc` is unique), else shared and `READ_ONLY` | burn's reference count |
//! | a tch tensor (`dlpack-tch`) | exclusive when the tensor was the only handle of its storage and the memory is torch's alone (its allocator made it, or `into_tch` handed it over without a copy), else shared | libtorch's reference counts, and its storage's allocator |
//! | Python: `from_dlpack`, `extract` (`ManagedTensor`, `DLPackArray`, `TensorBatch`), a raw capsule, a producer's C exchange table, our table's "to object" entry | shared | the protocol: the header is valid and the memory holds the elements until the deleter runs; the producer keeps its own handle (the NumPy array, the torch tensor, an object exported twice) |
//! | Python, a NumPy array read in place (no `__dlpack__` call: its own C struct, for the arrays NumPy's `__dlpack__` would export as they are) | shared, `READ_ONLY` when the array is not writeable | NumPy's C API: the struct describes the array's memory, which lives as long as the array (the tensor holds a reference to it) |
//! | Python, a tensor its producer flagged `IS_COPIED` | exclusive | the producer's flag: the standard makes a copy the consumer's alone |
//! | Python, `from_dlpack_with(.., ImportOptions::new().copy(true))` | exclusive when flagged `IS_COPIED` (NumPy, this crate), else shared (PyTorch's copies are not flagged) | the flag only: the request proves nothing, since a wrapper, or Python code that replaced a method, may ignore it |
//! | Python, our table's allocator, handed back to "to object" | exclusive when the header still describes memory inside the allocation, else shared | the buffer was zeroed for that caller alone |
//!
//! - `as_array_mut` and `DLPackArray::view_mut` refuse a shared tensor
//!   ([`Error::NotExclusive`]) as they refuse a `READ_ONLY` one ([`Error::ReadOnly`]).
//!   Import a copy instead, or, if you know that nothing else uses the data, say so with
//!   the `unsafe` [`ManagedTensor::assume_exclusive`].
//! - `as_array` reads either kind: the protocol promises that the memory holds the
//!   described elements until the deleter runs. Like every DLPack consumer (and like
//!   rust-numpy's borrowed arrays), a shared import cannot stop the Python code that
//!   holds the original array from writing it while a Rust view lives. Such a write is
//!   a data race, undefined behaviour in Rust reached from safe code, whether it comes
//!   from another thread (a kernel that released the interpreter lock; any thread on a
//!   free-threaded build) or from Python code that the Rust function runs while it holds
//!   the view (a callback, a finalizer that an allocation's garbage collection runs): do
//!   not write an array from Python while Rust views it, or import a copy (the copy is
//!   made before the function reads; a copy made in Rust is itself a read). Nor can it survive what frees or moves the memory under a NumPy
//!   view too, since a live import is such a view: replacing the memory of an array
//!   that others view (`a.resize(..., refcheck=False)`, or a resize of the array's
//!   `base` that owns the memory), `a.__setstate__(...)` (which unpickling calls, and
//!   which gives an existing array new memory), or views made with `as_strided` that
//!   leave the buffer (a `__dlpack__` export trusts the same struct). Torch frees or
//!   moves a tensor's memory the same way, and does not refuse it under an export:
//!   `t.resize_(...)`, `t.set_(...)`, `t.untyped_storage().resize_(0)`.
//! - Python code can run inside a `#[pyfunction]` before its body: PyO3 extracts the
//!   arguments in order, and a later argument's conversion may call the caller's code
//!   (`__float__`, `__index__`, a mapping's `items`), and the extraction of a typed
//!   array runs Python code too (`__dlpack__`, torch's `requires_grad`): any of it
//!   could resize an array imported by an earlier argument. Make the array a function
//!   writes (or reads while others convert) its last argument, with no typed array
//!   argument after it.
//! - Handing a tensor to a framework whose tensors are always writable (torch, through
//!   `dlpack-tch`) is a mutable view too: a shared or `READ_ONLY` tensor is copied once
//!   on the way, an exclusive one moves without a copy. So is handing one to Python,
//!   where PyTorch imports a `READ_ONLY` tensor as a writable one: a read-only tensor
//!   over memory this crate made (a shared `ArcArray`, a burn tensor with other
//!   handles) reaches every Python consumer as a copy (`Tensor::copies_read_only`;
//!   the `unsafe` `Tensor::new_unchecked` hands it over as it is). burn's bytes are
//!   one slice: a layout whose elements leave gaps (bytes that are someone else's) is
//!   copied element by element on the way in.
//! - Taking a tensor back without a copy (`Array::from_dlpack`, `DLPackArray::into_owned`,
//!   [`ManagedTensor::into_owner`]) works only for headers this crate made, recognised
//!   by a property no copy of a header has (`manager_ctx` holds the header's own address,
//!   and the deleter is this crate's): their owner is the only holder of the buffer.
//! - A `bool` view reads every byte of the tensor once, in time that follows the bytes
//!   between its lowest and highest element, never its element count (a broadcast of
//!   2^40 elements, or overlapping windows, cost their memory).
//! - Anything a producer gets wrong, and anything too big to copy, is a typed [`Error`]
//!   (an allocation that fails is [`Error::AllocationFailed`]), never a panic or an
//!   abort, and the rejected tensor's deleter runs exactly once.
//!
//! Tracking borrows per buffer, as rust-numpy does between Rust extensions, would not
//! be enough here: it sees Rust handles only, while the handle that shares a Python
//! import's memory is the Python array itself. Refusing mutable views of shared
//! imports, with a copy as the safe way to write, is the rule that holds for every
//! producer.
//!
//! # Without the interpreter lock
//!
//! PyO3 declares every `#[pymodule]` free of the GIL unless it says otherwise, so an
//! extension built on this crate for a free-threaded CPython (3.14t) runs its threads
//! at once. Nothing here relies on the interpreter lock for exclusion or ordering; each
//! place that would, and what makes it sound without it:
//!
//! | place | what replaces the lock |
//! |---|---|
//! | process-wide caches: torch's objects, the C exchange tables' helpers, interned names, the `Tensor` class's `__dlpack__` descriptor | PyO3's `PyOnceLock` (a thread-safe once-cell that releases the interpreter while it waits) or `std::sync::OnceLock`; what they keep is immutable (static types, tuples, interned strings) or a strong reference |
//! | the cache of foreign C exchange tables, by type | a `std::sync::Mutex`, under which no Python code runs and no reference is dropped; strong references to the type and its capsule, so that an address is never reused while cached |
//! | NumPy's C API table and arrays read in place | not used on a free-threaded build (NumPy's struct may change under another thread): NumPy arrays go through `__dlpack__` there, as every producer's |
//! | a model's borrows (`&self`, `&mut self` methods, setters, `load_state_dict`) | PyO3's borrow flag, an atomic on every build: a `&mut self` call beside any other call of the object is the "already borrowed" `RuntimeError`, on a free-threaded build as soon as two calls meet |
//! | a model's class attributes, installed at a field's first read | two threads may both install one; each installs an equal descriptor, and CPython locks a type's dictionary while it changes |
//! | the `Tensor` class's state | the object is frozen: an `Arc` of the tensor and a flag set when it is made; its C-contiguous strides, made at the first C borrow, are a `OnceLock` whose value never moves while the object lives |
//! | `__dlpack__` and the C exchange entries | every entry runs on an attached thread; what an export reads is immutable (the tensor's header) or owned (a new header, a new capsule) |
//! | capsules | a destructor runs on whichever attached thread frees the capsule; this crate consumes a capsule (checks and renames it) under the capsule's lock, a critical section, so one capsule imported from several threads goes to one of them; a consumer that takes no such lock (PyTorch's own `from_dlpack`) is not excluded: do not hand one capsule to two consumers at once |
//! | deleters and releases of Python objects | run on any thread: attached first where needed (the GIL-state API, which attaches on a free-threaded build), the reference released with the exception state kept, never on a guess that another reference outlives it |
//! | mappings read as `state_dict`s or batches | items taken as new references (`PyDict_GetItemRef`, a fresh list of items): another thread changing the mapping meanwhile changes what is read, never frees what is held |
//!
//! What no lock can give on any build is the rule above for shared imports: Python
//! code writing an array while Rust reads it is a data race. A free-threaded build only
//! makes it easier to reach.

#[cfg(doc)]
use crate::{Error, ManagedTensor};
