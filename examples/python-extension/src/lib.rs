//! A Python extension that shares arrays with NumPy, PyTorch and JAX through DLPack,
//! without copies: typed arguments, returned arrays, a Rust model as a Python object
//! (its tensors as attributes, `state_dict`, `load_state_dict`), checkpoints saved and
//! loaded in the layout `transformers` uses, a table of Arrow columns (pyarrow, Polars,
//! a Hugging Face `datasets` batch) as a struct, and an in-place function.

use pyo3::prelude::*;

/// Runs without the GIL on a free-threaded CPython (PyO3's default, said here): the
/// module keeps no state of its own, and dlpack-core relies on no interpreter lock (see
/// "Without the interpreter lock" in its import safety guide). The model's methods are
/// PyO3's borrows: a `&mut self` call beside another call of the same object is an
/// "already borrowed" `RuntimeError`.
#[pymodule(gil_used = false)]
mod dlpack_example {
    use std::path::PathBuf;

    use dlpack_core::safetensors::Checkpoint;
    use dlpack_core::{
        DLPackArray, FromDLPack, ManagedTensor, Parameter, Parameter1, Parameter2, TensorBatch,
        ToDLPack, pymodel,
    };
    use ndarray::{Array1, Array2, ArrayView1, Ix1, Ix2};
    use pyo3::prelude::*;

    /// `y = W x + b`, named as PyTorch's `nn.Linear` names its parameters. The arrays are
    /// `Parameter`s, which Python shares without a copy (see `Mlp`).
    #[derive(ToDLPack, FromDLPack)]
    struct Linear {
        weight: Parameter2<f32>,
        bias: Parameter1<f32>,
    }

    impl Linear {
        fn apply(&self, x: ArrayView1<'_, f32>) -> Array1<f32> {
            self.weight.view().dot(&x) + self.bias.view()
        }
    }

    /// A model kept in Rust between calls, as a Python object: `m.fc1.weight` is the
    /// field's own memory (NumPy, PyTorch and JAX import it without a copy), `m.fc1.weight
    /// = t` sets it, and `state_dict()` / `load_state_dict()` are PyTorch's. The line that
    /// does it is `#[pymodel]` on the methods block.
    #[pyclass]
    #[derive(ToDLPack, FromDLPack)]
    struct Mlp {
        fc1: Linear,
        fc2: Linear,
    }

    #[pymodel]
    #[pymethods]
    impl Mlp {
        /// A model made in Rust.
        #[new]
        fn new(inputs: usize, hidden: usize, outputs: usize) -> Self {
            let layer = |i: usize, o: usize| Linear {
                weight: Parameter::from(Array2::from_shape_fn((o, i), |(r, c)| {
                    ((r + c) % 7) as f32 / 10.0
                })),
                bias: Parameter::from(Array1::zeros(o)),
            };
            Self {
                fc1: layer(inputs, hidden),
                fc2: layer(hidden, outputs),
            }
        }

        /// `Mlp.load(path)`: a checkpoint (a folder, its index, or one `.safetensors`
        /// file), reading only the tensors `Mlp` takes.
        #[staticmethod]
        fn load(path: PathBuf) -> PyResult<Self> {
            Ok(Checkpoint::open(path)?.read::<Self>()?)
        }

        /// Saves the model as a checkpoint folder, the layout `save_pretrained` writes.
        fn save(slf: &Bound<'_, Self>, folder: PathBuf, max_shard_bytes: u64) -> PyResult<()> {
            // Its `state_dict`: every tensor, without a copy.
            let mut state: TensorBatch = dlpack_core::python::model::state_dict(slf, "")?.extract()?;
            state.metadata_mut().insert("format".into(), "pt".into());
            Ok(state.write_checkpoint(folder, max_shard_bytes)?)
        }

        /// The output for `x`, from the weights as they are now (Python's in-place
        /// writes, such as an optimizer step, included).
        fn forward(&self, x: DLPackArray<f32, Ix1>) -> PyResult<ManagedTensor> {
            let h = self.fc1.apply(x.view()).mapv(|v| v.max(0.0));
            Ok(self.fc2.apply(h.view()).to_dlpack()?)
        }
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

    /// The rows of a table, by column name: an embedding per row and its label.
    /// `DLPackArray` fields read the columns in place (an owned `Array` would copy them).
    #[derive(FromDLPack)]
    struct Rows {
        embedding: DLPackArray<f32, Ix2>,
        label: DLPackArray<i64, Ix1>,
    }

    /// The mean embedding of the rows of each label `0..labels`, from any Arrow table
    /// (a pyarrow table or record batch, a Polars DataFrame, a `datasets` batch in the
    /// `arrow` format) whose `embedding` column is a fixed-size list of float32 and
    /// whose `label` column is int64, read without a copy.
    #[pyfunction]
    fn mean_by_label(table: TensorBatch, labels: usize) -> PyResult<ManagedTensor> {
        let rows = Rows::from_dlpack(table)?;
        let (embedding, label) = (rows.embedding.view(), rows.label.view());
        let mut sums = Array2::<f32>::zeros((labels, embedding.ncols()));
        let mut counts = vec![0u32; labels];
        for (row, &l) in embedding.outer_iter().zip(label) {
            let l = usize::try_from(l).ok().filter(|&l| l < labels).ok_or_else(|| {
                pyo3::exceptions::PyValueError::new_err(format!("label {l} is not in 0..{labels}"))
            })?;
            sums.row_mut(l).scaled_add(1.0, &row);
            counts[l] += 1;
        }
        for (mut sum, count) in sums.outer_iter_mut().zip(counts) {
            sum /= count.max(1) as f32;
        }
        Ok(sums.to_dlpack()?)
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

    /// Adds the `Tensor` class (for `isinstance`), named `dlpack_example.Tensor`, and the
    /// model's `ModelView` and `IncompatibleKeys`.
    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        dlpack_core::python::add_to_module(m)
    }
}
