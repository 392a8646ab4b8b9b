//! `TensorFields`: a derived struct's tensors by reference, by name (what a model shared
//! with Python reads and replaces), and the `ArcArray` leaf's shares: writable, shared,
//! the field's own memory, alive after the field is gone (Miri and ASan check the reads),
//! and never a mutable alias of what the field still reads (copy-on-write).
#![cfg(all(feature = "derive", feature = "ndarray"))]

use std::collections::BTreeMap;

use dlpack_core::implement::{Found, TensorField, TensorFields};
use dlpack_core::{
    DataType, Error, FromDLPack, ManagedTensor, Parameter, Parameter1, Parameter2, ToDLPack,
};
use ndarray::{ArcArray1, ArcArray2, Array1, Array2, Ix1, Ix2, arr1, arr2};

#[derive(ToDLPack, FromDLPack)]
struct Linear {
    weight: Parameter2<f32>,
    bias: Parameter1<f32>,
}

#[derive(ToDLPack, FromDLPack)]
struct Norm {
    scale: Parameter1<f32>,
}

/// Every kind of field: nested, renamed, a `Vec`, a map, an `Option`, a `Box`, flattened
/// and skipped (left out of `TensorFields`).
#[derive(ToDLPack, FromDLPack)]
struct Net {
    #[dlpack(rename = "embed")]
    embedding: Parameter2<f32>,
    layers: Vec<Linear>,
    heads: BTreeMap<String, Linear>,
    extra: Option<Linear>,
    boxed: Box<Norm>,
    #[dlpack(flatten)]
    norm: Norm,
    #[dlpack(skip)]
    steps: u64,
}

/// A generic tuple struct.
#[derive(ToDLPack, FromDLPack)]
struct Pair<T>(T, T);

/// A struct whose fields are not shareable still derives (its `TensorFields` does not
/// apply).
#[derive(ToDLPack, FromDLPack)]
#[allow(dead_code)]
struct Owned {
    weight: Array2<f32>,
}

fn linear(value: f32) -> Linear {
    Linear {
        weight: Parameter::from(Array2::from_elem((2, 3), value)),
        bias: Parameter::from(Array1::from_elem(2, value)),
    }
}

fn net() -> Net {
    Net {
        embedding: Parameter::from(Array2::zeros((4, 2))),
        layers: vec![linear(1.0), linear(2.0)],
        heads: [("q".to_owned(), linear(3.0))].into(),
        extra: None,
        boxed: Box::new(Norm {
            scale: Parameter::from(Array1::ones(2)),
        }),
        norm: Norm {
            scale: Parameter::from(Array1::ones(3)),
        },
        steps: 7,
    }
}

fn names<T: TensorFields>(value: &T) -> Vec<(String, DataType, Vec<usize>)> {
    let mut out = Vec::new();
    let mut name = String::new();
    value.visit_tensors(&mut name, &mut |n, field| {
        out.push((n.to_owned(), field.dtype(), field.shape().to_vec()));
    });
    assert!(name.is_empty());
    out
}

fn tensor<'a, T: TensorFields>(value: &'a T, path: &str) -> &'a dyn TensorField {
    match value.find_tensor(path) {
        Found::Tensor(field) => field,
        _ => panic!("{path} is not a tensor"),
    }
}

#[test]
fn names_follow_the_export() {
    let net = net();
    let listed: Vec<String> = names(&net).into_iter().map(|(n, ..)| n).collect();
    let exported: Vec<String> = {
        let batch = net.to_dlpack().unwrap();
        batch.names().map(str::to_owned).collect()
    };
    assert_eq!(listed, exported);
    assert_eq!(listed[0], "embed");
    assert!(listed.contains(&"heads.q.bias".to_owned()));
    assert!(listed.contains(&"boxed.scale".to_owned()));
    assert_eq!(listed.last().unwrap(), "scale");
    let pair = Pair(
        Parameter1::from(Array1::<f32>::zeros(1)),
        Parameter1::from(Array1::zeros(2)),
    );
    let listed: Vec<String> = names(&pair).into_iter().map(|(n, ..)| n).collect();
    assert_eq!(listed, ["0", "1"]);
}

#[test]
fn paths_find_tensors_and_groups() {
    let net = net();
    assert!(matches!(net.find_tensor(""), Found::Group));
    assert!(matches!(net.find_tensor("layers"), Found::Group));
    assert!(matches!(net.find_tensor("layers.1"), Found::Group));
    assert_eq!(tensor(&net, "layers.1.weight").shape(), [2, 3]);
    assert_eq!(tensor(&net, "heads.q.bias").dtype(), DataType::F32);
    assert_eq!(tensor(&net, "embed").shape(), [4, 2]);
    assert_eq!(tensor(&net, "scale").shape(), [3]); // flattened
    assert_eq!(tensor(&net, "boxed.scale").shape(), [2]);
    for missing in [
        "embedding", // the Rust name, not the tensor's
        "layers.2.weight",
        "layers.01.weight",
        "layers.-1.weight",
        "layers.x",
        "extra.weight", // None
        "steps",        // skipped
        "embed.x",
        "layers.1.weight.0",
        "heads.k",
        "layers..weight",
    ] {
        assert!(
            matches!(net.find_tensor(missing), Found::Nothing),
            "{missing}"
        );
    }
    let mut net = net;
    assert!(net.find_tensor_mut("layers.1.bias").is_some());
    assert!(net.find_tensor_mut("layers.1").is_none());
    assert!(net.find_tensor_mut("").is_none());
    assert!(net.find_tensor_mut("scale").is_some());
}

#[test]
fn a_share_is_the_fields_memory_writable_and_shared() {
    let net = net();
    let field = tensor(&net, "layers.0.weight");
    let share = field.share().unwrap();
    assert_eq!(
        share.data().cast::<f32>().cast_const(),
        net.layers[0].weight.view().as_ptr()
    );
    assert!(!share.is_exclusive());
    assert!(!share.is_read_only());
    assert_eq!(share.shape(), [2, 3]);
    // Shared: this crate gives no mutable view through it.
    let mut share = share;
    assert!(matches!(
        share.as_array_mut::<f32, Ix2>(),
        Err(Error::NotExclusive)
    ));
    assert_eq!(share.as_array::<f32, Ix2>().unwrap()[[1, 2]], 1.0);
}

#[test]
fn a_share_outlives_the_field_and_rust_writes_copy_first() {
    let mut net = net();
    let share = tensor(&net, "layers.1.weight").share().unwrap();
    let ptr = net.layers[1].weight.view().as_ptr();
    assert!(net.layers[1].weight.is_shared());
    // A Rust write while the share lives: a fresh buffer for the field.
    net.layers[1].weight.view_mut().mapv_inplace(|v| v + 1.0);
    assert_ne!(net.layers[1].weight.view().as_ptr(), ptr);
    assert_eq!(share.as_array::<f32, Ix2>().unwrap()[[0, 0]], 2.0);
    // The field replaced, the struct dropped: the share still reads its elements.
    net.layers[1].weight = Parameter::from(Array2::zeros((2, 3)));
    drop(net);
    let view = share.as_array::<f32, Ix2>().unwrap();
    assert!(view.iter().all(|&v| v == 2.0));
    // No `ArcArray` (nor `Array`) handle of a buffer Python may write comes out of it:
    // taking it back as an array copies.
    let share = share.into_owner::<ArcArray2<f32>>().unwrap_err();
    let share = share.into_owner::<Array2<f32>>().unwrap_err();
    let data = share.data().cast::<f32>().cast_const();
    let back = Array2::<f32>::from_dlpack(share).unwrap();
    assert_ne!(back.as_ptr(), data);
    assert!(back.iter().all(|&v| v == 2.0));
}

#[test]
fn without_a_share_rust_writes_in_place() {
    let mut net = net();
    let ptr = net.layers[0].bias.view().as_ptr();
    drop(tensor(&net, "layers.0.bias").share().unwrap());
    net.layers[0].bias.view_mut().mapv_inplace(|v| v * 3.0);
    assert_eq!(net.layers[0].bias.view().as_ptr(), ptr);
    assert_eq!(net.layers[0].bias.view(), arr1(&[3.0, 3.0]));
}

#[test]
fn replace_checks_and_copies_a_foreign_tensor() {
    let mut net = net();
    let field = net.find_tensor_mut("layers.0.weight").unwrap();
    let err = field
        .replace(Array2::<f64>::zeros((2, 3)).to_dlpack().unwrap())
        .unwrap_err();
    assert!(matches!(err, Error::DtypeMismatch { .. }), "{err}");
    let err = field
        .replace(Array1::<f32>::zeros(6).to_dlpack().unwrap())
        .unwrap_err();
    assert!(matches!(err, Error::NdimMismatch { .. }), "{err}");
    let err = field
        .replace(Array2::<f32>::zeros((3, 2)).to_dlpack().unwrap())
        .unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
    // A tensor this crate cannot take back as an array (column-major): one copy, and the
    // tensor's deleter runs once (the owner is dropped with it; Miri and ASan see a leak).
    let foreign = ManagedTensor::from_buffer(
        (0..6).map(|v| v as f32).collect::<Vec<_>>(),
        0,
        &[2, 3],
        &[1, 2],
    )
    .unwrap()
    .into_shared();
    let data = foreign.data().cast::<f32>().cast_const();
    field.replace(foreign).unwrap();
    assert_eq!(
        net.layers[0].weight.view(),
        arr2(&[[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]])
    );
    assert_ne!(net.layers[0].weight.view().as_ptr(), data);
    assert!(!net.layers[0].weight.is_shared());
    assert_eq!(net.steps, 7);
}

#[test]
fn tied_fields_share_one_buffer_and_a_read_only_share_is_copied() {
    let mut net = net();
    let share = tensor(&net, "heads.q.weight").share().unwrap();
    let ptr = share.data().cast::<f32>().cast_const();
    net.find_tensor_mut("layers.0.weight")
        .unwrap()
        .replace(share)
        .unwrap();
    assert_eq!(net.layers[0].weight.view().as_ptr(), ptr);
    assert_eq!(net.heads["q"].weight.view().as_ptr(), ptr);
    // One side writes: it copies first, the other keeps the buffer.
    net.layers[0].weight.view_mut().mapv_inplace(|v| v + 1.0);
    assert_ne!(net.layers[0].weight.view().as_ptr(), ptr);
    assert_eq!(net.heads["q"].weight.view().as_ptr(), ptr);
    // A READ_ONLY export of an `ArcArray` promised its holders nobody writes it: copied.
    let frozen = ArcArray1::from_elem(2, 9.0f32);
    let keep = frozen.clone();
    let read_only = frozen.to_dlpack().unwrap();
    assert!(read_only.is_read_only());
    let field = net.find_tensor_mut("layers.1.bias").unwrap();
    assert!(!field.tie(&read_only));
    field.replace(read_only).unwrap();
    assert_ne!(net.layers[1].bias.view().as_ptr(), keep.as_ptr());
    assert_eq!(net.layers[1].bias.view(), arr1(&[9.0, 9.0]));
    // A share of another shape is not tied.
    let other = tensor(&net, "embed").share().unwrap();
    assert!(!net.find_tensor_mut("layers.1.weight").unwrap().tie(&other));
    let _ = other.as_array::<f32, Ix2>().unwrap();
    let _ = Ix1(0);
}

#[test]
fn a_bool_field_is_handed_out_as_a_copy() {
    // Python could store bytes that are no `bool` into a shared buffer.
    let mask = Parameter1::from(Array1::from_elem(3, true));
    let tensor = mask.share().unwrap();
    assert_ne!(
        tensor.data().cast::<bool>().cast_const(),
        mask.view().as_ptr()
    );
    assert!(tensor.is_exclusive());
    assert!(!mask.is_shared());
    assert!(tensor.as_array::<bool, Ix1>().unwrap().iter().all(|&b| b));
}

#[test]
fn a_clone_is_a_value_of_its_own() {
    let weight = Parameter1::from(Array1::from_elem(2, 1.0f32));
    let share = weight.share().unwrap();
    let copy = weight.clone();
    assert_ne!(copy.view().as_ptr(), weight.view().as_ptr());
    assert!(!copy.is_shared());
    drop(share);
    assert!(!weight.is_shared());
}

/// A public struct whose field's type is private: its derived bounds name a type more
/// private than the impl, which compiles without a warning.
#[derive(ToDLPack, FromDLPack)]
pub struct Public {
    inner: Private,
}

#[derive(ToDLPack, FromDLPack)]
struct Private {
    weight: Parameter1<f32>,
}

#[test]
fn a_public_struct_with_private_fields_is_shareable() {
    let value = Public {
        inner: Private {
            weight: Parameter1::from(Array1::zeros(2)),
        },
    };
    assert_eq!(names(&value)[0].0, "inner.weight");
}
