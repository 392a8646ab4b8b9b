//! Checkpoints as published: `safetensors::Checkpoint` over a file, an index or a
//! folder, `TensorBatch::write_checkpoint` in `save_pretrained`'s layout, the index as
//! the allowlist, loads that read only what a type selects (`FromDLPack::select_in`,
//! followed by the derive and every container), float conversion on load, parallel
//! reads, and every broken checkpoint a typed error naming the file and the tensor.
#![cfg(all(
    feature = "safetensors",
    feature = "ndarray",
    feature = "derive",
    feature = "half"
))]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use dlpack_core::safetensors::{Checkpoint, ReadOptions};
use dlpack_core::{
    DataType, Error, Expected, FromDLPack, ManagedTensor, Selection, TensorBatch, ToDLPack,
};
use half::{bf16, f16};
use ndarray::{Array1, Array2, ArrayD, Ix1, Ix2};

fn folder() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[derive(ToDLPack, FromDLPack, Debug, PartialEq, Clone)]
struct Linear<T> {
    weight: Array2<T>,
    bias: Array1<T>,
}

#[derive(ToDLPack, FromDLPack, Debug, PartialEq, Clone)]
struct Model<T> {
    embed: Array2<T>,
    layers: Vec<Linear<T>>,
    head: Option<Linear<T>>,
}

fn linear(n: usize, seed: f32) -> Linear<f32> {
    Linear {
        weight: Array2::from_shape_fn((n, n), |(i, j)| seed + (i * n + j) as f32 / 7.0),
        bias: Array1::from_shape_fn(n, |i| -seed - i as f32),
    }
}

fn model(layers: usize, n: usize) -> Model<f32> {
    Model {
        embed: Array2::from_shape_fn((5, n), |(i, j)| (i + j) as f32 * 0.5),
        layers: (0..layers).map(|l| linear(n, l as f32)).collect(),
        head: Some(linear(n, 100.0)),
    }
}

fn to_bf16(model: &Model<f32>) -> Model<bf16> {
    let lin = |l: &Linear<f32>| Linear {
        weight: l.weight.mapv(bf16::from_f32),
        bias: l.bias.mapv(bf16::from_f32),
    };
    Model {
        embed: model.embed.mapv(bf16::from_f32),
        layers: model.layers.iter().map(lin).collect(),
        head: model.head.as_ref().map(lin),
    }
}

/// A checkpoint of `model` in `dir`, in shards of at most `max` bytes, `{"format":
/// "pt"}` in each.
fn save<T>(model: T, dir: &Path, max: u64)
where
    T: ToDLPack<Output = TensorBatch>,
{
    let mut batch = model.to_dlpack().unwrap();
    batch.metadata_mut().insert("format".into(), "pt".into());
    batch.write_checkpoint(dir, max).unwrap();
}

/// The missing, unexpected and failed lists of an `Error::StateDict`.
fn state_dict(err: &Error) -> (&[String], &[String], &[Error]) {
    match err {
        Error::StateDict {
            missing,
            unexpected,
            failed,
        } => (missing, unexpected, failed),
        other => panic!("expected Error::StateDict, got {other:?}"),
    }
}

fn files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

fn index(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("model.safetensors.index.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_derived_model_round_trips_through_shards() {
    let dir = folder();
    let original = model(3, 8);
    save(original.clone(), dir.path(), 600);
    let names = files(dir.path());
    assert!(names.contains("model.safetensors.index.json"), "{names:?}");
    assert!(!names.contains("model.safetensors"));
    let shards: Vec<&String> = names.iter().filter(|n| n.starts_with("model-")).collect();
    let n = shards.len();
    assert!(n > 2, "{names:?}");
    for (k, shard) in shards.iter().enumerate() {
        assert_eq!(**shard, format!("model-{:05}-of-{n:05}.safetensors", k + 1));
    }

    // The index as `save_pretrained` writes it: the tensors' bytes, every tensor's
    // shard, keys sorted.
    let index = index(dir.path());
    let total: usize = original
        .clone()
        .to_dlpack()
        .unwrap()
        .iter()
        .map(|(_, t)| t.num_elements().unwrap() * 4)
        .sum();
    assert_eq!(index["metadata"]["total_size"], total as u64);
    let weight_map = index["weight_map"].as_object().unwrap();
    assert_eq!(weight_map.len(), 2 + 2 * 3 + 1);
    let keys: Vec<&String> = weight_map.keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);

    // Opened from the folder, the index or ... as a whole.
    for path in [
        dir.path().to_owned(),
        dir.path().join("model.safetensors.index.json"),
    ] {
        let checkpoint = Checkpoint::open(&path).unwrap();
        assert_eq!(checkpoint.len(), weight_map.len());
        assert_eq!(checkpoint.shards().len(), n);
        assert_eq!(checkpoint.metadata()["format"], "pt");
        assert_eq!(checkpoint.index_metadata()["total_size"], total.to_string());
        let loaded: Model<f32> = checkpoint.read().unwrap();
        assert_eq!(loaded, original);
        let weight = checkpoint.tensor("layers.1.weight").unwrap();
        assert_eq!(weight.dtype(), DataType::F32);
        assert_eq!(weight.shape(), &[8, 8]);
        assert_eq!(weight.byte_len(), 256);
        assert!(weight.shard().starts_with(dir.path()));
        assert!(checkpoint.tensor("layers.9.weight").is_none());
    }
}

#[test]
fn shards_keep_tensors_whole_and_in_batch_order() {
    let dir = folder();
    let tensor = |n: usize| ManagedTensor::from_buffer(vec![1u8; n], 0, &[n], &[1]).unwrap();
    let batch = TensorBatch::try_from(vec![
        ("a", tensor(40)),
        ("b", tensor(40)),
        ("c", tensor(30)),
        ("big", tensor(500)),
        ("d", tensor(10)),
    ])
    .unwrap();
    batch.write_checkpoint(dir.path(), 100).unwrap();
    let index = index(dir.path());
    let shard = |name: &str| index["weight_map"][name].as_str().unwrap().to_owned();
    // 40 + 40 fit 100, 30 more would not; the 500 takes a shard of its own.
    assert_eq!(shard("a"), "model-00001-of-00004.safetensors");
    assert_eq!(shard("b"), "model-00001-of-00004.safetensors");
    assert_eq!(shard("c"), "model-00002-of-00004.safetensors");
    assert_eq!(shard("big"), "model-00003-of-00004.safetensors");
    assert_eq!(shard("d"), "model-00004-of-00004.safetensors");
    assert_eq!(index["metadata"]["total_size"], 620);
}

#[test]
fn a_checkpoint_that_fits_is_one_file_and_saves_leave_nothing_stale() {
    let dir = folder();
    std::fs::write(dir.path().join("config.json"), "{}").unwrap();
    std::fs::write(dir.path().join("model-00009-of-00010.safetensors"), "old").unwrap();
    // Sharded first...
    save(model(4, 8), dir.path(), 600);
    let sharded = files(dir.path());
    assert!(sharded.contains("model.safetensors.index.json"));
    assert!(
        !sharded.contains("model-00009-of-00010.safetensors"),
        "{sharded:?}"
    );
    // ...then smaller, and fitting: one file, no index, no shard left.
    save(model(1, 8), dir.path(), 1 << 20);
    assert_eq!(
        files(dir.path()),
        BTreeSet::from(["config.json".to_owned(), "model.safetensors".to_owned()])
    );
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.shards().len(), 1);
    assert!(checkpoint.index_metadata().is_empty());
    assert_eq!(checkpoint.read::<Model<f32>>().unwrap(), model(1, 8));
    // And sharded again, into fewer shards than an earlier save: none of those left.
    save(model(6, 8), dir.path(), 300);
    let many = files(dir.path()).len();
    save(model(6, 8), dir.path(), 900);
    let fewer = files(dir.path());
    assert!(fewer.len() < many, "{fewer:?}");
    assert!(!fewer.contains("model.safetensors"));
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.shards().len() + 2, fewer.len());
    assert_eq!(checkpoint.read::<Model<f32>>().unwrap(), model(6, 8));
}

#[test]
fn a_single_file_is_a_checkpoint_too() {
    let dir = folder();
    let path = dir.path().join("weights.safetensors");
    let mut batch = model(2, 4).to_dlpack().unwrap();
    batch.metadata_mut().insert("format".into(), "pt".into());
    batch.write_safetensors(&path).unwrap();
    let checkpoint = Checkpoint::open(&path).unwrap();
    assert_eq!(checkpoint.path(), path);
    assert_eq!(checkpoint.metadata()["format"], "pt");
    assert_eq!(checkpoint.read::<Model<f32>>().unwrap(), model(2, 4));
    // A folder with neither file.
    let err = Checkpoint::open(dir.path()).unwrap_err();
    let Error::Io { path, kind, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (path.as_path(), *kind),
        (dir.path(), std::io::ErrorKind::NotFound)
    );
}

#[test]
fn owned_loads_keep_the_buffers_they_read_into() {
    let dir = folder();
    save(model(2, 16), dir.path(), 2000);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let batch = checkpoint.read_where(|_| true).unwrap();
    let pointers: HashMap<String, usize> = batch
        .iter()
        .map(|(name, t)| (name.to_owned(), t.data_ptr() as usize))
        .collect();
    for (_, tensor) in batch.iter() {
        assert!(tensor.is_exclusive() && !tensor.is_read_only());
    }
    let loaded = Model::<f32>::from_dlpack(batch).unwrap();
    assert_eq!(
        pointers["layers.1.weight"],
        loaded.layers[1].weight.as_ptr() as usize
    );
    assert_eq!(pointers["embed"], loaded.embed.as_ptr() as usize);
}

#[test]
fn read_where_reads_what_the_filter_accepts_in_index_order() {
    let dir = folder();
    save(model(3, 4), dir.path(), 200);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let batch = checkpoint
        .read_where(|name| name.ends_with(".bias"))
        .unwrap();
    let names: Vec<&str> = batch.names().collect();
    assert_eq!(
        names,
        [
            "head.bias",
            "layers.0.bias",
            "layers.1.bias",
            "layers.2.bias"
        ]
    );
    assert_eq!(batch.metadata()["format"], "pt");
    let bias = batch
        .get("layers.2.bias")
        .unwrap()
        .as_array::<f32, Ix1>()
        .unwrap();
    assert_eq!(bias, model(3, 4).layers[2].bias);
}

// What a type selects, over the names alone.

fn selected<T: FromDLPack>(names: &[&str]) -> (Vec<String>, Vec<String>) {
    let names: BTreeSet<String> = names.iter().map(|s| (*s).to_owned()).collect();
    let mut selection = Selection::new(&names);
    T::select_in("", &mut selection);
    let taken = selection.taken().iter().map(|(n, _)| n.clone()).collect();
    (taken, selection.missing().to_vec())
}

#[derive(FromDLPack)]
struct Selective {
    #[dlpack(rename = "w")]
    weight: Array2<f32>,
    #[dlpack(flatten)]
    inner: Inner,
    maybe: Option<Array1<f32>>,
    items: Vec<Array1<f32>>,
    map: BTreeMap<String, Array1<f32>>,
    boxed: Box<Array1<f32>>,
    #[dlpack(with = "whole")]
    custom: TensorBatch,
    #[dlpack(skip)]
    _skipped: u32,
}

#[derive(FromDLPack)]
struct Inner {
    scale: Array1<f32>,
}

mod whole {
    use dlpack_core::{FromDLPack, Result, TensorBatch, ToDLPack};
    pub(crate) fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<TensorBatch> {
        TensorBatch::from_dlpack_in(prefix, batch)
    }
    #[allow(dead_code)]
    pub(crate) fn to_dlpack_into(
        value: TensorBatch,
        prefix: &str,
        batch: &mut TensorBatch,
    ) -> Result<()> {
        value.to_dlpack_into(prefix, batch)
    }
}

#[test]
fn a_selection_follows_rename_flatten_containers_and_with() {
    let all = [
        "w",
        "scale",
        "maybe",
        "items.0",
        "items.1",
        "items.3",
        "map.a",
        "map.b",
        "boxed",
        "custom.x",
        "custom.y.z",
        "customs",
        "other",
    ];
    let (taken, missing) = selected::<Selective>(&all);
    assert_eq!(
        taken,
        [
            "w",
            "scale",
            "maybe",
            "items.0",
            "items.1",
            "map.a",
            "map.b",
            "boxed",
            "custom.x",
            "custom.y.z"
        ]
    );
    assert!(missing.is_empty());
    // An absent option takes nothing; a missing leaf is missing.
    let (taken, missing) = selected::<Selective>(&["scale", "boxed"]);
    assert_eq!(taken, ["scale", "boxed"]);
    assert_eq!(missing, ["w"]);
    // Arrays expect their element type and rank; a tensor anything.
    let names: BTreeSet<String> = ["x".to_owned()].into();
    let mut selection = Selection::new(&names);
    <Array2<f32>>::select_in("x", &mut selection);
    <ArrayD<f32>>::select_in("x", &mut selection);
    assert_eq!(
        selection.taken(),
        [("x".to_owned(), Expected::new(Some(DataType::F32), Some(2)))]
    );
    let mut selection = Selection::new(&names);
    ManagedTensor::select_in("x", &mut selection);
    assert_eq!(selection.taken(), [("x".to_owned(), Expected::ANY)]);
}

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
    // bfloat16 tensors for float32 fields: errors naming each tensor, as today.
    let err = checkpoint.read::<Model<f32>>().unwrap_err();
    let (_, _, failed) = state_dict(&err);
    assert_eq!(failed.len(), 2 + 2 * 2 + 1, "{err}");
    assert!(failed.iter().all(|e| matches!(
        e,
        Error::Tensor { error, .. }
            if **error == Error::DtypeMismatch { expected: DataType::F32, found: DataType::BF16 }
    )));
    assert!(err.to_string().contains("tensor `embed`"), "{err}");

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
fn floats_convert_on_load_only_when_asked() {
    let dir = folder();
    let original = model(2, 6);
    let stored = to_bf16(&original);
    save(stored.clone(), dir.path(), 300);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    // As stored.
    assert_eq!(checkpoint.read::<Model<bf16>>().unwrap(), stored);
    // bfloat16 to float32: exact, bit for bit.
    let options = ReadOptions::new().convert_floats(DataType::F32);
    let wide: Model<f32> = checkpoint.read_with(&options).unwrap();
    assert_eq!(wide.embed, stored.embed.mapv(bf16::to_f32));
    assert_eq!(
        wide.layers[1].weight,
        stored.layers[1].weight.mapv(bf16::to_f32)
    );
    // To float64 and float16 too, and back from float32 to bfloat16.
    let to = |dtype| ReadOptions::new().convert_floats(dtype);
    let f64s: Model<f64> = checkpoint.read_with(&to(DataType::F64)).unwrap();
    assert_eq!(
        f64s.layers[0].bias,
        stored.layers[0].bias.mapv(bf16::to_f64)
    );
    let halves: Model<f16> = checkpoint.read_with(&to(DataType::F16)).unwrap();
    assert_eq!(
        halves.head.as_ref().unwrap().weight,
        stored
            .head
            .as_ref()
            .unwrap()
            .weight
            .mapv(|v| f16::from_f32(v.to_f32()))
    );
    let dir32 = folder();
    save(original.clone(), dir32.path(), 300);
    let narrow: Model<bf16> = Checkpoint::open(dir32.path())
        .unwrap()
        .read_with(&ReadOptions::new().convert_floats(DataType::BF16))
        .unwrap();
    assert_eq!(narrow, stored);
    // Integers are read as they are; a conversion to a non-float is an error.
    let err = checkpoint
        .read_with::<Model<f32>>(&ReadOptions::new().convert_floats(DataType::I32))
        .unwrap_err();
    assert_eq!(
        err,
        Error::UnsupportedDtype {
            dtype: DataType::I32
        }
    );
}

#[test]
fn integers_and_bools_are_not_converted() {
    let dir = folder();
    let batch = TensorBatch::try_from(vec![
        (
            "ids",
            ManagedTensor::from_buffer(vec![1i64, 2, 3], 0, &[3], &[1]).unwrap(),
        ),
        (
            "mask",
            ManagedTensor::from_buffer(vec![true, false], 0, &[2], &[1]).unwrap(),
        ),
        (
            "x",
            ManagedTensor::from_buffer(vec![1.5f64, -2.0], 0, &[2], &[1]).unwrap(),
        ),
    ])
    .unwrap();
    batch.write_checkpoint(dir.path(), 16).unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let options = ReadOptions::new().convert_floats(DataType::F32);
    let read = checkpoint.read_where_with(|_| true, &options).unwrap();
    assert_eq!(read.get("ids").unwrap().dtype(), DataType::I64);
    assert_eq!(
        read.get("mask").unwrap().as_array::<bool, Ix1>().unwrap(),
        ndarray::arr1(&[true, false])
    );
    assert_eq!(
        read.get("x").unwrap().as_array::<f32, Ix1>().unwrap(),
        ndarray::arr1(&[1.5f32, -2.0])
    );
}

#[test]
#[cfg_attr(miri, ignore = "tens of megabytes: too slow to interpret")]
fn large_tensors_are_read_by_several_threads_alike() {
    let dir = folder();
    // 3 M floats (12 MB, more than one chunk) and many small tensors.
    let big = Array1::from_shape_fn(3 << 20, |i| (i % 1000) as f32 - 500.5);
    let mut batch = TensorBatch::new();
    batch
        .insert("big", big.clone().to_dlpack().unwrap())
        .unwrap();
    for i in 0..50 {
        batch
            .insert(
                format!("small.{i}"),
                Array1::from_elem(7, i as f32).to_dlpack().unwrap(),
            )
            .unwrap();
    }
    batch.write_checkpoint(dir.path(), 1 << 20).unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    for threads in [1, 2, 3, 8] {
        let options = ReadOptions::new().threads(threads);
        let read = checkpoint.read_where_with(|_| true, &options).unwrap();
        assert_eq!(
            read.get("big").unwrap().as_array::<f32, Ix1>().unwrap(),
            big
        );
        assert_eq!(
            read.get("small.33")
                .unwrap()
                .as_array::<f32, Ix1>()
                .unwrap()[6],
            33.0
        );
        let converted = checkpoint
            .read_where_with(|n| n == "big", &options.convert_floats(DataType::BF16))
            .unwrap();
        let halves = converted
            .get("big")
            .unwrap()
            .as_array::<bf16, Ix1>()
            .unwrap();
        assert_eq!(halves, big.mapv(bf16::from_f32));
    }
}

#[test]
#[cfg_attr(miri, ignore = "maps a file")]
fn a_mapped_checkpoint_takes_each_tensor_from_its_shard() {
    let dir = folder();
    save(model(3, 8), dir.path(), 500);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    // SAFETY: nothing modifies the files while the batch lives.
    let batch = unsafe { checkpoint.map() }.unwrap();
    assert_eq!(
        batch.names().collect::<Vec<_>>(),
        checkpoint.names().collect::<Vec<_>>()
    );
    assert_eq!(batch.metadata()["format"], "pt");
    let mut loaded = Model::<f32>::from_dlpack(batch).unwrap();
    assert_eq!(loaded, model(3, 8));
    // Writable, private: the files keep their values.
    loaded.layers[0].weight[[0, 0]] = 1e9;
    let again: Model<f32> = Checkpoint::open(dir.path()).unwrap().read().unwrap();
    assert_eq!(again, model(3, 8));
}

// The index as the allowlist, and broken checkpoints.

/// A folder with two shards and an index written by hand: `a` in shard 1, `b` in
/// shard 2; shard 2 also holds an unlisted `a` of other values.
fn hand_made(dir: &Path, index: &str) {
    let tensor = |v: f32| Array1::from_elem(4, v).to_dlpack().unwrap();
    let one = TensorBatch::try_from(vec![("a", tensor(1.0))]).unwrap();
    one.write_safetensors(dir.join("one.safetensors")).unwrap();
    let two = TensorBatch::try_from(vec![("b", tensor(2.0)), ("a", tensor(-1.0))]).unwrap();
    two.write_safetensors(dir.join("two.safetensors")).unwrap();
    std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
}

const GOOD: &str = r#"{"metadata": {"total_size": 32}, "weight_map": {"a": "one.safetensors", "b": "two.safetensors"}}"#;

#[test]
fn the_index_is_the_allowlist() {
    let dir = folder();
    hand_made(dir.path(), GOOD);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.names().collect::<Vec<_>>(), ["a", "b"]);
    let mut batches = vec![checkpoint.read_where(|_| true).unwrap()];
    if !cfg!(miri) {
        // SAFETY: nothing modifies the files while the batch lives.
        batches.push(unsafe { checkpoint.map() }.unwrap());
    }
    for batch in batches {
        assert_eq!(batch.len(), 2);
        // `a` from the shard the index names, never the other shard's `a`.
        let a = batch.get("a").unwrap().as_array::<f32, Ix1>().unwrap();
        assert_eq!(a, ndarray::arr1(&[1.0f32; 4]));
    }
    // Unlisted tensors do not exist: listing only `b` hides shard one entirely.
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        r#"{"weight_map": {"b": "two.safetensors"}}"#,
    )
    .unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.names().collect::<Vec<_>>(), ["b"]);
    assert_eq!(checkpoint.shards().len(), 1);
}

/// The error of opening `dir` with `index`, and its text.
fn refused(index: &str) -> (Error, String) {
    let dir = folder();
    hand_made(dir.path(), index);
    let err = Checkpoint::open(dir.path()).unwrap_err();
    let text = err.to_string();
    (err, text)
}

#[test]
fn broken_indexes_are_typed_errors_naming_the_file_and_tensor() {
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("not json", None, "not valid JSON"),
        (r#"{"metadata": {}}"#, None, "no `weight_map`"),
        (r#"{"weight_map": {"a": 7}}"#, Some("a"), "its shard is 7"),
        (
            r#"{"weight_map": {"a": null}}"#,
            Some("a"),
            "its shard is null",
        ),
        (
            r#"{"weight_map": {"a": "../one.safetensors"}}"#,
            Some("a"),
            "path separator",
        ),
        (
            r#"{"weight_map": {"a": "/etc/passwd"}}"#,
            Some("a"),
            "path separator",
        ),
        (
            r#"{"weight_map": {"a": ".."}}"#,
            Some("a"),
            "names a folder",
        ),
        (r#"{"weight_map": {"a": ""}}"#, Some("a"), "is empty"),
        (
            r#"{"weight_map": {"a": "one.safetensors", "a": "two.safetensors"}}"#,
            None,
            "the tensor `a` appears twice",
        ),
        (
            r#"{"weight_map": {"b": "one.safetensors"}}"#,
            Some("b"),
            "which does not hold it",
        ),
        (
            r#"{"weight_map": {}, "metadata": []}"#,
            None,
            "`metadata` to be an object",
        ),
    ];
    for &(index, tensor, reason) in cases {
        let (err, text) = refused(index);
        let Error::InvalidFile {
            path,
            tensor: named,
            ..
        } = &err
        else {
            panic!("{index}: {err:?}")
        };
        assert!(
            path.ends_with("model.safetensors.index.json"),
            "{index}: {text}"
        );
        assert_eq!(named.as_deref(), tensor, "{index}: {text}");
        assert!(text.contains(reason), "{index}: {text}");
    }
}

#[test]
fn a_shard_outside_the_folder_is_never_opened() {
    // A real file one level up, under the name the index gives: refused by name.
    let outer = folder();
    let dir = outer.path().join("checkpoint");
    std::fs::create_dir(&dir).unwrap();
    let batch = TensorBatch::try_from(vec![(
        "a",
        Array1::from_elem(2, 5.0f32).to_dlpack().unwrap(),
    )])
    .unwrap();
    batch
        .write_safetensors(outer.path().join("secret.safetensors"))
        .unwrap();
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        r#"{"weight_map": {"a": "../secret.safetensors"}}"#,
    )
    .unwrap();
    let err = Checkpoint::open(&dir).unwrap_err();
    assert!(
        err.to_string()
            .contains("not a file name inside the index's folder"),
        "{err}"
    );
}

#[test]
fn broken_shards_are_typed_errors_naming_the_shard_and_tensor() {
    // A shard missing: the I/O error of the shard, in the tensor the index places there.
    let (err, text) = refused(r#"{"weight_map": {"a": "gone.safetensors"}}"#);
    let Error::Tensor { name, error } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(name, "a");
    assert!(
        matches!(&**error, Error::Io { path, kind: std::io::ErrorKind::NotFound, .. } if path.ends_with("gone.safetensors")),
        "{text}"
    );

    // A truncated shard, and one whose header is not JSON.
    for damage in ["truncate", "garble"] {
        let dir = folder();
        hand_made(dir.path(), GOOD);
        let shard = dir.path().join("two.safetensors");
        let mut bytes = std::fs::read(&shard).unwrap();
        match damage {
            "truncate" => bytes.truncate(bytes.len() - 3),
            _ => bytes[9] = b'!',
        }
        std::fs::write(&shard, &bytes).unwrap();
        let err = Checkpoint::open(dir.path()).unwrap_err();
        let Error::Tensor { name, error } = &err else {
            panic!("{damage}: {err:?}")
        };
        assert_eq!(name, "b", "{damage}");
        let Error::InvalidFile { path, .. } = &**error else {
            panic!("{damage}: {err:?}")
        };
        assert_eq!(path, &shard, "{damage}");
    }

    // A shard cut short, or grown, after it was opened: the read refuses it, naming
    // the shard (its header no longer describes it); the map too.
    for change in [-20i64, 20] {
        let dir = folder();
        hand_made(dir.path(), GOOD);
        let checkpoint = Checkpoint::open(dir.path()).unwrap();
        let shard = dir.path().join("two.safetensors");
        let len = std::fs::metadata(&shard).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&shard)
            .unwrap()
            .set_len(len.checked_add_signed(change).unwrap())
            .unwrap();
        let err = checkpoint.read_where(|_| true).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidFile { path, reason, .. }
                if *path == shard && reason.contains("changed since it was opened")),
            "{change}: {err}"
        );
        // (Miri cannot map files.)
        if !cfg!(miri) {
            // SAFETY: the test's own files, which nothing modifies while mapped.
            let err = unsafe { checkpoint.map() }.unwrap_err();
            assert!(
                matches!(&err, Error::InvalidFile { path, .. } if *path == shard),
                "{change}: {err}"
            );
        }
        // The other shard's tensors still read.
        let batch = checkpoint.read_where(|name| name == "a").unwrap();
        assert_eq!(batch.len(), 1);
    }
}

#[test]
fn checkpoints_cannot_be_written_with_tensors_a_file_refuses() {
    let dir = folder();
    let batch = TensorBatch::try_from(vec![
        ("fine", Array1::from_elem(3, 1.0f32).to_dlpack().unwrap()),
        (
            "__metadata__",
            Array1::from_elem(3, 1.0f32).to_dlpack().unwrap(),
        ),
    ])
    .unwrap();
    let err = batch
        .write_checkpoint(dir.path().join("out"), 4)
        .unwrap_err();
    assert!(err.to_string().contains("__metadata__"), "{err}");
    // Nothing was written, not even the folder.
    assert!(!dir.path().join("out").exists());
}

#[test]
fn a_model_of_arrays_of_any_rank_loads_with_dynamic_dimensions() {
    #[derive(FromDLPack)]
    struct Dynamic {
        embed: ArrayD<f32>,
        layers: Vec<BTreeMap<String, ArrayD<f32>>>,
    }
    let dir = folder();
    save(model(2, 3), dir.path(), 100);
    let (value, report) = Checkpoint::open(dir.path())
        .unwrap()
        .read_lenient::<Dynamic>()
        .unwrap();
    assert_eq!(value.embed.shape(), &[5, 3]);
    assert_eq!(value.layers.len(), 2);
    assert_eq!(
        value.layers[1]["weight"]
            .view()
            .into_dimensionality::<Ix2>()
            .unwrap(),
        model(2, 3).layers[1].weight
    );
    assert_eq!(report.unexpected, ["head.bias", "head.weight"]);
}

// What a load gives is what `from_dlpack_in` takes from a batch of every tensor of the
// checkpoint, however much of it the type takes.

#[derive(FromDLPack, Debug)]
struct OptLayer {
    w: Option<Array1<f32>>,
}

#[derive(FromDLPack, Debug)]
struct OptLayers {
    layers: Vec<OptLayer>,
}

#[derive(FromDLPack, Debug)]
struct OptBlocks {
    blocks: BTreeMap<String, OptLayer>,
}

#[derive(FromDLPack, Debug)]
struct OptExtra {
    extra: Option<OptLayer>,
}

/// A single-file checkpoint of float32 tensors of two elements under `names`.
fn checkpoint_of(dir: &Path, names: &[&str]) -> Checkpoint {
    let tensor = || Array1::from_elem(2, 1.0f32).to_dlpack().unwrap();
    let batch =
        TensorBatch::try_from(names.iter().map(|n| (*n, tensor())).collect::<Vec<_>>()).unwrap();
    batch.write_checkpoint(dir, 1 << 30).unwrap();
    Checkpoint::open(dir).unwrap()
}

#[test]
fn a_part_loads_as_the_whole_batch_would_give_it() {
    // Layer 1, map entry `b` and the option hold only tensors the types do not take (a
    // hybrid model's other kind of layer): they still exist, as they do in a batch of
    // every tensor.
    let dir = folder();
    let checkpoint = checkpoint_of(dir.path(), &["layers.0.w", "layers.1.other", "layers.2.w"]);
    let reference: OptLayers = checkpoint.read_where(|_| true).unwrap().extract().unwrap();
    let (loaded, report) = checkpoint.read_lenient::<OptLayers>().unwrap();
    assert_eq!(loaded.layers.len(), 3);
    assert_eq!(loaded.layers.len(), reference.layers.len());
    assert!(loaded.layers[1].w.is_none() && loaded.layers[2].w.is_some());
    assert_eq!(report.unexpected, ["layers.1.other"]);

    let dir = folder();
    let checkpoint = checkpoint_of(dir.path(), &["blocks.a.w", "blocks.b.other", "blocks.c.w"]);
    let reference: OptBlocks = checkpoint.read_where(|_| true).unwrap().extract().unwrap();
    let (loaded, _) = checkpoint.read_lenient::<OptBlocks>().unwrap();
    let keys = |b: &OptBlocks| b.blocks.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&loaded), ["a", "b", "c"]);
    assert_eq!(keys(&loaded), keys(&reference));

    let dir = folder();
    let checkpoint = checkpoint_of(dir.path(), &["extra.other"]);
    let (loaded, report) = checkpoint.read_lenient::<OptExtra>().unwrap();
    assert!(loaded.extra.is_some_and(|e| e.w.is_none()));
    assert_eq!(report.unexpected, ["extra.other"]);
}

#[derive(FromDLPack, Debug)]
struct HeadW {
    #[dlpack(flatten)]
    inner: InnerHead,
    head: Option<ManagedTensor>,
}

#[derive(FromDLPack, Debug)]
struct InnerHead {
    head: OnlyW,
}

#[derive(FromDLPack, Debug)]
struct OnlyW {
    w: Array1<f32>,
}

#[test]
fn a_tensor_taken_by_an_earlier_field_is_gone_for_the_later_ones() {
    // `inner.head.w` takes `head.w`; then no tensor is under `head`, and the option is
    // `None`, as `from_dlpack` gives it.
    let dir = folder();
    let checkpoint = checkpoint_of(dir.path(), &["head.w"]);
    let reference = HeadW::from_dlpack(checkpoint.read_where(|_| true).unwrap()).unwrap();
    let loaded: HeadW = checkpoint.read().unwrap();
    assert!(reference.head.is_none() && loaded.head.is_none());
    assert_eq!(loaded.inner.head.w, ndarray::arr1(&[1.0f32, 1.0]));
}

#[test]
fn a_batch_field_selects_what_it_takes() {
    #[derive(FromDLPack)]
    struct WithBatch {
        extra: TensorBatch,
    }
    // A batch field takes `extra.*`, not `extra` itself: that one is not read.
    let dir = folder();
    let checkpoint = checkpoint_of(dir.path(), &["extra", "extra.a"]);
    let names: BTreeSet<String> = checkpoint.names().map(str::to_owned).collect();
    let mut selection = Selection::new(&names);
    WithBatch::select_in("", &mut selection);
    assert_eq!(selection.taken(), [("extra.a".to_owned(), Expected::ANY)]);
    let (value, report) = checkpoint.read_lenient::<WithBatch>().unwrap();
    assert_eq!(value.extra.names().collect::<Vec<_>>(), ["a"]);
    assert_eq!(report.unexpected, ["extra"]);
}

/// A type whose `select_in` misses what its `from_dlpack_in` takes.
#[derive(Debug)]
struct Sneaky(#[allow(dead_code)] ManagedTensor);

impl FromDLPack for Sneaky {
    type Input = TensorBatch;
    fn from_dlpack(input: TensorBatch) -> dlpack_core::Result<Self> {
        let mut input = input;
        Self::from_dlpack_in("", &mut input)
    }
    fn from_dlpack_in(_: &str, batch: &mut TensorBatch) -> dlpack_core::Result<Self> {
        let name = batch.names().next().unwrap_or_default().to_owned();
        batch
            .remove(&name)
            .map(Sneaky)
            .ok_or(Error::MissingTensor { name })
    }
    fn select_in(_: &str, _: &mut Selection<'_>) {}
}

#[test]
fn a_type_that_takes_what_it_did_not_select_is_an_error() {
    let dir = folder();
    let checkpoint = checkpoint_of(dir.path(), &["a"]);
    let err = checkpoint.read_lenient::<Sneaky>().unwrap_err();
    assert_eq!(err, Error::NotSelected { name: "a".into() });
}

#[test]
fn an_empty_tensor_of_huge_extents_is_an_error_not_a_panic() {
    // No element, but extents whose non-zero product passes `isize`, which ndarray
    // cannot hold.
    let dir = folder();
    let path = dir.path().join("x.safetensors");
    let header = format!(
        r#"{{"t":{{"dtype":"F32","shape":[0,{},4],"data_offsets":[0,0]}}}}"#,
        1u64 << 62
    );
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    std::fs::write(&path, bytes).unwrap();
    let mut batch = TensorBatch::read_safetensors(&path).unwrap();
    let err = ndarray::Array3::<f32>::from_dlpack(batch.remove("t").unwrap()).unwrap_err();
    assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
    #[derive(FromDLPack, Debug)]
    struct T {
        t: ndarray::Array3<f32>,
    }
    let err = Checkpoint::open(&path).unwrap().read::<T>().unwrap_err();
    assert!(err.to_string().contains("overflow"), "{err}");

    // Read or mapped, of a type Rust has an element for or not, such a tensor has the
    // same strides, all 0 (C strides would wrap).
    for dtype in ["F32", "F8_E4M3"] {
        let header = format!(
            r#"{{"t":{{"dtype":"{dtype}","shape":[0,{},3],"data_offsets":[0,0]}}}}"#,
            1u64 << 62
        );
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        std::fs::write(&path, bytes).unwrap();
        let mut batches = vec![TensorBatch::read_safetensors(&path).unwrap()];
        // (Miri cannot map files.)
        if !cfg!(miri) {
            // SAFETY: the test's own file, which nothing modifies while mapped.
            batches.push(unsafe { TensorBatch::map_safetensors(&path) }.unwrap());
        }
        for batch in &batches {
            let t = batch.get("t").unwrap();
            assert_eq!(t.shape(), [0, 1 << 62, 3], "{dtype}");
            assert_eq!(t.strides(), Some(&[0i64, 0, 0][..]), "{dtype}");
        }
    }
}

/// Three one-tensor shards `a`, `b`, `c` of `value`, in `dir`.
fn save_abc(dir: &Path, value: f32) -> dlpack_core::Result<()> {
    let tensor = || Array1::from_elem(2, value).to_dlpack().unwrap();
    let batch = TensorBatch::try_from(vec![("a", tensor()), ("b", tensor()), ("c", tensor())])?;
    batch.write_checkpoint(dir, 8)
}

#[derive(FromDLPack, Debug)]
struct Abc {
    a: Array1<f32>,
    b: Array1<f32>,
    c: Array1<f32>,
}

#[test]
fn a_save_that_fails_midway_leaves_no_index_over_mixed_shards() {
    let outer = folder();
    let dir = outer.path().join("ckpt");
    save_abc(&dir, 1.0).unwrap();
    // Something in the way of shard 3: the second save fails after writing two shards.
    let third = dir.join("model-00003-of-00003.safetensors");
    std::fs::remove_file(&third).unwrap();
    std::fs::create_dir(&third).unwrap();
    std::fs::write(third.join("x"), b"x").unwrap();
    assert!(save_abc(&dir, 2.0).is_err());
    std::fs::remove_dir_all(&third).unwrap();
    save_abc(&outer.path().join("old"), 1.0).unwrap();
    // (Read and written, not `fs::copy`, whose `copy_file_range` Miri cannot run.)
    let old = outer.path().join("old/model-00003-of-00003.safetensors");
    std::fs::write(&third, std::fs::read(old).unwrap()).unwrap();
    // New shards 1 and 2, the old 3: no index holds them together.
    let err = Checkpoint::open(&dir).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Io {
                kind: std::io::ErrorKind::NotFound,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_checkpoint_open_during_a_save_keeps_reading_what_it_opened() {
    let outer = folder();
    let dir = outer.path().join("ckpt");
    save_abc(&dir, 1.0).unwrap();
    let checkpoint = Checkpoint::open(&dir).unwrap();
    save_abc(&dir, 2.0).unwrap();
    let old: Abc = checkpoint.read().unwrap();
    assert_eq!((old.a[0], old.b[0], old.c[0]), (1.0, 1.0, 1.0));
    let new: Abc = Checkpoint::open(&dir).unwrap().read().unwrap();
    assert_eq!((new.a[0], new.b[0], new.c[0]), (2.0, 2.0, 2.0));
}

#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "runs mkfifo")]
fn only_regular_files_are_read_and_a_pipe_is_never_waited_for() {
    let refused = |err: Error| {
        let kind = std::io::ErrorKind::InvalidInput;
        assert!(
            matches!(err.root(), Error::Io { kind: k, .. } if *k == kind),
            "{err}"
        );
    };
    let dir = folder();
    let pipe = dir.path().join("pipe.safetensors");
    let made = std::process::Command::new("mkfifo")
        .arg(&pipe)
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        r#"{"weight_map": {"a": "pipe.safetensors"}}"#,
    )
    .unwrap();
    // Each returns at once (a pipe without a writer would block a plain open).
    refused(Checkpoint::open(dir.path()).unwrap_err());
    refused(TensorBatch::read_safetensors(&pipe).unwrap_err());
    // A device in the index's place is not read (it would never end).
    let index = dir.path().join("other.index.json");
    std::os::unix::fs::symlink("/dev/zero", &index).unwrap();
    refused(Checkpoint::open(&index).unwrap_err());
}

/// Every regular file under `dir` (links not followed), with its bytes.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut folders = vec![dir.to_owned()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            let name = entry
                .path()
                .strip_prefix(dir)
                .unwrap()
                .display()
                .to_string();
            if kind.is_dir() {
                folders.push(entry.path());
            } else if kind.is_file() {
                files.insert(name, std::fs::read(entry.path()).unwrap());
            }
        }
    }
    files
}

#[test]
#[cfg(unix)]
#[cfg_attr(
    miri,
    ignore = "file system semantics, no unsafe code: too slow to interpret"
)]
fn a_save_into_a_cache_snapshot_replaces_its_links_and_writes_no_blob() {
    // The Hugging Face cache: a snapshot's files are links to content-addressed blobs
    // that other revisions share.
    let cache = folder();
    let blobs = cache.path().join("blobs");
    let snapshot = cache.path().join("snapshots/rev");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::create_dir_all(&snapshot).unwrap();
    let linked = [
        ("model-00001-of-00003.safetensors", "eighteen bytes ..."),
        ("model-00002-of-00003.safetensors", "fifteen bytes.."),
        ("model.safetensors.index.json", "{\"weight_map\": {}}"),
        ("model.safetensors", "a single file"),
        ("config.json", "{}"),
    ];
    for (i, (name, text)) in linked.iter().enumerate() {
        std::fs::write(blobs.join(format!("blob{i}")), text).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/blob{i}"), snapshot.join(name)).unwrap();
    }
    let blobs_before = tree(&blobs);

    // Sharded: the shard and index links become files of the snapshot's own; the
    // single file's link, stale beside shards, is removed; the config's stays a link.
    save_abc(&snapshot, 2.0).unwrap();
    assert_eq!(tree(&blobs), blobs_before, "a blob was written");
    for name in [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ] {
        let meta = std::fs::symlink_metadata(snapshot.join(name)).unwrap();
        assert!(meta.is_file(), "{name} is still a link");
    }
    assert!(std::fs::symlink_metadata(snapshot.join("model.safetensors")).is_err());
    let config = std::fs::symlink_metadata(snapshot.join("config.json")).unwrap();
    assert!(config.file_type().is_symlink());
    let abc: Abc = Checkpoint::open(&snapshot).unwrap().read().unwrap();
    assert_eq!((abc.a[0], abc.b[0], abc.c[0]), (2.0, 2.0, 2.0));
    // Nothing was written outside the snapshot folder: the cache holds the blobs and
    // the snapshot's files, no temporary file anywhere.
    let outside: Vec<String> = tree(cache.path())
        .into_keys()
        .filter(|name| !name.starts_with("blobs/") && !name.starts_with("snapshots/rev/"))
        .collect();
    assert!(outside.is_empty(), "{outside:?}");

    // A single file over a link: the link is replaced, its blob kept.
    let other = cache.path().join("snapshots/other");
    std::fs::create_dir_all(&other).unwrap();
    std::os::unix::fs::symlink("../../blobs/blob3", other.join("model.safetensors")).unwrap();
    let batch = TensorBatch::try_from(vec![(
        "a",
        Array1::from_elem(2, 5.0f32).to_dlpack().unwrap(),
    )])
    .unwrap();
    batch.write_checkpoint(&other, u64::MAX).unwrap();
    assert_eq!(tree(&blobs), blobs_before, "a blob was written");
    assert!(
        std::fs::symlink_metadata(other.join("model.safetensors"))
            .unwrap()
            .is_file()
    );
    let names: Vec<String> = tree(&other).into_keys().collect();
    assert_eq!(names, ["model.safetensors"]);
}

#[test]
fn a_checkpoint_saved_to_an_empty_path_is_refused_before_anything_is_written() {
    let dir = folder();
    let before = tree(dir.path());
    let batch = TensorBatch::try_from(vec![(
        "a",
        Array1::from_elem(2, 1.0f32).to_dlpack().unwrap(),
    )])
    .unwrap();
    // (The current folder is the process's: what would be written there is compared
    // with a folder of the test's own through the error alone, and `"."` is the
    // spelling that saves there.)
    for err in [
        batch.write_checkpoint("", 1).unwrap_err(),
        batch.write_safetensors("").unwrap_err(),
    ] {
        let Error::Io {
            path,
            kind,
            message,
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(path, Path::new(""));
        assert_eq!(*kind, std::io::ErrorKind::InvalidInput);
        assert!(message.contains("\".\""), "{message}");
    }
    assert!(!Path::new("model.safetensors").exists());
    assert_eq!(tree(dir.path()), before);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "file system semantics, no unsafe code: too slow to interpret"
)]
fn every_io_error_of_a_save_names_its_path() {
    let dir = folder();
    let batch = TensorBatch::try_from(vec![(
        "a",
        Array1::from_elem(2, 1.0f32).to_dlpack().unwrap(),
    )])
    .unwrap();
    // A file where the folder should be; a folder where the file should be.
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = batch.write_checkpoint(file.join("sub"), 1).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, .. } if path == &file.join("sub")),
        "{err}"
    );
    let ckpt = dir.path().join("ckpt");
    std::fs::create_dir_all(ckpt.join("model.safetensors")).unwrap();
    let err = batch.write_checkpoint(&ckpt, u64::MAX).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, .. } if path == &ckpt.join("model.safetensors")),
        "{err}"
    );
    assert!(err.to_string().contains("model.safetensors"), "{err}");
}

/// `count` one-tensor shards `t0000`, `t0001`, ... of `value` (each its own shard).
fn save_many(dir: &Path, count: usize, value: f32) {
    let batch = TensorBatch::try_from(
        (0..count)
            .map(|i| {
                let tensor = Array1::from_elem(1, value + i as f32).to_dlpack().unwrap();
                (format!("t{i:04}"), tensor)
            })
            .collect::<Vec<_>>(),
    )
    .unwrap();
    batch.write_checkpoint(dir, 4).unwrap();
}

#[test]
#[cfg_attr(miri, ignore = "maps files")]
fn past_the_first_shards_a_replaced_shard_is_refused_and_the_rest_still_read() {
    let outer = folder();
    let dir = outer.path().join("ckpt");
    save_many(&dir, 40, 0.0);
    let checkpoint = Checkpoint::open(&dir).unwrap();
    // Replaced by a save of the same layout: the first 32 shards, kept open, read as
    // they were; shard 40, opened again to read, is another file now.
    save_many(&dir, 40, 100.0);
    let first = checkpoint.read_where(|name| name < "t0032").unwrap();
    assert_eq!(first.len(), 32);
    let view = first.get("t0031").unwrap().as_array::<f32, Ix1>().unwrap();
    assert_eq!(view[0], 31.0);
    let err = checkpoint.read_where(|name| name == "t0039").unwrap_err();
    let shard = dir.join("model-00040-of-00040.safetensors");
    assert!(
        matches!(&err, Error::InvalidFile { path, reason, .. }
            if *path == shard && reason.contains("changed since it was opened")),
        "{err}"
    );
    // SAFETY: the test's own files, which nothing modifies while mapped.
    let err = unsafe { checkpoint.map() }.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidFile { path, .. } if path.starts_with(&dir)),
        "{err}"
    );
    // Opened again, the checkpoint reads the new save.
    let batch = Checkpoint::open(&dir)
        .unwrap()
        .read_where(|name| name == "t0039")
        .unwrap();
    assert_eq!(
        batch.get("t0039").unwrap().as_array::<f32, Ix1>().unwrap()[0],
        139.0
    );
}

/// The test below, run in a child process whose limit of open files is 256.
const CHILD: &str = "DLPACK_TEST_FEW_OPEN_FILES";

#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "runs a child process")]
fn a_checkpoint_of_more_shards_than_the_limit_of_open_files_opens_reads_and_maps() {
    let name = "a_checkpoint_of_more_shards_than_the_limit_of_open_files_opens_reads_and_maps";
    if std::env::var_os(CHILD).is_none() {
        // (The limit is the process's: a child of its own, so that the other tests
        // running beside it keep theirs.)
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg("ulimit -n 256 && exec \"$0\" --exact \"$1\" --test-threads=1 --quiet")
            .arg(std::env::current_exe().unwrap())
            .arg(name)
            .env(CHILD, "1")
            .status()
            .unwrap();
        assert!(status.success(), "the child failed: {status}");
        return;
    }
    let outer = folder();
    let dir = outer.path().join("ckpt");
    save_many(&dir, 1100, 0.0);
    assert_eq!(files(&dir).len(), 1101);
    let checkpoint = Checkpoint::open(&dir).unwrap();
    assert_eq!(checkpoint.shards().len(), 1100);
    let batch = checkpoint.read_where(|_| true).unwrap();
    assert_eq!(batch.len(), 1100);
    for (i, (_, tensor)) in batch.iter().enumerate() {
        assert_eq!(tensor.as_array::<f32, Ix1>().unwrap()[0], i as f32);
    }
    // A derived type's load goes the same way.
    let loaded: HashMap<String, Array1<f32>> = checkpoint.read().unwrap();
    assert_eq!(loaded["t1099"][0], 1099.0);
    // SAFETY: the test's own files, which nothing modifies while mapped.
    let mapped = unsafe { checkpoint.map() }.unwrap();
    assert_eq!(
        mapped.get("t0777").unwrap().as_array::<f32, Ix1>().unwrap()[0],
        777.0
    );
    // Several open at once stay within the limit too.
    let more: Vec<Checkpoint> = (0..3).map(|_| Checkpoint::open(&dir).unwrap()).collect();
    assert!(
        more.iter()
            .all(|c| c.read_where(|n| n == "t1000").unwrap().len() == 1)
    );
}

#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "hundreds of files: too slow to interpret")]
fn a_shard_replaced_by_a_file_of_the_same_length_and_inode_is_refused() {
    let outer = folder();
    let dir = outer.path().join("ckpt");
    save_many(&dir, 40, 0.0);
    let checkpoint = Checkpoint::open(&dir).unwrap();
    // The last shard removed and written again, same length: a file system may give
    // the new file the old one's inode (its change time differs).
    let shard = dir.join("model-00040-of-00040.safetensors");
    let bytes = std::fs::read(&shard).unwrap();
    std::fs::remove_file(&shard).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut other = bytes.clone();
    let last = other.len() - 1;
    other[last] ^= 0x40;
    std::fs::write(&shard, &other).unwrap();
    let err = checkpoint.read_where(|name| name == "t0039").unwrap_err();
    assert!(
        matches!(&err, Error::InvalidFile { path, reason, .. }
            if *path == shard && reason.contains("changed since it was opened")),
        "{err}"
    );
}
