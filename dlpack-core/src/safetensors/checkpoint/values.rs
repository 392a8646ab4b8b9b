//! What a [`Checkpoint`] gives: a value made from it ([`Checkpoint::read`]), a value
//! filled from it in place ([`Checkpoint::load_into`]), a batch of the tensors a filter
//! accepts ([`Checkpoint::read_where`]), and the one-file shortcuts
//! [`TensorBatch::read_safetensors`] and [`TensorBatch::map_safetensors`]; how it
//! reads ([`ReadOptions`]).

use std::num::NonZeroUsize;
use std::path::Path;

use crate::batch::{TensorBatch, is_under};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::tensor::ManagedTensor;
use crate::traits::{FromDLPack, LoadReport, Selection, finish, load_in, look_alikes, merge};

use crate::safetensors::convert;
use crate::safetensors::file::{assemble, map_file, open};
use crate::safetensors::header::{MAX_HEADER, invalid};
use crate::safetensors::index;
use crate::safetensors::read::{Part, Plan, Rank};

use super::Checkpoint;

/// How a [`Checkpoint`] reads: float conversion, the number of threads, and the rank
/// of a tensor-parallel group that reads.
///
/// ```
/// use dlpack_core::DataType;
/// use dlpack_core::safetensors::ReadOptions;
///
/// // bfloat16, float16 and float64 tensors become float32 while they are read.
/// let options = ReadOptions::new().convert_floats(DataType::F32).threads(4);
/// // Rank 1 of 4: each field declared `#[dlpack(split = D)]` gets its quarter.
/// let rank = ReadOptions::new().tensor_parallel(1, 4);
/// # let _ = (options, rank);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    convert: Option<DataType>,
    threads: Option<NonZeroUsize>,
    /// `(rank, world_size)`, checked when the options are used.
    parallel: Option<(usize, usize)>,
}

impl ReadOptions {
    /// No conversion; as many threads as the machine runs at once.
    pub fn new() -> Self {
        Self::default()
    }

    /// Converts every `bfloat16`, `float16`, `float32` and `float64` tensor to `dtype`
    /// (one of those four) while reading it, as PyTorch's `Tensor.to(dtype)` converts:
    /// widening is exact, narrowing rounds to nearest, ties to even (a `float64`
    /// through `float32`, as PyTorch's element types convert), a NaN stays a NaN.
    /// Other tensors are read as they are. Without this, a tensor is read in its own
    /// dtype, and a field of another dtype is an error naming the tensor.
    ///
    /// A load that converts reads each tensor through a staging buffer of at most
    /// 256 KiB per thread (and 96 KiB for the conversion); one that does not, reads
    /// straight into the output.
    #[must_use]
    pub fn convert_floats(mut self, dtype: DataType) -> Self {
        self.convert = Some(dtype);
        self
    }

    /// Reads with at most `threads` threads (the calling one among them; 0 counts as
    /// 1). The default is the machine's parallelism
    /// ([`std::thread::available_parallelism`]); a small read starts fewer.
    #[must_use]
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = Some(NonZeroUsize::new(threads).unwrap_or(NonZeroUsize::MIN));
        self
    }

    /// Reads as rank `rank` of a tensor-parallel group of `world_size` ranks: each
    /// tensor that a field declares split along a dimension (`#[dlpack(split = D)]`
    /// on the field of a `#[derive(FromDLPack)]` struct, or
    /// [`Expected::split`](crate::implement::Expected::split) in a `select_in` of your
    /// own) is read as the rank's equal part along that dimension, PyTorch's
    /// `torch.chunk(full, world_size, D)[rank]`; every other tensor is read whole
    /// (replicated). Only the part's bytes are read: one range per tensor for a split
    /// along the first dimension, one range per row of the dimensions before `D`
    /// otherwise (each read exactly: nothing outside the part is read), converted on
    /// the way when [`convert_floats`](Self::convert_floats) asks.
    ///
    /// Shapes are checked against the full tensors in the headers, at every world size,
    /// before anything is read: a split dimension the tensor does not have, an extent
    /// that is not a multiple of `world_size`, or packed elements (float6, float4)
    /// whose parts would not start on whole bytes is an [`Error::InvalidSplit`] naming
    /// the tensor, its shape, the dimension and the world size. A `world_size` of 0 or
    /// a `rank` not below it is an [`Error::InvalidRank`] when the options are used.
    /// At a world size of 1 every tensor is read whole, as without this option.
    ///
    /// Used by [`Checkpoint::read_with`], [`Checkpoint::read_lenient_with`],
    /// [`Checkpoint::load_at_with`], [`Checkpoint::read_mapped_with`] (where a part is a
    /// view of the mapping, nothing read) and the in-place loads (which learn the splits
    /// from the value's type, for the tensors a fresh value of it would take);
    /// [`Checkpoint::read_where_with`] has no type to declare splits, and reads every
    /// tensor whole.
    #[must_use]
    pub fn tensor_parallel(mut self, rank: usize, world_size: usize) -> Self {
        self.parallel = Some((rank, world_size));
        self
    }

    /// The reading plan; an error for a conversion to a type that is not a float, or a
    /// rank that is not in its group.
    fn plan(&self) -> Result<Plan> {
        if let Some(dtype) = self.convert.filter(|&d| !convert::is_float(d)) {
            return Err(Error::UnsupportedDtype { dtype });
        }
        let rank = match self.parallel {
            Some((rank, world_size)) if world_size == 0 || rank >= world_size => {
                return Err(Error::InvalidRank { rank, world_size });
            }
            Some((rank, world)) => Some(Rank { rank, world }),
            None => None,
        };
        let threads = self
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN));
        Ok(Plan {
            threads,
            convert: self.convert,
            rank,
        })
    }
}

impl Checkpoint {
    /// Reads a new `T`, reading only the tensors it takes, strictly as
    /// [`T::from_dlpack`](FromDLPack::from_dlpack) imports a batch: every missing
    /// tensor, every tensor of the checkpoint that `T` does not take, and every tensor
    /// of another dtype or rank than its field's is an error, all reported at once in
    /// one [`Error::StateDict`], before a byte of data is read where the headers tell
    /// (the names, dtypes and ranks; shapes are checked by the value itself, as
    /// `from_dlpack` checks them). Each tensor is read straight into the buffer its
    /// field keeps. See [`read_lenient`](Self::read_lenient) for a value that takes a
    /// part of a checkpoint.
    ///
    /// # Errors
    ///
    /// [`Error::StateDict`] as above; [`Error::Io`] (in an [`Error::Tensor`]) when a
    /// read fails; [`Error::AllocationFailed`]; [`Error::InvalidFile`] for a `bool`
    /// byte other than 0 or 1.
    pub fn read<T>(&self) -> Result<T>
    where
        T: FromDLPack<Input = TensorBatch>,
    {
        self.read_with(&ReadOptions::new())
    }

    /// [`read`](Self::read), with float conversion or a number of threads.
    pub fn read_with<T>(&self, options: &ReadOptions) -> Result<T>
    where
        T: FromDLPack<Input = TensorBatch>,
    {
        self.read_as("", options, false, Self::read_tensors)
            .map(|(value, _)| value)
    }

    /// Reads a new `T` that takes a part of the checkpoint (one layer of a model, say),
    /// reading only the tensors it takes: the tensors it does not take are listed in
    /// the report's `unexpected`, in the index's order, and never read (unless `T`
    /// selects more than it keeps: the default [`FromDLPack::select_in`] of a type that
    /// does not say what it takes). The value is the one `T::from_dlpack_in` would
    /// take from a batch of every tensor of the checkpoint: which `Vec` items, map
    /// entries and `Option`s exist follows all the names, read or not. A tensor `T`
    /// needs and the checkpoint lacks is still an error (a fresh value needs every
    /// field), and so is a dtype or rank that does not fit, as in [`read`](Self::read).
    /// A `Vec` or map field that took no items while unexpected names beside it look
    /// like its items (a misnamed field) is in the report's
    /// [`empty`](LoadReport::empty). For one layer by its prefix, see
    /// [`load_at`](Self::load_at).
    pub fn read_lenient<T>(&self) -> Result<(T, LoadReport)>
    where
        T: FromDLPack<Input = TensorBatch>,
    {
        self.read_lenient_with(&ReadOptions::new())
    }

    /// [`read_lenient`](Self::read_lenient), with float conversion or a number of
    /// threads.
    pub fn read_lenient_with<T>(&self, options: &ReadOptions) -> Result<(T, LoadReport)>
    where
        T: FromDLPack<Input = TensorBatch>,
    {
        self.read_as("", options, true, Self::read_tensors)
    }

    /// A new `T` over copy-on-write mappings of the shards, as [`read`](Self::read)
    /// makes one from reads: strict in the same way, checked from the headers before
    /// anything is mapped, and each tensor it takes a view of its shard's mapping (as
    /// [`map`](Self::map) makes them; pages read when first touched), no copy for the
    /// fields that keep the tensor they are given (`DLPackArray`; an owned `Array`
    /// field copies, as it does from any tensor it did not make). Only the shards that
    /// hold a tensor `T` takes are mapped.
    ///
    /// For a rank of a tensor-parallel group
    /// ([`ReadOptions::tensor_parallel`]), each tensor that a field declares split is
    /// the rank's part of the mapping: a view of one run of bytes for a split along
    /// the first dimension, else a strided view that keeps the whole tensor's strides
    /// (its rows a whole row apart, as `torch.chunk` of a contiguous tensor gives),
    /// never a copy: the rank reads only its own bytes, and no page wholly inside other
    /// ranks' parts. Tensors that [`ReadOptions::convert_floats`] converts are read,
    /// converted, into buffers of their own (a mapping holds the file's dtype), and so
    /// are packed elements (float4, float6) split along an inner dimension, which no
    /// strides describe; the thread count applies to those reads. A `bool` part is
    /// checked to hold only 0 and 1 (other ranks' bytes are not its concern).
    ///
    /// ```no_run
    /// # #[cfg(all(feature = "derive", feature = "ndarray"))]
    /// # fn main() -> dlpack_core::Result<()> {
    /// use dlpack_core::safetensors::{Checkpoint, ReadOptions};
    /// use dlpack_core::{DLPackArray, FromDLPack};
    /// use ndarray::{Ix1, Ix2};
    ///
    /// #[derive(FromDLPack)]
    /// struct Mlp {
    ///     #[dlpack(split = 0)]
    ///     up: DLPackArray<f32, Ix2>,
    ///     #[dlpack(split = 1)]
    ///     down: DLPackArray<f32, Ix2>,
    ///     norm: DLPackArray<f32, Ix1>,
    /// }
    ///
    /// let checkpoint = Checkpoint::open("checkpoint-folder")?;
    /// let rank = ReadOptions::new().tensor_parallel(1, 4);
    /// // SAFETY: nothing modifies or truncates the shards while the model lives.
    /// let mlp: Mlp = unsafe { checkpoint.read_mapped_with(&rank) }?;
    /// # let _ = mlp;
    /// # Ok(())
    /// # }
    /// # #[cfg(not(all(feature = "derive", feature = "ndarray")))]
    /// # fn main() {}
    /// ```
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read), and as [`map`](Self::map) for the mappings.
    ///
    /// # Safety
    ///
    /// As for [`map`](Self::map), for every shard that holds a tensor `T` takes: no such
    /// shard is modified or truncated from the call until the value, and everything
    /// made from its tensors without a copy, is dropped.
    pub unsafe fn read_mapped<T>(&self) -> Result<T>
    where
        T: FromDLPack<Input = TensorBatch>,
    {
        // SAFETY: the caller's contract is this function's, which is `read_mapped_with`'s.
        unsafe { self.read_mapped_with(&ReadOptions::new()) }
    }

    /// [`read_mapped`](Self::read_mapped), with a rank of a tensor-parallel group, float
    /// conversion or a number of threads.
    ///
    /// # Errors
    ///
    /// As [`read_mapped`](Self::read_mapped).
    ///
    /// # Safety
    ///
    /// As for [`read_mapped`](Self::read_mapped).
    pub unsafe fn read_mapped_with<T>(&self, options: &ReadOptions) -> Result<T>
    where
        T: FromDLPack<Input = TensorBatch>,
    {
        let map = |checkpoint: &Self, taken: &[(usize, Option<usize>)], plan: Plan| {
            // SAFETY: the caller guarantees `map`'s contract for every shard that
            // holds a tensor `T` takes, and only those tensors are `taken`.
            unsafe { checkpoint.map_tensors(taken, plan) }
        };
        self.read_as("", options, false, map)
            .map(|(value, _)| value)
    }

    /// Loads the checkpoint into `value`, in place, as
    /// [`value.load_dlpack`](FromDLPack::load_dlpack) loads a batch (PyTorch's
    /// `load_state_dict`): the checkpoint's tensors are read (every one: a value in
    /// place may take names that a fresh one would not, such as the items of a `Vec`
    /// past a gap), and each that `value` takes is copied into its field's buffer,
    /// which keeps its allocation (a read into a fresh value, [`read`](Self::read),
    /// reads only what the value takes, and copies nothing). Strict: every tensor
    /// `value` has and the checkpoint lacks, every tensor of the checkpoint that
    /// `value` does not take, and every tensor that does not fit its field (dtype, rank or
    /// shape) is an error, all reported at once in one [`Error::StateDict`]; the
    /// tensors that fit are loaded even when others do not.
    ///
    /// # Errors
    ///
    /// [`Error::StateDict`] as above; the read errors of [`read`](Self::read).
    pub fn load_into<T>(&self, value: &mut T) -> Result<()>
    where
        T: FromDLPack<Input = TensorBatch>,
    {
        self.load_into_with(value, &ReadOptions::new())
    }

    /// [`load_into`](Self::load_into), with float conversion or a number of threads.
    pub fn load_into_with<T>(&self, value: &mut T, options: &ReadOptions) -> Result<()>
    where
        T: FromDLPack<Input = TensorBatch>,
    {
        self.load_as(value, options, false).map(drop)
    }

    /// Loads the checkpoint into `value`, in place, as
    /// [`value.load_dlpack_lenient`](FromDLPack::load_dlpack_lenient) loads a batch
    /// (PyTorch's `load_state_dict(strict=False)`): the tensors `value` has and the
    /// checkpoint lacks are the report's `missing`, the checkpoint's tensors it does not
    /// take its `unexpected`, and a `Vec` or map of `value` with no items while
    /// unexpected names beside it look like its items its
    /// [`empty`](LoadReport::empty); a tensor that does not fit its field is still an
    /// error.
    pub fn load_into_lenient<T>(&self, value: &mut T) -> Result<LoadReport>
    where
        T: FromDLPack<Input = TensorBatch>,
    {
        self.load_into_lenient_with(value, &ReadOptions::new())
    }

    /// [`load_into_lenient`](Self::load_into_lenient), with float conversion or a
    /// number of threads.
    pub fn load_into_lenient_with<T>(
        &self,
        value: &mut T,
        options: &ReadOptions,
    ) -> Result<LoadReport>
    where
        T: FromDLPack<Input = TensorBatch>,
    {
        self.load_as(value, options, true)
    }

    /// Reads a new `T` from the tensors under `prefix` (`"model.layers.7"`: the tensors
    /// named `model.layers.7.*`, and one named `model.layers.7` itself) as if their
    /// names did not have it, reading only the tensors `T` takes: one layer of a model
    /// into the struct of one layer, with no wrapper structs. Strict within the prefix,
    /// as [`read`](Self::read) is over the whole checkpoint: a tensor `T` needs that is
    /// not there is missing (named in full, `model.layers.7.mlp.weight`), a tensor
    /// under the prefix that `T` does not take is unexpected, and a dtype or rank that
    /// does not fit is an error, all at once in one [`Error::StateDict`] before a byte
    /// of data is read; the names outside the prefix are never looked at. An empty
    /// prefix reads the whole checkpoint, as [`read`](Self::read); a trailing `.` is
    /// ignored.
    ///
    /// ```no_run
    /// # #[cfg(all(feature = "derive", feature = "ndarray"))]
    /// # fn main() -> dlpack_core::Result<()> {
    /// use dlpack_core::FromDLPack;
    /// use dlpack_core::safetensors::Checkpoint;
    /// use ndarray::{Array1, Array2};
    ///
    /// #[derive(FromDLPack)]
    /// struct Linear {
    ///     weight: Array2<f32>,
    ///     bias: Array1<f32>,
    /// }
    ///
    /// #[derive(FromDLPack)]
    /// struct Layer {
    ///     attn: Linear,
    ///     mlp: Linear,
    /// }
    ///
    /// let checkpoint = Checkpoint::open("checkpoint-folder")?;
    /// // `model.layers.7.attn.weight`, ..., and nothing of the other layers.
    /// let layer: Layer = checkpoint.load_at("model.layers.7")?;
    /// // Every layer, as the checkpoint numbers them.
    /// let layers: Vec<Layer> = checkpoint.load_at("model.layers")?;
    /// # let _ = (layer, layers);
    /// # Ok(())
    /// # }
    /// # #[cfg(not(all(feature = "derive", feature = "ndarray")))]
    /// # fn main() {}
    /// ```
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    pub fn load_at<T>(&self, prefix: &str) -> Result<T>
    where
        T: FromDLPack<Input = TensorBatch>,
    {
        self.load_at_with(prefix, &ReadOptions::new())
    }

    /// [`load_at`](Self::load_at), with float conversion or a number of threads.
    pub fn load_at_with<T>(&self, prefix: &str, options: &ReadOptions) -> Result<T>
    where
        T: FromDLPack<Input = TensorBatch>,
    {
        // (`model.layers.7.` is `model.layers.7`.)
        let prefix = prefix.strip_suffix('.').unwrap_or(prefix);
        self.read_as(prefix, options, false, Self::read_tensors)
            .map(|(value, _)| value)
    }

    /// A new `T` at `prefix`, its tensors made by `fetch` (read, or mapped), with what it
    /// did not take.
    fn read_as<T: FromDLPack>(
        &self,
        prefix: &str,
        options: &ReadOptions,
        lenient: bool,
        fetch: impl FnOnce(&Self, &[(usize, Option<usize>)], Plan) -> Result<Vec<ManagedTensor>>,
    ) -> Result<(T, LoadReport)> {
        let plan = options.plan()?;
        let selection = self.selection::<T>(prefix);
        let unexpected = self.not_taken(&selection, prefix);
        // What the headers tell, before anything is read.
        let mut errors: Vec<Error> = selection
            .missing()
            .iter()
            .map(|name| Error::MissingTensor { name: name.clone() })
            .collect();
        errors.extend(self.misfits(&selection, plan));
        if !selection.missing().is_empty() {
            errors.extend(self.lone_shard());
        }
        if !errors.is_empty() || (!lenient && !unexpected.is_empty()) {
            if lenient {
                return Err(merge(errors, Vec::new()));
            }
            let empty = look_alikes(selection.empty_containers().to_vec(), &unexpected);
            errors.extend(empty.into_iter().map(Error::from));
            return Err(merge(errors, unexpected));
        }
        let mut batch = self.selected_batch(&selection, plan, prefix, fetch)?;
        let value = T::from_dlpack_in(prefix, &mut batch);
        not_selected(&unexpected, |name| batch.contains(name))?;
        let leftovers: Vec<String> = batch.names().map(str::to_owned).collect();
        let empty = look_alikes(selection.empty_containers().to_vec(), &leftovers);
        match value {
            Ok(value) if leftovers.is_empty() || lenient => Ok((
                value,
                LoadReport {
                    unexpected: leftovers,
                    empty,
                    ..LoadReport::default()
                },
            )),
            Ok(_) => {
                let errors = empty.into_iter().map(Error::from).collect();
                Err(merge(errors, leftovers))
            }
            Err(err) => Err(merge(
                vec![err],
                if lenient { Vec::new() } else { leftovers },
            )),
        }
    }

    fn load_as<T: FromDLPack>(
        &self,
        value: &mut T,
        options: &ReadOptions,
        lenient: bool,
    ) -> Result<LoadReport> {
        let plan = options.plan()?;
        // Every tensor: a value in place may take what a fresh one would not select
        // (the items of a `Vec` past a gap in the checkpoint's, a map's keys it holds).
        // A rank reads its part of those a fresh value would take split.
        let mut taken: Vec<(usize, Option<usize>)> =
            (0..self.tensors.len()).map(|i| (i, None)).collect();
        if plan.rank.is_some() {
            let selection = self.selection::<T>("");
            let errors = self.unsplittable(&selection, plan);
            if !errors.is_empty() {
                return Err(merge(errors, Vec::new()));
            }
            for (name, expected) in selection.taken() {
                if let Some(i) = self.index_of(name) {
                    taken[i].1 = expected.split;
                }
            }
        }
        let tensors = self.read_tensors(&taken, plan)?;
        let batch = self.batch((0..self.tensors.len()).map(|i| self.name(i)).zip(tensors))?;
        let (report, mut err) = load_in(value, batch);
        if !lenient && !report.missing.is_empty() {
            if let Some(hint) = self.lone_shard() {
                err = Some(merge(err.into_iter().chain([hint]).collect(), Vec::new()));
            }
        }
        finish(report, err, lenient)
    }

    /// An [`Error::LoneShard`] when this checkpoint is one file that an index beside
    /// it lists among its shards (looked for only when tensors are missing: opening
    /// one shard alone is allowed).
    fn lone_shard(&self) -> Option<Error> {
        if self.shards.len() != 1 || self.path.extension().is_some_and(|e| e == "json") {
            return None;
        }
        let file_name = self.path.file_name()?.to_str()?;
        let folder = match self.path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let mut indexes: Vec<std::path::PathBuf> = std::fs::read_dir(folder)
            .ok()?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(".safetensors.index.json"))
            })
            .collect();
        indexes.sort();
        indexes.into_iter().find_map(|index| {
            let (file, len) = open(&index).ok()?;
            if len > MAX_HEADER as u64 {
                return None;
            }
            let mut json = Vec::new();
            std::io::Read::read_to_end(&mut &file, &mut json).ok()?;
            let parsed = index::parse(&index, &json).ok()?;
            let shards = parsed.shards.len();
            (shards > 1 && parsed.shards.iter().any(|s| s == file_name)).then(|| Error::LoneShard {
                shard: self.path.clone(),
                index: index.clone(),
                shards,
            })
        })
    }

    /// What `T` at `prefix` takes of the checkpoint, over the names alone.
    fn selection<T: FromDLPack>(&self, prefix: &str) -> Selection<'_> {
        let names = self
            .names
            .get_or_init(|| self.names().map(str::to_owned).collect());
        let mut selection = Selection::new(names);
        T::select_in(prefix, &mut selection);
        selection
    }

    /// The checkpoint's tensors under `prefix` (every one for an empty prefix) that
    /// `selection` does not take, in the index's order.
    fn not_taken(&self, selection: &Selection<'_>, prefix: &str) -> Vec<String> {
        self.names()
            .filter(|name| within(name, prefix) && !selection.is_taken(name))
            .map(str::to_owned)
            .collect()
    }

    /// The tensors `selection` takes whose dtype (once converted) or rank in the
    /// headers is not the one their field wants.
    fn misfits(&self, selection: &Selection<'_>, plan: Plan) -> Vec<Error> {
        let mut errors = Vec::new();
        for (name, expected) in selection.taken() {
            let stored = self.tensor(name).map(|t| (t.dtype(), t.shape().len()));
            let Some((dtype, ndim)) = stored else {
                continue;
            };
            let dtype = plan.dtype_of(dtype);
            if let Some(want) = expected.dtype.filter(|&want| want != dtype) {
                let err = Error::DtypeMismatch {
                    expected: want,
                    found: dtype,
                };
                errors.push(err.in_tensor(name));
            } else if let Some(want) = expected.ndim.filter(|&want| want != ndim) {
                let err = Error::NdimMismatch {
                    expected: want,
                    found: ndim,
                };
                errors.push(err.in_tensor(name));
            }
        }
        errors.extend(self.unsplittable(selection, plan));
        errors
    }

    /// The tensors `selection` takes split that the plan's rank cannot take its part
    /// of (the full shapes in the headers): none without a rank.
    fn unsplittable(&self, selection: &Selection<'_>, plan: Plan) -> Vec<Error> {
        if plan.rank.is_none() {
            return Vec::new();
        }
        let mut errors = Vec::new();
        for (name, expected) in selection.taken() {
            let (Some(dim), Some(tensor)) = (expected.split, self.tensor(name)) else {
                continue;
            };
            let part = Part::new(
                tensor.dtype(),
                tensor.shape(),
                tensor.byte_len(),
                Some(dim),
                plan.rank,
            );
            if let Err(err) = part {
                errors.push(err.in_tensor(name));
            }
        }
        errors
    }

    /// The tensors `selection` takes, read; every other one stands in the batch as an
    /// empty placeholder that is never read, so that the value sees the checkpoint's
    /// names as a batch of all of them would show them (which `Vec` items exist, which
    /// `Option`s are there, which map keys).
    fn selected_batch(
        &self,
        selection: &Selection<'_>,
        plan: Plan,
        prefix: &str,
        fetch: impl FnOnce(&Self, &[(usize, Option<usize>)], Plan) -> Result<Vec<ManagedTensor>>,
    ) -> Result<TensorBatch> {
        // Each tensor taken, with the dimension it is split along, if it is.
        let mut split_of: Vec<Option<Option<usize>>> = vec![None; self.tensors.len()];
        for (name, expected) in selection.taken() {
            if let Some(i) = self.index_of(name) {
                split_of[i] = Some(expected.split);
            }
        }
        let taken: Vec<(usize, Option<usize>)> = split_of
            .iter()
            .enumerate()
            .filter_map(|(i, split)| split.map(|split| (i, split)))
            .collect();
        let read = fetch(self, &taken, plan)?;
        let mut read = taken.iter().map(|&(i, _)| i).zip(read).peekable();
        let mut batch = TensorBatch::with_capacity(self.tensors.len());
        for i in 0..self.tensors.len() {
            if !within(self.name(i), prefix) {
                continue;
            }
            let tensor = match read.next_if(|(at, _)| *at == i) {
                Some((_, tensor)) => tensor,
                None => placeholder()?,
            };
            let name = self.name(i);
            batch
                .insert(name, tensor)
                .map_err(|e| invalid(&self.path, Some(name), e.to_string()))?;
        }
        *batch.metadata_mut() = self.metadata.clone();
        Ok(batch)
    }

    /// Reads the tensors whose names `filter` accepts, each into a buffer of its own
    /// (typed where Rust has the element type, exclusive and writable), in the index's
    /// order; the batch's [`metadata`](TensorBatch::metadata) is the shards'
    /// ([`metadata`](Self::metadata)). Errors as [`read`](Self::read) for the reads.
    pub fn read_where(&self, filter: impl FnMut(&str) -> bool) -> Result<TensorBatch> {
        self.read_where_with(filter, &ReadOptions::new())
    }

    /// [`read_where`](Self::read_where), with float conversion or a number of threads.
    pub fn read_where_with(
        &self,
        mut filter: impl FnMut(&str) -> bool,
        options: &ReadOptions,
    ) -> Result<TensorBatch> {
        let plan = options.plan()?;
        let taken: Vec<(usize, Option<usize>)> = (0..self.tensors.len())
            .filter(|&i| filter(self.name(i)))
            .map(|i| (i, None))
            .collect();
        let tensors = self.read_tensors(&taken, plan)?;
        self.batch(taken.iter().map(|&(i, _)| self.name(i)).zip(tensors))
    }
}

/// Whether `name` is `prefix` or under it (every name is within an empty prefix).
fn within(name: &str, prefix: &str) -> bool {
    prefix.is_empty() || name == prefix || is_under(name, prefix)
}

/// A placeholder taken (one of `unexpected` that `left` no longer holds): a type whose
/// selection missed what it takes.
fn not_selected(unexpected: &[String], left: impl Fn(&str) -> bool) -> Result<()> {
    match unexpected.iter().find(|name| !left(name)) {
        Some(name) => Err(Error::NotSelected { name: name.clone() }),
        None => Ok(()),
    }
}

/// An empty tensor that stands for a tensor not read (see `selected_batch`).
fn placeholder() -> Result<ManagedTensor> {
    ManagedTensor::from_buffer(Vec::<u8>::new(), 0, &[0], &[1])
}

impl TensorBatch {
    /// Reads a safetensors file: each tensor straight from the file into a buffer of its
    /// own (no buffer of the whole file, no second copy; large files by several
    /// threads, as [`Checkpoint`] reads), typed where Rust has the element type, so that an owned ndarray field of a `#[derive(FromDLPack)]` struct
    /// takes the buffer without a copy (`Model::from_dlpack(batch)`). Tensors are
    /// exclusive and writable; `__metadata__` becomes [`metadata`](Self::metadata).
    ///
    /// Every dtype safetensors 0.8 writes is read: `BOOL`, `U8`..`U64`, `I8`..`I64`,
    /// `F16`, `BF16`, `F32`, `F64`, `C64`, and the low-precision ones (float8, float6
    /// and float4, with DLPack's type codes, bytes packed as the file stores them).
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the file cannot be opened or read (a missing file, a folder),
    /// [`Error::InvalidFile`] naming the file (and the tensor) for anything the file
    /// gets wrong: a header length beyond the file or the format's limit, a header that
    /// is not UTF-8 JSON, a name given twice, an unknown dtype, offsets out of order,
    /// overlapping or leaving gaps, a byte length that does not match the shape, an
    /// element count that overflows, a truncated or overlong data section, a `bool`
    /// byte other than 0 or 1. [`Error::AllocationFailed`] when a tensor does not fit
    /// in memory. No tensor leaks on any error.
    pub fn read_safetensors(path: impl AsRef<Path>) -> Result<Self> {
        Checkpoint::open_file(path.as_ref())?.read_where(|_| true)
    }

    /// Maps a safetensors file into memory: O(header) time, pages read from the file
    /// when first touched, every tensor a view into one private (copy-on-write)
    /// mapping that the last tensor alive keeps open. No swap is reserved for the
    /// private pages, so a file larger than memory maps: a page is found when it is
    /// first written, as for any memory under the system's overcommit, and under memory
    /// pressure that first write can get the process killed (by the kernel's
    /// out-of-memory killer) instead of failing as an allocation does. Where that
    /// matters, write into tensors [read](Self::read_safetensors), not mapped.
    ///
    /// Tensors are exclusive and writable: writes go to private pages, never to the
    /// file, so PyTorch, tch-rs and burn take them without a copy (as
    /// `safetensors.torch.load_file` gives writable tensors). A tensor whose offset in
    /// the file breaks its dtype's alignment (files from other writers can have that)
    /// gets one aligned copy, flagged `IS_COPIED`, never a misaligned view. `bool`
    /// tensors are read once, to check every byte is 0 or 1. Errors as
    /// [`read_safetensors`](Self::read_safetensors).
    ///
    /// # Safety
    ///
    /// - the file is not modified or truncated (by this process or another) from the
    ///   call until the last tensor of the batch, or anything made from one without a
    ///   copy, is dropped: the
    ///   pages of a private mapping that were not yet written show the file as it is
    ///   now, and a truncated file makes the kernel kill the process (`SIGBUS`) when a
    ///   page past its end is touched. The same contract as memmap2's `Mmap::map`.
    pub unsafe fn map_safetensors(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let (file, file_len) = open(path)?;
        // SAFETY:
        // - `file_len` is the file's length as its status gave it just now;
        // - the caller's contract is this function's.
        let (header, tensors) = unsafe { map_file(path, &file, file_len, |_, _| true) }?;
        assemble(header, tensors)
    }
}
