//! Columns both ways, zero-copy: every numeric type, nesting depths 1 to 3, slices at
//! every level; a tensor's memory as an Arrow buffer that owns it.

use std::sync::Arc;

use dlpack_core::arrow::arrow_array::types::*;
use dlpack_core::arrow::arrow_array::{Array, ArrayRef, FixedSizeListArray, PrimitiveArray};
use dlpack_core::{DataType, FromDLPack, ManagedTensor, ToDLPack};
use ndarray::{Array1, Array2, ArrayD, Ix1, IxDyn};

use super::{first, floats, lists};

fn check_primitive<T: ArrowPrimitiveType>(dtype: DataType)
where
    T::Native: num_like::FromUsize,
{
    let array = PrimitiveArray::<T>::from_iter_values((0..7).map(num_like::FromUsize::from_usize));
    let ptr = array.values().as_ptr() as usize;
    let tensor = array.clone().to_dlpack().unwrap();
    assert_eq!(tensor.dtype(), dtype);
    assert_eq!(tensor.shape(), [7]);
    assert_eq!(first(&tensor), ptr);
    assert!(tensor.is_read_only());
    // And back: the tensor's memory, owned by the new array.
    let back = PrimitiveArray::<T>::from_dlpack(tensor).unwrap();
    assert_eq!(back.values().as_ptr() as usize, ptr);
    assert_eq!(back, array);
}

/// Element values from indices, for every native type.
mod num_like {
    pub(super) trait FromUsize {
        fn from_usize(i: usize) -> Self;
    }
    macro_rules! from_usize {
        ($($t:ty),*) => {$(impl FromUsize for $t { fn from_usize(i: usize) -> Self { i as $t } })*};
    }
    from_usize!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);
    impl FromUsize for half::f16 {
        fn from_usize(i: usize) -> Self {
            half::f16::from_f32(i as f32)
        }
    }
}

#[test]
fn every_numeric_type_is_a_1_d_tensor_over_the_values_buffer() {
    check_primitive::<Int8Type>(DataType::I8);
    check_primitive::<Int16Type>(DataType::I16);
    check_primitive::<Int32Type>(DataType::I32);
    check_primitive::<Int64Type>(DataType::I64);
    check_primitive::<UInt8Type>(DataType::U8);
    check_primitive::<UInt16Type>(DataType::U16);
    check_primitive::<UInt32Type>(DataType::U32);
    check_primitive::<UInt64Type>(DataType::U64);
    check_primitive::<Float16Type>(DataType::F16);
    check_primitive::<Float32Type>(DataType::F32);
    check_primitive::<Float64Type>(DataType::F64);
}

#[test]
fn a_sliced_array_starts_at_its_offset() {
    let array = floats(10);
    let sliced = array.slice(3, 4);
    let tensor = sliced.to_dlpack().unwrap();
    assert_eq!(first(&tensor), array.values().as_ptr() as usize + 3 * 4);
    assert_eq!(
        tensor.as_array::<f32, Ix1>().unwrap().to_vec(),
        [3.0, 4.0, 5.0, 6.0]
    );
}

#[test]
fn nested_lists_are_n_d_tensors_at_every_depth_and_slice() {
    // Counts chosen so that every level divides: after each slice, 41 rows of 5, 9 rows
    // of 4 x 5, 2 rows of 3 x 4 x 5.
    let leaf = floats(210);
    let base = leaf.values().as_ptr() as usize;
    let mut column: ArrayRef = Arc::new(leaf.slice(5, 205));
    let (mut offset, mut row) = (5usize, 1usize);
    for (depth, (size, rows)) in [(5, 41), (4, 10), (3, 3)].into_iter().enumerate() {
        let level = lists(column, size);
        assert_eq!(level.len(), rows);
        let sliced = level.slice(1, rows - 1);
        row *= size as usize;
        offset += row;
        let tensor = sliced.clone().to_dlpack().unwrap();
        assert_eq!(tensor.ndim(), depth + 2);
        assert_eq!(first(&tensor), base + offset * 4, "depth {}", depth + 1);
        let view = tensor.as_array::<f32, IxDyn>().unwrap();
        let expected: Vec<f32> = (0..view.len()).map(|i| (offset + i) as f32).collect();
        assert_eq!(view.iter().copied().collect::<Vec<_>>(), expected);
        column = Arc::new(sliced);
    }
}

#[test]
fn a_tensor_becomes_nested_lists_over_its_own_memory() {
    let array =
        ArrayD::<f32>::from_shape_fn(IxDyn(&[2, 3, 4]), |d| (d[0] * 12 + d[1] * 4 + d[2]) as f32);
    let ptr = array.as_ptr() as usize;
    let lists = FixedSizeListArray::from_dlpack(array.to_dlpack().unwrap()).unwrap();
    assert_eq!((lists.len(), lists.value_length()), (2, 3));
    let inner = lists
        .values()
        .as_any()
        .downcast_ref::<FixedSizeListArray>()
        .unwrap();
    assert_eq!(inner.value_length(), 4);
    let leaf = inner
        .values()
        .as_any()
        .downcast_ref::<PrimitiveArray<Float32Type>>()
        .unwrap();
    assert_eq!(leaf.values().as_ptr() as usize, ptr);
    // And back, the same memory again.
    let tensor = lists.to_dlpack().unwrap();
    assert_eq!(first(&tensor), ptr);
    assert_eq!(tensor.shape(), [2, 3, 4]);
}

#[test]
fn the_tensor_is_released_once_when_the_last_array_goes() {
    let counter = crate::common::Counter::new();
    let owner = crate::common::Counted {
        data: (0..6).map(|i| i as f32).collect(),
        counter: counter.clone(),
    };
    let tensor = ManagedTensor::from_buffer(owner, 0, &[6], &[1]).unwrap();
    let array = PrimitiveArray::<Float32Type>::from_dlpack(tensor).unwrap();
    let slice = array.slice(2, 2);
    drop(array);
    assert_eq!(counter.get(), 0, "a slice keeps the buffer");
    assert_eq!(slice.values().to_vec(), [2.0, 3.0]);
    drop(slice);
    assert_eq!(counter.get(), 1);
}

#[test]
fn a_refused_tensor_is_dropped_once() {
    let counter = crate::common::Counter::new();
    let owner = crate::common::Counted {
        data: vec![0.0; 6],
        counter: counter.clone(),
    };
    let tensor = ManagedTensor::from_buffer(owner, 0, &[2, 3], &[1, 2]).unwrap();
    assert!(PrimitiveArray::<Float32Type>::from_dlpack(tensor).is_err());
    assert_eq!(counter.get(), 1);
    let owner = crate::common::Counted {
        data: vec![0.0; 6],
        counter: counter.clone(),
    };
    // Column order, not C order: no Arrow form without a copy.
    let tensor = ManagedTensor::from_buffer(owner, 0, &[2, 3], &[1, 2]).unwrap();
    assert!(FixedSizeListArray::from_dlpack(tensor).is_err());
    assert_eq!(counter.get(), 2);
}

#[test]
fn an_owned_array_round_trips_without_a_copy() {
    let a = Array2::<f64>::from_shape_fn((3, 2), |(i, j)| (i * 2 + j) as f64);
    let ptr = a.as_ptr() as usize;
    let column = dlpack_core::arrow::Column::from_dlpack(a.to_dlpack().unwrap()).unwrap();
    let back = column.to_dlpack().unwrap();
    assert_eq!(first(&back), ptr);
    let v = Array1::<i32>::from(vec![1, 2, 3]);
    let ptr = v.as_ptr() as usize;
    let array = PrimitiveArray::<Int32Type>::from_dlpack(v.to_dlpack().unwrap()).unwrap();
    assert_eq!(array.values().as_ptr() as usize, ptr);
}
