//! Weights on disk: `TensorBatch::read_safetensors`, `map_safetensors` and
//! `write_safetensors`. Every dtype round-trips bit for bit, any layout is written in C
//! order, files interchange with the reference `safetensors` crate both ways, derived
//! models take read buffers without a copy, and every malformed file is a typed error
//! naming the file (and the tensor) that leaks nothing.
#![cfg(all(feature = "safetensors", feature = "ndarray", feature = "derive"))]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use dlpack_core::ffi::{DLDataTypeCode, DLDeviceType};
use dlpack_core::{DataType, Device, Error, FromDLPack, ManagedTensor, TensorBatch, ToDLPack};
use ndarray::{Array0, Array1, Array2, ArrayD, Ix1, Ix2, IxDyn};
use safetensors::tensor::{SafeTensors, TensorView};

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

fn assert_same(batch: &TensorBatch, back: &TensorBatch, how: &str) {
    assert_eq!(back.len(), batch.len(), "{how}");
    assert_eq!(back.metadata(), batch.metadata(), "{how}: metadata");
    for ((name, expected), (_, _, _, bytes)) in batch.iter().zip(every_dtype()) {
        let got = back
            .get(name)
            .unwrap_or_else(|| panic!("{how}: {name} is missing"));
        assert_eq!(got.dtype(), expected.dtype(), "{how}: {name}");
        assert_eq!(got.shape(), expected.shape(), "{how}: {name}");
        assert_eq!(
            raw_bytes(got, bytes.len()),
            bytes,
            "{how}: {name} bit for bit"
        );
        assert_eq!(got.device(), Device::CPU);
    }
}

#[test]
#[cfg_attr(miri, ignore = "maps a file")]
fn every_dtype_round_trips_bit_for_bit() {
    let dir = folder();
    let path = dir.path().join("every.safetensors");
    let batch = every_dtype_batch();
    batch.write_safetensors(&path).unwrap();
    let read = TensorBatch::read_safetensors(&path).unwrap();
    assert_same(&batch, &read, "read");
    // SAFETY: the file lives in a private folder that nothing else touches.
    let mapped = unsafe { TensorBatch::map_safetensors(&path) }.unwrap();
    assert_same(&batch, &mapped, "mapped");
    // Written again from the mapped batch: the same file.
    let again = dir.path().join("again.safetensors");
    mapped.write_safetensors(&again).unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        std::fs::read(&again).unwrap()
    );
}

#[test]
fn every_dtype_is_read_without_a_mapping() {
    let dir = folder();
    let path = dir.path().join("every.safetensors");
    let batch = every_dtype_batch();
    batch.write_safetensors(&path).unwrap();
    assert_same(
        &batch,
        &TensorBatch::read_safetensors(&path).unwrap(),
        "read",
    );
}

/// Files of the reference crate load here, and ours load there, bit for bit, names with
/// dots and metadata included.
#[test]
fn files_interchange_with_the_reference_crate() {
    let dir = folder();
    let theirs = dir.path().join("theirs.safetensors");
    let f32s: Vec<u8> = (0..12u32)
        .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
        .collect();
    let i64s: Vec<u8> = (0..3i64).flat_map(|i| (-i).to_le_bytes()).collect();
    let bools = vec![1u8, 0, 1];
    let views = vec![
        (
            "encoder.layer.0.weight",
            TensorView::new(safetensors::Dtype::F32, vec![3, 4], &f32s).unwrap(),
        ),
        (
            "encoder.steps",
            TensorView::new(safetensors::Dtype::I64, vec![3], &i64s).unwrap(),
        ),
        (
            "mask",
            TensorView::new(safetensors::Dtype::BOOL, vec![3], &bools).unwrap(),
        ),
        (
            "empty",
            TensorView::new(safetensors::Dtype::F32, vec![0, 2], &[]).unwrap(),
        ),
    ];
    let meta = HashMap::from([("format".to_owned(), "pt".to_owned())]);
    safetensors::serialize_to_file(views.clone(), Some(meta.clone()), &theirs).unwrap();

    let read = TensorBatch::read_safetensors(&theirs).unwrap();
    assert_eq!(read.len(), 4);
    assert_eq!(
        read.metadata().get("format").map(String::as_str),
        Some("pt")
    );
    let w = read
        .get("encoder.layer.0.weight")
        .unwrap()
        .as_array::<f32, Ix2>()
        .unwrap();
    assert_eq!(
        w,
        Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f32 * 0.5)
    );
    let s = read
        .get("encoder.steps")
        .unwrap()
        .as_array::<i64, Ix1>()
        .unwrap();
    assert_eq!(s.to_vec(), [0, -1, -2]);
    let m = read.get("mask").unwrap().as_array::<bool, Ix1>().unwrap();
    assert_eq!(m.to_vec(), [true, false, true]);
    assert_eq!(read.get("empty").unwrap().shape(), [0, 2]);

    // Ours, read by theirs.
    let ours = dir.path().join("ours.safetensors");
    read.write_safetensors(&ours).unwrap();
    let buffer = std::fs::read(&ours).unwrap();
    let loaded = SafeTensors::deserialize(&buffer).unwrap();
    let (_, metadata) = SafeTensors::read_metadata(&buffer).unwrap();
    assert_eq!(metadata.metadata().as_ref(), Some(&meta));
    for (name, view) in &views {
        let got = loaded.tensor(name).unwrap();
        assert_eq!(got.dtype(), view.dtype(), "{name}");
        assert_eq!(got.shape(), view.shape(), "{name}");
        assert_eq!(got.data(), view.data(), "{name}");
    }
}

/// Strided, negative and broadcast layouts are written in C order.
#[test]
fn any_layout_is_written_in_c_order() {
    let dir = folder();
    let path = dir.path().join("layouts.safetensors");
    let values: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let mut batch = TensorBatch::new();
    // Transposed (4 x 3 over a 3 x 4 buffer), reversed, every other, broadcast.
    batch
        .insert(
            "t",
            ManagedTensor::from_buffer(values.clone(), 0, &[4, 3], &[1, 4]).unwrap(),
        )
        .unwrap();
    batch
        .insert(
            "rev",
            ManagedTensor::from_buffer(values.clone(), 11, &[12], &[-1]).unwrap(),
        )
        .unwrap();
    batch
        .insert(
            "step",
            ManagedTensor::from_buffer(values.clone(), 1, &[3, 2], &[4, 2]).unwrap(),
        )
        .unwrap();
    batch
        .insert(
            "bcast",
            ManagedTensor::from_buffer(values.clone(), 2, &[3, 2], &[0, 1]).unwrap(),
        )
        .unwrap();
    batch.write_safetensors(&path).unwrap();
    let read = TensorBatch::read_safetensors(&path).unwrap();
    let get = |name: &str| {
        read.get(name)
            .unwrap()
            .as_array::<f32, IxDyn>()
            .unwrap()
            .to_owned()
    };
    for (name, tensor) in batch.iter() {
        let expected = tensor.as_array::<f32, IxDyn>().unwrap().to_owned();
        assert_eq!(get(name), expected, "{name}");
        assert!(read.get(name).unwrap().strides().is_some());
    }
    assert_eq!(
        get("bcast").into_raw_vec_and_offset().0,
        [2.0, 3.0, 2.0, 3.0, 2.0, 3.0]
    );
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

#[test]
fn a_derived_model_reads_into_its_fields_without_a_copy() {
    let dir = folder();
    let path = dir.path().join("model.safetensors");
    model()
        .to_dlpack()
        .unwrap()
        .write_safetensors(&path)
        .unwrap();
    let batch = TensorBatch::read_safetensors(&path).unwrap();
    let weight = batch
        .get("fc1.weight")
        .unwrap()
        .data_ptr()
        .cast::<f32>()
        .cast_const();
    let mask = batch
        .get("mask")
        .unwrap()
        .data_ptr()
        .cast::<bool>()
        .cast_const();
    let scale = batch
        .get("scale")
        .unwrap()
        .data_ptr()
        .cast::<f64>()
        .cast_const();
    let loaded = Model::from_dlpack(batch).unwrap();
    assert_eq!(loaded, model());
    assert_eq!(
        loaded.fc1.weight.as_ptr(),
        weight,
        "the read buffer became the field"
    );
    assert_eq!(loaded.mask.as_ptr(), mask);
    assert_eq!(loaded.scale.as_ptr(), scale);
}

#[test]
#[cfg_attr(miri, ignore = "maps a file")]
fn a_mapped_model_is_exclusive_writable_and_never_writes_the_file() {
    let dir = folder();
    let path = dir.path().join("model.safetensors");
    model()
        .to_dlpack()
        .unwrap()
        .write_safetensors(&path)
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    // SAFETY: the file lives in a private folder that nothing else touches.
    let mut batch = unsafe { TensorBatch::map_safetensors(&path) }.unwrap();
    // Every tensor is a view into one mapping: consecutive in the file's order.
    let w = batch.get("fc1.weight").unwrap();
    assert!(w.is_exclusive() && !w.is_read_only() && !w.is_copied());
    let mut view = batch
        .get_mut("fc1.bias")
        .unwrap()
        .as_array_mut::<f32, Ix1>()
        .unwrap();
    view[0] = 42.0;
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file is untouched"
    );
    let loaded = Model::from_dlpack(batch).unwrap();
    assert_eq!(loaded.fc1.bias[0], 42.0);
    assert_eq!(loaded.fc2, model().fc2);
}

#[test]
#[cfg_attr(miri, ignore = "maps a file")]
fn mapping_takes_the_pointers_of_the_file_in_order() {
    let dir = folder();
    let path = dir.path().join("model.safetensors");
    model()
        .to_dlpack()
        .unwrap()
        .write_safetensors(&path)
        .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let (n, metadata) = SafeTensors::read_metadata(&bytes).unwrap();
    // SAFETY: as above.
    let batch = unsafe { TensorBatch::map_safetensors(&path) }.unwrap();
    // Every tensor lies at its offset from one base: the start of the data section.
    let bases: Vec<isize> = batch
        .iter()
        .map(|(name, tensor)| {
            tensor.data_ptr() as isize - metadata.info(name).unwrap().data_offsets.0 as isize
        })
        .collect();
    assert!(bases.iter().all(|&b| b == bases[0]), "{bases:?}");
    assert_eq!(
        bases[0] as usize % 8,
        0,
        "the data section starts 8-aligned"
    );
    let _ = n;
}

/// A header whose length is not a multiple of 8 (another writer's) leaves an `f32`
/// tensor misaligned: the mapping copies it once, flagged `IS_COPIED`.
#[test]
#[cfg_attr(miri, ignore = "maps a file")]
fn a_misaligned_tensor_is_copied_once() {
    let dir = folder();
    let path = dir.path().join("misaligned.safetensors");
    let header = br#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    file.push(7);
    file.extend_from_slice(&1.5f32.to_le_bytes());
    file.extend_from_slice(&(-2.0f32).to_le_bytes());
    std::fs::write(&path, &file).unwrap();
    // SAFETY: as above.
    let mapped = unsafe { TensorBatch::map_safetensors(&path) }.unwrap();
    let b = mapped.get("b").unwrap();
    assert!(b.is_copied());
    assert_eq!(b.as_array::<f32, Ix1>().unwrap().to_vec(), [1.5, -2.0]);
    assert!(!mapped.get("a").unwrap().is_copied());
    let read = TensorBatch::read_safetensors(&path).unwrap();
    assert_eq!(
        read.get("b")
            .unwrap()
            .as_array::<f32, Ix1>()
            .unwrap()
            .to_vec(),
        [1.5, -2.0]
    );
}

#[test]
fn tensors_that_cannot_be_written_are_errors_and_leave_no_file() {
    let dir = folder();
    let path = dir.path().join("refused.safetensors");
    type Expected = fn(&Error) -> bool;
    let cases: Vec<(&str, ManagedTensor, Expected)> = vec![
        ("gpu", cuda_tensor(), |e| {
            matches!(e, Error::UnsupportedDevice { .. })
        }),
        (
            "wide",
            bytes_tensor(vec![0; 16], &[1], DataType::C128),
            |e| matches!(e, Error::UnsupportedDtype { .. }),
        ),
        (
            "vector",
            bytes_tensor(
                vec![0; 16],
                &[2],
                DataType::new(DLDataTypeCode::kDLFloat, 32, 2),
            ),
            |e| matches!(e, Error::UnsupportedDtype { .. }),
        ),
        (
            "__metadata__",
            bytes_tensor(vec![0; 4], &[1], DataType::F32),
            |e| matches!(e, Error::InvalidName { .. }),
        ),
    ];
    for (name, tensor, expected) in cases {
        let mut batch = TensorBatch::new();
        batch
            .insert("fine", bytes_tensor(vec![1; 4], &[4], DataType::U8))
            .unwrap();
        batch.insert(name, tensor).unwrap();
        let err = batch.write_safetensors(&path).unwrap_err();
        match &err {
            Error::Tensor { name: named, error } => {
                assert_eq!(named, name);
                assert!(expected(error), "{name}: {err}");
            }
            other => panic!("{name}: {other}"),
        }
        assert!(!path.exists());
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no temporary file left"
    );
    // A folder that does not exist: the I/O error names it.
    let nowhere = dir.path().join("missing").join("x.safetensors");
    let err = every_dtype_batch().write_safetensors(&nowhere).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, kind: std::io::ErrorKind::NotFound, .. } if path.ends_with("missing")),
        "{err}"
    );
}

/// An empty CUDA tensor: an honest header on any device, since it has no data.
fn cuda_tensor() -> ManagedTensor {
    // SAFETY: no elements, so no memory is described.
    unsafe {
        ManagedTensor::from_owner(
            (),
            |_| std::ptr::null_mut(),
            &[0],
            None,
            DataType::F32,
            Device::new(DLDeviceType::kDLCUDA, 0),
            0,
        )
    }
    .unwrap()
}

#[test]
fn a_save_replaces_a_file_only_when_complete() {
    let dir = folder();
    let path = dir.path().join("model.safetensors");
    model()
        .to_dlpack()
        .unwrap()
        .write_safetensors(&path)
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    let mut batch = TensorBatch::new();
    batch
        .insert("ok", bytes_tensor(vec![1; 4], &[4], DataType::U8))
        .unwrap();
    batch.insert("gpu", cuda_tensor()).unwrap();
    assert!(batch.write_safetensors(&path).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

// ---------------------------------------------------------------------------------------
// Hostile files.
// ---------------------------------------------------------------------------------------

/// A file of `header` (its length prefixed) followed by `data`.
fn file_with(header: &str, data: &[u8]) -> Vec<u8> {
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(data);
    file
}

/// A file whose header holds a byte that is not UTF-8.
fn not_utf8() -> Vec<u8> {
    let header = b"{\"a\":\xff}";
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    file
}

/// Reads (and, outside Miri, maps) `bytes` as a file: both must fail alike, with an
/// error naming the file; returns the read's error.
fn refused(bytes: &[u8]) -> Error {
    let dir = folder();
    let path = dir.path().join("hostile.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let err = TensorBatch::read_safetensors(&path).unwrap_err();
    if !cfg!(miri) {
        // SAFETY: the file lives in a private folder that nothing else touches.
        let mapped = unsafe { TensorBatch::map_safetensors(&path) }.unwrap_err();
        assert_eq!(mapped.to_string(), err.to_string());
    }
    let text = err.to_string();
    assert!(text.contains("hostile.safetensors"), "{text}");
    err
}

fn invalid_reason(err: &Error) -> (Option<String>, String) {
    match err {
        Error::InvalidFile { tensor, reason, .. } => (tensor.clone(), reason.clone()),
        other => panic!("expected an invalid file, got {other:?}"),
    }
}

#[test]
fn malformed_files_are_typed_errors() {
    let f32_at = |begin: usize, end: usize| {
        format!(
            r#"{{"dtype":"F32","shape":[{}],"data_offsets":[{begin},{end}]}}"#,
            (end - begin) / 4
        )
    };
    let cases: Vec<(&str, Vec<u8>, Option<&str>, &str)> = vec![
        ("empty file", vec![], None, "fewer than the 8"),
        ("short file", vec![1, 2, 3], None, "fewer than the 8"),
        (
            "length past the end",
            100u64.to_le_bytes().to_vec(),
            None,
            "past the end",
        ),
        (
            "length above the limit",
            (200_000_000u64).to_le_bytes().to_vec(),
            None,
            "limit",
        ),
        ("not UTF-8", not_utf8(), None, "not UTF-8"),
        (
            "not JSON",
            file_with("{\"a\": [1, 2", &[]),
            None,
            "not a valid JSON",
        ),
        (
            "not an object",
            file_with("[1, 2]", &[]),
            None,
            "not a valid JSON",
        ),
        (
            "trailing text",
            file_with("{} x", &[]),
            None,
            "not a valid JSON",
        ),
        (
            "duplicate name",
            file_with(
                &format!(r#"{{"a":{},"a":{}}}"#, f32_at(0, 4), f32_at(4, 8)),
                &[0; 8],
            ),
            None,
            "appears twice",
        ),
        (
            "unknown dtype",
            file_with(
                r#"{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}"#,
                &[0; 16],
            ),
            None,
            "not a valid JSON",
        ),
        (
            "offsets out of order",
            file_with(
                &format!(
                    r#"{{"a":{{"dtype":"U8","shape":[0],"data_offsets":[4,0]}},"b":{}}}"#,
                    f32_at(0, 4)
                ),
                &[0; 4],
            ),
            Some("a"),
            "out of order",
        ),
        (
            "overlapping",
            file_with(
                &format!(r#"{{"a":{},"b":{}}}"#, f32_at(0, 8), f32_at(4, 12)),
                &[0; 12],
            ),
            Some("b"),
            "overlaps",
        ),
        (
            "a gap",
            file_with(
                &format!(r#"{{"a":{},"b":{}}}"#, f32_at(0, 4), f32_at(8, 12)),
                &[0; 12],
            ),
            Some("b"),
            "gap",
        ),
        (
            "not starting at 0",
            file_with(&format!(r#"{{"a":{}}}"#, f32_at(4, 8)), &[0; 8]),
            Some("a"),
            "gap",
        ),
        (
            "byte length and shape disagree",
            file_with(
                r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
                &[0; 8],
            ),
            Some("a"),
            "take 12",
        ),
        (
            "element count overflows",
            file_with(
                r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}}"#,
                &[],
            ),
            Some("a"),
            "too many elements",
        ),
        (
            "byte size overflows",
            file_with(
                r#"{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}}"#,
                &[],
            ),
            Some("a"),
            "byte size overflows",
        ),
        (
            "sub-byte count not a whole byte",
            file_with(
                r#"{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#,
                &[0; 2],
            ),
            Some("a"),
            "not a whole number",
        ),
        (
            "truncated data",
            file_with(&format!(r#"{{"a":{}}}"#, f32_at(0, 8)), &[0; 5]),
            None,
            "truncated",
        ),
        (
            "trailing data",
            file_with(&format!(r#"{{"a":{}}}"#, f32_at(0, 4)), &[0; 9]),
            None,
            "longer than described",
        ),
        (
            "an invalid bool",
            file_with(
                r#"{"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}}"#,
                &[1, 0, 2],
            ),
            Some("m"),
            "byte 2",
        ),
        (
            "metadata not strings",
            file_with(r#"{"__metadata__":{"a":1}}"#, &[]),
            None,
            "not a valid JSON",
        ),
        (
            "negative extent",
            file_with(
                r#"{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}"#,
                &[],
            ),
            None,
            "not a valid JSON",
        ),
        (
            "an extent that does not fit an i64",
            file_with(
                r#"{"a":{"dtype":"F8_E4M3","shape":[0,18446744073709551615],"data_offsets":[0,0]}}"#,
                &[],
            ),
            Some("a"),
            "does not fit an i64",
        ),
        (
            "a shape of 2000 extents",
            file_with(
                &format!(
                    r#"{{"a":{{"dtype":"U8","shape":[{}],"data_offsets":[0,1]}}}}"#,
                    vec!["1"; 2000].join(",")
                ),
                &[0],
            ),
            None,
            "more than 1024 extents",
        ),
        (
            "an empty name",
            file_with(
                r#"{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
                &[0],
            ),
            Some(""),
            "must not be empty",
        ),
    ];
    for (what, bytes, tensor, reason) in cases {
        let err = refused(&bytes);
        let (got_tensor, got_reason) = invalid_reason(&err);
        assert_eq!(got_tensor.as_deref(), tensor, "{what}: {err}");
        assert!(got_reason.contains(reason), "{what}: {err}");
    }
}

#[test]
fn missing_files_and_folders_are_io_errors_with_the_path() {
    let dir = folder();
    let missing = dir.path().join("missing.safetensors");
    let err = TensorBatch::read_safetensors(&missing).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, kind: std::io::ErrorKind::NotFound, .. } if path == &missing),
        "{err}"
    );
    assert!(err.to_string().contains("missing.safetensors"));
    let err = TensorBatch::read_safetensors(dir.path()).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Io {
                kind: std::io::ErrorKind::IsADirectory,
                ..
            }
        ),
        "{err}"
    );
    if !cfg!(miri) {
        // SAFETY: nothing is mapped: both fail first.
        let err = unsafe { TensorBatch::map_safetensors(&missing) }.unwrap_err();
        assert!(matches!(
            err,
            Error::Io {
                kind: std::io::ErrorKind::NotFound,
                ..
            }
        ));
        // SAFETY: as above.
        let err = unsafe { TensorBatch::map_safetensors(dir.path()) }.unwrap_err();
        assert!(matches!(
            err,
            Error::Io {
                kind: std::io::ErrorKind::IsADirectory,
                ..
            }
        ));
    }
}

/// Random damage to a valid file's header and data: every outcome is a batch or a typed
/// error, never a panic, and (outside Miri) the mapping agrees with the read.
#[test]
fn damaged_files_never_panic() {
    use proptest::prelude::*;
    let dir = folder();
    let path: PathBuf = dir.path().join("model.safetensors");
    model()
        .to_dlpack()
        .unwrap()
        .write_safetensors(&path)
        .unwrap();
    let original = std::fs::read(&path).unwrap();
    let damaged = dir.path().join("damaged.safetensors");
    let cases = if cfg!(miri) { 4 } else { 256 };
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let len = original.len();
    runner
        .run(
            &(
                proptest::collection::vec((0..len, any::<u8>()), 1..6),
                0..len + 8,
            ),
            |(edits, cut)| {
                let mut bytes = original.clone();
                for (at, byte) in edits {
                    // Mostly the header (where a byte changes the meaning), sometimes data.
                    let at = if at % 4 == 0 {
                        at
                    } else {
                        8 + at % 300.min(len - 8)
                    };
                    bytes[at] = byte;
                }
                bytes.truncate(cut.min(len));
                check_damaged(&damaged, &bytes);
                Ok(())
            },
        )
        .unwrap();
}

fn check_damaged(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    let read = TensorBatch::read_safetensors(path);
    if !cfg!(miri) {
        // SAFETY: the file lives in a private folder that nothing else touches.
        let mapped = unsafe { TensorBatch::map_safetensors(path) };
        assert_eq!(read.is_ok(), mapped.is_ok());
    }
    if let Err(err) = read {
        assert!(
            matches!(
                err,
                Error::InvalidFile { .. } | Error::AllocationFailed { .. }
            ),
            "{err}"
        );
    }
}

#[test]
fn a_model_loads_strictly_from_a_file_with_every_name_reported() {
    let dir = folder();
    let path = dir.path().join("partial.safetensors");
    let mut batch = model().to_dlpack().unwrap();
    batch.remove("fc2.bias").unwrap();
    batch
        .insert("extra", bytes_tensor(vec![0; 4], &[4], DataType::U8))
        .unwrap();
    batch.write_safetensors(&path).unwrap();
    let err = Model::from_dlpack(TensorBatch::read_safetensors(&path).unwrap()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("fc2.bias") && text.contains("extra"),
        "{text}"
    );
}

/// The same batch always gives the same file, metadata of several keys included.
#[test]
fn writes_are_deterministic() {
    let dir = folder();
    let batch = every_dtype_batch();
    let files: Vec<Vec<u8>> = (0..4)
        .map(|i| {
            let path = dir.path().join(format!("{i}.safetensors"));
            batch.write_safetensors(&path).unwrap();
            std::fs::read(&path).unwrap()
        })
        .collect();
    assert!(files.windows(2).all(|w| w[0] == w[1]));
}

/// Empty tensors may have extents whose product overflows: strides are 0, never wrapped.
#[test]
fn empty_tensors_with_huge_extents_have_zero_strides() {
    let dir = folder();
    let path = dir.path().join("empty.safetensors");
    std::fs::write(
        &path,
        file_with(
            r#"{"a":{"dtype":"U8","shape":[0,3,4611686018427387904],"data_offsets":[0,0]},"__metadata__":null}"#,
            &[],
        ),
    )
    .unwrap();
    let read = TensorBatch::read_safetensors(&path).unwrap();
    let a = read.get("a").unwrap();
    assert_eq!(a.shape(), [0, 3, 1 << 62]);
    assert_eq!(a.strides(), Some(&[0, 0, 0][..]));
    assert!(
        read.metadata().is_empty(),
        "`__metadata__: null` is no metadata"
    );
}

#[test]
fn a_sub_byte_tensor_of_an_odd_size_is_refused_by_name() {
    let dir = folder();
    let path = dir.path().join("f4.safetensors");
    let mut batch = TensorBatch::new();
    let f4 = DataType::new(DLDataTypeCode::kDLFloat4_e2m1fn, 4, 1);
    batch
        .insert("odd", bytes_tensor(vec![0x21, 0x03], &[3], f4))
        .unwrap();
    let err = batch.write_safetensors(&path).unwrap_err();
    let (tensor, reason) = invalid_reason(&err);
    assert_eq!(tensor.as_deref(), Some("odd"));
    assert!(reason.contains("whole number of bytes"), "{err}");
    assert!(!path.exists());
}

/// A save replaces the file a symbolic link points to (the link stays), keeps the
/// permissions of a file it replaces, and works whatever the length of the name.
#[test]
#[cfg(unix)]
#[cfg_attr(
    miri,
    ignore = "permissions and links are system calls Miri does not model"
)]
fn a_save_keeps_links_permissions_and_long_names() {
    use std::os::unix::fs::PermissionsExt;
    let dir = folder();
    let batch = every_dtype_batch();
    let private = dir.path().join("private.safetensors");
    batch.write_safetensors(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    batch.write_safetensors(&private).unwrap();
    let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let link = dir.path().join("link.safetensors");
    std::os::unix::fs::symlink(&private, &link).unwrap();
    let mut small = TensorBatch::new();
    small
        .insert("x", bytes_tensor(vec![1, 2], &[2], DataType::U8))
        .unwrap();
    small.write_safetensors(&link).unwrap();
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let read = TensorBatch::read_safetensors(&private).unwrap();
    assert_eq!(read.names().collect::<Vec<_>>(), ["x"]);

    let long = dir.path().join(format!("{}.st", "w".repeat(250)));
    small.write_safetensors(&long).unwrap();
    assert_eq!(TensorBatch::read_safetensors(&long).unwrap().len(), 1);
    // Nothing else is left in the folder.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
}

/// A complex64 tensor at an offset that is 4 but not 8 bytes aligned is copied once when
/// mapped (its consumers, PyTorch among them, read 8-byte elements).
#[test]
#[cfg_attr(miri, ignore = "maps a file")]
fn a_complex_tensor_is_aligned_to_its_size() {
    let dir = folder();
    let path = dir.path().join("c64.safetensors");
    let header = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"c":{"dtype":"C64","shape":[1],"data_offsets":[4,12]}}"#;
    let padded = format!("{header:<width$}", width = header.len().next_multiple_of(8));
    let mut data = 1.0f32.to_le_bytes().to_vec();
    data.extend_from_slice(&2.0f32.to_le_bytes());
    data.extend_from_slice(&3.0f32.to_le_bytes());
    std::fs::write(&path, file_with(&padded, &data)).unwrap();
    // SAFETY: the file lives in a private folder that nothing else touches.
    let mapped = unsafe { TensorBatch::map_safetensors(&path) }.unwrap();
    assert!(!mapped.get("a").unwrap().is_copied());
    let c = mapped.get("c").unwrap();
    assert!(c.is_copied());
    assert_eq!(c.data_ptr() as usize % 8, 0);
    assert_eq!(raw_bytes(c, 8), data[4..]);
}
