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
use crate::layout::{self, Positions};
use crate::tensor::ManagedTensor;

use super::header::{self, Entry, Header, LENGTH_BYTES, header_length, invalid};
use super::read::{Made, Part, buffer, c_strides, empty_strides, not_a_bool};

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
struct Mapping<M> {
    _map: M,
}

/// Memory that holds a file's bytes: a mapping of the file (or, in tests, a heap
/// buffer).
///
/// # Safety
///
/// An implementation's [`bytes`](Self::bytes) gives the same memory, initialised, at
/// every call; that memory stays where it is when the value moves, and stays valid
/// for reads and writes until the value is dropped, and the value itself never reads
/// or writes it (tensors made over it reach it through their own pointers).
unsafe trait Image: Send + Sync + 'static {
    /// The bytes, writable.
    fn bytes(&mut self) -> &mut [u8];
}

// SAFETY:
// - a mapping's pages stay at their address until it is unmapped (on drop), whatever
//   moves the `MmapMut` (a pointer and a length), and `bytes` gives the whole mapping;
// - it is private and writable, and `MmapMut` touches it only to unmap it.
unsafe impl Image for MmapMut {
    fn bytes(&mut self) -> &mut [u8] {
        self
    }
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

/// Maps `file` (at `path`, `file_len` bytes long as its status gave when it was opened)
/// privately and makes a tensor over the mapping for each entry of its header that
/// `keep` accepts (by its index and the entry; `None` for the
/// others), in the header's order: O(header), pages read from the file when first
/// touched. The header is parsed from the mapping itself. See
/// [`TensorBatch::map_safetensors`] for the tensors made.
///
/// # Safety
///
/// - `file_len` is `file`'s length as its status gave it within the call whose
///   contract the caller keeps (so that the file, unmodified since, still has it);
/// - as for [`TensorBatch::map_safetensors`].
pub(super) unsafe fn map_file(
    path: &Path,
    file: &File,
    file_len: u64,
    keep: impl FnMut(usize, &Entry) -> bool,
) -> Result<(Header, Vec<Option<ManagedTensor>>)> {
    // SAFETY: the caller's contract is this function's.
    unsafe { MappedFile::new(path, file, file_len) }?.tensors(keep)
}

/// A private mapping of a safetensors file and the header parsed from it, before any
/// tensor is made over it ([`MappedFile::tensors`]).
pub(super) struct MappedFile {
    map: MmapMut,
    /// Parsed from `map` (never replaced: what `tensors` relies on).
    header: Header,
}

impl MappedFile {
    /// Maps `file` (at `path`, `file_len` bytes long as its status gave when it was
    /// opened) and parses its header from the mapping.
    ///
    /// # Safety
    ///
    /// As for [`map_file`], `file_len` included.
    pub(super) unsafe fn new(path: &Path, file: &File, file_len: u64) -> Result<Self> {
        // SAFETY: the caller's contract is this function's, which is `map_copy`'s.
        let map = unsafe { map_copy(path, file, file_len) }?;
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
        Ok(Self { map, header })
    }

    /// The header, as parsed from the mapping.
    pub(super) fn header(&self) -> &Header {
        &self.header
    }

    /// A tensor over the mapping for each entry of the header that `keep` accepts (by
    /// its index and the entry; `None` for the others), in the header's order, and the
    /// header. See [`TensorBatch::map_safetensors`] for the tensors made.
    pub(super) fn tensors(
        self,
        mut keep: impl FnMut(usize, &Entry) -> bool,
    ) -> Result<(Header, Vec<Option<ManagedTensor>>)> {
        let Self { map, header } = self;
        let whole = |index: usize| {
            let entry = &header.entries[index];
            keep(index, entry).then(|| Part::whole(&entry.shape, entry.end - entry.begin))
        };
        // SAFETY:
        // - `header` was parsed from this mapping (`new`), and nothing replaces it;
        // - the mapping was made under `map_safetensors`' contract (`new`'s caller's).
        let tensors = unsafe { mapped_tensors(&header.path, map, &header, whole) }?;
        Ok((header, tensors))
    }
}

/// Maps a file of a checkpoint whose header `header` was parsed from the bytes `json`
/// when it was opened: the mapping must hold those very bytes as its header, and be as
/// long as the file was (else an [`Error::InvalidFile`]: the file changed since), so
/// that `header` describes it; then as [`map_file`], without parsing again, a tensor
/// for each entry that `part` gives a part of (a view of that part of its bytes: see
/// `mapped_tensors` for what a part is).
///
/// # Safety
///
/// - `header` is what [`header::parse`] gave for the bytes `json` against the file's
///   length `header.file_len`;
/// - as for [`TensorBatch::map_safetensors`].
pub(super) unsafe fn map_opened(
    path: &Path,
    file: &File,
    header: &Header,
    json: &[u8],
    part: impl FnMut(usize) -> Option<Part>,
) -> Result<Vec<Option<ManagedTensor>>> {
    // The length now, which the mapping is checked against.
    let file_len = file.metadata().map_err(|e| Error::io(path, &e))?.len();
    // SAFETY:
    // - `file_len` is the file's length as its status gave it just now;
    // - the caller's contract is `map_safetensors`'.
    let map = unsafe { map_copy(path, file, file_len) }?;
    let length = (json.len() as u64).to_le_bytes();
    let same = map.len() as u64 == header.file_len
        && map.get(..LENGTH_BYTES) == Some(&length[..])
        && map.get(LENGTH_BYTES..LENGTH_BYTES + json.len()) == Some(json);
    if !same {
        return Err(changed(path));
    }
    // SAFETY:
    // - the mapping is as long as the file was and holds the header `header` was parsed
    //   from (the caller's promise), so that parsing it again would give `header`:
    //   what `mapped_tensors` asks;
    // - the caller's contract is `map_safetensors`'.
    unsafe { mapped_tensors(path, map, header, part) }
}

/// The error of a file of a checkpoint that changed since it was opened.
pub(super) fn changed(path: &Path) -> Error {
    invalid(path, None, "the file changed since it was opened")
}

/// A private, writable mapping of the whole of `file`, `file_len` bytes (its length
/// as its status gave it, during the call whose contract the caller keeps), at least
/// the 8 bytes of a header's length long.
///
/// # Safety
///
/// As for [`map_file`], `file_len` included.
unsafe fn map_copy(path: &Path, file: &File, file_len: u64) -> Result<MmapMut> {
    if file_len < LENGTH_BYTES as u64 {
        // Too short for the header's length: an error (and nothing to map).
        header_length(path, &[], file_len)?;
    }
    let too_long = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "too long to map");
    let len = usize::try_from(file_len).map_err(|_| Error::io(path, &too_long()))?;
    // SAFETY:
    // - a private, writable mapping of the whole file (`len` is the length its status
    //   gave, passed on so that memmap2 does not ask again): writes go to
    //   private pages; no swap is reserved for them up front (so that a file larger
    //   than memory maps), and a page is found when it is first written, as for any
    //   memory under overcommit;
    // - the caller guarantees that `len` is the file's length from its status, and
    //   that the file is neither modified nor truncated from then on while the
    //   mapping (kept by the tensors) lives, so that its pages hold the file's bytes
    //   and stay readable.
    unsafe { MmapOptions::new().len(len).no_reserve_swap().map_copy(file) }
        .map_err(|e| Error::io(path, &e))
}

/// Makes a tensor over `map` for each entry of `header` that `part` gives a part of (by
/// the entry's index; `None` for the others), in the header's order, the mapping kept
/// alive by the tensors: a view of the part's elements in the mapping (strided when
/// its bytes are not one run), or a copy of them, flagged `IS_COPIED`, where the
/// entry's bytes are not aligned for its dtype.
///
/// A part is [`Part::new`]'s for its entry's dtype, shape and byte length (the whole
/// entry, or one rank's part of it) for the tensor to hold its elements; whatever it
/// is, the tensor made stays inside its entry's bytes, or the entry gets an error.
///
/// # Safety
///
/// - `header` is what [`header::parse`] gives for the header that `map` holds, checked
///   against `map`'s own length (so that no two entries' bytes overlap);
/// - as for [`TensorBatch::map_safetensors`].
unsafe fn mapped_tensors(
    path: &Path,
    mut map: impl Image,
    header: &Header,
    mut part: impl FnMut(usize) -> Option<Part>,
) -> Result<Vec<Option<ManagedTensor>>> {
    let (base, map_len) = {
        let bytes = map.bytes();
        (bytes.as_mut_ptr(), bytes.len())
    };
    let mapping = Arc::new(Mapping { _map: map });
    let mut tensors = Vec::with_capacity(header.entries.len());
    for (index, entry) in header.entries.iter().enumerate() {
        let Some(part) = part(index) else {
            tensors.push(None);
            continue;
        };
        // Inside the mapping: `parse` checked that the data section holds exactly
        // the tensors' bytes (checked again here; that no two entries overlap is
        // `parse`'s alone).
        let inside = (header.data_start.checked_add(entry.end)).is_some_and(|end| end <= map_len);
        if !inside || entry.begin > entry.end {
            return Err(changed(path));
        }
        let data = base.wrapping_add(header.data_start + entry.begin);
        let len = entry.end - entry.begin;
        let in_tensor = |e: Error| e.in_tensor(&entry.name);
        // A part in one run is in C order; one in rows keeps the whole tensor's
        // strides (each of the part's rows starts a whole tensor's row after the one
        // before).
        let strides = match empty_strides(&part.shape) {
            Some(zeros) => Some(zeros),
            None if part.is_contiguous() => None,
            None => Some(c_strides(&entry.shape).iter().map(|&s| s as i64).collect()),
        };
        // Whatever computed the part, the view made of it stays inside the tensor's
        // bytes (that it holds the rank's elements is `Part::new`'s to get right): its
        // runs hold as many bytes as its elements need (counted without overflow, its
        // extents written as DLPack's), and lie inside the tensor's bytes; every
        // element its shape and strides reach from its start (on its elements'
        // alignment from the tensor's start) does too, for whole-byte elements; packed
        // elements only in one run.
        let count = if part.shape.contains(&0) {
            Some(0)
        } else {
            (part.shape.iter()).try_fold(1usize, |n, &d| n.checked_mul(d))
        };
        let bits = usize::from(entry.dtype.bits()) * usize::from(entry.dtype.lanes());
        let need = count
            .and_then(|n| n.checked_mul(bits))
            .map(|b| b.div_ceil(8));
        let sized = need.is_some()
            && need == part.rows.checked_mul(part.len)
            && layout::check_native_layout(&part.shape, part.shape.len()).is_ok()
            && (part.rows > 0 || part.first <= len)
            && (part.rows == 0 || part.len > 0);
        let (Some(count), true) = (count, sized) else {
            return Err(invalid(
                path,
                Some(&entry.name),
                "a part outside its tensor",
            ));
        };
        let span = match part.rows {
            0 => Some(0),
            rows => (rows - 1)
                .checked_mul(part.stride)
                .and_then(|s| s.checked_add(part.first))
                .and_then(|s| s.checked_add(part.len)),
        };
        let align = alignment(entry.dtype);
        // The view's strides in elements.
        let elements: Vec<isize> = match &strides {
            Some(strides) => strides.iter().map(|&s| s as isize).collect(),
            None => c_strides(&part.shape),
        };
        let reached = match bits / 8 {
            size if bits % 8 == 0 && size > 0 => {
                part.first % size == 0
                    && layout::check_in_buffer(
                        &part.shape,
                        &elements,
                        part.first / size,
                        len / size,
                    )
                    .is_ok()
            }
            _ => part.is_contiguous(),
        };
        if !reached
            || span.is_none_or(|span| span > len)
            || part.first % align != 0
            || (part.rows > 1 && part.stride % align != 0)
        {
            return Err(invalid(
                path,
                Some(&entry.name),
                "a part outside its tensor",
            ));
        }
        // SAFETY:
        // - `data` is valid for reads of `len` bytes: they lie inside the mapping
        //   (checked just above, as `parse` checked the data section against the
        //   mapping's own length), which `mapping` keeps alive and unmoved (the
        //   `Image` contract), one allocation of initialised bytes (a mapping's pages
        //   read as the file's bytes or zeros), and `len` is at most the mapping's
        //   length, itself at most `isize::MAX` (one allocation);
        // - no tensor has been given these bytes yet, so nobody writes them while
        //   `bytes` lives: the offsets of distinct tensors do not overlap (`parse`; empty
        //   tensors may share an address, and cover no byte); this function only reads,
        //   and the caller's contract excludes other processes' writes.
        let bytes: &[u8] = unsafe { core::slice::from_raw_parts(data, len) };
        if cfg!(target_endian = "big") && entry.dtype.bits() > 8 {
            return Err(big_endian(path, &entry.name));
        }
        let made = Made {
            name: &entry.name,
            path,
            dtype: entry.dtype,
            shape: &part.shape,
            flags: 0,
        };
        if (data as usize) % align != 0 {
            // As many bytes as the elements need (`sized`, checked above).
            let mut copy = buffer(entry.dtype, count, part.bytes()).map_err(in_tensor)?;
            let mut out = copy.bytes_mut();
            // The part's runs (inside `bytes`: `span`, checked above), as long as the
            // copy in all.
            for (start, end) in part.ranges() {
                let (Some(run), true) = (bytes.get(start..end), out.len() >= end - start) else {
                    return Err(invalid(
                        path,
                        Some(&entry.name),
                        "a part outside its tensor",
                    ));
                };
                let (head, rest) = out.split_at_mut(run.len());
                head.copy_from_slice(run);
                out = rest;
            }
            let flags = DLPACK_FLAG_BITMASK_IS_COPIED;
            tensors.push(Some(copy.into_tensor(Made { flags, ..made })?));
            continue;
        }
        if entry.dtype == DataType::BOOL && count > 0 {
            // Every byte the view reaches, each once (as a `bool` import is checked),
            // all inside `bytes` (checked above).
            let strides: Vec<usize> = elements.iter().map(|&s| s as usize).collect();
            let mut wrong = Ok(());
            Positions::new(&part.shape, &strides)
                .find(part.shape.len(), len - part.first, |offset| {
                    let at = part.first + offset;
                    wrong = match bytes.get(at) {
                        Some(&byte) if byte > 1 => Err(not_a_bool(path, &entry.name, at, byte)),
                        Some(_) => Ok(()),
                        None => Err(invalid(
                            path,
                            Some(&entry.name),
                            "a part outside its tensor",
                        )),
                    };
                    wrong.is_err()
                })
                .map_err(in_tensor)?;
            wrong?;
        }
        // Every extent fits `i64` (`check_native_layout`, above).
        let shape: Vec<i64> = part.shape.iter().map(|&d| d as i64).collect();
        let start = data.wrapping_add(part.first);
        // SAFETY:
        // - `start` is `first` bytes into the tensor's in the private mapping, aligned
        //   for the dtype (the tensor's start, checked above, and `first` a multiple of
        //   the alignment); every position `shape` and `strides` reach from it lies
        //   inside the tensor's bytes (checked above: `check_in_buffer` for whole-byte
        //   elements, one run of as many bytes as the elements need for packed ones,
        //   none for an empty part), in C order when the part is one run, else row
        //   after row at the whole tensor's strides (the part's elements, for a
        //   `Part::new` part); kept alive and unmoved by the owner, an `Arc` of the
        //   mapping that nothing reads or writes through;
        // - writable (a private mapping), and nobody else reaches these bytes while
        //   the tensor lives: every other tensor of the file has bytes of its own
        //   (offsets do not overlap; one tensor per entry at most), and the caller
        //   guarantees the file is not modified (so pages not yet copied do not
        //   change);
        // - a `bool` tensor holds only 0 and 1 at every position its view reaches
        //   (checked above).
        let tensor = unsafe {
            ManagedTensor::from_owner(
                Arc::clone(&mapping),
                |_| start.cast(),
                &shape,
                strides.as_deref(),
                entry.dtype,
                Device::CPU,
                0,
            )
        }
        .map_err(in_tensor)?;
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

#[cfg(all(test, feature = "ndarray"))]
mod tests {
    //! The views `mapped_tensors` makes, over a heap image of a file (so that Miri, which
    //! cannot map files, checks every element they reach).

    use ndarray::{ArrayD, Axis, IxDyn, Slice};

    use super::*;
    use crate::safetensors::read::Rank;
    use crate::tensor::AlignedBytes;

    // SAFETY:
    // - the bytes are a `Vec`'s heap blocks, initialised (zeroed), which stay where
    //   they are when the buffer moves, and `bytes` gives the same `len` of them;
    // - the buffer touches them only to free them.
    unsafe impl Image for AlignedBytes {
        fn bytes(&mut self) -> &mut [u8] {
            self.as_bytes_mut()
        }
    }

    /// `a` (f32 [4, 6]), `b` (f32 [2, 4, 2]), `c` (bool [4, 2]), `e` (f32 [0, 4]): a
    /// file's bytes, its header, and the arrays. `shift` bytes of padding in the header
    /// move the data off its alignment.
    fn image(shift: usize) -> (AlignedBytes, Header, Vec<ArrayD<f32>>, Vec<u8>) {
        let a: Vec<f32> = (0..24).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..16).map(|i| 100.0 + i as f32).collect();
        let c: Vec<u8> = (0..8).map(|i| (i % 3 == 0) as u8).collect();
        let mut json = String::from(
            r#"{"a":{"dtype":"F32","shape":[4,6],"data_offsets":[0,96]},"b":{"dtype":"F32","shape":[2,4,2],"data_offsets":[96,160]},"c":{"dtype":"BOOL","shape":[4,2],"data_offsets":[160,168]},"e":{"dtype":"F32","shape":[0,4],"data_offsets":[168,168]}}"#,
        );
        while (LENGTH_BYTES + json.len()) % 8 != shift {
            json.push(' ');
        }
        let mut file = Vec::new();
        file.extend_from_slice(&(json.len() as u64).to_le_bytes());
        file.extend_from_slice(json.as_bytes());
        a.iter()
            .chain(&b)
            .for_each(|x| file.extend_from_slice(&x.to_le_bytes()));
        file.extend_from_slice(&c);
        let header = header::parse(Path::new("t"), json.as_bytes(), file.len() as u64).unwrap();
        let mut bytes = AlignedBytes::zeroed(file.len()).unwrap();
        bytes.as_bytes_mut().copy_from_slice(&file);
        let arrays = vec![
            ArrayD::from_shape_vec(IxDyn(&[4, 6]), a).unwrap(),
            ArrayD::from_shape_vec(IxDyn(&[2, 4, 2]), b).unwrap(),
        ];
        (bytes, header, arrays, c)
    }

    fn chunk(full: &ArrayD<f32>, dim: usize, rank: usize, world: usize) -> ArrayD<f32> {
        let part = full.len_of(Axis(dim)) / world;
        let range = Slice::from(rank * part..(rank + 1) * part);
        full.slice_axis(Axis(dim), range).to_owned()
    }

    /// Each rank's views (or copies, off alignment) hold exactly its chunk, and writes
    /// through them reach only its elements.
    #[test]
    fn each_part_is_the_rank_chunk_aligned_or_not() {
        for shift in [0, 2] {
            for (world, splits) in [
                (1, [0, 1]),
                (2, [1, 1]),
                (2, [0, 2]),
                (3, [1, 0]),
                (4, [0, 1]),
            ] {
                for rank in 0..world {
                    let (bytes, header, arrays, c) = image(shift);
                    let rank_of = Some(Rank { rank, world });
                    let split = |i: usize| match i {
                        0 => Some(splits[0]),
                        1 => Some(splits[1]),
                        2 => Some(0).filter(|_| 4 % world == 0),
                        _ => Some(0),
                    };
                    let mut parts: Vec<Option<Part>> = (header.entries.iter().enumerate())
                        .map(|(i, e)| {
                            let len = e.end - e.begin;
                            Part::new(e.dtype, &e.shape, len, split(i), rank_of).ok()
                        })
                        .collect();
                    // SAFETY:
                    // - `header` was parsed from the image's own header, against its length;
                    // - the image is a heap buffer that nothing else reaches.
                    let tensors = unsafe {
                        mapped_tensors(Path::new("t"), bytes, &header, |i| parts[i].take())
                    }
                    .unwrap();
                    let at = format!("shift {shift}, rank {rank} of {world}, {splits:?}");
                    for (i, full) in arrays.iter().enumerate() {
                        let Some(dim) = split(i).filter(|&d| full.len_of(Axis(d)) % world == 0)
                        else {
                            assert!(tensors[i].is_none(), "{at}");
                            continue;
                        };
                        let tensor = tensors[i].as_ref().unwrap();
                        assert_eq!(tensor.is_copied(), shift != 0, "{at}");
                        let view = tensor.as_array::<f32, IxDyn>().unwrap();
                        assert_eq!(view, chunk(full, dim, rank, world), "{at}");
                    }
                    if let Some(bools) = tensors[2].as_ref() {
                        let view = bools.as_array::<bool, IxDyn>().unwrap();
                        // Split along its rows when they divide, else whole.
                        let (per, rank) = if 4 % world == 0 {
                            (4 / world, rank)
                        } else {
                            (4, 0)
                        };
                        let want: Vec<bool> = c[rank * per * 2..(rank + 1) * per * 2]
                            .iter()
                            .map(|&b| b == 1)
                            .collect();
                        assert_eq!(view.iter().copied().collect::<Vec<_>>(), want, "{at}");
                    }
                    let empty = tensors[3].as_ref().unwrap();
                    assert_eq!(empty.shape(), [0, 4], "{at}");
                    // Writes through every view: each reaches its own elements only.
                    let mut tensors: Vec<ManagedTensor> = tensors.into_iter().flatten().collect();
                    for (t, tensor) in tensors.iter_mut().enumerate() {
                        if tensor.dtype() == DataType::F32 {
                            tensor
                                .as_array_mut::<f32, IxDyn>()
                                .unwrap()
                                .fill(-(t as f32));
                        }
                    }
                    for (t, tensor) in tensors.iter().enumerate() {
                        if tensor.dtype() == DataType::F32 {
                            let view = tensor.as_array::<f32, IxDyn>().unwrap();
                            assert!(view.iter().all(|&x| x == -(t as f32)), "{at}");
                        }
                    }
                }
            }
        }
    }

    /// A part that does not lie inside its tensor is refused, whatever made it.
    #[test]
    fn a_part_outside_its_tensor_is_refused() {
        let (bytes, header, _, _) = image(0);
        let rank = Some(Rank { rank: 1, world: 2 });
        let e = &header.entries[0];
        let mut lying = Part::new(e.dtype, &e.shape, e.end - e.begin, Some(1), rank).unwrap();
        lying.first += 4;
        // SAFETY: as above (a part may be anything).
        let err = unsafe {
            mapped_tensors(Path::new("t"), bytes, &header, |i| {
                (i == 0).then(|| lying.clone())
            })
        }
        .err()
        .unwrap();
        assert!(
            err.to_string().contains("a part outside its tensor"),
            "{err}"
        );
        // Parts whose sizes do not add up, which would make views or copies past the
        // tensor's bytes (or loops without end) were they believed, aligned or not.
        let part = |shape: Vec<usize>, rows, len, stride, first| Part {
            shape,
            rows,
            len,
            stride,
            first,
        };
        for shift in [0, 2] {
            for lying in [
                part(vec![(1 << 62) + 1, 4], 1, 2, 2, 0),
                part(vec![1 << 62, 4], 0, 0, 0, 0),
                part(vec![4, 6], 0, 0, 0, 0),
                part(vec![4, 6], 1, 8, 8, 0),
                part(vec![0, 6], usize::MAX, 0, 0, 0),
                part(vec![0, usize::MAX], 0, 0, 0, 0),
                part(vec![0, 6], 0, 0, 0, 1000),
                part(vec![24], usize::MAX, 1 << 62, 0, 0),
            ] {
                let (bytes, header, _, _) = image(shift);
                let at = format!("{shift} {lying:?}");
                // SAFETY: as above.
                let made = unsafe {
                    mapped_tensors(Path::new("t"), bytes, &header, |i| {
                        (i == 0).then(|| lying.clone())
                    })
                };
                let err = made.err().unwrap_or_else(|| panic!("{at}"));
                assert!(err.to_string().contains("a part outside"), "{at}: {err}");
            }
        }
    }

    /// The bytes of a `bool` view are checked wherever its shape and strides reach: a
    /// byte that is not 0 or 1 in another rank's columns is no error, one in the rank's
    /// own is, and so is one that a lying part's runs leave out but its shape reaches.
    #[test]
    fn a_bool_part_is_checked_where_its_view_reaches() {
        let columns = |rank: usize| {
            let e_rank = Some(Rank { rank, world: 2 });
            move |e: &header::Entry| Part::new(e.dtype, &e.shape, e.end - e.begin, Some(1), e_rank)
        };
        for (rank, ok) in [(0, true), (1, false)] {
            let (mut bytes, header, _, c) = image(0);
            let c_at = header.data_start + header.entries[2].begin;
            // Element [2, 1]: the second column, rank 1's.
            bytes.as_bytes_mut()[c_at + 5] = 2;
            let part = columns(rank)(&header.entries[2]).unwrap();
            assert!(!part.is_contiguous());
            // SAFETY: as above.
            let made = unsafe {
                mapped_tensors(Path::new("t"), bytes, &header, |i| {
                    (i == 2).then(|| part.clone())
                })
            };
            match made {
                Ok(tensors) => {
                    assert!(ok);
                    let view = tensors[2].as_ref().unwrap();
                    let view = view.as_array::<bool, IxDyn>().unwrap();
                    let want: Vec<bool> = c.iter().step_by(2).map(|&b| b == 1).collect();
                    assert_eq!(view.iter().copied().collect::<Vec<_>>(), want);
                }
                Err(err) => {
                    assert!(!ok);
                    assert!(err.to_string().contains("element 5 holds byte 2"), "{err}");
                }
            }
        }
        // A part whose runs are bytes 0, 1, 4 and 5, and whose view (a column, at the
        // whole tensor's strides) reaches bytes 0, 2, 4 and 6.
        let (mut bytes, header, _, _) = image(0);
        let c_at = header.data_start + header.entries[2].begin;
        bytes.as_bytes_mut()[c_at + 6] = 7;
        let lying = Part {
            shape: vec![4, 1],
            rows: 2,
            len: 2,
            stride: 4,
            first: 0,
        };
        // SAFETY: as above.
        let err = unsafe {
            mapped_tensors(Path::new("t"), bytes, &header, |i| {
                (i == 2).then(|| lying.clone())
            })
        }
        .err()
        .unwrap();
        assert!(err.to_string().contains("element 6 holds byte 7"), "{err}");
    }
}
