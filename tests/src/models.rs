//! Rust models as Python objects (`#[pymodel]`): an `Mlp` named as PyTorch's two
//! `nn.Linear` layers name their parameters, a deeper `Net` (a `Vec` of blocks, a map, an
//! optional head, a skipped counter), a GPT-2-shaped model of 148 tensors (the
//! `state_dict` timing), and, for the attribute timings, the same `Linear` as a
//! rust-numpy class whose getter is `PyArray::borrow_from_array`.

use std::collections::BTreeMap;

use dlpack_core::{DLPackArray, FromDLPack, ManagedTensor, TensorBatch, ToDLPack, pymodel};
use dlpack_core::{Parameter, Parameter1, Parameter2};
use ndarray::{Array1, Array2, Dimension, Ix1, Ix2};
use numpy::PyArray2;
use pyo3::prelude::*;

/// An array whose first element is 64-byte aligned (`zeros_aligned`), so that JAX,
/// which copies less aligned memory, imports it without a copy.
fn aligned<D: Dimension>(dim: D, value: impl Fn(usize) -> f32) -> Parameter<f32, D> {
    let mut array = dlpack_core::zeros_aligned::<f32, _>(dim);
    for (i, v) in array.iter_mut().enumerate() {
        *v = value(i);
    }
    Parameter::from(array)
}

fn ramp(rows: usize, cols: usize, scale: f32) -> Parameter2<f32> {
    aligned(Ix2(rows, cols), |i| (i % 7) as f32 * scale)
}

/// `y = W x + b`, as `nn.Linear` names its parameters.
#[derive(ToDLPack, FromDLPack)]
pub(crate) struct Linear {
    weight: Parameter2<f32>,
    bias: Parameter1<f32>,
}

impl Linear {
    fn new(inputs: usize, outputs: usize) -> Self {
        Self {
            weight: ramp(outputs, inputs, 0.1),
            bias: aligned(Ix1(outputs), |i| i as f32 * 0.01),
        }
    }

    fn apply(&self, x: &Array1<f32>) -> Array1<f32> {
        self.weight.view().dot(x) + self.bias.view()
    }
}

/// Two layers, `fc1` and `fc2`, as a PyTorch module with two `nn.Linear` of those names.
#[pyclass(module = "dlpack_test_ext")]
#[derive(ToDLPack, FromDLPack)]
pub(crate) struct Mlp {
    fc1: Linear,
    fc2: Linear,
    /// Rust state that is not a tensor: left out of the `state_dict`.
    #[dlpack(skip)]
    steps: u64,
}

#[pymodel]
#[pymethods]
impl Mlp {
    #[new]
    fn new(inputs: usize, hidden: usize, outputs: usize) -> Self {
        Self {
            fc1: Linear::new(inputs, hidden),
            fc2: Linear::new(hidden, outputs),
            steps: 0,
        }
    }

    /// `Mlp.load(path)`: a checkpoint (file, index or folder), only the tensors it takes.
    #[staticmethod]
    fn load(path: std::path::PathBuf) -> PyResult<Self> {
        Ok(dlpack_core::safetensors::Checkpoint::open(path)?.read::<Self>()?)
    }

    /// `relu(fc1(x))` through `fc2`, read from the fields as they are now.
    fn forward(&self, x: DLPackArray<f32, Ix1>) -> PyResult<ManagedTensor> {
        let x = x.view().to_owned();
        let h = self.fc1.apply(&x).mapv(|v| v.max(0.0));
        Ok(self.fc2.apply(&h).to_dlpack()?)
    }

    /// A Rust write: subtracts `delta` from every parameter (copy-on-write where Python
    /// holds a view).
    fn step(&mut self, delta: f32) {
        for layer in [&mut self.fc1, &mut self.fc2] {
            layer.weight.view_mut().mapv_inplace(|v| v - delta);
            layer.bias.view_mut().mapv_inplace(|v| v - delta);
        }
        self.steps += 1;
    }

    /// The same write with the interpreter released, so that other threads run.
    fn step_detached(&mut self, py: Python<'_>, delta: f32) {
        py.detach(|| self.step(delta));
    }

    /// The sum of every parameter (a Rust read of every field).
    fn total(&self) -> f64 {
        [&self.fc1, &self.fc2]
            .iter()
            .map(|l| {
                l.weight.view().iter().map(|&v| f64::from(v)).sum::<f64>()
                    + l.bias.view().iter().map(|&v| f64::from(v)).sum::<f64>()
            })
            .sum()
    }

    /// Replaces `fc1.weight` from Rust by a new array of zeros.
    fn replace_fc1_weight(&mut self) {
        self.fc1.weight = Parameter::from(Array2::zeros(self.fc1.weight.raw_dim()));
    }

    /// The addresses of the fields' buffers, by `state_dict` name.
    fn pointers(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for (name, layer) in [("fc1", &self.fc1), ("fc2", &self.fc2)] {
            out.insert(
                format!("{name}.weight"),
                layer.weight.view().as_ptr() as usize,
            );
            out.insert(format!("{name}.bias"), layer.bias.view().as_ptr() as usize);
        }
        out
    }

    /// `m.save(dir)`: a checkpoint of the fields as they are now, written from Rust:
    /// shares of the fields (no copy, no round trip through Python).
    fn save(&self, dir: std::path::PathBuf) -> PyResult<()> {
        Ok(TensorBatch::share(self)?.write_checkpoint(dir, 5 << 30)?)
    }

    /// How many Rust writes ran (a skipped field, kept by setters and loads).
    #[getter]
    fn steps(&self) -> u64 {
        self.steps
    }
}

/// Attention and feed-forward of one block.
#[derive(ToDLPack, FromDLPack)]
pub(crate) struct Block {
    attn: BTreeMap<String, Linear>,
    mlp: Linear,
}

/// Nesting of every kind: a `Vec` of blocks holding a map, an optional head, a flattened
/// struct, a renamed field.
#[pyclass(module = "dlpack_test_ext")]
#[derive(ToDLPack, FromDLPack)]
pub(crate) struct Net {
    #[dlpack(rename = "embed")]
    embedding: Parameter2<f32>,
    layers: Vec<Block>,
    head: Option<Linear>,
    #[dlpack(flatten)]
    norm: Norm,
}

/// Flattened into `Net`: `scale` at the top level.
#[derive(ToDLPack, FromDLPack)]
pub(crate) struct Norm {
    scale: Parameter1<f32>,
}

#[pymodel]
#[pymethods]
impl Net {
    #[new]
    #[pyo3(signature = (layers, width, head = true))]
    fn new(layers: usize, width: usize, head: bool) -> Self {
        let block = || Block {
            attn: ["q", "k", "v"]
                .into_iter()
                .map(|k| (k.to_owned(), Linear::new(width, width)))
                .collect(),
            mlp: Linear::new(width, width),
        };
        Self {
            embedding: ramp(10, width, 0.5),
            layers: (0..layers).map(|_| block()).collect(),
            head: head.then(|| Linear::new(width, 2)),
            norm: Norm {
                scale: Parameter::from(Array1::ones(width)),
            },
        }
    }

    /// `Net.load(path)`: a checkpoint (file, index or folder), only the tensors it takes.
    #[staticmethod]
    fn load(path: std::path::PathBuf) -> PyResult<Self> {
        Ok(dlpack_core::safetensors::Checkpoint::open(path)?.read::<Self>()?)
    }

    /// A `__repr__` of its own, which `#[pymodel]` keeps.
    fn __repr__(&self) -> String {
        format!("Net({} layers)", self.layers.len())
    }
}

/// GPT-2's 148 tensors, named as `transformers`' `GPT2Model` names them, at small sizes
/// (what a `state_dict` costs depends on the count of tensors, not their sizes).
#[pyclass(module = "dlpack_test_ext")]
#[derive(ToDLPack, FromDLPack)]
pub(crate) struct Gpt2Shape {
    wte: Embedding,
    wpe: Embedding,
    h: Vec<Gpt2Block>,
    ln_f: Norm2,
}

#[derive(ToDLPack, FromDLPack)]
pub(crate) struct Embedding {
    weight: Parameter2<f32>,
}

#[derive(ToDLPack, FromDLPack)]
pub(crate) struct Norm2 {
    weight: Parameter1<f32>,
    bias: Parameter1<f32>,
}

#[derive(ToDLPack, FromDLPack)]
pub(crate) struct Gpt2Attn {
    c_attn: Linear,
    c_proj: Linear,
}

#[derive(ToDLPack, FromDLPack)]
pub(crate) struct Gpt2Mlp {
    c_fc: Linear,
    c_proj: Linear,
}

#[derive(ToDLPack, FromDLPack)]
pub(crate) struct Gpt2Block {
    ln_1: Norm2,
    attn: Gpt2Attn,
    ln_2: Norm2,
    mlp: Gpt2Mlp,
}

#[pymodel]
#[pymethods]
impl Gpt2Shape {
    #[new]
    fn new(width: usize) -> Self {
        let norm = || Norm2 {
            weight: Parameter::from(Array1::ones(width)),
            bias: Parameter::from(Array1::zeros(width)),
        };
        Self {
            wte: Embedding {
                weight: ramp(16, width, 0.1),
            },
            wpe: Embedding {
                weight: ramp(8, width, 0.1),
            },
            h: (0..12)
                .map(|_| Gpt2Block {
                    ln_1: norm(),
                    attn: Gpt2Attn {
                        c_attn: Linear::new(width, 3 * width),
                        c_proj: Linear::new(width, width),
                    },
                    ln_2: norm(),
                    mlp: Gpt2Mlp {
                        c_fc: Linear::new(width, 4 * width),
                        c_proj: Linear::new(4 * width, width),
                    },
                })
                .collect(),
            ln_f: norm(),
        }
    }
}

/// One layer as a model of its own: `m.weight`, the attribute read of the timings.
#[pyclass(module = "dlpack_test_ext")]
#[derive(ToDLPack, FromDLPack)]
pub(crate) struct Dense {
    weight: Parameter2<f32>,
    bias: Parameter1<f32>,
}

#[pymodel]
#[pymethods]
impl Dense {
    #[new]
    fn new(inputs: usize, outputs: usize) -> Self {
        let Linear { weight, bias } = Linear::new(inputs, outputs);
        Self { weight, bias }
    }
}

/// The rust-numpy incumbent: a `Linear` whose getters return
/// `PyArray::borrow_from_array` of the field (an `unsafe` API), for the timings.
#[pyclass(module = "dlpack_test_ext")]
pub(crate) struct NumpyLinear {
    weight: Array2<f32>,
    bias: Array1<f32>,
}

#[pymethods]
impl NumpyLinear {
    #[new]
    fn new(inputs: usize, outputs: usize) -> Self {
        Self {
            weight: ramp(outputs, inputs, 0.1).into_owned(),
            bias: Array1::zeros(outputs),
        }
    }

    #[getter]
    fn weight<'py>(slf: Bound<'py, Self>) -> Bound<'py, PyArray2<f32>> {
        let this = slf.borrow();
        // SAFETY: the array lives in the object, which the returned NumPy array keeps
        // alive as its base, and this class never replaces or resizes it (test code: the
        // benchmark's incumbent, as rust-numpy documents it).
        unsafe { PyArray2::borrow_from_array(&this.weight, slf.clone().into_any()) }
    }

    #[getter]
    fn bias<'py>(slf: Bound<'py, Self>) -> Bound<'py, numpy::PyArray1<f32>> {
        let this = slf.borrow();
        // SAFETY: as for `weight`.
        unsafe { numpy::PyArray1::borrow_from_array(&this.bias, slf.clone().into_any()) }
    }
}

/// The `Mlp` of the timings with rust-numpy getters one level down: `m.fc1.weight`.
#[pyclass(module = "dlpack_test_ext")]
pub(crate) struct NumpyMlp {
    #[pyo3(get)]
    fc1: Py<NumpyLinear>,
    #[pyo3(get)]
    fc2: Py<NumpyLinear>,
}

#[pymethods]
impl NumpyMlp {
    #[new]
    fn new(py: Python<'_>, inputs: usize, hidden: usize, outputs: usize) -> PyResult<Self> {
        Ok(Self {
            fc1: Py::new(py, NumpyLinear::new(inputs, hidden))?,
            fc2: Py::new(py, NumpyLinear::new(hidden, outputs))?,
        })
    }
}

/// Members named by data: a map with the keys given (named, for the tests, as a
/// `ModelView` method, a special method, a private name), and a `bool` mask, which
/// every read hands out as a copy.
#[pyclass(module = "dlpack_test_ext")]
#[derive(ToDLPack, FromDLPack)]
pub(crate) struct Heads {
    heads: BTreeMap<String, Parameter1<f32>>,
    mask: Parameter1<bool>,
}

#[pymodel]
#[pymethods]
impl Heads {
    #[new]
    fn new(keys: Vec<String>) -> Self {
        let heads = keys
            .into_iter()
            .enumerate()
            .map(|(i, key)| (key, Parameter::from(Array1::from_elem(2, i as f32))))
            .collect();
        Self {
            heads,
            mask: Parameter::from(Array1::from_elem(2, true)),
        }
    }

    /// A Rust write of the mask.
    fn flip_mask(&mut self) {
        self.mask.view_mut().mapv_inplace(|b| !b);
    }
}

/// Adds the model classes to the test extension.
pub(crate) fn add_classes(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Mlp>()?;
    m.add_class::<Net>()?;
    m.add_class::<Gpt2Shape>()?;
    m.add_class::<Dense>()?;
    m.add_class::<Heads>()?;
    m.add_class::<NumpyLinear>()?;
    m.add_class::<NumpyMlp>()?;
    Ok(())
}
