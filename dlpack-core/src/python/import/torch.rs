//! PyTorch's rule for in-place writes, read when a typed argument is extracted: a
//! tensor that requires grad is not written while grad mode is on. Read before the
//! import, so that the Python code it may run (a subclass's `__torch_function__`)
//! cannot free or move memory that an import already describes; `DLPackArray` keeps
//! only the answer, which its `assume_exclusive` asks.

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule, PyTuple, PyType};

use crate::bridge::ndarray::TorchRefusal;

/// What the rule needs of torch, found once torch has loaded.
struct Torch {
    tensor_base: Py<PyType>,
    /// `TensorBase`'s own `requires_grad` descriptor: the flag, past a subclass's
    /// attribute of that name.
    requires_grad: Py<PyAny>,
    is_grad_enabled: Py<PyAny>,
}

/// Torch's entry points once `torch._C` is in `sys.modules` (a `torch` entry that a
/// lazy loader registered, not yet loaded, has none: it is left unloaded); absent
/// until then, and then no object is a torch tensor.
///
/// Only torch's own objects are kept, each checked by what Python code cannot make:
/// the module is an extension module whose C definition is named `torch._C` (a module
/// made in Python has no definition, another extension's definition has its own
/// name); `TensorBase` is a static type of it (a class made in Python is a heap type,
/// whatever its `__module__` says; a static type's attributes cannot be replaced); and
/// `is_grad_enabled` a C function bound to that module. A stand-in registered under
/// torch's names (a test's mock, a stub) is never kept: it is asked again on the next
/// call, and the real torch is found once it loads. While one is there, an object whose
/// class derives from torch's `TensorBase` (known by its static type's name) is
/// refused a write rather than written unchecked.
fn torch(py: Python<'_>) -> Found {
    static TORCH: PyOnceLock<Torch> = PyOnceLock::new();
    static MODULES: PyOnceLock<Py<PyDict>> = PyOnceLock::new();
    if let Some(torch) = TORCH.get(py) {
        return Found::Torch(torch);
    }
    let modules = MODULES
        .get_or_try_init(py, || {
            py.import(intern!(py, "sys"))?
                .getattr(intern!(py, "modules"))?
                .cast_into::<PyDict>()
                .map(Bound::unbind)
                .map_err(PyErr::from)
        })
        .map(|modules| modules.bind(py).get_item(intern!(py, "torch._C")));
    let Ok(Ok(Some(c))) = modules else {
        return Found::Absent;
    };
    found(py, &c).map_or(Found::StandIn, |torch| {
        Found::Torch(TORCH.get_or_init(py, || torch))
    })
}

/// What [`torch`] found.
enum Found {
    Torch(&'static Torch),
    /// No `torch._C` in `sys.modules` (or none could be read): torch has not loaded.
    Absent,
    /// Something else under torch's name, or torch's module with parts replaced.
    StandIn,
}

/// Torch's objects in `c`, if `c` is torch's own module and they are its own.
fn found(py: Python<'_>, c: &Bound<'_, PyAny>) -> Option<Torch> {
    if !is_extension_named(c, c"torch._C") {
        return None;
    }
    let tensor_base = c
        .getattr(intern!(py, "TensorBase"))
        .or_else(|_| c.getattr(intern!(py, "_TensorBase")))
        .ok()?
        .cast_into::<PyType>()
        .ok()?;
    // SAFETY:
    // - `tensor_base` is a live type object (held by the `Bound`);
    // - the thread is attached (`py`); reading a type's flags runs no code.
    let flags = unsafe { ffi::PyType_GetFlags(tensor_base.as_type_ptr()) };
    if flags & ffi::Py_TPFLAGS_HEAPTYPE != 0 {
        return None;
    }
    let requires_grad = tensor_base
        .getattr(intern!(py, "__dict__"))
        .and_then(|dict| dict.get_item(intern!(py, "requires_grad")))
        .ok()?;
    let is_grad_enabled = c.getattr(intern!(py, "is_grad_enabled")).ok()?;
    // A C function (no Python function or callable object) whose module is `c`.
    if !is_grad_enabled.get_type().is(&builtin_function_type(py)?)
        || !is_grad_enabled
            .getattr(intern!(py, "__self__"))
            .is_ok_and(|owner| owner.is(c))
    {
        return None;
    }
    Some(Torch {
        tensor_base: tensor_base.unbind(),
        requires_grad: requires_grad.unbind(),
        is_grad_enabled: is_grad_enabled.unbind(),
    })
}

/// Whether `obj`'s class derives from a static type named `torch._C.TensorBase`: a
/// torch tensor, found without torch's module (a static type's name is fixed in C).
/// Asked only while a stand-in holds torch's name.
fn derives_from_tensor_base(obj: &Bound<'_, PyAny>) -> bool {
    let py = obj.py();
    let Ok(mro) = obj.get_type().getattr(intern!(py, "__mro__")) else {
        return false;
    };
    let Ok(mro) = mro.cast_into::<PyTuple>() else {
        return false;
    };
    mro.iter().any(|ty| {
        let Ok(ty) = ty.cast_into::<PyType>() else {
            return false;
        };
        // SAFETY:
        // - `ty` is a live type object (held by the `Bound`);
        // - the thread is attached; reading a type's flags runs no code.
        let flags = unsafe { ffi::PyType_GetFlags(ty.as_type_ptr()) };
        flags & ffi::Py_TPFLAGS_HEAPTYPE == 0
            && ty
                .module()
                .is_ok_and(|m| m.to_cow().is_ok_and(|m| m == "torch._C"))
            && ty.name().is_ok_and(|n| {
                n.to_cow()
                    .is_ok_and(|n| n == "TensorBase" || n == "_TensorBase")
            })
    })
}

/// Whether `obj` is a module made by an extension from a C definition named `name`
/// (which Python code cannot rename).
fn is_extension_named(obj: &Bound<'_, PyAny>, name: &core::ffi::CStr) -> bool {
    if !obj.is_instance_of::<PyModule>() {
        return false;
    }
    // SAFETY:
    // - `obj` is a live module object (checked above), which `PyModule_GetDef` takes;
    // - the thread is attached; it reads one field and runs no code. NULL (a module
    //   made without a definition) sets no exception.
    let def = unsafe { ffi::PyModule_GetDef(obj.as_ptr()) };
    if def.is_null() {
        return false;
    }
    // SAFETY:
    // - `def` is the definition the module was made from, which lives as long as the
    //   extension that defines it, and so at least as long as the module `obj` holds;
    // - `m_name` is the NUL-terminated name the extension gave it (never NULL: CPython
    //   makes a module from the definition only with a name).
    let def_name = unsafe { (*def).m_name };
    // SAFETY: as above, `m_name` is a valid NUL-terminated C string while `def` lives.
    !def_name.is_null() && unsafe { core::ffi::CStr::from_ptr(def_name) } == name
}

/// The type of C functions (`builtin_function_or_method`), read from a function of
/// the `builtins` module (the stable ABI does not export it).
fn builtin_function_type(py: Python<'_>) -> Option<Bound<'_, PyType>> {
    static TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    TYPE.get_or_try_init(py, || {
        py.import(intern!(py, "builtins"))?
            .getattr(intern!(py, "len"))
            .map(|len| len.get_type().unbind())
    })
    .ok()
    .map(|ty| ty.bind(py).clone())
}

/// Why torch refuses an in-place write into `obj`, if it is a torch tensor: it
/// requires grad and grad mode is on. The flag is torch's own (`TensorBase`'s
/// descriptor, past a subclass's attribute of that name); a read that raises (a
/// subclass's `__torch_function__` that handles only some functions) refuses the write
/// rather than the read. One type check for anything else.
pub(super) fn write_refusal(obj: &Bound<'_, PyAny>) -> PyResult<Option<TorchRefusal>> {
    let py = obj.py();
    let torch = match torch(py) {
        Found::Torch(torch) => torch,
        Found::Absent => return Ok(None),
        Found::StandIn if derives_from_tensor_base(obj) => {
            return Ok(Some(TorchRefusal::StandIn));
        }
        Found::StandIn => return Ok(None),
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
    let requires_grad = torch
        .requires_grad
        .bind(py)
        .call_method1(intern!(py, "__get__"), (obj,));
    match requires_grad.and_then(|flag| flag.is_truthy()) {
        Ok(false) => Ok(None),
        Ok(true) if torch.is_grad_enabled.bind(py).call0()?.is_truthy()? => {
            Ok(Some(TorchRefusal::RequiresGrad))
        }
        Ok(true) => Ok(None),
        Err(_) => Ok(Some(TorchRefusal::Unreadable)),
    }
}
