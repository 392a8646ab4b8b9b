//! The operations of `exchange.rs`, each in its own never-inlined function, for
//! instruction counts under `valgrind --tool=callgrind` (deterministic, unlike timings on
//! a shared machine). `scripts/bench-instructions` runs it and prints the table.
//!
//! Usage: `instructions <operation> <iterations>`; with no arguments it lists the
//! operations. Inputs are made and outputs dropped outside the measured functions,
//! whose names start with `measured_`.

use std::hint::black_box;

use dlpack_core::{FromDLPack, ManagedTensor, ToDLPack};
use dlpark::ffi::DLManagedTensorVersioned;
use dlpark::{TryFromDlpack, versioned};
use ndarray::{Array1, Array2, ArrayD, Ix2, IxDyn};

const N: usize = 10;

#[inline(never)]
fn measured_export_ours<A: ToDLPack<Output = ManagedTensor>>(array: A) -> ManagedTensor {
    array.to_dlpack().unwrap()
}

#[inline(never)]
fn measured_export_dlpark<D: ndarray::Dimension>(
    array: ndarray::Array<f32, D>,
) -> versioned::Dlpack {
    export_dlpark(array)
}

fn export_dlpark<D: ndarray::Dimension>(array: ndarray::Array<f32, D>) -> versioned::Dlpack {
    let init: dlpark::allocation::dynamic::Initialized<DLManagedTensorVersioned> =
        Box::new(array).try_into().unwrap();
    // SAFETY: the allocation was initialised from an owned array by dlpark itself.
    unsafe { init.finish() }
}

#[inline(never)]
fn measured_import_ours_ix2(tensor: &ManagedTensor) -> usize {
    black_box(tensor.as_array::<f32, Ix2>().unwrap()).len()
}

#[inline(never)]
fn measured_import_ours_ixdyn(tensor: &ManagedTensor) -> usize {
    black_box(tensor.as_array::<f32, IxDyn>().unwrap()).len()
}

#[inline(never)]
fn measured_import_dlpark(tensor: &versioned::Dlpack) -> usize {
    import_dlpark(tensor)
}

fn import_dlpark(tensor: &versioned::Dlpack) -> usize {
    // SAFETY: the tensor is a valid dlpark export of an f32 array that outlives the view.
    black_box(unsafe { ndarray::ArrayViewD::<f32>::try_from_dlpack(tensor, ()) }.unwrap()).len()
}

#[inline(never)]
fn measured_drop_ours(tensor: ManagedTensor) {
    drop(tensor);
}

#[inline(never)]
fn measured_drop_dlpark(tensor: versioned::Dlpack) {
    drop(tensor);
}

#[inline(never)]
fn measured_round_trip_ours(array: Array2<f32>) -> Array2<f32> {
    Array2::<f32>::from_dlpack(array.to_dlpack().unwrap()).unwrap()
}

#[inline(never)]
fn measured_round_trip_dlpark(array: Array2<f32>) -> versioned::Dlpack {
    // (Nested `measured_` functions would switch callgrind's collection off.)
    let tensor = export_dlpark(array);
    black_box(import_dlpark(&tensor));
    tensor
}

/// An Arrow column (rows of `N / 2` float32) as an ndarray view: this crate's
/// `arrow::as_array`.
#[cfg(feature = "arrow")]
#[inline(never)]
fn measured_arrow_view_ours(array: &arrow_array::FixedSizeListArray) -> usize {
    black_box(dlpack_core::arrow::as_array::<f32, Ix2>(array).unwrap()).len()
}

/// The same view written by hand, as arrow-rs users do: the child's values as a slice,
/// and `ArrayView::from_shape` (no null check, no type check but the downcast).
#[cfg(feature = "arrow")]
#[inline(never)]
fn measured_arrow_view_hand(array: &arrow_array::FixedSizeListArray) -> usize {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    let values = array
        .values()
        .as_primitive::<arrow_array::types::Float32Type>()
        .values();
    let shape = (array.len(), array.value_length() as usize);
    black_box(ndarray::ArrayView2::from_shape(shape, &values[..]).unwrap()).len()
}

/// The column through a tensor: `to_dlpack` (a clone of the array's handles), then
/// `as_array`, then the tensor dropped.
#[cfg(feature = "arrow")]
#[inline(never)]
fn measured_arrow_tensor_ours(array: &arrow_array::FixedSizeListArray) -> usize {
    let tensor = array.clone().to_dlpack().unwrap();
    black_box(tensor.as_array::<f32, Ix2>().unwrap()).len()
}

#[cfg(feature = "arrow")]
fn arrow_column() -> arrow_array::FixedSizeListArray {
    let values = arrow_array::Float32Array::from_iter_values((0..N).map(|i| i as f32));
    let item = std::sync::Arc::new(arrow_schema::Field::new(
        "item",
        arrow_schema::DataType::Float32,
        false,
    ));
    arrow_array::FixedSizeListArray::try_new(
        item,
        (N / 2) as i32,
        std::sync::Arc::new(values),
        None,
    )
    .unwrap()
}

const OPERATIONS: &[&str] = &[
    "export-array1-ours",
    "export-array1-dlpark",
    "export-array2-ours",
    "export-array2-dlpark",
    "export-arrayd-ours",
    "export-arrayd-dlpark",
    "import-ix2-ours",
    "import-ixdyn-ours",
    "import-ixdyn-dlpark",
    "drop-ours",
    "drop-dlpark",
    "round-trip-ours",
    "round-trip-dlpark",
    "arrow-view-ours",
    "arrow-view-hand",
    "arrow-tensor-ours",
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [op, iterations] = args.as_slice() else {
        // `cargo bench` runs every bench target with `--bench`: nothing to measure then.
        println!("{}", OPERATIONS.join("\n"));
        return;
    };
    let iterations: usize = iterations.parse().expect("iterations: a number");
    let a1 = || Array1::<f32>::zeros(N);
    let a2 = || Array2::<f32>::zeros((2, N / 2));
    let ad = || ArrayD::<f32>::zeros(IxDyn(&[2, 5, N / 10]));
    macro_rules! each {
        ($make:expr, $op:expr) => {{
            let inputs: Vec<_> = (0..iterations).map(|_| $make).collect();
            let outputs: Vec<_> = inputs.into_iter().map($op).collect();
            drop(black_box(outputs));
        }};
    }
    let ours = a2().to_dlpack().unwrap();
    let theirs = export_dlpark(a2());
    #[cfg(feature = "arrow")]
    let column = arrow_column();
    match op.as_str() {
        "export-array1-ours" => each!(a1(), measured_export_ours),
        "export-array1-dlpark" => each!(a1(), measured_export_dlpark),
        "export-array2-ours" => each!(a2(), measured_export_ours),
        "export-array2-dlpark" => each!(a2(), measured_export_dlpark),
        "export-arrayd-ours" => each!(ad(), measured_export_ours),
        "export-arrayd-dlpark" => each!(ad(), measured_export_dlpark),
        "import-ix2-ours" => each!(&ours, measured_import_ours_ix2),
        "import-ixdyn-ours" => each!(&ours, measured_import_ours_ixdyn),
        "import-ixdyn-dlpark" => each!(&theirs, measured_import_dlpark),
        "drop-ours" => each!(a2().to_dlpack().unwrap(), measured_drop_ours),
        "drop-dlpark" => each!(export_dlpark(a2()), measured_drop_dlpark),
        "round-trip-ours" => each!(a2(), measured_round_trip_ours),
        "round-trip-dlpark" => each!(a2(), measured_round_trip_dlpark),
        #[cfg(feature = "arrow")]
        "arrow-view-ours" => each!(&column, measured_arrow_view_ours),
        #[cfg(feature = "arrow")]
        "arrow-view-hand" => each!(&column, measured_arrow_view_hand),
        #[cfg(feature = "arrow")]
        "arrow-tensor-ours" => each!(&column, measured_arrow_tensor_ours),
        other => panic!("unknown operation {other}; run without arguments for the list"),
    }
}
