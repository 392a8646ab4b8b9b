//! `tch::Tensor` fields in `#[derive(ToDLPack, FromDLPack)]` structs, through
//! `#[dlpack(with = "dlpack_tch::tensor")]`, beside ndarray and burn fields: named like a
//! `state_dict`, zero-copy both ways.

use dlpack_core::{Error, FromDLPack, TensorBatch, ToDLPack};
use ndarray::{Array1, Array2};
use tch::{Kind, Tensor};

#[derive(ToDLPack, FromDLPack)]
struct Layer {
    weight: Array2<f32>,
    #[dlpack(with = "dlpack_tch::tensor")]
    bias: Tensor,
}

#[derive(ToDLPack, FromDLPack)]
struct Model {
    fc1: Layer,
    #[dlpack(with = "dlpack_tch::tensor")]
    scale: Tensor,
    steps: Array1<i64>,
}

fn model() -> Model {
    Model {
        fc1: Layer {
            weight: Array2::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f32),
            bias: Tensor::from_slice(&[0.5f32, -0.5]),
        },
        scale: Tensor::from_slice(&[2.0f64]),
        steps: Array1::from(vec![7]),
    }
}

#[test]
fn ndarray_and_tch_fields_export_and_import_without_copies() {
    let m = model();
    let weight = m.fc1.weight.as_ptr();
    let bias = m.fc1.bias.data_ptr();
    let scale = m.scale.data_ptr();
    let batch: TensorBatch = m.to_dlpack().unwrap();
    assert_eq!(
        batch.names().collect::<Vec<_>>(),
        ["fc1.weight", "fc1.bias", "scale", "steps"]
    );
    assert_eq!(
        batch.get("fc1.weight").unwrap().data().cast_const().cast(),
        weight
    );
    assert_eq!(batch.get("fc1.bias").unwrap().data(), bias);
    assert_eq!(batch.get("scale").unwrap().data(), scale);

    let back = Model::from_dlpack(batch).unwrap();
    assert_eq!(back.fc1.weight.as_ptr(), weight);
    assert_eq!(
        back.fc1.bias.data_ptr(),
        bias,
        "an exclusive export goes back to torch as it left"
    );
    assert_eq!(back.scale.data_ptr(), scale);
    assert_eq!(back.scale.kind(), Kind::Double);
    assert_eq!(Vec::<f32>::try_from(&back.fc1.bias).unwrap(), [0.5, -0.5]);
    assert_eq!(back.steps[0], 7);
}

#[test]
fn missing_tch_fields_are_reported_with_the_others() {
    let mut batch: TensorBatch = model().to_dlpack().unwrap();
    batch.remove("scale").unwrap();
    batch.remove("fc1.weight").unwrap();
    let err = match Model::from_dlpack(batch) {
        Ok(_) => panic!("a strict import with missing tensors succeeded"),
        Err(err) => err,
    };
    match err {
        Error::StateDict { missing, .. } => assert_eq!(missing, ["fc1.weight", "scale"]),
        other => panic!("unexpected error {other}"),
    }
}

#[test]
fn a_tch_field_that_torch_cannot_take_names_the_tensor() {
    let mut batch: TensorBatch = model().to_dlpack().unwrap();
    let reversed = ndarray::Array1::from(vec![1.0f32, 2.0]).slice_move(ndarray::s![..;-1]);
    batch.remove("fc1.bias").unwrap();
    batch
        .insert("fc1.bias", reversed.to_dlpack().unwrap())
        .unwrap();
    let err = match Model::from_dlpack(batch) {
        Ok(_) => panic!("negative strides reached torch"),
        Err(err) => err,
    };
    let text = err.to_string();
    assert!(
        text.contains("fc1.bias") && text.contains("torch"),
        "{text}"
    );
}

/// ndarray, tch and burn in one struct.
#[derive(ToDLPack, FromDLPack)]
struct Mixed {
    embedding: Array2<f32>,
    #[dlpack(with = "dlpack_tch::tensor")]
    projection: Tensor,
    norm: burn_flex::FlexTensor,
}

#[test]
fn ndarray_tch_and_burn_fields_in_one_struct() {
    let norm =
        burn_flex::FlexTensor::from_data(burn_std::TensorData::new(vec![1.0f32, 2.0], vec![2]));
    let mixed = Mixed {
        embedding: Array2::from_shape_fn((3, 2), |(i, j)| (i * 2 + j) as f32),
        projection: Tensor::from_slice(&[3i64, 4, 5]),
        norm,
    };
    let pointers = (
        mixed.embedding.as_ptr() as usize,
        mixed.projection.data_ptr() as usize,
        mixed.norm.data_arc().as_ptr() as usize,
    );
    let batch: TensorBatch = mixed.to_dlpack().unwrap();
    assert_eq!(
        batch.names().collect::<Vec<_>>(),
        ["embedding", "projection", "norm"]
    );
    let exported = (
        batch.get("embedding").unwrap().data() as usize,
        batch.get("projection").unwrap().data() as usize,
        batch.get("norm").unwrap().data() as usize,
    );
    assert_eq!(exported, pointers);

    let back = Mixed::from_dlpack(batch).unwrap();
    assert_eq!(
        (
            back.embedding.as_ptr() as usize,
            back.projection.data_ptr() as usize,
            back.norm.storage::<f32>().as_ptr() as usize,
        ),
        pointers,
        "every field came back without a copy"
    );
    assert_eq!(Vec::<i64>::try_from(&back.projection).unwrap(), [3, 4, 5]);
    assert_eq!(back.norm.storage::<f32>(), [1.0, 2.0]);
}

/// The fields a mapped file fills without a copy: tch and burn tensors, and an ndarray
/// view holder (`DLPackArray`; an owned `Array` always owns its own buffer).
#[derive(ToDLPack, FromDLPack)]
struct Mapped {
    embedding: dlpack_core::DLPackArray<f32, ndarray::Ix2>,
    #[dlpack(with = "dlpack_tch::tensor")]
    projection: Tensor,
    norm: burn_flex::FlexTensor,
}

/// A file saved from the mixed struct maps back into [`Mapped`] with no copy: every
/// field's memory lies inside the one mapping of the file.
#[test]
fn tch_and_burn_fields_load_from_a_mapped_file_without_a_copy() {
    let norm =
        burn_flex::FlexTensor::from_data(burn_std::TensorData::new(vec![1.0f32, 2.0], vec![2]));
    let mixed = Mixed {
        embedding: Array2::from_shape_fn((3, 2), |(i, j)| (i * 2 + j) as f32),
        projection: Tensor::from_slice(&[3i64, 4, 5]),
        norm,
    };
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("mixed.safetensors");
    mixed.to_dlpack().unwrap().write_safetensors(&path).unwrap();
    let file_len = std::fs::metadata(&path).unwrap().len() as usize;
    // SAFETY: the file lives in a folder of its own that nothing else touches.
    let batch = unsafe { TensorBatch::map_safetensors(&path) }.unwrap();
    let addresses: Vec<usize> = batch.iter().map(|(_, t)| t.data() as usize).collect();
    let low = *addresses.iter().min().unwrap();
    let high = *addresses.iter().max().unwrap();
    assert!(high - low < file_len, "one mapping");
    let back = Mapped::from_dlpack(batch).unwrap();
    let fields = [
        back.embedding.view().as_ptr() as usize,
        back.projection.data_ptr() as usize,
        back.norm.storage::<f32>().as_ptr() as usize,
    ];
    for address in fields {
        assert!(addresses.contains(&address), "a field was copied");
    }
    assert_eq!(Vec::<i64>::try_from(&back.projection).unwrap(), [3, 4, 5]);
    assert_eq!(back.norm.storage::<f32>(), [1.0, 2.0]);
    assert_eq!(back.embedding.view()[[2, 1]], 5.0);
}
