//! Owned reads: each tensor straight from its file into a buffer of its own, typed where
//! Rust has the element type (so that an owned ndarray field keeps the buffer without a
//! copy), converted between float types when asked, by several threads at once.
//!
//! Every buffer is allocated first (zeroed memory from the allocator, whose pages cost
//! nothing until they are written); then the threads take chunks of the tensors from
//! one queue and read each chunk with a positioned read (`pread`), straight into its
//! place in the buffer: no buffer of a file, no second copy. A converting chunk is read
//! in blocks into the thread's staging buffer and converted into place, so the data
//! buffers a load uses beyond its output are at most [`STAGING`] bytes per thread (plus
//! the conversion's own 96 KiB), and a read that converts nothing uses none (the
//! threads' stacks, the work items and the headers aside: see the module's docs).
//!
//! A rank of a tensor-parallel group reads only its part of a split tensor
//! ([`Part`]): one range for a split along the first dimension (or any dimension after
//! extents of 1), else one range per row of the dimensions before the split (the row
//! segments, each read exactly, coalesced where they touch): nothing outside the part
//! is read.

use std::fs::File;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::Mutex;

use crate::device::Device;
use crate::dtype::{DataType, Element};
use crate::error::{Error, Result};
use crate::tensor::{
    AlignedBytes, ManagedTensor, aligned_elements, element_bytes_mut, huge_pages, into_bools,
};

use super::convert::{self, Scratch};
use super::header::invalid;

/// The bytes of a tensor one work item reads (the last chunk of a tensor may be
/// shorter): large enough that a read is one long system call, small enough that the
/// threads share a large tensor.
const CHUNK: usize = 8 << 20;

/// The bytes a converting thread reads at a time, into its staging buffer.
const STAGING: usize = 256 << 10;

/// Below this many bytes per thread, fewer threads are started: a thread costs more
/// than it reads.
const PER_THREAD: usize = 4 << 20;

/// One tensor to read.
pub(super) struct Source<'a> {
    /// Its name, for errors.
    pub(super) name: &'a str,
    /// Its file, and the file's path for errors.
    pub(super) file: &'a File,
    pub(super) path: &'a Path,
    /// Where its bytes start in the file.
    pub(super) offset: u64,
    /// Its dtype in the file, and its shape.
    pub(super) dtype: DataType,
    pub(super) shape: &'a [usize],
    /// Its bytes in the file (checked against the dtype and shape by the header's
    /// parser).
    pub(super) len: usize,
    /// The dimension it is split along between the ranks of a tensor-parallel group,
    /// if it is (read whole when the plan has no rank).
    pub(super) split: Option<usize>,
}

impl Source<'_> {
    /// The part of the tensor the plan's rank reads (the whole tensor when it is not
    /// split or the plan has no rank); an [`Error::InvalidSplit`] naming the tensor
    /// when it cannot be split so.
    pub(super) fn part(&self, plan: Plan) -> Result<Part> {
        Part::new(self.dtype, self.shape, self.len, self.split, plan.rank)
            .map_err(|e| e.in_tensor(self.name))
    }
}

/// The ranks of a tensor-parallel group, and the one that reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rank {
    /// The rank reading, below `world`.
    pub(crate) rank: usize,
    /// The number of ranks, at least 1.
    pub(crate) world: usize,
}

/// The bytes of a tensor one rank reads, and the shape they make: `rows` segments of
/// `len` bytes, the first `first` bytes after the tensor's start, each `stride` bytes
/// after the one before (the whole tensor: one segment of all its bytes).
///
/// A tensor of shape `[a.., n, b..]` split along the dimension of `n` between `w` ranks
/// gives rank `r` the elements `[.., r*n/w .. (r+1)*n/w, ..]` (PyTorch's
/// `torch.chunk(full, w, dim)[r]` for an even split): for each index of the dimensions
/// before the split (a row), one run of `n/w * product(b..)` elements. Runs that touch
/// (`stride == len`: one rank) are one segment; a split along the first dimension, or
/// after extents of 1 only, is one segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Part {
    pub(crate) shape: Vec<usize>,
    pub(crate) rows: usize,
    pub(crate) len: usize,
    pub(crate) stride: usize,
    pub(crate) first: usize,
}

impl Part {
    /// The part of a tensor of `dtype` and `shape` (`len` bytes) that `rank` reads when
    /// it is split along `split`: the whole tensor when either is `None`; an
    /// [`Error::InvalidSplit`] for a dimension the shape does not have, an extent that
    /// is not a multiple of the world size, or packed elements whose parts would not
    /// start on whole bytes.
    pub(crate) fn new(
        dtype: DataType,
        shape: &[usize],
        len: usize,
        split: Option<usize>,
        rank: Option<Rank>,
    ) -> Result<Self> {
        let whole = Self::whole(shape, len);
        let (Some(dim), Some(Rank { rank, world })) = (split, rank) else {
            return Ok(whole);
        };
        let refused = || Error::InvalidSplit {
            shape: shape.to_vec(),
            dim,
            world_size: world,
            dtype,
        };
        let Some(&extent) = shape.get(dim) else {
            return Err(refused());
        };
        if world == 0 || extent % world != 0 {
            return Err(refused());
        }
        let part = extent / world;
        let mut part_shape = shape.to_vec();
        part_shape[dim] = part;
        if shape.contains(&0) {
            // No element, no byte (and extents that may multiply past any integer).
            return Ok(Self {
                shape: part_shape,
                rows: 0,
                len: 0,
                stride: 0,
                first: 0,
            });
        }
        if world == 1 {
            return Ok(whole);
        }
        // A non-empty shape's element count fits `isize` (the header's checks), and
        // its bits fit `u128`.
        let outer: usize = shape[..dim].iter().product();
        let inner: u128 = shape[dim + 1..].iter().map(|&d| d as u128).product();
        let bits = u128::from(dtype.bits());
        let (segment, row) = (part as u128 * inner * bits, extent as u128 * inner * bits);
        if segment % 8 != 0 || row % 8 != 0 {
            return Err(refused());
        }
        // Each at most the tensor's bytes, which fit `usize`.
        let (segment, row) = ((segment / 8) as usize, (row / 8) as usize);
        Ok(Self {
            shape: part_shape,
            rows: outer,
            len: segment,
            stride: row,
            first: rank * segment,
        })
    }

    /// The whole of a tensor of `shape` and `len` bytes: one segment of all its bytes
    /// (none when it has none).
    pub(crate) fn whole(shape: &[usize], len: usize) -> Self {
        Self {
            shape: shape.to_vec(),
            rows: usize::from(len > 0),
            len,
            stride: len,
            first: 0,
        }
    }

    /// Whether the part's bytes are one run (the whole tensor, a split along the first
    /// dimension, or none at all): its elements are then in C order from its start.
    pub(crate) fn is_contiguous(&self) -> bool {
        self.rows <= 1 || self.stride == self.len
    }

    /// The bytes read, in the file.
    pub(crate) fn bytes(&self) -> usize {
        self.rows * self.len
    }

    /// The file ranges read, relative to the tensor's start, in order.
    pub(crate) fn ranges(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.rows).map(|row| {
            let start = self.first + row * self.stride;
            (start, start + self.len)
        })
    }
}

/// How to read: the threads, and the float type to convert float tensors to.
#[derive(Clone, Copy, Debug)]
pub(super) struct Plan {
    pub(super) threads: NonZeroUsize,
    pub(super) convert: Option<DataType>,
    /// The rank reading, for the tensors split between the ranks of a group.
    pub(super) rank: Option<Rank>,
}

impl Plan {
    /// The dtype a tensor of `dtype` gets.
    pub(super) fn dtype_of(&self, dtype: DataType) -> DataType {
        match self.convert {
            Some(to) if convert::is_float(dtype) => to,
            _ => dtype,
        }
    }
}

/// Reads every source into a tensor of its own, in the order given.
///
/// # Errors
///
/// [`Error::AllocationFailed`] when a buffer cannot be allocated; an [`Error::Io`] about
/// the file, in an [`Error::Tensor`] naming the tensor, when a read fails or the file
/// ends first; [`Error::InvalidFile`] for a `bool` byte other than 0 or 1. Nothing
/// leaks, and every thread has stopped, when this returns.
pub(super) fn read(sources: &[Source<'_>], plan: Plan) -> Result<Vec<ManagedTensor>> {
    let parts = sources
        .iter()
        .map(|source| source.part(plan))
        .collect::<Result<Vec<Part>>>()?;
    let mut buffers = Vec::with_capacity(sources.len());
    for (source, part) in sources.iter().zip(&parts) {
        let dtype = plan.dtype_of(source.dtype);
        let count = element_count(&part.shape);
        let len = if dtype == source.dtype {
            Some(part.bytes())
        } else {
            // Float types are whole bytes; the count fits `isize` in the stored type,
            // and converting at most doubles it twice (`bfloat16` to `float64`).
            count.checked_mul(dtype.size_in_bytes())
        };
        let buffer = match len {
            Some(len) => buffer(dtype, count, len),
            None => Err(Error::AllocationFailed { bytes: usize::MAX }),
        };
        buffers.push(buffer.map_err(|e| e.in_tensor(source.name))?);
    }
    let mut items = Vec::new();
    for (index, ((source, part), buffer)) in
        sources.iter().zip(&parts).zip(&mut buffers).enumerate()
    {
        items.extend(chunks(index, source, part, plan, buffer.bytes_mut()));
    }
    let total: usize = items.iter().map(|item| item.dst.len()).sum();
    let threads = plan
        .threads
        .get()
        .min(total.div_ceil(PER_THREAD))
        .min(items.len())
        .max(1);
    will_need(sources, &parts);
    run(items, threads, sources)?;
    sources
        .iter()
        .zip(&parts)
        .zip(buffers)
        .map(|((source, part), buffer)| {
            buffer.into_tensor(Made {
                name: source.name,
                path: source.path,
                dtype: plan.dtype_of(source.dtype),
                shape: &part.shape,
                flags: 0,
            })
        })
        .collect()
}

/// Tells the kernel which bytes of which files are about to be read, so that it reads
/// them from the disk ahead of the threads, as many at once as the disk takes (a cold
/// read otherwise waits for each window of readahead in turn); runs of bytes that
/// follow each other in one file are told as one. Only the bytes read are told (a
/// rank's segments of a split tensor, not the rows between them). Advice only: nothing
/// fails if it is not taken (and on systems without it, nothing is told).
fn will_need(sources: &[Source<'_>], parts: &[Part]) {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        use std::os::fd::AsRawFd;
        let mut run: Option<(&File, u64, u64)> = None;
        let tell = |(file, start, end): (&File, u64, u64)| {
            // (`off_t` is 32 bits on some targets: a run past it is not told.)
            let (Ok(offset), Ok(len)) = (
                libc::off_t::try_from(start),
                libc::off_t::try_from(end - start),
            ) else {
                return;
            };
            // SAFETY:
            // - `file` is open for as long as this call (borrowed), so its descriptor
            //   is valid; the call takes no memory of ours, and only advises the
            //   kernel's page cache (its result is ignored: advice).
            let _ = unsafe {
                libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED)
            };
        };
        let ranges = sources.iter().zip(parts).flat_map(|(source, part)| {
            part.ranges().map(move |(start, end)| {
                let offset = source.offset;
                (source.file, offset + start as u64, offset + end as u64)
            })
        });
        for (source_file, start, end) in ranges.filter(|&(_, start, end)| end > start) {
            match &mut run {
                Some((file, _, run_end))
                    if core::ptr::eq(*file, source_file) && *run_end == start =>
                {
                    *run_end = end;
                }
                _ => {
                    if let Some(done) = run.take() {
                        tell(done);
                    }
                    run = Some((source_file, start, end));
                }
            }
        }
        if let Some(done) = run {
            tell(done);
        }
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = (sources, parts);
}

/// The number of elements of a checked shape (its product fits: the header's checks).
pub(super) fn element_count(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// C-contiguous strides for a checked shape, in elements; all 0 for an empty one (whose
/// extents may multiply past any integer, and which addresses no element).
pub(super) fn c_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    if shape.contains(&0) {
        return strides;
    }
    let mut stride = 1usize;
    for (out, &extent) in strides.iter_mut().zip(shape).rev() {
        // The element count of a non-empty shape fits `isize` (the header's checks),
        // and so does every partial product of it.
        *out = stride as isize;
        stride = stride.saturating_mul(extent);
    }
    strides
}

/// The strides of an empty tensor, all 0 (its extents may multiply past `i64`, where C
/// strides would wrap); `None`, C-contiguous, for any other.
pub(super) fn empty_strides(shape: &[usize]) -> Option<Vec<i64>> {
    shape.contains(&0).then(|| vec![0; shape.len()])
}

/// A piece of work: bytes of one tensor, from its file into its buffer.
struct Item<'b> {
    /// The tensor's index among the sources.
    tensor: usize,
    /// Where the chunk's bytes start in the file.
    offset: u64,
    /// The chunk's bytes in the file (`dst.len()` unless converting).
    len: usize,
    /// `(from, to)` when the chunk is converted.
    convert: Option<(DataType, DataType)>,
    /// Where the chunk goes.
    dst: &'b mut [u8],
}

/// Cuts a tensor's buffer into work items of at most [`CHUNK`] bytes, one segment of
/// its part (see [`Part`]) after the other, on element boundaries when it is
/// converted.
fn chunks<'b>(
    tensor: usize,
    source: &Source<'_>,
    part: &Part,
    plan: Plan,
    dst: &'b mut [u8],
) -> impl Iterator<Item = Item<'b>> + use<'b> {
    let to = plan.dtype_of(source.dtype);
    let from = source.dtype;
    let (convert, from_size, to_size) = if to == from {
        (None, 1, 1)
    } else {
        (Some((from, to)), from.size_in_bytes(), to.size_in_bytes())
    };
    let elements = (CHUNK / from_size.max(to_size)).max(1);
    // Each segment's bytes in the buffer; an empty part has no segment.
    let segment = part.len / from_size * to_size;
    let (rows, stride, start) = (part.rows, part.stride, source.offset + part.first as u64);
    let dst = if segment == 0 { &mut [][..] } else { dst };
    dst.chunks_mut(segment.max(1))
        .take(rows)
        .enumerate()
        .flat_map(move |(row, dst)| {
            let offset = start + (row * stride) as u64;
            dst.chunks_mut(elements * to_size)
                .enumerate()
                .map(move |(i, dst)| Item {
                    tensor,
                    offset: offset + (i * elements * from_size) as u64,
                    len: dst.len() / to_size * from_size,
                    convert,
                    dst,
                })
        })
}

/// Runs the items on `threads` threads (this one among them), stopping at the first
/// error: the error of the first tensor, in order, among those that failed before the
/// threads stopped. A thread the system cannot start leaves its work to the others.
fn run(items: Vec<Item<'_>>, threads: usize, sources: &[Source<'_>]) -> Result<()> {
    let queue = Mutex::new(items.into_iter());
    let failed: Mutex<Option<(usize, Error)>> = Mutex::new(None);
    let work = || {
        let mut staging = Vec::new();
        let mut scratch = Scratch::default();
        loop {
            if lock(&failed).is_some() {
                return;
            }
            let Some(item) = lock(&queue).next() else {
                return;
            };
            let tensor = item.tensor;
            if let Err(err) = read_item(item, sources, &mut staging, &mut scratch) {
                let mut failed = lock(&failed);
                if failed.as_ref().is_none_or(|(first, _)| tensor < *first) {
                    *failed = Some((tensor, err));
                }
            }
        }
    };
    if threads <= 1 {
        work();
    } else {
        std::thread::scope(|scope| {
            for _ in 1..threads {
                if std::thread::Builder::new()
                    .spawn_scoped(scope, work)
                    .is_err()
                {
                    break;
                }
            }
            work();
        });
    }
    match failed
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
    {
        Some((_, err)) => Err(err),
        None => Ok(()),
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked (each value is
/// replaced whole).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Reads one item, converting it through `staging` when it is converted.
fn read_item(
    item: Item<'_>,
    sources: &[Source<'_>],
    staging: &mut Vec<u8>,
    scratch: &mut Scratch,
) -> Result<()> {
    let source = &sources[item.tensor];
    let fail = |e: std::io::Error| Error::io(source.path, &e).in_tensor(source.name);
    let Some((from, to)) = item.convert else {
        return read_at(source.file, item.dst, item.offset).map_err(fail);
    };
    let (from_size, to_size) = (from.size_in_bytes(), to.size_in_bytes());
    let block = (STAGING / from_size).max(1);
    let mut offset = item.offset;
    for dst in item.dst.chunks_mut(block * to_size) {
        let len = dst.len() / to_size * from_size;
        staging.resize(len, 0);
        read_at(source.file, staging, offset).map_err(fail)?;
        convert::convert(from, to, staging, dst, scratch);
        offset += len as u64;
    }
    debug_assert_eq!(offset, item.offset + item.len as u64);
    Ok(())
}

/// Fills `buf` from `file` at `offset`, without moving a shared cursor (so that threads
/// read one file at once); the file ending first is an `UnexpectedEof`.
#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

/// Fills `buf` from `file` at `offset` (see the Unix version).
#[cfg(windows)]
fn read_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, offset) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Fills `buf` from `file` at `offset` (see the Unix version), one thread at a time.
#[cfg(not(any(unix, windows)))]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    static CURSOR: Mutex<()> = Mutex::new(());
    let _cursor = lock(&CURSOR);
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

/// What a finished buffer becomes: a tensor of `dtype` and `shape` (C-contiguous, on
/// the CPU, exclusive and writable), named `name` in `path` for errors.
pub(super) struct Made<'a> {
    pub(super) name: &'a str,
    pub(super) path: &'a Path,
    pub(super) dtype: DataType,
    pub(super) shape: &'a [usize],
    pub(super) flags: u64,
}

/// A tensor's buffer, allocated before it is read.
pub(super) trait Buffer: Send {
    /// The bytes to read into.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// The tensor over the buffer, once read; a `bool` buffer is checked to hold only 0
    /// and 1.
    fn into_tensor(self: Box<Self>, made: Made<'_>) -> Result<ManagedTensor>;
}

/// A buffer of `count` elements of `dtype` (`len` bytes), zeroed, its data on a
/// 64-byte boundary: a `Vec` of the Rust element type where there is one (the data a
/// few elements in; huge pages asked for where it is large, since it is about to be
/// written whole), else aligned bytes.
pub(super) fn buffer(dtype: DataType, count: usize, len: usize) -> Result<Box<dyn Buffer>> {
    if dtype == DataType::BOOL {
        let (mut bytes, offset) = aligned_elements::<u8>(count)?;
        huge_pages(&mut bytes);
        return Ok(Box::new(Bools(Aligned {
            values: bytes,
            offset,
            count,
        })));
    }
    macro_rules! typed {
        (bool, $constant:ident, $name:literal) => {};
        ($ty:ty, $constant:ident, $name:literal) => {
            if dtype == DataType::$constant {
                let (mut values, offset) = aligned_elements::<$ty>(count)?;
                huge_pages(&mut values);
                return Ok(Box::new(Aligned {
                    values,
                    offset,
                    count,
                }));
            }
        };
    }
    crate::for_each_element!(typed);
    Ok(Box::new(Bytes(AlignedBytes::zeroed(len)?)))
}

/// `count` elements from `offset` in a vector of its own (the alignment's room in
/// front, zeros).
struct Aligned<A> {
    values: Vec<A>,
    offset: usize,
    count: usize,
}

impl<A: Element> Buffer for Aligned<A> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        let elements = &mut self.values[self.offset..self.offset + self.count];
        // `bool` has a buffer of its own (`Bools`); every other element type has bytes.
        element_bytes_mut(elements).expect("only `bool` has no bytes, and it has `Bools`")
    }

    fn into_tensor(self: Box<Self>, made: Made<'_>) -> Result<ManagedTensor> {
        let strides = c_strides(made.shape);
        ManagedTensor::from_buffer_with_flags(
            self.values,
            self.offset,
            made.shape,
            &strides,
            made.flags,
        )
        .map_err(|e| e.in_tensor(made.name))
    }
}

/// The bytes of a `bool` tensor, checked once read.
struct Bools(Aligned<u8>);

impl Buffer for Bools {
    fn bytes_mut(&mut self) -> &mut [u8] {
        let Aligned {
            values,
            offset,
            count,
        } = &mut self.0;
        &mut values[*offset..*offset + *count]
    }

    fn into_tensor(self: Box<Self>, made: Made<'_>) -> Result<ManagedTensor> {
        let Aligned { values, offset, .. } = self.0;
        // The room in front holds zeros, which are `false`.
        let bools = into_bools(values)
            .map_err(|(index, byte)| not_a_bool(made.path, made.name, index - offset, byte))?;
        let strides = c_strides(made.shape);
        ManagedTensor::from_buffer_with_flags(bools, offset, made.shape, &strides, made.flags)
            .map_err(|e| e.in_tensor(made.name))
    }
}

/// The bytes of a type Rust has no element for (float8, float6, float4, and half or
/// complex types in a build without those features), 64-byte aligned.
struct Bytes(AlignedBytes);

impl Buffer for Bytes {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.0.as_bytes_mut()
    }

    fn into_tensor(self: Box<Self>, made: Made<'_>) -> Result<ManagedTensor> {
        // The header's checks proved that every extent fits `i64`.
        let shape: Vec<i64> = made.shape.iter().map(|&d| d as i64).collect();
        let strides = empty_strides(made.shape);
        // SAFETY:
        // - the buffer holds the tensor's `ceil(elements * bits / 8)` bytes in C order, as
        //   the format stores them (the header's checks tie the length to the shape,
        //   whose extents fit `i64`), 64-byte aligned, kept alive and unmoved by the
        //   owner (heap memory); the strides are C-contiguous (NULL), or all 0 for an
        //   empty tensor, which addresses no element;
        // - nobody else reaches the buffer: exclusive and writable;
        // - the dtype is not `bool` (which has a buffer of its own).
        unsafe {
            ManagedTensor::from_owner(
                self.0,
                |bytes| bytes.as_mut_ptr().cast(),
                &shape,
                strides.as_deref(),
                made.dtype,
                Device::CPU,
                made.flags,
            )
        }
        .map_err(|e| e.in_tensor(made.name))
    }
}

/// The error of a `bool` element of `tensor` in `path` that holds `byte`, neither 0 nor
/// 1.
pub(super) fn not_a_bool(path: &Path, tensor: &str, index: usize, byte: u8) -> Error {
    invalid(
        path,
        Some(tensor),
        format!("element {index} holds byte {byte}, and a bool must be 0 or 1"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(
        dtype: DataType,
        shape: &[usize],
        split: usize,
        rank: usize,
        world: usize,
    ) -> Result<Part> {
        let bits: usize = shape.iter().product::<usize>() * usize::from(dtype.bits());
        Part::new(
            dtype,
            shape,
            bits.div_ceil(8),
            Some(split),
            Some(Rank { rank, world }),
        )
    }

    #[test]
    fn a_rank_reads_one_range_along_dim_0_and_row_segments_inside() {
        // [8, 6] float32, dim 0 of 4: rows 4..6, one range of 2 * 6 * 4 bytes.
        let p = part(DataType::F32, &[8, 6], 0, 2, 4).unwrap();
        assert_eq!(
            (p.shape.as_slice(), p.rows, p.len, p.first),
            (&[2, 6][..], 1, 48, 96)
        );
        // Dim 1 of 3: columns 2..4 of each of the 8 rows, 8 bytes every 24.
        let p = part(DataType::F32, &[8, 6], 1, 1, 3).unwrap();
        assert_eq!((p.rows, p.len, p.stride, p.first), (8, 8, 24, 8));
        assert_eq!(p.bytes(), 8 * 6 * 4 / 3);
        // After extents of 1 only: one range.
        let p = part(DataType::F32, &[1, 8, 6], 1, 3, 4).unwrap();
        assert_eq!((p.rows, p.len, p.first), (1, 48, 144));
        // One rank: the whole tensor; an empty one: nothing.
        let p = part(DataType::F32, &[8, 6], 1, 0, 1).unwrap();
        assert_eq!((p.rows, p.len), (1, 192));
        let p = part(DataType::F32, &[0, 6], 1, 1, 2).unwrap();
        assert_eq!((p.shape.as_slice(), p.rows, p.len), (&[0, 3][..], 0, 0));
    }

    #[test]
    fn packed_parts_must_start_on_whole_bytes() {
        // float4: 2 of 4 columns are one byte; 1 of 2 half a byte.
        let p = part(DataType::F4_E2M1FN, &[3, 4], 1, 1, 2).unwrap();
        assert_eq!((p.rows, p.len, p.stride, p.first), (3, 1, 2, 1));
        let err = part(DataType::F4_E2M1FN, &[3, 2], 1, 1, 2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot split a tensor of shape [3, 2] along dimension 1 between 2 ranks: a \
             float4_e2m1fn element takes 4 bits, and the parts would not start on whole bytes"
        );
        let err = part(DataType::F32, &[3, 2], 2, 0, 2).unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidSplit {
                dim: 2,
                world_size: 2,
                ..
            }
        ));
    }
}
