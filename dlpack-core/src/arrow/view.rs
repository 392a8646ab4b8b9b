//! An Arrow array read in place as an ndarray view, without a tensor in between.

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_buffer::ArrowNativeType;
use ndarray::{ArrayView, Dimension};

use crate::dtype::Element;
use crate::error::{ArrowErrorKind, Error, Result};

use super::column::{check_no_nulls, dlpack_dtype, error, values_buffer};

/// The deepest nesting viewed (ndarray's dynamic rank has no limit, this walk has one).
const MAX_RANK: usize = 32;

/// A primitive array or nested fixed-size lists of one as an ndarray view of their
/// values (`[len]`, `[len, size, ...]`), borrowed from the array: no copy, no tensor,
/// no allocation for a fixed rank. The checks of [`ToDLPack`](crate::ToDLPack) apply
/// (nulls at any level, types with no tensor form), and the array must hold `A`s in
/// `D`'s rank ([`Error::DtypeMismatch`], [`Error::NdimMismatch`] otherwise).
///
/// ```
/// use std::sync::Arc;
///
/// use dlpack_core::arrow::arrow_array::{Array, FixedSizeListArray, Float32Array};
/// use dlpack_core::arrow::arrow_schema::{DataType, Field};
/// use ndarray::Ix2;
///
/// let values = Float32Array::from_iter_values((0..6).map(|i| i as f32));
/// let item = Arc::new(Field::new("item", DataType::Float32, false));
/// let rows = FixedSizeListArray::try_new(item, 3, Arc::new(values), None)?;
/// let view = dlpack_core::arrow::as_array::<f32, Ix2>(&rows)?;
/// assert_eq!(view.dim(), (2, 3));
/// assert_eq!(view[[1, 2]], 5.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn as_array<'a, A, D>(array: &'a dyn Array) -> Result<ArrayView<'a, A, D>>
where
    A: Element + ArrowNativeType,
    D: Dimension,
{
    // One walk down the levels: each list level's size, its nulls refused.
    let mut extents = [0usize; MAX_RANK];
    extents[0] = array.len();
    let mut ndim = 1;
    let mut leaf: &dyn Array = array;
    loop {
        check_no_nulls("", leaf, ndim - 1)?;
        let Some(lists) = leaf.as_fixed_size_list_opt() else {
            break;
        };
        if ndim == MAX_RANK {
            return Err(error(
                "",
                ArrowErrorKind::Layout,
                format!("lists nested deeper than {MAX_RANK} levels"),
            ));
        }
        extents[ndim] = usize::try_from(lists.value_length()).map_err(|_| {
            error(
                "",
                ArrowErrorKind::Layout,
                format!("a list size of {}", lists.value_length()),
            )
        })?;
        ndim += 1;
        leaf = lists.values().as_ref();
    }
    if let Some(expected) = D::NDIM.filter(|&n| n != ndim) {
        return Err(Error::NdimMismatch {
            expected,
            found: ndim,
        });
    }
    let mut dim = D::zeros(ndim);
    dim.slice_mut().copy_from_slice(&extents[..ndim]);
    let found = dlpack_dtype(leaf.data_type()).ok_or_else(|| {
        error(
            "",
            ArrowErrorKind::Type,
            format!("{} has no tensor form", leaf.data_type()),
        )
    })?;
    if found != A::DTYPE {
        return Err(Error::DtypeMismatch {
            expected: A::DTYPE,
            found,
        });
    }
    let values: &'a [A] = values_buffer(leaf)
        .ok_or_else(|| {
            error(
                "",
                ArrowErrorKind::Type,
                format!("{} has no tensor form", leaf.data_type()),
            )
        })?
        .typed_data::<A>();
    let len = dim
        .size_checked()
        .filter(|&n| n <= values.len())
        .ok_or_else(|| {
            error(
                "",
                ArrowErrorKind::Layout,
                format!("{} values for shape {:?}", values.len(), dim.slice()),
            )
        })?;
    ArrayView::from_shape(dim, &values[..len])
        .map_err(|e| error("", ArrowErrorKind::Layout, e.to_string()))
}
