//! The attribute protocol of a model (`getattr`, `setattr`, `delattr`, `dir`, `repr`),
//! and the class attributes that its first reads install ([`TensorAttribute`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};

use crate::traits::{Found, TensorFields, split_path};

use super::PyModel;
use super::ops::{Named, entries, format_entries, group_assignment, set};
use super::{ModelView, Ops, OpsOf};

use crate::traits::is_segment;
#[cfg(doc)]
use crate::{python::Tensor, traits::TensorField};

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
        get(model, &key, None)?
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
        name: Arc::from(&*key),
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
    /// The field's name, which the view of a group keeps as its prefix (no copy).
    name: Arc<str>,
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
        (this.ops.get)(obj, &this.name, Some(&this.name))?
            .ok_or_else(|| no_attribute(obj, &this.name))
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.class)
    }
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
        Named::Nothing
    };
    match assigned {
        Named::Tensor(()) => Ok(()),
        Named::Group => Err(group_assignment(&key)),
        Named::Nothing => generic_set(model.as_any(), name, Some(value)),
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

/// The tensor, or the group of tensors, that `path` names in the model, as a Python
/// object: the field's [`Tensor`] (the same object until Rust writes or replaces the
/// field), or a [`ModelView`], whose prefix is `shared` when given (`path` as a shared
/// string, kept without a copy).
pub(super) fn get<T: PyModel>(
    model: &Bound<'_, T>,
    path: &str,
    shared: Option<&Arc<str>>,
) -> PyResult<Option<Py<PyAny>>> {
    let py = model.py();
    let found = {
        let this = model.try_borrow()?;
        match this.find_tensor(path) {
            Found::Tensor(field) => Named::Tensor(super::tensor_object(field, py)?),
            Found::Group => Named::Group,
            Found::Nothing => Named::Nothing,
        }
    };
    Ok(match found {
        Named::Tensor(tensor) => Some(tensor.into_any()),
        Named::Group => Some(
            Bound::new(
                py,
                ModelView::new(
                    model.clone().into_any().unbind(),
                    shared.map_or_else(|| Arc::from(path), Arc::clone),
                    &OpsOf::<T>::OPS,
                ),
            )?
            .into_any()
            .unbind(),
        ),
        Named::Nothing => None,
    })
}
