//! PyTorch's rule for in-place writes, read when a typed argument is extracted: a
//! tensor that requires grad is not written while grad mode is on. Read before the
//! import, so that the Python code it may run (a subclass's `__torch_function__`)
//! cannot free or move memory that an import already describes; `DLPackArray` keeps
//! only the answer, which its `assume_exclusive` asks.

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

/// Why a tensor that requires grad is not written while grad mode is on.
const REQUIRES_GRAD: &str = "the tensor requires grad and grad mode is on: autograd cannot \
                             record a write made outside torch (torch itself refuses one \
                             into a leaf such as a Parameter); write it under \
                             torch.no_grad(), as optimizer steps do";

/// What the rule needs of torch, found once torch has loaded.
struct Torch {
    tensor_base: Py<PyType>,
    is_grad_enabled: Py<PyAny>,
}

/// Torch's entry points once `torch._C` is in `sys.modules` (a `torch` entry that a
/// lazy loader registered, not yet loaded, has none: it is left unloaded); `None`
/// until then, and then no object is a torch tensor.
fn torch(py: Python<'_>) -> Option<&'static Torch> {
    static TORCH: PyOnceLock<Torch> = PyOnceLock::new();
    static MODULES: PyOnceLock<Py<PyDict>> = PyOnceLock::new();
    if let Some(torch) = TORCH.get(py) {
        return Some(torch);
    }
    let modules = MODULES
        .get_or_try_init(py, || {
            py.import(intern!(py, "sys"))?
                .getattr(intern!(py, "modules"))?
                .cast_into::<PyDict>()
                .map(Bound::unbind)
                .map_err(PyErr::from)
        })
        .ok()?
        .bind(py);
    let c = modules.get_item(intern!(py, "torch._C")).ok()??;
    let tensor_base = c
        .getattr(intern!(py, "TensorBase"))
        .or_else(|_| c.getattr(intern!(py, "_TensorBase")))
        .ok()?
        .cast_into::<PyType>()
        .ok()?;
    let is_grad_enabled = c.getattr(intern!(py, "is_grad_enabled")).ok()?;
    Some(TORCH.get_or_init(py, || Torch {
        tensor_base: tensor_base.unbind(),
        is_grad_enabled: is_grad_enabled.unbind(),
    }))
}

/// Why torch refuses an in-place write into `obj`, if it is a torch tensor: it
/// requires grad (torch's own answer, a subclass's `__torch_function__` included) and
/// grad mode is on. One type check for anything else.
pub(super) fn write_refusal(obj: &Bound<'_, PyAny>) -> PyResult<Option<&'static str>> {
    let py = obj.py();
    let Some(torch) = torch(py) else {
        return Ok(None);
    };
    // SAFETY:
    // - both pointers are live type objects: `obj`'s type (kept alive by `obj`) and
    //   torch's tensor base class (held by the static);
    // - the thread is attached (`py`); `PyType_IsSubtype` reads the MRO and runs no code.
    let is_tensor = unsafe {
        ffi::PyType_IsSubtype(obj.get_type_ptr(), torch.tensor_base.bind(py).as_type_ptr())
    } != 0;
    if !is_tensor || !obj.getattr(intern!(py, "requires_grad"))?.is_truthy()? {
        return Ok(None);
    }
    if torch.is_grad_enabled.bind(py).call0()?.is_truthy()? {
        Ok(Some(REQUIRES_GRAD))
    } else {
        Ok(None)
    }
}
