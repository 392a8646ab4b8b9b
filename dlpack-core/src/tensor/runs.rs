//! A tensor's bytes in C (row-major) order, whatever its layout and element type: the
//! contiguous runs of memory that hold them, for copies and writers that need no Rust
//! element type (float8, float6, float4, or any type this crate has no `Element` for).

use core::marker::PhantomData;

use crate::error::{Error, Result};

use super::ManagedTensor;
#[cfg(any(feature = "pyo3", feature = "burn", feature = "dlpark"))]
use super::buffers::AlignedBytes;
use super::span::Measured;

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
        let (
            Measured {
                elements,
                bytes,
                delta,
            },
            size,
            packed,
        ) = self.measure(&mut dim, &mut steps, true)?;
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

/// Copies, for the bridges that hand a tensor on as one buffer (Python's `copy=True`, burn,
/// read-only memory of Rust's handed to Python or dlpark).
#[cfg(any(feature = "pyo3", feature = "burn", feature = "dlpark"))]
impl ManagedTensor {
    /// A copy of the tensor's bytes in C order ([`c_order_runs`](Self::c_order_runs))
    /// in a buffer of its own, aligned to 64 bytes.
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

    /// A copy of a CPU-accessible tensor as a tensor of its own: its bytes in C order
    /// ([`copy_c_order`](Self::copy_c_order)), the same dtype and shape, on the CPU,
    /// writable and exclusive, flagged `IS_COPIED` when `copied` says so (sub-byte
    /// elements stay as they were: packed, or one per byte). The elements are bit
    /// copies: a `bool` tensor whose bytes a consumer may have written is checked by its
    /// caller first.
    #[cfg(any(feature = "pyo3", feature = "dlpark"))]
    pub(crate) fn copy_as_bytes(&self, copied: bool) -> Result<ManagedTensor> {
        use crate::ffi::{
            DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
        };
        let bytes = self.copy_c_order()?;
        let mut flags = self.flags() & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
        if copied {
            flags |= DLPACK_FLAG_BITMASK_IS_COPIED;
        }
        // SAFETY:
        // - the buffer holds the tensor's elements in C order (`ceil(elements * bits /
        //   8)` bytes, packed below a byte, or one byte each when flagged padded, as the
        //   copy is), 64-byte aligned, kept alive and unmoved by the owner (heap
        //   memory); the shape is the tensor's and the strides C-contiguous (NULL);
        // - nobody else reaches the copy: exclusive and writable (no `READ_ONLY` flag);
        // - the elements are bit copies of the tensor's, of the same dtype (`bool` bytes
        //   as the caller vouches for them).
        unsafe {
            ManagedTensor::from_owner(
                bytes,
                |bytes| bytes.as_mut_ptr().cast(),
                self.shape(),
                None,
                self.dtype(),
                crate::device::Device::CPU,
                flags,
            )
        }
    }
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

    /// The tensor's bytes in C order, from its runs (and, where it is built, the same
    /// from `copy_c_order`).
    fn copied(tensor: &ManagedTensor) -> Vec<u8> {
        let bytes: Vec<u8> = tensor.c_order_runs().unwrap().flatten().copied().collect();
        assert_eq!(bytes.len(), tensor.c_order_len().unwrap());
        #[cfg(any(feature = "pyo3", feature = "burn"))]
        assert_eq!(tensor.copy_c_order().unwrap().as_bytes(), &bytes[..]);
        bytes
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
