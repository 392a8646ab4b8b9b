//! Zero-copy [DLPack](https://dmlc.github.io/dlpack/latest/) exchange for
//! [`ndarray`](https://docs.rs/ndarray): share arrays with NumPy, PyTorch, JAX and other
//! Rust frameworks at the cost of a pointer hand-off, without leaks, double frees or
//! undefined behaviour, whatever a foreign producer sends.
//!
#![cfg_attr(all(feature = "ndarray", feature = "derive"), doc = "```")]
#![cfg_attr(not(all(feature = "ndarray", feature = "derive")), doc = "```ignore")]
//! use dlpack_core::{FromDLPack, ManagedTensor, TensorBatch, ToDLPack};
//! use ndarray::{Array1, Array2, Ix2};
//!
//! // One array: the buffer moves into the tensor, nothing is copied.
//! let a = Array2::<f32>::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f32);
//! let ptr = a.as_ptr();
//! let t: ManagedTensor = a.to_dlpack()?;
//! assert_eq!(t.as_array::<f32, Ix2>()?.dim(), (3, 4)); // checked, borrowed view
//! let back = Array2::<f32>::from_dlpack(t)?; // our own export comes back as it left
//! assert_eq!(back.as_ptr(), ptr);
//!
//! // A struct of arrays: named tensors, like a PyTorch `state_dict`.
//! #[derive(ToDLPack, FromDLPack)]
//! struct Linear {
//!     weight: Array2<f32>,
//!     bias: Array1<f32>,
//! }
//! #[derive(ToDLPack, FromDLPack)]
//! struct Model {
//!     fc1: Linear,
//!     fc2: Linear,
//!     #[dlpack(skip)]
//!     steps: u64,
//! }
//! let layer = |i, o| Linear { weight: Array2::zeros((o, i)), bias: Array1::zeros(o) };
//! let model = Model { fc1: layer(4, 8), fc2: layer(8, 2), steps: 10 };
//! let batch: TensorBatch = model.to_dlpack()?;
//! assert_eq!(
//!     batch.names().collect::<Vec<_>>(),
//!     ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
//! );
//! let model = Model::from_dlpack(batch)?; // strict: missing/extra/mismatched are errors
//! assert_eq!(model.fc2.weight.dim(), (2, 8));
//! assert_eq!(model.steps, 0); // skipped fields come back as `Default`
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! # Where things are
//!
//! | module | what it holds |
//! |---|---|
//! | [`ffi`] | the `#[repr(C)]` DLPack 1.3 ABI, versioned and legacy: data only |
//! | `dtype`, `device` | [`DataType`], [`Element`] (and [`for_each_element!`]), [`Device`] |
//! | `tensor` | [`ManagedTensor`], the one owning handle: `abi` (the two C structs behind one trait, and the one raw delete), `header` (the single-allocation header of our exports, and how it is recognised), `producer` ([`ManagedTensor::from_buffer`], [`ManagedTensor::from_owner`]), `adapter` (one ABI wrapped in the other), `bytes` ([`ByteSpan`], the layout check every bridge makes, and a tensor's bytes in C order) |
//! | `layout` | the layout engine: pure functions from shape/strides/offset to what ndarray accepts; `positions` (each distinct byte once) |
//! | `bridge::ndarray` | checked views (`as_array`), `DLPackArray`, and `ToDLPack`/`FromDLPack` for arrays (feature `ndarray`) |
//! | `bridge::dlpark` | the [`dlpark`] bridge (feature `dlpark`) |
//! | `bridge::burn` | [`burn`] flex tensors (feature `burn`): the allocation controller of imports |
//! | `bridge::safetensors` | weights on disk (feature `safetensors`): [`TensorBatch::read_safetensors`], `map_safetensors`, `write_safetensors`; `header` (the header, read as foreign input) |
//! | [`batch`], `traits` | [`TensorBatch`] of named tensors and its iterators, the [`ToDLPack`]/[`FromDLPack`] traits and their container impls |
//! | [`python`] | `__dlpack__` objects and imports (feature `pyo3`), by direction: `import` (`c_api`: a producer's C exchange table; `numpy`: NumPy arrays read in place), `export` (`tensor`: the class; `fastcall`: its `__dlpack__`; `c_api`: its C exchange table), over `npyffi` (NumPy's C layout), `capsule`, `adopt` (the one import policy), `trampoline` (every C entry point), `error`; the interpreter's state around foreign deleters is the crate-level `interpreter`, below `tensor` |
//! | `error` | [`Error`], [`Result`], [`ReadOnlyLegacyError`] |
//!
//! `unsafe` code lives in `tensor`, `bridge` and `python`, each behind a safe API.
//!
//! # Import safety
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
//!   holds the original array from writing it while a Rust view lives; do not do that,
//!   or import a copy. Nor can it survive what NumPy itself calls unsafe: replacing the
//!   memory of an array that others view (`a.resize(..., refcheck=False)`), or views
//!   made with `as_strided` that leave the buffer (a `__dlpack__` export trusts the
//!   same struct).
//! - Handing a tensor to a framework whose tensors are always writable (torch, through
//!   `dlpack-tch`) is a mutable view too: a shared or `READ_ONLY` tensor is copied once
//!   on the way, an exclusive one moves without a copy. burn's bytes are one slice: a
//!   layout whose elements leave gaps (bytes that are someone else's) is copied element
//!   by element on the way in.
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
//! # Features
//!
//! `ndarray` and `derive` are on by default; `half` adds `f16`/`bf16`, `complex` adds
//! `Complex<f32>`/`Complex<f64>`, `pyo3` the Python bridge, `dlpark` the dlpark bridge,
//! `burn` burn's flex tensors and `safetensors` weights on disk ([`safetensors`]).
//! With `--no-default-features` the crate is the bare ABI and ownership layer.
//!
// Links to items that only some features build: to the item where it exists, else to
// its page on docs.rs (built with every feature), so that the documentation builds with
// any set of features.
#![cfg_attr(feature = "dlpark", doc = "[`dlpark`]: crate::dlpark")]
#![cfg_attr(
    not(feature = "dlpark"),
    doc = "[`dlpark`]: https://docs.rs/dlpack-core/latest/dlpack_core/dlpark/index.html"
)]
#![cfg_attr(feature = "burn", doc = "[`burn`]: crate::burn")]
#![cfg_attr(
    not(feature = "burn"),
    doc = "[`burn`]: https://docs.rs/dlpack-core/latest/dlpack_core/burn/index.html"
)]
#![cfg_attr(feature = "pyo3", doc = "[`python`]: crate::python")]
#![cfg_attr(
    not(feature = "pyo3"),
    doc = "[`python`]: https://docs.rs/dlpack-core/latest/dlpack_core/python/index.html"
)]
#![cfg_attr(feature = "safetensors", doc = "[`safetensors`]: crate::safetensors")]
#![cfg_attr(
    not(feature = "safetensors"),
    doc = "[`safetensors`]: https://docs.rs/dlpack-core/latest/dlpack_core/safetensors/index.html"
)]
#![cfg_attr(
    feature = "safetensors",
    doc = "[`TensorBatch::read_safetensors`]: crate::TensorBatch::read_safetensors"
)]
#![cfg_attr(
    not(feature = "safetensors"),
    doc = "[`TensorBatch::read_safetensors`]: https://docs.rs/dlpack-core/latest/dlpack_core/struct.TensorBatch.html#method.read_safetensors"
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod batch;
mod bridge;
mod device;
mod dtype;
mod error;
pub mod ffi;
#[cfg(feature = "pyo3")]
mod interpreter;
#[cfg_attr(not(feature = "ndarray"), allow(dead_code))]
mod layout;
#[cfg(feature = "pyo3")]
#[cfg_attr(docsrs, doc(cfg(feature = "pyo3")))]
pub mod python;
mod tensor;
mod traits;

pub use batch::TensorBatch;
pub use device::Device;
pub use dtype::{DataType, Element};
pub use error::{Error, Result};
pub use tensor::{ByteSpan, ManagedTensor, ReadOnlyLegacyError};
pub use traits::{FromDLPack, LoadReport, ToDLPack};

#[cfg(feature = "ndarray")]
#[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
pub use bridge::ndarray::DLPackArray;

/// The `ndarray` this crate is built against, re-exported so that versions match.
#[cfg(feature = "ndarray")]
#[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
pub use ndarray;

/// Zero-copy hand-off between [`ManagedTensor`] and the owning handles of the
/// [`dlpark`](https://docs.rs/dlpark/0.10) crate (version 0.10), so that a tensor made
/// here reaches dlpark's candle, image, safetensors and cudarc integrations, and a
/// tensor made there reaches ndarray through `ManagedTensor::as_array`.
///
/// Both crates mirror the same C structs, so a conversion moves one pointer and its
/// ownership: `into_raw` on one side, `from_raw` on the other. No data, shape or
/// strides are copied, and the producer's deleter still runs exactly once, when the
/// last owner drops the handle.
///
/// | From | To | How | Safe? |
/// |---|---|---|---|
/// | [`ManagedTensor`] | [`dlpark::versioned::Dlpack`](::dlpark::versioned::Dlpack) | [`ManagedTensor::into_dlpark`], `From` | yes |
/// | [`ManagedTensor`] | [`dlpark::legacy::Dlpack`](::dlpark::legacy::Dlpack) | [`ManagedTensor::into_dlpark_legacy`], `TryFrom` | yes; refuses `READ_ONLY` |
/// | [`dlpark::versioned::Dlpack`](::dlpark::versioned::Dlpack) | [`ManagedTensor`] | [`ManagedTensor::from_dlpark`], [`TryFromDlpack`](::dlpark::TryFromDlpack) | `unsafe` |
/// | [`dlpark::legacy::Dlpack`](::dlpark::legacy::Dlpack) | [`ManagedTensor`] | [`ManagedTensor::from_dlpark_legacy`], [`TryFromDlpack`](::dlpark::TryFromDlpack) | `unsafe` |
///
/// A tensor keeps its pointer when the target has the same ABI. Otherwise it is wrapped
/// in a small header of the other ABI whose deleter calls the original one (as
/// [`ManagedTensor::into_raw`] and [`ManagedTensor::into_raw_legacy`] do), and such a
/// wrapper is removed again when the tensor goes back to its original ABI.
///
/// # Why the import is `unsafe`
///
/// A `ManagedTensor` promises that its data pointer is valid for the described
/// elements, so its checked views (`ManagedTensor::as_array`) are safe. A dlpark
/// handle promises less: `dlpark::Managed::from_raw` only requires a readable header
/// with readable shape and strides, and `dlpark::python::from_dlpack` (a safe
/// function) accepts any capsule a Python object returns. dlpark therefore makes all
/// of its own data accessors `unsafe`, and the import into a `ManagedTensor`, after
/// which data access is safe, has to be `unsafe` too. The export needs no such
/// promise: every `ManagedTensor` already satisfies what dlpark asks of a handle.
///
#[cfg_attr(feature = "ndarray", doc = "```")]
#[cfg_attr(not(feature = "ndarray"), doc = "```ignore")]
/// use dlpack_core::{ManagedTensor, ToDLPack};
/// use dlpark::TryFromDlpack;
/// use ndarray::{Array2, ArrayViewD};
///
/// let a = Array2::<f32>::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f32);
/// let ptr = a.as_ptr();
/// let tensor: ManagedTensor = a.to_dlpack()?;
///
/// // Safe: ownership moves to dlpark, nothing is copied.
/// let dlpack: dlpark::versioned::Dlpack = tensor.into();
/// // SAFETY: a tensor exported by this crate satisfies DLPack's memory, lifetime and
/// // synchronization requirements, and nothing else accesses its data.
/// let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&dlpack, ()) }.unwrap();
/// assert_eq!(view.as_ptr(), ptr);
///
/// // And back.
/// // SAFETY: as above: the handle still holds this crate's export.
/// let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }?;
/// assert_eq!(tensor.data_ptr().cast::<f32>().cast_const(), ptr);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Thread safety
///
/// Both handles are `Send` and `Sync`, under the same rule: the deleter may run on
/// any thread. A conversion keeps that guarantee in either direction.
#[cfg(feature = "dlpark")]
#[cfg_attr(docsrs, doc(cfg(feature = "dlpark")))]
pub mod dlpark {}

/// [`ToDLPack`] and [`FromDLPack`] for burn's flex CPU tensors
/// ([`burn_flex::FlexTensor`], burn 0.22), zero-copy both ways.
///
/// | direction | memory | the [`ManagedTensor`] or tensor is |
/// |---|---|---|
/// | `FlexTensor::to_dlpack` | the tensor's `Arc<Bytes>`, shared with the header | writable and exclusive when that was the only reference; `READ_ONLY` and shared otherwise (burn never writes into shared bytes) |
/// | `FlexTensor::from_dlpack` | the producer's memory, in an allocation controller that owns the `ManagedTensor`; a copy of the elements when they leave gaps in it | any layout: negative, zero or permuted strides, offsets |
///
/// burn's bytes are one slice, so an import lends the producer's memory only when the
/// tensor's elements fill it from their lowest to their highest byte: the bytes between
/// the elements of a column, say, belong to someone else, who may be writing them, so
/// such a layout is copied element by element (its deleter runs then).
/// burn writes in place only into bytes it holds alone, and asks their controller for
/// mutable memory first. The controller of an import lends the producer's memory only
/// when the tensor is [exclusive](ManagedTensor::is_exclusive), writable and has no
/// two elements at one address; otherwise (a `READ_ONLY` tensor, a Python import, a
/// broadcast) the first write copies it, and the producer's deleter runs then, once.
/// In every other case it runs when burn drops the last tensor that uses the bytes.
///
/// Checked on import: the dtype (every float, integer and `bool` type both have; a
/// `bool` must hold 0 or 1), a CPU-accessible device ([`Error::UnsupportedDevice`]
/// otherwise), and the layout (extents, overflow, NULL data, element alignment, which
/// burn needs). On export, the flex layout itself, which burn does not validate: every
/// element must lie inside the tensor's bytes ([`Error::OutOfBuffer`]). Quantized and
/// `Flex32` tensors are an [`Error::Framework`].
///
/// burn's own `Tensor<D, K>` dispatches at run time; its flex primitive is the
/// `FlexTensor`. With burn's `flex` and `extension` features:
///
/// ```ignore
/// use burn::backend::Flex;
/// use burn::tensor::{Device, Tensor};
/// use dlpack_core::{FromDLPack, ToDLPack};
///
/// let t = Tensor::<2>::from_data([[1.0f32, 2.0], [3.0, 4.0]], &Device::flex());
/// let flex = t.try_into_primitive::<Flex>().expect("a flex tensor");
/// let managed = flex.to_dlpack()?; // zero-copy
/// let back = Tensor::<2>::from_primitive::<Flex>(burn_flex::FlexTensor::from_dlpack(managed)?);
/// ```
///
/// The impls are on `FlexTensor`, not on `Tensor`, because the crate that defines
/// `Tensor` (burn-tensor 0.22) has an optional dependency on tch 0.22, which cannot
/// share a lockfile with the tch 0.26 of `dlpack-tch` (both link the native `tch`
/// library): no workspace or application can hold burn-tensor 0.22 and tch 0.26
/// together. The derive accepts `FlexTensor` fields like arrays.
///
/// This feature needs Rust 1.95, as burn does.
#[cfg(feature = "burn")]
#[cfg_attr(docsrs, doc(cfg(feature = "burn")))]
pub mod burn {}

/// Weights on disk (feature `safetensors`): a [`TensorBatch`] read from, mapped from and
/// written to a safetensors file, the format every framework reads and writes. A
/// `#[derive(ToDLPack, FromDLPack)]` model saves and loads by name, strictly, as with a
/// PyTorch `state_dict`.
///
/// | method | what it does | cost |
/// |---|---|---|
/// | [`TensorBatch::read_safetensors`] | each tensor read straight into a buffer of its own, typed where Rust has the element type | one copy from the page cache; an owned ndarray field takes the buffer without another |
/// | [`TensorBatch::map_safetensors`] (`unsafe`) | one private (copy-on-write) mapping, every tensor a view into it, exclusive and writable (writes never reach the file) | O(header); pages load when touched |
/// | [`TensorBatch::write_safetensors`] | every CPU tensor, in any layout, written in C order, streamed from its own memory to a temporary file renamed into place | one pass over the data |
///
/// [`TensorBatch::metadata`] is the file's `__metadata__`, read and written. Every dtype
/// safetensors 0.8 writes is carried bit for bit: `BOOL`, `U8`..`U64`, `I8`..`I64`,
/// `F16`, `BF16`, `F32`, `F64`, `C64`, and float8 (`F8_E4M3` is DLPack's
/// `kDLFloat8_e4m3fn`, `F8_E5M2` `kDLFloat8_e5m2`, the `FNUZ` and `E8M0` ones likewise),
/// float6 and float4 (packed, as DLPack 1.1 describes sub-byte types). A tensor of a
/// type Rust has no element for is still carried, written, and exported to Python (a
/// view of it is a typed error naming the dtype).
///
/// A file is foreign input: a header length beyond the file or the format's limit, a
/// header that is not UTF-8 JSON, a name given twice, an unknown dtype, offsets out of
/// order, overlapping or leaving gaps, byte lengths that do not match the shape, element
/// counts that overflow, a truncated data section, invalid `bool` bytes: each is an
/// [`Error::InvalidFile`] naming the file and the tensor, never a panic or a read
/// outside the file, and an I/O failure is an [`Error::Io`] with the path.
///
#[cfg_attr(
    all(feature = "ndarray", feature = "derive", feature = "safetensors"),
    doc = "```"
)]
#[cfg_attr(
    not(all(feature = "ndarray", feature = "derive", feature = "safetensors")),
    doc = "```ignore"
)]
/// use dlpack_core::{FromDLPack, TensorBatch, ToDLPack};
/// use ndarray::{Array1, Array2};
///
/// #[derive(ToDLPack, FromDLPack)]
/// struct Linear {
///     weight: Array2<f32>,
///     bias: Array1<f32>,
/// }
///
/// # let folder = tempfile::tempdir().unwrap();
/// # let path = folder.path().join("linear.safetensors");
/// let layer = Linear { weight: Array2::eye(3), bias: Array1::zeros(3) };
/// let mut batch = layer.to_dlpack()?;
/// batch.metadata_mut().insert("format".into(), "pt".into());
/// batch.write_safetensors(&path)?;
///
/// // Owned arrays: each field keeps the buffer its tensor was read into.
/// let layer = Linear::from_dlpack(TensorBatch::read_safetensors(&path)?)?;
/// assert_eq!(layer.weight, Array2::<f32>::eye(3));
///
/// // Mapped: O(header), pages load when touched; writes go to private pages.
/// // SAFETY: nothing modifies or truncates the file while the layer lives.
/// let batch = unsafe { TensorBatch::map_safetensors(&path) }?;
/// assert_eq!(batch.metadata()["format"], "pt");
/// let mut layer = Linear::from_dlpack(batch)?;
/// layer.bias[0] = 1.0;
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// With the `pyo3` feature the batch is a Python `dict` of tensors that PyTorch, NumPy
/// and JAX take without a copy: a mapped file gives PyTorch writable tensors over
/// private pages, as `safetensors.torch.load_file` does.
///
/// ```ignore
/// #[pyfunction]
/// fn load(path: std::path::PathBuf) -> PyResult<TensorBatch> {
///     Ok(TensorBatch::read_safetensors(path)?)
/// }
/// ```
#[cfg(feature = "safetensors")]
#[cfg_attr(docsrs, doc(cfg(feature = "safetensors")))]
pub mod safetensors {}

/// Derives [`ToDLPack`] for a struct of arrays: it exports as a [`TensorBatch`] with one
/// tensor per array, named after the fields as a PyTorch `state_dict` would name them.
///
/// Field attributes: `#[dlpack(rename = "name")]`, `#[dlpack(skip)]`,
/// `#[dlpack(flatten)]` (nest without a prefix), and `#[dlpack(with = "module")]`, which
/// exchanges a field of a type of your own (or of another crate, such as
/// `dlpack_tch::tensor` for `tch::Tensor`) through two functions of `module`:
///
/// ```ignore
/// pub fn to_dlpack_into(value: T, prefix: &str, batch: &mut TensorBatch) -> Result<()>;
/// pub fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<T>;
/// ```
///
/// where `prefix` is the field's full name (`"fc1.weight"`). Container attributes:
/// `#[dlpack(crate = "path")]`, `#[dlpack(bound = "T: Trait")]`.
#[cfg(feature = "derive")]
#[cfg_attr(docsrs, doc(cfg(feature = "derive")))]
pub use dlpack_derive::ToDLPack;

/// Derives [`FromDLPack`] for a struct of arrays: it imports from a [`TensorBatch`],
/// strictly (missing, unexpected and mismatched tensors are errors naming the tensor).
///
/// Attributes as for [`ToDLPack`](derive@ToDLPack); `skip`ped fields are filled with
/// `Default::default()`.
#[cfg(feature = "derive")]
#[cfg_attr(docsrs, doc(cfg(feature = "derive")))]
pub use dlpack_derive::FromDLPack;

#[doc(hidden)]
pub mod __private;

/// This crate's README, its examples compiled and run as doctests.
#[cfg(all(doctest, feature = "derive", feature = "ndarray"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
