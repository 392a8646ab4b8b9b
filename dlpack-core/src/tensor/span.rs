//! Where a tensor's elements lie in memory: [`ByteSpan`], the layout check every
//! bridge makes before it hands memory on ([`ManagedTensor::byte_span`]), and the
//! measurement the C-order runs start from.

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
pub(super) struct Measured {
    /// The number of elements.
    pub(super) elements: usize,
    /// The plan in bytes: `low` and `span` count bytes (fitting `isize`), `count`
    /// elements (bytes when packed).
    pub(super) bytes: layout::Plan,
    /// The byte distance from `data` to the lowest byte.
    pub(super) delta: isize,
}

impl ManagedTensor {
    /// Whether sub-byte elements are stored one per byte (`IS_SUBBYTE_TYPE_PADDED`).
    pub(crate) fn is_padded(&self) -> bool {
        self.flags() & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED != 0
    }

    /// The memory a tensor's elements occupy, checked as every reader needs it (see
    /// [`ByteSpan`]); `dim` and `steps` receive the extents and non-negative element
    /// steps of [`layout::plan`]. With `views`, the element count must also fit `isize`
    /// in bytes, as ndarray's views and this crate's copies need.
    ///
    /// Also returns the bytes per step of the plan (1 for packed sub-byte elements) and
    /// whether sub-byte elements are packed in one C-contiguous run, `bytes.span` bytes
    /// long: what the C-order runs walk by.
    pub(super) fn measure(
        &self,
        dim: &mut [usize],
        steps: &mut [usize],
        views: bool,
    ) -> Result<(Measured, usize, bool)> {
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
        let measured = Measured {
            elements: plan.count,
            bytes,
            delta,
        };
        Ok((measured, size, packed))
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
        let (measured, ..) = self.measure(&mut dim, &mut steps, false)?;
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
}
