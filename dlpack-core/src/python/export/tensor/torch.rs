//! PyTorch's `__torch_function__` protocol: a [`Tensor`](super::Tensor) as a tensor-like
//! object that PyTorch's functions take (`torch.add(t, 1)`, `param.copy_(t)` in
//! `Module.load_state_dict`), each converted with `torch.from_dlpack` (no copy).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple, PyType};

use super::Tensor;

/// How deep [`convert`] looks into nested lists, tuples and dicts: deeper containers
/// (or a list that holds itself) are passed on as they are.
const MAX_DEPTH: usize = 32;

/// `Tensor.__torch_function__(func, types, args=(), kwargs=None)`: calls `func` with
/// every `Tensor` of `args` and `kwargs` (in lists, tuples and dicts too) replaced by
/// `torch.from_dlpack` of it. Another tensor-like type among `types` (neither a
/// `Tensor` nor a subclass of `torch.Tensor`) gets the call instead: `NotImplemented`,
/// as the protocol says. PyTorch calls this only once it is imported, so the import
/// here costs nothing more, and nothing imports PyTorch otherwise.
pub(super) fn torch_function<'py>(
    cls: &Bound<'py, PyType>,
    func: &Bound<'py, PyAny>,
    types: &Bound<'py, PyAny>,
    args: Option<&Bound<'py, PyAny>>,
    kwargs: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = cls.py();
    let torch = py.import(intern!(py, "torch"))?;
    let torch_tensor = torch.getattr(intern!(py, "Tensor"))?;
    let ours = py.get_type::<Tensor>();
    for ty in types.try_iter()? {
        let ty = ty?;
        let handled = ty.is(&ours)
            || ty
                .cast::<PyType>()
                .is_ok_and(|t| t.is_subclass(&torch_tensor).unwrap_or(false));
        if !handled {
            return Ok(py.NotImplemented().into_bound(py));
        }
    }
    let from_dlpack = torch.getattr(intern!(py, "from_dlpack"))?;
    let args = match args.filter(|a| !a.is_none()) {
        Some(args) => match convert(args, &from_dlpack, 0)? {
            Some(converted) => converted.cast_into::<PyTuple>()?,
            None => args.cast::<PyTuple>()?.clone(),
        },
        None => PyTuple::empty(py),
    };
    let kwargs = match kwargs.filter(|k| !k.is_none()) {
        Some(kwargs) => Some(match convert(kwargs, &from_dlpack, 0)? {
            Some(converted) => converted.cast_into::<PyDict>()?,
            None => kwargs.cast::<PyDict>()?.clone(),
        }),
        None => None,
    };
    func.call(args, kwargs.as_ref())
}

/// `value` with every `Tensor` in it converted by `from_dlpack`, or `None` when there
/// is none (the value is then used as it is, whatever its type).
fn convert<'py>(
    value: &Bound<'py, PyAny>,
    from_dlpack: &Bound<'py, PyAny>,
    depth: usize,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if value.is_instance_of::<Tensor>() {
        return from_dlpack.call1((value,)).map(Some);
    }
    if depth >= MAX_DEPTH {
        return Ok(None);
    }
    if let Ok(tuple) = value.cast_exact::<PyTuple>() {
        let items = convert_items(tuple.iter(), from_dlpack, depth)?;
        return items
            .map(|items| PyTuple::new(value.py(), items).map(Bound::into_any))
            .transpose();
    }
    if let Ok(list) = value.cast_exact::<PyList>() {
        let items = convert_items(list.iter(), from_dlpack, depth)?;
        return items
            .map(|items| PyList::new(value.py(), items).map(Bound::into_any))
            .transpose();
    }
    if let Ok(dict) = value.cast_exact::<PyDict>() {
        let mut changed = false;
        let out = PyDict::new(value.py());
        for (key, item) in dict.iter() {
            match convert(&item, from_dlpack, depth + 1)? {
                Some(converted) => {
                    changed = true;
                    out.set_item(key, converted)?;
                }
                None => out.set_item(key, item)?,
            }
        }
        return Ok(changed.then(|| out.into_any()));
    }
    Ok(None)
}

/// The items, converted, when any of them was converted.
fn convert_items<'py>(
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    from_dlpack: &Bound<'py, PyAny>,
    depth: usize,
) -> PyResult<Option<Vec<Bound<'py, PyAny>>>> {
    let mut changed = false;
    let mut out = Vec::new();
    for item in items {
        match convert(&item, from_dlpack, depth + 1)? {
            Some(converted) => {
                changed = true;
                out.push(converted);
            }
            None => out.push(item),
        }
    }
    Ok(changed.then_some(out))
}
