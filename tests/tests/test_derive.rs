//! `#[derive(ToDLPack, FromDLPack)]`: names, round trips, strictness and attributes.

use std::collections::{BTreeMap, HashMap};

use dlpack_core::{DataType, Error, FromDLPack, TensorBatch, ToDLPack};
use ndarray::{Array1, Array2, Array3, array};

#[derive(Debug, Clone, PartialEq, ToDLPack, FromDLPack)]
struct Linear {
    weight: Array2<f32>,
    bias: Option<Array1<f32>>,
}

#[derive(Debug, Clone, PartialEq, ToDLPack, FromDLPack)]
struct Block {
    attn: Linear,
    mlp: Vec<Linear>,
    norms: BTreeMap<String, Array1<f32>>,
}

#[derive(Debug, Clone, PartialEq, ToDLPack, FromDLPack)]
struct Transformer {
    embed: Array2<f32>,
    blocks: Vec<Block>,
    head: Option<Linear>,
    #[dlpack(skip)]
    step: u64,
}

/// A `fan_out x fan_in` layer whose values depend on `seed`.
fn linear(fan_in: usize, fan_out: usize, seed: f32, bias: bool) -> Linear {
    Linear {
        weight: Array2::from_shape_fn((fan_out, fan_in), |(i, j)| seed + (i * fan_in + j) as f32),
        bias: bias.then(|| Array1::from_shape_fn(fan_out, |i| -seed - i as f32)),
    }
}

fn block(seed: f32) -> Block {
    Block {
        attn: linear(4, 4, seed, true),
        mlp: vec![
            linear(4, 8, seed + 1.0, true),
            linear(8, 4, seed + 2.0, false),
        ],
        norms: BTreeMap::from([
            ("ln1".to_owned(), Array1::from_elem(4, seed)),
            ("ln2".to_owned(), Array1::from_elem(4, -seed)),
        ]),
    }
}

fn transformer() -> Transformer {
    Transformer {
        embed: Array2::from_shape_fn((10, 4), |(i, j)| (i * 4 + j) as f32),
        blocks: vec![block(100.0), block(200.0)],
        head: Some(linear(4, 10, 300.0, true)),
        step: 42,
    }
}

/// The data pointer of every array of `model`, in field order.
fn pointers(model: &Transformer) -> Vec<*const f32> {
    fn linear(layer: &Linear, out: &mut Vec<*const f32>) {
        out.push(layer.weight.as_ptr());
        out.extend(layer.bias.as_ref().map(Array1::as_ptr));
    }
    let mut out = vec![model.embed.as_ptr()];
    for block in &model.blocks {
        linear(&block.attn, &mut out);
        for layer in &block.mlp {
            linear(layer, &mut out);
        }
        out.extend(block.norms.values().map(Array1::as_ptr));
    }
    if let Some(head) = &model.head {
        linear(head, &mut out);
    }
    out
}

fn names(batch: &TensorBatch) -> Vec<&str> {
    batch.names().collect()
}

#[test]
fn nested_model_names_follow_state_dict_conventions() {
    let batch = transformer().to_dlpack().unwrap();
    let mut expected = vec!["embed".to_owned()];
    for b in 0..2 {
        expected.extend(
            [
                "attn.weight",
                "attn.bias",
                "mlp.0.weight",
                "mlp.0.bias",
                "mlp.1.weight",
                "norms.ln1",
                "norms.ln2",
            ]
            .map(|name| format!("blocks.{b}.{name}")),
        );
    }
    expected.extend(["head.weight".to_owned(), "head.bias".to_owned()]);
    assert_eq!(names(&batch), expected);

    let weight = batch.get("blocks.1.mlp.0.weight").unwrap();
    assert_eq!(weight.shape(), [8, 4]);
    assert_eq!(weight.dtype(), DataType::F32);
    assert!(!weight.is_copied());
    assert_eq!(batch.get("head.bias").unwrap().shape(), [10]);
}

#[test]
fn nested_model_round_trips_without_copies() {
    let model = transformer();
    let expected = Transformer {
        step: 0,
        ..model.clone()
    };
    let before = pointers(&model);

    let batch = model.to_dlpack().unwrap();
    let back = Transformer::from_dlpack(batch).unwrap();

    assert_eq!(back, expected);
    assert_eq!(
        pointers(&back),
        before,
        "owned arrays must come back uncopied"
    );
}

#[test]
fn missing_tensor_is_named() {
    let mut batch = transformer().to_dlpack().unwrap();
    batch.remove("blocks.1.attn.weight").unwrap();
    let err = Transformer::from_dlpack(batch).unwrap_err();
    assert_eq!(
        err,
        Error::StateDict {
            missing: vec!["blocks.1.attn.weight".to_owned()],
            unexpected: vec![],
            failed: vec![],
        }
    );
}

#[test]
fn leftover_tensors_are_unexpected() {
    let mut batch = linear(2, 3, 0.0, true).to_dlpack().unwrap();
    batch
        .insert("extra", array![1i64].to_dlpack().unwrap())
        .unwrap();
    batch
        .insert("bias.extra", array![1i64].to_dlpack().unwrap())
        .unwrap();
    let err = Linear::from_dlpack(batch).unwrap_err();
    assert_eq!(
        err,
        Error::StateDict {
            missing: vec![],
            unexpected: vec!["extra".to_owned(), "bias.extra".to_owned()],
            failed: vec![],
        }
    );
}

/// The one failed tensor of a strict import's error.
fn only_failure(err: &Error) -> &Error {
    match err {
        Error::StateDict {
            missing,
            unexpected,
            failed,
        } if missing.is_empty() && unexpected.is_empty() && failed.len() == 1 => &failed[0],
        other => panic!("expected one failed tensor, got {other:?}"),
    }
}

#[test]
fn dtype_mismatch_names_the_tensor() {
    let mut batch = transformer().to_dlpack().unwrap();
    batch.remove("blocks.0.attn.weight").unwrap();
    batch
        .insert(
            "blocks.0.attn.weight",
            Array2::<f64>::zeros((4, 4)).to_dlpack().unwrap(),
        )
        .unwrap();
    let err = Transformer::from_dlpack(batch).unwrap_err();
    let err = only_failure(&err);
    let Error::Tensor { name, .. } = err else {
        panic!("expected Error::Tensor, got {err:?}");
    };
    assert_eq!(name, "blocks.0.attn.weight");
    assert_eq!(
        err.root(),
        &Error::DtypeMismatch {
            expected: DataType::F32,
            found: DataType::F64
        }
    );
}

#[test]
fn rank_mismatch_names_the_tensor() {
    let mut batch = linear(2, 3, 0.0, true).to_dlpack().unwrap();
    batch.remove("weight").unwrap();
    batch
        .insert(
            "weight",
            Array3::<f32>::zeros((1, 2, 3)).to_dlpack().unwrap(),
        )
        .unwrap();
    let err = Linear::from_dlpack(batch).unwrap_err();
    let err = only_failure(&err);
    assert!(
        matches!(err, Error::Tensor { name, .. } if name == "weight"),
        "{err:?}"
    );
    assert_eq!(
        err.root(),
        &Error::NdimMismatch {
            expected: 2,
            found: 3
        }
    );
}

#[test]
fn extract_is_not_strict() {
    let layer = linear(2, 3, 1.0, true);
    let mut batch = layer.clone().to_dlpack().unwrap();
    batch
        .insert("optimizer.step", array![7i64].to_dlpack().unwrap())
        .unwrap();
    let back: Linear = batch.extract().unwrap();
    assert_eq!(back, layer);
    assert_eq!(names(&batch), ["optimizer.step"]);
    // Lenient about unexpected tensors only: a missing one is still an error.
    let mut partial = layer.clone().to_dlpack().unwrap();
    partial.remove("weight").unwrap();
    let err = partial.extract::<Linear>().unwrap_err();
    assert!(err.to_string().contains("weight"), "{err}");
}

#[derive(Debug, Clone, PartialEq, ToDLPack, FromDLPack)]
struct Stats {
    mean: Array1<f32>,
    var: Array1<f32>,
}

#[derive(Debug, PartialEq, ToDLPack, FromDLPack)]
struct Norm {
    #[dlpack(rename = "gamma")]
    scale: Array1<f32>,
    #[dlpack(flatten)]
    stats: Stats,
    #[dlpack(skip)]
    label: String,
}

#[derive(Debug, PartialEq, ToDLPack, FromDLPack)]
struct Net {
    norm: Norm,
    #[dlpack(rename = "proj")]
    linear: Linear,
}

fn stats() -> Stats {
    Stats {
        mean: array![0.5, 1.5],
        var: array![1.0, 2.0],
    }
}

#[test]
fn rename_flatten_and_skip() {
    let net = Net {
        norm: Norm {
            scale: array![2.0, 3.0],
            stats: stats(),
            label: "layer norm".to_owned(),
        },
        linear: linear(2, 2, 0.0, false),
    };
    let batch = net.to_dlpack().unwrap();
    assert_eq!(
        names(&batch),
        ["norm.gamma", "norm.mean", "norm.var", "proj.weight"]
    );
    let back = Net::from_dlpack(batch).unwrap();
    assert_eq!(back.norm.scale, array![2.0, 3.0]);
    assert_eq!(back.norm.stats, stats());
    assert_eq!(back.norm.label, "", "skipped fields come back as Default");
    assert_eq!(back.linear, linear(2, 2, 0.0, false));
}

#[derive(Debug, ToDLPack, FromDLPack)]
struct Clash {
    mean: Array1<f32>,
    #[dlpack(flatten)]
    stats: Stats,
}

#[test]
fn flatten_collision_is_a_runtime_error() {
    let clash = Clash {
        mean: array![0.0],
        stats: stats(),
    };
    assert_eq!(
        clash.to_dlpack().unwrap_err(),
        Error::DuplicateName {
            name: "mean".to_owned()
        }
    );
}

#[test]
fn none_is_absent_and_comes_back_none() {
    let layer = linear(3, 2, 0.0, false);
    let batch = layer.clone().to_dlpack().unwrap();
    assert_eq!(names(&batch), ["weight"]);
    let back = Linear::from_dlpack(batch).unwrap();
    assert_eq!(back.bias, None);
    assert_eq!(back, layer);
}

#[derive(Debug, PartialEq, ToDLPack, FromDLPack)]
struct Mlp {
    layers: Vec<Linear>,
    experts: HashMap<String, Linear>,
}

#[test]
fn vec_items_are_indexed_and_map_entries_keyed() {
    let mlp = Mlp {
        layers: vec![linear(2, 3, 0.0, true), linear(3, 1, 1.0, true)],
        experts: HashMap::from([
            ("beta".to_owned(), linear(1, 1, 2.0, false)),
            ("alpha".to_owned(), linear(1, 1, 3.0, false)),
        ]),
    };
    let batch = mlp.to_dlpack().unwrap();
    assert_eq!(
        names(&batch),
        [
            "layers.0.weight",
            "layers.0.bias",
            "layers.1.weight",
            "layers.1.bias",
            "experts.alpha.weight",
            "experts.beta.weight",
        ]
    );
    let back = Mlp::from_dlpack(batch).unwrap();
    assert_eq!(back.layers.len(), 2);
    assert_eq!(back.layers[1], linear(3, 1, 1.0, true));
    assert_eq!(back.experts["alpha"], linear(1, 1, 3.0, false));
    assert_eq!(back.experts["beta"], linear(1, 1, 2.0, false));
}

#[test]
fn empty_vec_and_map_export_nothing() {
    let mlp = Mlp {
        layers: Vec::new(),
        experts: HashMap::new(),
    };
    let batch = mlp.to_dlpack().unwrap();
    assert!(batch.is_empty());
    let back = Mlp::from_dlpack(batch).unwrap();
    assert!(back.layers.is_empty() && back.experts.is_empty());
}

#[derive(Debug, PartialEq, ToDLPack, FromDLPack)]
struct Pair(Array1<f32>, #[dlpack(skip)] u8, Array2<i64>);

#[derive(Debug, PartialEq, ToDLPack, FromDLPack)]
struct Labeled(#[dlpack(rename = "x")] Array1<f32>, Pair);

#[test]
fn tuple_fields_are_named_by_index() {
    let pair = Pair(array![1.0, 2.0], 9, array![[1, 2], [3, 4]]);
    let batch = pair.to_dlpack().unwrap();
    assert_eq!(names(&batch), ["0", "2"]);
    assert_eq!(batch.get("2").unwrap().dtype(), DataType::I64);
    let back = Pair::from_dlpack(batch).unwrap();
    assert_eq!(back, Pair(array![1.0, 2.0], 0, array![[1, 2], [3, 4]]));

    let labeled = Labeled(array![0.0], back);
    let batch = labeled.to_dlpack().unwrap();
    assert_eq!(names(&batch), ["x", "1.0", "1.2"]);
    let back = Labeled::from_dlpack(batch).unwrap();
    assert_eq!(back.1.2, array![[1, 2], [3, 4]]);
}

#[derive(Debug, PartialEq, ToDLPack, FromDLPack)]
struct Nothing;

#[derive(Debug, PartialEq, ToDLPack, FromDLPack)]
struct AllSkipped {
    #[dlpack(skip)]
    count: usize,
}

#[test]
fn structs_without_tensors() {
    assert!(Nothing.to_dlpack().unwrap().is_empty());
    assert_eq!(Nothing::from_dlpack(TensorBatch::new()).unwrap(), Nothing);
    assert!(AllSkipped { count: 3 }.to_dlpack().unwrap().is_empty());
    assert_eq!(
        AllSkipped::from_dlpack(TensorBatch::new()).unwrap(),
        AllSkipped { count: 0 }
    );

    let mut batch = TensorBatch::new();
    batch
        .insert("stray", array![1u8].to_dlpack().unwrap())
        .unwrap();
    assert_eq!(
        Nothing::from_dlpack(batch).unwrap_err(),
        Error::StateDict {
            missing: vec![],
            unexpected: vec!["stray".to_owned()],
            failed: vec![],
        }
    );
}

#[derive(Debug, PartialEq, ToDLPack, FromDLPack)]
struct Mixed {
    r#type: Array1<u8>,
    mask: Array2<bool>,
    half: Array1<half::f16>,
    complex: Array1<num_complex::Complex<f64>>,
    scalar: ndarray::Array0<i32>,
    boxed: Box<Stats>,
}

#[test]
fn raw_identifiers_dtypes_and_boxes() {
    let mixed = Mixed {
        r#type: array![1, 2, 3],
        mask: array![[true, false]],
        half: array![half::f16::from_f32(1.5)],
        complex: array![num_complex::Complex::new(1.0, -1.0)],
        scalar: ndarray::arr0(7),
        boxed: Box::new(stats()),
    };
    let batch = mixed.to_dlpack().unwrap();
    assert_eq!(
        names(&batch),
        [
            "type",
            "mask",
            "half",
            "complex",
            "scalar",
            "boxed.mean",
            "boxed.var"
        ]
    );
    let dtypes: Vec<DataType> = batch.iter().map(|(_, t)| t.dtype()).collect();
    assert_eq!(
        dtypes,
        [
            DataType::U8,
            DataType::BOOL,
            DataType::F16,
            DataType::C128,
            DataType::I32,
            DataType::F32,
            DataType::F32
        ]
    );
    let back = Mixed::from_dlpack(batch).unwrap();
    assert_eq!(back.r#type, array![1, 2, 3]);
    assert_eq!(back.mask, array![[true, false]]);
    assert_eq!(back.scalar, ndarray::arr0(7));
    assert_eq!(*back.boxed, stats());
}

#[test]
fn a_struct_nests_under_a_prefix_of_a_batch() {
    let mut batch = TensorBatch::new();
    stats().to_dlpack_into("bn", &mut batch).unwrap();
    assert_eq!(names(&batch), ["bn.mean", "bn.var"]);
    let back = Stats::from_dlpack_in("bn", &mut batch).unwrap();
    assert_eq!(back, stats());
    assert!(batch.is_empty());
}

// ---------------------------------------------------------------------------------------
// state_dict semantics: every problem at once, and loads into existing values.
// ---------------------------------------------------------------------------------------

/// A transformer's batch with three tensors missing, two unexpected, and one of the
/// wrong dtype.
fn damaged_batch() -> TensorBatch {
    let mut batch = transformer().to_dlpack().unwrap();
    for name in ["embed", "blocks.0.mlp.1.weight", "blocks.1.norms.ln2"] {
        batch.remove(name).unwrap();
    }
    batch
        .insert("decoder.weight", array![1.0f32].to_dlpack().unwrap())
        .unwrap();
    batch
        .insert("blocks.1.extra", array![1u8].to_dlpack().unwrap())
        .unwrap();
    batch.remove("head.bias").unwrap();
    batch
        .insert("head.bias", array![1.0f64].to_dlpack().unwrap())
        .unwrap();
    batch
}

#[test]
fn a_strict_import_names_every_problem_at_once() {
    // An import knows the fields of structs; the length of a `Vec` and the keys of a
    // map come from the batch, so `blocks.0.mlp.1.weight` (the only tensor of that
    // item) and `blocks.1.norms.ln2` are not missing there: the values are shorter.
    let err = Transformer::from_dlpack(damaged_batch()).unwrap_err();
    let Error::StateDict {
        missing,
        unexpected,
        failed,
    } = &err
    else {
        panic!("expected Error::StateDict, got {err:?}");
    };
    assert_eq!(missing, &["embed"]);
    assert_eq!(unexpected, &["decoder.weight", "blocks.1.extra"]);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        matches!(&failed[0], Error::Tensor { name, .. } if name == "head.bias"),
        "{failed:?}"
    );
    assert_eq!(
        failed[0].root(),
        &Error::DtypeMismatch {
            expected: DataType::F32,
            found: DataType::F64
        }
    );
    // One message names all four.
    let message = err.to_string();
    for name in ["embed", "decoder.weight", "blocks.1.extra", "head.bias"] {
        assert!(message.contains(name), "{name} not in {message}");
    }
}

#[test]
fn a_load_fills_the_existing_arrays_in_place() {
    let source = transformer();
    let mut target = transformer();
    target.embed.fill(0.0);
    target.blocks[1].mlp[0].weight.fill(-1.0);
    target.step = 7;
    let before = pointers(&target);
    target
        .load_dlpack(source.clone().to_dlpack().unwrap())
        .unwrap();
    assert_eq!(target.embed, source.embed);
    assert_eq!(target.blocks, source.blocks);
    assert_eq!(
        pointers(&target),
        before,
        "the same buffers, filled in place"
    );
    assert_eq!(target.step, 7, "skipped fields are left alone");
}

#[test]
fn a_strict_load_reports_every_problem_and_loads_the_rest() {
    let mut target = transformer();
    target.blocks[0].attn.weight.fill(0.0);
    let err = target.load_dlpack(damaged_batch()).unwrap_err();
    let Error::StateDict {
        missing,
        unexpected,
        failed,
    } = &err
    else {
        panic!("expected Error::StateDict, got {err:?}");
    };
    assert_eq!(
        missing,
        &["embed", "blocks.0.mlp.1.weight", "blocks.1.norms.ln2"]
    );
    assert_eq!(unexpected, &["decoder.weight", "blocks.1.extra"]);
    assert_eq!(failed.len(), 1);
    // What fitted was loaded.
    assert_eq!(
        target.blocks[0].attn.weight,
        transformer().blocks[0].attn.weight
    );
}

#[test]
fn a_lenient_load_reports_missing_and_unexpected_names() {
    let mut batch = transformer().to_dlpack().unwrap();
    for name in ["embed", "blocks.0.attn.bias", "head.weight"] {
        batch.remove(name).unwrap();
    }
    for name in ["extra.a", "extra.b"] {
        batch
            .insert(name, array![1.0f32].to_dlpack().unwrap())
            .unwrap();
    }
    let mut target = transformer();
    target.blocks[1].attn.weight.fill(0.0);
    let report = target.load_dlpack_lenient(batch).unwrap();
    assert_eq!(
        report.missing,
        ["embed", "blocks.0.attn.bias", "head.weight"]
    );
    assert_eq!(report.unexpected, ["extra.a", "extra.b"]);
    assert_eq!(
        target.blocks[1].attn.weight,
        transformer().blocks[1].attn.weight
    );
    // Three missing and two unexpected, strictly: one error naming all five.
    let mut batch = transformer().to_dlpack().unwrap();
    for name in ["embed", "blocks.0.attn.bias", "head.weight"] {
        batch.remove(name).unwrap();
    }
    for name in ["extra.a", "extra.b"] {
        batch
            .insert(name, array![1.0f32].to_dlpack().unwrap())
            .unwrap();
    }
    let message = transformer().load_dlpack(batch).unwrap_err().to_string();
    for name in [
        "embed",
        "blocks.0.attn.bias",
        "head.weight",
        "extra.a",
        "extra.b",
    ] {
        assert!(message.contains(name), "{name} not in {message}");
    }
}

#[test]
fn a_load_checks_shapes() {
    let mut target = linear(3, 2, 0.0, true);
    let source = linear(4, 2, 1.0, true);
    let err = target.load_dlpack(source.to_dlpack().unwrap()).unwrap_err();
    let err = only_failure(&err);
    assert!(matches!(err, Error::Tensor { name, .. } if name == "weight"));
    assert_eq!(
        err.root(),
        &Error::ShapeMismatch {
            expected: vec![2, 3],
            found: vec![2, 4]
        }
    );
    // The bias fitted and was loaded; the weight was left alone.
    assert_eq!(target.bias, linear(4, 2, 1.0, true).bias);
    assert_eq!(target.weight, linear(3, 2, 0.0, true).weight);
}

/// A type that does not implement the traits, exchanged through a module.
#[derive(Debug, Clone, PartialEq)]
struct Celsius(Vec<f32>);

mod celsius {
    use dlpack_core::{FromDLPack, Result, TensorBatch, ToDLPack};
    use ndarray::Array1;

    use super::Celsius;

    pub(super) fn to_dlpack_into(
        value: Celsius,
        prefix: &str,
        batch: &mut TensorBatch,
    ) -> Result<()> {
        Array1::from(value.0).to_dlpack_into(prefix, batch)
    }

    pub(super) fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Celsius> {
        Ok(Celsius(
            Array1::<f32>::from_dlpack_in(prefix, batch)?.to_vec(),
        ))
    }
}

#[derive(Debug, Clone, PartialEq, ToDLPack, FromDLPack)]
struct Weather {
    #[dlpack(with = "celsius", rename = "temperature")]
    temp: Celsius,
    wind: Array1<f32>,
}

#[test]
fn with_exchanges_a_field_through_a_module() {
    let weather = Weather {
        temp: Celsius(vec![20.5, 21.0]),
        wind: array![3.0, 4.0],
    };
    let batch = weather.clone().to_dlpack().unwrap();
    assert_eq!(batch.names().collect::<Vec<_>>(), ["temperature", "wind"]);
    assert_eq!(Weather::from_dlpack(batch).unwrap(), weather);
    let mut target = Weather {
        temp: Celsius(vec![]),
        wind: array![0.0, 0.0],
    };
    let report = target
        .load_dlpack_lenient(weather.clone().to_dlpack().unwrap())
        .unwrap();
    assert!(report.is_empty());
    assert_eq!(target, weather);
}
