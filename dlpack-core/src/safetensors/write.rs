//! Writing: one safetensors file ([`TensorBatch::write_safetensors`]), streamed in C
//! order from each tensor's own memory, and a checkpoint as `save_pretrained` lays it
//! out ([`TensorBatch::write_checkpoint`]): shards of whole tensors and their index,
//! every file replaced atomically.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use safetensors::tensor::TensorInfo;

use crate::batch::TensorBatch;
use crate::error::{Error, Result};
use crate::tensor::ManagedTensor;

use super::header::{self, LENGTH_BYTES, MAX_HEADER, invalid};
use super::index::{INDEX_NAME, SINGLE_NAME, is_shard_name, shard_name};

impl TensorBatch {
    /// Writes the batch as a safetensors file: every CPU tensor in any layout (strided,
    /// negative, broadcast views are written in C order), streamed tensor by tensor
    /// from its own memory (no buffer of the file or of a tensor), to a temporary file
    /// in the same folder that is then renamed to `path`, so that a failed or
    /// interrupted save never leaves a truncated file under the name (a file already
    /// there is replaced only by a complete one, and a mapping of it keeps the old
    /// contents; the new file is not synced to disk before the rename, as
    /// `std::fs::write` does not sync). A file replaced keeps its permissions, and a
    /// symbolic link at `path` keeps pointing to the file it names, which is the one
    /// replaced. [`metadata`](Self::metadata) becomes `__metadata__` (keys sorted), and
    /// the same batch always gives the same bytes.
    ///
    /// As the reference writer does, tensors are laid out by decreasing element size,
    /// after a header padded to 8 bytes, so that each is aligned when the file is
    /// mapped.
    ///
    /// # Errors
    ///
    /// Before anything is written: a tensor on another device than the CPU
    /// ([`Error::UnsupportedDevice`]), of a dtype safetensors has no name for
    /// ([`Error::UnsupportedDtype`]: `complex128`, vector types, ...), with a layout
    /// that does not check out, or named `__metadata__` ([`Error::InvalidName`]), each
    /// wrapped in [`Error::Tensor`] with its name; sub-byte elements that do not fill
    /// whole bytes, or a header above the format's limit ([`Error::InvalidFile`]).
    /// While writing: [`Error::Io`], naming the file (an empty `path` is refused as
    /// `InvalidInput` before anything is written).
    pub fn write_safetensors(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        refuse_empty(path, "file")?;
        let planned = plan_file(path, self.iter(), self.metadata())?;
        write_planned(path, &planned, Links::Follow)
    }
}

/// A file ready to be written: its header, its tensors in the order of their data, and
/// its size.
struct Planned<'a> {
    header: Vec<u8>,
    tensors: Vec<&'a ManagedTensor>,
    total: u64,
}

/// Checks every tensor and lays the file out, before anything is written.
fn plan_file<'a>(
    path: &Path,
    tensors: impl Iterator<Item = (&'a str, &'a ManagedTensor)>,
    metadata: &BTreeMap<String, String>,
) -> Result<Planned<'a>> {
    let mut plan = Vec::with_capacity(tensors.size_hint().0);
    for (index, (name, tensor)) in tensors.enumerate() {
        let dtype = plan_tensor(name, tensor).map_err(|e| e.in_tensor(name))?;
        plan.push((index, name, tensor, dtype));
    }
    // Largest elements first, in batch order otherwise: every tensor stays aligned.
    plan.sort_by_key(|&(index, _, tensor, _)| (core::cmp::Reverse(tensor.dtype().bits()), index));
    let mut infos = Vec::with_capacity(plan.len());
    let mut offset = 0usize;
    for &(_, name, tensor, dtype) in &plan {
        let count = tensor.num_elements().map_err(|e| e.in_tensor(name))?;
        let bits = usize::from(tensor.dtype().bits());
        if count.checked_mul(bits).is_none_or(|b| b % 8 != 0) {
            return Err(invalid(
                path,
                Some(name),
                format!(
                    "{count} elements of {bits} bits are not a whole number of bytes, \
                         which the format stores"
                ),
            ));
        }
        let len = tensor.c_order_len().map_err(|e| e.in_tensor(name))?;
        let shape = tensor
            .shape()
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<core::result::Result<Vec<_>, _>>()
            .map_err(|_| Error::Overflow { what: "extent" }.in_tensor(name))?;
        let end = offset
            .checked_add(len)
            .ok_or(Error::Overflow { what: "file size" })?;
        infos.push((
            name.to_owned(),
            TensorInfo {
                dtype,
                shape,
                data_offsets: (offset, end),
            },
        ));
        offset = end;
    }
    let header = OutHeader {
        metadata,
        tensors: &infos,
    };
    let mut header = serde_json::to_vec(&header)
        .map_err(|e| invalid(path, None, format!("the header cannot be written: {e}")))?;
    // Padded with spaces to a multiple of 8, as the reference writer does.
    header.resize(header.len().next_multiple_of(LENGTH_BYTES), b' ');
    if header.len() > MAX_HEADER {
        return Err(invalid(
            path,
            None,
            format!(
                "the header would take {} bytes, above the format's limit of {MAX_HEADER}",
                header.len()
            ),
        ));
    }
    let total = (LENGTH_BYTES + header.len()) as u64 + offset as u64;
    Ok(Planned {
        header,
        tensors: plan.into_iter().map(|(_, _, tensor, _)| tensor).collect(),
        total,
    })
}

/// Writes a planned file (atomically, see [`write_atomically`]).
fn write_planned(path: &Path, planned: &Planned<'_>, links: Links) -> Result<()> {
    write_atomically(path, planned.total, links, |out| {
        out.write_all(&(planned.header.len() as u64).to_le_bytes())?;
        out.write_all(&planned.header)?;
        for tensor in &planned.tensors {
            // Checked while planning; a layout cannot change behind a shared borrow.
            for run in tensor.c_order_runs().map_err(std::io::Error::other)? {
                out.write_all(run)?;
            }
        }
        Ok(())
    })
}

/// The header as written: `__metadata__` first (sorted by key), then the tensors in
/// the order of their data, each with the format's own fields. The same batch always
/// gives the same bytes.
struct OutHeader<'a> {
    metadata: &'a std::collections::BTreeMap<String, String>,
    tensors: &'a [(String, TensorInfo)],
}

impl serde::Serialize for OutHeader<'_> {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> core::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let has_metadata = !self.metadata.is_empty();
        let mut map =
            serializer.serialize_map(Some(self.tensors.len() + usize::from(has_metadata)))?;
        if has_metadata {
            map.serialize_entry("__metadata__", self.metadata)?;
        }
        for (name, info) in self.tensors {
            map.serialize_entry(name, info)?;
        }
        map.end()
    }
}

/// Checks that `tensor` can be written (a CPU-accessible tensor of a safetensors dtype
/// whose layout checks out, not named `__metadata__`); its safetensors dtype.
fn plan_tensor(name: &str, tensor: &ManagedTensor) -> Result<safetensors::Dtype> {
    if name == "__metadata__" {
        return Err(Error::InvalidName {
            name: name.to_owned(),
            reason: "`__metadata__` is the safetensors header's metadata entry",
        });
    }
    let device = tensor.device();
    if !device.is_cpu_accessible() {
        return Err(Error::UnsupportedDevice { device });
    }
    let dtype = tensor.dtype();
    let Some(stored) = header::safetensors_dtype(dtype) else {
        return Err(Error::UnsupportedDtype { dtype });
    };
    if cfg!(target_endian = "big") && dtype.bits() > 8 {
        return Err(Error::UnsupportedDtype { dtype });
    }
    if dtype.bits() < 8 && tensor.is_padded() {
        // The format stores sub-byte elements packed.
        return Err(Error::PackedLayout { dtype });
    }
    // The layout, checked once here (the runs are made again while writing).
    tensor.c_order_runs()?;
    Ok(stored)
}

/// What a save does with a symbolic link where it writes a file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Links {
    /// The file the link points to is the one replaced (`write_safetensors`: the
    /// caller named that path).
    Follow,
    /// The link itself is replaced by the new file, and what it pointed to is left
    /// alone (a checkpoint's files: nothing outside its folder is written).
    Replace,
}

/// An empty path, refused before anything is written (`std::fs` would read it as no
/// file at all, and a join onto it as the current folder).
fn refuse_empty(path: &Path, what: &str) -> Result<()> {
    if !path.as_os_str().is_empty() {
        return Ok(());
    }
    let err = std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("an empty path names no {what}: write \".\" for the current folder"),
    );
    Err(Error::io(path, &err))
}

/// Writes `total` bytes with `write` to a new temporary file beside `path`, then renames
/// it to `path`; on any error the temporary file is removed and `path` is untouched.
///
/// A symbolic link at `path` is followed or replaced, as `links` says. A regular file
/// replaced keeps its permissions; a new one (or one that replaces a link) gets what
/// `File::create` gives.
fn write_atomically(
    path: &Path,
    total: u64,
    links: Links,
    write: impl FnOnce(&mut BufWriter<&File>) -> std::io::Result<()>,
) -> Result<()> {
    refuse_empty(path, "file")?;
    let there = std::fs::symlink_metadata(path).ok();
    let is_link = there.as_ref().is_some_and(|m| m.file_type().is_symlink());
    let target = if is_link && links == Links::Follow {
        std::fs::canonicalize(path).map_err(|e| Error::io(path, &e))?
    } else {
        path.to_owned()
    };
    let folder = match target.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let existing = match links {
        Links::Follow => std::fs::metadata(&target).ok(),
        // (Never the permissions of what a link points to: a regular file's only.)
        Links::Replace => there.filter(std::fs::Metadata::is_file),
    }
    .map(|m| m.permissions());
    let mut builder = tempfile::Builder::new();
    // A short name, whatever the length of the target's.
    builder.prefix(".dlpack-").suffix(".tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // As `File::create` makes files: readable and writable by all, less the umask.
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let temp = builder
        .tempfile_in(folder)
        .map_err(|e| Error::io(folder, &e))?;
    let fail = |e: std::io::Error| Error::io(path, &e);
    if let Some(permissions) = existing {
        temp.as_file().set_permissions(permissions).map_err(fail)?;
    }
    // Room for the whole file first, as the reference writer makes it.
    temp.as_file().set_len(total).map_err(fail)?;
    {
        let mut out = BufWriter::with_capacity(1 << 20, temp.as_file());
        write(&mut out).map_err(fail)?;
        out.flush().map_err(fail)?;
    }
    // (A rename replaces a link itself, never what it points to.)
    temp.persist(&target).map_err(|e| fail(e.error))?;
    Ok(())
}

impl TensorBatch {
    /// Writes the batch as a checkpoint folder, laid out as Hugging Face's
    /// `save_pretrained` lays one out, so that `from_pretrained` (with the model's
    /// `config.json` beside it), [`Checkpoint::open`](super::Checkpoint::open) and every
    /// reader of such folders take it: `model.safetensors` alone when the tensors fit
    /// in `max_shard_bytes`, else `model-0000k-of-0000n.safetensors` shards and
    /// `model.safetensors.index.json`, whose `weight_map` names each tensor's shard and
    /// whose `metadata.total_size` is the tensors' bytes.
    ///
    /// Tensors are kept whole and in batch order: a shard ends before the tensor that
    /// would take it past `max_shard_bytes`, and a tensor larger than that has a shard
    /// of its own. Each shard is a safetensors file as
    /// [`write_safetensors`](Self::write_safetensors) writes it, the batch's
    /// [`metadata`](Self::metadata) as its `__metadata__`: put `{"format": "pt"}` there
    /// for Hugging Face's `transformers`, which writes it in every file it saves (its
    /// releases before 5.0 refuse, in `from_pretrained`, a file that has metadata but no
    /// `format`; other readers ignore the key). The folder is created if needed.
    ///
    /// Every file is replaced atomically (never seen half written), one after the
    /// other. A sharded save first removes the index of an earlier save, then writes
    /// the shards, then the new index: a save that fails midway leaves no index over a
    /// mix of its shards and earlier ones, and [`Checkpoint::open`](super::Checkpoint::open)
    /// then finds the earlier `model.safetensors` if there is one, else no checkpoint
    /// (an error). A single-file save writes `model.safetensors`, then removes the
    /// earlier index. As with `save_pretrained`, the shards of a folder are not replaced
    /// together: a reader that opens the folder while a save is under way may find
    /// shards of both saves (save into a new folder and rename it for that), while a
    /// checkpoint already open keeps reading the files it opened (a replaced file is a
    /// new one; past its first 32 shards, which it opens again to read, it refuses a
    /// replaced one, see [`Checkpoint::open`](super::Checkpoint::open)). Then what an earlier save left is removed: shards of another count or
    /// number, and `model.safetensors` or the index, whichever the new layout does not
    /// use. Other files in the folder are left alone.
    ///
    /// Nothing outside the folder is written: a symbolic link in it under the name of a
    /// file the save writes or removes is itself replaced or removed, and the file it
    /// points to is left as it was. That is the Hugging Face cache's layout
    /// (`snapshots/<revision>/model.safetensors -> ../../blobs/<hash>`), whose blobs other
    /// revisions share: a save into a snapshot folder replaces its links with files of
    /// its own. (Unlike [`write_safetensors`](Self::write_safetensors), which writes the
    /// file that a link at the path it is given names.)
    ///
    /// # Errors
    ///
    /// As [`write_safetensors`](Self::write_safetensors), for every tensor before any
    /// file is written; [`Error::Io`] naming the folder or the file: an empty `dir`
    /// (`InvalidInput`, before anything is written: `"."` is the current folder), a
    /// folder that cannot be made or read, a file that cannot be written or removed.
    pub fn write_checkpoint(&self, dir: impl AsRef<Path>, max_shard_bytes: u64) -> Result<()> {
        let dir = dir.as_ref();
        refuse_empty(dir, "folder")?;
        let mut shards: Vec<Vec<(&str, &ManagedTensor)>> = Vec::new();
        let mut current = 0u64;
        let mut total_size = 0u64;
        for (name, tensor) in self.iter() {
            let size = tensor.c_order_len().map_err(|e| e.in_tensor(name))? as u64;
            total_size = total_size.saturating_add(size);
            match shards.last_mut() {
                Some(shard) if current.saturating_add(size) <= max_shard_bytes => {
                    shard.push((name, tensor));
                    current += size;
                }
                _ => {
                    shards.push(vec![(name, tensor)]);
                    current = size;
                }
            }
        }
        let count = shards.len();
        let files: Vec<String> = if count <= 1 {
            vec![SINGLE_NAME.to_owned()]
        } else {
            (1..=count).map(|k| shard_name(k, count)).collect()
        };
        // Every file planned (every tensor checked) before the first is written.
        let mut planned = Vec::with_capacity(files.len());
        let empty = Vec::new();
        let groups: Vec<&Vec<(&str, &ManagedTensor)>> = if shards.is_empty() {
            vec![&empty]
        } else {
            shards.iter().collect()
        };
        for (file, tensors) in files.iter().zip(groups) {
            let path = dir.join(file);
            let plan = plan_file(&path, tensors.iter().copied(), self.metadata())?;
            planned.push((path, plan));
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, &e))?;
        if count > 1 {
            // No index over a mix of old and new shards, even if this save fails.
            remove_if_there(&dir.join(INDEX_NAME))?;
        }
        for (path, plan) in &planned {
            write_planned(path, plan, Links::Replace)?;
        }
        if count > 1 {
            let weight_map: BTreeMap<&str, &str> = shards
                .iter()
                .zip(&files)
                .flat_map(|(tensors, file)| {
                    tensors.iter().map(move |&(name, _)| (name, file.as_str()))
                })
                .collect();
            let index = serde_json::json!({
                "metadata": { "total_size": total_size },
                "weight_map": weight_map,
            });
            let path = dir.join(INDEX_NAME);
            let mut text = serde_json::to_vec_pretty(&index)
                .map_err(|e| invalid(&path, None, format!("the index cannot be written: {e}")))?;
            text.push(b'\n');
            write_atomically(&path, text.len() as u64, Links::Replace, |out| {
                out.write_all(&text)
            })?;
        }
        remove_stale(dir, &files)
    }
}

/// Removes what an earlier save left in `dir` that the checkpoint of `files` does not
/// use: the index beside a single file (first, so that no reader finds it over shards
/// being removed), shards not among `files`, `model.safetensors` beside shards.
fn remove_stale(dir: &Path, files: &[String]) -> Result<()> {
    let sharded = files.len() > 1;
    if !sharded {
        remove_if_there(&dir.join(INDEX_NAME))?;
    }
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, &e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, &e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let stale = if files.iter().any(|f| f == name) {
            false
        } else if name == SINGLE_NAME {
            sharded
        } else {
            is_shard_name(name)
        };
        // (A folder under such a name is not an earlier save's file: left alone.)
        if stale && !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            remove_if_there(&entry.path())?;
        }
    }
    Ok(())
}

/// Removes the file at `path`, if there is one.
fn remove_if_there(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        // Not there (or gone already, another process cleaning up): nothing to remove.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, &e)),
    }
}
