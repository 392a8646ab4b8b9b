//! ndarray interop: exports of every array kind, checked borrowed views, and the owned
//! zero-copy import [`DLPackArray`].
//!
//! | value | export | import |
//! |---|---|---|
//! | `Array<A, D>` | zero-copy move, writable | our own `Array` export comes back without a copy; anything else is copied into standard layout |
//! | `ArcArray<A, D>` | zero-copy; `READ_ONLY` unless it was the only handle (then as `Array`) | as `Array`, then shared |
//! | `CowArray<A, D>` | owned: as `Array`; view: copy | — |
//! | `ArrayView`, `ArrayViewMut`, `&ArrayBase` | copy, flagged `IS_COPIED` | `as_array` / `as_array_mut` borrow |
//! | [`DLPackArray<A, D>`] | the tensor it holds | zero-copy, validated once |
//!
//! Exports keep the array's real layout (C, F, sliced, stepped, negative strides), with
//! `byte_offset` 0 and one heap allocation for header, shape, strides and owner.

use core::ffi::c_void;
use core::fmt;

use ndarray::{
    ArcArray, Array, ArrayBase, ArrayView, ArrayViewMut, Axis, CowArray, Data, Dimension, Ix0, Ix1,
    Ix2, Ix3, Ix4, Ix5, Ix6, IxDyn, RawArrayView, RawArrayViewMut, ShapeBuilder,
};

use crate::batch::TensorBatch;
use crate::device::Device;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::ffi::{
    DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY,
};
use crate::layout::{self, Positions};
use crate::tensor::{Desc, ManagedTensor, build};
use crate::traits::{FromDLPack, ToDLPack, leaf_from, leaf_into};

// ---------------------------------------------------------------------------------------
// Import: checked views.
// ---------------------------------------------------------------------------------------

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
    /// view O(distinct bytes) (a broadcast axis counts once, however long); every other
    /// type is O(ndim).
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
        // - nobody writes it meanwhile: no `&mut self` can coexist with this borrow, and
        //   the `from_raw` contract rules out other writers.
        Ok(unsafe { raw.deref_into_view() })
    }

    /// A mutable ndarray view: the checks of [`as_array`](Self::as_array), and also that
    /// the tensor is [exclusive](Self::is_exclusive) (no other live handle reaches the
    /// data: see "Import safety" in the [crate documentation](crate#import-safety)), not
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
    fn validate<A: Element, D: Dimension>(&self, mutable: bool) -> Result<Validated<'_, A, D>> {
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
struct Validated<'a, A, D> {
    ptr: *mut A,
    dim: D,
    strides: D,
    given: Option<&'a [i64]>,
    empty: bool,
}

impl<A, D: Dimension> Validated<'_, A, D> {
    /// Checks that every byte of a non-empty tensor of one-byte elements is 0 or 1,
    /// reading each distinct byte once.
    fn check_bool_bytes(&self) -> Result<()> {
        debug_assert_eq!(size_of::<A>(), 1);
        let base = self.ptr.cast::<u8>().cast_const();
        let mut bad = 0;
        let positions = Positions::new(self.dim.slice(), self.strides.slice());
        let found = positions.find(self.dim.ndim(), |offset| {
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
        });
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

    fn into_raw_view(self) -> RawArrayView<A, D> {
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
    fn into_raw_view_mut(self) -> RawArrayViewMut<A, D> {
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

// ---------------------------------------------------------------------------------------
// Owned zero-copy import.
// ---------------------------------------------------------------------------------------

/// An owned, zero-copy import: a [`ManagedTensor`] validated once as an array of `A`
/// with dimension `D`.
///
/// ndarray's storage traits are sealed, so an `Array` cannot own foreign memory; this
/// wrapper holds the tensor (its deleter runs when the wrapper drops) and lends views.
///
/// ```
/// use dlpack_core::{DLPackArray, ToDLPack};
/// use ndarray::{array, Ix1};
///
/// let t = array![1.0f32, 2.0, 3.0].to_dlpack()?;
/// let mut a = DLPackArray::<f32, Ix1>::new(t)?;
/// a.view_mut()?[0] = 10.0;
/// assert_eq!(a.view().sum(), 15.0);
/// let owned = a.into_owned()?; // our own export: no copy
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub struct DLPackArray<A, D> {
    raw: Raw<A, D>,
    tensor: ManagedTensor,
}

/// A validated view: mutable when the tensor allows it, else read-only with the reason.
enum Raw<A, D> {
    Mut(RawArrayViewMut<A, D>, RawArrayView<A, D>),
    Const(RawArrayView<A, D>, Error),
}

// SAFETY:
// - `raw` is a pointer into the memory owned by `tensor`, which is `Send`;
// - `A: Element` is `Send`, and moving the wrapper moves no element.
unsafe impl<A: Element, D: Dimension> Send for DLPackArray<A, D> {}
// SAFETY:
// - `&DLPackArray` only creates read-only views (`A: Sync`); mutation needs `&mut`;
// - `tensor` is `Sync`.
unsafe impl<A: Element, D: Dimension> Sync for DLPackArray<A, D> {}

impl<A: Element, D: Dimension + 'static> DLPackArray<A, D> {
    /// Validates `tensor` as [`ManagedTensor::as_array`] does and keeps it. On error the
    /// tensor is dropped (its deleter runs).
    pub fn new(tensor: ManagedTensor) -> Result<Self> {
        let raw = match tensor.validate::<A, D>(true) {
            Ok(valid) => Raw::Mut(valid.clone().into_raw_view_mut(), valid.into_raw_view()),
            Err(why @ (Error::ReadOnly | Error::NotExclusive | Error::OverlappingStrides)) => {
                Raw::Const(tensor.validate::<A, D>(false)?.into_raw_view(), why)
            }
            Err(other) => return Err(other),
        };
        Ok(Self { raw, tensor })
    }

    fn raw_view(&self) -> RawArrayView<A, D> {
        match &self.raw {
            Raw::Mut(_, raw) | Raw::Const(raw, _) => raw.clone(),
        }
    }

    /// A read-only view.
    pub fn view(&self) -> ArrayView<'_, A, D> {
        // SAFETY: the view passed `validate` (see `ManagedTensor::as_array`), and it
        // borrows `self`, which owns the tensor.
        unsafe { self.raw_view().deref_into_view() }
    }

    /// A mutable view; an error if the tensor is shared ([`Error::NotExclusive`]),
    /// `READ_ONLY`, or its strides alias.
    pub fn view_mut(&mut self) -> Result<ArrayViewMut<'_, A, D>> {
        match &self.raw {
            // SAFETY: validated as writable without aliasing (see
            // `ManagedTensor::as_array_mut`), and `&mut self` excludes every other view
            // borrowed from us.
            Raw::Mut(raw, _) => Ok(unsafe { raw.clone().deref_into_view_mut() }),
            Raw::Const(_, why) => Err(why.clone()),
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        match &self.raw {
            Raw::Mut(_, raw) | Raw::Const(raw, _) => raw.shape(),
        }
    }

    /// The tensor.
    pub fn tensor(&self) -> &ManagedTensor {
        &self.tensor
    }

    /// Gives back the tensor.
    pub fn into_inner(self) -> ManagedTensor {
        self.tensor
    }

    /// An owned `Array`: our own `Array` export comes back without a copy; anything
    /// else is copied into standard layout.
    ///
    /// # Errors
    ///
    /// [`Error::AllocationFailed`] when the copy cannot be allocated (a broadcast
    /// tensor can describe far more elements than memory holds); the tensor is dropped.
    pub fn into_owned(self) -> Result<Array<A, D>> {
        let raw = self.raw_view();
        match reclaim::<A, D>(self.tensor) {
            Ok(array) => Ok(array),
            Err(tensor) => {
                // SAFETY: `raw` still describes `tensor`'s memory, alive until it drops
                // below, after the copy.
                let view = unsafe { raw.deref_into_view() };
                let owned = copy_standard(view);
                drop(tensor);
                owned
            }
        }
    }
}

impl<A: Element + fmt::Debug, D: Dimension + 'static> fmt::Debug for DLPackArray<A, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DLPackArray")
            .field("array", &self.view())
            .field("tensor", &self.tensor)
            .finish()
    }
}

impl<A: Element, D: Dimension + 'static> TryFrom<ManagedTensor> for DLPackArray<A, D> {
    type Error = Error;
    fn try_from(tensor: ManagedTensor) -> Result<Self> {
        Self::new(tensor)
    }
}

// ---------------------------------------------------------------------------------------
// Reclaiming our own exports.
// ---------------------------------------------------------------------------------------

/// Calls `$f::<E>()` for every dimension type an export could have used.
macro_rules! each_dim {
    ($f:ident) => {
        $f!(Ix0);
        $f!(Ix1);
        $f!(Ix2);
        $f!(Ix3);
        $f!(Ix4);
        $f!(Ix5);
        $f!(Ix6);
        $f!(IxDyn);
    };
}

/// The `Array` inside one of our `Array` or `ArcArray` exports of `A` with the rank of
/// `D`, without copying (an `ArcArray` still shared elsewhere is copied); else the
/// tensor back.
///
/// The rank is checked on the owner itself, not on the header: whoever held the raw
/// pointer could have written the header, never the owner.
fn reclaim<A: Element, D: Dimension + 'static>(
    tensor: ManagedTensor,
) -> Result<Array<A, D>, ManagedTensor> {
    if !tensor.is_own() {
        return Err(tensor);
    }
    let fits = |ndim: usize| D::NDIM.is_none_or(|n| n == ndim);
    let mut tensor = tensor;
    macro_rules! try_dim {
        ($E:ty) => {
            if tensor
                .owner::<Array<A, $E>>()
                .is_some_and(|a| fits(a.ndim()))
            {
                tensor = match tensor.into_owner::<Array<A, $E>>() {
                    Ok(array) => return Ok(into_dim(array)),
                    Err(t) => t,
                };
            }
            if tensor
                .owner::<ArcArray<A, $E>>()
                .is_some_and(|a| fits(a.ndim()))
            {
                tensor = match tensor.into_owner::<ArcArray<A, $E>>() {
                    Ok(array) => return Ok(into_dim(array.into_owned())),
                    Err(t) => t,
                };
            }
        };
    }
    each_dim!(try_dim);
    Err(tensor)
}

/// Converts between dimension types of the same rank (checked by the caller), which
/// ndarray cannot refuse.
fn into_dim<A, E: Dimension, D: Dimension>(array: Array<A, E>) -> Array<A, D> {
    match array.into_dimensionality::<D>() {
        Ok(array) => array,
        Err(_) => unreachable!("same rank, so the dimension converts"),
    }
}

// ---------------------------------------------------------------------------------------
// Export.
// ---------------------------------------------------------------------------------------

/// Exports an owner that keeps an array's elements alive at a stable address.
///
/// # Safety
///
/// - `data(owner)`, called with the owner at its final address, returns the address of
///   element `[0, ...]` of an array with extents `dim` and strides `strides` (ndarray
///   bit patterns) whose elements the owner keeps alive, unmoved, for as long as it
///   lives untouched;
/// - unless `flags` has `READ_ONLY`, nobody else accesses those elements meanwhile;
///   with it, nobody writes them.
unsafe fn export_owner<A: Element, O: Send + 'static>(
    owner: O,
    data: impl FnOnce(&mut O) -> *mut c_void,
    dim: &[usize],
    strides: &[usize],
    flags: u64,
) -> Result<ManagedTensor> {
    layout::check_native_layout(dim, strides.len())?;
    let describe = |owner: &mut O, shape_out: &mut [i64], strides_out: &mut [i64]| {
        for (out, &extent) in shape_out.iter_mut().zip(dim) {
            *out = extent as i64;
        }
        for (out, &bits) in strides_out.iter_mut().zip(strides) {
            *out = bits as isize as i64;
        }
        Ok(Desc {
            data: data(owner),
            dtype: A::DTYPE,
            device: Device::CPU,
            byte_offset: 0,
            flags,
        })
    };
    // SAFETY:
    // - `check_native_layout` checked that the extents fit i64 and there is one stride
    //   per axis; the strides are `isize` bit patterns, which fit i64;
    // - the caller guarantees the data requirements for as long as the owner lives;
    //   `A: Element` makes the dtype describe the memory.
    unsafe { build::<DLManagedTensorVersioned, O>(owner, dim.len(), describe) }
}

/// A copy of `view` in standard layout, allocated fallibly: a broadcast view can
/// describe far more elements than memory holds.
pub(crate) fn copy_standard<A: Element, D: Dimension>(
    view: ArrayView<'_, A, D>,
) -> Result<Array<A, D>> {
    let failed = || Error::AllocationFailed {
        bytes: view.len().saturating_mul(size_of::<A>()),
    };
    let mut values: Vec<A> = Vec::new();
    values.try_reserve_exact(view.len()).map_err(|_| failed())?;
    match view.as_slice() {
        Some(slice) => values.extend_from_slice(slice),
        None => values.extend(view.iter().copied()),
    }
    match Array::from_shape_vec(view.raw_dim(), values) {
        Ok(array) => Ok(array),
        Err(_) => unreachable!("one value per element, in row-major order"),
    }
}

/// ndarray's strides of `array` as `usize` bit patterns, in a `D` (no heap allocation
/// for fixed ranks).
fn stride_bits<S: ndarray::RawData, D: Dimension>(array: &ArrayBase<S, D>) -> D {
    let mut bits = array.raw_dim();
    for (out, &s) in bits.slice_mut().iter_mut().zip(array.strides()) {
        *out = s as usize;
    }
    bits
}

fn export_array<A: Element, D: Dimension + 'static>(
    array: Array<A, D>,
    flags: u64,
) -> Result<ManagedTensor> {
    let dim = array.raw_dim();
    let strides = stride_bits(&array);
    // SAFETY:
    // - `as_mut_ptr` of an owned array is element `[0, ...]` of its own heap buffer,
    //   and `dim`/`strides` are the array's: ndarray keeps every index in bounds;
    // - moving an `Array` does not move its heap buffer, and the owner is untouched
    //   until the deleter drops it;
    // - the array owned its buffer uniquely, so nobody else accesses the elements.
    unsafe {
        export_owner::<A, _>(
            array,
            |a| a.as_mut_ptr().cast(),
            dim.slice(),
            strides.slice(),
            flags,
        )
    }
}

fn export_shared<A: Element, D: Dimension + 'static>(
    array: ArcArray<A, D>,
) -> Result<ManagedTensor> {
    let dim = array.raw_dim();
    let strides = stride_bits(&array);
    // SAFETY:
    // - `as_ptr` is element `[0, ...]` of the shared buffer and `dim`/`strides` are the
    //   array's, so every index is in bounds; the owner's `Arc` keeps the buffer alive
    //   and moving it does not move the buffer;
    // - the tensor is `READ_ONLY`, and nobody else writes the buffer: `ArcArray` is
    //   copy-on-write, so any handle that mutates first copies, since ours keeps the
    //   reference count above one.
    unsafe {
        export_owner::<A, _>(
            array,
            |a| a.as_ptr().cast_mut().cast(),
            dim.slice(),
            strides.slice(),
            DLPACK_FLAG_BITMASK_READ_ONLY,
        )
    }
}

/// Copies into a fresh standard-layout buffer (the most widely accepted layout:
/// PyTorch and JAX refuse negative strides), flagged `IS_COPIED`.
fn export_copy<A: Element, S: Data<Elem = A>, D: Dimension + 'static>(
    array: &ArrayBase<S, D>,
) -> Result<ManagedTensor> {
    export_array(copy_standard(array.view())?, DLPACK_FLAG_BITMASK_IS_COPIED)
}

impl<A: Element, D: Dimension + 'static> ToDLPack for Array<A, D> {
    type Output = ManagedTensor;
    /// Moves the buffer into the tensor: zero-copy, writable.
    fn to_dlpack(self) -> Result<ManagedTensor> {
        export_array(self, 0)
    }
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        leaf_into(self, prefix, batch)
    }
}

impl<A: Element, D: Dimension + 'static> ToDLPack for ArcArray<A, D> {
    type Output = ManagedTensor;
    /// Shares the buffer: zero-copy and `READ_ONLY`, or writable like an `Array` if this
    /// was the only handle.
    fn to_dlpack(self) -> Result<ManagedTensor> {
        match self.try_into_owned_nocopy() {
            Ok(array) => export_array(array, 0),
            Err(shared) => export_shared(shared),
        }
    }
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        leaf_into(self, prefix, batch)
    }
}

impl<A: Element, D: Dimension + 'static> ToDLPack for CowArray<'_, A, D> {
    type Output = ManagedTensor;
    /// The owned variant moves like an `Array`; the borrowed one is copied.
    fn to_dlpack(self) -> Result<ManagedTensor> {
        if self.is_owned() {
            export_array(self.into_owned(), 0)
        } else {
            export_copy(&self)
        }
    }
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        leaf_into(self, prefix, batch)
    }
}

impl<A: Element, D: Dimension + 'static> ToDLPack for ArrayView<'_, A, D> {
    type Output = ManagedTensor;
    /// Copies (DLPack cannot express a Rust lifetime), flagged `IS_COPIED`.
    fn to_dlpack(self) -> Result<ManagedTensor> {
        export_copy(&self)
    }
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        leaf_into(self, prefix, batch)
    }
}

impl<A: Element, D: Dimension + 'static> ToDLPack for ArrayViewMut<'_, A, D> {
    type Output = ManagedTensor;
    /// Copies (DLPack cannot express a Rust lifetime), flagged `IS_COPIED`.
    fn to_dlpack(self) -> Result<ManagedTensor> {
        export_copy(&self)
    }
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        leaf_into(self, prefix, batch)
    }
}

impl<A: Element, S: Data<Elem = A>, D: Dimension + 'static> ToDLPack for &ArrayBase<S, D> {
    type Output = ManagedTensor;
    /// Copies (DLPack cannot express a Rust lifetime), flagged `IS_COPIED`.
    fn to_dlpack(self) -> Result<ManagedTensor> {
        export_copy(self)
    }
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        leaf_into(self, prefix, batch)
    }
}

impl<A: Element, D: Dimension + 'static> FromDLPack for Array<A, D> {
    type Input = ManagedTensor;
    /// Our own `Array` export comes back without a copy (same buffer, same layout);
    /// anything else is checked like [`ManagedTensor::as_array`] and copied into
    /// standard layout. The tensor is consumed either way.
    fn from_dlpack(tensor: ManagedTensor) -> Result<Self> {
        match reclaim::<A, D>(tensor) {
            Ok(array) => Ok(array),
            Err(tensor) => copy_standard(tensor.as_array::<A, D>()?),
        }
    }
    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        leaf_from(prefix, batch)
    }
}

impl<A: Element, D: Dimension + 'static> FromDLPack for ArcArray<A, D> {
    type Input = ManagedTensor;
    /// Our own `ArcArray` export comes back sharing its buffer, our own `Array` export
    /// without a copy; anything else is copied.
    fn from_dlpack(tensor: ManagedTensor) -> Result<Self> {
        if tensor.is_own() && tensor.dtype() == A::DTYPE {
            if let Some(shared) = tensor.owner::<ArcArray<A, D>>() {
                return Ok(shared.clone());
            }
        }
        Array::<A, D>::from_dlpack(tensor).map(Array::into_shared)
    }
    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        leaf_from(prefix, batch)
    }
}

impl<A: Element, D: Dimension + 'static> FromDLPack for DLPackArray<A, D> {
    type Input = ManagedTensor;
    /// Zero-copy: validates and keeps the tensor.
    fn from_dlpack(tensor: ManagedTensor) -> Result<Self> {
        Self::new(tensor)
    }
    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        leaf_from(prefix, batch)
    }
}

impl<A: Element, D: Dimension + 'static> ToDLPack for DLPackArray<A, D> {
    type Output = ManagedTensor;
    /// The tensor it holds.
    fn to_dlpack(self) -> Result<ManagedTensor> {
        Ok(self.tensor)
    }
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        leaf_into(self, prefix, batch)
    }
}

impl ManagedTensor {
    /// Exports a borrowed view without copying, as a `READ_ONLY` tensor.
    ///
    /// Prefer [`ToDLPack`], which copies a view: DLPack has no way to express a Rust
    /// lifetime, so nothing stops the tensor from outliving the borrow.
    ///
    /// # Safety
    ///
    /// - the viewed elements stay alive and unmoved until the tensor's deleter has run
    ///   (the tensor and everything it is handed to are dropped);
    /// - nobody writes them meanwhile.
    pub unsafe fn from_view_unchecked<A: Element, D: Dimension + 'static>(
        view: ArrayView<'_, A, D>,
    ) -> Result<Self> {
        let dim = view.raw_dim();
        let strides = stride_bits(&view);
        let data = view.as_ptr().cast_mut().cast::<c_void>();
        // SAFETY:
        // - `data`, `dim` and `strides` are the view's, so every index is in bounds;
        // - the caller keeps the elements alive and unwritten until the deleter runs;
        // - the tensor is `READ_ONLY`. The owner `()` holds nothing.
        unsafe {
            export_owner::<A, _>(
                (),
                |_| data,
                dim.slice(),
                strides.slice(),
                DLPACK_FLAG_BITMASK_READ_ONLY,
            )
        }
    }
}
