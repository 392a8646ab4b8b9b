//! Buffers this crate allocates for tensor bytes: [`AlignedBytes`], the home of a copy
//! whose element type Rust may not have, and typed buffers (a file read into them, an
//! array copied into them) that an owned ndarray field then keeps.
//!
//! Every one starts its data on a [`DATA_ALIGNMENT`]-byte boundary: XLA's CPU client
//! (JAX) imports less aligned memory only by copying it, and vector loads of a whole
//! cache line start on one. A typed buffer is a `Vec` of the element type (so that an
//! ndarray array can keep it as it is), allocated with room in front for the alignment:
//! its data starts a few elements in, where the array starts too.

use crate::error::{Error, Result};

/// The alignment, in bytes, of the data of every buffer this crate allocates for a
/// tensor.
pub(crate) const DATA_ALIGNMENT: usize = 64;

#[cfg(any(
    feature = "pyo3",
    feature = "burn",
    feature = "safetensors",
    feature = "dlpark"
))]
/// Bytes in a zeroed buffer aligned to [`DATA_ALIGNMENT`] (beyond every DLPack element
/// type's own alignment): the home of a copy whose element type Rust may not have.
pub(crate) struct AlignedBytes {
    words: Vec<Block>,
    len: usize,
}

#[cfg(any(
    feature = "pyo3",
    feature = "burn",
    feature = "safetensors",
    feature = "dlpark"
))]
/// [`DATA_ALIGNMENT`] bytes, aligned to as many on every target.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; DATA_ALIGNMENT]);

#[cfg(any(
    feature = "pyo3",
    feature = "burn",
    feature = "safetensors",
    feature = "dlpark"
))]
const _: () = assert!(align_of::<Block>() == DATA_ALIGNMENT);

#[cfg(any(
    feature = "pyo3",
    feature = "burn",
    feature = "safetensors",
    feature = "dlpark"
))]
impl AlignedBytes {
    /// `len` zero bytes; [`Error::AllocationFailed`] when they cannot be allocated.
    pub(crate) fn zeroed(len: usize) -> Result<Self> {
        // SAFETY: zero bytes are a valid `Block`.
        let words = unsafe { zeroed_vec::<Block>(len.div_ceil(DATA_ALIGNMENT)) }
            .map_err(|_| Error::AllocationFailed { bytes: len })?;
        Ok(Self { words, len })
    }

    /// The bytes (for the bridges that hand a copy on as one buffer).
    #[cfg(any(feature = "pyo3", feature = "burn"))]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY:
        // - the vector holds at least `len` initialised bytes (`len.div_ceil(64)`
        //   zero-initialised blocks of 64), borrowed with `self`;
        // - `u8` accepts every byte and has alignment 1.
        unsafe { core::slice::from_raw_parts(self.words.as_ptr().cast(), self.len) }
    }

    /// The bytes, writable.
    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY:
        // - the vector holds at least `len` initialised bytes (`len.div_ceil(64)`
        //   zero-initialised blocks of 64), borrowed uniquely with `self`;
        // - `u8` has alignment 1, and a block accepts every byte, so any byte written
        //   keeps it valid.
        unsafe { core::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.len) }
    }

    /// The address of the first byte, for a tensor over the buffer (stable while the
    /// buffer lives: heap memory).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.words.as_mut_ptr().cast()
    }
}

/// `len` values of `T`, every byte zero, from the allocator's zeroed memory (for large
/// sizes, fresh pages that cost nothing until they are written), or
/// [`Error::AllocationFailed`].
///
/// # Safety
///
/// - all-zero bytes are a valid `T`.
unsafe fn zeroed_vec<T>(len: usize) -> Result<Vec<T>> {
    let failed = |bytes| Error::AllocationFailed { bytes };
    let layout = std::alloc::Layout::array::<T>(len)
        .map_err(|_| failed(len.saturating_mul(size_of::<T>())))?;
    if layout.size() == 0 {
        let mut empty = Vec::new();
        // A zero-sized allocation is never made: `len` zero-sized values, or none.
        empty.resize_with(len, || {
            // SAFETY: the caller guarantees zero bytes (here none) are a valid `T`.
            unsafe { core::mem::zeroed() }
        });
        return Ok(empty);
    }
    // SAFETY: `layout` has a non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        return Err(failed(layout.size()));
    }
    // SAFETY:
    // - `ptr` was allocated by the global allocator with the layout of `[T; len]`, which
    //   is what a `Vec<T>` of capacity `len` holds;
    // - its `len` values are initialised: zero bytes, a valid `T` (the contract).
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

/// Asks Linux to back the whole 2 MiB pages inside `values`, a large fresh buffer that
/// is about to be written whole (a file read into it), with huge pages
/// (`MADV_HUGEPAGE`): its first writes then take one page fault per 2 MiB instead of
/// one per 4 KiB. Advice only: the contents do not change, and a kernel that does not
/// take it (no transparent huge pages) changes nothing. Buffers under 4 MiB are left
/// as they are.
#[cfg(feature = "safetensors")]
pub(crate) fn huge_pages<A>(values: &mut [A]) {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        const HUGE: usize = 2 << 20;
        let bytes = size_of_val(values);
        if bytes < 2 * HUGE {
            return;
        }
        let ptr = values.as_mut_ptr().cast::<u8>();
        // (`bytes >= 4 MiB` and `start < 2 MiB`: at least one whole huge page.)
        let start = ptr.align_offset(HUGE).min(bytes);
        let len = (bytes - start) / HUGE * HUGE;
        if len == 0 {
            return;
        }
        // SAFETY:
        // - `[ptr + start, ptr + start + len)` lies inside `values` (`start + len <=
        //   bytes`), borrowed mutably, so no one else uses it meanwhile; it starts on
        //   a page boundary (a 2 MiB one), as `madvise` requires;
        // - `MADV_HUGEPAGE` changes how the kernel backs the range, never its
        //   contents; its result is ignored (advice).
        let _ = unsafe { libc::madvise(ptr.wrapping_add(start).cast(), len, libc::MADV_HUGEPAGE) };
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = values;
}

/// `count` zeroed elements of `A` (`0`, `0.0`, `false`) that start on a
/// [`DATA_ALIGNMENT`]-byte boundary: a vector with room for the alignment in front, and
/// the index of the first of them in it (the vector's other elements are zero too).
/// [`Error::AllocationFailed`] when they cannot be allocated.
#[cfg(any(feature = "safetensors", feature = "ndarray"))]
pub(crate) fn aligned_elements<A: crate::dtype::Element>(count: usize) -> Result<(Vec<A>, usize)> {
    if count == 0 {
        return Ok((Vec::new(), 0));
    }
    // Every element type's size divides 64, and the allocator aligns the vector to
    // the element's size at least (an element type's alignment is its size, but for
    // complex numbers, whose parts the allocator still aligns to 16): one of the first
    // `64 / size` elements starts on the boundary.
    let room = (DATA_ALIGNMENT / size_of::<A>()).max(1);
    let len = count
        .checked_add(room)
        .ok_or(Error::AllocationFailed { bytes: usize::MAX })?;
    // SAFETY: all-zero bytes are a valid value of every element type (`Element`'s
    // contract: every bit pattern, or for `bool` the bytes 0 and 1).
    let values = unsafe { zeroed_vec::<A>(len) }?;
    // Where the alignment cannot be reached in `room` elements (an allocator that
    // aligns less than the element's size), the data starts at the front: aligned for
    // its type, as every `Vec` is.
    let offset = match values.as_ptr().align_offset(DATA_ALIGNMENT) {
        at if at < room => at,
        _ => 0,
    };
    Ok((values, offset))
}

/// Typed buffers that a file is read into (feature `safetensors`): an owned ndarray
/// field keeps them as they are.
#[cfg(feature = "safetensors")]
pub(crate) mod typed {
    use crate::dtype::Element;

    /// The bytes as `bool`s, in the same allocation, if every one is 0 or 1; else the index
    /// and value of the first that is not.
    pub(crate) fn into_bools(bytes: Vec<u8>) -> core::result::Result<Vec<bool>, (usize, u8)> {
        if let Some(index) = bytes.iter().position(|&b| b > 1) {
            return Err((index, bytes[index]));
        }
        let mut bytes = core::mem::ManuallyDrop::new(bytes);
        let (ptr, len, capacity) = (bytes.as_mut_ptr(), bytes.len(), bytes.capacity());
        // SAFETY:
        // - the allocation was made by the global allocator for `capacity` `u8`s, which is
        //   the layout of `capacity` `bool`s (same size and alignment);
        // - its `len` values are initialised, each 0 or 1 (checked above): valid `bool`s;
        // - the vector of bytes is never used or dropped again (`ManuallyDrop`).
        Ok(unsafe { Vec::from_raw_parts(ptr.cast::<bool>(), len, capacity) })
    }

    /// The bytes of elements whose every bit pattern is valid (every [`Element`] but
    /// `bool`), writable: for reading a file into them. `None` for `bool`.
    pub(crate) fn element_bytes_mut<A: Element>(elements: &mut [A]) -> Option<&mut [u8]> {
        if A::CHECK_BYTES {
            return None;
        }
        // SAFETY:
        // - the bytes of `elements`, `size_of_val` of them, initialised, through its unique
        //   borrow;
        // - `A` is not `bool`, so every bit pattern is a valid `A` (`Element`'s contract):
        //   any byte written keeps every element valid; `u8` has alignment 1.
        Some(unsafe {
            core::slice::from_raw_parts_mut(elements.as_mut_ptr().cast(), size_of_val(elements))
        })
    }
}
