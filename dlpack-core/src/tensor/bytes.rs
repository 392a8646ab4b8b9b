//! A tensor's bytes in C (row-major) order, whatever its layout and element type: the
//! contiguous runs of memory that hold them, for copies and writers that need no Rust
//! element type (float8, float6, float4, or any type this crate has no `Element` for).

use core::marker::PhantomData;

use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::ffi::DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
use crate::layout;

use super::ManagedTensor;

/// Where a tensor's elements lie in memory, as [`ManagedTensor::byte_span`] measures
/// it after checking that every element can be addressed there. Addresses are plain
/// numbers (of the tensor's device): nothing here reads or keeps the memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ByteSpan {
    /// The number of elements.
    pub elements: usize,
    /// The address of the lowest byte any element occupies (with negative strides,
    /// below the first element); the first element's address when the tensor is empty.
    pub start: usize,
    /// The address of the first element (index `[0, ...]`): `data + byte_offset`.
    pub first: usize,
    /// Bytes from `start` to one past the highest byte any element occupies: every
    /// element lies in `start..start + len`, which is inside the address space and
    /// within `isize::MAX` bytes of the data pointer (on either side of it). 0 when the
    /// tensor is empty.
    pub len: usize,
}

impl ByteSpan {
    /// Checks that the first element's address is a multiple of `align` (a power of
    /// two), as a consumer that reads elements of that alignment needs; an empty tensor
    /// passes, since none of its addresses is ever read. Every element of a tensor with
    /// whole-byte elements is aligned when the first one is and each stride is a whole
    /// number of elements, which DLPack's strides always are.
    ///
    /// # Errors
    ///
    /// [`Error::Misaligned`] with the address and `align`.
    pub fn check_aligned(&self, align: usize) -> Result<()> {
        if self.elements == 0 || align <= 1 || self.first % align == 0 {
            return Ok(());
        }
        Err(Error::Misaligned {
            what: "data",
            address: self.first,
            align,
        })
    }
}

/// What [`ManagedTensor::measure`] found.
struct Measured {
    /// The number of elements.
    elements: usize,
    /// Bytes per step of the plan (1 for packed sub-byte elements).
    size: usize,
    /// Sub-byte elements packed in one C-contiguous run, `bytes.span` bytes long.
    packed: bool,
    /// The plan in bytes: `low` and `span` count bytes (fitting `isize`), `count`
    /// elements (bytes when packed).
    bytes: layout::Plan,
    /// The byte distance from `data` to the lowest byte.
    delta: isize,
}

/// The runs of bytes that hold a tensor's elements in C order (see
/// [`ManagedTensor::c_order_runs`]): concatenated, they are the tensor as a C-contiguous
/// array. Each run is a slice of the tensor's own memory.
pub(crate) struct Runs<'a> {
    /// The lowest byte of the tensor.
    lowest: *const u8,
    /// Bytes per run: the innermost axes that are contiguous in memory, merged.
    run: usize,
    /// Extents of the outer axes (those not merged into a run).
    outer: Vec<usize>,
    /// Byte steps of the outer axes, signed as the producer gave them.
    steps: Vec<isize>,
    /// The current index along the outer axes.
    index: Vec<usize>,
    /// Bytes from `lowest` to the current run.
    offset: isize,
    /// Runs not yet returned.
    left: usize,
    _tensor: PhantomData<&'a ManagedTensor>,
}

// SAFETY: the runs only read memory that `&ManagedTensor` may read, which is `Sync`.
unsafe impl Send for Runs<'_> {}

impl<'a> Iterator for Runs<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let start = self.lowest.wrapping_offset(self.offset);
        // Advance the outer index, the last axis fastest.
        for axis in (0..self.outer.len()).rev() {
            if self.index[axis] + 1 < self.outer[axis] {
                self.index[axis] += 1;
                self.offset += self.steps[axis];
                break;
            }
            self.offset -= self.steps[axis] * (self.outer[axis] - 1) as isize;
            self.index[axis] = 0;
        }
        // SAFETY:
        // - `start` is the address of an element of the tensor followed by `run - 1`
        //   bytes of the same contiguous run: all inside the span that `plan` measured
        //   from the lowest byte, which `check_address` proved non-null and inside the
        //   address space, and which the producer guarantees is one readable,
        //   initialised allocation until the deleter runs (the `from_raw` contract), so
        //   for `'a`, the borrow of the tensor;
        // - nobody writes it meanwhile: `&'a ManagedTensor` excludes mutable views, the
        //   `from_raw` contract other writers of an exclusive tensor, and for a shared
        //   one the rule the crate documents for its users ("Import safety": the
        //   producer's memory is not written while a view of it lives);
        // - `u8` accepts every initialised byte, and its alignment is 1.
        Some(unsafe { core::slice::from_raw_parts(start, self.run) })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Runs<'_> {}

impl ManagedTensor {
    /// Whether sub-byte elements are stored one per byte (`IS_SUBBYTE_TYPE_PADDED`).
    pub(crate) fn is_padded(&self) -> bool {
        self.flags() & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED != 0
    }

    /// The memory a tensor's elements occupy, checked as every reader needs it (see
    /// [`ByteSpan`]); `dim` and `steps` receive the extents and non-negative element
    /// steps of [`layout::plan`]. With `views`, the element count must also fit `isize`
    /// in bytes, as ndarray's views and this crate's copies need.
    fn measure(&self, dim: &mut [usize], steps: &mut [usize], views: bool) -> Result<Measured> {
        let dtype = self.dtype();
        let bits = usize::from(dtype.bits()) * usize::from(dtype.lanes());
        if bits == 0 {
            return Err(Error::UnsupportedDtype { dtype });
        }
        let (size, packed) = if bits % 8 == 0 {
            (bits / 8, false)
        } else if bits < 8 && self.is_padded() {
            // One element per byte (DLPack 1.1's `IS_SUBBYTE_TYPE_PADDED`).
            (1, false)
        } else {
            // Planned as one-byte elements: extents, overflow and C order are checked
            // the same way, and the packed size is at most that.
            (1, true)
        };
        let planned = if views { size } else { 1 };
        let plan = layout::plan(self.shape(), self.strides(), planned, dim, steps)?;
        if plan.count > 0 && self.data().is_null() {
            return Err(Error::NullData {
                elements: plan.count,
            });
        }
        let too_big = || Error::Overflow { what: "byte span" };
        let in_bytes = |n: usize, size: usize| {
            n.checked_mul(size)
                .filter(|&b| isize::try_from(b).is_ok())
                .ok_or_else(too_big)
        };
        let bytes = if packed {
            let contiguous = self.strides().is_none_or(|given| {
                let mut expected = vec![0i64; given.len()];
                layout::c_strides(self.shape(), &mut expected);
                (0..given.len()).all(|axis| dim[axis] <= 1 || given[axis] == expected[axis])
            });
            if !contiguous {
                return Err(Error::PackedLayout { dtype });
            }
            let packed = plan
                .count
                .checked_mul(bits)
                .map(|b| b.div_ceil(8))
                .filter(|&b| isize::try_from(b).is_ok())
                .ok_or_else(too_big)?;
            layout::Plan {
                count: packed,
                low: 0,
                span: packed,
            }
        } else {
            layout::Plan {
                count: plan.count,
                low: in_bytes(plan.low, size)?,
                span: in_bytes(plan.span, size)?,
            }
        };
        let delta = layout::check_address(self.data() as usize, self.byte_offset(), &bytes, 1, 1)?;
        Ok(Measured {
            elements: plan.count,
            size,
            packed,
            bytes,
            delta,
        })
    }

    /// Where the tensor's elements lie in memory, after checking every element can be
    /// addressed there: the extents (none negative), the element count and the byte
    /// span (they fit `isize`), the data pointer (not NULL unless the tensor is empty)
    /// and the whole span (inside the address space, and within `isize::MAX` bytes of
    /// the data pointer, as the distance from an allocation's start must be). The device is not checked: the
    /// addresses are the device's.
    ///
    /// This is the check a bridge to another framework makes before it hands the
    /// memory on; add the framework's own rules (its alignment with
    /// [`ByteSpan::check_aligned`], the strides it accepts) and, for `bool` tensors on
    /// the CPU, the values (`as_array::<bool, _>`).
    ///
    /// Elements whose size is not a whole number of bytes (float6, float4) span
    /// `ceil(elements * bits / 8)` bytes and must be C-contiguous (packed, as DLPack
    /// describes them), unless flagged `IS_SUBBYTE_TYPE_PADDED` (one byte each).
    ///
    /// ```
    /// use dlpack_core::ManagedTensor;
    ///
    /// // Every other element of 3, as `a[::-2]` would be: the span runs from the
    /// // lowest element to the highest, whatever the strides' signs.
    /// let t = ManagedTensor::from_buffer(vec![1.0f32, 2.0, 3.0, 4.0, 5.0], 4, &[3], &[-2])?;
    /// let span = t.byte_span()?;
    /// assert_eq!((span.elements, span.len), (3, 20));
    /// assert_eq!(span.first, t.data_ptr() as usize);
    /// assert_eq!(span.start, span.first - 16);
    /// span.check_aligned(4)?;
    /// # Ok::<(), dlpack_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedDtype`] for a type of no bits, [`Error::PackedLayout`] for
    /// packed sub-byte elements that are not C-contiguous, [`Error::NegativeExtent`],
    /// [`Error::Overflow`], [`Error::NullData`].
    pub fn byte_span(&self) -> Result<ByteSpan> {
        let ndim = self.ndim();
        let (mut dim, mut steps) = (vec![0usize; ndim], vec![0usize; ndim]);
        let measured = self.measure(&mut dim, &mut steps, false)?;
        let data = self.data() as usize;
        let first = data.wrapping_add(self.byte_offset() as usize);
        if measured.elements == 0 {
            return Ok(ByteSpan {
                elements: 0,
                start: first,
                first,
                len: 0,
            });
        }
        // `check_address` proved the span lies inside the address space.
        let start = data.wrapping_add_signed(measured.delta);
        let len = measured.bytes.span;
        // Every byte within `isize::MAX` of `data`, whichever side: a consumer that
        // takes `data` as its allocation's start (libtorch does, with `byte_offset` as
        // the storage offset) must be able to reach the last byte from it.
        let lowest = start.min(data);
        let highest = (start + len).max(data);
        if highest - lowest > isize::MAX as usize {
            return Err(Error::Overflow {
                what: "byte offset",
            });
        }
        Ok(ByteSpan {
            elements: measured.elements,
            start,
            first,
            len,
        })
    }

    /// The tensor's bytes in C order, as runs of its own memory (one run when the tensor
    /// is C-contiguous), after checking the device (CPU-accessible) and the layout (as
    /// [`byte_span`](Self::byte_span) does).
    ///
    /// Elements whose size is not a whole number of bytes (float6, float4, packed
    /// booleans) are read only from a C-contiguous tensor, packed as DLPack 1.1 and
    /// later describe them: one run of `ceil(elements * bits / 8)` bytes; unless the
    /// tensor is flagged `IS_SUBBYTE_TYPE_PADDED`, which makes each element one byte
    /// (any layout then).
    pub(crate) fn c_order_runs(&self) -> Result<Runs<'_>> {
        let device = self.device();
        if !device.is_cpu_accessible() {
            return Err(Error::UnsupportedDevice { device });
        }
        let ndim = self.ndim();
        let (mut dim, mut steps) = (vec![0usize; ndim], vec![0usize; ndim]);
        let Measured {
            elements,
            size,
            packed,
            bytes,
            delta,
        } = self.measure(&mut dim, &mut steps, true)?;
        let lowest = self.data().cast_const().cast::<u8>().wrapping_offset(delta);
        if packed {
            return Ok(Runs {
                lowest,
                run: bytes.span,
                offset: 0,
                outer: Vec::new(),
                steps: Vec::new(),
                index: Vec::new(),
                left: usize::from(bytes.span > 0),
                _tensor: PhantomData,
            });
        }
        // Signed byte steps (bounded by the span, which fits `isize`).
        let given = self.strides();
        let signed: Vec<isize> = (0..ndim)
            .map(|axis| {
                let step = (steps[axis] * size) as isize;
                if given.is_some_and(|s| s[axis] < 0) {
                    -step
                } else {
                    step
                }
            })
            .collect();
        // The innermost axes that continue each other in memory make one run.
        let mut run = size;
        let mut outer = ndim;
        while outer > 0 && (dim[outer - 1] == 1 || signed[outer - 1] == run as isize) {
            run *= dim[outer - 1];
            outer -= 1;
        }
        dim.truncate(outer);
        let mut signed = signed;
        signed.truncate(outer);
        let left = if elements == 0 {
            0
        } else {
            dim.iter().product()
        };
        Ok(Runs {
            lowest,
            run,
            // Where the first element lies above the lowest byte.
            offset: bytes.low as isize,
            index: vec![0; outer],
            outer: dim,
            steps: signed,
            left,
            _tensor: PhantomData,
        })
    }

    /// The number of bytes of the tensor in C order (what [`c_order_runs`] yields in
    /// all): `ceil(elements * bits * lanes / 8)`, or one byte per element when sub-byte
    /// elements are padded.
    ///
    /// [`c_order_runs`]: Self::c_order_runs
    pub(crate) fn c_order_len(&self) -> Result<usize> {
        let dtype = self.dtype();
        let bits = usize::from(dtype.bits()) * usize::from(dtype.lanes());
        let bits = if bits < 8 && self.is_padded() {
            8
        } else {
            bits
        };
        self.num_elements()?
            .checked_mul(bits)
            .map(|b| b.div_ceil(8))
            .filter(|&b| isize::try_from(b).is_ok())
            .ok_or(Error::Overflow { what: "byte span" })
    }
}

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

    /// The bytes.
    #[cfg_attr(not(any(feature = "burn", feature = "pyo3")), allow(dead_code))]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY:
        // - the vector holds at least `len` initialised bytes (`len.div_ceil(16)`
        //   zero-initialised blocks of 16), borrowed with `self`;
        // - `u8` accepts every byte and has alignment 1.
        unsafe { core::slice::from_raw_parts(self.words.as_ptr().cast(), self.len) }
    }

    /// The bytes, writable.
    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_bytes`, through the unique borrow of `self`; a block accepts
        // every byte, so any byte written keeps it valid.
        unsafe { core::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.len) }
    }

    /// The address of the first byte, for a tensor over the buffer (stable while the
    /// buffer lives: heap memory).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.words.as_mut_ptr().cast()
    }
}

impl ManagedTensor {
    #[cfg_attr(not(any(feature = "pyo3", feature = "burn")), allow(dead_code))]
    /// A copy of the tensor's bytes in C order ([`c_order_runs`](Self::c_order_runs))
    /// in a buffer of its own, aligned to 16 bytes.
    pub(crate) fn copy_c_order(&self) -> Result<AlignedBytes> {
        let runs = self.c_order_runs()?;
        let mut copy = AlignedBytes::zeroed(self.c_order_len()?)?;
        let mut at = 0;
        for run in runs {
            copy.as_bytes_mut()[at..at + run.len()].copy_from_slice(run);
            at += run.len();
        }
        Ok(copy)
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

/// `len` elements of `A`, every byte zero (`0`, `0.0`, `false`), from the allocator's
/// zeroed memory, or [`Error::AllocationFailed`].
#[cfg_attr(not(feature = "safetensors"), allow(dead_code))]
pub(crate) fn zeroed_elements<A: Element>(len: usize) -> Result<Vec<A>> {
    // SAFETY: all-zero bytes are a valid value of every element type (`Element`'s
    // contract: every bit pattern, or for `bool` the bytes 0 and 1).
    unsafe { zeroed_vec::<A>(len) }
}

/// The bytes as `bool`s, in the same allocation, if every one is 0 or 1; else the index
/// and value of the first that is not.
#[cfg_attr(not(feature = "safetensors"), allow(dead_code))]
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
#[cfg_attr(not(feature = "safetensors"), allow(dead_code))]
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

#[cfg(test)]
mod tests {
    use crate::device::Device;
    use crate::dtype::DataType;
    use crate::ffi::DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
    use crate::tensor::ManagedTensor;

    fn float4(bytes: Vec<u8>, shape: &[i64], strides: Option<&[i64]>, flags: u64) -> ManagedTensor {
        // SAFETY: the vector holds the described elements (packed or one per byte, as
        // `flags` says) at every position the shape and strides reach; it is the owner.
        unsafe {
            ManagedTensor::from_owner(
                bytes,
                |b| b.as_mut_ptr().cast(),
                shape,
                strides,
                DataType::F4_E2M1FN,
                Device::CPU,
                flags,
            )
        }
        .unwrap()
    }

    fn copied(tensor: &ManagedTensor) -> Vec<u8> {
        tensor.copy_c_order().unwrap().as_bytes().to_vec()
    }

    #[test]
    fn packed_sub_byte_tensors_are_one_run() {
        let t = float4(vec![0x21, 0x43], &[4], None, 0);
        assert_eq!(t.c_order_len().unwrap(), 2);
        assert_eq!(copied(&t), [0x21, 0x43]);
        // Packed elements cannot be strided.
        let t = float4(vec![0x21, 0x43], &[2], Some(&[2]), 0);
        assert!(t.c_order_runs().is_err());
    }

    #[test]
    fn padded_sub_byte_tensors_are_one_byte_per_element_in_any_layout() {
        let padded = DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
        let t = float4(vec![1, 2, 3, 4], &[4], None, padded);
        assert_eq!(t.c_order_len().unwrap(), 4);
        assert_eq!(copied(&t), [1, 2, 3, 4]);
        let t = float4(vec![1, 2, 3, 4], &[2, 2], Some(&[1, 2]), padded);
        assert_eq!(copied(&t), [1, 3, 2, 4]);
    }

    #[test]
    fn runs_follow_c_order_for_any_layout() {
        let values: Vec<u16> = (0..12).collect();
        // Transposed, reversed, broadcast.
        for (offset, shape, strides, expected) in [
            (
                0,
                vec![4, 3],
                vec![1, 4],
                vec![0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11],
            ),
            (11, vec![3], vec![-5], vec![11, 6, 1]),
            (2, vec![2, 3], vec![0, 1], vec![2, 3, 4, 2, 3, 4]),
        ] {
            let t = ManagedTensor::from_buffer(values.clone(), offset, &shape, &strides).unwrap();
            let bytes = copied(&t);
            let got: Vec<u16> = bytes
                .chunks(2)
                .map(|c| u16::from_ne_bytes([c[0], c[1]]))
                .collect();
            assert_eq!(got, expected, "{shape:?} {strides:?}");
        }
    }
}
