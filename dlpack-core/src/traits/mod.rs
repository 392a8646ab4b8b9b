//! [`ToDLPack`] and [`FromDLPack`]: one array becomes one [`ManagedTensor`], a struct of
//! arrays a [`TensorBatch`] of named tensors.
//!
//! - `containers`: the impls for tensors, batches, `Option`, `Vec`, maps and `Box`;
//! - `fields`: a value's tensors by reference, by name (a model shared with Python);
//! - `load`: strict imports and in-place loads that report every problem at once, as
//!   PyTorch's `load_state_dict` does;
//! - `names`: how tensors are named (`prefix.field`, `layers.3`, map keys), for every
//!   container and the model's attributes;
//! - `select`: what a value takes from a source of named tensors, over the names alone.

mod containers;
mod fields;
mod load;
mod names;
mod select;

use crate::batch::TensorBatch;
use crate::error::{Error, Result};
use crate::tensor::ManagedTensor;

pub use fields::{Found, TensorField, TensorFields, TensorFieldsOf};
#[cfg(feature = "pyo3")]
pub(crate) use fields::{Unused, WrapShare};
pub use load::Problems;
pub(crate) use load::strict_from;
pub use load::{EmptyContainer, LoadReport};
#[cfg(feature = "safetensors")]
pub(crate) use load::{finish, load_in, look_alikes, merge};
#[cfg(feature = "pyo3")]
pub(crate) use names::is_segment;
pub use names::{join_name, push_segment, split_path};
pub use select::{Expected, Selection};

/// Export to DLPack.
///
/// Arrays export as one [`ManagedTensor`]; structs deriving `ToDLPack` export as a
/// [`TensorBatch`] whose names follow the fields.
///
/// The method consumes the value, as `into_` methods do: the name follows the DLPack
/// ecosystem's `to_dlpack`/`from_dlpack` pair (PyTorch's, NumPy's), and for views and
/// references, which are copied, it is a `to_` conversion in the Rust sense too.
///
/// # Keeping the value: save and go on
///
/// A derived model exports by value, and comes back from its own batch without a copy
/// (each field gets its buffer back), so a checkpoint in the middle of training is a
/// round trip that costs no copy:
///
#[cfg_attr(all(feature = "ndarray", feature = "derive"), doc = "```")]
#[cfg_attr(not(all(feature = "ndarray", feature = "derive")), doc = "```ignore")]
/// use dlpack_core::{FromDLPack, ToDLPack};
/// use ndarray::Array2;
///
/// #[derive(ToDLPack, FromDLPack)]
/// struct Model {
///     weight: Array2<f32>,
/// }
/// let model = Model { weight: Array2::zeros((2, 3)) };
/// let ptr = model.weight.as_ptr();
/// let batch = model.to_dlpack()?;
/// // batch.write_safetensors("step-100.safetensors")?; // (feature `safetensors`)
/// let model = Model::from_dlpack(batch)?; // the same buffers, training goes on
/// assert_eq!(model.weight.as_ptr(), ptr);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Layouts: what consumers accept
///
/// An owned array travels with its own strides, whatever they are, and NumPy takes
/// every layout. PyTorch refuses negative strides (torch: "Storage size calculation
/// overflowed with sizes=\[4\] and strides=\[-1\]"), so for torch take a
/// standard-layout copy when, and only when, the strides need it; JAX takes compact
/// layouts only (elements filling their memory in any axis order: not a slice, a step
/// or a negative stride), so for JAX take `as_standard_layout()` unless the array is
/// compact:
///
#[cfg_attr(feature = "ndarray", doc = "```")]
#[cfg_attr(not(feature = "ndarray"), doc = "```ignore")]
/// use ndarray::{Array1, s};
///
/// let a = Array1::<f32>::zeros(4).slice_move(s![..;-1]); // strides [-1]
/// // For PyTorch:
/// let a = if a.strides().iter().any(|&s| s < 0) { a.as_standard_layout().into_owned() } else { a };
/// assert_eq!(a.strides(), [1]);
/// // For JAX: a.as_standard_layout().into_owned()
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be exported through DLPack",
    label = "not an array, a tensor, or a struct deriving `ToDLPack`",
    note = "on a field of a `#[derive(ToDLPack)]` struct: for a struct of your own, add \
            `#[derive(ToDLPack)]` to it; else leave the field out with `#[dlpack(skip)]`, \
            or export it with `#[dlpack(with = \"module\")]` (a module with \
            `to_dlpack_into` and `from_dlpack_in` functions)",
    note = "if the field is an ndarray array and the compiler says there are several versions \
            of `ndarray`: dlpack-core implements the traits for the one Cargo gave it, not \
            yours; with `ndarray = \"0.16\"`, run `cargo update -p ndarray@0.17 --precise \
            0.16.1`, or use the re-export `dlpack_core::ndarray`"
)]
pub trait ToDLPack: Sized {
    /// [`ManagedTensor`] for one array; [`TensorBatch`] for a struct of arrays.
    type Output;

    /// Exports `self`.
    fn to_dlpack(self) -> Result<Self::Output>;

    /// Adds this value's tensors to `batch` under `prefix`: a single tensor is named
    /// `prefix` itself, the tensors of a struct `prefix.field` (or `field` when the
    /// prefix is empty). This is how derived impls nest.
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()>;
}

/// Import from DLPack.
///
/// `from_dlpack` is strict for batches, like `load_state_dict(strict=True)`: every
/// missing name, every leftover name and every tensor of the wrong dtype or rank is
/// reported at once, in one [`Error::StateDict`]. A fresh value has no shapes to
/// compare, so a tensor of the right rank and other extents loads (and a forward pass
/// meets it later): to check shapes, build the model and
/// [`load_dlpack`](Self::load_dlpack) into it, which refuses a tensor whose shape
/// differs from its field's. For a lenient import that leaves
/// unknown tensors alone, use [`TensorBatch::extract`]; to fill an existing value in
/// place, [`load_dlpack`](Self::load_dlpack) and
/// [`load_dlpack_lenient`](Self::load_dlpack_lenient).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be imported through DLPack",
    label = "not an array, a tensor, or a struct deriving `FromDLPack`",
    note = "on a field of a `#[derive(FromDLPack)]` struct: for a struct of your own, \
            add `#[derive(FromDLPack)]` to it; else leave the field out with \
            `#[dlpack(skip)]` (it is then `Default::default()`), or import it with \
            `#[dlpack(with = \"module\")]` (a module with `to_dlpack_into` and \
            `from_dlpack_in` functions)",
    note = "if the field is an ndarray array and the compiler says there are several versions \
            of `ndarray`: dlpack-core implements the traits for the one Cargo gave it, not \
            yours; with `ndarray = \"0.16\"`, run `cargo update -p ndarray@0.17 --precise \
            0.16.1`, or use the re-export `dlpack_core::ndarray`"
)]
pub trait FromDLPack: Sized {
    /// [`ManagedTensor`] for one array; [`TensorBatch`] for a struct of arrays.
    type Input;

    /// Imports from `input`.
    fn from_dlpack(input: Self::Input) -> Result<Self>;

    /// Takes this value's tensors out of `batch` from under `prefix` (see
    /// [`ToDLPack::to_dlpack_into`]), leaving other tensors in place.
    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self>;

    /// Adds to `selection` the names of the tensors that
    /// [`from_dlpack_in`](Self::from_dlpack_in) would take from under `prefix`, out of a
    /// batch holding the names the selection is made over, and what it expects of each
    /// (dtype and rank, where the type fixes them). Nothing is read: a sharded
    /// checkpoint reads only what this selects (`Checkpoint::read`, feature
    /// `safetensors`).
    ///
    /// The default takes every tensor named `prefix` or `prefix.*`, which is never
    /// less than a value takes; the derive, the containers of this crate and its
    /// arrays say exactly what they take. Override it in an implementation of your own
    /// when the value takes less, the same way `from_dlpack_in` walks the batch.
    fn select_in(prefix: &str, selection: &mut Selection<'_>) {
        selection.take_under(prefix);
    }

    /// Loads this value's tensors from under `prefix` into `self`, taking them out of
    /// `batch`: in place where the type allows it (an `Array` keeps its buffer, so its
    /// shape and dtype must match the tensor's), by replacement otherwise. Names it
    /// expects but does not find go to `report.missing` instead of failing.
    ///
    /// The default replaces `self` with [`from_dlpack_in`](Self::from_dlpack_in) when
    /// any tensor is named `prefix` or `prefix.*`.
    fn load_dlpack_in(
        &mut self,
        prefix: &str,
        batch: &mut TensorBatch,
        report: &mut LoadReport,
    ) -> Result<()> {
        if !batch.contains_prefix(prefix) {
            report.missing.push(prefix.to_owned());
            return Ok(());
        }
        *self = Self::from_dlpack_in(prefix, batch)?;
        Ok(())
    }

    /// Loads `batch` into this existing value, like PyTorch's
    /// `load_state_dict(strict=True)`: arrays are filled in place (same buffers), and
    /// every missing, unexpected and mismatched tensor is reported at once in one
    /// [`Error::StateDict`]. The tensors that fit are loaded even when others do not.
    fn load_dlpack(&mut self, batch: TensorBatch) -> Result<()>
    where
        Self: FromDLPack<Input = TensorBatch>,
    {
        load::strict(self, batch)
    }

    /// Loads `batch` into this existing value, like PyTorch's
    /// `load_state_dict(strict=False)`: missing and unexpected tensors are returned in
    /// the [`LoadReport`] (PyTorch's `_IncompatibleKeys`); tensors that are there but do
    /// not fit (dtype, rank or shape) are still an [`Error::StateDict`].
    fn load_dlpack_lenient(&mut self, batch: TensorBatch) -> Result<LoadReport>
    where
        Self: FromDLPack<Input = TensorBatch>,
    {
        load::lenient(self, batch)
    }
}

impl TensorBatch {
    /// Builds `T` from the tensors it names and removes them, leaving any others in the
    /// batch: lenient about unexpected tensors only (like `load_state_dict(strict=False)`
    /// for unexpected keys), where [`FromDLPack::from_dlpack`] refuses them. A tensor
    /// that `T` needs and the batch lacks is still an error; for a load that reports
    /// missing tensors too instead of failing, see
    /// [`FromDLPack::load_dlpack_lenient`].
    pub fn extract<T: FromDLPack>(&mut self) -> Result<T> {
        T::from_dlpack_in("", self)
    }
}

/// Exports a value that becomes a single tensor under the name `name`.
#[cfg(any(feature = "ndarray", feature = "arrow"))]
pub(crate) fn leaf_into<T>(value: T, name: &str, batch: &mut TensorBatch) -> Result<()>
where
    T: ToDLPack<Output = ManagedTensor>,
{
    let tensor = value.to_dlpack().map_err(|e| e.in_tensor(name))?;
    batch.insert(name, tensor)
}

/// Imports a value that is a single tensor named `name`.
pub(crate) fn leaf_from<T>(name: &str, batch: &mut TensorBatch) -> Result<T>
where
    T: FromDLPack<Input = ManagedTensor>,
{
    let tensor = batch.remove(name).ok_or_else(|| Error::MissingTensor {
        name: name.to_owned(),
    })?;
    T::from_dlpack(tensor).map_err(|e| e.in_tensor(name))
}

/// Loads the single tensor named `name` into `value` with `load` (which checks and
/// copies in place); a missing tensor goes to the report.
#[cfg(feature = "ndarray")]
pub(crate) fn leaf_load<T>(
    value: &mut T,
    name: &str,
    batch: &mut TensorBatch,
    report: &mut LoadReport,
    load: impl FnOnce(&mut T, ManagedTensor) -> Result<()>,
) -> Result<()> {
    match batch.remove(name) {
        Some(tensor) => load(value, tensor).map_err(|e| e.in_tensor(name)),
        None => {
            report.missing.push(name.to_owned());
            Ok(())
        }
    }
}

/// Exports a value into a fresh batch at the top level.
pub(crate) fn batch_of<T: ToDLPack>(value: T) -> Result<TensorBatch> {
    let mut batch = TensorBatch::new();
    value.to_dlpack_into("", &mut batch)?;
    Ok(batch)
}
