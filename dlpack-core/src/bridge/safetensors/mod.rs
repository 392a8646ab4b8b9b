//! Weights on disk (feature `safetensors`): a [`TensorBatch`] read from, mapped from
//! and written to the safetensors format, through the `safetensors` crate's format
//! (dtypes, header layout and serialization) and `memmap2`'s mapping.
//!
//! - `header`: the header, read as foreign input and checked;
//! - here: reading each tensor into a buffer of its own, mapping the file, and the
//!   streamed, atomic write.

mod header;

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::sync::Arc;

use memmap2::{MmapMut, MmapOptions};
use safetensors::tensor::TensorInfo;

use crate::batch::TensorBatch;
use crate::device::Device;
use crate::dtype::{DataType, Element};
use crate::error::{Error, Result};
use crate::ffi::DLPACK_FLAG_BITMASK_IS_COPIED;
use crate::tensor::{AlignedBytes, ManagedTensor, element_bytes_mut, into_bools, zeroed_elements};

use header::{Entry, Header, LENGTH_BYTES, MAX_HEADER, header_length, invalid};

/// Opens `path` for reading: its file and length. A folder is an
/// [`Error::Io`] of kind `IsADirectory` (opening one succeeds on some systems).
fn open(path: &Path) -> Result<(File, u64)> {
    let file = File::open(path).map_err(|e| Error::io(path, &e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, &e))?;
    if meta.is_dir() {
        let err = std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory");
        return Err(Error::io(path, &err));
    }
    Ok((file, meta.len()))
}

/// Reads and checks the header of `file` (of `file_len` bytes), leaving the file at
/// the start of the data section.
fn read_header(path: &Path, file: &mut File, file_len: u64) -> Result<Header> {
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
    header::parse(path, &json, file_len)
}

/// The number of elements of a checked entry (its product fits: `check_layout`).
fn element_count(entry: &Entry) -> usize {
    entry.shape.iter().product()
}

/// C-contiguous strides for a checked shape, in elements; all 0 for an empty one (whose
/// extents may multiply past any integer, and which addresses no element).
fn c_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    if shape.contains(&0) {
        return strides;
    }
    let mut stride = 1usize;
    for (out, &extent) in strides.iter_mut().zip(shape).rev() {
        // The element count of a non-empty shape fits `isize` (`check_layout`), and so
        // does every partial product of it.
        *out = stride as isize;
        stride = stride.saturating_mul(extent);
    }
    strides
}

/// The shape as DLPack's `i64`s (`check_layout` proved that every extent fits).
fn dlpack_shape(entry: &Entry) -> Vec<i64> {
    entry.shape.iter().map(|&d| d as i64).collect()
}

/// Reads the `entry.end - entry.begin` bytes of one tensor from `source` into a buffer
/// of its own, typed where Rust has the element type (so that `Array::from_dlpack` takes
/// the buffer without a copy), flagged `flags`.
fn owned_tensor(
    path: &Path,
    entry: &Entry,
    source: &mut impl Read,
    flags: u64,
) -> Result<ManagedTensor> {
    let dtype = entry.dtype;
    if cfg!(target_endian = "big") && dtype.bits() > 8 {
        return Err(invalid(
            path,
            Some(&entry.name),
            "safetensors data is little-endian, and this target is big-endian",
        ));
    }
    macro_rules! typed {
        ($ty:ty, $constant:ident, $name:literal) => {
            if dtype == DataType::$constant {
                return typed::<$ty>(path, entry, source, flags);
            }
        };
    }
    crate::for_each_element!(typed);
    // A type Rust has no element for (float8, float6, float4, and half or complex
    // types in a build without those features): its bytes, 16-byte aligned.
    let mut bytes = AlignedBytes::zeroed(entry.end - entry.begin)?;
    read_into(path, source, bytes.as_bytes_mut())?;
    let shape = dlpack_shape(entry);
    // SAFETY:
    // - the buffer holds the tensor's `ceil(elements * bits / 8)` bytes in C order, as
    //   the format stores them, 16-byte aligned, kept alive and unmoved by the owner
    //   (heap memory); the strides are C-contiguous;
    // - nobody else reaches the buffer: exclusive and writable;
    // - the dtype is not `bool` (which has an element type, read above).
    unsafe {
        ManagedTensor::from_owner(
            bytes,
            |bytes| bytes.as_mut_ptr().cast(),
            &shape,
            None,
            dtype,
            Device::CPU,
            flags,
        )
    }
}

/// Fills `bytes` from `source` (an [`Error::Io`] about `path` if it ends first).
fn read_into(path: &Path, source: &mut dyn Read, bytes: &mut [u8]) -> Result<()> {
    source.read_exact(bytes).map_err(|e| Error::io(path, &e))
}

/// [`owned_tensor`] for an element type `A`: a `Vec<A>` read in place (a `bool` tensor
/// is checked to hold only 0 and 1).
fn typed<A: Element>(
    path: &Path,
    entry: &Entry,
    source: &mut dyn Read,
    flags: u64,
) -> Result<ManagedTensor> {
    let count = element_count(entry);
    let strides = c_strides(&entry.shape);
    let mut values = zeroed_elements::<A>(count)?;
    if let Some(bytes) = element_bytes_mut(&mut values) {
        read_into(path, source, bytes)?;
        return ManagedTensor::from_buffer_with_flags(values, 0, &entry.shape, &strides, flags);
    }
    // `bool`: read as bytes, checked, then the same allocation as `bool`s.
    drop(values);
    let mut bytes = zeroed_elements::<u8>(count)?;
    read_into(path, source, &mut bytes)?;
    let bools = into_bools(bytes).map_err(|(index, byte)| not_a_bool(path, entry, index, byte))?;
    ManagedTensor::from_buffer_with_flags(bools, 0, &entry.shape, &strides, flags)
}

/// A private (copy-on-write) mapping of a whole file, shared by the tensors over it and
/// never read or written through after they are made: each tensor reaches its own
/// bytes through its own pointer.
struct Mapping(#[allow(dead_code)] MmapMut);

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

/// The error of a `bool` element that holds `byte`, neither 0 nor 1.
fn not_a_bool(path: &Path, entry: &Entry, index: usize, byte: u8) -> Error {
    invalid(
        path,
        Some(&entry.name),
        format!("element {index} holds byte {byte}, and a bool must be 0 or 1"),
    )
}

/// Checks that every byte of a `bool` tensor is 0 or 1.
fn check_bools(path: &Path, entry: &Entry, bytes: &[u8]) -> Result<()> {
    match bytes.iter().position(|&b| b > 1) {
        None => Ok(()),
        Some(index) => Err(not_a_bool(path, entry, index, bytes[index])),
    }
}

impl TensorBatch {
    /// Reads a safetensors file: each tensor straight from the file into a buffer of its
    /// own (no buffer of the whole file, no second copy), typed where Rust has the
    /// element type, so that an owned ndarray field of a `#[derive(FromDLPack)]` struct
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
        let path = path.as_ref();
        let (mut file, file_len) = open(path)?;
        let header = read_header(path, &mut file, file_len)?;
        // In file order: one sequential read.
        let mut order: Vec<usize> = (0..header.entries.len()).collect();
        order.sort_by_key(|&i| header.entries[i].begin);
        let mut tensors: Vec<Option<ManagedTensor>> = header.entries.iter().map(|_| None).collect();
        for i in order {
            tensors[i] = Some(owned_tensor(path, &header.entries[i], &mut file, 0)?);
        }
        assemble(header, tensors)
    }

    /// Maps a safetensors file into memory: O(header) time, pages read from the file
    /// when first touched, every tensor a view into one private (copy-on-write)
    /// mapping that the last tensor alive keeps open. No swap is reserved for the
    /// private pages, so a file larger than memory maps (a page is found when it is
    /// first written, as for any memory under the system's overcommit).
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
    /// - the file is not modified or truncated (by this process or another) while a
    ///   tensor of the batch, or anything made from one without a copy, lives: the
    ///   pages of a private mapping that were not yet written show the file as it is
    ///   now, and a truncated file makes the kernel kill the process (`SIGBUS`) when a
    ///   page past its end is touched. The same contract as memmap2's `Mmap::map`.
    pub unsafe fn map_safetensors(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let (file, file_len) = open(path)?;
        if file_len < LENGTH_BYTES as u64 {
            // Too short for the header's length: an error (and nothing to map).
            header_length(path, &[], file_len)?;
        }
        // SAFETY:
        // - a private, writable mapping of the whole file: writes go to private pages;
        //   no swap is reserved for them up front (so that a file larger than memory
        //   maps), and a page is found when it is first written, as for any memory
        //   under overcommit;
        // - the caller guarantees that the file is neither modified nor truncated while
        //   the mapping (kept by the tensors) lives, so that its pages hold the file's
        //   bytes and stay readable.
        let mut map = unsafe { MmapOptions::new().no_reserve_swap().map_copy(&file) }
            .map_err(|e| Error::io(path, &e))?;
        // What was mapped is what is parsed, whatever the file's length said before.
        let map_len = map.len() as u64;
        let header = {
            let bytes: &[u8] = &map;
            let n = header_length(path, bytes, map_len)?;
            header::parse(path, &bytes[LENGTH_BYTES..LENGTH_BYTES + n], map_len)?
        };
        let base = map.as_mut_ptr();
        let mapping = Arc::new(Mapping(map));
        let mut tensors = Vec::with_capacity(header.entries.len());
        for entry in &header.entries {
            // Inside the mapping: `parse` checked that the data section holds exactly
            // the tensors' bytes.
            let data = base.wrapping_add(header.data_start + entry.begin);
            let len = entry.end - entry.begin;
            // SAFETY:
            // - `len` bytes from `data` lie inside the mapping (`parse` checked the data
            //   section against the mapping's own length), which `mapping` keeps alive,
            //   and no tensor has been given them yet: the offsets of distinct tensors
            //   do not overlap (`parse`; empty tensors may share an address, and cover
            //   no byte);
            // - nobody writes them meanwhile (the caller's contract for other processes;
            //   this function only reads).
            let bytes: &[u8] = unsafe { core::slice::from_raw_parts(data, len) };
            if cfg!(target_endian = "big") && entry.dtype.bits() > 8 {
                return Err(invalid(
                    path,
                    Some(&entry.name),
                    "safetensors data is little-endian, and this target is big-endian",
                ));
            }
            if (data as usize) % alignment(entry.dtype) != 0 {
                let copy = owned_tensor(path, entry, &mut &*bytes, DLPACK_FLAG_BITMASK_IS_COPIED)?;
                tensors.push(Some(copy));
                continue;
            }
            if entry.dtype == DataType::BOOL {
                check_bools(path, entry, bytes)?;
            }
            let shape = dlpack_shape(entry);
            // SAFETY:
            // - `data` addresses the tensor's bytes in the private mapping: its elements
            //   in C order (the strides given are C-contiguous), aligned for the dtype
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
                    None,
                    entry.dtype,
                    Device::CPU,
                    0,
                )
            }?;
            tensors.push(Some(tensor));
        }
        assemble(header, tensors)
    }

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
    /// While writing: [`Error::Io`].
    pub fn write_safetensors(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let mut plan = Vec::with_capacity(self.len());
        for (index, (name, tensor)) in self.iter().enumerate() {
            let dtype = plan_tensor(name, tensor).map_err(|e| e.in_tensor(name))?;
            plan.push((index, name, tensor, dtype));
        }
        // Largest elements first, in batch order otherwise: every tensor stays aligned.
        plan.sort_by_key(|&(index, _, tensor, _)| {
            (core::cmp::Reverse(tensor.dtype().bits()), index)
        });
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
            metadata: self.metadata(),
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
        write_atomically(path, total, |out| {
            out.write_all(&(header.len() as u64).to_le_bytes())?;
            out.write_all(&header)?;
            for &(_, _, tensor, _) in &plan {
                // Checked while planning; a layout cannot change behind `&self`.
                for run in tensor.c_order_runs().map_err(std::io::Error::other)? {
                    out.write_all(run)?;
                }
            }
            Ok(())
        })
    }
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

/// Writes `total` bytes with `write` to a new temporary file beside `path`, then renames
/// it to `path`; on any error the temporary file is removed and `path` is untouched.
///
/// A symbolic link at `path` is followed: the file it points to is the one replaced. A
/// file replaced keeps its permissions; a new one gets what `File::create` gives.
fn write_atomically(
    path: &Path,
    total: u64,
    write: impl FnOnce(&mut BufWriter<&File>) -> std::io::Result<()>,
) -> Result<()> {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    let target = if is_link {
        std::fs::canonicalize(path).map_err(|e| Error::io(path, &e))?
    } else {
        path.to_owned()
    };
    let folder = match target.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let existing = std::fs::metadata(&target).ok().map(|m| m.permissions());
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
    temp.persist(&target).map_err(|e| fail(e.error))?;
    Ok(())
}

/// The batch of a file's tensors, in the header's order, with its metadata.
fn assemble(header: Header, tensors: Vec<Option<ManagedTensor>>) -> Result<TensorBatch> {
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
