//! Batches of named tensors: a small Rust model exported as a `state_dict`, and loaded
//! strictly from one; any mapping imported, and round-tripped.

use dlpack_core::{FromDLPack, TensorBatch, ToDLPack};
use ndarray::{Array1, Array2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

#[derive(Debug)]
struct Linear {
    weight: Array2<f32>,
    bias: Array1<f32>,
}

#[derive(Debug)]
struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl Linear {
    fn new(inputs: usize, outputs: usize, seed: f32) -> Self {
        Self {
            weight: Array2::from_shape_fn((outputs, inputs), |(o, i)| {
                seed + o as f32 * 0.25 - i as f32 * 0.125
            }),
            bias: Array1::from_shape_fn(outputs, |o| seed - o as f32 * 0.5),
        }
    }

    fn into_batch(self, prefix: &str, batch: &mut TensorBatch) -> dlpack_core::Result<()> {
        batch.insert(format!("{prefix}.weight"), self.weight.to_dlpack()?)?;
        batch.insert(format!("{prefix}.bias"), self.bias.to_dlpack()?)
    }

    fn from_batch(prefix: &str, batch: &mut TensorBatch) -> PyResult<Self> {
        let mut take = |name: &str| {
            let name = format!("{prefix}.{name}");
            batch
                .remove(&name)
                .ok_or(dlpack_core::Error::MissingTensor { name })
        };
        Ok(Self {
            weight: Array2::from_dlpack(take("weight")?)?,
            bias: Array1::from_dlpack(take("bias")?)?,
        })
    }
}

/// Tensor name → address of its first element.
type Pointers = Vec<(&'static str, usize)>;

impl Mlp {
    fn pointers(&self) -> Pointers {
        vec![
            ("fc1.weight", self.fc1.weight.as_ptr() as usize),
            ("fc1.bias", self.fc1.bias.as_ptr() as usize),
            ("fc2.weight", self.fc2.weight.as_ptr() as usize),
            ("fc2.bias", self.fc2.bias.as_ptr() as usize),
        ]
    }
}

/// A Rust MLP (`fc1`: 4 → 8, `fc2`: 8 → 2) exported as a `state_dict`-like dict of
/// tensors, without copying; also returns each tensor's Rust data address.
#[pyfunction]
pub(super) fn model_state(py: Python<'_>) -> PyResult<(Bound<'_, PyDict>, Pointers)> {
    let model = Mlp {
        fc1: Linear::new(4, 8, 1.0),
        fc2: Linear::new(8, 2, -1.0),
    };
    let pointers = model.pointers();
    let mut batch = TensorBatch::new();
    model.fc1.into_batch("fc1", &mut batch)?;
    model.fc2.into_batch("fc2", &mut batch)?;
    Ok((batch.into_pyobject(py)?, pointers))
}

/// Imports an MLP strictly from a mapping (e.g. a PyTorch `state_dict`): exactly the
/// four tensors, `float32`, of the right shapes. Returns name → (shape, sum).
#[pyfunction]
pub(super) fn load_model(state: TensorBatch) -> PyResult<Vec<(String, Vec<usize>, f64)>> {
    let mut batch = state;
    let model = Mlp {
        fc1: Linear::from_batch("fc1", &mut batch)?,
        fc2: Linear::from_batch("fc2", &mut batch)?,
    };
    batch.expect_empty()?;
    if model.fc1.weight.dim() != (8, 4)
        || model.fc1.bias.len() != 8
        || model.fc2.weight.dim() != (2, 8)
        || model.fc2.bias.len() != 2
    {
        return Err(PyValueError::new_err(format!("wrong shapes: {model:?}")));
    }
    let sum = |a: f32| f64::from(a);
    Ok(vec![
        (
            "fc1.weight".into(),
            model.fc1.weight.shape().to_vec(),
            sum(model.fc1.weight.sum()),
        ),
        (
            "fc1.bias".into(),
            model.fc1.bias.shape().to_vec(),
            sum(model.fc1.bias.sum()),
        ),
        (
            "fc2.weight".into(),
            model.fc2.weight.shape().to_vec(),
            sum(model.fc2.weight.sum()),
        ),
        (
            "fc2.bias".into(),
            model.fc2.bias.shape().to_vec(),
            sum(model.fc2.bias.sum()),
        ),
    ])
}

/// Imports any mapping of tensors; returns name → (dtype, shape, first-element address)
/// in the mapping's order.
#[pyfunction]
pub(super) fn load_batch(batch: TensorBatch) -> Vec<(String, String, Vec<i64>, usize)> {
    batch
        .iter()
        .map(|(name, t)| {
            (
                name.to_owned(),
                t.dtype().to_string(),
                t.shape().to_vec(),
                t.data_ptr() as usize,
            )
        })
        .collect()
}

/// Imports a mapping and exports it again as a dict, without copying.
#[pyfunction]
pub(super) fn roundtrip_batch(batch: TensorBatch) -> TensorBatch {
    batch
}
