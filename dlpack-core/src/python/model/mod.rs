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
//! A model's tensor fields are [`SharedArray`](crate::SharedArray)s (see
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
//!   writing (`SharedArray::view_mut` does it), so Rust never holds a `&mut` over
//!   memory a Python view reaches. The views keep the old buffer and its old values,
//!   and no longer see the struct: read the attributes again after a Rust write. A field
//!   that no view reaches is written in place, with no copy. Two fields tied by a setter
//!   (`m.a.weight = m.b.weight`) share one buffer until either is written from Rust.
//! - **Python's writes reach the field, and only what shares its buffer on purpose**:
//!   the fields tied to it, and Rust handles made from its shares
//!   ([`TensorField::share`], a `DLPackArray` of one); never a clone (`Clone` copies
//!   the elements), so a value that Rust code keeps elsewhere, or sends to another
//!   thread, never changes under it.
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
//! Call [`add_to_module`](super::add_to_module) in the extension's module: it adds
//! [`ModelView`] and `IncompatibleKeys` under the module's name. Put `#[pymodel]`
//! above `#[pymethods]` (PyO3 expands the attributes in order).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use pyo3::exceptions::{PyAttributeError, PyIndexError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyInt, PyList, PyMapping, PyString, PyTuple, PyType};
use pyo3::{PyClass, intern};

use crate::batch::TensorBatch;
use crate::error::Error;
use crate::tensor::ManagedTensor;
use crate::traits::{Found, FromDLPack, TensorField, TensorFields, push_segment, split_path};

use super::{Tensor, from_dlpack};

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

/// The operations of one model class, for the [`ModelView`]s of its groups (which are
/// of one Python class for every model, so they reach the model through these).
/// A tensor or a group found by name, as a Python object; `None` when there is none.
type Member = PyResult<Option<Py<PyAny>>>;

struct Ops {
    get: fn(&Bound<'_, PyAny>, &str) -> Member,
    set: fn(&Bound<'_, PyAny>, &str, &Bound<'_, PyAny>) -> PyResult<Assigned>,
    entries: fn(&Bound<'_, PyAny>, &str) -> PyResult<Vec<Entry>>,
    state_dict: for<'py> fn(&Bound<'py, PyAny>, &str, &str) -> PyResult<Bound<'py, PyDict>>,
}

/// One class's [`Ops`], made by the compiler once per class.
struct OpsOf<T>(core::marker::PhantomData<T>);

impl<T: PyModel> OpsOf<T> {
    const OPS: Ops = Ops {
        get: |root, path| get::<T>(cast::<T>(root)?, path),
        set: |root, path, value| set::<T>(cast::<T>(root)?, path, value),
        entries: |root, prefix| entries::<T>(cast::<T>(root)?, prefix),
        state_dict: |root, under, prefix| state_dict_under::<T>(cast::<T>(root)?, under, prefix),
    };
}

fn cast<'a, 'py, T: PyModel>(root: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, T>> {
    Ok(root.cast::<T>()?)
}

/// A tensor's name, dtype and shape.
struct Entry {
    name: String,
    dtype: crate::DataType,
    shape: Vec<usize>,
}

/// What an assignment found at its path.
enum Assigned {
    Tensor,
    Group,
    Nothing,
}

/// The tensor, or the group of tensors, that `path` names in the model, as a Python
/// object: a [`Tensor`] sharing the field's memory, or a [`ModelView`].
fn get<T: PyModel>(model: &Bound<'_, T>, path: &str) -> PyResult<Option<Py<PyAny>>> {
    let py = model.py();
    let found = {
        let this = model.try_borrow()?;
        match this.find_tensor(path) {
            Found::Tensor(field) => Lookup::Tensor(field.share()?),
            Found::Group => Lookup::Group,
            Found::Nothing => Lookup::Nothing,
        }
    };
    Ok(match found {
        Lookup::Tensor(tensor) => Some(tensor.into_pyobject(py)?.into_any().unbind()),
        Lookup::Group => Some(
            Bound::new(
                py,
                ModelView {
                    root: model.clone().into_any().unbind(),
                    prefix: path.to_owned(),
                    ops: &OpsOf::<T>::OPS,
                },
            )?
            .into_any()
            .unbind(),
        ),
        Lookup::Nothing => None,
    })
}

enum Lookup {
    Tensor(ManagedTensor),
    Group,
    Nothing,
}

/// Replaces the tensor at `path` by `value` (any DLPack producer), checked against the
/// field (dtype, rank, shape, a CPU-accessible device).
fn set<T: PyModel>(
    model: &Bound<'_, T>,
    path: &str,
    value: &Bound<'_, PyAny>,
) -> PyResult<Assigned> {
    {
        let this = model.try_borrow()?;
        match this.find_tensor(path) {
            Found::Tensor(_) => {}
            Found::Group => return Ok(Assigned::Group),
            Found::Nothing => return Ok(Assigned::Nothing),
        }
    }
    // Another field's tensor (or this one's): its buffer, shared (tied weights).
    if let Ok(ours) = value.cast::<Tensor>() {
        let mut this = model.try_borrow_mut()?;
        if this
            .find_tensor_mut(path)
            .is_some_and(|field| field.tie(ours.get().tensor()))
        {
            return Ok(Assigned::Tensor);
        }
    }
    // Imported before the model is borrowed: the import may run Python code.
    let tensor = from_dlpack(value)?;
    let mut this = model.try_borrow_mut()?;
    match this.find_tensor_mut(path) {
        Some(field) => {
            field
                .replace(tensor)
                .map_err(|e| PyErr::from(e.in_tensor(path)))?;
            Ok(Assigned::Tensor)
        }
        None => Ok(Assigned::Nothing),
    }
}

/// Every tensor under `prefix` (all of them for `""`), with names relative to it.
fn entries<T: PyModel>(model: &Bound<'_, T>, prefix: &str) -> PyResult<Vec<Entry>> {
    let this = model.try_borrow()?;
    let mut out = Vec::new();
    visit_under(&*this, prefix, &mut |name, field| {
        out.push(Entry {
            name: name.to_owned(),
            dtype: field.dtype(),
            shape: field.shape().to_vec(),
        });
    });
    Ok(out)
}

/// Calls `f` with every tensor under `prefix`, named relative to it.
fn visit_under<T: TensorFields + ?Sized>(
    value: &T,
    prefix: &str,
    f: &mut dyn FnMut(&str, &dyn TensorField),
) {
    let mut name = String::new();
    value.visit_tensors(&mut name, &mut |full, field| {
        if prefix.is_empty() {
            f(full, field);
        } else if let Some(rest) = full.strip_prefix(prefix).and_then(|r| r.strip_prefix('.')) {
            f(rest, field);
        }
    });
}

fn state_dict_under<'py, T: PyModel>(
    model: &Bound<'py, T>,
    under: &str,
    prefix: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let py = model.py();
    let mut tensors = Vec::new();
    {
        let this = model.try_borrow()?;
        let mut failed = None;
        visit_under(&*this, under, &mut |name, field| {
            if failed.is_some() {
                return;
            }
            match field.share() {
                Ok(tensor) => {
                    let mut key = String::with_capacity(prefix.len() + name.len());
                    key.push_str(prefix);
                    key.push_str(name);
                    tensors.push((key, tensor));
                }
                Err(e) => failed = Some(e.in_tensor(name)),
            }
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
    }
    let dict = PyDict::new(py);
    for (key, tensor) in tensors {
        dict.set_item(key, tensor)?;
    }
    Ok(dict)
}

/// `getattr(model, name)` for a name that is not an attribute of the class: a tensor
/// (a [`Tensor`] sharing the field's memory) or a group of tensors (a
/// [`ModelView`]); else `AttributeError`, as Python words it.
pub fn getattr<T: PyModel>(
    model: &Bound<'_, T>,
    name: &Bound<'_, PyString>,
) -> PyResult<Py<PyAny>> {
    // A name that is no UTF-8 (a lone surrogate) names no field.
    let Ok(key) = name.to_cow() else {
        return Err(PyAttributeError::new_err(format!(
            "'{}' object has no attribute {}",
            model.as_any().get_type().name()?,
            name.repr()?
        )));
    };
    let found = if is_segment(&key) {
        get(model, &key)?
    } else {
        None
    };
    match found {
        Some(found) => {
            install(model, name)?;
            Ok(found)
        }
        None => Err(no_attribute(model.as_any(), &key)),
    }
}

fn no_attribute(obj: &Bound<'_, PyAny>, name: &str) -> PyErr {
    let type_name = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".to_owned());
    PyAttributeError::new_err(format!("'{type_name}' object has no attribute '{name}'"))
}

/// Makes `name`, a field of the model's struct that has just been read, an attribute
/// of the model's class (a [`TensorAttribute`]) unless the class has that name already:
/// the next read of it goes straight to the field, with no failed lookup first (what
/// `__getattr__` costs). Only the struct's own field names are installed (never a map's
/// keys, which come from data, nor a name with a leading `_`), each once.
fn install<T: PyModel>(model: &Bound<'_, T>, name: &Bound<'_, PyString>) -> PyResult<()> {
    let key = name.to_cow()?;
    // A special method (`__bool__`, `__len__`, ...) set on a class would change how Python
    // treats every instance.
    if key.starts_with('_') || !<T as TensorFields>::field_names().contains(&&*key) {
        return Ok(());
    }
    let class = model.as_any().get_type();
    if class.getattr_opt(name)?.is_some() {
        return Ok(());
    }
    let attribute = TensorAttribute {
        name: key.into_owned(),
        class: class.clone().unbind(),
        ops: &OpsOf::<T>::OPS,
    };
    // A class that refuses new attributes (`#[pyclass(immutable_type)]`) keeps reading
    // through `__getattr__`: installing is only a shortcut.
    let _refused = class.setattr(name, Bound::new(model.py(), attribute)?);
    Ok(())
}

/// A tensor or group of tensors of a model class, as an attribute of the class (a
/// non-data descriptor: an instance's own `__dict__` entry of the name wins, and
/// assignments go to the class's `__setattr__`): `m.fc1` reads the model's current
/// struct. Installed by the first read of each field name, on the exact class of the
/// model read; an instance of another class (a subclass) gets an `AttributeError` here,
/// which sends the read to that class's own `__getattr__`.
#[pyclass(module = "dlpack_core", name = "TensorAttribute", frozen)]
pub struct TensorAttribute {
    name: String,
    class: Py<PyType>,
    ops: &'static Ops,
}

#[pymethods]
impl TensorAttribute {
    fn __get__(
        slf: &Bound<'_, Self>,
        obj: Option<&Bound<'_, PyAny>>,
        _owner: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let this = slf.get();
        let Some(obj) = obj.filter(|o| !o.is_none()) else {
            return Ok(slf.clone().into_any().unbind());
        };
        if !obj.get_type().is(this.class.bind(obj.py())) {
            return Err(no_attribute(obj, &this.name));
        }
        (this.ops.get)(obj, &this.name)?.ok_or_else(|| no_attribute(obj, &this.name))
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.class)
    }
}

/// Whether `name` can be one segment of a tensor name: not empty, no `.` (an attribute
/// names one field, item or key; `getattr(m, "fc1.weight")` is not `m.fc1.weight`).
fn is_segment(name: &str) -> bool {
    !name.is_empty() && !name.contains('.')
}

/// `setattr(model, name, value)`: a tensor field takes any DLPack producer's tensor
/// ([`TensorField::replace`]: the field's dtype, rank and shape; without a copy when the
/// value is another field's tensor, with one copy otherwise); any other name is set as
/// Python sets it (`object.__setattr__`: the class's own setters).
pub fn setattr<T: PyModel>(
    model: &Bound<'_, T>,
    name: &Bound<'_, PyString>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let key = name.to_cow()?;
    let assigned = if is_segment(&key) {
        set(model, &key, value)?
    } else {
        Assigned::Nothing
    };
    match assigned {
        Assigned::Tensor => Ok(()),
        Assigned::Group => Err(group_assignment(&key)),
        Assigned::Nothing => generic_set(model.as_any(), name, Some(value)),
    }
}

/// What `object.__setattr__` (with `value`) or `object.__delattr__` (without) does,
/// which CPython refuses to call on an instance of a class with a `__setattr__` of its
/// own: the class's data descriptors (its `#[setter]`s), else the instance's
/// `__dict__` if it has one, else `AttributeError`, all in Python's own words.
fn generic_set(
    obj: &Bound<'_, PyAny>,
    name: &Bound<'_, PyString>,
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let value = value.map_or(core::ptr::null_mut(), Bound::as_ptr);
    // SAFETY:
    // - `obj` and `name` are live objects, borrowed for the call, and `name` is a `str`;
    // - `value` is a live object borrowed for the call, or NULL, which asks for a
    //   deletion (the function's contract);
    // - the thread is attached to the interpreter (`obj` is bound to it).
    let status = unsafe { pyo3::ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), value) };
    if status < 0 {
        return Err(PyErr::fetch(obj.py()));
    }
    Ok(())
}

fn group_assignment(path: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "cannot assign to '{path}': it is a group of tensors; assign its tensors one by one, \
         or load them with load_state_dict"
    ))
}

/// `del model.name`: a model's tensors and groups cannot be deleted (`TypeError`); any
/// other name goes to `object.__delattr__`.
pub fn delattr<T: PyModel>(model: &Bound<'_, T>, name: &Bound<'_, PyString>) -> PyResult<()> {
    let key = name.to_cow()?;
    let found = is_segment(&key) && {
        let this = model.try_borrow()?;
        !matches!(this.find_tensor(&key), Found::Nothing)
    };
    if found {
        return Err(PyTypeError::new_err(format!(
            "cannot delete '{key}': a model's tensors are fields of its Rust struct"
        )));
    }
    generic_set(model.as_any(), name, None)
}

/// `object.<name>`, looked up once per call (the fallback of `setattr` and `delattr`).
fn object_method<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.get_type::<PyAny>().getattr(PyString::new(py, name))
}

/// `dir(model)`: the class's attributes and the model's top-level tensor and group
/// names.
pub fn dir<T: PyModel>(model: &Bound<'_, T>) -> PyResult<Vec<String>> {
    let listed: Vec<String> = object_method(model.py(), "__dir__")?
        .call1((model,))?
        .extract()?;
    let mut names: BTreeSet<String> = listed.into_iter().collect();
    for entry in entries(model, "")? {
        names.insert(split_path(&entry.name).0.to_owned());
    }
    Ok(names.into_iter().collect())
}

/// `repr(model)`: the class name and every tensor with its dtype and shape, one per
/// line, in `state_dict` order.
pub fn repr<T: PyModel>(model: &Bound<'_, T>) -> PyResult<String> {
    let name = model.as_any().get_type().name()?.to_string();
    Ok(format_entries(&name, &entries(model, "")?))
}

fn format_entries(name: &str, entries: &[Entry]) -> String {
    let mut out = String::new();
    out.push_str(name);
    out.push('(');
    for entry in entries {
        let _ = write!(out, "\n  {}: {}{:?},", entry.name, entry.dtype, entry.shape);
    }
    if !entries.is_empty() {
        out.push('\n');
    }
    out.push(')');
    out
}

/// `model.state_dict(prefix="")`: a `dict` of every tensor by its `state_dict` name
/// (with `prefix` before each), each a [`Tensor`] sharing the field's
/// memory, in the order [`ToDLPack`](crate::ToDLPack) exports them.
/// `torch.from_dlpack` of each is a PyTorch `state_dict` over the same memory.
pub fn state_dict<'py, T: PyModel>(
    model: &Bound<'py, T>,
    prefix: &str,
) -> PyResult<Bound<'py, PyDict>> {
    state_dict_under(model, "", prefix)
}

/// `model.load_state_dict(state_dict, strict=True)`, with PyTorch's semantics and
/// wording: every tensor of the model is loaded from the entry of its name (any DLPack
/// producer: PyTorch, NumPy, JAX, ...), into the field's own buffer when no Python view
/// holds it, else into a fresh one (copy-on-write, the [sharing rule](self)): tensors
/// taken from the model before, and a PyTorch optimizer over them, then keep the old
/// buffer; read them again, or load through a module whose parameters are the model's
/// tensors (`module.load_state_dict(sd)`, which copies into them in place). The tensors
/// that fit are loaded even when others do not; a value that is no DLPack tensor, under
/// a name the model has, is an error before anything is loaded. With
/// `strict=True`, missing and unexpected names are a `RuntimeError` worded as PyTorch
/// words it (`Error(s) in loading state_dict for Mlp: ...`); with `strict=False` they
/// are returned, as PyTorch's named tuple `(missing_keys, unexpected_keys)`. A tensor
/// whose shape differs from its field's is an error either way (PyTorch's
/// `size mismatch for ...`), and so is one of another dtype (PyTorch converts the
/// dtype; this crate does not guess).
pub fn load_state_dict<'py, T: PyModel>(
    model: &Bound<'py, T>,
    state_dict: &Bound<'py, PyAny>,
    strict: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let py = model.py();
    // The entries, then which of them name a tensor of the model (as PyTorch does, any
    // other key is unexpected, whatever its value), then the imports of those: all before
    // the model is borrowed to load, since iterating and importing run Python code.
    let mapping = state_dict.cast::<PyMapping>().map_err(|_| {
        PyTypeError::new_err(format!(
            "Expected state_dict to be dict-like, got {}.",
            state_dict
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    let mut entries: Vec<(String, Bound<'py, PyAny>)> = Vec::new();
    for item in mapping.items()?.try_iter()? {
        let (key, value): (Bound<'py, PyAny>, Bound<'py, PyAny>) = item?.extract()?;
        let key = key.cast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!(
                "a state_dict's keys are str, not {}",
                key.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        entries.push((key.to_cow()?.into_owned(), value));
    }
    let known: Vec<bool> = {
        let this = model.try_borrow()?;
        entries
            .iter()
            .map(|(key, _)| matches!(this.find_tensor(key), Found::Tensor(_)))
            .collect()
    };
    let mut batch = TensorBatch::new();
    let mut unknown = Vec::new();
    for ((key, value), known) in entries.into_iter().zip(known) {
        if known {
            batch.insert(&key, from_dlpack(&value)?)?;
        } else {
            unknown.push(key);
        }
    }
    let class = model.as_any().get_type().name()?.to_string();
    let result = {
        let mut this = model.try_borrow_mut()?;
        this.load_dlpack_lenient(batch)
    };
    let (missing, mut unexpected, failed) = match result {
        Ok(report) => (report.missing, report.unexpected, Vec::new()),
        Err(Error::StateDict {
            missing,
            unexpected,
            failed,
        }) => (missing, unexpected, failed),
        Err(other) => return Err(other.into()),
    };
    unknown.append(&mut unexpected);
    let unexpected = unknown;
    let mut messages = Vec::new();
    if strict {
        if !missing.is_empty() {
            messages.push(format!(
                "Missing key(s) in state_dict: {}. ",
                quoted(&missing)
            ));
        }
        if !unexpected.is_empty() {
            messages.push(format!(
                "Unexpected key(s) in state_dict: {}. ",
                quoted(&unexpected)
            ));
        }
    }
    for error in &failed {
        messages.push(failure_message(error));
    }
    if !messages.is_empty() {
        return Err(PyRuntimeError::new_err(format!(
            "Error(s) in loading state_dict for {class}:\n\t{}",
            messages.join("\n\t")
        )));
    }
    let keys = incompatible_keys(py)?;
    keys.call1((PyList::new(py, missing)?, PyList::new(py, unexpected)?))
}

fn quoted(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    quoted.join(", ")
}

/// One tensor's failure in PyTorch's words where PyTorch has them (a shape).
fn failure_message(error: &Error) -> String {
    match error {
        Error::Tensor { name, error } => match error.root() {
            Error::ShapeMismatch { expected, found } => format!(
                "size mismatch for {name}: copying a param with shape {} from checkpoint, \
                 the shape in current model is {}.",
                shape_text(found),
                shape_text(expected)
            ),
            root => format!("{name}: {}", super::error::python_message(root)),
        },
        other => super::error::python_message(other),
    }
}

fn shape_text(shape: &[usize]) -> String {
    let items: Vec<String> = shape.iter().map(usize::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// The named tuple `IncompatibleKeys(missing_keys, unexpected_keys)`, as PyTorch's
/// `load_state_dict` returns it, made once.
pub(crate) fn incompatible_keys(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    Ok(CLASS
        .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            let namedtuple = py
                .import(intern!(py, "collections"))?
                .getattr("namedtuple")?;
            let class = namedtuple.call1((
                "IncompatibleKeys",
                PyTuple::new(py, ["missing_keys", "unexpected_keys"])?,
            ))?;
            class.setattr("__module__", "dlpack_core")?;
            Ok(class.unbind())
        })?
        .bind(py))
}

/// A group of a model's tensors, as a Python object: `m.fc1`, `m.layers`,
/// `m.layers[3]`. Its attributes and items are the group's tensors and subgroups, by
/// name (`m.fc1.weight`) or by index and key (`m.layers[3]`, `m.layers[-1]`,
/// `m.heads["q"]`); it has `len`, iteration over its members in `state_dict` order,
/// `state_dict(prefix="")` (names relative to the group, as a PyTorch submodule's),
/// `dir` and `repr`, and tensor setters, as the model itself. It refers to the model
/// object, never to a Rust field: what it reads is the model's current struct.
#[pyclass(module = "dlpack_core", name = "ModelView", frozen)]
pub struct ModelView {
    root: Py<PyAny>,
    prefix: String,
    ops: &'static Ops,
}

impl ModelView {
    fn path(&self, name: &str) -> String {
        let mut path = self.prefix.clone();
        push_segment(&mut path, name);
        path
    }

    /// The distinct first segments of the group's tensor names, in order.
    fn members(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let entries = (self.ops.entries)(self.root.bind(py), &self.prefix)?;
        let mut seen = BTreeSet::new();
        let mut members = Vec::new();
        for entry in &entries {
            let head = split_path(&entry.name).0;
            if seen.insert(head.to_owned()) {
                members.push(head.to_owned());
            }
        }
        Ok(members)
    }

    fn member(&self, py: Python<'_>, name: &str) -> PyResult<Option<Py<PyAny>>> {
        if !is_segment(name) {
            return Ok(None);
        }
        (self.ops.get)(self.root.bind(py), &self.path(name))
    }
}

#[pymethods]
impl ModelView {
    fn __getattr__(slf: &Bound<'_, Self>, name: &Bound<'_, PyString>) -> PyResult<Py<PyAny>> {
        let this = slf.get();
        let Ok(key) = name.to_cow() else {
            return Err(PyAttributeError::new_err(format!(
                "'{}' has no tensor or group named {}",
                this.prefix,
                name.repr()?
            )));
        };
        match this.member(slf.py(), &key)? {
            Some(found) => Ok(found),
            None => Err(PyAttributeError::new_err(format!(
                "'{}' has no tensor or group named '{key}'",
                this.prefix
            ))),
        }
    }

    fn __setattr__(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyString>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let name = name.to_cow()?;
        let path = self.path(&name);
        let assigned = if is_segment(&name) {
            (self.ops.set)(self.root.bind(py), &path, value)?
        } else {
            Assigned::Nothing
        };
        match assigned {
            Assigned::Tensor => Ok(()),
            Assigned::Group => Err(group_assignment(&path)),
            Assigned::Nothing => Err(PyAttributeError::new_err(format!(
                "'{}' has no tensor named '{name}'",
                self.prefix
            ))),
        }
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.root)
    }

    fn __delattr__(&self, name: &Bound<'_, PyString>) -> PyResult<()> {
        Err(PyTypeError::new_err(format!(
            "cannot delete '{}': a model's tensors are fields of its Rust struct",
            self.path(&name.to_cow()?)
        )))
    }

    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let name = if key.is_instance_of::<PyInt>() {
            // An item's index is its name (a `Vec` of `Option`s may skip some); a negative
            // index counts from one past the last item.
            let members = self.members(py)?;
            let end = members
                .iter()
                .filter_map(|m| m.parse::<usize>().ok())
                .max()
                .map_or(0, |last| last.saturating_add(1));
            let resolved = key.extract::<isize>().ok().and_then(|index| {
                let i = if index < 0 {
                    index.checked_add_unsigned(end)?
                } else {
                    index
                };
                usize::try_from(i).ok()
            });
            let found = match resolved {
                Some(i) => self.member(py, &i.to_string())?,
                None => None,
            };
            return found.ok_or_else(|| {
                PyIndexError::new_err(format!(
                    "index {key} out of range for '{}' ({end} items)",
                    self.prefix
                ))
            });
        } else if let Ok(key) = key.cast::<PyString>() {
            key.to_cow()?.into_owned()
        } else {
            return Err(PyTypeError::new_err(format!(
                "'{}' is indexed by int or str, not {}",
                self.prefix,
                key.get_type().name()?
            )));
        };
        self.member(py, &name)?
            .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(format!("{}.{name}", self.prefix)))
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.members(py)?.len())
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut items = Vec::new();
        for name in self.members(py)? {
            if let Some(item) = self.member(py, &name)? {
                items.push(item);
            }
        }
        Ok(PyList::new(py, items)?.try_iter()?.into_any().unbind())
    }

    fn __dir__(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let mut names: BTreeSet<String> = ["state_dict".to_owned()].into();
        names.extend(self.members(py)?);
        Ok(names.into_iter().collect())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let entries = (self.ops.entries)(self.root.bind(py), &self.prefix)?;
        Ok(format_entries(&self.prefix, &entries))
    }

    /// The group's tensors by name relative to the group (`weight` for `m.fc1`), with
    /// `prefix` before each, sharing the fields' memory.
    #[pyo3(signature = (*, prefix = String::new()))]
    fn state_dict<'py>(&self, py: Python<'py>, prefix: String) -> PyResult<Bound<'py, PyDict>> {
        (self.ops.state_dict)(self.root.bind(py), &self.prefix, &prefix)
    }
}
