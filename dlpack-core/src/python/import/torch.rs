//! PyTorch's rule for in-place writes, read when a typed argument is extracted: a
//! tensor that requires grad is not written while grad mode is on. Whether the rule
//! applies (a torch tensor, a torch that can be trusted) is decided before the import,
//! so that the Python code finding torch may run cannot free or move memory that an
//! import already describes; the rule itself is read after the import, with C calls
//! only. `DLPackArray` keeps only the answer, which its `assume_exclusive` asks.
//!
//! Everything the rule relies on is something Python code cannot make or replace:
//!
//! - **Which objects are torch tensors**: those whose class derives, base by base
//!   (`tp_base`, the memory layout, which neither a metaclass's `mro()` nor a
//!   `__bases__` assignment can take away), from a static type named
//!   `torch._C.TensorBase` (a class made in Python is a heap type, whatever its
//!   `__module__` says; a static type's name is fixed in C). No look-up in
//!   `sys.modules` decides it, so that removing or replacing torch's entries there
//!   does not hide a tensor.
//! - **The flag**: `TensorBase`'s own `requires_grad` descriptor, from the static type's
//!   dictionary, past a subclass's attribute of that name, read with torch functions
//!   off (`DisableTorchFunction`) wherever a subclass's `__torch_function__` or a
//!   torch function mode would answer the read. Python code changes a static type's
//!   dictionary only through the garbage collector's referents, deliberately; what is
//!   found there is checked to be, exactly, a C descriptor that type made under that
//!   name (its `d_type` and `d_name`, C fields read from the object itself, since
//!   `__objclass__` and `__name__` are looked up in the descriptor type's own
//!   dictionary, which can be rewritten the same way), and so are
//!   `DisableTorchFunction`'s own `__enter__` and `__exit__`: anything else is a
//!   stand-in.
//! - **When**: once, after the import, always with torch functions off, so that it runs
//!   no Python code (nothing between the import and the write can free or move the
//!   memory) and sees what the import may have done (the class's own `__dlpack__` can
//!   set the flag or turn grad mode on). Only the look-up of torch, which may run Python
//!   code, comes before the import.
//! - **Cost**: where the C API allows it, `is_grad_enabled` and the descriptor's getter
//!   are called through their entry points (the function checked once to have the
//!   calling convention its call uses), with no attribute look-up, bound method or
//!   argument tuple; a tensor of the torch already found is known by comparing its
//!   bases with that `TensorBase`; an exact NumPy array read in place skips the rule
//!   (no torch tensor, no Python code).
//! - **Grad mode**: `is_grad_enabled` of torch's own module, found in the interpreter's
//!   table of modules (not the `sys.modules` attribute, which can be rebound): an
//!   extension module whose C definition is named `torch._C` (a module made in Python
//!   has no definition, another extension's has its own name), whose `TensorBase` is
//!   the tensor's, and whose `is_grad_enabled` is a C function of that name bound to
//!   it (and so is the static `DisableTorchFunction`).
//!   Only then is it kept; anything else (a stand-in registered under torch's
//!   name, a function replaced on the module) refuses the write of a torch tensor
//!   ([`TorchRefusal::StandIn`]) and is asked again on the next call.

use core::ffi::CStr;

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyModule, PyString, PyType};

use crate::bridge::ndarray::WriteRefusal;

/// Why torch refuses an in-place write into a typed argument.
#[derive(Clone, Copy)]
pub(super) enum TorchRefusal {
    /// It requires grad, and grad mode was on.
    RequiresGrad,
    /// Its `requires_grad` could not be read.
    Unreadable,
    /// Torch's names are held by a stand-in (not torch's own module), so grad mode
    /// could not be read.
    StandIn,
}

impl TorchRefusal {
    /// The refusal as the ndarray bridge records it.
    pub(super) fn refusal(self) -> WriteRefusal {
        WriteRefusal(self.reason())
    }

    fn reason(self) -> &'static str {
        match self {
            Self::RequiresGrad => {
                "the tensor requires grad and grad mode is on: autograd cannot record a \
                 write made outside torch (torch itself refuses one into a leaf such as a \
                 Parameter); write it under torch.no_grad(), as optimizer steps do"
            }
            Self::Unreadable => {
                "torch could not say whether the tensor requires grad (its requires_grad \
                 raised): it is not written in place"
            }
            Self::StandIn => {
                "torch could not say whether the tensor requires grad (the module torch._C is \
                 not torch's own, or a function or class of it that the rule reads was \
                 replaced): it is not written in place"
            }
        }
    }
}

/// What the rule needs of torch, kept once torch's own module is found.
pub(super) struct Torch {
    tensor_base: Py<PyType>,
    /// `TensorBase`'s own `requires_grad` descriptor: the flag, past a subclass's
    /// attribute of that name.
    requires_grad: Py<PyAny>,
    is_grad_enabled: Py<PyAny>,
    /// `DisableTorchFunction`, under which the flag is read.
    disable_torch_function: Py<PyType>,
    /// Its own `__enter__` and `__exit__` (method descriptors of a static type), called
    /// with the instance: no look-up on it.
    enter: Py<PyAny>,
    exit: Py<PyAny>,
    /// The C entry points behind `is_grad_enabled` and the `requires_grad` descriptor,
    /// called directly where the C API allows it.
    #[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
    native: Option<Native>,
}

/// Torch's C function and getter, as their Python objects hold them: a call through
/// them is the call CPython would make (less its recursion guard and its check of the
/// result, which torch's entry points do not need), with no attribute look-up,
/// argument tuple or bound method made on the way.
#[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
struct Native {
    /// `torch._C`, the module the C function is bound to (its `self`).
    module: Py<PyAny>,
    /// `is_grad_enabled` (`METH_NOARGS`).
    is_grad_enabled: ffi::PyCFunction,
    /// The `requires_grad` descriptor's `__get__` (a `getset_descriptor`'s slot).
    get: ffi::descrgetfunc,
}

impl Torch {
    /// `torch._C.is_grad_enabled()`, grad mode on the calling thread.
    fn is_grad_enabled(&self, py: Python<'_>) -> PyResult<bool> {
        #[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
        if let Some(native) = &self.native {
            // SAFETY:
            // - `is_grad_enabled` is the `METH_NOARGS` C function of the object
            //   `self.is_grad_enabled` (checked in `native`), called as CPython calls one:
            //   with its own bound object, `native.module` (the function's `m_self`,
            //   compared in `c_function`; alive while `self` is) and NULL, on an attached
            //   thread;
            // - torch's entry points catch C++ exceptions;
            // - it returns a new reference, or NULL with an exception set.
            let result =
                unsafe { (native.is_grad_enabled)(native.module.as_ptr(), core::ptr::null_mut()) };
            // SAFETY: a new reference or NULL with an exception set, as above.
            return unsafe { Bound::from_owned_ptr_or_err(py, result) }?.is_truthy();
        }
        self.is_grad_enabled.bind(py).call0()?.is_truthy()
    }

    /// `obj.requires_grad` through torch's descriptor (its C getter): only with torch
    /// functions off ([`without_torch_functions`]), under which it runs no Python code.
    fn read_flag(&self, obj: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = obj.py();
        #[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
        if let Some(native) = &self.native {
            // SAFETY:
            // - `get` is the `tp_descr_get` slot of `getset_descriptor`, the exact type
            //   of `self.requires_grad` (both checked in `native`): called with that
            //   live descriptor and a live object, as CPython's attribute look-up calls
            //   it;
            // - that slot checks that the object is an instance of the descriptor's own
            //   type before it calls the descriptor's getter, whatever the object;
            // - the descriptor is one `TensorBase` made (its `d_type`, checked in
            //   `is_descriptor`), so the getter is torch's, which catches C++
            //   exceptions;
            // - the third argument, a type, is not read by that slot: the object's type
            //   is passed, borrowed for the call;
            // - the thread is attached;
            // - it returns a new reference, or NULL with an exception set.
            let result = unsafe {
                (native.get)(
                    self.requires_grad.as_ptr(),
                    obj.as_ptr(),
                    obj.get_type_ptr().cast(),
                )
            };
            // SAFETY: a new reference or NULL with an exception set, as above.
            return unsafe { Bound::from_owned_ptr_or_err(py, result) }?.is_truthy();
        }
        self.requires_grad
            .bind(py)
            .call_method1(intern!(py, "__get__"), (obj,))?
            .is_truthy()
    }
}

/// Whether torch's rule applies to one typed argument, decided before its import:
/// [`WriteRule::after_import`] reads the rule.
pub(super) enum WriteRule {
    /// Not a torch tensor: written as any import.
    Allowed,
    /// Refused, for the reason given.
    Refused(TorchRefusal),
    /// A tensor of this torch: its rule is read after the import, which may have run
    /// the class's own `__dlpack__` (it can set the flag or turn grad mode on).
    Read(&'static Torch),
}

impl WriteRule {
    /// The refusal: for a torch tensor, its rule read after the import with torch
    /// functions off, C calls only (no Python code of the tensor's class, of a mode or
    /// of anyone else runs); a flag that cannot be read refuses the write.
    pub(super) fn after_import(self, obj: &Bound<'_, PyAny>) -> PyResult<Option<TorchRefusal>> {
        let torch = match self {
            Self::Allowed => return Ok(None),
            Self::Refused(reason) => return Ok(Some(reason)),
            Self::Read(torch) => torch,
        };
        match without_torch_functions(torch, obj) {
            Ok(false) => Ok(None),
            Ok(true) if torch.is_grad_enabled(obj.py())? => Ok(Some(TorchRefusal::RequiresGrad)),
            Ok(true) => Ok(None),
            Err(_) => Ok(Some(TorchRefusal::Unreadable)),
        }
    }
}

/// The names `TensorBase` has had (`_TensorBase` before torch 2.2).
const TENSOR_BASE: [&str; 2] = ["TensorBase", "_TensorBase"];

/// Whether torch's rule for an in-place write applies to `obj`, before its import: a
/// torch tensor of a torch that can be trusted is read after the import (refused if it
/// requires grad and grad mode is on; the flag is torch's own, `TensorBase`'s
/// descriptor past a subclass's attribute of that name, read with torch functions off,
/// since a subclass's `__torch_function__` or a mode could answer anything); one of a
/// torch that cannot be trusted is refused. For anything else, a walk over its class's
/// bases.
pub(super) fn write_rule(obj: &Bound<'_, PyAny>) -> PyResult<WriteRule> {
    let py = obj.py();
    let torch = match known_tensor(obj) {
        Some(torch) => torch,
        None => {
            let Some(base) = tensor_base_of(obj) else {
                return Ok(WriteRule::Allowed);
            };
            let Some(torch) = torch(py, &base) else {
                return Ok(WriteRule::Refused(TorchRefusal::StandIn));
            };
            torch
        }
    };
    Ok(WriteRule::Read(torch))
}

/// [`Torch::read_flag`] under `DisableTorchFunction` (C calls only: no subclass's or mode's
/// Python code runs); its `__exit__` runs whatever the read gave.
fn without_torch_functions(torch: &Torch, obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = obj.py();
    let off = torch.disable_torch_function.bind(py).call0()?;
    torch.enter.bind(py).call1((&off,))?;
    let flag = torch.read_flag(obj);
    // (With no exception arguments, which it does not read: no tuple is allocated, so
    // no garbage collection, and none of the finalizers it could run, starts here.)
    torch.exit.bind(py).call1((&off,))?;
    flag
}

/// Torch's objects, once found ([`torch`]).
static TORCH: PyOnceLock<Torch> = PyOnceLock::new();

/// Torch's objects if `obj` is a tensor of the torch already found: its class derives,
/// base by base, from that `TensorBase` (pointers compared, no name read); `None` for
/// anything else, which [`tensor_base_of`] then walks by name.
#[cfg(not(any(Py_LIMITED_API, Py_GIL_DISABLED)))]
fn known_tensor(obj: &Bound<'_, PyAny>) -> Option<&'static Torch> {
    let torch = TORCH.get(obj.py())?;
    let tensor_base = torch.tensor_base.as_ptr().cast::<ffi::PyTypeObject>();
    let mut ty = obj.get_type_ptr();
    while !ty.is_null() {
        if ty == tensor_base {
            return Some(torch);
        }
        // SAFETY:
        // - `ty` is a live type object: `obj`'s type, which `obj` keeps alive, or the
        //   base of a live type, which that type keeps alive (`tp_base` is a strong
        //   reference of a heap type; a static type is never freed); with the GIL
        //   held and no Python code running during the walk, no type's base changes
        //   and nothing is freed;
        // - one field is read, not written.
        ty = unsafe { (*ty).tp_base };
    }
    None
}

/// [`known_tensor`] where a type's fields are not for reading: always `None`, and
/// [`tensor_base_of`] walks the bases.
#[cfg(any(Py_LIMITED_API, Py_GIL_DISABLED))]
fn known_tensor(_: &Bound<'_, PyAny>) -> Option<&'static Torch> {
    None
}

/// Torch's objects, once its own module is found and agrees with `base` (the
/// `TensorBase` a tensor derives from); `None` while it cannot be trusted.
fn torch<'py>(py: Python<'py>, base: &Bound<'py, PyType>) -> Option<&'static Torch> {
    // (Looked for outside the lock: the look-up may run Python code, which may extract
    // a typed argument in turn; two threads may both look, and the first one's is kept.)
    let torch = match TORCH.get(py) {
        Some(torch) => torch,
        None => {
            let found = find(py, base)?;
            let _ = TORCH.set(py, found);
            TORCH.get(py)?
        }
    };
    torch.tensor_base.bind(py).is(base).then_some(torch)
}

/// Torch's objects in its own module, if it is torch's and agrees with `base`.
fn find(py: Python<'_>, base: &Bound<'_, PyType>) -> Option<Torch> {
    let name = intern!(py, "torch._C");
    // SAFETY:
    // - `name` is a live `str`; the thread is attached (`py`);
    // - `PyImport_GetModule` returns a new reference, or NULL (with an exception set
    //   only when the look-up failed).
    let c = unsafe { ffi::PyImport_GetModule(name.as_ptr()) };
    // SAFETY: a new reference or NULL, as above.
    let Some(c) = (unsafe { Bound::from_owned_ptr_or_opt(py, c) }) else {
        // (A look-up that failed: the write is refused, nothing else to report.)
        drop(PyErr::take(py));
        return None;
    };
    if !is_extension_named(&c, c"torch._C") {
        return None;
    }
    let module_base = TENSOR_BASE
        .iter()
        .find_map(|name| c.getattr(PyString::intern(py, name)).ok())?;
    if !module_base.is(base) {
        return None;
    }
    let requires_grad = base
        .getattr(intern!(py, "__dict__"))
        .and_then(|dict| dict.get_item(intern!(py, "requires_grad")))
        .ok()?;
    if !is_descriptor(&requires_grad, Descriptor::GetSet, base, "requires_grad") {
        return None;
    }
    let is_grad_enabled = c_function(&c, "is_grad_enabled")?;
    let disable_torch_function = c
        .getattr(intern!(py, "DisableTorchFunction"))
        .ok()?
        .cast_into::<PyType>()
        .ok()?;
    if !is_static_named(&disable_torch_function, "DisableTorchFunction") {
        return None;
    }
    // (A static type's dictionary, which Python code does not change but through the
    // garbage collector's referents.)
    let methods = disable_torch_function
        .getattr(intern!(py, "__dict__"))
        .ok()?;
    let enter = methods.get_item(intern!(py, "__enter__")).ok()?;
    let exit = methods.get_item(intern!(py, "__exit__")).ok()?;
    let own_method = |method: &Bound<'_, PyAny>, name| {
        is_descriptor(method, Descriptor::Method, &disable_torch_function, name)
    };
    if !own_method(&enter, "__enter__") || !own_method(&exit, "__exit__") {
        return None;
    }
    #[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
    let native = native(&c, &is_grad_enabled, &requires_grad);
    Some(Torch {
        tensor_base: base.clone().unbind(),
        #[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
        native,
        requires_grad: requires_grad.unbind(),
        is_grad_enabled: is_grad_enabled.unbind(),
        disable_torch_function: disable_torch_function.unbind(),
        enter: enter.unbind(),
        exit: exit.unbind(),
    })
}

/// The entry points behind torch's `is_grad_enabled` (a C function without arguments)
/// and behind its `requires_grad` descriptor (a `getset_descriptor`); `None` if either
/// is not what it should be, and the rule calls them through Python.
#[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
fn native(
    module: &Bound<'_, PyAny>,
    is_grad_enabled: &Bound<'_, PyAny>,
    requires_grad: &Bound<'_, PyAny>,
) -> Option<Native> {
    // SAFETY: a live object; the thread is attached; it compares one pointer.
    let is_c_function = unsafe { ffi::PyCFunction_CheckExact(is_grad_enabled.as_ptr()) } != 0;
    if !is_c_function {
        return None;
    }
    // SAFETY:
    // - `is_grad_enabled` is a live C function object (checked above), which both
    //   calls take; the thread is attached;
    // - they read its definition's flags and function pointer, and run no code.
    let flags = unsafe { ffi::PyCFunction_GetFlags(is_grad_enabled.as_ptr()) };
    if flags != ffi::METH_NOARGS {
        return None;
    }
    // SAFETY: as above.
    let is_grad_enabled = unsafe { ffi::PyCFunction_GetFunction(is_grad_enabled.as_ptr()) }?;
    let descriptor_type = requires_grad.get_type_ptr();
    if descriptor_type != &raw mut ffi::PyGetSetDescr_Type {
        return None;
    }
    // SAFETY: `getset_descriptor`, a static type of the interpreter, whose slot is
    // read, not written.
    let get = unsafe { (*descriptor_type).tp_descr_get }?;
    Some(Native {
        module: module.clone().unbind(),
        is_grad_enabled,
        get,
    })
}

/// The C function `name` of torch's module `c`: a C function (exactly) of that name
/// bound to `c`, else `None` (a function replaced on the module).
fn c_function<'py>(c: &Bound<'py, PyAny>, name: &str) -> Option<Bound<'py, PyAny>> {
    let py = c.py();
    let function = c.getattr(PyString::intern(py, name)).ok()?;
    // SAFETY: a live object; the thread is attached; it compares one pointer.
    let is_c_function = unsafe { ffi::PyCFunction_CheckExact(function.as_ptr()) } != 0;
    if !is_c_function {
        return None;
    }
    // (Its definition's name and its bound object, read from the C object where the C
    // API allows it: through Python, `builtin_function_or_method`'s own dictionary,
    // which the garbage collector's referents can rewrite, would answer.)
    #[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
    let (named, bound_to_c) = {
        let object = function.as_ptr().cast::<CFunctionHead>();
        // SAFETY:
        // - `function` is live and exactly a `builtin_function_or_method` (checked
        //   above), whose object is a `PyCFunctionObject`, which begins as
        //   `CFunctionHead` does; the thread is attached;
        // - one field is read (no reference made), which is set when the function is
        //   made and never written after.
        let def = unsafe { (*object).m_ml };
        // SAFETY: as above.
        let owner = unsafe { (*object).m_self };
        let def_name = if def.is_null() {
            core::ptr::null()
        } else {
            // SAFETY:
            // - a non-NULL `m_ml` is the function's `PyMethodDef`, which lives at
            //   least as long as the function (C data of the extension that made it);
            // - its `ml_name` is read, not written.
            unsafe { (*def).ml_name }
        };
        // SAFETY: a non-NULL `ml_name` is the NUL-terminated name the extension gave the
        // definition, valid as long as the definition.
        let named = !def_name.is_null()
            && unsafe { CStr::from_ptr(def_name) }.to_bytes() == name.as_bytes();
        (named, owner == c.as_ptr())
    };
    // (The stable ABI: the bound object by the C API, the name by the type's own C
    // `repr`, which formats the definition's name for a function bound to a module and
    // which a dictionary rewritten does not change.)
    #[cfg(all(Py_LIMITED_API, not(any(PyPy, GraalPy))))]
    let (named, bound_to_c) = (
        repr_is(&function, &format!("<built-in function {name}>")),
        // SAFETY: `function` is live and exactly a C function (checked above), which
        // `PyCFunction_GetSelf` takes; the thread is attached; it reads one field and
        // returns it borrowed (compared, not used).
        unsafe { ffi::PyCFunction_GetSelf(function.as_ptr()) } == c.as_ptr(),
    );
    #[cfg(any(PyPy, GraalPy))]
    let (named, bound_to_c) = (
        function
            .getattr(intern!(py, "__name__"))
            .is_ok_and(|n| is_str(&n, name)),
        function
            .getattr(intern!(py, "__self__"))
            .is_ok_and(|owner| owner.is(c)),
    );
    (named && bound_to_c).then_some(function)
}

/// The first fields of CPython's `PyCFunctionObject` (the same in every version this
/// crate builds for), laid out as C lays them out: pyo3-ffi's declaration of the whole
/// object does not fix its layout (`repr(C)`).
#[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
#[repr(C)]
struct CFunctionHead {
    ob_base: ffi::PyObject,
    m_ml: *mut ffi::PyMethodDef,
    m_self: *mut ffi::PyObject,
}

/// The kinds of descriptor the rule takes from torch's static types.
#[derive(Clone, Copy)]
enum Descriptor {
    /// A `getset_descriptor` (an attribute with a C getter).
    GetSet,
    /// A `method_descriptor` (a C method).
    Method,
}

/// Whether `descriptor` is, exactly, a descriptor of that kind that `owner` defines
/// under `name`: what the type's own dictionary holds unless that dictionary was
/// rewritten (through the garbage collector's referents), which this tells. Where the
/// C API allows it, the descriptor's type, owner (`d_type`) and name (`d_name`) are read
/// from the C object, set when it was made: through Python, `__objclass__` and
/// `__name__` are looked up in the descriptor type's own dictionary, which can be
/// rewritten the same way.
fn is_descriptor(
    descriptor: &Bound<'_, PyAny>,
    kind: Descriptor,
    owner: &Bound<'_, PyType>,
    name: &str,
) -> bool {
    #[cfg(not(all(Py_LIMITED_API, not(any(PyPy, GraalPy)))))]
    let py = descriptor.py();
    // (The descriptor types of CPython's C API, part of its stable ABI.)
    #[cfg(not(any(PyPy, GraalPy)))]
    {
        let exact = match kind {
            Descriptor::GetSet => &raw mut ffi::PyGetSetDescr_Type,
            Descriptor::Method => &raw mut ffi::PyMethodDescr_Type,
        };
        if descriptor.get_type_ptr() != exact {
            return false;
        }
    }
    #[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
    {
        let object = descriptor.as_ptr().cast::<ffi::PyDescrObject>();
        // SAFETY:
        // - `descriptor` is live and exactly a `getset_descriptor` or a
        //   `method_descriptor` (checked above), whose objects begin with a
        //   `PyDescrObject`; the thread is attached;
        // - one field is read (no reference made), which is set when the descriptor is
        //   made and never written after.
        let d_type = unsafe { (*object).d_type };
        // SAFETY: as above.
        let d_name = unsafe { (*object).d_name };
        if d_type != owner.as_type_ptr() || d_name.is_null() {
            return false;
        }
        // SAFETY:
        // - `d_name` is not NULL, and is a strong reference the descriptor holds for
        //   as long as it lives (set when it was made, never replaced): borrowed here
        //   while `descriptor` is.
        let d_name = unsafe { Bound::from_borrowed_ptr(py, d_name) };
        is_str(&d_name, name)
    }
    // (The stable ABI: the descriptor's own C `repr`, which formats `d_name` and its
    // owner's C name and which a dictionary rewritten does not change, against the
    // owner's, a static type's C name.)
    #[cfg(all(Py_LIMITED_API, not(any(PyPy, GraalPy))))]
    {
        // (A static owner first: its `repr` is then `type`'s C one.)
        if !is_static(owner) {
            return false;
        }
        let Some(owner_name) = owner.repr().ok().and_then(|r| {
            r.to_cow().ok().and_then(|r| {
                r.strip_prefix("<class '")
                    .and_then(|r| r.strip_suffix("'>"))
                    .map(str::to_owned)
            })
        }) else {
            return false;
        };
        let what = match kind {
            Descriptor::GetSet => "attribute",
            Descriptor::Method => "method",
        };
        repr_is(
            descriptor,
            &format!("<{what} '{name}' of '{owner_name}' objects>"),
        )
    }
    #[cfg(any(PyPy, GraalPy))]
    {
        let _ = kind;
        descriptor
            .getattr(intern!(py, "__objclass__"))
            .is_ok_and(|class| class.is(owner))
            && descriptor
                .getattr(intern!(py, "__name__"))
                .is_ok_and(|n| is_str(&n, name))
    }
}

/// Whether `ty` is a static type of torch's module named `name` (its `__module__` and
/// `__name__` come from its C name then). Where the C API allows it, that C name
/// (`tp_name`) is read itself: before Python 3.11 `__name__`, and before 3.13
/// `__module__`, are looked up in `type`'s own dictionary, which the garbage
/// collector's referents can rewrite.
fn is_static_named(ty: &Bound<'_, PyType>, name: &str) -> bool {
    if !is_static(ty) {
        return false;
    }
    #[cfg(not(any(Py_LIMITED_API, PyPy, GraalPy)))]
    {
        // SAFETY:
        // - `ty` is a live type object (held by the `Bound`); its `tp_name` is read,
        //   not written; the thread is attached.
        let tp_name = unsafe { (*ty.as_type_ptr()).tp_name };
        // SAFETY: a static type's `tp_name` is a NUL-terminated string that lives as
        // long as the type (C data of the extension that defines it).
        !tp_name.is_null()
            && unsafe { CStr::from_ptr(tp_name) }
                .to_bytes()
                .strip_prefix(b"torch._C.")
                .is_some_and(|rest| rest == name.as_bytes())
    }
    // (The stable ABI: `type`'s own C `repr`, which a static type's C name makes.)
    #[cfg(all(Py_LIMITED_API, not(any(PyPy, GraalPy))))]
    {
        repr_is(ty.as_any(), &format!("<class 'torch._C.{name}'>"))
    }
    #[cfg(any(PyPy, GraalPy))]
    {
        ty.module().is_ok_and(|m| is_str(m.as_any(), "torch._C"))
            && ty.name().is_ok_and(|n| is_str(n.as_any(), name))
    }
}

/// Whether `repr(obj)` is `text`: for the objects it is asked of (exact C types: a C
/// function, a descriptor, a static type), their type's C `tp_repr` slot, which
/// formats C fields and runs no Python code.
#[cfg(all(Py_LIMITED_API, not(any(PyPy, GraalPy))))]
fn repr_is(obj: &Bound<'_, PyAny>, text: &str) -> bool {
    obj.repr()
        .is_ok_and(|r| r.to_cow().is_ok_and(|r| r == text))
}

/// Whether `obj` is a `str` equal to `text`.
fn is_str(obj: &Bound<'_, PyAny>, text: &str) -> bool {
    obj.cast::<PyString>()
        .is_ok_and(|s| s.to_cow().is_ok_and(|s| s == text))
}

/// Whether `obj` is a module made by an extension from a C definition named `name`
/// (which Python code cannot rename).
fn is_extension_named(obj: &Bound<'_, PyAny>, name: &CStr) -> bool {
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
    //   extension that defines it (never unloaded), so at least as long as `obj`;
    // - `m_name` is read, not written.
    let def_name = unsafe { (*def).m_name };
    // SAFETY: a non-NULL `m_name` is the NUL-terminated name the extension gave the
    // definition, valid as long as the definition.
    !def_name.is_null() && unsafe { CStr::from_ptr(def_name) } == name
}

/// Whether `ty` is a static type (made in C: its name and dictionary are fixed).
fn is_static(ty: &Bound<'_, PyType>) -> bool {
    // SAFETY:
    // - `ty` is a live type object (held by the `Bound`);
    // - the thread is attached; reading a type's flags runs no code.
    let flags = unsafe { ffi::PyType_GetFlags(ty.as_type_ptr()) };
    flags & ffi::Py_TPFLAGS_HEAPTYPE == 0
}

/// The static type named `torch._C.TensorBase` that `obj`'s class derives from, base by
/// base; `None` for anything else (a NumPy array: two steps). With the GIL and the full
/// C API, the type objects' own fields are read (no Python code runs meanwhile, so no
/// base changes under the walk).
#[cfg(not(any(Py_LIMITED_API, Py_GIL_DISABLED)))]
fn tensor_base_of<'py>(obj: &Bound<'py, PyAny>) -> Option<Bound<'py, PyType>> {
    let mut ty = obj.get_type_ptr();
    while !ty.is_null() {
        // SAFETY:
        // - `ty` is a live type object: `obj`'s type, which `obj` keeps alive, or the
        //   base of a live type, which that type keeps alive (`tp_base` is a strong
        //   reference of a heap type; a static type is never freed); with the GIL
        //   held and no Python code running during the walk, no type's base changes
        //   and nothing is freed;
        // - its fields are read, not written, while the reference lives (this step).
        let this = unsafe { &*ty };
        let (flags, name, base) = (this.tp_flags, this.tp_name, this.tp_base);
        // SAFETY: a static type's `tp_name` is a NUL-terminated string that lives as
        // long as the type (it is C data of the extension that defines it).
        let named = || unsafe { CStr::from_ptr(name) }.to_bytes();
        if flags & ffi::Py_TPFLAGS_HEAPTYPE == 0
            && !name.is_null()
            && matches!(named(), b"torch._C.TensorBase" | b"torch._C._TensorBase")
        {
            // SAFETY: a live type object (as above), borrowed for as long as `obj`.
            let found = unsafe { Bound::from_borrowed_ptr(obj.py(), ty.cast()) };
            return found.cast_into::<PyType>().ok();
        }
        ty = base;
    }
    None
}

/// [`tensor_base_of`] where a type's fields are not for reading (the stable ABI) or may
/// change under another thread (a free-threaded build). The bases are read through
/// `type`'s own descriptors (`type.__dict__["__base__"]`, `"__module__"`,
/// `"__name__"`), which a metaclass cannot override, as new references: another
/// thread may change a heap type's bases meanwhile (`__bases__`), without a GIL too.
#[cfg(any(Py_LIMITED_API, Py_GIL_DISABLED))]
fn tensor_base_of<'py>(obj: &Bound<'py, PyAny>) -> Option<Bound<'py, PyType>> {
    let py = obj.py();
    // `type`'s own descriptors of a class's base, module and name.
    static DESCRIPTORS: PyOnceLock<[Py<PyAny>; 3]> = PyOnceLock::new();
    let [base_of, module_of, name_of] = DESCRIPTORS
        .get_or_try_init(py, || -> PyResult<_> {
            let dict = py.get_type::<PyType>().getattr(intern!(py, "__dict__"))?;
            let get = |name| dict.get_item(name).map(Bound::unbind);
            Ok([get("__base__")?, get("__module__")?, get("__name__")?])
        })
        .ok()?;
    let read = |descriptor: &Py<PyAny>, ty: &Bound<'py, PyType>| {
        descriptor
            .bind(py)
            .call_method1(intern!(py, "__get__"), (ty,))
            .ok()
    };
    let mut ty = obj.get_type();
    // (At most a few steps for any class: the depth of its single-inheritance chain.)
    loop {
        if is_static(&ty)
            && read(module_of, &ty).is_some_and(|m| is_str(&m, "torch._C"))
            && read(name_of, &ty).is_some_and(|n| TENSOR_BASE.iter().any(|t| is_str(&n, t)))
        {
            return Some(ty);
        }
        ty = read(base_of, &ty)?.cast_into::<PyType>().ok()?;
    }
}
