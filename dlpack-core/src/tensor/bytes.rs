//! A tensor's bytes in C (row-major) order, whatever its layout and element type: the
//! contiguous runs of memory that hold them, for copies and writers that need no Rust
//! element type (float8, float6, float4, or any type this crate has no `Element` for).

use core::marker::PhantomData;

use crate::error::{Error, Result};
use crate::layout;

use super::ManagedTensor;

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
        // - nobody writes it meanwhile: `&'a ManagedTensor` excludes mutable views, and
        //   the `from_raw` contract (or the protocol, for a shared tensor) other writers;
        // - `u8` accepts every initialised byte, and its alignment is 1.
        Some(unsafe { core::slice::from_raw_parts(start, self.run) })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Runs<'_> {}

impl ManagedTensor {
    /// The tensor's bytes in C order, as runs of its own memory (one run when the tensor
    /// is C-contiguous), after checking the device (CPU-accessible) and the layout (as
    /// `as_array` does, with the element size of the dtype and no alignment).
    ///
    /// Elements whose size is not a whole number of bytes (float6, float4, packed
    /// booleans) are read only from a C-contiguous tensor, packed as DLPack 1.1 and
    /// later describe them: one run of `ceil(elements * bits / 8)` bytes.
    pub(crate) fn c_order_runs(&self) -> Result<Runs<'_>> {
        let device = self.device();
        if !device.is_cpu_accessible() {
            return Err(Error::UnsupportedDevice { device });
        }
        let dtype = self.dtype();
        let bits = usize::from(dtype.bits()) * usize::from(dtype.lanes());
        if bits == 0 {
            return Err(Error::UnsupportedDtype { dtype });
        }
        let ndim = self.ndim();
        let (mut dim, mut steps) = (vec![0usize; ndim], vec![0usize; ndim]);
        if bits % 8 != 0 {
            return self.packed_run(bits, &mut dim, &mut steps);
        }
        let size = bits / 8;
        let plan = layout::plan(self.shape(), self.strides(), size, &mut dim, &mut steps)?;
        let delta =
            layout::check_address(self.data() as usize, self.byte_offset(), &plan, size, 1)?;
        let lowest = self.data().cast_const().cast::<u8>().wrapping_offset(delta);
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
        let left = if plan.count == 0 {
            0
        } else {
            dim.iter().product()
        };
        Ok(Runs {
            lowest,
            run,
            // Where the first element lies above the lowest byte.
            offset: (plan.low * size) as isize,
            index: vec![0; outer],
            outer: dim,
            steps: signed,
            left,
            _tensor: PhantomData,
        })
    }

    /// The one run of a C-contiguous tensor of `bits`-bit elements (not a whole number
    /// of bytes), packed.
    fn packed_run(&self, bits: usize, dim: &mut [usize], steps: &mut [usize]) -> Result<Runs<'_>> {
        // Planned as one-byte elements: extents, overflow and C order are checked the
        // same way, and the packed size is at most that.
        let plan = layout::plan(self.shape(), self.strides(), 1, dim, steps)?;
        let contiguous = self.strides().is_none_or(|given| {
            let mut expected = vec![0i64; given.len()];
            layout::c_strides(self.shape(), &mut expected);
            (0..given.len()).all(|axis| dim[axis] <= 1 || given[axis] == expected[axis])
        });
        if !contiguous {
            return Err(Error::PackedLayout {
                dtype: self.dtype(),
            });
        }
        let bytes = plan
            .count
            .checked_mul(bits)
            .map(|b| b.div_ceil(8))
            .filter(|&b| isize::try_from(b).is_ok())
            .ok_or(Error::Overflow { what: "byte span" })?;
        let packed = layout::Plan {
            count: bytes,
            low: 0,
            span: bytes,
        };
        let delta = layout::check_address(self.data() as usize, self.byte_offset(), &packed, 1, 1)?;
        Ok(Runs {
            lowest: self.data().cast_const().cast::<u8>().wrapping_offset(delta),
            run: bytes,
            offset: 0,
            outer: Vec::new(),
            steps: Vec::new(),
            index: Vec::new(),
            left: usize::from(bytes > 0),
            _tensor: PhantomData,
        })
    }

    /// The number of bytes of the tensor in C order (what [`c_order_runs`] yields in
    /// all): `ceil(elements * bits * lanes / 8)`.
    ///
    /// [`c_order_runs`]: Self::c_order_runs
    pub(crate) fn c_order_len(&self) -> Result<usize> {
        let dtype = self.dtype();
        let bits = usize::from(dtype.bits()) * usize::from(dtype.lanes());
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
    words: Vec<u128>,
    len: usize,
}

impl AlignedBytes {
    /// `len` zero bytes; [`Error::AllocationFailed`] when they cannot be allocated.
    pub(crate) fn zeroed(len: usize) -> Result<Self> {
        let mut words: Vec<u128> = Vec::new();
        words
            .try_reserve_exact(len.div_ceil(16))
            .map_err(|_| Error::AllocationFailed { bytes: len })?;
        words.resize(len.div_ceil(16), 0);
        Ok(Self { words, len })
    }

    /// The bytes.
    #[cfg_attr(not(feature = "burn"), allow(dead_code))]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY:
        // - the vector holds at least `len` initialised bytes (`len.div_ceil(16)`
        //   zero-initialised `u128`s), borrowed with `self`;
        // - `u8` accepts every byte and has alignment 1.
        unsafe { core::slice::from_raw_parts(self.words.as_ptr().cast(), self.len) }
    }

    /// The bytes, writable.
    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_bytes`, through the unique borrow of `self`; a `u128` accepts
        // every bit pattern, so any byte written keeps the words valid.
        unsafe { core::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.len) }
    }

    /// The address of the first byte, for a tensor over the buffer (stable while the
    /// buffer lives: heap memory).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.words.as_mut_ptr().cast()
    }
}

impl ManagedTensor {
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
