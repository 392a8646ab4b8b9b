//! What a type selects (`FromDLPack::select_in`, followed by the derive and every
//! container), and what a load of a part gives.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use dlpack_core::implement::{Expected, Selection};
use dlpack_core::safetensors::Checkpoint;
use dlpack_core::{DataType, Error, FromDLPack, ManagedTensor, TensorBatch, ToDLPack};
use ndarray::{Array1, Array2, ArrayD, Ix2};

use super::{folder, model, save};

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
