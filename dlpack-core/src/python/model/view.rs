//! [`ModelView`], a group of a model's tensors as a Python object.

use std::collections::BTreeSet;
use std::sync::Arc;

use pyo3::exceptions::{PyAttributeError, PyIndexError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyInt, PyList, PyString};

use crate::traits::is_segment;
use crate::traits::{push_segment, split_path};

use super::Ops;
use super::ops::{Named, format_entries, group_assignment};

/// The attributes of [`ModelView`]'s class without a leading `_`: a member of one of
/// these names is reached by index only (`view["state_dict"]`).
const CLASS_NAMES: [&str; 1] = ["state_dict"];

/// `object.__getattribute__`, for the names a [`ModelView`] looks up on its class.
fn object_getattribute(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static METHOD: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    Ok(METHOD
        .get_or_try_init(py, || {
            py.get_type::<PyAny>()
                .getattr(intern!(py, "__getattribute__"))
                .map(Bound::unbind)
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
    prefix: Arc<str>,
    ops: &'static Ops,
}

impl ModelView {
    /// The group under `prefix` of the model object `root`, of the class whose
    /// operations are `ops`.
    pub(super) fn new(root: Py<PyAny>, prefix: Arc<str>, ops: &'static Ops) -> Self {
        Self { root, prefix, ops }
    }

    fn path(&self, name: &str) -> String {
        let mut path = String::with_capacity(self.prefix.len() + 1 + name.len());
        path.push_str(&self.prefix);
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
        // The path on the stack when it is short (every read of a member builds one).
        let mut buffer = [0u8; 128];
        let (prefix, dot) = (self.prefix.as_bytes(), usize::from(!self.prefix.is_empty()));
        let end = prefix.len() + dot + name.len();
        if let Some(out) = buffer.get_mut(..end) {
            let (head, tail) = out.split_at_mut(prefix.len());
            head.copy_from_slice(prefix);
            let (sep, rest) = tail.split_at_mut(dot);
            sep.fill(b'.');
            rest.copy_from_slice(name.as_bytes());
            if let Ok(path) = core::str::from_utf8(out) {
                return (self.ops.get)(self.root.bind(py), path, None);
            }
        }
        (self.ops.get)(self.root.bind(py), &self.path(name), None)
    }
}

#[pymethods]
impl ModelView {
    /// A member by name, looked up before the class's attributes (no failed lookup
    /// first, which would cost an exception per read) except for the names the class
    /// has: `state_dict`, and every name with a leading `_` (the special methods and
    /// `object`'s own), which go to `object.__getattribute__` first. Nothing is set on
    /// the class, which every model's views share: which names a member may have
    /// comes from data (a map's keys). What this does not find goes to `__getattr__`.
    fn __getattribute__(slf: &Bound<'_, Self>, name: &Bound<'_, PyString>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        if let Ok(key) = name.to_cow() {
            if !key.starts_with('_') && !CLASS_NAMES.contains(&&*key) {
                if let Some(found) = slf.get().member(py, &key)? {
                    return Ok(found);
                }
            }
        }
        Ok(object_getattribute(py)?.call1((slf, name))?.unbind())
    }

    /// A member that `__getattribute__` did not find first (a name with a leading `_`
    /// that the class lacks), else `AttributeError` in the view's words.
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
            Named::Nothing
        };
        match assigned {
            Named::Tensor(()) => Ok(()),
            Named::Group => Err(group_assignment(&path)),
            Named::Nothing => Err(PyAttributeError::new_err(format!(
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
