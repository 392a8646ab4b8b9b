//! Checked, borrowed views: `ManagedTensor::as_array` and `as_array_mut`.

use ndarray::{
    ArrayBase, ArrayView, ArrayViewMut, Axis, Dimension, RawArrayView, RawArrayViewMut,
    ShapeBuilder,
};

use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::layout::{self, Positions};
use crate::tensor::ManagedTensor;

impl ManagedTensor {
    /// A read-only ndarray view of the tensor, after checking everything a foreign
    /// producer could get wrong.
    ///
    /// Checks, in order: the device is CPU-accessible (`kDLCPU`, `kDLCUDAHost`,
    /// `kDLROCMHost`, `kDLCUDAManaged`); the dtype is `A`'s with one lane; the rank is
    /// `D`'s (any for `IxDyn`); no extent is negative; element count, element span and
    /// byte span fit `isize`; data is non-NULL unless the tensor is empty (NULL is fine
    /// then); `data + byte_offset` is aligned for `A`. NULL strides mean C-contiguous,
    /// strides of axes with extent 0 or 1 are ignored, and negative strides are
    /// supported (the view is built at the lowest address and the axis inverted).
    ///
    /// For `A = bool` every byte the tensor holds is read once to check it is 0 or 1:
    /// any other byte in a `bool` is undefined behaviour in Rust. That makes a `bool`
    /// view O(bytes between its lowest and highest element), whatever its shape says (a
    /// broadcast axis counts once, however long; overlapping windows cost their span,
    /// plus a bitset of span / 8 bytes while the check runs); every other type is
    /// O(ndim).
    ///
    /// ```
    /// use dlpack_core::ToDLPack;
    /// use ndarray::{array, Ix2};
    ///
    /// let t = array![[1i64, 2, 3], [4, 5, 6]].to_dlpack()?;
    /// let view = t.as_array::<i64, Ix2>()?;
    /// assert_eq!(view[[1, 2]], 6);
    /// assert!(t.as_array::<f32, Ix2>().is_err()); // wrong dtype
    /// # Ok::<(), dlpack_core::Error>(())
    /// ```
    pub fn as_array<A: Element, D: Dimension + 'static>(&self) -> Result<ArrayView<'_, A, D>> {
        let raw = self.validate::<A, D>(false)?.into_raw_view();
        // SAFETY:
        // - `validate` checked the pointer is non-null and aligned and that every element
        //   lies in the span the producer described, which the `from_raw` contract makes
        //   readable, initialised memory of type `A` (bools were checked byte by byte);
        // - the memory lives until the deleter runs, after `self`, hence after `'_`;
        // - nobody writes it meanwhile: no `&mut self` can coexist with this borrow, the
        //   `from_raw` contract rules out other writers of an exclusive tensor, and for
        //   a shared one the crate documents the rule its users keep ("Import safety":
        //   the producer's memory is not written while a view of it lives).
        Ok(unsafe { raw.deref_into_view() })
    }

    /// A mutable ndarray view: the checks of [`as_array`](Self::as_array), and also that
    /// the tensor is [exclusive](Self::is_exclusive) (no other live handle reaches the
    /// data: see the [import safety guide](crate::guide::import_safety)), not
    /// `READ_ONLY`, and that no two indices share an element.
    pub fn as_array_mut<A: Element, D: Dimension + 'static>(
        &mut self,
    ) -> Result<ArrayViewMut<'_, A, D>> {
        let raw = self.validate::<A, D>(true)?.into_raw_view_mut();
        // SAFETY:
        // - as in `as_array`, and the memory is writable (not `READ_ONLY`, `from_raw`
        //   contract) with no two indices aliasing (`check_no_overlap`);
        // - `&mut self` makes this the only view borrowed from the tensor, and the tensor
        //   is exclusive (`validate` checked): the `from_raw` contract, or the caller of
        //   `assume_exclusive`, rules out other readers and writers meanwhile.
        Ok(unsafe { raw.deref_into_view_mut() })
    }

    /// Validates the tensor as an array of `A` with dimension `D` (and, if `mutable`, as
    /// writable without aliasing).
    #[inline(always)]
    pub(super) fn validate<A: Element, D: Dimension>(
        &self,
        mutable: bool,
    ) -> Result<Validated<'_, A, D>> {
        let device = self.device();
        if !device.is_cpu_accessible() {
            return Err(Error::UnsupportedDevice { device });
        }
        let dtype = self.dtype();
        if dtype.lanes() != 1 {
            return Err(Error::UnsupportedLanes { dtype });
        }
        if dtype != A::DTYPE {
            return Err(Error::DtypeMismatch {
                expected: A::DTYPE,
                found: dtype,
            });
        }
        let ndim = self.ndim();
        if let Some(expected) = D::NDIM {
            if expected != ndim {
                return Err(Error::NdimMismatch {
                    expected,
                    found: ndim,
                });
            }
        }
        if mutable && self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        if mutable && !self.is_exclusive() {
            return Err(Error::NotExclusive);
        }
        let mut dim = D::zeros(ndim);
        let mut strides = D::zeros(ndim);
        let size = size_of::<A>();
        let plan = layout::plan(
            self.shape(),
            self.strides(),
            size,
            dim.slice_mut(),
            strides.slice_mut(),
        )?;
        if mutable {
            layout::check_no_overlap(dim.slice(), strides.slice())?;
        }
        let delta = layout::check_address(
            self.data() as usize,
            self.byte_offset(),
            &plan,
            size,
            align_of::<A>(),
        )?;
        let ptr: *mut A = self.data().wrapping_byte_offset(delta).cast();
        let validated = Validated {
            ptr,
            dim,
            strides,
            given: self.strides(),
            empty: plan.count == 0,
            span: plan.span,
        };
        if A::CHECK_BYTES && !validated.empty {
            validated.check_bool_bytes()?;
        }
        Ok(validated)
    }
}

/// A tensor that passed `validate`: ndarray's pointer, extents and non-negative strides,
/// and the producer's strides (whose negative entries mark axes to invert).
#[derive(Clone)]
pub(super) struct Validated<'a, A, D> {
    ptr: *mut A,
    dim: D,
    strides: D,
    given: Option<&'a [i64]>,
    empty: bool,
    /// Elements from the lowest to the highest address, plus one (`Plan::span`).
    span: usize,
}

impl<A, D: Dimension> Validated<'_, A, D> {
    /// Checks that every byte of a non-empty tensor of one-byte elements is 0 or 1,
    /// reading each distinct byte once, in O(span) time (see [`Positions`]).
    fn check_bool_bytes(&self) -> Result<()> {
        debug_assert_eq!(size_of::<A>(), 1);
        let base = self.ptr.cast::<u8>().cast_const();
        let mut bad = 0;
        let positions = Positions::new(self.dim.slice(), self.strides.slice());
        let found = positions.find(self.dim.ndim(), self.span, |offset| {
            // SAFETY: `offset` is the element offset, from the lowest address, of an
            // element of the validated tensor: within its span, which `plan` bounded and
            // the producer guarantees is one allocation.
            let element = unsafe { base.add(offset) };
            // SAFETY: the producer guarantees every element is readable and initialised
            // (`from_raw` contract); a `u8` accepts every initialised byte, and
            // alignment 1 always holds.
            let byte = unsafe { element.read() };
            bad = byte;
            byte > 1
        })?;
        let Some(position) = found else {
            return Ok(());
        };
        // The row-major index of that element (axes with a negative stride count from
        // their other end).
        let mut index = 0usize;
        for (axis, (&pos, &extent)) in position.iter().zip(self.dim.slice()).enumerate() {
            let backwards = self.given.is_some_and(|s| s[axis] < 0);
            let i = if backwards { extent - 1 - pos } else { pos };
            index = index * extent + i;
        }
        Err(Error::InvalidBool { index, byte: bad })
    }

    #[inline(always)]
    pub(super) fn into_raw_view(self) -> RawArrayView<A, D> {
        if self.empty {
            // No memory is involved: a view of an empty slice, built safely.
            return match ArrayView::from_shape(self.dim, &[]) {
                Ok(view) => view.raw_view(),
                Err(_) => unreachable!("`plan` checked the extents of the empty tensor"),
            };
        }
        // SAFETY:
        // - the tensor is not empty, so `check_address` proved `ptr` non-null;
        // - every reachable pointer lies within the `plan.span` elements that start at
        //   `ptr`, which the producer guarantees is one allocation;
        // - `plan` proved the byte span and the product of non-zero extents fit `isize`;
        // - strides are non-negative, at most `isize::MAX` (bounded by the span).
        let mut raw =
            unsafe { RawArrayView::from_shape_ptr(self.dim.strides(self.strides), self.ptr) };
        invert_negative(&mut raw, self.given);
        raw
    }

    /// Only for a tensor validated with `mutable = true`.
    pub(super) fn into_raw_view_mut(self) -> RawArrayViewMut<A, D> {
        if self.empty {
            // No memory is involved: a view of an empty slice, built safely.
            return match ArrayViewMut::from_shape(self.dim, &mut []) {
                Ok(mut view) => view.raw_view_mut(),
                Err(_) => unreachable!("`plan` checked the extents of the empty tensor"),
            };
        }
        // SAFETY: as in `into_raw_view`; in addition `check_no_overlap` proved that no
        // element is reachable through two indices, as ndarray's mutable views require.
        let mut raw =
            unsafe { RawArrayViewMut::from_shape_ptr(self.dim.strides(self.strides), self.ptr) };
        invert_negative(&mut raw, self.given);
        raw
    }
}

/// Inverts the axes that the producer stepped along backwards.
fn invert_negative<S: ndarray::RawData, D: Dimension>(
    a: &mut ArrayBase<S, D>,
    given: Option<&[i64]>,
) {
    if let Some(given) = given {
        for (axis, &stride) in given.iter().enumerate() {
            if stride < 0 && a.len_of(Axis(axis)) > 1 {
                a.invert_axis(Axis(axis));
            }
        }
    }
}
