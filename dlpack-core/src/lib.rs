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
//! // Strict: missing or unexpected names, a wrong dtype or rank are errors (shapes are
//! // taken as they come; `load_dlpack` into a built model checks them too).
//! let model = Model::from_dlpack(batch)?;
//! assert_eq!(model.fc2.weight.dim(), (2, 8));
//! assert_eq!(model.steps, 0); // skipped fields come back as `Default`
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! # Guides
//!
//! - **Save and load weights in Rust**: safetensors files and sharded Hugging Face
//!   checkpoints, read, mapped and written: [`safetensors`]; saving in the middle of
//!   training and going on with the same buffers: [`ToDLPack`] ("Keeping the value").
//! - **Write a Python extension** whose functions take and return NumPy, PyTorch and
//!   JAX arrays without a copy: [`python`], and `examples/python-extension` in the
//!   repository, a complete one to copy.
//! - **Keep a model in Rust as a Python object** (its tensors as zero-copy attributes,
//!   PyTorch's `state_dict` and `load_state_dict`, Rust methods on the same memory):
//!   [`pymodel`], and the sharing rule in [`python::model`].
//! - **Write in place** into a caller's array: [`python`] ("Writing into a caller's
//!   array, in place"); which imports may be written, and what each one trusts:
//!   [`guide::import_safety`].
//! - **Errors**: every failure is an [`Error`] variant, never a panic; each variant's
//!   documentation names the Python exception it becomes.
//! - Other Rust frameworks: [`dlpark`] (its candle, image and cudarc integrations),
//!   [`burn`] (flex tensors), and tch-rs through the `dlpack-tch` crate.
//! - **Arrow columns** (arrow-rs arrays, record batches, IPC files; in Python pyarrow,
//!   Polars, `datasets`, Ray Data) as tensors without a copy, and back: [`arrow`].
//! - Your own containers: [`ManagedTensor::from_buffer`] and
//!   [`ManagedTensor::from_owner`].
//!
//! Contributors: the crate's layers, where each piece lives, and where a test goes are
//! in `ARCHITECTURE.md` and `tests/README.md` in the repository.
//!
//! # Features
//!
//! `ndarray` and `derive` are on by default; `half` adds `f16`/`bf16`, `complex` adds
//! `Complex<f32>`/`Complex<f64>`, `pyo3` the Python bridge, `dlpark` the dlpark bridge,
//! `burn` burn's flex tensors, `safetensors` weights on disk ([`safetensors`]) and
//! `arrow` Arrow columns ([`arrow`]).
//! With `--no-default-features` the crate is the bare ABI and ownership layer. A
//! method whose feature is off does not exist (E0599, "no method named ... found"): the
//! README's feature table says which feature brings what. To read the pages locally,
//! build dlpack-core's alone with the features you read about, for a Python extension
//! `cargo doc -p dlpack-core --no-deps --features pyo3,safetensors --open`; links to
//! the pages of the features left out point at docs.rs.
//!
// Links to items that only some features build: to the item where it exists, else to
// its page on docs.rs (built with every feature), so that the documentation builds with
// any set of features.
#![cfg_attr(feature = "dlpark", doc = "[`dlpark`]: crate::guide::dlpark")]
#![cfg_attr(
    not(feature = "dlpark"),
    doc = "[`dlpark`]: https://docs.rs/dlpack-core/latest/dlpack_core/guide/dlpark/index.html"
)]
#![cfg_attr(feature = "burn", doc = "[`burn`]: crate::guide::burn")]
#![cfg_attr(
    not(feature = "burn"),
    doc = "[`burn`]: https://docs.rs/dlpack-core/latest/dlpack_core/guide/burn/index.html"
)]
#![cfg_attr(feature = "pyo3", doc = "[`python`]: crate::python")]
#![cfg_attr(
    not(feature = "pyo3"),
    doc = "[`python`]: https://docs.rs/dlpack-core/latest/dlpack_core/python/index.html"
)]
#![cfg_attr(
    all(feature = "pyo3", feature = "derive"),
    doc = "[`pymodel`]: crate::pymodel"
)]
#![cfg_attr(
    not(all(feature = "pyo3", feature = "derive")),
    doc = "[`pymodel`]: https://docs.rs/dlpack-core/latest/dlpack_core/attr.pymodel.html"
)]
#![cfg_attr(feature = "pyo3", doc = "[`python::model`]: crate::python::model")]
#![cfg_attr(
    not(feature = "pyo3"),
    doc = "[`python::model`]: https://docs.rs/dlpack-core/latest/dlpack_core/python/model/index.html"
)]
#![cfg_attr(feature = "arrow", doc = "[`arrow`]: crate::arrow")]
#![cfg_attr(
    not(feature = "arrow"),
    doc = "[`arrow`]: https://docs.rs/dlpack-core/latest/dlpack_core/arrow/index.html"
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

#[cfg(feature = "arrow")]
#[cfg_attr(docsrs, doc(cfg(feature = "arrow")))]
pub mod arrow;
pub mod batch;
mod bridge;
mod device;
mod dtype;
mod error;
pub mod ffi;
pub mod guide;
#[cfg(feature = "pyo3")]
mod interpreter;
#[cfg_attr(not(feature = "ndarray"), allow(dead_code))]
mod layout;
#[cfg(feature = "pyo3")]
#[cfg_attr(docsrs, doc(cfg(feature = "pyo3")))]
pub mod python;
#[cfg(feature = "safetensors")]
#[cfg_attr(docsrs, doc(cfg(feature = "safetensors")))]
pub mod safetensors;
mod tensor;
mod traits;

pub use batch::TensorBatch;
pub use device::Device;
pub use dtype::{DataType, Element};
pub use error::{Error, Result};
pub use tensor::{ByteSpan, ManagedTensor, ReadOnlyLegacyError};
pub use traits::{EmptyContainer, FromDLPack, LoadReport, ToDLPack};

#[cfg(feature = "ndarray")]
#[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
pub use bridge::ndarray::{
    DLPackArray, Parameter, Parameter0, Parameter1, Parameter2, Parameter3, Parameter4, Parameter5,
    Parameter6, ParameterD, zeros_aligned,
};

/// The `ndarray` this crate is built against, re-exported so that versions match.
#[cfg(feature = "ndarray")]
#[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
pub use ndarray;

/// Derives [`ToDLPack`] for a struct of arrays: it exports as a [`TensorBatch`] with one
/// tensor per array, named after the fields as a PyTorch `state_dict` would name them.
///
/// Field attributes: `#[dlpack(rename = "name")]` (PyTorch's `nn.Sequential` names its
/// layers `0`, `1`, ...: `#[dlpack(rename = "0")] fc1: Linear` is `0.weight`),
/// `#[dlpack(skip)]`,
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
/// strictly: missing and unexpected names and tensors of the wrong dtype or rank are
/// errors naming the tensor. A fresh value has no shapes to compare, so extents are
/// taken as they come; to check them too, [`load_dlpack`](FromDLPack::load_dlpack) into
/// a model built with the right shapes.
///
/// Attributes as for [`ToDLPack`](derive@ToDLPack); `skip`ped fields are filled with
/// `Default::default()`. One more, for tensor-parallel loading:
/// `#[dlpack(split = D)]` declares that the field's tensors are split along dimension
/// `D` between the ranks of a tensor-parallel group (Megatron's column-parallel layers
/// along 0, row-parallel ones along 1); fields without it are replicated. A checkpoint
/// read with `ReadOptions::tensor_parallel(rank, world_size)` (feature `safetensors`)
/// gives each split field its rank's part, reading only that part's bytes; elsewhere the
/// attribute changes nothing. It reaches the loader through
/// [`FromDLPack::select_in`] ([`Expected::split`](implement::Expected::split)).
#[cfg(feature = "derive")]
#[cfg_attr(docsrs, doc(cfg(feature = "derive")))]
pub use dlpack_derive::FromDLPack;

/// A Rust model as a Python object: put `#[pymodel]` above the `#[pymethods]` block of
/// a `#[pyclass]` struct that derives [`ToDLPack`](derive@ToDLPack) and
/// [`FromDLPack`](derive@FromDLPack), and keeps its arrays as [`Parameter`]s.
///
/// The class then has, beside the block's own methods:
///
/// - every tensor as an attribute, nested structs, `Vec` items and map entries included
///   (`m.fc1.weight`, `m.layers[3].attn.q.weight`): a [`Tensor`](python::Tensor) that
///   NumPy, PyTorch and JAX import without a copy, sharing the field's memory and
///   keeping it alive; a group of tensors (`m.fc1`, `m.layers`) is a
///   [`ModelView`](python::ModelView);
/// - setters, `m.fc1.weight = t`, for any DLPack producer's tensor of the field's dtype,
///   rank and shape: without a copy when `t` is another field's tensor (tied weights),
///   with one copy otherwise (the field must own its buffer, and a foreign producer's
///   memory is the producer's);
/// - `state_dict(prefix="")` and `load_state_dict(state_dict, strict=True)`, as PyTorch's
///   `Module` has them;
/// - `shares(tensor, name)`: whether `tensor` (a PyTorch module's parameter, an array)
///   still views the buffer of the tensor `name`, which a Rust write replaces while
///   Python views it (copy-on-write: see [`python::model`] for the rule and a recipe);
/// - `__repr__` (every tensor with its dtype and shape) and `__dir__`.
///
/// A Rust method saves the model from `&self` with [`TensorBatch::share`] (the
/// `save` below): its tensors as shares of the fields, no copy and no round trip through
/// Python.
///
/// Put `#[pymodel]` *above* `#[pymethods]`: attributes expand in order, and below it
/// `#[pymodel]` gets a block that PyO3 has already expanded, its `#[new]` and
/// `#[staticmethod]` taken away. `#[pymodel]` says so where a function of no arguments
/// is left unmarked ("`fn new` has no receiver ... put `#[pymodel]` first"); else the
/// errors are PyO3's, such as a type error on a constructor's first argument.
///
/// A method the block defines itself (a `__repr__` of your own) is kept. The functions
/// behind these methods, and the rule that says who writes the memory when, are in
/// [`python::model`]. `#[pymodel(crate = "path")]` names `dlpack_core` elsewhere; the
/// generated methods name PyO3 as `::pyo3`.
///
#[cfg_attr(feature = "safetensors", doc = "```no_run")]
#[cfg_attr(not(feature = "safetensors"), doc = "```ignore")]
/// use dlpack_core::{DLPackArray, FromDLPack, ManagedTensor, TensorBatch, ToDLPack, pymodel};
/// use ndarray::Ix1;
/// use dlpack_core::{Parameter1, Parameter2};
/// use pyo3::prelude::*;
///
/// #[derive(ToDLPack, FromDLPack)]
/// struct Linear {
///     weight: Parameter2<f32>,
///     bias: Parameter1<f32>,
/// }
///
/// #[pyclass]
/// #[derive(ToDLPack, FromDLPack)]
/// struct Mlp {
///     fc1: Linear,
///     fc2: Linear,
/// }
///
/// #[pymodel] // the one line: attributes, setters, state_dict, load_state_dict, repr
/// #[pymethods]
/// impl Mlp {
///     /// `Mlp.load(path)`: a checkpoint, with only the tensors `Mlp` takes read.
///     #[staticmethod]
///     fn load(path: std::path::PathBuf) -> PyResult<Self> {
///         Ok(dlpack_core::safetensors::Checkpoint::open(path)?.read::<Self>()?)
///     }
///
///     /// A Rust method on the same memory: reads the fields as they are now.
///     fn forward(&self, x: DLPackArray<f32, Ix1>) -> PyResult<ManagedTensor> {
///         let (fc1, fc2) = (&self.fc1, &self.fc2);
///         let h = (fc1.weight.view().dot(&x.view()) + fc1.bias.view()).mapv(|v| v.max(0.0));
///         Ok((fc2.weight.view().dot(&h) + fc2.bias.view()).to_dlpack()?)
///     }
///
///     /// `m.save(dir)`: a checkpoint of the fields as they are now, written from Rust.
///     fn save(&self, dir: std::path::PathBuf) -> PyResult<()> {
///         Ok(TensorBatch::share(self)?.write_checkpoint(dir, 5 << 30)?)
///     }
/// }
///
/// #[pymodule]
/// fn my_extension(m: &Bound<'_, PyModule>) -> PyResult<()> {
///     m.add_class::<Mlp>()?;
///     dlpack_core::python::add_to_module(m) // `Tensor`, `ModelView`, `IncompatibleKeys`
/// }
/// # fn main() {}
/// ```
#[cfg(all(feature = "derive", feature = "pyo3"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "derive", feature = "pyo3"))))]
pub use dlpack_derive::pymodel;

pub mod implement {
    //! For implementers of this crate's traits on a container of their own (a type that
    //! holds several tensors, as `Vec` and maps do): what `select_in`, `load_dlpack_in` and
    //! the model's by-reference traits are written with. A user who derives the traits, or
    //! exchanges arrays and batches, needs none of it.
    //!
    //! - [`FromDLPack::select_in`](crate::FromDLPack::select_in) adds to a [`Selection`]
    //!   the names a value takes, with what it [`Expected`]s of each, so that a
    //!   checkpoint reads only those;
    //! - [`TensorFields`] (through [`TensorFieldsOf`]) reaches a value's tensors by
    //!   reference, by name, each a [`TensorField`], a look-up answering [`Found`]: what a
    //!   model shared with Python reads and replaces;
    //! - [`Problems`] gathers every error of a value's fields into one report, as the
    //!   derive's imports and loads do;
    //! - [`join_name`], [`push_segment`] and [`split_path`] name tensors as every
    //!   container of this crate names them (`prefix.field`, `layers.3`).

    pub use crate::traits::{
        Expected, Found, Problems, Selection, TensorField, TensorFields, TensorFieldsOf, join_name,
        push_segment, split_path,
    };
}

#[doc(hidden)]
pub mod __private;

/// This crate's README, its examples compiled and run as doctests.
#[cfg(all(doctest, feature = "derive", feature = "ndarray"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
