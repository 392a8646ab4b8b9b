//! Tensors over users' own containers: the safe [`ManagedTensor::from_buffer`] for
//! owners of a slice of elements, and the `unsafe` [`ManagedTensor::from_owner`] for
//! any memory an owner keeps alive.

use core::ffi::c_void;

use crate::device::Device;
use crate::dtype::{DataType, Element};
use crate::error::{Error, Result};
use crate::ffi::DLManagedTensorVersioned;
use crate::layout;

use super::{Desc, ManagedTensor, build};

impl ManagedTensor {
    /// Makes a tensor over a buffer of elements that `owner` owns, without copying: the
    /// owner moves into the tensor's single allocation and is dropped by its deleter.
    ///
    /// Element `[0, 0, ...]` is `buffer[offset]`; element `index` is at
    /// `offset + sum(index[i] * strides[i])`, strides in elements and possibly negative.
    /// Every reachable element must lie inside the buffer, or this is an
    /// [`Error::OutOfBuffer`]. The tensor is on the CPU, writable, flags 0.
    ///
    /// The owner comes back with [`into_owner`](Self::into_owner); a `Vec<A>` in
    /// standard layout also comes back as an `Array` from `Array::from_dlpack`, without
    /// a copy (feature `ndarray`).
    ///
    /// ```
    /// use dlpack_core::ManagedTensor;
    ///
    /// // A 2 x 3 image stored column by column.
    /// let pixels: Vec<u8> = vec![1, 4, 2, 5, 3, 6];
    /// let t = ManagedTensor::from_buffer(pixels, 0, &[2, 3], &[1, 2])?;
    /// assert_eq!(t.shape(), &[2, 3]);
    /// assert_eq!(t.strides(), Some(&[1, 2][..]));
    /// # Ok::<(), dlpack_core::Error>(())
    /// ```
    pub fn from_buffer<A, O>(
        owner: O,
        offset: usize,
        shape: &[usize],
        strides: &[isize],
    ) -> Result<Self>
    where
        A: Element,
        O: AsMut<[A]> + Send + 'static,
    {
        Self::from_buffer_with_flags(owner, offset, shape, strides, 0)
    }

    pub(crate) fn from_buffer_with_flags<A, O>(
        mut owner: O,
        offset: usize,
        shape: &[usize],
        strides: &[isize],
        flags: u64,
    ) -> Result<Self>
    where
        A: Element,
        O: AsMut<[A]> + Send + 'static,
    {
        let len = owner.as_mut().len();
        layout::check_in_buffer(shape, strides, offset, len)?;
        let describe = move |owner: &mut O, shape_out: &mut [i64], strides_out: &mut [i64]| {
            // Check again at the owner's final address, in case `as_mut` is not stable
            // across calls (it is for `Vec`, `Box<[A]>` and arrays).
            let buf = owner.as_mut();
            if buf.len() != len {
                return Err(Error::BufferResized {
                    before: len,
                    after: buf.len(),
                });
            }
            layout::write_native(shape, strides, shape_out, strides_out);
            Ok(Desc {
                data: buf.as_mut_ptr().wrapping_add(offset).cast(),
                dtype: A::DTYPE,
                device: Device::CPU,
                byte_offset: 0,
                flags,
            })
        };
        // SAFETY:
        // - `check_in_buffer` proved that every element reachable from `buffer[offset]`
        //   lies inside a buffer of `len` elements, and `describe` checks the buffer
        //   still has that length at the owner's final address; the owner keeps it
        //   alive and unmoved until it is dropped (its heap data, or inline data that
        //   now lives inside our allocation, which does not move);
        // - the `&mut [A]` from `as_mut` is exclusive, so nobody else accesses it, and it
        //   is writable; `A: Element` makes the dtype describe the memory.
        unsafe { build::<DLManagedTensorVersioned, O>(owner, shape.len(), describe) }
    }

    /// Makes a tensor over any memory kept alive by `owner`: the owner moves into the
    /// tensor's single allocation and its deleter drops it.
    ///
    /// `data` is called once, with the owner at its final address, and returns the
    /// address of element `[0, 0, ...]`. `strides` of `None` means C-contiguous (the
    /// header then carries explicit C-contiguous strides, as DLPack 1.2+ requires).
    ///
    /// # Errors
    ///
    /// [`Error::StridesLength`] when `strides` and `shape` differ in length,
    /// [`Error::TooManyDimensions`] when the rank does not fit `i32`,
    /// [`Error::AllocationFailed`] when the header cannot be allocated. The owner is
    /// dropped then.
    ///
    /// # Safety
    ///
    /// - the pointer returned by `data` addresses memory on `device` holding elements of
    ///   `dtype` at every position reachable through `shape` and `strides`, and it stays
    ///   valid for reads for as long as `owner` lives without being moved or touched;
    /// - unless `flags` contains `READ_ONLY`, that memory is also valid for writes, and
    ///   nobody else reads or writes it while the tensor lives;
    /// - with `READ_ONLY`, nobody writes it while the tensor lives;
    /// - if `dtype` is `bool`, every byte holds 0 or 1 (this is checked on import too).
    pub unsafe fn from_owner<O: Send + 'static>(
        owner: O,
        data: impl FnOnce(&mut O) -> *mut c_void,
        shape: &[i64],
        strides: Option<&[i64]>,
        dtype: DataType,
        device: Device,
        flags: u64,
    ) -> Result<Self> {
        if let Some(strides) = strides {
            if strides.len() != shape.len() {
                return Err(Error::StridesLength {
                    ndim: shape.len(),
                    strides: strides.len(),
                });
            }
        }
        let describe = |owner: &mut O, shape_out: &mut [i64], strides_out: &mut [i64]| {
            layout::copy_into(shape, strides, shape_out, strides_out);
            Ok(Desc {
                data: data(owner),
                dtype,
                device,
                byte_offset: 0,
                flags,
            })
        };
        // SAFETY: the caller guarantees the data requirements for as long as the owner
        // lives; the shape and strides written are the caller's (C-contiguous ones
        // when none were given).
        unsafe { build::<DLManagedTensorVersioned, O>(owner, shape.len(), describe) }
    }
}
