//! Derived models: read into their fields without a copy, mapped exclusive and
//! writable without writing the file, and loaded strictly with every name reported.

use dlpack_core::{DataType, FromDLPack, TensorBatch, ToDLPack};
use ndarray::Ix1;

use super::{Model, bytes_tensor, folder, model};

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
