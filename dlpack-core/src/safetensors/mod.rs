//! Weights on disk (feature `safetensors`): the files every framework reads and
//! writes, and checkpoints as they are published (a folder of shards and their index).
//! A `#[derive(ToDLPack, FromDLPack)]` model saves and loads by name, strictly, as with
//! a PyTorch `state_dict`.
//!
//! # One file
//!
//! | method | what it does | cost |
//! |---|---|---|
//! | [`TensorBatch::read_safetensors`] | each tensor read straight into a buffer of its own, typed where Rust has the element type | one copy from the page cache; an owned ndarray field takes the buffer without another |
//! | [`TensorBatch::map_safetensors`] (`unsafe`) | one private (copy-on-write) mapping, every tensor a view into it, exclusive and writable (writes never reach the file) | O(header); pages load when touched |
//! | [`TensorBatch::write_safetensors`] | every CPU tensor, in any layout, written in C order, streamed from its own memory to a temporary file renamed into place | one pass over the data |
//!
//! [`TensorBatch::metadata`] is the file's `__metadata__`, read and written. Every dtype
//! safetensors 0.8 writes is carried bit for bit: `BOOL`, `U8`..`U64`, `I8`..`I64`,
//! `F16`, `BF16`, `F32`, `F64`, `C64`, and float8 (`F8_E4M3` is DLPack's
//! `kDLFloat8_e4m3fn`, `F8_E5M2` `kDLFloat8_e5m2`, the `FNUZ` and `E8M0` ones likewise),
//! float6 and float4 (packed, as DLPack 1.1 describes sub-byte types). A tensor of a
//! type Rust has no element for is still carried, written, and exported to Python (a
//! view of it is a typed error naming the dtype).
//!
//! A file is foreign input: a header length beyond the file or the format's limit, a
//! header that is not UTF-8 JSON, a name given twice, an unknown dtype, offsets out of
//! order, overlapping or leaving gaps, byte lengths that do not match the shape, element
//! counts that overflow, a truncated data section, invalid `bool` bytes: each is an
//! [`Error::InvalidFile`] naming the file and the tensor, never a panic or a read
//! outside the file, and an I/O failure is an [`Error::Io`] with the path.
//!
#![cfg_attr(all(feature = "ndarray", feature = "derive"), doc = "```")]
#![cfg_attr(not(all(feature = "ndarray", feature = "derive")), doc = "```ignore")]
//! use dlpack_core::{FromDLPack, TensorBatch, ToDLPack};
//! use ndarray::{Array1, Array2};
//!
//! #[derive(ToDLPack, FromDLPack)]
//! struct Linear {
//!     weight: Array2<f32>,
//!     bias: Array1<f32>,
//! }
//!
//! # let folder = tempfile::tempdir().unwrap();
//! # let path = folder.path().join("linear.safetensors");
//! let layer = Linear { weight: Array2::eye(3), bias: Array1::zeros(3) };
//! let mut batch = layer.to_dlpack()?;
//! // What `transformers` writes (its releases before 5.0 refuse metadata without it).
//! batch.metadata_mut().insert("format".into(), "pt".into());
//! batch.write_safetensors(&path)?;
//!
//! // Owned arrays: each field keeps the buffer its tensor was read into.
//! let layer = Linear::from_dlpack(TensorBatch::read_safetensors(&path)?)?;
//! assert_eq!(layer.weight, Array2::<f32>::eye(3));
//!
//! // Mapped: O(header), pages load when touched; writes go to private pages.
//! // SAFETY: nothing modifies or truncates the file while the layer lives.
//! let batch = unsafe { TensorBatch::map_safetensors(&path) }?;
//! assert_eq!(batch.metadata()["format"], "pt");
//! let mut layer = Linear::from_dlpack(batch)?;
//! layer.bias[0] = 1.0;
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! # Checkpoints as published
//!
//! Past a few gigabytes, a model ships as a folder of shards,
//! `model-00001-of-00004.safetensors` and so on, and `model.safetensors.index.json`,
//! which names each tensor's shard (Hugging Face's layout), mostly in `bfloat16`.
//! [`Checkpoint::open`] reads the index and every shard's header, nothing else;
//! [`Checkpoint::read`] then reads only the tensors a type takes, straight into the
//! buffers its fields keep, with several threads, converting floats only when asked
//! ([`ReadOptions::convert_floats`]); [`TensorBatch::write_checkpoint`] writes the same
//! layout. [`TensorBatch::map_checkpoint`] (`unsafe`) maps every shard instead, each
//! header parsed once from its mapping: the one call for a checkpoint that is only
//! mapped.
//!
//! - **The index is the allowlist.** Only the tensors its `weight_map` lists exist,
//!   each read from the shard the index names for it, never from another shard that
//!   holds a tensor of the same name; a shard's unlisted tensors are never read. A
//!   shard is named by a plain file name inside the index's folder, or the index is an
//!   error and no file is opened.
//! - **Only what the type takes.** What a type takes is known from the names alone
//!   ([`FromDLPack::select_in`], which the derive, `Vec`, `Option`, maps and arrays
//!   implement the way `from_dlpack_in` takes tensors from a batch: `rename`,
//!   `flatten` and `with` fields included), so a struct of one layer reads that layer,
//!   not the checkpoint, and a name, dtype or rank that does not fit is an error before
//!   anything is read.
//! - **Threads and memory.** Tensors are cut into chunks that the threads read at once
//!   ([`ReadOptions::threads`]; by default the machine's parallelism). A load keeps no
//!   copy of the data beyond its output: each tensor is read straight into the buffer
//!   it ends in, with no buffer of a file, or through at most 256 KiB of staging and
//!   96 KiB of tables per thread while converting. Besides the data, a load holds what
//!   any load holds: the headers (kept by the checkpoint from its open), a work item per
//!   8 MiB chunk, and the stack of each thread it starts (the platform's default for a
//!   new thread: 2 MiB of address space on Linux, of which the reads touch a few pages;
//!   `threads(1)` starts none).
//!
#![cfg_attr(
    all(feature = "ndarray", feature = "derive", feature = "half"),
    doc = "```"
)]
#![cfg_attr(
    not(all(feature = "ndarray", feature = "derive", feature = "half")),
    doc = "```ignore"
)]
//! use dlpack_core::safetensors::{Checkpoint, ReadOptions};
//! use dlpack_core::{DataType, FromDLPack, ToDLPack};
//! use half::bf16;
//! use ndarray::{Array1, Array2};
//!
//! #[derive(ToDLPack, FromDLPack)]
//! struct Linear<T> {
//!     weight: Array2<T>,
//!     bias: Array1<T>,
//! }
//! #[derive(ToDLPack, FromDLPack)]
//! struct Model<T> {
//!     layers: Vec<Linear<T>>,
//! }
//!
//! # let folder = tempfile::tempdir().unwrap();
//! # let dir = folder.path();
//! let layer = |n| Linear { weight: Array2::from_elem((n, n), bf16::ONE), bias: Array1::from_elem(n, bf16::ZERO) };
//! let model = Model { layers: vec![layer(64), layer(64), layer(64)] };
//! // Shards of at most 16 KiB: three files and their index.
//! let mut batch = model.to_dlpack()?;
//! batch.metadata_mut().insert("format".into(), "pt".into());
//! batch.write_checkpoint(dir, 16 << 10)?;
//!
//! let checkpoint = Checkpoint::open(dir)?;
//! assert_eq!(checkpoint.shards().len(), 3);
//! // Every layer, as it is stored...
//! let model: Model<bf16> = checkpoint.read()?;
//! assert_eq!(model.layers.len(), 3);
//! // ...or one layer alone, from under its prefix (`layers.1.weight`, `layers.1.bias`),
//! // converted to float32 while it is read: the other layers are not read.
//! let options = ReadOptions::new().convert_floats(DataType::F32);
//! let second: Linear<f32> = checkpoint.load_at_with("layers.1", &options)?;
//! assert_eq!(second.weight[[0, 0]], 1.0f32);
//! // A field of another dtype is an error naming the tensor, before anything is read,
//! // and the message says the fix.
//! let err = checkpoint.read::<Model<f32>>().err().unwrap();
//! assert!(err.to_string().contains("convert_floats(DataType::F32)"));
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! [`Checkpoint::load_at`] reads a value from the tensors under a prefix
//! (`model.layers.7`) as if their names did not have it: one layer into the struct of
//! one layer, strictly within the prefix (a tensor under it that the struct does not
//! take is unexpected; the names outside it are never looked at), a missing tensor
//! named in full. [`Checkpoint::read_lenient`] reads a value that takes a part of the
//! checkpoint and lists the rest.
//!
//! ## When a load does not fit
//!
//! Every missing, unexpected and mismatched tensor is in one [`Error::StateDict`],
//! whose fields list every name; its message is short and says the fix it sees:
//!
//! | the mistake | the message says |
//! |---|---|
//! | 32 layers of the same missing names | `` `model.layers.{0..31}.self_attn.q_proj.weight` (32) ``, one line a pattern, 8 patterns at most, then "and N more" |
//! | a field named otherwise than the checkpoint | "the struct has `self_attention` where the checkpoint has `self_attn` (`layers.{0..11}.self_attn.…`, 48 tensors): `#[dlpack(rename = "self_attn")]` on the field `self_attention`" |
//! | a prefix the struct lacks | "the checkpoint's names start with `model.` where the struct's do not (291 tensors): load with `Checkpoint::load_at::<T>("model")`, or wrap the struct in a field `model`" (and the converse, with `#[dlpack(flatten)]`) |
//! | a `Vec` or map field named otherwise | "the field `blocks` (a Vec) took no items while the checkpoint has `layers.{0..11}.…` (108 tensors): `#[dlpack(rename = "layers")]` on it if those are its items" ([`Error::EmptyContainer`]; a lenient load lists it in [`LoadReport::empty`](crate::LoadReport::empty)) |
//! | one shard opened alone | "`model-00001-of-00003.safetensors` is one of the 3 shards of `model.safetensors.index.json` beside it: open that index or its folder" ([`Error::LoneShard`]) |
//! | bfloat16 tensors into float32 fields | "291 tensors are bfloat16 where the value takes float32: load with `ReadOptions::new().convert_floats(DataType::F32)` …" |
//!
//! **What an empty `Vec` means.** A `Vec` field takes `name.0`, `name.1`, … up to the
//! first index with no tensor, so a `Vec` whose name the checkpoint does not use takes
//! nothing, and an empty `Vec` is a valid value (a model without those layers). A load
//! does not pass that silently when names beside the field that nothing took look like
//! its items (`layers.0.…` beside an empty `blocks`): strictly it is an error saying so,
//! leniently it is in the report's `empty`.
//!
//! ## Tensor-parallel ranks
//!
//! A rank of a tensor-parallel group reads only its part of the weights. The struct
//! declares, per field, the dimension its tensors are split along,
//! `#[dlpack(split = D)]` (Megatron's column-parallel layers along 0, row-parallel ones
//! along 1; a field without it is replicated, read whole by every rank), and the load
//! names the rank, [`ReadOptions::tensor_parallel`]`(rank, world_size)`. Each split field
//! then receives PyTorch's `torch.chunk(full, world_size, D)[rank]`:
//!
//! - **Only the rank's bytes are read**: one range per tensor for a split along
//!   dimension 0 (or after extents of 1 only), else one range per row of the dimensions
//!   before `D`, each read exactly. No byte outside the rank's part is read (the bound
//!   on over-read is zero), and nothing is advised to the kernel's readahead beyond
//!   those ranges; a converting load ([`ReadOptions::convert_floats`]) converts the
//!   part as it reads it.
//! - **Shapes are checked against the full tensors**, from the headers, at every world
//!   size and before anything is read: a dimension the tensor does not have, or an
//!   extent that is not a multiple of the world size, is an [`Error::InvalidSplit`]
//!   naming the tensor, its full shape, the dimension and the world size (all of them
//!   at once, in one [`Error::StateDict`]); a rank not below the world size is an
//!   [`Error::InvalidRank`].
//! - **Mapped, no copy**: [`Checkpoint::read_mapped_with`] (`unsafe`, as any mapping)
//!   gives each split field a view of the rank's part of the shard's mapping, strided
//!   when the part is not one run (the whole tensor's strides), so that the rank reads
//!   only its own bytes, and no page wholly inside other ranks' parts; fields that keep
//!   their tensor (`DLPackArray`) keep the view. Packed columns (float4, float6 split
//!   along an inner dimension) are read, since no strides describe them.
//! - [`Checkpoint::read_with`], [`Checkpoint::read_lenient_with`], the in-place loads
//!   and [`Checkpoint::read_mapped_with`] split; a [`Checkpoint::map`] and
//!   [`Checkpoint::read_where`] have no type to say what is split, and give whole
//!   tensors. At world size 1 everything is as without the option.
//!
#![cfg_attr(all(feature = "ndarray", feature = "derive"), doc = "```")]
#![cfg_attr(not(all(feature = "ndarray", feature = "derive")), doc = "```ignore")]
//! use dlpack_core::safetensors::{Checkpoint, ReadOptions};
//! use dlpack_core::{FromDLPack, ToDLPack};
//! use ndarray::{Array1, Array2, s};
//!
//! #[derive(ToDLPack, FromDLPack)]
//! struct Mlp {
//!     #[dlpack(split = 0)] // column-parallel: rows
//!     up: Array2<f32>,
//!     #[dlpack(split = 1)] // row-parallel: columns
//!     down: Array2<f32>,
//!     norm: Array1<f32>, // replicated
//! }
//!
//! # let folder = tempfile::tempdir().unwrap();
//! # let dir = folder.path();
//! let whole = || Mlp {
//!     up: Array2::from_shape_fn((8, 4), |(i, j)| (i * 4 + j) as f32),
//!     down: Array2::from_shape_fn((4, 8), |(i, j)| (i * 8 + j) as f32),
//!     norm: Array1::ones(4),
//! };
//! whole().to_dlpack()?.write_checkpoint(dir, 1 << 20)?;
//! let full = whole();
//! let checkpoint = Checkpoint::open(dir)?;
//! // Rank 1 of 4: a quarter of `up`'s rows and of `down`'s columns, all of `norm`.
//! let rank: Mlp = checkpoint.read_with(&ReadOptions::new().tensor_parallel(1, 4))?;
//! assert_eq!(rank.up, full.up.slice(s![2..4, ..]));
//! assert_eq!(rank.down, full.down.slice(s![.., 2..4]));
//! assert_eq!(rank.norm, full.norm);
//! // 8 rows do not split between 3 ranks: refused before reading.
//! assert!(checkpoint.read_with::<Mlp>(&ReadOptions::new().tensor_parallel(0, 3)).is_err());
//! # Ok::<(), dlpack_core::Error>(())
//! ```
//!
//! With the `pyo3` feature a [`TensorBatch`] is a Python `dict` of tensors that PyTorch,
//! NumPy and JAX take without a copy: a mapped file gives PyTorch writable tensors over
//! private pages, as `safetensors.torch.load_file` does.
//!
//! ```ignore
//! #[pyfunction]
//! fn load(path: std::path::PathBuf) -> PyResult<TensorBatch> {
//!     Ok(Checkpoint::open(path)?.read_where(|_| true)?)
//! }
//! ```

// - `header`: a file's header, read as foreign input and checked;
// - `index`: a checkpoint's index, read as foreign input and checked;
// - `file`: one file read or mapped, and what the shards share with it;
// - `checkpoint`: [`Checkpoint`], opened from headers, loaded by selection;
// - `read`: owned reads, in parallel, straight into the buffers values keep;
// - `convert`: float conversions on load, as PyTorch makes them;
// - `write`: one file, or a checkpoint's shards and index, written atomically.
mod checkpoint;
mod convert;
mod file;
mod header;
mod index;
mod read;
mod write;

pub use checkpoint::{Checkpoint, ReadOptions, StoredTensor};
pub use convert::convert_floats;

#[cfg(doc)]
use crate::{Error, FromDLPack, TensorBatch};
