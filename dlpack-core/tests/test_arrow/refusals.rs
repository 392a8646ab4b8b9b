//! What a tensor cannot be, refused with the kind, the column and the fix: nulls at
//! every level, types with no tensor form, tensors with no Arrow form.

use std::sync::Arc;

use dlpack_core::arrow::arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use dlpack_core::arrow::arrow_array::types::{Float32Type, Int32Type};
use dlpack_core::arrow::arrow_array::{
    Array, ArrayRef, BooleanArray, DictionaryArray, Int32Array, ListArray, PrimitiveArray,
    RecordBatch, StringArray, TimestampSecondArray,
};
use dlpack_core::arrow::arrow_schema::Field;
use dlpack_core::arrow::{ArrowErrorKind, Column};
use dlpack_core::{FromDLPack, ToDLPack};
use ndarray::{Array0, Array1, Array2};

use super::{arrow_error, floats, lists};

fn refused(array: ArrayRef) -> (ArrowErrorKind, String) {
    let batch = RecordBatch::try_from_iter([("col", array)]).unwrap();
    let (kind, column, text) = arrow_error(batch.to_dlpack().unwrap_err());
    assert_eq!(column, "col", "{text}");
    assert!(text.contains("`col`"), "{text}");
    (kind, text)
}

#[test]
fn nulls_are_refused_at_every_level_and_a_validity_without_nulls_is_fine() {
    let (kind, text) = refused(Arc::new(PrimitiveArray::<Float32Type>::from(vec![
        Some(1.0),
        None,
    ])));
    assert_eq!(kind, ArrowErrorKind::Nulls);
    assert!(
        text.contains("1 null") && text.contains("fill_null"),
        "{text}"
    );
    // A null list (the rows' level).
    let mut rows = FixedSizeListBuilder::new(Float32Builder::new(), 2);
    rows.values().append_slice(&[1.0, 2.0]);
    rows.append(true);
    rows.values().append_slice(&[0.0, 0.0]);
    rows.append(false);
    let (kind, text) = refused(Arc::new(rows.finish()));
    assert_eq!(kind, ArrowErrorKind::Nulls);
    assert!(text.contains("rows"), "{text}");
    // A null item (the level below).
    let items = PrimitiveArray::<Float32Type>::from(vec![Some(1.0), None, Some(3.0), Some(4.0)]);
    let (kind, text) = refused(Arc::new(lists(Arc::new(items), 2)));
    assert_eq!(kind, ArrowErrorKind::Nulls);
    assert!(text.contains("level 1"), "{text}");
    // A validity buffer that counts no null.
    let some = PrimitiveArray::<Float32Type>::from(vec![Some(1.0), Some(2.0), None]).slice(0, 2);
    assert!(some.nulls().is_some());
    assert_eq!(some.to_dlpack().unwrap().shape(), [2]);
}

#[test]
fn types_with_no_tensor_form_are_refused_with_the_fix() {
    let dictionary: DictionaryArray<Int32Type> = vec!["a", "b", "a"].into_iter().collect();
    let list =
        ListArray::from_iter_primitive::<Int32Type, _, _>([Some(vec![Some(1)]), Some(vec![])]);
    for (array, words) in [
        (
            Arc::new(BooleanArray::from(vec![true, false])) as ArrayRef,
            "uint8",
        ),
        (Arc::new(StringArray::from(vec!["a"])), "strings"),
        (Arc::new(list), "fixed-size list"),
        (Arc::new(dictionary), "decode"),
        (Arc::new(TimestampSecondArray::from(vec![1, 2])), "cast"),
        (
            Arc::new(PrimitiveArray::<
                dlpack_core::arrow::arrow_array::types::Decimal128Type,
            >::from(vec![1, 2])),
            "cast",
        ),
    ] {
        let (kind, text) = refused(array);
        assert_eq!(kind, ArrowErrorKind::Type, "{text}");
        assert!(text.contains(words), "{text}");
    }
}

#[test]
fn a_timestamp_primitive_array_is_refused_by_its_own_impl() {
    let err = TimestampSecondArray::from(vec![1]).to_dlpack().unwrap_err();
    assert_eq!(arrow_error(err).0, ArrowErrorKind::Type);
    // And a tensor cannot become one either.
    let t = Array1::<i64>::from(vec![1]).to_dlpack().unwrap();
    assert!(TimestampSecondArray::from_dlpack(t).is_err());
}

#[test]
fn tensors_with_no_arrow_form_are_refused() {
    let bools = Array1::from(vec![true, false]).to_dlpack().unwrap();
    assert_eq!(
        arrow_error(Column::from_dlpack(bools).unwrap_err()).0,
        ArrowErrorKind::Type
    );
    let scalar = Array0::from_elem((), 1.0f32).to_dlpack().unwrap();
    assert_eq!(
        arrow_error(Column::from_dlpack(scalar).unwrap_err()).0,
        ArrowErrorKind::Layout
    );
    // A column of a matrix: strided rows.
    let matrix = Array2::<f32>::zeros((4, 3));
    let strided = matrix
        .slice(ndarray::s![.., ..2])
        .to_owned()
        .reversed_axes();
    let t = dlpack_core::ManagedTensor::from_buffer(
        strided.into_raw_vec_and_offset().0,
        0,
        &[3, 2],
        &[1, 3],
    )
    .unwrap();
    let (kind, _, text) = arrow_error(Column::from_dlpack(t).unwrap_err());
    assert_eq!(kind, ArrowErrorKind::Layout);
    assert!(text.contains("C order"), "{text}");
    // A wrong dtype or rank for a typed array.
    let t = Array1::<f64>::zeros(3).to_dlpack().unwrap();
    assert!(matches!(
        PrimitiveArray::<Float32Type>::from_dlpack(t).unwrap_err(),
        dlpack_core::Error::DtypeMismatch { .. }
    ));
    let t = Array2::<i32>::zeros((2, 2)).to_dlpack().unwrap();
    assert!(matches!(
        Int32Array::from_dlpack(t).unwrap_err(),
        dlpack_core::Error::NdimMismatch { .. }
    ));
}

#[test]
fn an_empty_column_is_an_empty_tensor_and_back() {
    let empty = floats(0);
    let t = empty.to_dlpack().unwrap();
    assert_eq!(t.shape(), [0]);
    let back = PrimitiveArray::<Float32Type>::from_dlpack(t).unwrap();
    assert_eq!(back.len(), 0);
    let rows = Array2::<f32>::zeros((0, 3)).to_dlpack().unwrap();
    let c = Column::from_dlpack(rows).unwrap();
    assert_eq!(c.array.len(), 0);
    let item = Arc::new(Field::new("item", floats(0).data_type().clone(), false));
    assert_eq!(
        c.field.data_type(),
        &dlpack_core::arrow::arrow_schema::DataType::FixedSizeList(item, 3)
    );
}
