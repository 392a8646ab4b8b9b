//! Every dtype round-trips bit for bit, read and mapped; files interchange with the
//! reference `safetensors` crate both ways; a sub-byte tensor that fills no whole byte
//! is refused.

use std::collections::HashMap;

use dlpack_core::ffi::DLDataTypeCode;
use dlpack_core::{DataType, Device, TensorBatch};
use ndarray::{Array2, Ix1, Ix2};
use safetensors::tensor::{SafeTensors, TensorView};

use super::{bytes_tensor, every_dtype, every_dtype_batch, folder, invalid_reason, raw_bytes};

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
