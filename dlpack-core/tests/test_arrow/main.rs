//! Arrow columns as tensors: every numeric type, nested fixed-size lists sliced at each
//! level, the fixed-shape tensor extension as both writers spell it, record batches into
//! derived structs, IPC files; zero-copy proven by pointer equality both ways, every
//! refusal a typed error naming the column, deleters counted.
#![cfg(all(feature = "arrow", feature = "ndarray", feature = "derive"))]

use std::sync::Arc;

use dlpack_core::arrow::arrow_array::types::Float32Type;
use dlpack_core::arrow::arrow_array::{Array, ArrayRef, FixedSizeListArray, PrimitiveArray};
use dlpack_core::arrow::arrow_schema::Field;
use dlpack_core::{Error, ManagedTensor};

mod batches;
mod columns;
#[path = "../common/mod.rs"]
mod common;
mod extension;
mod files;
mod refusals;

/// A float32 column of `n` values `0, 1, ...`.
fn floats(n: usize) -> PrimitiveArray<Float32Type> {
    PrimitiveArray::from_iter_values((0..n).map(|i| i as f32))
}

/// `values` as fixed-size lists of `size` (items nullable, as most writers declare them).
fn lists(values: ArrayRef, size: i32) -> FixedSizeListArray {
    let item = Arc::new(Field::new("item", values.data_type().clone(), true));
    FixedSizeListArray::try_new(item, size, values, None).unwrap()
}

/// The address of a tensor's first element.
fn first(tensor: &ManagedTensor) -> usize {
    tensor.data_ptr() as usize
}

/// The kind and column of an Arrow error, or a panic naming what came instead.
fn arrow_error(err: Error) -> (dlpack_core::arrow::ArrowErrorKind, String, String) {
    let text = err.to_string();
    match err.root() {
        Error::Arrow { kind, column, .. } => (*kind, column.clone(), text),
        other => panic!("expected an Arrow error, got {other:?}"),
    }
}
