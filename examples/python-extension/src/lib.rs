//! A Python extension that shares arrays with NumPy, PyTorch and JAX through DLPack,
//! without copies: typed arguments, returned arrays, a model's weights as a `dict`,
//! checkpoints saved and loaded in the layout `transformers` uses, and an in-place
//! function.

use pyo3::prelude::*;

#[pymodule]
mod dlpack_example {
    use std::path::PathBuf;

    use dlpack_core::safetensors::Checkpoint;
    use dlpack_core::{DLPackArray, FromDLPack, ManagedTensor, TensorBatch, ToDLPack};
    use ndarray::{Array1, Array2, Ix1, Ix2};
    use pyo3::prelude::*;

    /// `y = W x + b`, named as PyTorch's `nn.Linear` names its parameters.
    #[derive(ToDLPack, FromDLPack)]
    struct Linear {
        weight: Array2<f32>,
        bias: Array1<f32>,
    }

    /// Two layers: `fc1.weight`, `fc1.bias`, `fc2.weight`, `fc2.bias`.
    #[derive(ToDLPack, FromDLPack)]
    struct Mlp {
        fc1: Linear,
        fc2: Linear,
    }

    /// The sum of any float32 matrix (NumPy, PyTorch, JAX, ...), read in place. Anything
    /// else is a `TypeError` naming `x`, the expected type and what came.
    #[pyfunction]
    fn total(x: DLPackArray<f32, Ix2>) -> f32 {
        x.view().sum()
    }

    /// An `n` x `n` identity matrix made in Rust, handed to Python without a copy.
    #[pyfunction]
    fn eye(n: usize) -> PyResult<ManagedTensor> {
        Ok(Array2::<f32>::eye(n).to_dlpack()?)
    }

    /// A model made in Rust, as a `dict` of tensors that `torch.from_dlpack` takes.
    #[pyfunction]
    fn init_model(inputs: usize, hidden: usize, outputs: usize) -> PyResult<TensorBatch> {
        let layer = |i: usize, o: usize| Linear {
            weight: Array2::from_shape_fn((o, i), |(r, c)| ((r + c) % 7) as f32 / 10.0),
            bias: Array1::zeros(o),
        };
        let model = Mlp {
            fc1: layer(inputs, hidden),
            fc2: layer(hidden, outputs),
        };
        Ok(model.to_dlpack()?)
    }

    /// The model from a `dict` (a PyTorch `state_dict`, ...), strictly: every missing,
    /// unexpected or mismatched tensor is named in one error. Returns its output for `x`.
    #[pyfunction]
    fn forward(state: TensorBatch, x: DLPackArray<f32, Ix1>) -> PyResult<ManagedTensor> {
        let model = Mlp::from_dlpack(state)?;
        let h = (model.fc1.weight.dot(&x.view()) + &model.fc1.bias).mapv(|v| v.max(0.0));
        let y = model.fc2.weight.dot(&h) + &model.fc2.bias;
        Ok(y.to_dlpack()?)
    }

    /// Saves any `dict` of tensors (a `state_dict`, ...) as a checkpoint folder, the
    /// layout `save_pretrained` writes: `model.safetensors`, or shards of at most
    /// `max_shard_bytes` and their index.
    #[pyfunction]
    fn save_checkpoint(
        mut state: TensorBatch,
        folder: PathBuf,
        max_shard_bytes: u64,
    ) -> PyResult<()> {
        state.metadata_mut().insert("format".into(), "pt".into());
        Ok(state.write_checkpoint(folder, max_shard_bytes)?)
    }

    /// Loads a checkpoint (a folder, its index, or one `.safetensors` file) as a `dict`
    /// of tensors, each read into memory of its own.
    #[pyfunction]
    fn load_checkpoint(path: PathBuf) -> PyResult<TensorBatch> {
        Ok(Checkpoint::open(path)?.read_where(|_| true)?)
    }

    /// Multiplies a float32 vector by `factor`, in place, in the caller's own memory. The
    /// array is the last argument: no conversion of the caller's (`__float__`...) runs
    /// between its import and the write.
    #[pyfunction]
    fn scale(factor: f32, mut x: DLPackArray<f32, Ix1>) -> PyResult<()> {
        // SAFETY: no Python code runs from the array's extraction (the last argument) to
        // the end of the write, and the interpreter is kept; its callers (example.py)
        // pass NumPy arrays and torch tensors (torch's autograd rule is applied by
        // `assume_exclusive`), never JAX arrays.
        unsafe { x.assume_exclusive() }?;
        x.view_mut()?.mapv_inplace(|v| v * factor);
        Ok(())
    }

    /// Adds the `Tensor` class (for `isinstance`), named `dlpack_example.Tensor`.
    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        dlpack_core::python::add_to_module(m)
    }
}
