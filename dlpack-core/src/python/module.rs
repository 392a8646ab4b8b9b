//! The registration of the crate's Python classes in an extension module
//! ([`add_to_module`]), and their typing stubs ([`TENSOR_STUB`], [`MODEL_STUB`]).

use pyo3::prelude::*;

use super::Tensor;
use super::model::{ModelView, incompatible_keys};

/// Adds the [`Tensor`] class to an extension module, named after it
/// (`module.Tensor`, whose `__module__` is the module's name), so that Python code can
/// test `isinstance(x, module.Tensor)` and pickle's error names the right place; and,
/// named the same way, the classes of a Rust model shared with Python
/// ([`pymodel`](crate::pymodel)): [`ModelView`] and `IncompatibleKeys` (what
/// `load_state_dict` returns).
///
/// ```no_run
/// use pyo3::prelude::*;
///
/// #[pymodule]
/// fn my_extension(m: &Bound<'_, PyModule>) -> PyResult<()> {
///     dlpack_core::python::add_to_module(m)?;
///     Ok(())
/// }
/// ```
pub fn add_to_module(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    let name = module.name()?;
    module.add_class::<Tensor>()?;
    py.get_type::<Tensor>()
        .setattr(pyo3::intern!(py, "__module__"), &name)?;
    // The classes of a Rust model shared with Python (`#[pymodel]`).
    module.add_class::<ModelView>()?;
    py.get_type::<ModelView>()
        .setattr(pyo3::intern!(py, "__module__"), &name)?;
    let keys = incompatible_keys(py)?;
    keys.setattr(pyo3::intern!(py, "__module__"), &name)?;
    module.add("IncompatibleKeys", keys)
}

/// The typing stub of the [`Tensor`] class (`.pyi` text), for an extension's own stub
/// file: an extension that adds the class with [`add_to_module`] includes it in
/// `your_extension.pyi` (which maturin ships when it sits beside `Cargo.toml`).
pub const TENSOR_STUB: &str = include_str!("../../stubs/tensor.pyi");

/// The typing stub of [`ModelView`] and `IncompatibleKeys` (`.pyi` text, which names
/// `Tensor`: include it after [`TENSOR_STUB`]), for the stub of an extension with model
/// classes ([`pymodel`](crate::pymodel)).
pub const MODEL_STUB: &str = include_str!("../../stubs/model.pyi");
