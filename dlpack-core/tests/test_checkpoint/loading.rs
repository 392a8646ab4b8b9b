//! Loads into a value in place, strict and lenient loads of a part, and every problem
//! the headers show reported before anything is read.

use dlpack_core::safetensors::{Checkpoint, ReadOptions};
use dlpack_core::{DataType, Error, FromDLPack, TensorBatch, ToDLPack};
use half::bf16;
use ndarray::Array1;

use super::{Linear, Model, folder, linear, model, save, state_dict, to_bf16};

#[derive(FromDLPack, Debug)]
struct OneLayer {
    layers: LayerTwo,
}

#[derive(FromDLPack, Debug)]
struct LayerTwo {
    #[dlpack(rename = "2")]
    layer: Linear<f32>,
}

#[test]
fn load_into_fills_a_value_in_place_keeping_its_buffers() {
    let dir = folder();
    save(model(3, 8), dir.path(), 400);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let mut value = model(3, 8);
    value.embed.fill(0.0);
    value.layers[1].weight.fill(-1.0);
    let pointers = (value.embed.as_ptr(), value.layers[1].weight.as_ptr());
    checkpoint.load_into(&mut value).unwrap();
    assert_eq!(value, model(3, 8));
    // Copied into the fields' own buffers: the value keeps its allocations.
    assert_eq!(
        (value.embed.as_ptr(), value.layers[1].weight.as_ptr()),
        pointers
    );
    // With conversion: a bfloat16 value filled from float32 tensors.
    let mut narrow = to_bf16(&model(3, 8));
    narrow.embed.fill(bf16::ZERO);
    let options = ReadOptions::new().convert_floats(DataType::BF16);
    checkpoint.load_into_with(&mut narrow, &options).unwrap();
    assert_eq!(narrow, to_bf16(&model(3, 8)));
}

#[test]
fn load_into_is_strict_and_load_into_lenient_reports() {
    let dir = folder();
    save(model(4, 8), dir.path(), 400);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let others: Vec<String> = checkpoint
        .names()
        .filter(|n| !n.starts_with("layers.2."))
        .map(str::to_owned)
        .collect();
    // A part of the checkpoint: leniently, the rest is the report's `unexpected`.
    let mut part = OneLayer {
        layers: LayerTwo {
            layer: linear(8, 50.0),
        },
    };
    let report = checkpoint.load_into_lenient(&mut part).unwrap();
    assert_eq!(part.layers.layer, model(4, 8).layers[2]);
    assert!(report.missing.is_empty());
    assert_eq!(report.unexpected, others);
    // Strictly, the same tensors are an error, and what fits is loaded all the same,
    // as `load_dlpack` (and PyTorch's `load_state_dict`) does.
    let mut part = OneLayer {
        layers: LayerTwo {
            layer: linear(8, 50.0),
        },
    };
    let err = checkpoint.load_into(&mut part).unwrap_err();
    let (missing, unexpected, failed) = state_dict(&err);
    assert!(missing.is_empty() && failed.is_empty());
    assert_eq!(unexpected, &others);
    assert_eq!(part.layers.layer, model(4, 8).layers[2]);
    // A value with more than the checkpoint: its tensors the checkpoint lacks are
    // missing, strictly an error, leniently the report's; a shape that does not fit
    // is an error either way, naming the tensor.
    let mut bigger = model(5, 8);
    let report = checkpoint.load_into_lenient(&mut bigger).unwrap();
    assert_eq!(report.missing, ["layers.4.weight", "layers.4.bias"]);
    assert!(report.unexpected.is_empty());
    assert_eq!(bigger.layers[..4], model(4, 8).layers[..]);
    let err = checkpoint.load_into(&mut model(5, 8)).unwrap_err();
    assert_eq!(state_dict(&err).0, ["layers.4.weight", "layers.4.bias"]);
    let err = checkpoint.load_into_lenient(&mut model(4, 6)).unwrap_err();
    let (_, _, failed) = state_dict(&err);
    assert!(
        failed.iter().any(|e| e.to_string().contains("embed")),
        "{err}"
    );
}

#[test]
fn a_part_loads_leniently_and_the_rest_is_reported_not_read() {
    let dir = folder();
    save(model(4, 8), dir.path(), 400);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let (part, report) = checkpoint.read_lenient::<OneLayer>().unwrap();
    assert_eq!(part.layers.layer, model(4, 8).layers[2]);
    assert!(report.missing.is_empty());
    let expected: Vec<String> = checkpoint
        .names()
        .filter(|n| !n.starts_with("layers.2."))
        .map(str::to_owned)
        .collect();
    assert_eq!(report.unexpected, expected);
    // Strictly, the rest is unexpected: every name, and nothing read.
    let err = checkpoint.read::<OneLayer>().unwrap_err();
    let (missing, unexpected, failed) = state_dict(&err);
    assert!(missing.is_empty() && failed.is_empty());
    assert_eq!(unexpected, &expected);
}

#[test]
fn every_problem_known_from_the_headers_is_reported_before_reading() {
    let dir = folder();
    save(to_bf16(&model(2, 4)), dir.path(), 300);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    // bfloat16 tensors for float32 fields: an error for each tensor, shown as one line.
    let err = checkpoint.read::<Model<f32>>().unwrap_err();
    let (_, _, failed) = state_dict(&err);
    assert_eq!(failed.len(), 2 + 2 * 2 + 1, "{err}");
    assert!(failed.iter().all(|e| matches!(
        e,
        Error::Tensor { error, .. }
            if **error == Error::DtypeMismatch { expected: DataType::F32, found: DataType::BF16 }
    )));
    assert!(err.to_string().contains("7 tensors are bfloat16"), "{err}");

    #[derive(FromDLPack, Debug)]
    struct Wrong {
        embed: Array1<bf16>,
        extra: Array1<bf16>,
    }
    let err = checkpoint.read::<Wrong>().unwrap_err();
    let (missing, unexpected, failed) = state_dict(&err);
    assert_eq!(missing, &["extra"]);
    assert_eq!(unexpected.len(), checkpoint.len() - 1);
    assert_eq!(
        failed,
        &[Error::NdimMismatch {
            expected: 1,
            found: 2
        }
        .in_tensor("embed")]
    );
}

#[test]
fn load_into_takes_the_items_past_a_gap_as_load_dlpack_does() {
    // A checkpoint with items 0 and 2 of a `Vec` but not 1: a fresh value would stop at
    // the gap, a value of three items in place takes item 2 too.
    let dir = folder();
    let full = model(3, 4);
    let mut batch = full.clone().to_dlpack().unwrap();
    batch.remove("layers.1.weight").unwrap();
    batch.remove("layers.1.bias").unwrap();
    batch.write_checkpoint(dir.path(), 1 << 20).unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let mut value = model(3, 4);
    value.layers[2].weight.fill(-7.0);
    let report = checkpoint.load_into_lenient(&mut value).unwrap();
    assert_eq!(report.missing, ["layers.1.weight", "layers.1.bias"]);
    assert!(report.unexpected.is_empty());
    assert_eq!(value.layers[2], full.layers[2]);
    // The same as loading the file's batch.
    let mut again = model(3, 4);
    again.layers[2].weight.fill(-7.0);
    let batch = TensorBatch::read_safetensors(dir.path().join("model.safetensors")).unwrap();
    assert_eq!(again.load_dlpack_lenient(batch).unwrap(), report);
    let err = checkpoint.load_into(&mut model(3, 4)).unwrap_err();
    assert_eq!(state_dict(&err).0, ["layers.1.weight", "layers.1.bias"]);
}

#[test]
fn float_tensors_of_another_type_are_one_line_with_the_fix() {
    let dir = folder();
    save(to_bf16(&model(3, 8)), dir.path(), 400);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let err = checkpoint.read::<Model<f32>>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: 9 tensors are bfloat16 where the value takes float32: \
         load with `ReadOptions::new().convert_floats(DataType::F32)` to convert them as \
         PyTorch's `.to()` does (e.g. `embed`, `layers.0.weight`, `layers.0.bias` and 6 \
         more)"
    );
    // Every tensor is still in the error, by name, for code that reads it.
    let (_, _, failed) = state_dict(&err);
    assert_eq!(failed.len(), 9);
    // One tensor: no count of the rest; other failures keep their own words.
    let mut one = TensorBatch::new();
    let x = Array1::from_elem(2, bf16::ONE).to_dlpack().unwrap();
    one.insert("x".to_owned(), x).unwrap();
    #[derive(FromDLPack, Debug)]
    struct X {
        x: Array1<f64>,
    }
    let err = X::from_dlpack(one).unwrap_err();
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: 1 tensor is bfloat16 where the value takes float64: load \
         with `ReadOptions::new().convert_floats(DataType::F64)` to convert them as \
         PyTorch's `.to()` does (e.g. `x`)"
    );
}
