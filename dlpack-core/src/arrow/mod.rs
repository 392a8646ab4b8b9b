//! Arrow columns as tensors (feature `arrow`), on arrow-rs's own crates: the container
//! the data world keeps its tensors in, exchanged without a copy both ways.
//!
//! | Arrow | tensor | to a tensor (`to_dlpack`) | from a tensor (`from_dlpack`) |
//! |---|---|---|---|
//! | `PrimitiveArray<T>` (every integer width, `Float16/32/64`) | 1-d | the values buffer, its offset applied | the tensor's memory as the values buffer |
//! | `FixedSizeListArray`, nested | n-d `[len, size, ...]` | the innermost values, every level's offset applied | nested lists over the tensor's memory (C order) |
//! | [`Column`] of an `arrow.fixed_shape_tensor` field | n-d `[len, shape...]` | its `permutation` as strides | strides that permute each row's cell as its `permutation` |
//! | `RecordBatch` | [`TensorBatch`], by column name | each column as above | 1-d primitive, n-d fixed-shape tensor columns |
//! | an IPC file ([`read_ipc_file`]) | `RecordBatch`es | mapped, zero-copy where aligned | — |
//!
//! To read a column in place from Rust without a tensor in between, `arrow::as_array` views
//! it as an ndarray (feature `ndarray`).
//!
//! ```
//! use std::sync::Arc;
//!
//! use arrow_array::types::Float32Type;
//! use arrow_array::{Array, FixedSizeListArray, Int64Array, PrimitiveArray, RecordBatch};
//! use arrow_schema::Field;
//! use dlpack_core::{DLPackArray, FromDLPack, ToDLPack};
//! use ndarray::{Ix1, Ix2};
//!
//! // A training table: an embedding column (rows of 3 float32) and a label column.
//! let values = PrimitiveArray::<Float32Type>::from_iter_values((0..12).map(|i| i as f32));
//! let item = Arc::new(Field::new("item", values.data_type().clone(), false));
//! let x = FixedSizeListArray::try_new(item, 3, Arc::new(values), None)?;
//! let y = Int64Array::from(vec![0, 1, 0, 1]);
//! let table = RecordBatch::try_from_iter([("x", Arc::new(x) as _), ("y", Arc::new(y) as _)])?;
//!
//! // Into a derived struct, by column name, without a copy (`DLPackArray` fields).
//! #[derive(FromDLPack)]
//! struct Rows {
//!     x: DLPackArray<f32, Ix2>,
//!     y: DLPackArray<i64, Ix1>,
//! }
//! let rows = Rows::from_dlpack(table.to_dlpack()?)?;
//! assert_eq!(rows.x.view().dim(), (4, 3));
//! assert_eq!(rows.y.view()[1], 1);
//!
//! // And a tensor made in Rust as an Arrow array: its memory, no copy.
//! let matrix = ndarray::Array2::<f32>::ones((2, 5));
//! let ptr = matrix.as_ptr();
//! let lists = FixedSizeListArray::from_dlpack(matrix.to_dlpack()?)?;
//! assert_eq!((lists.len(), lists.value_length()), (2, 5));
//! assert_eq!(lists.values().to_data().buffers()[0].as_ptr().cast(), ptr);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The rules
//!
//! - **No copy, both ways.** A tensor made from an Arrow array keeps the array's
//!   buffer alive as its owner; an Arrow array made from a tensor owns the tensor
//!   (its buffer is a custom allocation whose drop runs the tensor's deleter, once).
//! - **Read-only.** Arrow buffers are immutable and may be shared by other arrays, so
//!   their tensors are flagged `READ_ONLY`: `as_array` views them, `as_array_mut`
//!   refuses. Handed to Python as a `python::Tensor`, such memory is
//!   Rust's and read-only, so consumers get copies (PyTorch would write it); an Arrow
//!   column that came from Python is the producer's and stays shared.
//! - **Nothing read silently.** A column a tensor cannot be is an [`Error::Arrow`]
//!   naming the column, its [`ArrowErrorKind`] and the fix: nulls at any level (a
//!   validity buffer that counts no null is fine), booleans (bit-packed: cast to
//!   `uint8`, which is a copy you choose), lists of variable length, strings,
//!   dictionaries, decimals, dates and times, structs, misaligned values, shapes whose
//!   size overflows, extension metadata that does not fit its storage. A tensor an
//!   Arrow column cannot be (not in C order, on a device, `bool`, 0-d) is refused the
//!   same way, and dropped.
//! - **Fixed-shape tensors.** The extension's metadata is read in both spellings in
//!   use (`permutation`, the specification's; `permutations`, which arrow-schema 60
//!   writes), JSON nulls taken as absent, and written in the specification's form
//!   ([`FixedShapeTensor`]).
//!
//! # Files
//!
//! [`read_ipc_file`] maps an Arrow IPC file and decodes its record batches over the
//! mapping, without a copy where each buffer is aligned for its type (arrow-rs copies
//! the others, which IPC writers may leave byte-aligned): the file's columns are then
//! tensors at the cost of a pointer. [`TensorBatch::read_arrow_ipc`](crate::TensorBatch)
//! reads a file of one batch straight into a batch of tensors. As with every mapping,
//! the file must not be truncated or written while mapped.
//!
//! # Python
//!
//! With `pyo3` too, typed arguments, `from_dlpack` and `TensorBatch` extraction take
//! Arrow's PyCapsule interface (pyarrow, Polars, `datasets`, DuckDB, arro3), and a
//! returned `Tensor` has `__arrow_c_array__`: see the Python module's "Arrow columns
//! and tables".

mod column;
mod convert;
mod extension;
mod ipc;
#[cfg(feature = "ndarray")]
mod view;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::Field;

use crate::batch::TensorBatch;
use crate::error::Result;
#[cfg(feature = "pyo3")]
use crate::tensor::ManagedTensor;

pub use crate::error::ArrowErrorKind;
#[cfg(doc)]
use crate::error::Error;
pub use extension::{
    EXTENSION_METADATA_KEY, EXTENSION_NAME_KEY, FIXED_SHAPE_TENSOR, FixedShapeTensor,
};
pub use ipc::read_ipc_file;
#[cfg(feature = "ndarray")]
pub use view::as_array;

/// The arrow-rs crates this module is built against, re-exported so that versions match.
pub use {arrow_array, arrow_buffer, arrow_schema};

/// One Arrow column with its field: what a record batch holds per column, and what
/// carries a canonical extension (`arrow.fixed_shape_tensor`), which lives in the
/// field's metadata, not in the array.
#[derive(Clone, Debug)]
pub struct Column {
    /// The column's name, type and metadata.
    pub field: Field,
    /// Its values.
    pub array: ArrayRef,
}

impl Column {
    /// A column of `array` with `field`.
    pub fn new(field: Field, array: ArrayRef) -> Self {
        Self { field, array }
    }

    /// The column `index` of `batch`.
    ///
    /// # Panics
    ///
    /// When `index` is out of range, as `RecordBatch::column` panics.
    pub fn of(batch: &RecordBatch, index: usize) -> Self {
        Self::new(
            batch.schema().field(index).clone(),
            batch.column(index).clone(),
        )
    }
}

/// One column as a tensor, named by its field in errors (what Python's imports call).
#[cfg(feature = "pyo3")]
pub(crate) fn column_to_tensor(field: &Field, array: &ArrayRef) -> Result<ManagedTensor> {
    column::column_to_tensor(field, array)
}

/// Whether an Arrow type is a number a tensor holds (the one table of them).
#[cfg(feature = "pyo3")]
pub(crate) fn is_numeric(ty: &arrow_schema::DataType) -> bool {
    column::dlpack_dtype(ty).is_some()
}

/// Why an Arrow type has no tensor form, and what to do (what Python's imports say of a
/// column they refuse before reading it).
#[cfg(feature = "pyo3")]
pub(crate) fn type_reason(ty: &arrow_schema::DataType) -> String {
    column::type_reason(ty)
}

/// A tensor as one column named `name` (what `Tensor.__arrow_c_array__` calls).
#[cfg(feature = "pyo3")]
pub(crate) fn tensor_to_column(name: &str, tensor: ManagedTensor) -> Result<(Field, ArrayRef)> {
    column::tensor_to_column(name, tensor)
}

/// Every column of a record batch as a tensor named by the column, the schema's metadata
/// as the batch's.
pub(crate) fn record_batch_to_tensors(batch: &RecordBatch) -> Result<TensorBatch> {
    let schema = batch.schema();
    let mut tensors = TensorBatch::with_capacity(batch.num_columns());
    for (field, array) in schema.fields().iter().zip(batch.columns()) {
        let tensor = column::column_to_tensor(field, array)?;
        tensors.insert(field.name().as_str(), tensor)?;
    }
    tensors.metadata_mut().extend(
        schema
            .metadata()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    Ok(tensors)
}
