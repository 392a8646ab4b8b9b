//! The `arrow.fixed_shape_tensor` extension: read as arrow-schema 60 writes it
//! (`permutations`, explicit nulls) and as the specification and pyarrow write it
//! (`permutation`, nulls left out); its permutation as strides and back.

use std::collections::HashMap;
use std::sync::Arc;

use dlpack_core::arrow::arrow_array::{Array, ArrayRef};
use dlpack_core::arrow::arrow_schema::Field;
use dlpack_core::arrow::{
    ArrowErrorKind, Column, EXTENSION_METADATA_KEY, EXTENSION_NAME_KEY, FIXED_SHAPE_TENSOR,
    FixedShapeTensor,
};
use dlpack_core::{FromDLPack, ToDLPack};
use ndarray::{Array3, IxDyn};

use super::{arrow_error, first, floats, lists};

/// A column of 4 rows of `shape` (6 elements) with the given extension metadata.
fn column(metadata: &str) -> Column {
    let storage: ArrayRef = Arc::new(lists(Arc::new(floats(24)), 6));
    let field = Field::new("t", storage.data_type().clone(), false).with_metadata(HashMap::from([
        (EXTENSION_NAME_KEY.to_owned(), FIXED_SHAPE_TENSOR.to_owned()),
        (EXTENSION_METADATA_KEY.to_owned(), metadata.to_owned()),
    ]));
    Column::new(field, storage)
}

#[test]
fn both_spellings_of_the_permutation_are_read_and_nulls_are_absent() {
    // As arrow-schema 60 writes it.
    let arrow_rs = column(r#"{"shape":[2,3],"dim_names":null,"permutations":[1,0]}"#);
    // As the specification (and pyarrow, Arrow C++) write it.
    let spec = column(r#"{"shape":[2,3],"permutation":[1,0]}"#);
    for c in [arrow_rs, spec] {
        let storage_ptr = c.array.to_data().child_data()[0].buffers()[0].as_ptr() as usize;
        let tensor = c.to_dlpack().unwrap();
        assert_eq!(tensor.shape(), [4, 2, 3]);
        assert_eq!(tensor.strides().unwrap(), [6, 1, 2]);
        assert_eq!(first(&tensor), storage_ptr);
        // Row 1, element (1, 2): physical index 6 + 2 * 2 + 1.
        assert_eq!(tensor.as_array::<f32, IxDyn>().unwrap()[[1, 1, 2]], 11.0);
    }
    let row_major = column(r#"{"shape":[2,3],"dim_names":["h","w"],"permutation":null}"#);
    assert_eq!(row_major.to_dlpack().unwrap().strides().unwrap(), [6, 3, 1]);
}

#[test]
fn metadata_is_written_in_the_specifications_form() {
    let t = FixedShapeTensor {
        shape: vec![2, 3],
        dim_names: None,
        permutation: Some(vec![1, 0]),
    };
    let json: serde_json::Value = serde_json::from_str(&t.to_json()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"shape": [2, 3], "permutation": [1, 0]})
    );
    let plain = FixedShapeTensor {
        permutation: None,
        ..t
    };
    assert_eq!(plain.to_json(), r#"{"shape":[2,3]}"#);
}

#[test]
fn a_permuted_tensor_goes_out_with_its_permutation_and_comes_back() {
    // Rows of 2 x 3 cells stored with the cell's axes swapped.
    let physical = Array3::<f32>::from_shape_fn((4, 3, 2), |(r, i, j)| (r * 6 + i * 2 + j) as f32);
    let ptr = physical.as_ptr() as usize;
    let logical = physical.permuted_axes([0, 2, 1]);
    let expected = logical.to_owned();
    let c = Column::from_dlpack(logical.to_dlpack().unwrap()).unwrap();
    let t = FixedShapeTensor::from_field(&c.field).unwrap().unwrap();
    assert_eq!(t.shape, [2, 3]);
    assert_eq!(t.permutation, Some(vec![1, 0]));
    let back = c.to_dlpack().unwrap();
    assert_eq!(first(&back), ptr);
    assert_eq!(back.as_array::<f32, IxDyn>().unwrap(), expected.into_dyn());
}

#[test]
fn metadata_that_lies_is_refused_naming_the_column() {
    for (metadata, words) in [
        ("not json", "not JSON"),
        (r#"{"permutation":[0,1]}"#, "no `shape`"),
        (r#"{"shape":[2,3],"permutation":[0,0]}"#, "not an order"),
        (r#"{"shape":[2,3],"permutation":[0,5]}"#, "not an order"),
        (r#"{"shape":[2,3],"dim_names":["a"]}"#, "dim_names"),
        (r#"{"shape":[4,3]}"#, "stored as lists"),
        (r#"{"shape":[-1,3]}"#, "not a size"),
        (r#"{"shape":[0,18446744073709551615]}"#, "stored as lists"),
        (
            r#"{"shape":[4294967296,4294967296,4294967296]}"#,
            "stored as lists",
        ),
    ] {
        let err = column(metadata).to_dlpack().unwrap_err();
        let (kind, name, text) = arrow_error(err);
        assert_eq!(kind, ArrowErrorKind::Metadata, "{metadata}: {text}");
        assert_eq!(name, "t");
        assert!(text.contains(words), "{metadata}: {text}");
    }
}
