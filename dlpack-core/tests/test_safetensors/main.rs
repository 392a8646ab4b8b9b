//! Weights on disk: `TensorBatch::read_safetensors`, `map_safetensors` and
//! `write_safetensors`. Every dtype round-trips bit for bit, any layout is written in C
//! order, files interchange with the reference `safetensors` crate both ways, derived
//! models take read buffers without a copy, and every malformed file is a typed error
//! naming the file (and the tensor) that leaks nothing.
#![cfg(all(feature = "safetensors", feature = "ndarray", feature = "derive"))]

use dlpack_core::ffi::DLDataTypeCode;
use dlpack_core::{DataType, Device, Error, FromDLPack, ManagedTensor, TensorBatch, ToDLPack};
use ndarray::{Array0, Array1, Array2, ArrayD, IxDyn};

mod damaged;
mod dtypes;
mod layout;
mod malformed;
mod models;
mod writing;

fn folder() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// The bytes of a C-contiguous tensor (as written in a file).
fn raw_bytes(tensor: &ManagedTensor, len: usize) -> Vec<u8> {
    if len == 0 {
        return Vec::new();
    }
    // SAFETY: the tests' tensors are C-contiguous and hold `len` bytes from their first
    // element, alive while `tensor` is borrowed.
    unsafe { std::slice::from_raw_parts(tensor.data_ptr().cast::<u8>(), len) }.to_vec()
}

/// A C-contiguous tensor of `dtype` over `bytes` (any type, float8 and packed float4
/// included).
fn bytes_tensor(bytes: Vec<u8>, shape: &[i64], dtype: DataType) -> ManagedTensor {
    // SAFETY: `bytes` holds the elements of `shape` in C order (the callers give the
    // packed size for sub-byte types); the vector is the owner, exclusive, not `bool`.
    unsafe {
        ManagedTensor::from_owner(
            bytes,
            |b| b.as_mut_ptr().cast(),
            shape,
            None,
            dtype,
            Device::CPU,
            0,
        )
    }
    .unwrap()
}

/// Every dtype safetensors 0.8 writes: (name in the file, DLPack type, shape, bytes).
fn every_dtype() -> Vec<(&'static str, DataType, Vec<i64>, Vec<u8>)> {
    let float = |code, bits| DataType::new(code, bits, 1);
    let pattern = |n: usize| (0..n).map(|i| (i * 37 + 11) as u8).collect::<Vec<u8>>();
    let mut cases = vec![
        ("BOOL", DataType::BOOL, vec![5], vec![0, 1, 1, 0, 1]),
        ("U8", DataType::U8, vec![2, 3], pattern(6)),
        ("I8", DataType::I8, vec![6], pattern(6)),
        ("U16", DataType::U16, vec![3], pattern(6)),
        ("I16", DataType::I16, vec![3], pattern(6)),
        ("U32", DataType::U32, vec![2, 2], pattern(16)),
        ("I32", DataType::I32, vec![4], pattern(16)),
        ("U64", DataType::U64, vec![2], pattern(16)),
        ("I64", DataType::I64, vec![2], pattern(16)),
        ("F16", DataType::F16, vec![4], pattern(8)),
        ("BF16", DataType::BF16, vec![4], pattern(8)),
        ("F32", DataType::F32, vec![2, 2], pattern(16)),
        ("F64", DataType::F64, vec![2], pattern(16)),
        ("C64", DataType::C64, vec![2], pattern(16)),
        (
            "F8_E4M3",
            float(DLDataTypeCode::kDLFloat8_e4m3fn, 8),
            vec![7],
            pattern(7),
        ),
        (
            "F8_E5M2",
            float(DLDataTypeCode::kDLFloat8_e5m2, 8),
            vec![7],
            pattern(7),
        ),
        (
            "F8_E4M3FNUZ",
            float(DLDataTypeCode::kDLFloat8_e4m3fnuz, 8),
            vec![3],
            pattern(3),
        ),
        (
            "F8_E5M2FNUZ",
            float(DLDataTypeCode::kDLFloat8_e5m2fnuz, 8),
            vec![3],
            pattern(3),
        ),
        (
            "F8_E8M0",
            float(DLDataTypeCode::kDLFloat8_e8m0fnu, 8),
            vec![3],
            pattern(3),
        ),
        // Sub-byte types are packed: 4 float6 in 3 bytes, 6 float4 in 3 bytes.
        (
            "F6_E2M3",
            float(DLDataTypeCode::kDLFloat6_e2m3fn, 6),
            vec![4],
            pattern(3),
        ),
        (
            "F6_E3M2",
            float(DLDataTypeCode::kDLFloat6_e3m2fn, 6),
            vec![2, 2],
            pattern(3),
        ),
        (
            "F4",
            float(DLDataTypeCode::kDLFloat4_e2m1fn, 4),
            vec![6],
            pattern(3),
        ),
    ];
    // 0-d and empty tensors.
    cases.push(("F32", DataType::F32, vec![], pattern(4)));
    cases.push(("I64", DataType::I64, vec![0, 3], Vec::new()));
    cases
}

/// A batch of every dtype, named `"{index}.{dtype}"` (dots, as a `state_dict` has).
fn every_dtype_batch() -> TensorBatch {
    let mut batch = TensorBatch::new();
    for (i, (name, dtype, shape, bytes)) in every_dtype().into_iter().enumerate() {
        batch
            .insert(
                format!("layer{i}.{name}"),
                bytes_tensor(bytes, &shape, dtype),
            )
            .unwrap();
    }
    batch.metadata_mut().insert("format".into(), "pt".into());
    batch
        .metadata_mut()
        .insert("note".into(), "ünïcödé, \"quoted\"".into());
    batch
}

/// A derived model: saved, read back into owned fields without a copy (the field's
/// buffer is the one the read filled), mapped, changed, saved again.
#[derive(ToDLPack, FromDLPack, Debug, PartialEq)]
struct Linear {
    weight: Array2<f32>,
    bias: Array1<f32>,
}

#[derive(ToDLPack, FromDLPack, Debug, PartialEq)]
struct Model {
    fc1: Linear,
    fc2: Linear,
    scale: Array0<f64>,
    mask: ArrayD<bool>,
}

fn model() -> Model {
    let layer = |i: usize, o: usize, seed: f32| Linear {
        weight: Array2::from_shape_fn((o, i), |(r, c)| seed + (r * i + c) as f32),
        bias: Array1::from_shape_fn(o, |r| -seed - r as f32),
    };
    Model {
        fc1: layer(4, 8, 1.0),
        fc2: layer(8, 2, 100.0),
        scale: Array0::from_elem((), 0.25),
        mask: ArrayD::from_shape_fn(IxDyn(&[2, 3]), |i| (i[0] + i[1]) % 2 == 0),
    }
}

/// A file of `header` (its length prefixed) followed by `data`.
fn file_with(header: &str, data: &[u8]) -> Vec<u8> {
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(data);
    file
}

fn invalid_reason(err: &Error) -> (Option<String>, String) {
    match err {
        Error::InvalidFile { tensor, reason, .. } => (tensor.clone(), reason.clone()),
        other => panic!("expected an invalid file, got {other:?}"),
    }
}
