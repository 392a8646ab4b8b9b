//! The type-erasure core: the operations of one model class as plain functions
//! ([`Ops`]), through which the Python classes shared by every model class
//! ([`ModelView`], [`TensorAttribute`](super::TensorAttribute)) reach a model; and the
//! lookup, assignment and listing of a model's tensors by name that they run.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::python::{Tensor, from_dlpack};
use crate::traits::{Found, TensorField, TensorFields};

use super::state_dict::state_dict_under;
use super::{ModelView, PyModel};

/// A tensor or a group found by name, as a Python object; `None` when there is none.
pub(super) type Member = PyResult<Option<Py<PyAny>>>;

/// The operations of one model class, for the [`ModelView`]s of its groups (which are
/// of one Python class for every model, so they reach the model through these).
pub(super) struct Ops {
    pub(super) get: fn(&Bound<'_, PyAny>, &str) -> Member,
    pub(super) set: fn(&Bound<'_, PyAny>, &str, &Bound<'_, PyAny>) -> PyResult<Assigned>,
    pub(super) entries: fn(&Bound<'_, PyAny>, &str) -> PyResult<Vec<Entry>>,
    pub(super) state_dict:
        for<'py> fn(&Bound<'py, PyAny>, &str, &str) -> PyResult<Bound<'py, PyDict>>,
}

/// One class's [`Ops`], made by the compiler once per class.
pub(super) struct OpsOf<T>(core::marker::PhantomData<T>);

impl<T: PyModel> OpsOf<T> {
    pub(super) const OPS: Ops = Ops {
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
pub(super) struct Entry {
    pub(super) name: String,
    pub(super) dtype: crate::DataType,
    pub(super) shape: Vec<usize>,
}

/// What a path names in a model, as [`Found`] says it, kept past the model's borrow: a
/// tensor (with what the caller took of it: a share of the field for a lookup, `()` for
/// an assignment), a group of tensors, or nothing.
pub(super) enum Named<T> {
    Tensor(T),
    Group,
    Nothing,
}

/// What an assignment found at its path.
pub(super) type Assigned = Named<()>;

/// The tensor, or the group of tensors, that `path` names in the model, as a Python
/// object: a [`Tensor`] sharing the field's memory, or a [`ModelView`].
pub(super) fn get<T: PyModel>(model: &Bound<'_, T>, path: &str) -> PyResult<Option<Py<PyAny>>> {
    let py = model.py();
    let found = {
        let this = model.try_borrow()?;
        match this.find_tensor(path) {
            Found::Tensor(field) => Named::Tensor(field.share()?),
            Found::Group => Named::Group,
            Found::Nothing => Named::Nothing,
        }
    };
    Ok(match found {
        Named::Tensor(tensor) => Some(tensor.into_pyobject(py)?.into_any().unbind()),
        Named::Group => Some(
            Bound::new(
                py,
                ModelView::new(
                    model.clone().into_any().unbind(),
                    path.to_owned(),
                    &OpsOf::<T>::OPS,
                ),
            )?
            .into_any()
            .unbind(),
        ),
        Named::Nothing => None,
    })
}

/// Replaces the tensor at `path` by `value` (any DLPack producer), checked against the
/// field (dtype, rank, shape, a CPU-accessible device).
pub(super) fn set<T: PyModel>(
    model: &Bound<'_, T>,
    path: &str,
    value: &Bound<'_, PyAny>,
) -> PyResult<Assigned> {
    {
        let this = model.try_borrow()?;
        match this.find_tensor(path) {
            Found::Tensor(_) => {}
            Found::Group => return Ok(Named::Group),
            Found::Nothing => return Ok(Named::Nothing),
        }
    }
    // Another field's tensor (or this one's): its buffer, shared (tied weights).
    if let Ok(ours) = value.cast::<Tensor>() {
        let mut this = model.try_borrow_mut()?;
        if this
            .find_tensor_mut(path)
            .is_some_and(|field| field.tie(ours.get().tensor()))
        {
            return Ok(Named::Tensor(()));
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
            Ok(Named::Tensor(()))
        }
        None => Ok(Named::Nothing),
    }
}

/// Every tensor under `prefix` (all of them for `""`), with names relative to it.
pub(super) fn entries<T: PyModel>(model: &Bound<'_, T>, prefix: &str) -> PyResult<Vec<Entry>> {
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
pub(super) fn visit_under<T: TensorFields + ?Sized>(
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
