//! Buffers this crate allocates for tensor bytes: [`AlignedBytes`], the home of a copy
//! whose element type Rust may not have, and (feature `safetensors`) typed buffers that
//! a file is read into, which an owned ndarray field then keeps.

use crate::error::{Error, Result};

/// Bytes in a zeroed buffer aligned to 16 bytes (every DLPack element type's alignment
/// at most): the home of a copy whose element type Rust may not have.
pub(crate) struct AlignedBytes {
    words: Vec<Block>,
    len: usize,
}

/// Sixteen bytes, aligned to 16 on every target (`u128`'s alignment varies).
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Block([u8; 16]);

impl AlignedBytes {
    /// `len` zero bytes; [`Error::AllocationFailed`] when they cannot be allocated.
    pub(crate) fn zeroed(len: usize) -> Result<Self> {
        // SAFETY: zero bytes are a valid `Block`.
        let words = unsafe { zeroed_vec::<Block>(len.div_ceil(16)) }
            .map_err(|_| Error::AllocationFailed { bytes: len })?;
        Ok(Self { words, len })
    }

    /// The bytes (for the bridges that hand a copy on as one buffer).
    #[cfg(any(feature = "pyo3", feature = "burn"))]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY:
        // - the vector holds at least `len` initialised bytes (`len.div_ceil(16)`
        //   zero-initialised blocks of 16), borrowed with `self`;
        // - `u8` accepts every byte and has alignment 1.
        unsafe { core::slice::from_raw_parts(self.words.as_ptr().cast(), self.len) }
    }

    /// The bytes, writable.
    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY:
        // - the vector holds at least `len` initialised bytes (`len.div_ceil(16)`
        //   zero-initialised blocks of 16), borrowed uniquely with `self`;
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

/// Typed buffers that a file is read into (feature `safetensors`): an owned ndarray
/// field keeps them as they are.
#[cfg(feature = "safetensors")]
pub(crate) mod typed {
    use crate::dtype::Element;
    use crate::error::Result;

    use super::zeroed_vec;

    /// `len` elements of `A`, every byte zero (`0`, `0.0`, `false`), from the allocator's
    /// zeroed memory, or [`Error::AllocationFailed`].
    pub(crate) fn zeroed_elements<A: Element>(len: usize) -> Result<Vec<A>> {
        // SAFETY: all-zero bytes are a valid value of every element type (`Element`'s
        // contract: every bit pattern, or for `bool` the bytes 0 and 1).
        unsafe { zeroed_vec::<A>(len) }
    }

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
