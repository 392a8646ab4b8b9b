//! `Tensor.__arrow_c_array__` (features `pyo3` and `arrow`): a tensor as an Arrow array
//! through the PyCapsule interface, so that `pa.array(t)`, Polars and every other
//! consumer of the interface take it without a copy: a 1-d tensor is a primitive array,
//! an n-d one a canonical `arrow.fixed_shape_tensor` array, rows along the first axis.

use std::sync::Arc;

use arrow_array::Array;
use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};

use crate::arrow::tensor_to_column;
use crate::ffi::{DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED};

use super::super::{copy_tensor, header_over};
use super::Tensor;

/// The schema and array capsules of `object`'s tensor, as the interface names them.
///
/// The data is the tensor's own memory, kept alive by the array until its consumer
/// releases it, unless consumers of the tensor get copies (a read-only tensor of Rust's
/// memory, see [`Tensor::copies_read_only`]): then the array holds a copy of its own.
/// A requested schema is a hint the interface lets a producer ignore: the array comes
/// as the tensor is, and a consumer that asked for another type casts it.
pub(super) fn arrow_c_array<'py>(
    py: Python<'py>,
    object: &Tensor,
) -> PyResult<Bound<'py, PyTuple>> {
    let shared = object.handle();
    let tensor = if object.copies_read_only() {
        copy_tensor(shared)?
    } else {
        let flags = shared.flags() & !DLPACK_FLAG_BITMASK_IS_COPIED;
        header_over::<DLManagedTensorVersioned>(Arc::clone(shared), shared.device(), flags)?
    };
    let (field, array) = tensor_to_column("", tensor)?;
    let schema = FFI_ArrowSchema::try_from(&field)
        .map_err(|err| PyValueError::new_err(format!("no Arrow schema for the tensor: {err}")))?;
    let array = FFI_ArrowArray::new(&array.to_data());
    let schema = PyCapsule::new_with_value(py, schema, c"arrow_schema")?;
    let array = PyCapsule::new_with_value(py, array, c"arrow_array")?;
    PyTuple::new(py, [schema, array])
}
