//! [`Checkpoint`]: a checkpoint as it is published, one safetensors file or a folder of
//! shards with their index, opened by reading headers only; `values`: what it gives,
//! reading only the tensors asked for.

mod values;

pub use values::ReadOptions;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::batch::TensorBatch;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::tensor::ManagedTensor;
#[cfg(doc)]
use crate::traits::FromDLPack;

use super::file::{
    Identity, MappedFile, big_endian, changed, identity, map_opened, open, open_identified,
    read_header,
};
use super::header::{Header, MAX_HEADER, invalid};
use super::index::{self, INDEX_NAME, SINGLE_NAME};
use super::read::{self, Plan, Source};

/// A checkpoint as it is published: one safetensors file, or a folder of shards whose
/// index (`model.safetensors.index.json`) says which shard holds each tensor.
///
/// [`open`](Self::open) reads the index and every shard's header, nothing else. The
/// index is the allowlist: the checkpoint holds exactly the tensors its `weight_map`
/// lists, each read from the shard the index names for it, never from another shard
/// that happens to hold a tensor of that name, and a shard's unlisted tensors are never
/// read. A shard name that is not a plain file name inside the index's folder is an
/// error before any file is opened.
///
/// Reading reads only what is asked for, straight into the buffers that the values
/// keep, with several threads. Methods named `read` make a new value; `load_into`
/// fills one that exists, as [`FromDLPack::load_dlpack`] and PyTorch's
/// `load_state_dict` do:
///
/// | method | what it gives | reads |
/// |---|---|---|
/// | [`read`](Self::read), [`read_with`](Self::read_with) | a new value of a type that implements [`FromDLPack`] (a `#[derive(FromDLPack)]` struct), strictly, as `T::from_dlpack` | only the tensors the type takes |
/// | [`read_lenient`](Self::read_lenient), [`read_lenient_with`](Self::read_lenient_with) | the new value, and the checkpoint's tensors it does not take | the same |
/// | [`load_into`](Self::load_into), [`load_into_lenient`](Self::load_into_lenient) (and `_with`) | an existing value filled in place, its buffers kept | every tensor |
/// | [`read_where`](Self::read_where), [`read_where_with`](Self::read_where_with) | a [`TensorBatch`] of the tensors a filter accepts | those tensors |
/// | [`map`](Self::map) (`unsafe`) | a [`TensorBatch`] over copy-on-write mappings of the shards | headers only, pages when touched |
/// | [`read_mapped`](Self::read_mapped), [`read_mapped_with`](Self::read_mapped_with) (`unsafe`) | a new value over copy-on-write mappings of the shards that hold what it takes (a tensor-parallel rank's parts as views) | headers only, pages when touched |
///
/// Floats are converted only when asked ([`ReadOptions::convert_floats`]).
pub struct Checkpoint {
    /// What was opened: the index, or the one file.
    path: PathBuf,
    shards: Vec<Shard>,
    /// Every tensor, in the index's order (the file's for a single file).
    tensors: Vec<Stored>,
    /// The tensors' names, for selections, and where each is in `tensors` (made when
    /// first asked for: a map needs neither).
    names: OnceLock<BTreeSet<String>>,
    by_name: OnceLock<HashMap<String, usize>>,
    /// The shards' `__metadata__`, merged, and the index's `metadata`.
    metadata: BTreeMap<String, String>,
    index_metadata: BTreeMap<String, String>,
}

/// How many files of a checkpoint stay open: the first shards'. The others are opened
/// again when read or mapped, at most this many at a time, so that a checkpoint of any
/// number of shards stays well within a process's limit of open files (1,024 by
/// default on Linux, 256 on macOS).
const KEPT_OPEN: usize = 32;

/// One file of a checkpoint: its path, its open file (for the first [`KEPT_OPEN`]
/// shards) and which file it is, its checked header and the JSON bytes it was parsed
/// from, and for each entry of the header the tensor of the checkpoint it is, if the
/// index lists it there.
struct Shard {
    path: PathBuf,
    file: Option<File>,
    identity: Identity,
    header: Header,
    json: Vec<u8>,
    listed: Vec<Option<usize>>,
}

/// Where a tensor of the checkpoint is: its shard, its entry in the shard's header
/// (which holds its name).
struct Stored {
    shard: usize,
    entry: usize,
}

/// One tensor of a [`Checkpoint`], as its shard's header describes it (nothing read).
#[derive(Clone, Copy)]
pub struct StoredTensor<'a> {
    name: &'a str,
    shard: &'a Shard,
    entry: usize,
}

impl<'a> StoredTensor<'a> {
    /// Its name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// Its element type in the file.
    pub fn dtype(&self) -> DataType {
        self.shard.header.entries[self.entry].dtype
    }

    /// Its extents.
    pub fn shape(&self) -> &'a [usize] {
        &self.shard.header.entries[self.entry].shape
    }

    /// The file that holds it.
    pub fn shard(&self) -> &'a Path {
        &self.shard.path
    }

    /// Its size in the file, in bytes.
    pub fn byte_len(&self) -> usize {
        let entry = &self.shard.header.entries[self.entry];
        entry.end - entry.begin
    }
}

impl fmt::Debug for StoredTensor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredTensor")
            .field("name", &self.name)
            .field("dtype", &self.dtype())
            .field("shape", &self.shape())
            .field("shard", &self.shard())
            .finish()
    }
}

impl Checkpoint {
    /// Opens a checkpoint: `path` is a safetensors file, an index
    /// (`*.safetensors.index.json`, its shards beside it), or a folder holding
    /// `model.safetensors.index.json` (preferred) or `model.safetensors`, as Hugging
    /// Face's `save_pretrained` writes them. Reads the index and every shard's header;
    /// no tensor is read. The files of the first 32 shards stay open until the
    /// checkpoint is dropped, so that a save into the folder meanwhile does not change
    /// what it reads; a checkpoint of more shards closes the others after reading their
    /// headers and opens them again to read or map them, at most 32 at a time (1,100
    /// shards load under a limit of 256 open files), and refuses one that another file
    /// has replaced since ([`Error::InvalidFile`]: open the checkpoint again; known by
    /// its inode and change times, so a replacement within one tick of the file
    /// system's clock may pass unseen, though never a read outside the file).
    ///
    /// # Errors
    ///
    /// Each names the file and, where there is one, the tensor. No name in an index
    /// leads out of its folder (a shard that is a symbolic link is followed: the Hugging
    /// Face cache lays its checkpoints out so), and only regular files are read.
    /// - [`Error::Io`] when a file cannot be opened or read: the path, the index, a
    ///   shard (in an [`Error::Tensor`] naming a tensor the index places there), or a
    ///   folder with neither file (`NotFound`).
    /// - [`Error::InvalidFile`] about the index: not UTF-8 JSON, no `weight_map`, a
    ///   tensor listed twice, a shard that is not a string or not a plain file name in
    ///   the folder (a separator, `.` or `..`, an absolute path), a `metadata` that is
    ///   not an object; a tensor the index lists that its shard does not hold.
    /// - [`Error::InvalidFile`] about a shard: everything
    ///   [`TensorBatch::read_safetensors`] refuses in a header, a truncated data
    ///   section included.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        match resolve(path.as_ref())? {
            Published::Index(index) => Self::open_index(&index),
            Published::File(file) => Self::open_file(&file),
        }
    }

    /// A checkpoint of one safetensors file: all its tensors, in its header's order.
    fn open_file(path: &Path) -> Result<Self> {
        let (file, identity) = open_identified(path)?;
        let (header, json) = read_header(path, &file, identity.len)?;
        let metadata = header.metadata.clone();
        let tensors: Vec<Stored> = (0..header.entries.len())
            .map(|entry| Stored { shard: 0, entry })
            .collect();
        let listed = (0..tensors.len()).map(Some).collect();
        let shard = Shard {
            path: path.to_owned(),
            identity,
            file: Some(file),
            header,
            json,
            listed,
        };
        Ok(Self::new(
            path,
            vec![shard],
            tensors,
            metadata,
            BTreeMap::new(),
        ))
    }

    /// A checkpoint of the shards an index lists.
    fn open_index(path: &Path) -> Result<Self> {
        let json = read_index(path)?;
        let index = index::parse(path, &json)?;
        let folder = folder_of(path);
        // Each shard opened once, in the order the index first names it.
        let first = index.first_of_each_shard();
        let mut shards: Vec<Shard> = Vec::with_capacity(index.shards.len());
        for (file_name, &name) in index.shards.iter().zip(&first) {
            let shard_path = folder.join(file_name);
            let (file, identity) = open_identified(&shard_path).map_err(|e| e.in_tensor(name))?;
            let (header, json) =
                read_header(&shard_path, &file, identity.len).map_err(|e| e.in_tensor(name))?;
            let listed = vec![None; header.entries.len()];
            // (Past the first shards, the file is closed now and opened again to read.)
            let file = (shards.len() < KEPT_OPEN).then_some(file);
            shards.push(Shard {
                path: shard_path,
                file,
                identity,
                header,
                json,
                listed,
            });
        }
        // Each tensor in the shard the index names, found by its name.
        let mut found: Vec<Option<Stored>> = index.weight_map.iter().map(|_| None).collect();
        for (at, shard) in shards.iter_mut().enumerate() {
            let entries = shard.header.entries.iter().enumerate();
            for ((k, entry), listed) in entries.zip(&mut shard.listed) {
                let place = index.places.get(entry.name.as_str()).copied();
                if let Some(i) = place.filter(|&i| index.weight_map[i].1 == at) {
                    found[i] = Some(Stored {
                        shard: at,
                        entry: k,
                    });
                    *listed = Some(i);
                }
            }
        }
        let mut tensors = Vec::with_capacity(found.len());
        for ((name, shard), stored) in index.weight_map.iter().zip(found) {
            let Some(stored) = stored else {
                let file_name = &index.shards[*shard];
                return Err(invalid(
                    path,
                    Some(name),
                    format!("the index places it in `{file_name}`, which does not hold it"),
                ));
            };
            tensors.push(stored);
        }
        // The shards' `__metadata__`, the first shard's value where two differ.
        let mut metadata = BTreeMap::new();
        for shard in &shards {
            for (key, value) in &shard.header.metadata {
                metadata.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
        Ok(Self::new(path, shards, tensors, metadata, index.metadata))
    }

    fn new(
        path: &Path,
        shards: Vec<Shard>,
        tensors: Vec<Stored>,
        metadata: BTreeMap<String, String>,
        index_metadata: BTreeMap<String, String>,
    ) -> Self {
        Self {
            path: path.to_owned(),
            shards,
            tensors,
            names: OnceLock::new(),
            by_name: OnceLock::new(),
            metadata,
            index_metadata,
        }
    }

    /// What was opened: the index, or the one safetensors file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the checkpoint holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The tensors' names, in the index's order (the file's for a single file).
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.tensors.len()).map(|i| self.name(i))
    }

    /// The tensor named `name`, as its shard's header describes it.
    pub fn tensor(&self, name: &str) -> Option<StoredTensor<'_>> {
        self.index_of(name).map(|i| self.stored(i))
    }

    /// Where the tensor named `name` is in `tensors`.
    fn index_of(&self, name: &str) -> Option<usize> {
        let by_name = self.by_name.get_or_init(|| {
            let names = self.tensors.iter().enumerate();
            names.map(|(i, _)| (self.name(i).to_owned(), i)).collect()
        });
        by_name.get(name).copied()
    }

    /// The files the tensors are in, in the order the index first names them.
    pub fn shards(&self) -> impl ExactSizeIterator<Item = &Path> + '_ {
        self.shards.iter().map(|s| s.path.as_path())
    }

    /// The shards' `__metadata__`, merged (where two shards give a key different
    /// values, the first shard's): what [`read_where`](Self::read_where) and
    /// [`map`](Self::map) give as the batch's metadata, and what
    /// [`TensorBatch::write_checkpoint`] writes into every shard.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The index's `metadata` (`total_size`, and what else the writer put there),
    /// strings as they are and other values as JSON text; empty for a single file.
    pub fn index_metadata(&self) -> &BTreeMap<String, String> {
        &self.index_metadata
    }

    /// The name of the tensor at `i` in `tensors`.
    fn name(&self, i: usize) -> &str {
        let stored = &self.tensors[i];
        &self.shards[stored.shard].header.entries[stored.entry].name
    }

    fn stored(&self, i: usize) -> StoredTensor<'_> {
        let stored = &self.tensors[i];
        StoredTensor {
            name: self.name(i),
            shard: &self.shards[stored.shard],
            entry: stored.entry,
        }
    }

    /// Reads the tensors at `taken` (indices into `tensors`, each with the dimension it
    /// is split along between the ranks of the plan's group, if it is), in that order,
    /// in runs that open at most [`KEPT_OPEN`] shards again each: of a split tensor,
    /// only the plan's rank's part. A shard whose length is no longer the one it had
    /// when opened is an error (its header would no longer describe it), and so is a
    /// shard opened again that is another file.
    fn read_tensors(
        &self,
        taken: &[(usize, Option<usize>)],
        plan: Plan,
    ) -> Result<Vec<ManagedTensor>> {
        let mut tensors = Vec::with_capacity(taken.len());
        // The shards opened again for the run being read, by shard.
        let mut again: Vec<Option<File>> = self.shards.iter().map(|_| None).collect();
        let mut checked = vec![false; self.shards.len()];
        let mut start = 0;
        while start < taken.len() {
            let mut opened = 0;
            let mut end = start;
            for &(i, _) in &taken[start..] {
                let at = self.tensors[i].shard;
                let shard = &self.shards[at];
                if shard.file.is_none() && again[at].is_none() {
                    if opened == KEPT_OPEN {
                        break;
                    }
                    again[at] = Some(shard.open_again()?);
                    opened += 1;
                }
                if !checked[at] {
                    let file = shard.file.as_ref().or(again[at].as_ref());
                    let file = file.expect("a shard is kept open or opened again");
                    if identity(&shard.path, file)?.len != shard.header.file_len {
                        return Err(changed(&shard.path));
                    }
                    checked[at] = true;
                }
                end += 1;
            }
            let mut sources = Vec::with_capacity(end - start);
            for &(i, split) in &taken[start..end] {
                let stored = &self.tensors[i];
                let shard = &self.shards[stored.shard];
                let entry = &shard.header.entries[stored.entry];
                if cfg!(target_endian = "big") && entry.dtype.bits() > 8 {
                    return Err(big_endian(&shard.path, &entry.name));
                }
                let file = shard.file.as_ref().or(again[stored.shard].as_ref());
                sources.push(Source {
                    name: &entry.name,
                    file: file.expect("a shard is kept open or opened again"),
                    path: &shard.path,
                    offset: shard.header.data_start as u64 + entry.begin as u64,
                    dtype: entry.dtype,
                    shape: &entry.shape,
                    len: entry.end - entry.begin,
                    split,
                });
            }
            tensors.extend(read::read(&sources, plan)?);
            drop(sources);
            // The run's files closed before the next run opens others.
            again.iter_mut().for_each(|file| *file = None);
            start = end;
        }
        Ok(tensors)
    }

    /// A batch of named tensors, with the shards' metadata.
    fn batch<'s>(
        &self,
        tensors: impl Iterator<Item = (&'s str, ManagedTensor)>,
    ) -> Result<TensorBatch> {
        let mut batch = TensorBatch::with_capacity(tensors.size_hint().0);
        for (name, tensor) in tensors {
            // Names are unique (the index's and the headers' checks); a batch refuses
            // the empty one, which a file may hold.
            batch
                .insert(name, tensor)
                .map_err(|e| invalid(&self.path, Some(name), e.to_string()))?;
        }
        *batch.metadata_mut() = self.metadata.clone();
        Ok(batch)
    }

    /// Maps every shard into memory, as
    /// [`TensorBatch::map_safetensors`] maps a file: O(headers), pages read from the
    /// files when first touched, every tensor the index lists a view into a private
    /// (copy-on-write) mapping of its shard, exclusive and writable (writes never
    /// reach the files), in the index's order. A misaligned tensor gets one aligned
    /// copy, flagged `IS_COPIED`; `bool` tensors are read once, to check their bytes.
    /// Each shard's mapping must hold the header read when it was opened, at the length
    /// the file had then (else an [`Error::InvalidFile`]: the shard changed since).
    /// For a checkpoint that is only mapped, [`TensorBatch::map_checkpoint`] gives the
    /// same batch in one call, parsing each header once, from its mapping.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidFile`] for a shard that changed since it was opened or a `bool`
    /// tensor holding a byte other than 0 or 1, [`Error::Io`] when a shard cannot be
    /// mapped, and [`Error::AllocationFailed`] (inside [`Error::Tensor`]) when a
    /// misaligned tensor's copy cannot be allocated.
    ///
    /// # Safety
    ///
    /// As for [`TensorBatch::map_safetensors`], for every shard: no shard is modified
    /// or truncated from the call until the last tensor of the batch, or anything made
    /// from one without a copy, is dropped.
    pub unsafe fn map(&self) -> Result<TensorBatch> {
        let every: Vec<(usize, Option<usize>)> =
            (0..self.tensors.len()).map(|i| (i, None)).collect();
        let plan = Plan {
            threads: std::num::NonZeroUsize::MIN,
            convert: None,
            rank: None,
        };
        // SAFETY: the caller's contract is this function's, which is `map_tensors'`.
        let mapped = unsafe { self.map_tensors(&every, plan) }?;
        self.batch((0..self.tensors.len()).map(|i| self.name(i)).zip(mapped))
    }

    /// The tensors at `taken` (indices into `tensors`, each with the dimension it is
    /// split along between the ranks of the plan's group, if it is), in that order, as
    /// [`map`](Self::map) makes them: each a view of its shard's mapping, of a split
    /// tensor only the plan's rank's part (a strided view when it is not one run of
    /// bytes). A tensor the plan converts is read instead (converted, into a buffer of
    /// its own: a mapping holds the file's dtype), and so is a rank's part of packed
    /// elements that is not one run of bytes. Only the shards that hold a tensor
    /// mapped are mapped; each is checked to hold the header it had when opened.
    ///
    /// # Safety
    ///
    /// As for [`map`](Self::map), for every shard that holds a tensor at `taken`.
    unsafe fn map_tensors(
        &self,
        taken: &[(usize, Option<usize>)],
        plan: Plan,
    ) -> Result<Vec<ManagedTensor>> {
        // Read rather than mapped: a tensor the plan converts, and a rank's part of
        // packed elements (float4, float6) that is not one run of bytes, which no
        // strides describe.
        let by_reading = |&(i, split): &(usize, Option<usize>)| {
            let entry = &self.shards[self.tensors[i].shard].header.entries[self.tensors[i].entry];
            let dtype = entry.dtype;
            let packed = (usize::from(dtype.bits()) * usize::from(dtype.lanes())) % 8 != 0;
            plan.dtype_of(dtype) != dtype
                || packed
                    && read::Part::new(
                        dtype,
                        &entry.shape,
                        entry.end - entry.begin,
                        split,
                        plan.rank,
                    )
                    .is_ok_and(|part| !part.is_contiguous())
        };
        // The tensors read, in `taken`'s order.
        let to_read: Vec<(usize, Option<usize>)> =
            taken.iter().copied().filter(by_reading).collect();
        let read = self.read_tensors(&to_read, plan)?;
        // Each tensor made, by its index in `tensors`.
        let mut made: Vec<Option<ManagedTensor>> = self.tensors.iter().map(|_| None).collect();
        for (&(i, _), tensor) in to_read.iter().zip(read) {
            made[i] = Some(tensor);
        }
        // For each tensor mapped, its split, by its index in `tensors`.
        let mut split_of: Vec<Option<Option<usize>>> = vec![None; self.tensors.len()];
        let mut shards = vec![false; self.shards.len()];
        for &(i, split) in taken.iter().filter(|&t| !by_reading(t)) {
            split_of[i] = Some(split);
            shards[self.tensors[i].shard] = true;
        }
        for (shard, _) in self
            .shards
            .iter()
            .zip(&shards)
            .filter(|(_, mapped)| **mapped)
        {
            let listed = &shard.listed;
            let entries = &shard.header.entries;
            // The part of each entry mapped (the index lists it here and it is taken).
            let mut parts = Vec::with_capacity(entries.len());
            for (entry, at) in entries.iter().zip(listed) {
                let Some(split) = at.and_then(|i| split_of[i]) else {
                    parts.push(None);
                    continue;
                };
                let len = entry.end - entry.begin;
                let part = read::Part::new(entry.dtype, &entry.shape, len, split, plan.rank)
                    .map_err(|e| e.in_tensor(&entry.name))?;
                parts.push(Some(part));
            }
            let again = match &shard.file {
                Some(_) => None,
                None => Some(shard.open_again()?),
            };
            let file = shard.file.as_ref().or(again.as_ref());
            // SAFETY:
            // - the caller's contract is `map_safetensors`' for this shard;
            // - the header is the one read from this file (or the same file opened
            //   again) when it was opened, which `map_opened` checks the mapping holds.
            let tensors = unsafe {
                map_opened(
                    &shard.path,
                    file.expect("a shard is kept open or opened again"),
                    &shard.header,
                    &shard.json,
                    |entry| parts.get_mut(entry).and_then(Option::take),
                )
            }?;
            for (at, tensor) in listed.iter().zip(tensors) {
                if let (Some(i), Some(tensor)) = (at, tensor) {
                    made[*i] = Some(tensor);
                }
            }
        }
        taken
            .iter()
            .map(|&(i, _)| {
                made[i].take().ok_or_else(|| {
                    invalid(&self.path, Some(self.name(i)), "not made (listed twice?)")
                })
            })
            .collect()
    }
}

impl TensorBatch {
    /// Maps every tensor of a checkpoint into memory, as
    /// [`map_safetensors`](Self::map_safetensors) maps one file: `path` is what
    /// [`Checkpoint::open`] takes (a safetensors file, an index, or a folder holding
    /// either), and the batch is the one `Checkpoint::open(path)?.map()` gives: every
    /// tensor the index lists, in the index's order, a view into a private
    /// (copy-on-write) mapping of the shard the index names for it (never another
    /// shard's tensor of that name), with the shards' metadata. Each header is parsed
    /// once, from its shard's mapping, where `open` and then `map` read it from the file
    /// and check it again in the mapping: for a checkpoint that is only mapped, this
    /// costs what mapping its shards one by one costs, and the index.
    ///
    /// A misaligned tensor gets one aligned copy, flagged `IS_COPIED`; `bool` tensors
    /// are read once, to check their bytes. Each shard's file is closed once it is
    /// mapped (the mapping keeps it), so a checkpoint of any number of shards maps
    /// within a process's limit of open files (each shard is still one mapping, of
    /// the 65,530 a Linux process has by default).
    ///
    /// # Errors
    ///
    /// Those of [`Checkpoint::open`] (the index, a shard's file and header, a tensor
    /// the index lists that its shard does not hold), in the order it finds them, then
    /// those of [`Checkpoint::map`] (a `bool` tensor holding a byte other than 0 or 1,
    /// a misaligned tensor's copy that cannot be allocated, an empty name). A shard
    /// that cannot be mapped is an [`Error::Io`] found with its header, in the
    /// [`Error::Tensor`] of the first tensor the index places there. No tensor leaks on
    /// any error.
    ///
    /// # Safety
    ///
    /// As for [`map_safetensors`](Self::map_safetensors), for the file, or for every
    /// shard the index names: none is modified or truncated from the call until the
    /// last tensor of the batch, or anything made from one without a copy, is dropped.
    ///
    /// ```no_run
    /// use dlpack_core::TensorBatch;
    ///
    /// # fn main() -> dlpack_core::Result<()> {
    /// // SAFETY: nothing modifies the checkpoint's files while the batch lives.
    /// let weights = unsafe { TensorBatch::map_checkpoint("gpt2/") }?;
    /// println!("{} tensors", weights.len());
    /// # Ok(())
    /// # }
    /// ```
    pub unsafe fn map_checkpoint(path: impl AsRef<Path>) -> Result<Self> {
        match resolve(path.as_ref())? {
            // SAFETY: the caller's contract is this function's, for the one file.
            Published::File(file) => unsafe { Self::map_safetensors(file) },
            // SAFETY: the caller's contract is this function's.
            Published::Index(index) => unsafe { map_index(&index) },
        }
    }
}

/// [`TensorBatch::map_checkpoint`] of the index at `path`: each shard mapped and its
/// header parsed from the mapping, in the order the index first names it, then the
/// tensors made over the mappings; the errors of [`Checkpoint::open`] in the order it
/// finds them (the index, then each shard's file and header, then a tensor the index
/// lists that its shard does not hold), then those of [`Checkpoint::map`].
///
/// # Safety
///
/// As for [`TensorBatch::map_checkpoint`].
unsafe fn map_index(path: &Path) -> Result<TensorBatch> {
    let json = read_index(path)?;
    let index = index::parse(path, &json)?;
    let folder = folder_of(path);
    let first = index.first_of_each_shard();
    // Each shard mapped, its header parsed from the mapping, and each entry's place in
    // the index where the index lists it in this shard; which of the index's tensors
    // were found.
    let mut mapped = Vec::with_capacity(index.shards.len());
    let mut found = vec![false; index.weight_map.len()];
    for (at, (file_name, &first)) in index.shards.iter().zip(&first).enumerate() {
        let shard_path = folder.join(file_name);
        let (file, identity) = open_identified(&shard_path).map_err(|e| e.in_tensor(first))?;
        // SAFETY:
        // - `identity.len` is the shard's length as its status gave it just now;
        // - the caller's contract is `map_safetensors`' for this shard.
        let shard = unsafe { MappedFile::new(&shard_path, &file, identity.len) }
            .map_err(|e| e.in_tensor(first))?;
        // (The mapping keeps the file: it is closed now, whatever the number of shards.)
        drop(file);
        let places: Vec<Option<usize>> = (shard.header().entries.iter())
            .map(|entry| {
                let place = index.places.get(entry.name.as_str()).copied();
                let place = place.filter(|&i| index.weight_map[i].1 == at);
                if let Some(i) = place {
                    found[i] = true;
                }
                place
            })
            .collect();
        mapped.push((shard, places));
    }
    // The first tensor (in the index's order) that its shard does not hold.
    if let Some(i) = found.iter().position(|found| !found) {
        let (name, shard) = &index.weight_map[i];
        let file_name = &index.shards[*shard];
        return Err(invalid(
            path,
            Some(name),
            format!("the index places it in `{file_name}`, which does not hold it"),
        ));
    }
    // The tensors, by their places in the index.
    let mut made: Vec<Option<ManagedTensor>> = index.weight_map.iter().map(|_| None).collect();
    let mut metadata = BTreeMap::new();
    for (shard, places) in mapped {
        let (header, tensors) = shard.tensors(|entry, _| places[entry].is_some())?;
        for (place, tensor) in places.iter().zip(tensors) {
            if let (Some(i), Some(tensor)) = (place, tensor) {
                made[*i] = Some(tensor);
            }
        }
        // The shards' `__metadata__`, the first shard's value where two differ.
        for (key, value) in header.metadata {
            metadata.entry(key).or_insert(value);
        }
    }
    let mut batch = TensorBatch::with_capacity(made.len());
    for ((name, _), tensor) in index.weight_map.iter().zip(made) {
        let name: &str = name;
        let tensor = tensor.ok_or_else(|| invalid(path, Some(name), "not made (listed twice?)"))?;
        // Names are unique (the index's check); a batch refuses the empty one, which
        // a file may hold.
        batch
            .insert(name, tensor)
            .map_err(|e| invalid(path, Some(name), e.to_string()))?;
    }
    *batch.metadata_mut() = metadata;
    Ok(batch)
}

/// What a checkpoint's path names, as [`Checkpoint::open`] reads it: an index, or one
/// safetensors file.
enum Published {
    Index(PathBuf),
    File(PathBuf),
}

/// The index or the one file that `path` names: itself, or for a folder the index
/// (preferred) or `model.safetensors` in it.
fn resolve(path: &Path) -> Result<Published> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, &e))?;
    if meta.is_dir() {
        let index = path.join(INDEX_NAME);
        if index.is_file() {
            return Ok(Published::Index(index));
        }
        let single = path.join(SINGLE_NAME);
        if single.is_file() {
            return Ok(Published::File(single));
        }
        let err = std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "the folder holds neither {INDEX_NAME} nor {SINGLE_NAME}{}",
                other_weights(path)
            ),
        );
        return Err(Error::io(path, &err));
    }
    Ok(if path.extension().is_some_and(|e| e == "json") {
        Published::Index(path.to_owned())
    } else {
        Published::File(path.to_owned())
    })
}

/// The text of the index at `path`, refused above the format's limit on a header.
fn read_index(path: &Path) -> Result<Vec<u8>> {
    let (file, len) = open(path)?;
    if len > MAX_HEADER as u64 {
        let reason = format!("the index has {len} bytes, above the limit of {MAX_HEADER}");
        return Err(invalid(path, None, reason));
    }
    // The length its status gave, in one read (a file that grew since is read as it
    // was: its JSON then ends where the status said, or fails to parse).
    let mut json = Vec::new();
    let len = len as usize;
    json.try_reserve_exact(len)
        .map_err(|_| Error::AllocationFailed { bytes: len })?;
    json.resize(len, 0);
    std::io::Read::read_exact(&mut &file, &mut json).map_err(|e| Error::io(path, &e))?;
    Ok(json)
}

/// The folder of the index at `path`, where its shards are.
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// What a folder without an index or `model.safetensors` holds instead, and the way
/// forward: its safetensors files (a few by name), each a checkpoint of its own, and
/// the index that would make them one.
fn other_weights(folder: &Path) -> String {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return String::new();
    };
    let mut files: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".safetensors"))
        .collect();
    files.sort();
    let Some(first) = files.first() else {
        return String::new();
    };
    let shown: Vec<&str> = files.iter().take(3).map(String::as_str).collect();
    let more = match files.len() {
        n if n > 3 => format!(" and {} more", n - 3),
        _ => String::new(),
    };
    format!(
        "; it holds {} safetensors files ({}{more}): open one of them (`Checkpoint::open` of \
         the file, e.g. {first}), or write the index that lists them \
         (`TensorBatch::write_checkpoint` writes one with the shards)",
        files.len(),
        shown.join(", "),
    )
}

impl Shard {
    /// The shard's file opened again (it was closed after its header was read): the
    /// same file, else the error of a shard that changed since it was opened.
    fn open_again(&self) -> Result<File> {
        let (file, _) = open(&self.path)?;
        if identity(&self.path, &file)? != self.identity {
            return Err(changed(&self.path));
        }
        Ok(file)
    }
}

impl fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checkpoint")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .field("shards", &self.shards.len())
            .field("metadata", &self.metadata)
            .finish()
    }
}
