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

use std::collections::BTreeSet;
use std::path::Path;

use dlpack_core::{Error, FromDLPack, TensorBatch, ToDLPack};
use half::bf16;
use ndarray::{Array1, Array2};

mod alignment;
mod broken;
mod loading;
mod many_shards;
mod messages;
mod parallel;
mod reading;
mod saving;
mod selection;

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
