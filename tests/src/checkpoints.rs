//! Checkpoints as published, from Python: folders that Hugging Face's `transformers`
//! wrote, opened with `safetensors::Checkpoint` and loaded into derived Rust models (a
//! GPT-2 whose forward pass is written here in ndarray, a Llama), read, mapped and
//! written back in the same layout.

use std::collections::BTreeMap;
use std::path::PathBuf;

use dlpack_core::safetensors::{Checkpoint, ReadOptions};
use dlpack_core::{DataType, FromDLPack, TensorBatch, ToDLPack};
use ndarray::{Array1, Array2, Axis, s};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The options of a load: `convert` names a float type (`"float32"`, ...), `threads`
/// caps the threads.
fn options(convert: Option<&str>, threads: Option<usize>) -> PyResult<ReadOptions> {
    let mut options = ReadOptions::new();
    if let Some(name) = convert {
        let dtype = [DataType::BF16, DataType::F16, DataType::F32, DataType::F64]
            .into_iter()
            .find(|d| d.to_string() == name)
            .ok_or_else(|| PyValueError::new_err(format!("not a float type: {name}")))?;
        options = options.convert_floats(dtype);
    }
    if let Some(threads) = threads {
        options = options.threads(threads);
    }
    Ok(options)
}

/// A checkpoint read: its tensors, the shards' metadata and the index's.
type Read = (
    TensorBatch,
    BTreeMap<String, String>,
    BTreeMap<String, String>,
);

/// Reads every tensor of a checkpoint (a file, an index or a folder): a `dict`, the
/// shards' metadata and the index's.
#[pyfunction]
#[pyo3(signature = (path, convert = None, threads = None))]
fn read_checkpoint(path: PathBuf, convert: Option<&str>, threads: Option<usize>) -> PyResult<Read> {
    let checkpoint = Checkpoint::open(path)?;
    let batch = checkpoint.read_where_with(|_| true, &options(convert, threads)?)?;
    Ok((
        batch,
        checkpoint.metadata().clone(),
        checkpoint.index_metadata().clone(),
    ))
}

/// Maps every shard of a checkpoint: a `dict` of tensors over copy-on-write mappings.
/// A test helper over an `unsafe` call: an extension must not offer this as a safe
/// function to its users (a file truncated meanwhile kills the process).
#[pyfunction]
fn map_checkpoint(path: PathBuf) -> PyResult<TensorBatch> {
    let checkpoint = Checkpoint::open(path)?;
    // SAFETY: the tests map checkpoints that they made in folders of their own and never
    // modify while the tensors live.
    Ok(unsafe { checkpoint.map() }?)
}

/// Writes any mapping of `__dlpack__` objects as a checkpoint folder, with `metadata`
/// as every shard's `__metadata__`.
#[pyfunction]
#[pyo3(signature = (tensors, dir, max_shard_bytes, metadata = None))]
fn save_checkpoint(
    mut tensors: TensorBatch,
    dir: PathBuf,
    max_shard_bytes: u64,
    metadata: Option<BTreeMap<String, String>>,
) -> PyResult<()> {
    *tensors.metadata_mut() = metadata.unwrap_or_default();
    Ok(tensors.write_checkpoint(dir, max_shard_bytes)?)
}

// GPT-2, as `transformers`' `GPT2LMHeadModel` names its weights (its output layer is
// the token embedding, tied, so not stored).

#[derive(FromDLPack)]
struct Gpt2 {
    transformer: Transformer,
}

#[derive(FromDLPack)]
struct Transformer {
    wte: Embedding,
    wpe: Embedding,
    h: Vec<Block>,
    ln_f: LayerNorm,
}

#[derive(FromDLPack)]
struct Embedding {
    weight: Array2<f32>,
}

#[derive(FromDLPack)]
struct LayerNorm {
    weight: Array1<f32>,
    bias: Array1<f32>,
}

/// GPT-2's `Conv1D`: a linear layer whose weight is stored `[in, out]`.
#[derive(FromDLPack)]
struct Conv1D {
    weight: Array2<f32>,
    bias: Array1<f32>,
}

#[derive(FromDLPack)]
struct Attention {
    c_attn: Conv1D,
    c_proj: Conv1D,
}

#[derive(FromDLPack)]
struct Mlp {
    c_fc: Conv1D,
    c_proj: Conv1D,
}

#[derive(FromDLPack)]
struct Block {
    ln_1: LayerNorm,
    attn: Attention,
    ln_2: LayerNorm,
    mlp: Mlp,
}

impl LayerNorm {
    /// Each row normalised (biased variance, epsilon 1e-5), scaled and shifted.
    fn forward(&self, x: &Array2<f32>) -> Array2<f32> {
        let mean = x
            .mean_axis(Axis(1))
            .unwrap_or_default()
            .insert_axis(Axis(1));
        let centered = x - &mean;
        let var = centered
            .mapv(|v| v * v)
            .mean_axis(Axis(1))
            .unwrap_or_default()
            .insert_axis(Axis(1));
        centered / var.mapv(|v| (v + 1e-5).sqrt()) * &self.weight + &self.bias
    }
}

impl Conv1D {
    fn forward(&self, x: &Array2<f32>) -> Array2<f32> {
        x.dot(&self.weight) + &self.bias
    }
}

/// GPT-2's activation (`gelu_new`): the tanh approximation.
fn gelu(x: f32) -> f32 {
    let c = (2.0f32 / core::f32::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

impl Block {
    fn forward(&self, x: Array2<f32>, heads: usize) -> Array2<f32> {
        let (t, d) = x.dim();
        let dh = d / heads;
        let qkv = self.attn.c_attn.forward(&self.ln_1.forward(&x));
        let mut y = Array2::<f32>::zeros((t, d));
        for h in 0..heads {
            let q = qkv.slice(s![.., h * dh..(h + 1) * dh]);
            let k = qkv.slice(s![.., d + h * dh..d + (h + 1) * dh]);
            let v = qkv.slice(s![.., 2 * d + h * dh..2 * d + (h + 1) * dh]);
            let mut scores = q.dot(&k.t()) / (dh as f32).sqrt();
            for (i, mut row) in scores.rows_mut().into_iter().enumerate() {
                row.slice_mut(s![i + 1..]).fill(f32::NEG_INFINITY);
                let max = row.fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                row.mapv_inplace(|v| (v - max).exp());
                let sum = row.sum();
                row /= sum;
            }
            y.slice_mut(s![.., h * dh..(h + 1) * dh])
                .assign(&scores.dot(&v));
        }
        let x = x + self.attn.c_proj.forward(&y);
        let hidden = self.mlp.c_fc.forward(&self.ln_2.forward(&x)).mapv(gelu);
        &x + &self.mlp.c_proj.forward(&hidden)
    }
}

impl Gpt2 {
    /// The logits of every position of `ids`, `[len(ids), vocabulary]`.
    fn forward(&self, ids: &[usize], heads: usize) -> Array2<f32> {
        let t = &self.transformer;
        let mut x = Array2::<f32>::zeros((ids.len(), t.wte.weight.ncols()));
        for (i, &id) in ids.iter().enumerate() {
            let row = &t.wte.weight.row(id) + &t.wpe.weight.row(i);
            x.row_mut(i).assign(&row);
        }
        for block in &t.h {
            x = block.forward(x, heads);
        }
        t.ln_f.forward(&x).dot(&t.wte.weight.t())
    }
}

/// Loads a GPT-2 checkpoint into the derived [`Gpt2`] (strictly, converting floats to
/// `convert` if given) and returns the logits of `ids` from the forward pass above.
#[pyfunction]
#[pyo3(signature = (path, ids, heads, convert = None))]
fn gpt2_logits(
    path: PathBuf,
    ids: Vec<usize>,
    heads: usize,
    convert: Option<&str>,
) -> PyResult<dlpack_core::ManagedTensor> {
    let model: Gpt2 = Checkpoint::open(path)?.read_with(&options(convert, None)?)?;
    let vocabulary = model.transformer.wte.weight.nrows();
    if let Some(&id) = ids.iter().find(|&&id| id >= vocabulary) {
        return Err(PyValueError::new_err(format!(
            "token {id} is not below {vocabulary}"
        )));
    }
    Ok(model.forward(&ids, heads).to_dlpack()?)
}

/// Layer 5 of a GPT-2 checkpoint, by the names `transformer.h.5.*`.
#[derive(FromDLPack)]
struct FifthLayer {
    transformer: FifthOf,
}

#[derive(FromDLPack)]
struct FifthOf {
    h: Fifth,
}

#[derive(FromDLPack)]
struct Fifth {
    #[dlpack(rename = "5")]
    block: Block,
}

/// Loads layer 5 of a GPT-2 checkpoint alone (leniently): its `ln_1.weight` (to check
/// the values), the names it did not take, and the bytes its tensors take in the file.
#[pyfunction]
fn gpt2_fifth_layer(path: PathBuf) -> PyResult<(dlpack_core::ManagedTensor, Vec<String>, usize)> {
    let checkpoint = Checkpoint::open(path)?;
    let (layer, report) = checkpoint.read_lenient::<FifthLayer>()?;
    let bytes = checkpoint
        .names()
        .filter(|name| name.starts_with("transformer.h.5."))
        .filter_map(|name| checkpoint.tensor(name))
        .map(|t| t.byte_len())
        .sum();
    let ln_1 = layer.transformer.h.block.ln_1.weight.to_dlpack()?;
    Ok((ln_1, report.unexpected, bytes))
}

// Llama, as `transformers`' `LlamaForCausalLM` names its weights.

#[derive(ToDLPack, FromDLPack)]
struct Llama {
    model: LlamaModel,
    lm_head: Linear,
}

#[derive(ToDLPack, FromDLPack)]
struct LlamaModel {
    embed_tokens: Linear,
    layers: Vec<Decoder>,
    norm: Linear,
}

/// A weight alone (`nn.Linear` without bias, an embedding, an RMS norm): any rank.
#[derive(ToDLPack, FromDLPack)]
struct Linear {
    weight: ndarray::ArrayD<f32>,
}

#[derive(ToDLPack, FromDLPack)]
struct Decoder {
    self_attn: SelfAttention,
    mlp: GatedMlp,
    input_layernorm: Linear,
    post_attention_layernorm: Linear,
}

#[derive(ToDLPack, FromDLPack)]
struct SelfAttention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
}

#[derive(ToDLPack, FromDLPack)]
struct GatedMlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

/// Loads a (bfloat16) Llama checkpoint into the derived [`Llama`]'s float32 fields,
/// converting on load, and exports the model again: the `dict` Python compares with
/// PyTorch's `.float()`.
#[pyfunction]
fn llama_as_f32(path: PathBuf) -> PyResult<TensorBatch> {
    let options = ReadOptions::new().convert_floats(DataType::F32);
    let model: Llama = Checkpoint::open(path)?.read_with(&options)?;
    Ok(model.to_dlpack()?)
}

// The same Llama as one rank of a tensor-parallel group takes it, split as Megatron
// splits it: the attention's projections and the MLP's gate and up by output rows
// (column-parallel, dimension 0), the output projections by input columns
// (row-parallel, dimension 1); embeddings, norms and the head replicated.

#[derive(ToDLPack, FromDLPack)]
struct LlamaRank {
    model: LlamaModelRank,
    lm_head: Linear,
}

#[derive(ToDLPack, FromDLPack)]
struct LlamaModelRank {
    embed_tokens: Linear,
    layers: Vec<DecoderRank>,
    norm: Linear,
}

#[derive(ToDLPack, FromDLPack)]
struct DecoderRank {
    self_attn: SelfAttentionRank,
    mlp: GatedMlpRank,
    input_layernorm: Linear,
    post_attention_layernorm: Linear,
}

#[derive(ToDLPack, FromDLPack)]
struct SelfAttentionRank {
    #[dlpack(split = 0)]
    q_proj: Linear,
    #[dlpack(split = 0)]
    k_proj: Linear,
    #[dlpack(split = 0)]
    v_proj: Linear,
    #[dlpack(split = 1)]
    o_proj: Linear,
}

#[derive(ToDLPack, FromDLPack)]
struct GatedMlpRank {
    #[dlpack(split = 0)]
    gate_proj: Linear,
    #[dlpack(split = 0)]
    up_proj: Linear,
    #[dlpack(split = 1)]
    down_proj: Linear,
}

/// Loads rank `rank` of `world_size` of a Llama checkpoint into [`LlamaRank`] (floats
/// converted to `convert` if given, else float32), with one thread, and exports it: the
/// `dict` Python compares with `torch.chunk(full, world_size, dim)[rank]`.
#[pyfunction]
#[pyo3(signature = (path, rank, world_size, convert = "float32"))]
fn llama_rank(
    path: PathBuf,
    rank: usize,
    world_size: usize,
    convert: Option<&str>,
) -> PyResult<TensorBatch> {
    let checkpoint = Checkpoint::open(path)?;
    let options = options(convert, Some(1))?.tensor_parallel(rank, world_size);
    let model: LlamaRank = checkpoint.read_with(&options)?;
    Ok(model.to_dlpack()?)
}

/// Adds this module's functions to the extension.
pub(crate) fn add_functions(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(map_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(save_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(gpt2_logits, m)?)?;
    m.add_function(wrap_pyfunction!(gpt2_fifth_layer, m)?)?;
    m.add_function(wrap_pyfunction!(llama_as_f32, m)?)?;
    m.add_function(wrap_pyfunction!(llama_rank, m)?)?;
    Ok(())
}
