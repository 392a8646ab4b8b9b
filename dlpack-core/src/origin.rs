//! The Python object a typed argument was imported from, kept (one reference, nothing
//! read) so that the in-place path can follow its producer's own rules before writing:
//! PyTorch's, for a tensor that autograd tracks. A leaf: `bridge`'s `DLPackArray` holds
//! an [`Origin`], and its `assume_exclusive` asks [`Origin::before_write`]; reading an
//! import never looks at it.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The Python object an import came from.
pub(crate) struct Origin(Py<PyAny>);

/// Why the producer refuses an in-place write.
pub(crate) enum Refused {
    /// A torch tensor that requires grad, while grad mode is on.
    RequiresGrad,
    /// The producer's own error, in its words (say, an inference tensor outside
    /// inference mode).
    Producer(String),
}

impl Origin {
    pub(crate) fn new(obj: &Bound<'_, PyAny>) -> Self {
        Self(obj.clone().unbind())
    }

    /// PyTorch's rule for an in-place write, applied before one: a tensor that requires
    /// grad is refused while grad mode is on (torch refuses in-place operations on such
    /// leaves, and would record one on any other tensor, which a write from Rust cannot
    /// be), and is written under `torch.no_grad()`, where optimizer steps run. A tensor
    /// that is written gets its version counter bumped, as torch's own in-place
    /// operations do, so that autograd refuses a backward pass through a value saved
    /// before the write instead of computing wrong gradients with it. An inference
    /// tensor is written only in inference mode, as torch's own in-place operations.
    /// Anything else (NumPy, JAX, ...) has no rule here.
    pub(crate) fn before_write(&self) -> Result<(), Refused> {
        Python::attach(|py| {
            let obj = self.0.bind(py);
            let check = || -> PyResult<Option<Refused>> {
                // Torch is only ever imported by its user: if it is not in
                // `sys.modules`, the object is no torch tensor.
                let modules = py.import("sys")?.getattr("modules")?;
                let Some(torch) = modules.cast_into::<PyDict>()?.get_item("torch")? else {
                    return Ok(None);
                };
                if !obj.is_instance(&torch.getattr("Tensor")?)? {
                    return Ok(None);
                }
                // An inference tensor has no version counter: torch writes it in place
                // only in inference mode.
                if obj.call_method0("is_inference")?.is_truthy()?
                    && !torch
                        .call_method0("is_inference_mode_enabled")?
                        .is_truthy()?
                {
                    return Ok(Some(Refused::Producer(
                        "in-place write into an inference tensor outside inference mode, \
                         which torch refuses; write a clone (t.clone()) instead"
                            .to_owned(),
                    )));
                }
                let grad_mode = torch.call_method0("is_grad_enabled")?.is_truthy()?;
                if grad_mode && obj.getattr("requires_grad")?.is_truthy()? {
                    return Ok(Some(Refused::RequiresGrad));
                }
                torch
                    .getattr("autograd")?
                    .getattr("graph")?
                    .call_method1("increment_version", (obj,))?;
                Ok(None)
            };
            match check() {
                Ok(None) => Ok(()),
                Ok(Some(refused)) => Err(refused),
                Err(err) => Err(Refused::Producer(err.to_string())),
            }
        })
    }
}
