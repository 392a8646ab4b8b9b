//! A Rust model as a Python object: the methods that [`pymodel`](crate::pymodel) adds
//! to a `#[pymethods]` block (attributes, setters, `state_dict`, `load_state_dict`,
//! `__repr__`, `__dir__`), and [`ModelView`], the object for a group of a model's
//! tensors (`m.fc1`, `m.layers`, `m.layers[3]`).
//!
//! An extension that writes its methods by hand calls these functions from its own
//! `#[pymethods]` block: each takes the model object as `&Bound<'_, T>`.
//!
//! Names: an attribute is one segment of a tensor's name (`m.fc1.weight`, never
//! `getattr(m, "fc1.weight")`); a `Vec`'s items and a map's entries are indexed
//! (`m.layers[3]`, `m.layers[-1]`, `m.heads["q"]`; an attribute works for a map key that
//! is an identifier). The class's own attributes win: a field named like a method of the
//! class is reached through `state_dict()`. The first read of each of the struct's own
//! field names makes it an attribute of the class (a [`TensorAttribute`]), so later
//! reads are one lookup.
//!
//! # The sharing rule
//!
//! A model's tensor fields are [`Parameter`](crate::Parameter)s (see
//! [`TensorFields`]), and a tensor read from Python shares the field's buffer:
//!
//! - **Python's views are writable and write the struct**: `m.fc1.weight`, and every
//!   tensor of `m.state_dict()`, is the field's own memory, without a copy, so an
//!   in-place Python write (an optimizer step, `p -= lr * p.grad` under
//!   `torch.no_grad()`, a `load_state_dict(sd, assign=True)` module's training) is what
//!   the next Rust method reads. Read-only views would not hold: PyTorch ignores the
//!   DLPack read-only flag and imports every tensor writable. (A JAX array of a field,
//!   which JAX takes as immutable, changes with such writes too; `bool` fields are
//!   handed out as copies, since Python could store bytes that are no `bool`.)
//! - **Rust writes copy first while Python holds a view (copy-on-write)**: a `&mut self`
//!   method that writes a field (`view_mut`, `mapv_inplace`, indexing, ...), a setter,
//!   and `load_state_dict` give a field that Python still views a fresh buffer before
//!   writing (`Parameter::view_mut` does it), so Rust never holds a `&mut` over
//!   memory a Python view reaches. The views keep the old buffer and its old values,
//!   and no longer see the struct: read the attributes again after a Rust write. A field
//!   that no view reaches is written in place, with no copy. Two fields tied by a setter
//!   (`m.a.weight = m.b.weight`) share one buffer until either is written from Rust.
//!   [`shares`] (`m.shares(tensor, name)`, a comparison of addresses) says whether a
//!   tensor still views the field: after a Rust write, a PyTorch module built with
//!   `assign=True` is attached again in two lines:
//!
//!   ```python
//!   if not all(m.shares(p, name) for name, p in module.named_parameters()):
//!       module.load_state_dict({k: torch.from_dlpack(v) for k, v in m.state_dict().items()}, assign=True)
//!   ```
//!
//!   (an optimizer built over the old parameters must be built again too).
//! - **Python's writes reach the field, and only what shares its buffer on purpose**:
//!   the fields tied to it, and Rust handles made from its shares
//!   ([`TensorField::share`], a `DLPackArray` of one); never a clone (`Clone` copies
//!   the elements), so a value that Rust code keeps elsewhere, or sends to another
//!   thread, never changes under it.
//! - **One object per field, until Rust writes it**: as `nn.Module` returns the same
//!   `Parameter`, every read of a field (`m.fc1.weight`, `m.fc1["weight"]`, the entry of
//!   `state_dict()`) returns the same [`Tensor`] object, which
//!   the field keeps. A Rust write, a replacement (Rust's, a setter's) or a load lets it
//!   go first, where copy-on-write acts: the next read is a new object over the field's
//!   buffer, and the old object keeps the buffer it had. The object the field keeps is
//!   no holder of its own: a Rust write to a field whose object nothing else holds is
//!   in place. (`bool` fields, handed out as copies, are copied at every read.)
//! - **Every view keeps its memory alive** whatever Rust does afterwards (replaces the
//!   field, reloads the struct, drops the object): it holds a reference to the buffer.
//! - **Python writing while Rust reads is a data race**: a Rust method reads the
//!   fields as a shared import is read (see [the import safety
//!   guide](crate::guide::import_safety)). If Python writes the same tensor while the
//!   method holds a view of it, Rust's `&[A]` is written behind its back: a data race,
//!   undefined behaviour in Rust (not merely "a mix of old and new values": the
//!   compiler may assume the slice never changes), reachable from safe code on both
//!   sides, and one the crate cannot prevent, since the write is NumPy's or PyTorch's,
//!   through its own view. Two triggers:
//!   - **another thread**: Python code writes the tensor (`np.add(w, 1, out=w)`, an
//!     optimizer step) while the method runs on another thread: a NumPy or PyTorch
//!     kernel releases the interpreter lock, a method that releases it
//!     (`py.detach`) lets any Python thread run, and a free-threaded build has no lock
//!     at all;
//!   - **the method's own Python calls**: a callback, or any Python allocation (a
//!     returned list, a `PyFloat`), which can start a garbage collection whose
//!     finalizers (`__del__`, weak-reference callbacks) run arbitrary Python code,
//!     that code writing the tensor.
//!
//!   The pattern that avoids both: Python writes a model's tensors only while no method
//!   of the model runs, by running them on one thread or holding one `threading.Lock`
//!   around the optimizer step and the model's calls, or writes them through the
//!   model's own setters and `load_state_dict` (Rust writes, which PyO3 never runs
//!   beside another method of the object); and a method reads its views, drops them,
//!   then builds its Python results and calls its callbacks. Copying a field first
//!   (`to_owned`) does not help against another thread: the copy is a read too.
//!   (Why nothing enforces it: the writer is another framework's view, which holds no
//!   lock of the crate's and calls none of its code; PyO3's borrow flags guard only
//!   the model's own methods.)
//!   Rust methods of one object exclude each other as PyO3 arranges: a `&mut self`
//!   method while any other method of the object runs is PyO3's "already borrowed"
//!   `RuntimeError`, never two handles of which one is `&mut` (so is a Python read of
//!   the model while a `&mut self` method that released the interpreter runs). On a
//!   free-threaded build, where threads run at once, that error comes whenever a
//!   `&mut self` call meets any other call of the same object, instead of only where
//!   one released the interpreter: serialize the calls that write (a lock in Python)
//!   where they may meet.
//!
//! # PyTorch
//!
//! A `state_dict()` is what PyTorch's `module.load_state_dict(sd)` takes as it is: its
//! values are [`Tensor`]s, tensor-like for PyTorch (`__torch_function__`), which
//! `param.copy_` reads without a copy of its own. `assign=True` (the module's
//! parameters made the model's memory) needs PyTorch's own tensors, which
//! `torch.nn.Parameter` insists on: `{k: torch.from_dlpack(v) for k, v in
//! m.state_dict().items()}`, or PyTorch's
//! `torch.__future__.set_swap_module_params_on_conversion(True)`, under which PyTorch
//! asks through `__torch_function__` for those too. `torch.save(m.state_dict(), f)` is
//! refused as every pickling of a `Tensor` is (it shares memory): save
//! `{k: torch.from_dlpack(v).clone() for k, v in sd.items()}`, or write a checkpoint
//! from Rust. The one difference from PyTorch's semantics: a value of another dtype is
//! refused where PyTorch converts it ([`load_state_dict`] says why, and its message
//! gives the one-line conversion).
//!
//! # From a Rust method
//!
//! A method with `&self` saves the model with [`TensorBatch::share`]: every field as a
//! share of its buffer, no copy and no round trip through a Python `dict`:
//!
//! ```rust,ignore
//! /// `m.save(dir)`: a checkpoint of the fields as they are now.
//! fn save(&self, dir: std::path::PathBuf) -> PyResult<()> {
//!     Ok(TensorBatch::share(self)?.write_checkpoint(dir, 5 << 30)?)
//! }
//! ```
//!
//! # Setting up
//!
//! Call [`add_to_module`](super::add_to_module) in the extension's module: it adds
//! [`ModelView`] and `IncompatibleKeys` under the module's name. Put `#[pymodel]`
//! above `#[pymethods]`: PyO3 expands the attributes in order, and below it `#[pymodel]`
//! gets a block that PyO3 has already expanded: `#[pymodel]` says so where a function
//! of no arguments lost its `#[new]` or `#[staticmethod]`, else the errors are PyO3's
//! (a type error on a constructor's first argument).

// Layout of this module, by concern:
//
// - `ops`: the type-erasure core, a model class's operations as plain functions (`Ops`),
//   through which the classes shared by every model (`ModelView`, `TensorAttribute`)
//   reach it; the lookup, assignment and listing of tensors by name;
// - `attributes`: the attribute protocol of a model (`getattr`, `setattr`, `delattr`,
//   `dir`, `repr`) and the class attributes it installs (`TensorAttribute`);
// - `state_dict`: `state_dict` and `load_state_dict` in PyTorch's wording, and the
//   `IncompatibleKeys` named tuple;
// - `view`: `ModelView`, a group of a model's tensors.

mod attributes;
mod ops;
mod state_dict;
mod view;

use std::sync::Arc;

use pyo3::PyClass;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::batch::TensorBatch;
use crate::python::{Tensor, from_dlpack};
use crate::tensor::ManagedTensor;
use crate::traits::{Found, FromDLPack, TensorField, TensorFields};

pub use attributes::{TensorAttribute, delattr, dir, getattr, repr, setattr};
pub(crate) use state_dict::incompatible_keys;
pub use state_dict::{load_state_dict, state_dict};
pub use view::ModelView;

/// `model.shares(tensor, name)`: whether `tensor` (a PyTorch tensor or `Parameter`, a
/// NumPy or JAX array, a [`Tensor`], any DLPack producer's) still views the buffer of
/// the model's tensor `name` (`"fc1.weight"`), the check after a Rust write (which gives
/// a field that Python views a fresh buffer: copy-on-write, the [sharing
/// rule](self)). A tensor with a `data_ptr()` method (PyTorch's, a `Tensor`) is
/// checked by that address alone, with no export; another is imported to read its
/// bytes. `KeyError` when the model has no tensor of that name.
pub fn shares<T: PyModel>(
    model: &Bound<'_, T>,
    tensor: &Bound<'_, PyAny>,
    name: &str,
) -> PyResult<bool> {
    let py = model.py();
    // The tensor's bytes, read before the model is borrowed (both may run Python code).
    let bytes = match tensor.getattr_opt(pyo3::intern!(py, "data_ptr"))? {
        Some(data_ptr) if !tensor.is_instance_of::<pyo3::types::PyType>() => {
            let first: usize = data_ptr.call0()?.extract()?;
            first..first.saturating_add(1)
        }
        _ => {
            let imported = from_dlpack(tensor)?;
            let span = imported.byte_span()?;
            span.start..span.start.saturating_add(span.len)
        }
    };
    let this = model.try_borrow()?;
    let Found::Tensor(field) = this.find_tensor(name) else {
        return Err(pyo3::exceptions::PyKeyError::new_err(name.to_owned()));
    };
    let span = field.share()?.byte_span()?;
    let own = span.start..span.start.saturating_add(span.len);
    Ok(bytes.start < own.end && own.start < bytes.end)
}

/// What a model class needs: a `#[pyclass]` (not `frozen`) whose tensors Python can
/// share ([`TensorFields`]) and that loads a `state_dict` ([`FromDLPack`], derived).
pub trait PyModel:
    PyClass<Frozen = pyo3::pyclass::boolean_struct::False>
    + TensorFields
    + FromDLPack<Input = TensorBatch>
{
}

impl<T> PyModel for T where
    T: PyClass<Frozen = pyo3::pyclass::boolean_struct::False>
        + TensorFields
        + FromDLPack<Input = TensorBatch>
{
}

/// A tensor or a group found by name, as a Python object; `None` when there is none.
type Member = PyResult<Option<Py<PyAny>>>;

/// The operations of one model class, for the [`ModelView`]s of its groups (which are
/// of one Python class for every model, so they reach the model through these).
struct Ops {
    get: fn(&Bound<'_, PyAny>, &str, Option<&Arc<str>>) -> Member,
    set: fn(&Bound<'_, PyAny>, &str, &Bound<'_, PyAny>) -> PyResult<ops::Assigned>,
    entries: fn(&Bound<'_, PyAny>, &str) -> PyResult<Vec<ops::Entry>>,
    state_dict: for<'py> fn(&Bound<'py, PyAny>, &str, &str) -> PyResult<Bound<'py, PyDict>>,
}

/// A tensor field as a Python object: a [`Tensor`](crate::python::Tensor) of its
/// share, which a `Parameter` keeps and returns again until Rust writes or replaces the
/// field. Runs no Python code (a `Tensor` is not tracked by the garbage collector, so
/// making one starts no collection), so a caller may hold the model's borrow.
fn tensor_object(field: &dyn TensorField, py: Python<'_>) -> PyResult<Py<PyAny>> {
    field.python_object(py, wrap_share, only_holder)
}

fn wrap_share(py: Python<'_>, tensor: ManagedTensor) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, Tensor::new(tensor))?.into_any())
}

/// Whether nothing but the caller's reference holds `object`, a `Tensor`: no other
/// Python reference, and no capsule or array made from it. (PyO3 deprecates its
/// reading of the count for the raw `Py_REFCNT`, which is the same read behind
/// `unsafe`. On a free-threaded build the count is two fields read apart, so "one"
/// can be wrong while other threads pass the object between them: the field then
/// lets go of an object they hold, which costs later reads its identity, never the
/// sharing rule, since that object still holds the buffer.)
#[allow(deprecated)]
fn only_holder(object: &Bound<'_, PyAny>) -> bool {
    object.get_refcnt() == 1
        && object
            .cast::<Tensor>()
            .is_ok_and(|t| t.get().is_only_handle())
}

/// One class's [`Ops`], made by the compiler once per class.
struct OpsOf<T>(core::marker::PhantomData<T>);

impl<T: PyModel> OpsOf<T> {
    const OPS: Ops = Ops {
        get: |root, path, shared| attributes::get::<T>(cast::<T>(root)?, path, shared),
        set: |root, path, value| ops::set::<T>(cast::<T>(root)?, path, value),
        entries: |root, prefix| ops::entries::<T>(cast::<T>(root)?, prefix),
        state_dict: |root, under, prefix| {
            state_dict::state_dict_under::<T>(cast::<T>(root)?, under, prefix)
        },
    };
}

fn cast<'a, 'py, T: PyModel>(root: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, T>> {
    Ok(root.cast::<T>()?)
}
