//! One column both ways: an Arrow array (primitive, nested fixed-size lists, the
//! fixed-shape tensor extension) as a tensor over its values buffer, and a tensor as an
//! Arrow array whose buffer owns the tensor.

use std::panic::RefUnwindSafe;
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, FixedSizeListArray, PrimitiveArray};
use arrow_buffer::{Buffer, ScalarBuffer};
use arrow_schema::{DataType as ArrowType, Field};

use crate::device::Device;
use crate::dtype::DataType;
use crate::error::{ArrowErrorKind, Error, Result};
use crate::ffi::DLPACK_FLAG_BITMASK_READ_ONLY;
use crate::tensor::ManagedTensor;

use super::extension::FixedShapeTensor;

/// Arrow's numeric types beside DLPack's: the one table every direction reads. Calls
/// `$m!` once with the whole table, `(arrow-rs type, Arrow type variant, DLPack type)`
/// per row, so that each use is one `match`.
macro_rules! numeric_table {
    ($m:ident) => {
        $m! {
            (Int8Type, Int8, I8),
            (Int16Type, Int16, I16),
            (Int32Type, Int32, I32),
            (Int64Type, Int64, I64),
            (UInt8Type, UInt8, U8),
            (UInt16Type, UInt16, U16),
            (UInt32Type, UInt32, U32),
            (UInt64Type, UInt64, U64),
            (Float16Type, Float16, F16),
            (Float32Type, Float32, F32),
            (Float64Type, Float64, F64),
        }
    };
}

/// The DLPack type of an Arrow numeric type.
pub(crate) fn dlpack_dtype(ty: &ArrowType) -> Option<DataType> {
    macro_rules! to_dlpack {
        ($(($t:ty, $v:ident, $c:ident),)*) => {
            match ty {
                $(ArrowType::$v => Some(DataType::$c),)*
                _ => None,
            }
        };
    }
    numeric_table!(to_dlpack)
}

/// The Arrow type of a DLPack type.
pub(crate) fn arrow_dtype(dtype: DataType) -> Option<ArrowType> {
    macro_rules! to_arrow {
        ($(($t:ty, $v:ident, $c:ident),)*) => {
            $(if dtype == DataType::$c {
                return Some(ArrowType::$v);
            })*
        };
    }
    numeric_table!(to_arrow);
    None
}

pub(crate) fn error(column: &str, kind: ArrowErrorKind, reason: impl Into<String>) -> Error {
    Error::Arrow {
        column: column.to_owned(),
        kind,
        reason: reason.into(),
    }
}

/// Why a type has no tensor form, and what to do.
pub(crate) fn type_reason(ty: &ArrowType) -> String {
    let fix = match ty {
        ArrowType::Boolean => {
            "booleans are bit-packed and a tensor's are bytes: cast to \
                               uint8 first (`cast(&array, &DataType::UInt8)`; pyarrow \
                               `pc.cast(a, pa.uint8())`, Polars `s.cast(pl.UInt8)`)"
        }
        ArrowType::List(_)
        | ArrowType::LargeList(_)
        | ArrowType::ListView(_)
        | ArrowType::LargeListView(_) => {
            "lists of variable length are not a tensor: cast \
                                          to a fixed-size list first (pyarrow \
                                          `pa.list_(t, n)`, Polars `pl.Array(t, n)`)"
        }
        ArrowType::Struct(_) => {
            "a struct column is a table: take it as a batch of tensors \
                                 (one per field)"
        }
        ArrowType::Utf8 | ArrowType::LargeUtf8 | ArrowType::Utf8View => {
            "tokenize or encode the strings first"
        }
        ArrowType::Dictionary(..) => {
            "a dictionary column holds codes and values: decode it \
                                      first (pyarrow `dictionary_decode()`)"
        }
        _ => {
            "not a number: cast it to a numeric type first (dates and times to int64, \
              decimals to float64)"
        }
    };
    format!("{ty} has no tensor form: {fix}")
}

/// The nulls of one level, refused: a tensor has no validity.
pub(super) fn check_no_nulls(column: &str, array: &dyn Array, level: usize) -> Result<()> {
    let nulls = array.null_count();
    if nulls == 0 {
        return Ok(());
    }
    let level = if level == 0 {
        "rows".to_owned()
    } else {
        format!("items at nesting level {level}")
    };
    Err(error(
        column,
        ArrowErrorKind::Nulls,
        format!(
            "{nulls} null {level}: a tensor has no nulls; fill or drop them first (pyarrow \
             `pc.fill_null`, Polars `fill_null`/`drop_nulls`)"
        ),
    ))
}

/// A column as a tensor over its values buffer, which the tensor keeps alive; flagged
/// `READ_ONLY` (Arrow buffers are immutable, and others may share them). Offsets of
/// sliced arrays are honoured at every level (arrow-rs slices each level's values).
pub(crate) fn column_to_tensor(field: &Field, array: &ArrayRef) -> Result<ManagedTensor> {
    let extension = FixedShapeTensor::from_field(field)?;
    array_to_tensor(field.name(), extension.as_ref(), array.as_ref())
}

/// [`column_to_tensor`] of a column named `column`, with its extension, if any.
pub(crate) fn array_to_tensor(
    column: &str,
    extension: Option<&FixedShapeTensor>,
    array: &dyn Array,
) -> Result<ManagedTensor> {
    let mut dims = vec![array.len()];
    let mut current: &dyn Array = array;
    let mut level = 0;
    while let ArrowType::FixedSizeList(_, size) = current.data_type() {
        check_no_nulls(column, current, level)?;
        let size = usize::try_from(*size).map_err(|_| {
            error(
                column,
                ArrowErrorKind::Layout,
                format!("a list size of {size}"),
            )
        })?;
        dims.push(size);
        current = current.as_fixed_size_list().values().as_ref();
        level += 1;
    }
    check_no_nulls(column, current, level)?;
    let leaf_type = current.data_type();
    let dtype = dlpack_dtype(leaf_type)
        .ok_or_else(|| error(column, ArrowErrorKind::Type, type_reason(leaf_type)))?;
    let elements = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| {
            n.checked_mul(dtype.size_in_bytes())
                .is_some_and(|b| isize::try_from(b).is_ok())
        })
        .ok_or_else(|| {
            error(
                column,
                ArrowErrorKind::Layout,
                format!("shape {dims:?} overflows"),
            )
        })?;
    let buffer = values_buffer(current)
        .ok_or_else(|| error(column, ArrowErrorKind::Type, type_reason(leaf_type)))?
        .clone();
    if buffer.len() < elements * dtype.size_in_bytes() {
        return Err(error(
            column,
            ArrowErrorKind::Layout,
            format!(
                "{} values for shape {dims:?}",
                buffer.len() / dtype.size_in_bytes()
            ),
        ));
    }
    let (shape, strides) = match extension {
        None => (to_i64(column, &dims)?, None),
        Some(tensor) => {
            tensor.check(column)?;
            if dims.len() != 2 || Some(dims[1]) != tensor.cell_len() {
                return Err(error(
                    column,
                    ArrowErrorKind::Metadata,
                    format!(
                        "a fixed-shape tensor of shape {:?} stored as lists of shape {:?}",
                        tensor.shape,
                        &dims[1..]
                    ),
                ));
            }
            let mut shape = vec![dims[0]];
            shape.extend_from_slice(&tensor.shape);
            let strides = tensor.strides().ok_or_else(|| {
                error(
                    column,
                    ArrowErrorKind::Layout,
                    format!("shape {shape:?} overflows"),
                )
            })?;
            (to_i64(column, &shape)?, Some(strides))
        }
    };
    if buffer.as_ptr().align_offset(dtype.size_in_bytes().max(1)) != 0 {
        return Err(misaligned(column, dtype));
    }
    // SAFETY:
    // - the buffer holds at least `elements` values of `dtype` (checked above) from its
    //   first byte, aligned for the element (checked above), and `shape` with `strides`
    //   (row major, or the extension's permutation of each row's cell, which stays
    //   inside the row) reaches only those; the owner (the `Buffer`, an `Arc` of the
    //   allocation) keeps them alive and unmoved until the deleter drops it;
    // - `READ_ONLY`: Arrow buffers are immutable, and nobody writes them while any
    //   holder of the allocation lives (arrow-rs hands out mutable access only to a
    //   buffer's sole owner, and the tensor holds a reference). A buffer over a
    //   foreign allocation (a producer's, through the C data interface) is the
    //   producer's memory: its other handles are bound only by what the interface
    //   promises, as every import from Python is, and such tensors are marked shared
    //   by the Python imports (the import safety guide);
    // - `dtype` is the Arrow type's DLPack equivalent (numbers only: no `bool`).
    unsafe {
        ManagedTensor::from_owner(
            buffer,
            |buffer| buffer.as_ptr().cast_mut().cast(),
            &shape,
            strides.as_deref(),
            dtype,
            Device::CPU,
            DLPACK_FLAG_BITMASK_READ_ONLY,
        )
    }
}

fn misaligned(column: &str, dtype: DataType) -> Error {
    error(
        column,
        ArrowErrorKind::Layout,
        format!(
            "values of {dtype} not aligned to {} bytes: align the buffers first \
             (`ArrayData::align_buffers`; an IPC reader realigns them)",
            dtype.size_in_bytes()
        ),
    )
}

fn to_i64(column: &str, dims: &[usize]) -> Result<Vec<i64>> {
    dims.iter()
        .map(|&d| i64::try_from(d))
        .collect::<Result<_, _>>()
        .map_err(|_| {
            error(
                column,
                ArrowErrorKind::Layout,
                format!("shape {dims:?} overflows"),
            )
        })
}

/// The values of a numeric leaf, from its first element (arrow-rs has applied the
/// array's offset), borrowed; `None` for any other array.
pub(super) fn values_buffer(leaf: &dyn Array) -> Option<&Buffer> {
    macro_rules! values {
        ($(($t:ty, $v:ident, $c:ident),)*) => {
            match leaf.data_type() {
                $(ArrowType::$v => leaf.as_primitive_opt::<$t>().map(|a| a.values().inner()),)*
                _ => None,
            }
        };
    }
    numeric_table!(values)
}

/// The owner of a tensor's memory inside an Arrow buffer.
struct TensorAllocation {
    _tensor: ManagedTensor,
}

// (`ManagedTensor` is `Send + Sync`; arrow-rs asks `RefUnwindSafe` of an allocation's
// owner, which a tensor is: nothing of it is left half-changed by a panic, since the
// buffer only reads it and drops it.)
impl RefUnwindSafe for TensorAllocation {}

/// A tensor as one Arrow column named `name`, zero-copy: its memory becomes the values
/// buffer, which owns the tensor (the deleter runs when the last Arrow array over it is
/// dropped). A 1-d tensor is a primitive array; an n-d one an `arrow.fixed_shape_tensor`
/// column (rows along the first axis, each row a fixed-size list of its cell), with the
/// extension's `permutation` when each row's cell is laid out in another order of its
/// axes. The tensor must be on the CPU, of a numeric type, with rows in C order and
/// aligned elements: anything else is refused (copy it first), and dropped.
pub(crate) fn tensor_to_column(name: &str, tensor: ManagedTensor) -> Result<(Field, ArrayRef)> {
    let dtype = tensor.dtype();
    let arrow_type = arrow_dtype(dtype).ok_or_else(|| {
        error(
            name,
            ArrowErrorKind::Type,
            format!(
                "a tensor of {dtype} has no Arrow column form (numbers only: a bool tensor \
                 can be cast to uint8 first)"
            ),
        )
    })?;
    if !tensor.device().is_cpu_accessible() {
        return Err(error(
            name,
            ArrowErrorKind::Layout,
            format!(
                "a tensor on {}: Arrow arrays are host memory (copy it to the CPU first)",
                tensor.device()
            ),
        ));
    }
    let shape = tensor.shape().to_vec();
    if shape.is_empty() {
        return Err(error(
            name,
            ArrowErrorKind::Layout,
            "a 0-d tensor has no rows: reshape it to (1,) first",
        ));
    }
    let span = tensor.byte_span()?;
    let size = dtype.size_in_bytes();
    let strides = match tensor.strides() {
        Some(s) => s.to_vec(),
        None => {
            let mut s = vec![0; shape.len()];
            crate::layout::c_strides(&shape, &mut s);
            s
        }
    };
    let permutation = if shape.len() == 1 {
        (span.elements <= 1 || strides[0] == 1).then_some(None)
    } else {
        FixedShapeTensor::permutation_of(&shape, &strides)
    };
    let Some(permutation) = permutation else {
        return Err(error(
            name,
            ArrowErrorKind::Layout,
            format!(
                "strides {strides:?} for shape {shape:?}: an Arrow column holds its rows one \
                 after the other, each dense (copy it into C order first)"
            ),
        ));
    };
    if span.first % size.max(1) != 0 {
        return Err(misaligned(name, dtype));
    }
    let len = span.elements * size;
    let rows = usize::try_from(shape[0]).unwrap_or(0);
    // (The first element's pointer, with its provenance: `span.first` is its address.)
    let first = tensor.data_ptr().cast::<u8>();
    let allocation: Arc<dyn arrow_buffer::alloc::Allocation> =
        Arc::new(TensorAllocation { _tensor: tensor });
    let buffer = match NonNull::new(first) {
        // SAFETY:
        // - the tensor's `len` bytes from its first element are its elements, in one
        //   dense run (C order rows, each row a dense cell: checked above), inside the
        //   address space (`byte_span`), and the allocation owns the tensor, whose
        //   producer keeps them valid until its deleter runs, when the buffer's last
        //   holder drops the allocation;
        // - Arrow only reads them: the memory is initialised elements of `dtype`, a
        //   numeric type with every bit pattern valid. Whoever else holds the tensor's
        //   memory (a producer's other handles) is bound by the import safety policy,
        //   as any shared view is.
        Some(ptr) if len > 0 => unsafe { Buffer::from_custom_allocation(ptr, len, allocation) },
        _ => {
            drop(allocation);
            Buffer::from(arrow_buffer::MutableBuffer::new(0))
        }
    };
    let values = primitive(&arrow_type, buffer, span.elements);
    if shape.len() == 1 {
        return Ok((Field::new(name, arrow_type, false), values));
    }
    let cell: Vec<usize> = shape[1..].iter().map(|&d| d as usize).collect();
    let extension = FixedShapeTensor {
        shape: cell,
        dim_names: None,
        permutation,
    };
    let cell_len = extension.cell_len().unwrap_or(0);
    if cell_len == 0 && rows > 0 {
        return Err(error(
            name,
            ArrowErrorKind::Layout,
            format!("shape {shape:?}: rows of no element have no Arrow list form"),
        ));
    }
    let list_size = i32::try_from(cell_len).map_err(|_| {
        error(
            name,
            ArrowErrorKind::Layout,
            format!(
                "rows of {cell_len} elements: an Arrow list holds at most {}",
                i32::MAX
            ),
        )
    })?;
    let item = Arc::new(Field::new("item", arrow_type, false));
    let list = FixedSizeListArray::try_new(item, list_size, values, None)
        .map_err(|e| error(name, ArrowErrorKind::Layout, e.to_string()))?;
    debug_assert_eq!(list.len(), rows);
    let field =
        Field::new(name, list.data_type().clone(), false).with_metadata(extension.field_metadata());
    Ok((field, Arc::new(list)))
}

/// A primitive array of `len` values of `ty` over `buffer` (aligned, long enough).
fn primitive(ty: &ArrowType, buffer: Buffer, len: usize) -> ArrayRef {
    macro_rules! primitive {
        ($(($t:ty, $v:ident, $c:ident),)*) => {
            match ty {
                $(ArrowType::$v => {
                    let values =
                        ScalarBuffer::<<$t as ArrowPrimitiveType>::Native>::new(buffer, 0, len);
                    Arc::new(PrimitiveArray::<$t>::new(values, None))
                })*
                _ => unreachable!("a numeric type (found in the table)"),
            }
        };
    }
    numeric_table!(primitive)
}
