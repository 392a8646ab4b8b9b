//! Arrow columns and tables from Python: a derived struct from a table, and the
//! functions of a Ray Data pipeline written in Rust.

use dlpack_core::{DLPackArray, FromDLPack, ManagedTensor, TensorBatch, ToDLPack};
use ndarray::{Array1, Axis, Ix1, Ix2};
use pyo3::prelude::*;

/// The rows of a training table: an embedding column and a label column, read in
/// place (`DLPackArray` fields: an owned `Array` would copy the shared columns).
#[derive(FromDLPack)]
struct Rows {
    x: DLPackArray<f32, Ix2>,
    y: DLPackArray<i64, Ix1>,
}

/// A table (pyarrow, Polars, `datasets`) as a derived struct: the addresses of `x`'s
/// and `y`'s first elements, and `x`'s shape.
#[pyfunction]
pub(super) fn rows_from_table(batch: TensorBatch) -> PyResult<(usize, usize, Vec<usize>)> {
    let rows = Rows::from_dlpack(batch)?;
    let x = rows.x.view();
    Ok((
        x.as_ptr() as usize,
        rows.y.view().as_ptr() as usize,
        x.shape().to_vec(),
    ))
}

/// An Arrow IPC file of one record batch (written by pyarrow, say) as the derived
/// struct: `x`'s shape, and its values in C order.
#[pyfunction]
pub(super) fn rows_from_ipc(
    path: std::path::PathBuf,
) -> PyResult<(Vec<usize>, Vec<f32>, Vec<i64>)> {
    let rows = Rows::from_dlpack(TensorBatch::read_arrow_ipc(path)?)?;
    let x = rows.x.view();
    Ok((
        x.shape().to_vec(),
        x.iter().copied().collect(),
        rows.y.view().to_vec(),
    ))
}

/// The address of a typed argument's first element and its shape, read in place.
#[pyfunction]
pub(super) fn typed_f32_2d(x: DLPackArray<f32, Ix2>) -> (usize, Vec<usize>) {
    let view = x.view();
    (view.as_ptr() as usize, view.shape().to_vec())
}

/// A Ray Data batch function (`map_batches(add_norms, batch_format="pyarrow")`): the
/// table's columns, and `norm`, the Euclidean norm of each row of the `embedding`
/// column (read in place), as a pyarrow table (what Ray takes back), whose columns are
/// the tensors' memory (`pa.table` reads each `Tensor` by `__arrow_c_array__`).
#[pyfunction]
pub(super) fn add_norms<'py>(
    py: Python<'py>,
    mut batch: TensorBatch,
) -> PyResult<Bound<'py, PyAny>> {
    let embedding = batch
        .get("embedding")
        .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err("no 'embedding' column"))?;
    let view = embedding.as_array::<f32, Ix2>()?;
    let norms: Array1<f32> = view.map_axis(Axis(1), |row| row.dot(&row).sqrt());
    batch.insert("norm", norms.to_dlpack()?)?;
    let columns = batch.into_pyobject(py)?;
    py.import("pyarrow")?.call_method1("table", (columns,))
}

/// Row norms of a 2-d `float32` typed argument, as a new tensor.
#[pyfunction]
pub(super) fn row_norms(x: DLPackArray<f32, Ix2>) -> PyResult<ManagedTensor> {
    let norms: Array1<f32> = x.view().map_axis(Axis(1), |row| row.dot(&row).sqrt());
    Ok(norms.to_dlpack()?)
}
