//! The core under the model's Python classes: what a path names in a model
//! ([`Named`]), the assignment and listing of its tensors by name, and the texts they
//! share. It names none of the classes (the table of one model class's operations,
//! [`Ops`](super::Ops), is the module's own).

use std::fmt::Write as _;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::python::{Tensor, from_dlpack};
use crate::traits::{Found, TensorField, TensorFields};

use super::PyModel;

/// A tensor's name, dtype and shape.
pub(super) struct Entry {
    pub(super) name: String,
    pub(super) dtype: crate::dtype::DataType,
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

pub(super) fn group_assignment(path: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "cannot assign to '{path}': it is a group of tensors; assign its tensors one by one, \
         or load them with load_state_dict"
    ))
}

pub(super) fn format_entries(name: &str, entries: &[Entry]) -> String {
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
