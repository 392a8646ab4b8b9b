//! One safetensors file: opened, its header read, mapped; what
//! [`TensorBatch::read_safetensors`], [`TensorBatch::map_safetensors`] and a
//! checkpoint's shards share.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use memmap2::{MmapMut, MmapOptions};

use crate::batch::TensorBatch;
use crate::device::Device;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::ffi::DLPACK_FLAG_BITMASK_IS_COPIED;
use crate::tensor::ManagedTensor;

use super::header::{self, Header, LENGTH_BYTES, header_length, invalid};
use super::read::{Made, buffer, element_count, empty_strides, not_a_bool};

/// Opens `path` for reading: its file and length. Only a regular file (or a link to
/// one) is read: a folder is an [`Error::Io`] of kind `IsADirectory` (opening one
/// succeeds on some systems), anything else (a pipe, a device) one of kind
/// `InvalidInput`. On Unix the file is opened without blocking, so that a pipe with no
/// writer is refused rather than waited for, and never becomes the controlling
/// terminal.
pub(super) fn open(path: &Path) -> Result<(File, u64)> {
    open_identified(path).map(|(file, identity)| (file, identity.len))
}

/// [`open`], with the file's [`Identity`] from the same status (no second call).
pub(super) fn open_identified(path: &Path) -> Result<(File, Identity)> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    // (Miri cannot open with these flags; its files are the tests' own.)
    #[cfg(all(unix, not(miri)))]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        &mut options,
        libc::O_NONBLOCK | libc::O_NOCTTY,
    );
    let file = options.open(path).map_err(|e| Error::io(path, &e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, &e))?;
    let refused = |kind, what| Err(Error::io(path, &std::io::Error::new(kind, what)));
    if meta.is_dir() {
        return refused(std::io::ErrorKind::IsADirectory, "is a directory");
    }
    if !meta.is_file() {
        return refused(std::io::ErrorKind::InvalidInput, "is not a regular file");
    }
    Ok((file, identity_of(&meta)))
}

/// Which file an open file is, so that a file opened again by its path can be told
/// from one that replaced it: its device and inode, and the times of its last change
/// of contents and of status on Unix (a file made after another was removed may get
/// its inode; its change times then differ, unless both fall within one tick of the
/// file system's clock, so this is a best effort), its time of last change elsewhere;
/// and its length, which keeps every read inside the file whatever the rest says.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Identity {
    node: (u64, u64),
    changed: (i64, i64, i64, i64),
    modified: Option<std::time::SystemTime>,
    pub(super) len: u64,
}

/// The [`Identity`] of `file`, opened from `path`.
pub(super) fn identity(path: &Path, file: &File) -> Result<Identity> {
    let meta = file.metadata().map_err(|e| Error::io(path, &e))?;
    Ok(identity_of(&meta))
}

/// The [`Identity`] of a file of status `meta`.
fn identity_of(meta: &std::fs::Metadata) -> Identity {
    #[cfg(unix)]
    let (node, changed) = {
        use std::os::unix::fs::MetadataExt;
        (
            (meta.dev(), meta.ino()),
            (
                meta.ctime(),
                meta.ctime_nsec(),
                meta.mtime(),
                meta.mtime_nsec(),
            ),
        )
    };
    #[cfg(not(unix))]
    let (node, changed) = ((0, 0), (0, 0, 0, 0));
    Identity {
        node,
        changed,
        modified: meta.modified().ok(),
        len: meta.len(),
    }
}

/// Reads and checks the header of `file` (of `file_len` bytes), from its start: the
/// header, and its JSON bytes.
pub(super) fn read_header(path: &Path, file: &File, file_len: u64) -> Result<(Header, Vec<u8>)> {
    // Two reads, the length and then exactly the header: a load that reads one layer of
    // many shards reads no byte of the data it does not take.
    let mut file = file;
    let mut first = [0u8; LENGTH_BYTES];
    let got = usize::try_from(file_len).map_or(LENGTH_BYTES, |len| len.min(LENGTH_BYTES));
    file.read_exact(&mut first[..got])
        .map_err(|e| Error::io(path, &e))?;
    let n = header_length(path, &first[..got], file_len)?;
    let mut json = Vec::new();
    json.try_reserve_exact(n)
        .map_err(|_| Error::AllocationFailed { bytes: n })?;
    json.resize(n, 0);
    file.read_exact(&mut json)
        .map_err(|e| Error::io(path, &e))?;
    let header = header::parse(path, &json, file_len)?;
    Ok((header, json))
}

/// A private (copy-on-write) mapping of a whole file, shared by the tensors over it and
/// never read or written through after they are made: each tensor reaches its own
/// bytes through its own pointer. (Held, never named: dropping it unmaps the file.)
struct Mapping {
    _map: MmapMut,
}

/// The alignment a mapped tensor's data gets: its element size (what consumers such as
/// PyTorch assume, a complex number's whole size included), 1 below a byte.
fn alignment(dtype: DataType) -> usize {
    let bits = usize::from(dtype.bits()) * usize::from(dtype.lanes());
    if bits % 8 != 0 {
        return 1;
    }
    // The largest power of two dividing the size, at most 16.
    1 << (bits / 8).trailing_zeros().min(4)
}

/// Maps `file` (at `path`) privately and makes a tensor over the mapping for each entry
/// of its header that `keep` accepts (`None` for the others), in the header's order:
/// O(header), pages read from the file when first touched. The header is parsed from
/// the mapping itself. See [`TensorBatch::map_safetensors`] for the tensors made.
///
/// # Safety
///
/// As for [`TensorBatch::map_safetensors`].
pub(super) unsafe fn map_file(
    path: &Path,
    file: &File,
    keep: impl FnMut(usize) -> bool,
) -> Result<(Header, Vec<Option<ManagedTensor>>)> {
    // SAFETY: the caller's contract is `map_safetensors`'.
    let map = unsafe { map_copy(path, file) }?;
    // What was mapped is what is parsed, whatever the file's length said before.
    let header = {
        let bytes: &[u8] = &map;
        let n = header_length(path, bytes, bytes.len() as u64)?;
        header::parse(
            path,
            &bytes[LENGTH_BYTES..LENGTH_BYTES + n],
            bytes.len() as u64,
        )?
    };
    // SAFETY: `header` was parsed from this mapping, and the caller's contract is
    // `map_safetensors`'.
    let tensors = unsafe { mapped_tensors(path, map, &header, keep) }?;
    Ok((header, tensors))
}

/// Maps a file of a checkpoint whose header `header` was parsed from the bytes `json`
/// when it was opened: the mapping must hold those very bytes as its header, and be as
/// long as the file was (else an [`Error::InvalidFile`]: the file changed since), so
/// that `header` describes it; then as [`map_file`], without parsing again.
///
/// # Safety
///
/// As for [`TensorBatch::map_safetensors`].
pub(super) unsafe fn map_opened(
    path: &Path,
    file: &File,
    header: &Header,
    json: &[u8],
    keep: impl FnMut(usize) -> bool,
) -> Result<Vec<Option<ManagedTensor>>> {
    // SAFETY: the caller's contract is `map_safetensors`'.
    let map = unsafe { map_copy(path, file) }?;
    let length = (json.len() as u64).to_le_bytes();
    let same = map.len() as u64 == header.file_len
        && map.get(..LENGTH_BYTES) == Some(&length[..])
        && map.get(LENGTH_BYTES..LENGTH_BYTES + json.len()) == Some(json);
    if !same {
        return Err(changed(path));
    }
    // SAFETY:
    // - the mapping is as long as the file was and holds the header `header` was parsed
    //   from, so that parsing it again would give `header`: what `mapped_tensors` asks;
    // - the caller's contract is `map_safetensors`'.
    unsafe { mapped_tensors(path, map, header, keep) }
}

/// The error of a file of a checkpoint that changed since it was opened.
pub(super) fn changed(path: &Path) -> Error {
    invalid(path, None, "the file changed since it was opened")
}

/// A private, writable mapping of the whole of `file`, at least the 8 bytes of a
/// header's length long.
///
/// # Safety
///
/// As for [`TensorBatch::map_safetensors`].
unsafe fn map_copy(path: &Path, file: &File) -> Result<MmapMut> {
    let file_len = file.metadata().map_err(|e| Error::io(path, &e))?.len();
    if file_len < LENGTH_BYTES as u64 {
        // Too short for the header's length: an error (and nothing to map).
        header_length(path, &[], file_len)?;
    }
    let too_long = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "too long to map");
    let len = usize::try_from(file_len).map_err(|_| Error::io(path, &too_long()))?;
    // SAFETY:
    // - a private, writable mapping of the whole file (`len` is the length its status
    //   gave just now, passed on so that memmap2 does not ask again): writes go to
    //   private pages; no swap is reserved for them up front (so that a file larger
    //   than memory maps), and a page is found when it is first written, as for any
    //   memory under overcommit;
    // - the caller guarantees that the file is neither modified nor truncated while
    //   the mapping (kept by the tensors) lives, so that its pages hold the file's
    //   bytes and stay readable.
    unsafe { MmapOptions::new().len(len).no_reserve_swap().map_copy(file) }
        .map_err(|e| Error::io(path, &e))
}

/// Makes a tensor over `map` for each entry of `header` that `keep` accepts (by its
/// index; `None` for the others), in the header's order, the mapping kept alive by the
/// tensors.
///
/// # Safety
///
/// - `header` is what [`header::parse`] gives for the header that `map` holds, checked
///   against `map`'s own length;
/// - as for [`TensorBatch::map_safetensors`].
unsafe fn mapped_tensors(
    path: &Path,
    mut map: MmapMut,
    header: &Header,
    mut keep: impl FnMut(usize) -> bool,
) -> Result<Vec<Option<ManagedTensor>>> {
    let base = map.as_mut_ptr();
    let mapping = Arc::new(Mapping { _map: map });
    let mut tensors = Vec::with_capacity(header.entries.len());
    for (index, entry) in header.entries.iter().enumerate() {
        if !keep(index) {
            tensors.push(None);
            continue;
        }
        // Inside the mapping: `parse` checked that the data section holds exactly
        // the tensors' bytes.
        let data = base.wrapping_add(header.data_start + entry.begin);
        let len = entry.end - entry.begin;
        // SAFETY:
        // - `len` bytes from `data` lie inside the mapping (`parse` checked the data
        //   section against the mapping's own length: the caller's promise), which
        //   `mapping` keeps alive, and no tensor has been given them yet: the offsets of
        //   distinct tensors do not overlap (`parse`; empty tensors may share an
        //   address, and cover no byte);
        // - nobody writes them meanwhile (the caller's contract for other processes;
        //   this function only reads).
        let bytes: &[u8] = unsafe { core::slice::from_raw_parts(data, len) };
        if cfg!(target_endian = "big") && entry.dtype.bits() > 8 {
            return Err(big_endian(path, &entry.name));
        }
        let made = Made {
            name: &entry.name,
            path,
            dtype: entry.dtype,
            shape: &entry.shape,
            flags: 0,
        };
        if (data as usize) % alignment(entry.dtype) != 0 {
            let in_tensor = |e: Error| e.in_tensor(&entry.name);
            let mut copy =
                buffer(entry.dtype, element_count(&entry.shape), len).map_err(in_tensor)?;
            copy.bytes_mut().copy_from_slice(bytes);
            let flags = DLPACK_FLAG_BITMASK_IS_COPIED;
            tensors.push(Some(copy.into_tensor(Made { flags, ..made })?));
            continue;
        }
        if entry.dtype == DataType::BOOL {
            if let Some(index) = bytes.iter().position(|&b| b > 1) {
                return Err(not_a_bool(path, &entry.name, index, bytes[index]));
            }
        }
        // The header's checks proved that every extent fits `i64`.
        let shape: Vec<i64> = entry.shape.iter().map(|&d| d as i64).collect();
        let strides = empty_strides(&entry.shape);
        // SAFETY:
        // - `data` addresses the tensor's bytes in the private mapping: its elements
        //   in C order (the strides given are C-contiguous, or all 0 for an empty
        //   tensor, which addresses no element), aligned for the dtype
        //   (checked above), kept alive and unmoved by the owner, an `Arc` of the
        //   mapping that nothing reads or writes through;
        // - writable (a private mapping), and nobody else reaches these bytes while
        //   the tensor lives: every other tensor of the file has bytes of its own
        //   (offsets do not overlap), and the caller guarantees the file is not
        //   modified (so pages not yet copied do not change);
        // - a `bool` tensor holds only 0 and 1 (checked above).
        let tensor = unsafe {
            ManagedTensor::from_owner(
                Arc::clone(&mapping),
                |_| data.cast(),
                &shape,
                strides.as_deref(),
                entry.dtype,
                Device::CPU,
                0,
            )
        }
        .map_err(|e| e.in_tensor(&entry.name))?;
        tensors.push(Some(tensor));
    }
    Ok(tensors)
}

/// The error of a tensor wider than a byte on a big-endian target.
pub(super) fn big_endian(path: &Path, tensor: &str) -> Error {
    invalid(
        path,
        Some(tensor),
        "safetensors data is little-endian, and this target is big-endian",
    )
}

/// The batch of a file's tensors, in the header's order, with its metadata.
pub(super) fn assemble(header: Header, tensors: Vec<Option<ManagedTensor>>) -> Result<TensorBatch> {
    let mut batch = TensorBatch::with_capacity(tensors.len());
    for (entry, tensor) in header.entries.into_iter().zip(tensors) {
        if let Some(tensor) = tensor {
            // Names are unique (checked by `parse`); a batch refuses the empty one.
            let name = entry.name;
            let path = header.path.as_path();
            batch
                .insert(name.clone(), tensor)
                .map_err(|e| invalid(path, Some(&name), e.to_string()))?;
        }
    }
    *batch.metadata_mut() = header.metadata;
    Ok(batch)
}
