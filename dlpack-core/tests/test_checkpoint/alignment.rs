//! Every buffer the crate allocates for tensor data starts on a 64-byte boundary (what
//! XLA's CPU client, JAX, imports without a copy), with no copy on the way to the
//! fields that keep it: loads, converting loads, reads of a file, copies of foreign or
//! strided tensors, a `Parameter`'s copy-on-write.

use dlpack_core::implement::TensorField;
use dlpack_core::safetensors::{Checkpoint, ReadOptions};
use dlpack_core::{DataType, FromDLPack, ManagedTensor, Parameter2, TensorBatch, ToDLPack};
use half::bf16;
use ndarray::{Array1, Array2, ShapeBuilder};

use super::{Model, folder, model, save, to_bf16};

fn aligned<T>(ptr: *const T) -> bool {
    (ptr as usize) % 64 == 0
}

fn every_field_aligned<T>(model: &Model<T>) {
    let mut pointers = vec![model.embed.as_ptr()];
    for layer in model.layers.iter().chain(&model.head) {
        pointers.extend([layer.weight.as_ptr(), layer.bias.as_ptr()]);
    }
    for (i, p) in pointers.iter().enumerate() {
        assert!(aligned(*p), "field {i} at {p:?}");
    }
}

#[test]
fn loads_give_every_field_a_64_byte_aligned_buffer() {
    let dir = folder();
    // Odd sizes: 7 x 7 floats are 196 bytes, so no tensor after the first starts on a
    // boundary by luck of the sizes before it.
    save(model(5, 7), dir.path(), 600);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let loaded: Model<f32> = checkpoint.read().unwrap();
    assert_eq!(loaded, model(5, 7));
    every_field_aligned(&loaded);
    // Converting on load: bfloat16 files into float32 fields, and back.
    let bf = folder();
    save(to_bf16(&model(5, 7)), bf.path(), 300);
    let options = ReadOptions::new().convert_floats(DataType::F32);
    let widened: Model<f32> = Checkpoint::open(bf.path())
        .unwrap()
        .read_with(&options)
        .unwrap();
    every_field_aligned(&widened);
    let options = ReadOptions::new().convert_floats(DataType::BF16);
    let narrowed: Model<bf16> = checkpoint.read_with(&options).unwrap();
    assert_eq!(narrowed, to_bf16(&model(5, 7)));
    every_field_aligned(&narrowed);
}

#[test]
fn read_safetensors_tensors_are_aligned_and_kept_by_arrays_without_a_copy() {
    let dir = folder();
    let path = dir.path().join("m.safetensors");
    let mut batch = TensorBatch::new();
    for (i, n) in [1usize, 3, 5, 7, 9, 11, 13].into_iter().enumerate() {
        let t = Array1::from_shape_fn(n, |j| (i * 100 + j) as u8)
            .to_dlpack()
            .unwrap();
        batch.insert(format!("u8_{i}"), t).unwrap();
        let t = Array1::from_shape_fn(n, |j| j as f64).to_dlpack().unwrap();
        batch.insert(format!("f64_{i}"), t).unwrap();
        let t = Array1::from_shape_fn(n, |j| j % 2 == 0)
            .to_dlpack()
            .unwrap();
        batch.insert(format!("bool_{i}"), t).unwrap();
    }
    batch.write_safetensors(&path).unwrap();
    let read = TensorBatch::read_safetensors(&path).unwrap();
    for (name, tensor) in read {
        let data = tensor.data();
        assert!(aligned(data), "{name} at {data:?}");
        // The array keeps the buffer it was read into: the same address.
        if name.starts_with("u8_") {
            let array = Array1::<u8>::from_dlpack(tensor).unwrap();
            assert_eq!(array.as_ptr().cast(), data.cast_const());
        } else if name.starts_with("f64_") {
            let array = Array1::<f64>::from_dlpack(tensor).unwrap();
            assert_eq!(array.as_ptr().cast(), data.cast_const());
            assert_eq!(array, Array1::from_shape_fn(array.len(), |j| j as f64));
        } else {
            let array = Array1::<bool>::from_dlpack(tensor).unwrap();
            assert_eq!(array, Array1::from_shape_fn(array.len(), |j| j % 2 == 0));
        }
    }
}

#[test]
fn copies_are_aligned() {
    // A foreign-looking tensor (a vector's elements from an odd offset, column-major):
    // its array is a copy in standard layout, on a boundary.
    let values: Vec<f32> = (0..31).map(|i| i as f32).collect();
    let tensor = ManagedTensor::from_buffer(values, 1, &[3, 5], &[1, 3]).unwrap();
    let array = Array2::<f32>::from_dlpack(tensor).unwrap();
    assert!(aligned(array.as_ptr()));
    assert_eq!(array[[2, 4]], 1.0 + 2.0 + 12.0);
    // A strided ndarray exported by copy.
    let fortran = Array2::<f32>::zeros((5, 3).f());
    let copy = fortran.view().to_dlpack().unwrap();
    assert!(aligned(copy.data()));
    // A vector of the tensor's elements from an offset comes back without a copy.
    let values: Vec<u16> = (0..40).collect();
    let start = values.as_ptr().wrapping_add(3);
    let tensor = ManagedTensor::from_buffer(values, 3, &[4, 8], &[8, 1]).unwrap();
    let array = Array2::<u16>::from_dlpack(tensor).unwrap();
    assert_eq!(array.as_ptr(), start);
    assert_eq!(array[[1, 0]], 11);
}

#[test]
fn a_shared_parameter_copies_into_an_aligned_buffer() {
    let mut weight = Parameter2::from(Array2::<f32>::from_elem((3, 5), 2.0));
    let shared = weight.share().unwrap();
    weight.view_mut()[[0, 0]] = 1.0;
    assert!(aligned(weight.view().as_ptr()));
    assert_eq!(shared.as_array::<f32, ndarray::Ix2>().unwrap()[[0, 0]], 2.0);
    assert!(aligned(weight.clone().view().as_ptr()));
    assert!(aligned(weight.to_owned().as_ptr()));
    drop(shared);
}
