//! Layouts: any layout is written in C order; a mapping takes each tensor at its
//! offset in the file, and copies once only a misaligned one; empty tensors of huge
//! extents have zero strides.

use dlpack_core::{ManagedTensor, TensorBatch, ToDLPack};
use ndarray::{Ix1, IxDyn};
use safetensors::tensor::SafeTensors;

use super::{file_with, folder, model, raw_bytes};

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
