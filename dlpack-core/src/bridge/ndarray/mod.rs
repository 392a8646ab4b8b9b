//! The ndarray bridge (feature `ndarray`): checked borrowed views, the owned zero-copy
//! import [`DLPackArray`], and `ToDLPack`/`FromDLPack` for every kind of array (what
//! each one does is in the README's table).
//!
//! - `view`: `ManagedTensor::as_array` / `as_array_mut`, and the checks behind them;
//! - `owned`: [`DLPackArray`];
//! - `convert`: exports (zero-copy moves, read-only shares, copies), the zero-copy way
//!   back for our own exports, and the trait impls;
//! - `parameter`: [`Parameter`], the array type of a model's fields that Python shares,
//!   with its mechanism (the writable shares it hands out, the owner that marks them)
//!   and its trait impls; `slot`: where it keeps its Python object (feature `pyo3`).

#[macro_use]
mod convert;
mod owned;
mod parameter;
mod slot;
mod view;

#[cfg(feature = "pyo3")]
pub(crate) use convert::copy_standard;
pub use convert::zeros_aligned;
pub use owned::DLPackArray;
#[cfg(feature = "pyo3")]
pub(crate) use owned::WriteRefusal;
pub use parameter::{
    Parameter, Parameter0, Parameter1, Parameter2, Parameter3, Parameter4, Parameter5, Parameter6,
    ParameterD,
};
