//! Weights on disk from Python: safetensors files read, mapped and written through the
//! batch API, and a derived model (the shape of a PyTorch `nn.Module` with two linear
//! layers) that loads a `state_dict` saved by `safetensors.torch.save_file`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use dlpack_core::{FromDLPack, TensorBatch, ToDLPack};
use ndarray::{Array1, Array2};
use pyo3::prelude::*;

/// `nn.Linear`'s parameters.
#[derive(ToDLPack, FromDLPack)]
struct Linear {
    weight: Array2<f32>,
    bias: Array1<f32>,
}

/// A module with `fc1` and `fc2`, both `nn.Linear`.
#[derive(ToDLPack, FromDLPack)]
struct Net {
    fc1: Linear,
    fc2: Linear,
}

/// Reads a safetensors file: a `dict` of tensors, each in a buffer of its own, and the
/// file's metadata.
#[pyfunction]
fn load_safetensors(path: PathBuf) -> PyResult<(TensorBatch, BTreeMap<String, String>)> {
    let mut batch = TensorBatch::read_safetensors(path)?;
    let metadata = std::mem::take(batch.metadata_mut());
    Ok((batch, metadata))
}

/// Maps a safetensors file: a `dict` of tensors over one private mapping, and the file's
/// metadata.
///
/// A test helper, not a pattern to copy: it is a safe Python function over an `unsafe`
/// map, sound only because its one caller, the test suite, keeps the contract below. An
/// extension that maps files its users name cannot promise that (a file truncated
/// under the mapping kills the process): it reads them (`TensorBatch::read_safetensors`,
/// `Checkpoint::read`), as the example extension does.
#[pyfunction]
fn map_safetensors(path: PathBuf) -> PyResult<(TensorBatch, BTreeMap<String, String>)> {
    // SAFETY: the tests map files that they made in folders of their own and never
    // modify while the tensors live.
    let mut batch = unsafe { TensorBatch::map_safetensors(path) }?;
    let metadata = std::mem::take(batch.metadata_mut());
    Ok((batch, metadata))
}

/// Writes any mapping of `__dlpack__` objects (a `state_dict`, NumPy arrays, ...) as a
/// safetensors file, with `metadata` as its `__metadata__`.
#[pyfunction]
#[pyo3(signature = (tensors, path, metadata = None))]
fn save_safetensors(
    mut tensors: TensorBatch,
    path: PathBuf,
    metadata: Option<BTreeMap<String, String>>,
) -> PyResult<()> {
    *tensors.metadata_mut() = metadata.unwrap_or_default();
    Ok(tensors.write_safetensors(path)?)
}

/// Loads `source` (a `state_dict` of [`Net`]'s shape) into a [`Net`], strictly, doubles
/// every weight and adds one to every bias in Rust, and saves it to `target`. Returns
/// whether each array kept the buffer its tensor was read into (no copy).
#[pyfunction]
fn step_net_file(source: PathBuf, target: PathBuf) -> PyResult<bool> {
    let batch = TensorBatch::read_safetensors(source)?;
    let read: Vec<usize> = batch.iter().map(|(_, t)| t.data_ptr() as usize).collect();
    let mut net = Net::from_dlpack(batch)?;
    let kept = [
        net.fc1.weight.as_ptr() as usize,
        net.fc1.bias.as_ptr() as usize,
        net.fc2.weight.as_ptr() as usize,
        net.fc2.bias.as_ptr() as usize,
    ]
    .iter()
    .all(|p| read.contains(p));
    for layer in [&mut net.fc1, &mut net.fc2] {
        layer.weight *= 2.0;
        layer.bias += 1.0;
    }
    net.to_dlpack()?.write_safetensors(target)?;
    Ok(kept)
}

/// Adds this module's functions to the extension.
pub(crate) fn add_functions(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load_safetensors, m)?)?;
    m.add_function(wrap_pyfunction!(map_safetensors, m)?)?;
    m.add_function(wrap_pyfunction!(save_safetensors, m)?)?;
    m.add_function(wrap_pyfunction!(step_net_file, m)?)?;
    Ok(())
}
