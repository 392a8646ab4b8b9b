//! Record batches: a batch of tensors by column name, into a derived struct, and back.

use std::sync::Arc;

use dlpack_core::arrow::arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
use dlpack_core::arrow::{ArrowErrorKind, Column};
use dlpack_core::{DLPackArray, FromDLPack, TensorBatch, ToDLPack};
use ndarray::{Array1, Array2, Ix1, Ix2};

use super::{arrow_error, first, floats, lists};

#[derive(FromDLPack)]
struct Rows {
    x: DLPackArray<f32, Ix2>,
    y: DLPackArray<i64, Ix1>,
}

fn table() -> RecordBatch {
    let x: ArrayRef = Arc::new(lists(Arc::new(floats(12)), 3));
    let y: ArrayRef = Arc::new(Int64Array::from(vec![0, 1, 0, 1]));
    RecordBatch::try_from_iter([("x", x), ("y", y)]).unwrap()
}

#[test]
fn a_record_batch_is_a_derived_struct_without_a_copy() {
    let table = table();
    let x_ptr =
        Column::of(&table, 0).array.to_data().child_data()[0].buffers()[0].as_ptr() as usize;
    let y_ptr = Column::of(&table, 1).array.to_data().buffers()[0].as_ptr() as usize;
    let rows = Rows::from_dlpack(table.to_dlpack().unwrap()).unwrap();
    assert_eq!(rows.x.view().as_ptr() as usize, x_ptr);
    assert_eq!(rows.y.view().as_ptr() as usize, y_ptr);
    assert_eq!(rows.x.view().dim(), (4, 3));
    assert_eq!(rows.x.view()[[3, 2]], 11.0);
}

#[test]
fn a_struct_that_asks_for_a_column_the_table_lacks_names_it() {
    #[derive(FromDLPack, Debug)]
    struct Wrong {
        #[allow(dead_code)]
        z: DLPackArray<f32, Ix2>,
    }
    let err = Wrong::from_dlpack(table().to_dlpack().unwrap()).unwrap_err();
    assert!(err.to_string().contains('z'), "{err}");
}

#[test]
fn a_batch_of_tensors_is_a_record_batch_and_back() {
    let x = Array2::<f32>::from_shape_fn((5, 2), |(i, j)| (i * 2 + j) as f32);
    let y = Array1::<i32>::from(vec![1, 2, 3, 4, 5]);
    let (x_ptr, y_ptr) = (x.as_ptr() as usize, y.as_ptr() as usize);
    let mut batch = TensorBatch::new();
    batch.insert("x", x.to_dlpack().unwrap()).unwrap();
    batch.insert("y", y.to_dlpack().unwrap()).unwrap();
    batch.metadata_mut().insert("source".into(), "test".into());
    let table = RecordBatch::from_dlpack(batch).unwrap();
    assert_eq!(table.num_rows(), 5);
    assert_eq!(table.schema().metadata()["source"], "test");
    let back = table.to_dlpack().unwrap();
    assert_eq!(first(back.get("x").unwrap()), x_ptr);
    assert_eq!(first(back.get("y").unwrap()), y_ptr);
    assert_eq!(back.get("x").unwrap().shape(), [5, 2]);
    assert_eq!(back.metadata()["source"], "test");
}

#[test]
fn columns_of_different_lengths_are_refused_naming_both() {
    let mut batch = TensorBatch::new();
    batch
        .insert("a", Array1::<f32>::zeros(3).to_dlpack().unwrap())
        .unwrap();
    batch
        .insert("b", Array1::<f32>::zeros(4).to_dlpack().unwrap())
        .unwrap();
    let (kind, column, text) = arrow_error(RecordBatch::from_dlpack(batch).unwrap_err());
    assert_eq!(kind, ArrowErrorKind::Layout);
    assert_eq!(column, "b");
    assert!(text.contains("`a`"), "{text}");
}

#[test]
fn a_nested_struct_field_takes_a_prefixed_record_batch() {
    #[derive(ToDLPack, FromDLPack)]
    struct Outer {
        data: RecordBatch,
    }
    let outer = Outer { data: table() };
    let batch = outer.to_dlpack().unwrap();
    assert_eq!(batch.names().collect::<Vec<_>>(), ["data.x", "data.y"]);
    let back = Outer::from_dlpack(batch).unwrap();
    assert_eq!(back.data.num_rows(), 4);
    assert_eq!(back.data.schema().field(0).name(), "x");
}
