//! `state_dict` and `load_state_dict`, in PyTorch's wording, and the named tuple
//! `IncompatibleKeys` that `load_state_dict` returns.

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyMapping, PyString, PyTuple};

use crate::batch::TensorBatch;
use crate::dtype::DataType;
use crate::error::Error;
use crate::traits::Found;

use crate::python::error::{is_standard_dtype, numpy_astype};
use crate::python::from_dlpack;

use super::PyModel;
use super::ops::visit_under;

#[cfg(doc)]
use crate::python::Tensor;

/// The tensors under `under` (all of them for `""`), named relative to it with `prefix`
/// before each, in a `dict`, sharing the fields' memory.
pub(super) fn state_dict_under<'py, T: PyModel>(
    model: &Bound<'py, T>,
    under: &str,
    prefix: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let py = model.py();
    let mut tensors = Vec::new();
    {
        // Each field's kept object (made here on its first read), under the borrow: that
        // runs no Python code; the `dict` is built after.
        let this = model.try_borrow()?;
        let mut failed = None;
        visit_under(&*this, under, &mut |name, field| {
            if failed.is_some() {
                return;
            }
            match super::tensor_object(field, py) {
                Ok(tensor) => {
                    let mut key = String::with_capacity(prefix.len() + name.len());
                    key.push_str(prefix);
                    key.push_str(name);
                    tensors.push((key, tensor));
                }
                // A share that fails (an allocation) fails again: its error, named.
                Err(e) => {
                    failed = Some(field.share().err().map_or(e, |e| e.in_tensor(name).into()))
                }
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
    }
    let dict = PyDict::new(py);
    for (key, tensor) in tensors {
        dict.set_item(key, tensor)?;
    }
    Ok(dict)
}

/// `model.state_dict(prefix="")`: a `dict` of every tensor by its `state_dict` name
/// (with `prefix` before each), each a [`Tensor`] sharing the field's
/// memory, in the order [`ToDLPack`](crate::ToDLPack) exports them.
/// PyTorch's `module.load_state_dict` takes it as it is (a [`Tensor`] is tensor-like
/// for PyTorch), and `torch.from_dlpack` of each is a PyTorch `state_dict` over the same
/// memory (what `load_state_dict(sd, assign=True)` needs).
pub fn state_dict<'py, T: PyModel>(
    model: &Bound<'py, T>,
    prefix: &str,
) -> PyResult<Bound<'py, PyDict>> {
    state_dict_under(model, "", prefix)
}

/// `model.load_state_dict(state_dict, strict=True)`, with PyTorch's semantics and
/// wording: every tensor of the model is loaded from the entry of its name (any DLPack
/// producer: PyTorch, NumPy, JAX, ...), into the field's own buffer when no Python view
/// holds it, else into a fresh one (copy-on-write, the [sharing rule](super)): tensors
/// taken from the model before, and a PyTorch optimizer over them, then keep the old
/// buffer; read them again, or load through a module whose parameters are the model's
/// tensors (`module.load_state_dict(sd)`, which copies into them in place). The tensors
/// that fit are loaded even when others do not; a value that is no DLPack tensor, under
/// a name the model has, is an error before anything is loaded. With
/// `strict=True`, missing and unexpected names are a `RuntimeError` worded as PyTorch
/// words it (`Error(s) in loading state_dict for Mlp: ...`); with `strict=False` they
/// are returned, as PyTorch's named tuple `(missing_keys, unexpected_keys)`. A tensor
/// whose shape differs from its field's is an error either way (PyTorch's
/// `size mismatch for ...`), and so is one of another dtype, worded the same way
/// (`dtype mismatch for ...`), with one line after them that says what PyTorch would do
/// and the one-line conversion that loads.
///
/// # Why another dtype is refused where PyTorch converts
///
/// PyTorch's `load_state_dict` copies each value with `param.copy_(value)`, which
/// converts whatever the dtypes: float64 rounds into float32, integers become floats,
/// a large float32 overflows a float16 to infinity, all without a word. A Rust model's
/// fields have one type each, and a load that silently changes values is the failure a
/// test is least likely to see; the conversion is one line in the caller's hands, which
/// says which way it goes (`{k: v.to(torch.float32) if v.dtype == torch.float64 else v
/// for k, v in sd.items()}`). This is the one difference from PyTorch's semantics.
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
    messages.extend(conversion_hints(&failed));
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

/// One tensor's failure in PyTorch's words where PyTorch has them (a shape), and in
/// the same form for a dtype, which PyTorch would convert.
fn failure_message(error: &Error) -> String {
    match error {
        Error::Tensor { name, error } => match error.root() {
            Error::ShapeMismatch { expected, found } => format!(
                "size mismatch for {name}: copying a param with shape {} from checkpoint, \
                 the shape in current model is {}.",
                shape_text(found),
                shape_text(expected)
            ),
            Error::DtypeMismatch { expected, found } => format!(
                "dtype mismatch for {name}: copying a param of dtype {found} from checkpoint, \
                 the dtype in current model is {expected}."
            ),
            root => format!("{name}: {}", crate::python::error::python_message(root)),
        },
        other => crate::python::error::python_message(other),
    }
}

/// After the failures, one line for each pair of dtypes that mismatched (a type both
/// PyTorch and this crate name): what PyTorch would do (convert, as `copy_` does) and
/// the one-line conversion that makes the `state_dict` load. The refusal stays: a
/// float64 checkpoint rounded silently into float32 fields is a change of values that
/// the caller should ask for.
fn conversion_hints(failed: &[Error]) -> Vec<String> {
    let mut pairs: Vec<(DataType, DataType)> = Vec::new();
    for error in failed {
        if let Error::Tensor { error, .. } = error {
            if let Error::DtypeMismatch { expected, found } = error.root() {
                if is_standard_dtype(*expected)
                    && is_standard_dtype(*found)
                    && !pairs.contains(&(*found, *expected))
                {
                    pairs.push((*found, *expected));
                }
            }
        }
    }
    pairs
        .into_iter()
        .map(|(found, expected)| {
            let numpy = match numpy_astype(expected) {
                Some(astype) => format!(", or {astype} for a NumPy array"),
                None => String::new(),
            };
            format!(
                "PyTorch would convert {found} to {expected} here (copy_); this model \
                 converts nothing silently: convert first, {{k: v.to(torch.{expected}) if \
                 v.dtype == torch.{found} else v for k, v in sd.items()}} for PyTorch \
                 tensors{numpy}."
            )
        })
        .collect()
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
