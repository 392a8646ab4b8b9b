//! The Python object a typed argument was imported from, kept (one reference, nothing
//! read) so that the in-place path can follow its producer's rules before writing:
//! PyTorch's, for a tensor that autograd tracks. A leaf: `bridge`'s `DLPackArray` holds
//! an [`Origin`], and its `assume_exclusive` asks [`Origin::before_write`]; reading an
//! import never looks at it.
//!
//! The check runs between the import's validation and the write, so it must not run
//! Python code that could free or move the memory (a `__torch_function__` override, a
//! mode, a subclass's property, an import hook): it calls torch's own C entry points
//! only, looked up once, with torch functions disabled, and reads `sys.modules` without
//! importing.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyModule, PyTuple, PyType};

use crate::error::Error;
use crate::interpreter::{ObjectRef, imported_modules, on_attached_thread};

/// The Python object an import came from.
pub(crate) struct Origin(ObjectRef);

/// Why an in-place write is refused.
enum Refused {
    /// A torch tensor that requires grad, while grad mode is on.
    RequiresGrad,
    /// A torch inference tensor, outside inference mode.
    Inference,
    /// The thread is not attached to the interpreter, where torch's state is read.
    NotAttached,
    /// Torch's state could not be read: the exception, in words.
    Failed(String),
}

impl From<Refused> for Error {
    fn from(refused: Refused) -> Self {
        let reason = match refused {
            Refused::RequiresGrad => "the tensor requires grad and grad mode is on: autograd \
                                      cannot record a write made outside torch (torch itself \
                                      refuses one into a leaf such as a Parameter); write it \
                                      under torch.no_grad(), as optimizer steps do"
                .to_owned(),
            Refused::Inference => "an inference tensor outside inference mode, which torch \
                                   refuses; write a clone (t.clone()) instead, or write it \
                                   under torch.inference_mode()"
                .to_owned(),
            Refused::NotAttached => "the array came from Python, and torch's in-place rule \
                                     is read on a thread attached to the interpreter (grad \
                                     mode is per thread): call assume_exclusive there, before \
                                     handing the array to other threads"
                .to_owned(),
            Refused::Failed(err) => {
                format!("torch's grad and inference modes could not be read: {err}")
            }
        };
        Error::InPlaceRefused { reason }
    }
}

/// Torch's C entry points that the check calls, found once torch is imported.
struct Torch {
    tensor_base: Py<PyType>,
    requires_grad: Py<PyAny>,
    is_inference: Py<PyAny>,
    is_grad_enabled: Py<PyAny>,
    is_inference_mode_enabled: Py<PyAny>,
    increment_version: Py<PyAny>,
    disable_torch_function: Py<PyAny>,
}

impl Torch {
    /// Torch's entry points if torch is imported (it is whenever a torch tensor
    /// exists); `None` otherwise. Read from `sys.modules`, never imported.
    fn get(py: Python<'_>) -> PyResult<Option<&'static Torch>> {
        static TORCH: PyOnceLock<Torch> = PyOnceLock::new();
        if let Some(torch) = TORCH.get(py) {
            return Ok(Some(torch));
        }
        let Some(modules) = imported_modules(py) else {
            return Ok(None);
        };
        let Ok(torch) = modules.get_item("torch") else {
            return Ok(None);
        };
        // (`sys.modules["torch"] = None` is how a program hides torch.)
        let Ok(torch) = torch.cast_into::<PyModule>() else {
            return Ok(None);
        };
        let c = torch.getattr("_C")?;
        let tensor_base = c.getattr("TensorBase")?.cast_into::<PyType>()?;
        let found = Torch {
            requires_grad: tensor_base.getattr("requires_grad")?.unbind(),
            is_inference: tensor_base.getattr("is_inference")?.unbind(),
            tensor_base: tensor_base.unbind(),
            is_grad_enabled: c.getattr("is_grad_enabled")?.unbind(),
            is_inference_mode_enabled: torch.getattr("is_inference_mode_enabled")?.unbind(),
            increment_version: c.getattr("_increment_version")?.unbind(),
            disable_torch_function: c.getattr("DisableTorchFunction")?.unbind(),
        };
        Ok(Some(TORCH.get_or_init(py, || found)))
    }
}

impl Origin {
    pub(crate) fn new(obj: &Bound<'_, PyAny>) -> Option<Self> {
        ObjectRef::new(obj).map(Self)
    }

    /// PyTorch's rule for an in-place write, applied just before one: a tensor that
    /// requires grad is refused while grad mode is on (autograd cannot record a write
    /// made outside torch; torch itself refuses in-place operations on such a leaf), and
    /// written under `torch.no_grad()`, where optimizer steps run; an inference tensor
    /// is written only in inference mode. A tensor that is written gets its version
    /// counter bumped, as torch's own in-place operations do, so that autograd refuses
    /// a backward pass through a value saved before the write instead of computing
    /// wrong gradients with it. Anything else (NumPy, JAX, ...) has no rule here.
    ///
    /// Grad mode is per thread: the check runs only on a thread attached to the
    /// interpreter (the one that extracted the argument, in a `#[pyfunction]`), and is
    /// refused elsewhere rather than read from another thread's state.
    pub(crate) fn before_write(&self) -> Result<(), Error> {
        on_attached_thread(|py| {
            check(py, &self.0.bind(py)).map_err(|err| Refused::Failed(err.to_string()))?
        })
        .unwrap_or(Err(Refused::NotAttached))
        .map_err(Error::from)
    }
}

fn check(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Result<(), Refused>> {
    let Some(torch) = Torch::get(py)? else {
        return Ok(Ok(()));
    };
    // A type check over the types' MROs (`PyType_IsSubtype` through `issubclass` of a
    // class whose metaclass keeps `type`'s check): no `__class__` or `__instancecheck__`
    // of the object's runs.
    if !obj.get_type().is_subclass(torch.tensor_base.bind(py))? {
        return Ok(Ok(()));
    }
    // Torch's getters dispatch to `__torch_function__` (a subclass's, a mode's): off.
    let disabled = torch.disable_torch_function.bind(py).call0()?;
    disabled.call_method0("__enter__")?;
    let result = (|| -> PyResult<Result<(), Refused>> {
        let truthy = |value: Bound<'_, PyAny>| value.is_truthy();
        if truthy(torch.is_inference.bind(py).call1((obj,))?)?
            && !truthy(torch.is_inference_mode_enabled.bind(py).call0()?)?
        {
            return Ok(Err(Refused::Inference));
        }
        if truthy(torch.is_grad_enabled.bind(py).call0()?)?
            && truthy(
                torch
                    .requires_grad
                    .bind(py)
                    .call_method1("__get__", (obj, torch.tensor_base.bind(py)))?,
            )?
        {
            return Ok(Err(Refused::RequiresGrad));
        }
        let tensors = PyTuple::new(py, [obj])?;
        torch.increment_version.bind(py).call1((tensors,))?;
        Ok(Ok(()))
    })();
    let none = py.None();
    disabled.call_method1("__exit__", (&none, &none, &none))?;
    result
}
