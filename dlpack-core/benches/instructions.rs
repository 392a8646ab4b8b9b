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
        other => panic!("unknown operation {other}; run without arguments for the list"),
    }
}
