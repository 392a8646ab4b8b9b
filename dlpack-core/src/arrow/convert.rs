//! `ToDLPack` and `FromDLPack` for arrow-rs's arrays and record batches.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::ArrowPrimitiveType;
use arrow_array::{Array, ArrayRef, FixedSizeListArray, PrimitiveArray, RecordBatch};
use arrow_schema::{Field, Schema};

use crate::batch::TensorBatch;
use crate::error::{ArrowErrorKind, Error, Result};
use crate::tensor::ManagedTensor;
use crate::traits::{Expected, FromDLPack, Selection, ToDLPack, leaf_from, leaf_into};

use super::Column;
use super::column::{array_to_tensor, column_to_tensor, dlpack_dtype, error, tensor_to_column};
use super::extension::FixedShapeTensor;

impl<T: ArrowPrimitiveType> ToDLPack for PrimitiveArray<T> {
    type Output = ManagedTensor;

    /// A 1-d, `READ_ONLY` tensor over the array's values (its offset applied), which it
    /// keeps alive: no copy. A type that is not a number (a timestamp, a decimal, ...)
    /// or an array with nulls is an [`Error::Arrow`].
    fn to_dlpack(self) -> Result<ManagedTensor> {
        array_to_tensor("", None, &self)
    }

    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        leaf_into(self, prefix, batch)
    }
}

impl ToDLPack for FixedSizeListArray {
    type Output = ManagedTensor;

    /// An n-d, `READ_ONLY` tensor `[len, size, ...]` over the innermost values (nested
    /// lists give one axis each; the offsets of every level applied), which it keeps
    /// alive: no copy. Nulls at any level, or items that are not numbers, are an
    /// [`Error::Arrow`].
    fn to_dlpack(self) -> Result<ManagedTensor> {
        array_to_tensor("", None, &self)
    }

    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        leaf_into(self, prefix, batch)
    }
}

impl ToDLPack for ArrayRef {
    type Output = ManagedTensor;

    /// A primitive array or fixed-size lists of one, as their own impls export them.
    fn to_dlpack(self) -> Result<ManagedTensor> {
        array_to_tensor("", None, self.as_ref())
    }

    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        leaf_into(self, prefix, batch)
    }
}

impl ToDLPack for Column {
    type Output = ManagedTensor;

    /// The column's tensor, read through its field: an `arrow.fixed_shape_tensor`
    /// column is `[len, shape...]`, its permutation as strides; errors name the column.
    fn to_dlpack(self) -> Result<ManagedTensor> {
        column_to_tensor(&self.field, &self.array)
    }

    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        leaf_into(self, prefix, batch)
    }
}

impl ToDLPack for RecordBatch {
    type Output = TensorBatch;

    /// One tensor per column, named by the column (fixed-shape tensor columns read
    /// through their fields), in the schema's order; the schema's metadata becomes the
    /// batch's.
    fn to_dlpack(self) -> Result<TensorBatch> {
        super::record_batch_to_tensors(&self)
    }

    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        super::record_batch_to_tensors(&self)?.to_dlpack_into(prefix, batch)
    }
}

impl<T: ArrowPrimitiveType> FromDLPack for PrimitiveArray<T> {
    type Input = ManagedTensor;

    /// A 1-d tensor of `T`'s type, its memory the array's values buffer (which owns the
    /// tensor): no copy. Another rank or dtype, a layout that is not dense, or a
    /// device other than the CPU is an error, and the tensor is dropped.
    fn from_dlpack(tensor: ManagedTensor) -> Result<Self> {
        check_tensor::<T>(&tensor, Some(1))?;
        let (_, array) = tensor_to_column("", tensor)?;
        Ok(array.as_primitive::<T>().clone())
    }

    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        leaf_from(prefix, batch)
    }

    fn select_in(prefix: &str, selection: &mut Selection<'_>) {
        selection.take(prefix, Expected::new(dlpack_dtype(&T::DATA_TYPE), Some(1)));
    }
}

/// A tensor's dtype (as `T`'s) and rank (when given), checked before the conversion.
fn check_tensor<T: ArrowPrimitiveType>(tensor: &ManagedTensor, ndim: Option<usize>) -> Result<()> {
    let expected = dlpack_dtype(&T::DATA_TYPE).ok_or_else(|| {
        error(
            "",
            ArrowErrorKind::Type,
            format!("{} has no tensor form (numbers only)", T::DATA_TYPE),
        )
    })?;
    if tensor.dtype() != expected {
        return Err(Error::DtypeMismatch {
            expected,
            found: tensor.dtype(),
        });
    }
    if let Some(ndim) = ndim.filter(|&n| n != tensor.ndim()) {
        return Err(Error::NdimMismatch {
            expected: ndim,
            found: tensor.ndim(),
        });
    }
    Ok(())
}

impl FromDLPack for FixedSizeListArray {
    type Input = ManagedTensor;

    /// An n-d tensor (n ≥ 2) as nested fixed-size lists `[len, size, ...]`, one level
    /// per axis after the first, over the tensor's memory (no copy). The tensor must be
    /// in C order, on the CPU, of a numeric type.
    fn from_dlpack(tensor: ManagedTensor) -> Result<Self> {
        let shape: Vec<i64> = tensor.shape().to_vec();
        if shape.len() < 2 {
            return Err(Error::NdimMismatch {
                expected: 2,
                found: shape.len(),
            });
        }
        let (field, array) = tensor_to_column("", tensor)?;
        if FixedShapeTensor::from_field(&field)?.is_some_and(|t| t.permutation.is_some()) {
            return Err(error(
                "",
                ArrowErrorKind::Layout,
                "a tensor whose rows are not in C order has no nested-list form (copy it \
                 into C order first, or take it as a `Column`, whose fixed-shape tensor \
                 carries the permutation)",
            ));
        }
        let values = array.as_fixed_size_list().values().clone();
        nest(values, &shape[1..])
    }

    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        leaf_from(prefix, batch)
    }

    fn select_in(prefix: &str, selection: &mut Selection<'_>) {
        selection.take(prefix, Expected::ANY);
    }
}

/// `values` as nested fixed-size lists of the extents `cell` (outermost first).
fn nest(mut values: ArrayRef, cell: &[i64]) -> Result<FixedSizeListArray> {
    let mut list = None;
    for &extent in cell.iter().rev() {
        let size = i32::try_from(extent)
            .map_err(|_| error("", ArrowErrorKind::Layout, format!("an axis of {extent}")))?;
        let item = Arc::new(Field::new("item", values.data_type().clone(), false));
        let nested = FixedSizeListArray::try_new(item, size, values, None)
            .map_err(|e| error("", ArrowErrorKind::Layout, e.to_string()))?;
        values = Arc::new(nested.clone());
        list = Some(nested);
    }
    list.ok_or_else(|| error("", ArrowErrorKind::Layout, "no axis to nest"))
}

impl FromDLPack for Column {
    type Input = ManagedTensor;

    /// The tensor as a column (unnamed: set `field`'s name with `Field::with_name`):
    /// 1-d a primitive array, n-d an `arrow.fixed_shape_tensor` column, without a copy.
    fn from_dlpack(tensor: ManagedTensor) -> Result<Self> {
        let (field, array) = tensor_to_column("", tensor)?;
        Ok(Column { field, array })
    }

    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        let mut column: Column = leaf_from(prefix, batch)?;
        column.field = column.field.with_name(prefix);
        Ok(column)
    }

    fn select_in(prefix: &str, selection: &mut Selection<'_>) {
        selection.take(prefix, Expected::ANY);
    }
}

impl FromDLPack for RecordBatch {
    type Input = TensorBatch;

    /// One column per tensor, named by the tensor, in the batch's order: 1-d tensors
    /// primitive columns, n-d ones `arrow.fixed_shape_tensor` columns, without a copy.
    /// Every tensor must have the same first extent (the rows); the batch's metadata
    /// becomes the schema's.
    fn from_dlpack(batch: TensorBatch) -> Result<Self> {
        let metadata = batch.metadata().clone();
        let mut fields = Vec::with_capacity(batch.len());
        let mut columns = Vec::with_capacity(batch.len());
        let mut rows: Option<(String, usize)> = None;
        for (name, tensor) in batch {
            let (field, array) = tensor_to_column(&name, tensor)?;
            match &rows {
                Some((first, n)) if *n != array.len() => {
                    return Err(error(
                        &name,
                        ArrowErrorKind::Layout,
                        format!(
                            "{} rows where `{first}` has {n}: the columns of a record batch \
                             have one length",
                            array.len()
                        ),
                    ));
                }
                Some(_) => {}
                None => rows = Some((name.clone(), array.len())),
            }
            fields.push(field);
            columns.push(array);
        }
        let metadata: std::collections::HashMap<String, String> = metadata.into_iter().collect();
        let schema = Schema::new(fields).with_metadata(metadata);
        let options =
            arrow_array::RecordBatchOptions::new().with_row_count(Some(rows.map_or(0, |(_, n)| n)));
        RecordBatch::try_new_with_options(Arc::new(schema), columns, &options)
            .map_err(|e| error("", ArrowErrorKind::Layout, e.to_string()))
    }

    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        TensorBatch::from_dlpack_in(prefix, batch).and_then(Self::from_dlpack)
    }

    fn select_in(prefix: &str, selection: &mut Selection<'_>) {
        TensorBatch::select_in(prefix, selection);
    }
}
