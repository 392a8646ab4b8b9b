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

use crate::bridge::ndarray::TorchRefusal;

/// What the rule needs of torch, found once torch has loaded.
struct Torch {
    tensor_base: Py<PyType>,
    /// `torch.Tensor` and `torch.nn.Parameter`, whose `requires_grad` is torch's own.
    plain: [Py<PyType>; 2],
    /// `TensorBase`'s own `requires_grad` descriptor: the flag, past a subclass's
    /// attribute of that name.
    requires_grad: Py<PyAny>,
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
    // Only torch's own class (a stand-in module registered under that name is not
    // cached).
    if tensor_base.module().ok()?.to_cow().ok()? != "torch._C" {
        return None;
    }
    let torch = modules.get_item(intern!(py, "torch")).ok()??;
    let tensor = torch
        .getattr(intern!(py, "Tensor"))
        .ok()?
        .cast_into::<PyType>()
        .ok()?;
    let parameter = torch
        .getattr(intern!(py, "nn"))
        .and_then(|nn| nn.getattr(intern!(py, "Parameter")))
        .ok()?
        .cast_into::<PyType>()
        .ok()?;
    let requires_grad = tensor_base
        .getattr(intern!(py, "__dict__"))
        .and_then(|dict| dict.get_item(intern!(py, "requires_grad")))
        .ok()?;
    let is_grad_enabled = c.getattr(intern!(py, "is_grad_enabled")).ok()?;
    Some(TORCH.get_or_init(py, || Torch {
        tensor_base: tensor_base.unbind(),
        plain: [tensor.unbind(), parameter.unbind()],
        requires_grad: requires_grad.unbind(),
        is_grad_enabled: is_grad_enabled.unbind(),
    }))
}

/// Why torch refuses an in-place write into `obj`, if it is a torch tensor: it
/// requires grad and grad mode is on. The flag is torch's own (`TensorBase`'s
/// descriptor, past a subclass's attribute of that name); a read that raises (a
/// subclass's `__torch_function__` that handles only some functions) refuses the write
/// rather than the read. One type check for anything else.
pub(super) fn write_refusal(obj: &Bound<'_, PyAny>) -> PyResult<Option<TorchRefusal>> {
    let py = obj.py();
    let Some(torch) = torch(py) else {
        return Ok(None);
    };
    // SAFETY:
    // - both pointers are live type objects: `obj`'s type (kept alive by `obj`, whose
    //   type only an attached thread can change) and torch's tensor base class (held
    //   by the static);
    // - the thread is attached (`py`); `PyType_IsSubtype` reads the MRO and runs no code.
    let is_tensor = unsafe {
        ffi::PyType_IsSubtype(obj.get_type_ptr(), torch.tensor_base.bind(py).as_type_ptr())
    } != 0;
    if !is_tensor {
        return Ok(None);
    }
    let ty = obj.get_type();
    let requires_grad = if torch.plain.iter().any(|plain| ty.is(plain.bind(py))) {
        obj.getattr(intern!(py, "requires_grad"))
    } else {
        torch
            .requires_grad
            .bind(py)
            .call_method1(intern!(py, "__get__"), (obj,))
    };
    match requires_grad.and_then(|flag| flag.is_truthy()) {
        Ok(false) => Ok(None),
        Ok(true) if torch.is_grad_enabled.bind(py).call0()?.is_truthy()? => {
            Ok(Some(TorchRefusal::RequiresGrad))
        }
        Ok(true) => Ok(None),
        Err(_) => Ok(Some(TorchRefusal::Unreadable)),
    }
}
