//! What a load that does not fit says, and the fix it names: names grouped by
//! pattern, a field named otherwise than the checkpoint names it, a prefix one side
//! lacks, a container that took nothing, one shard opened alone; and `load_at`, which
//! reads the struct of one layer from under its prefix.

use std::collections::BTreeMap;
use std::path::Path;

use dlpack_core::safetensors::{Checkpoint, ReadOptions};
use dlpack_core::{Error, FromDLPack, TensorBatch, ToDLPack};
use ndarray::{Array1, Array2};

use super::{Linear, Model, files, folder, model, save, state_dict};

/// A single-file checkpoint of float32 tensors of two elements under `names`, in
/// that order.
fn checkpoint_of(dir: &Path, names: &[String]) -> Checkpoint {
    let tensor = || Array1::from_elem(2, 1.0f32).to_dlpack().unwrap();
    let batch = TensorBatch::try_from(
        names
            .iter()
            .map(|n| (n.as_str(), tensor()))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    batch.write_checkpoint(dir, 1 << 30).unwrap();
    Checkpoint::open(dir).unwrap()
}

#[derive(FromDLPack, Debug)]
struct W {
    w: Array1<f32>,
}

#[derive(FromDLPack, Debug)]
struct Wide {
    weight: Array2<f32>,
    bias: Array1<f32>,
    extra: Linear<f32>,
}

#[derive(FromDLPack, Debug)]
struct WideModel {
    embed: Array2<f32>,
    layers: Vec<Wide>,
    head: Option<Linear<f32>>,
}

#[test]
fn names_that_differ_in_indices_are_one_pattern_with_a_count() {
    let dir = folder();
    save(model(12, 4), dir.path(), 1 << 30);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let err = checkpoint.read::<WideModel>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: 24 missing tensors: `layers.{0..11}.extra.weight` (12), \
         `layers.{0..11}.extra.bias` (12)"
    );
    // The error keeps every name.
    let (missing, unexpected, failed) = state_dict(&err);
    assert_eq!(missing.len(), 24);
    assert_eq!(missing[0], "layers.0.extra.weight");
    assert!(unexpected.is_empty() && failed.is_empty());

    // Indices with gaps; past 8 patterns, the count of the rest.
    let dir = folder();
    let mut names: Vec<String> = [0, 1, 2, 3, 5, 7, 8, 9]
        .iter()
        .map(|i| format!("blocks.{i}.w"))
        .collect();
    names.extend((0..9).map(|i| format!("x{i}.w")));
    names.push("w".to_owned());
    let checkpoint = checkpoint_of(dir.path(), &names);
    let err = checkpoint.read::<W>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: 17 unexpected tensors: `blocks.{0..3,5,7..9}.w` (8), \
         `x0.w`, `x1.w`, `x2.w`, `x3.w`, `x4.w`, `x5.w`, `x6.w` and 2 more"
    );
    let (_, unexpected, _) = state_dict(&err);
    assert_eq!(unexpected.len(), 17);
}

#[derive(FromDLPack, Debug)]
struct Attn {
    q: W,
    k: W,
}

#[derive(FromDLPack, Debug)]
struct Block {
    self_attention: Attn,
    mlp: W,
}

#[derive(FromDLPack, Debug)]
struct Net {
    layers: Vec<Block>,
}

fn attn_names(attn: &str) -> Vec<String> {
    (0..12)
        .flat_map(|l| {
            [
                format!("layers.{l}.{attn}.q.w"),
                format!("layers.{l}.{attn}.k.w"),
                format!("layers.{l}.mlp.w"),
            ]
        })
        .collect()
}

#[test]
fn a_field_named_otherwise_is_one_rename_with_the_fix() {
    let dir = folder();
    let checkpoint = checkpoint_of(dir.path(), &attn_names("self_attn"));
    let err = checkpoint.read::<Net>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: the struct has `self_attention` where the checkpoint has \
         `self_attn` (`layers.{0..11}.self_attn.…`, 24 tensors): \
         `#[dlpack(rename = \"self_attn\")]` on the field `self_attention`"
    );
    let (missing, unexpected, _) = state_dict(&err);
    assert_eq!((missing.len(), unexpected.len()), (24, 24));
    // A leaf named otherwise: the name itself, with nothing after it.
    let dir = folder();
    let checkpoint = checkpoint_of(dir.path(), &["weight".to_owned()]);
    let err = checkpoint.read::<W>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: the struct has `w` where the checkpoint has `weight` \
         (`weight`, 1 tensor): `#[dlpack(rename = \"weight\")]` on the field `w`"
    );
}

#[derive(ToDLPack, FromDLPack, Debug)]
struct Wrapped {
    model: Model<f32>,
}

#[test]
fn a_prefix_one_side_lacks_is_one_line_with_load_at() {
    let dir = folder();
    save(Wrapped { model: model(3, 4) }, dir.path(), 1 << 30);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let err = checkpoint.read::<Model<f32>>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: the checkpoint's names start with `model.` where the \
         struct's do not (9 tensors): load with `Checkpoint::load_at::<T>(\"model\")`, or \
         wrap the struct in a field `model`"
    );
    // The fix it names works.
    let loaded: Model<f32> = checkpoint.load_at("model").unwrap();
    assert_eq!(loaded, model(3, 4));
    // The converse: the struct has a prefix the checkpoint lacks.
    let dir = folder();
    save(model(3, 4), dir.path(), 1 << 30);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let err = checkpoint.read::<Wrapped>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: the struct's names start with `model.` where the \
         checkpoint's do not (9 tensors): read the value at `model` alone, or \
         `#[dlpack(flatten)]` on the field `model`"
    );
}

#[derive(FromDLPack, Debug)]
struct Misnamed {
    embed: Array2<f32>,
    blocks: Vec<Linear<f32>>,
    head: Option<Linear<f32>>,
}

#[derive(FromDLPack, Debug)]
struct Gapped {
    layers: Vec<W>,
}

#[derive(FromDLPack, Debug)]
struct Heads {
    heads: BTreeMap<String, W>,
}

#[test]
fn a_container_that_took_nothing_beside_items_is_reported() {
    let dir = folder();
    save(model(12, 4), dir.path(), 1 << 30);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let layers: Vec<String> = checkpoint
        .names()
        .filter(|n| n.starts_with("layers."))
        .map(str::to_owned)
        .collect();
    assert_eq!(layers.len(), 24);
    let text = "the field `blocks` (a Vec) took no items while the checkpoint has \
                `layers.{0..11}.…` (24 tensors): `#[dlpack(rename = \"layers\")]` on it if \
                those are its items (a Vec takes `blocks.0`, `blocks.1`, … up to the first \
                gap)";
    // Strictly, an error that says so (and lists the names once).
    let err = checkpoint.read::<Misnamed>().unwrap_err();
    assert_eq!(err.to_string(), format!("state_dict does not fit: {text}"));
    let (missing, unexpected, failed) = state_dict(&err);
    assert!(missing.is_empty());
    assert_eq!(unexpected, &layers);
    assert_eq!(
        failed,
        &[Error::EmptyContainer {
            name: "blocks".into(),
            kind: "Vec",
            like: layers.clone(),
        }]
    );
    // Leniently, the report says so: a model with no layers never passes silently.
    let (value, report) = checkpoint.read_lenient::<Misnamed>().unwrap();
    assert!(value.blocks.is_empty());
    assert_eq!(report.unexpected, layers);
    assert_eq!(report.empty.len(), 1);
    assert_eq!(
        (report.empty[0].name.as_str(), report.empty[0].kind),
        ("blocks", "Vec")
    );
    assert_eq!(report.empty[0].like, layers);
    assert_eq!(Error::from(report.empty[0].clone()).to_string(), text);
    // In place, leniently and strictly, the same.
    let mut value = Misnamed {
        embed: Array2::zeros((5, 4)),
        blocks: Vec::new(),
        head: None,
    };
    let report = checkpoint.load_into_lenient(&mut value).unwrap();
    assert_eq!(report.empty.len(), 1);
    assert_eq!(report.empty[0].like, layers);
    let err = checkpoint.load_into(&mut value).unwrap_err();
    assert_eq!(err.to_string(), format!("state_dict does not fit: {text}"));
    // A valid empty list: nothing looks like its items.
    let dir = folder();
    let checkpoint = checkpoint_of(dir.path(), &["embed".into()]);
    #[derive(FromDLPack, Debug)]
    struct EmptyOk {
        embed: Array1<f32>,
        blocks: Vec<W>,
    }
    let (value, report) = checkpoint.read_lenient::<EmptyOk>().unwrap();
    assert!(value.blocks.is_empty() && report.is_empty());

    // Items that start past 0.
    let dir = folder();
    let checkpoint = checkpoint_of(dir.path(), &["layers.1.w".into(), "layers.2.w".into()]);
    let err = checkpoint.read::<Gapped>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: the field `layers` (a Vec) took no items while the \
         checkpoint has `layers.{1,2}.…` (2 tensors): a Vec takes `layers.0`, `layers.1`, \
         … up to the first gap, and there is no `layers.0`"
    );
    // A `Vec` in place loads into the items it has.
    let dir = folder();
    let checkpoint = checkpoint_of(dir.path(), &["layers.0.w".into(), "layers.1.w".into()]);
    let mut value = Gapped { layers: Vec::new() };
    let err = checkpoint.load_into(&mut value).unwrap_err();
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: the field `layers` (a Vec) took no items while the \
         checkpoint has `layers.{0,1}.…` (2 tensors): a load in place fills the items a \
         Vec has, and this one has none: read a new value, or give it its items first"
    );
    // A map.
    let dir = folder();
    let checkpoint = checkpoint_of(dir.path(), &["attn.q.w".into(), "attn.k.w".into()]);
    let err = checkpoint.read::<Heads>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: the field `heads` (a map) took no entries while the \
         checkpoint has `attn.…` (2 tensors): `#[dlpack(rename = \"attn\")]` on it if those \
         are its entries (a map takes the names under `heads.`)"
    );
}

#[test]
fn one_shard_opened_alone_names_its_index_when_tensors_are_missing() {
    let dir = folder();
    save(model(3, 8), dir.path(), 400);
    let shards: Vec<String> = files(dir.path())
        .into_iter()
        .filter(|f| f.ends_with(".safetensors"))
        .collect();
    // The last shard: `embed`, in the first, is missing.
    let last = shards.last().unwrap();
    let first = dir.path().join(last);
    let checkpoint = Checkpoint::open(&first).unwrap();
    let err = checkpoint.read::<Model<f32>>().unwrap_err();
    let hint = format!(
        "`{}` is one of the {} shards of `model.safetensors.index.json` beside it: open \
         that index or its folder",
        last,
        shards.len()
    );
    assert_eq!(
        err.to_string(),
        format!("state_dict does not fit: missing tensors `embed`; {hint}")
    );
    let (missing, _, failed) = state_dict(&err);
    assert!(!missing.is_empty());
    assert!(
        failed
            .iter()
            .any(|e| matches!(e, Error::LoneShard { shards: n, .. } if *n == shards.len()))
    );
    // In place too.
    let mut value = model(3, 8);
    let err = checkpoint.load_into(&mut value).unwrap_err();
    assert!(err.to_string().ends_with(&format!("; {hint}")), "{err}");
    // Opening one shard alone is allowed: what it holds loads.
    let names: Vec<&str> = checkpoint.names().collect();
    assert!(!names.is_empty());
    let batch = checkpoint.read_where(|_| true).unwrap();
    assert_eq!(batch.len(), names.len());
    // Without an index beside it, no such line.
    std::fs::remove_file(dir.path().join("model.safetensors.index.json")).unwrap();
    let err = Checkpoint::open(&first)
        .unwrap()
        .read::<Model<f32>>()
        .unwrap_err();
    assert!(!err.to_string().contains("shards of"), "{err}");
}

/// The bytes this thread has read through `read`-like calls so far.
fn rchar() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[derive(FromDLPack, Debug)]
struct OnlyWeight {
    weight: Array2<f32>,
}

#[test]
fn load_at_reads_one_layer_from_under_its_prefix() {
    let dir = folder();
    let full = model(12, 64);
    save(full.clone(), dir.path(), 40_000);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert!(files(dir.path()).len() >= 4);
    // One layer, as the full read gives it.
    let options = ReadOptions::new().threads(1);
    let before = rchar();
    let layer: Linear<f32> = checkpoint.load_at_with("layers.7", &options).unwrap();
    let read = rchar() - before;
    let whole: Model<f32> = checkpoint.read().unwrap();
    assert_eq!(layer, whole.layers[7]);
    assert_eq!(layer, full.layers[7]);
    // Only its bytes are read.
    let bytes: u64 = checkpoint
        .names()
        .filter(|n| n.starts_with("layers.7."))
        .map(|n| checkpoint.tensor(n).unwrap().byte_len() as u64)
        .sum();
    assert!(bytes <= read && read * 100 <= bytes * 101, "{read} {bytes}");
    // Every layer, and the model itself at an empty prefix.
    let again: Linear<f32> = checkpoint.load_at("layers.7.").unwrap();
    assert_eq!(again, layer);
    let layers: Vec<Linear<f32>> = checkpoint.load_at("layers").unwrap();
    assert_eq!(layers, full.layers);
    assert_eq!(checkpoint.load_at::<Model<f32>>("").unwrap(), full);
    // Strict within the prefix, with full names; the names outside it are not looked at.
    let err = checkpoint.load_at::<Wide>("layers.7").unwrap_err();
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: missing tensors `layers.7.extra.weight`, \
         `layers.7.extra.bias`"
    );
    let err = checkpoint.load_at::<OnlyWeight>("layers.7").unwrap_err();
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: unexpected tensors `layers.7.bias`"
    );
    let err = checkpoint.load_at::<Linear<f32>>("layers.40").unwrap_err();
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: missing tensors `layers.40.weight`, `layers.40.bias`"
    );
    // Converting as `read_with` does.
    let options = ReadOptions::new().convert_floats(dlpack_core::DataType::F64);
    let wide: Linear<f64> = checkpoint.load_at_with("layers.7", &options).unwrap();
    assert_eq!(wide.bias, full.layers[7].bias.mapv(f64::from));
}
