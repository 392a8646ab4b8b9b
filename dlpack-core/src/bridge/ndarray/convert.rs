//! Exports of every kind of array (zero-copy moves and shares, copies into standard
//! layout), the zero-copy way back for our own exports, and the trait impls.

use core::any::TypeId;
use core::ffi::c_void;

use ndarray::{
    ArcArray, Array, ArrayBase, ArrayView, ArrayViewMut, CowArray, Data, Dimension, Ix0, Ix1, Ix2,
    Ix3, Ix4, Ix5, Ix6, IxDyn,
};

use crate::device::Device;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::ffi::{
    DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY,
};
use crate::tensor::{Desc, ManagedTensor, aligned_elements, build};
#[cfg(doc)]
use crate::traits::ToDLPack;

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
/// `D`, or the `Vec<A>` of a `from_buffer` tensor in standard layout, without copying
/// (an `ArcArray` still shared elsewhere is copied); else the tensor back.
///
/// The rank is checked on the owner itself, not on the header: whoever held the raw
/// pointer could have written the header, never the owner.
pub(super) fn reclaim<A: Element, D: Dimension + 'static>(
    tensor: ManagedTensor,
) -> Result<Array<A, D>, ManagedTensor> {
    let Some(owner_type) = tensor.owner_type() else {
        return Err(tensor);
    };
    let fits = |ndim: usize| D::NDIM.is_none_or(|n| n == ndim);
    // The owner is exactly one of these types, or none of them: its type is read once,
    // and the first match decides.
    macro_rules! try_dim {
        ($E:ty) => {
            if owner_type == TypeId::of::<Array<A, $E>>() {
                return tensor
                    .into_owner_if(|a: &Array<A, $E>| fits(a.ndim()))
                    .map(into_dim);
            }
            if owner_type == TypeId::of::<ArcArray<A, $E>>() {
                return tensor
                    .into_owner_if(|a: &ArcArray<A, $E>| fits(a.ndim()))
                    .map(|shared| into_dim(owned_of(shared)));
            }
        };
    }
    each_dim!(try_dim);
    if owner_type == TypeId::of::<Vec<A>>() {
        return reclaim_vec(tensor);
    }
    Err(tensor)
}

/// The `Vec` of a [`ManagedTensor::from_buffer`] tensor, as an array, when the tensor
/// is a run of that vector's elements in standard layout (C-contiguous strides, as many
/// elements as the shape holds, from any offset: the array then starts inside the
/// vector, as the crate's 64-byte aligned buffers do); else the tensor back. The header
/// is only trusted as far as it is checked here against the vector: the data must lie
/// inside it, on an element, with room for the whole shape.
fn reclaim_vec<A: Element, D: Dimension + 'static>(
    tensor: ManagedTensor,
) -> Result<Array<A, D>, ManagedTensor> {
    let shape: Option<Vec<usize>> = tensor
        .shape()
        .iter()
        .map(|&n| usize::try_from(n).ok())
        .collect();
    let Some(dim) = shape.and_then(|shape| D::from_dimension(&IxDyn(&shape))) else {
        return Err(tensor);
    };
    let standard = match tensor.strides() {
        None => true,
        Some(strides) => {
            let expected = dim.default_strides();
            dim.slice()
                .iter()
                .zip(strides.iter().zip(expected.slice()))
                .all(|(&n, (&s, &e))| n <= 1 || s == e as isize as i64)
        }
    };
    let Some(count) = dim.size_checked() else {
        return Err(tensor);
    };
    // ndarray also needs the product of the non-zero extents to fit `isize`, which an
    // empty shape of huge extents breaks: such a tensor takes the checked path.
    let fits = dim
        .slice()
        .iter()
        .filter(|&&n| n != 0)
        .try_fold(1usize, |p, &n| p.checked_mul(n))
        .is_some_and(|p| isize::try_from(p).is_ok());
    if !fits {
        return Err(tensor);
    }
    if !standard || tensor.byte_offset() != 0 {
        return Err(tensor);
    }
    // Addresses only: which element of the vector the data starts at, if any.
    let data = tensor.data() as usize;
    let start = |v: &Vec<A>| {
        let bytes = data.checked_sub(v.as_ptr() as usize)?;
        let at = bytes / size_of::<A>();
        let whole = bytes % size_of::<A>() == 0;
        (whole && at.checked_add(count).is_some_and(|end| end <= v.len())).then_some(at)
    };
    tensor
        .into_owner_if(|v: &Vec<A>| start(v).is_some())
        .map(|v| {
            let at = start(&v).unwrap_or(0);
            if at == 0 && v.len() == count {
                return match Array::from_shape_vec(dim, v) {
                    Ok(array) => array,
                    Err(_) => unreachable!("the shape holds exactly the vector's elements"),
                };
            }
            let run = Array::from_vec(v).slice_move(ndarray::s![at..at + count]);
            match run.into_shape_with_order(dim) {
                Ok(array) => array,
                Err(_) => unreachable!("a contiguous run of the shape's elements"),
            }
        })
}

/// The elements of `shared` as an array of its own: its buffer when nothing else
/// holds it, else a copy in a buffer of the crate's (ndarray's copy when that cannot be
/// allocated: it aborts when memory runs out, as any `Vec` growth does).
fn owned_of<A: Element, E: Dimension>(shared: ArcArray<A, E>) -> Array<A, E> {
    match shared.try_into_owned_nocopy() {
        Ok(array) => array,
        Err(shared) => copy_standard(shared.view()).unwrap_or_else(|_| shared.into_owned()),
    }
}

/// Converts between dimension types of the same rank (checked by the caller), which
/// ndarray cannot refuse.
fn into_dim<A, E: Dimension, D: Dimension>(array: Array<A, E>) -> Array<A, D> {
    match array.into_dimensionality::<D>() {
        Ok(array) => array,
        Err(_) => unreachable!("same rank, so the dimension converts"),
    }
}

/// Exports an owner that keeps an array's elements alive at a stable address.
///
/// # Safety
///
/// - `data(owner)`, called with the owner at its final address, returns the address of
///   element `[0, ...]` of an array with extents `dim` and strides `strides` (ndarray
///   bit patterns, as an array's own `D`s: one stride per axis, and extents whose
///   product ndarray keeps within `isize::MAX`, so each fits `i64`) whose elements the
///   owner keeps alive, unmoved, for as long as it lives untouched;
/// - unless `flags` has `READ_ONLY`, nobody else accesses those elements meanwhile;
///   with it, nobody writes them. (A writable tensor whose elements others hold too is
///   made by `parameter::share_writable` alone, which marks it shared before anyone sees it.)
pub(super) unsafe fn export_owner<A: Element, O: Send + 'static, D: Dimension>(
    owner: O,
    data: impl FnOnce(&mut O) -> *mut c_void,
    dim: &D,
    strides: &D,
    flags: u64,
) -> Result<ManagedTensor> {
    let (dim, strides) = (dim.slice(), strides.slice());
    let describe = |owner: &mut O, shape_out: &mut [i64], strides_out: &mut [i64]| {
        let outs = shape_out.iter_mut().zip(strides_out.iter_mut());
        for ((shape, stride), (&extent, &bits)) in outs.zip(dim.iter().zip(strides)) {
            *shape = extent as i64;
            *stride = bits as isize as i64;
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
    // - one stride per axis, extents that fit i64 (the caller's array), and strides
    //   that are `isize` bit patterns, which fit i64; `build` checks the rank fits i32;
    // - the caller guarantees the data requirements for as long as the owner lives;
    //   `A: Element` makes the dtype describe the memory.
    unsafe { build::<DLManagedTensorVersioned, O>(owner, dim.len(), describe) }
}

/// A copy of `view` in standard layout, allocated fallibly: a broadcast view can
/// describe far more elements than memory holds.
pub(crate) fn copy_standard<A: Element, D: Dimension>(
    view: ArrayView<'_, A, D>,
) -> Result<Array<A, D>> {
    let count = view.len();
    // A buffer of the crate's: its data on a 64-byte boundary, a few elements into the
    // vector, where the array starts.
    let (mut values, at) = aligned_elements::<A>(count)?;
    let out = &mut values.as_mut_slice()[at..at + count];
    match view.as_slice() {
        Some(slice) => out.copy_from_slice(slice),
        None => out.iter_mut().zip(view.iter()).for_each(|(o, &v)| *o = v),
    }
    let run = Array::from_vec(values).slice_move(ndarray::s![at..at + count]);
    match run.into_shape_with_order(view.raw_dim()) {
        Ok(array) => Ok(array),
        Err(_) => unreachable!("one value per element, in row-major order"),
    }
}

/// An array of zeros in standard layout (C order) whose first element starts on a 64-byte
/// boundary, as every buffer this crate allocates for tensor data does: what JAX (XLA's
/// CPU client) imports without a copy, where it copies less aligned memory.
///
/// An `Array` from ndarray's own constructors (`Array::zeros`, `from_shape_fn`,
/// `from_vec`) starts where its `Vec` starts, which the allocator aligns to 16 bytes at
/// most (large blocks from glibc sit 16 bytes past a page boundary). This one starts a
/// few elements into its vector, which the array keeps: it moves into a tensor, a
/// [`Parameter`](crate::Parameter) or a model field without a copy, still aligned.
/// Fill it in place (`assign`, `iter_mut`, `Zip`).
///
/// ```
/// let mut w = dlpack_core::zeros_aligned::<f32, _>((3, 5));
/// assert_eq!(w.as_ptr() as usize % 64, 0);
/// w.fill(0.5);
/// let t = dlpack_core::ToDLPack::to_dlpack(w)?; // moved, not copied
/// assert_eq!(t.data() as usize % 64, 0);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Panics
///
/// When the number of elements overflows `isize` or the memory cannot be allocated, as
/// `Array::zeros` does.
pub fn zeros_aligned<A: Element, Sh: ndarray::IntoDimension>(shape: Sh) -> Array<A, Sh::Dim> {
    let dim = shape.into_dimension();
    let count = match dim.size_checked() {
        Some(count) if isize::try_from(count).is_ok() => count,
        _ => panic!("ndarray: Shape too large, product of non-zero axis lengths overflows isize"),
    };
    let (values, at) = match aligned_elements::<A>(count) {
        Ok(allocated) => allocated,
        Err(_) => match std::alloc::Layout::array::<A>(count) {
            Ok(layout) => std::alloc::handle_alloc_error(layout),
            Err(_) => panic!("capacity overflow"),
        },
    };
    let run = Array::from_vec(values).slice_move(ndarray::s![at..at + count]);
    match run.into_shape_with_order(dim) {
        Ok(array) => array,
        Err(_) => unreachable!("a contiguous run of the shape's elements"),
    }
}

/// ndarray's strides of `array` as `usize` bit patterns, in a `D` (no heap allocation
/// for fixed ranks).
pub(super) fn stride_bits<S: ndarray::RawData, D: Dimension>(array: &ArrayBase<S, D>) -> D {
    let mut bits = array.raw_dim();
    for (out, &s) in bits.slice_mut().iter_mut().zip(array.strides()) {
        *out = s as usize;
    }
    bits
}

/// Exports an array that owns (or shares) its elements: the array is the owner, and
/// its own shape and strides describe the tensor.
///
/// # Safety
///
/// As for [`export_owner`]: `data` returns element `[0, ...]` of the array's elements,
/// which the array keeps alive and unmoved (moving an `ArrayBase` does not move its
/// buffer), with the access `flags` allow.
unsafe fn export_whole<S, A, D>(
    array: ArrayBase<S, D>,
    data: impl FnOnce(&mut ArrayBase<S, D>) -> *mut c_void,
    flags: u64,
) -> Result<ManagedTensor>
where
    S: Data<Elem = A> + Send + 'static,
    A: Element,
    D: Dimension + 'static,
{
    let dim = array.raw_dim();
    let strides = stride_bits(&array);
    // SAFETY: the caller's guarantees, for the array's own extents and strides, within
    // which ndarray keeps every index in bounds.
    unsafe { export_owner::<A, _, _>(array, data, &dim, &strides, flags) }
}

pub(super) fn export_array<A: Element, D: Dimension + 'static>(
    array: Array<A, D>,
    flags: u64,
) -> Result<ManagedTensor> {
    // SAFETY:
    // - `as_mut_ptr` of an owned array is element `[0, ...]` of its own heap buffer;
    // - the array owned its buffer uniquely, so nobody else accesses the elements.
    unsafe { export_whole(array, |a| a.as_mut_ptr().cast(), flags) }
}

fn export_shared<A: Element, D: Dimension + 'static>(
    array: ArcArray<A, D>,
) -> Result<ManagedTensor> {
    // SAFETY:
    // - `as_ptr` is element `[0, ...]` of the shared buffer, which the owner's `Arc`
    //   keeps alive;
    // - the tensor is `READ_ONLY`, and nobody else writes the buffer: `ArcArray` is
    //   copy-on-write, so any handle that mutates first copies, since ours keeps the
    //   reference count above one.
    unsafe {
        export_whole(
            array,
            |a| a.as_ptr().cast_mut().cast(),
            DLPACK_FLAG_BITMASK_READ_ONLY,
        )
    }
}

/// Copies into a fresh standard-layout buffer (the most widely accepted layout:
/// PyTorch and JAX refuse negative strides), flagged `IS_COPIED`.
pub(super) fn export_copy<A: Element, S: Data<Elem = A>, D: Dimension + 'static>(
    array: &ArrayBase<S, D>,
) -> Result<ManagedTensor> {
    export_array(copy_standard(array.view())?, DLPACK_FLAG_BITMASK_IS_COPIED)
}

/// Implements [`ToDLPack`] for a value that exports as one tensor: `to_dlpack` is the
/// given body, and `to_dlpack_into` adds that tensor to a batch under the prefix.
macro_rules! to_one_tensor {
    ($(#[doc = $doc:literal])* impl[$($generics:tt)*] for $ty:ty { |$this:ident| $export:expr }) => {
        impl<$($generics)*> crate::traits::ToDLPack for $ty {
            type Output = crate::tensor::ManagedTensor;
            $(#[doc = $doc])*
            fn to_dlpack(self) -> crate::error::Result<crate::tensor::ManagedTensor> {
                let $this = self;
                $export
            }
            fn to_dlpack_into(self, prefix: &str, batch: &mut crate::batch::TensorBatch) -> crate::error::Result<()> {
                crate::traits::leaf_into(self, prefix, batch)
            }
        }
    };
}

/// Implements [`FromDLPack`] for a value that imports from one tensor: `from_dlpack` is
/// the given body, `from_dlpack_in` takes the tensor named by the prefix, and
/// `load_dlpack_in`, when a `load` body is given, loads that tensor into the existing
/// value with it.
macro_rules! from_one_tensor {
    (
        $(#[doc = $doc:literal])*
        impl[$($generics:tt)*] for $ty:ty {
            |$tensor:ident| $import:expr
            $(, load |$this:ident, $loaded:ident| $load:expr)?
        }
    ) => {
        impl<$($generics)*> crate::traits::FromDLPack for $ty {
            type Input = crate::tensor::ManagedTensor;
            $(#[doc = $doc])*
            fn from_dlpack($tensor: crate::tensor::ManagedTensor) -> crate::error::Result<Self> {
                $import
            }
            fn from_dlpack_in(prefix: &str, batch: &mut crate::batch::TensorBatch) -> crate::error::Result<Self> {
                crate::traits::leaf_from(prefix, batch)
            }
            /// The tensor named by the prefix, of the element type and (for a fixed
            /// dimension) the rank of the array.
            fn select_in(prefix: &str, selection: &mut crate::traits::Selection<'_>) {
                selection.take(prefix, crate::traits::Expected::new(Some(A::DTYPE), D::NDIM));
            }
            $(
                /// Fills the existing array in place (the same buffer): the tensor must
                /// have the array's dtype and shape.
                fn load_dlpack_in(
                    &mut self,
                    prefix: &str,
                    batch: &mut crate::batch::TensorBatch,
                    report: &mut crate::traits::LoadReport,
                ) -> crate::error::Result<()> {
                    crate::traits::leaf_load(self, prefix, batch, report, |$this, $loaded| $load)
                }
            )?
        }
    };
}

/// Copies `tensor` into `target` after checking its dtype, rank and shape.
pub(super) fn load_into<A: Element, D: Dimension + 'static>(
    mut target: ArrayViewMut<'_, A, D>,
    tensor: ManagedTensor,
) -> Result<()> {
    let source = tensor.as_array::<A, D>()?;
    if source.shape() != target.shape() {
        return Err(Error::ShapeMismatch {
            expected: target.shape().to_vec(),
            found: source.shape().to_vec(),
        });
    }
    target.assign(&source);
    Ok(())
}

to_one_tensor! {
    /// Moves the buffer into the tensor: zero-copy, writable.
    impl[A: Element, D: Dimension + 'static] for Array<A, D> { |array| export_array(array, 0) }
}

to_one_tensor! {
    /// Shares the buffer: zero-copy and `READ_ONLY`, or writable like an `Array` if this
    /// was the only handle (a shared `bool` buffer is copied: a consumer that ignores
    /// `READ_ONLY` could store bytes that are no `bool`).
    impl[A: Element, D: Dimension + 'static] for ArcArray<A, D> {
        |array| match array.try_into_owned_nocopy() {
            Ok(array) => export_array(array, 0),
            // A consumer that ignores `READ_ONLY` (PyTorch) could store bytes that are no
            // `bool` where the other handles read them.
            Err(shared) if A::DTYPE == crate::dtype::DataType::BOOL => export_copy(&shared),
            Err(shared) => export_shared(shared),
        }
    }
}

to_one_tensor! {
    /// The owned variant moves like an `Array`; the borrowed one is copied.
    impl[A: Element, D: Dimension + 'static] for CowArray<'_, A, D> {
        |array| if array.is_owned() {
            export_array(array.into_owned(), 0)
        } else {
            export_copy(&array)
        }
    }
}

to_one_tensor! {
    /// Copies (DLPack cannot express a Rust lifetime), flagged `IS_COPIED`.
    impl[A: Element, D: Dimension + 'static] for ArrayView<'_, A, D> { |view| export_copy(&view) }
}

to_one_tensor! {
    /// Copies (DLPack cannot express a Rust lifetime), flagged `IS_COPIED`.
    impl[A: Element, D: Dimension + 'static] for ArrayViewMut<'_, A, D> { |view| export_copy(&view) }
}

to_one_tensor! {
    /// Copies (DLPack cannot express a Rust lifetime), flagged `IS_COPIED`.
    impl[A: Element, S: Data<Elem = A>, D: Dimension + 'static] for &ArrayBase<S, D> {
        |array| export_copy(array)
    }
}

from_one_tensor! {
    /// Our own `Array` export comes back without a copy (same buffer, same layout), and
    /// so does the `Vec<A>` of a [`ManagedTensor::from_buffer`] tensor in standard
    /// layout (offset 0, C-contiguous, every element of the vector); anything else is
    /// checked like [`ManagedTensor::as_array`] and copied into standard layout. The
    /// tensor is consumed either way.
    impl[A: Element, D: Dimension + 'static] for Array<A, D> {
        |tensor| match reclaim::<A, D>(tensor) {
            Ok(array) => Ok(array),
            Err(tensor) => copy_standard(tensor.as_array::<A, D>()?),
        },
        load |array, tensor| load_into(array.view_mut(), tensor)
    }
}

from_one_tensor! {
    /// Our own `ArcArray` export comes back sharing its buffer, our own `Array` export
    /// without a copy; anything else is copied.
    impl[A: Element, D: Dimension + 'static] for ArcArray<A, D> {
        |tensor| {
            if let Some(shared) = tensor.owner::<ArcArray<A, D>>() {
                return Ok(shared.clone());
            }
            Array::<A, D>::from_dlpack(tensor).map(Array::into_shared)
        },
        load |array, tensor| load_into(array.view_mut(), tensor)
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
            export_owner::<A, _, _>((), |_| data, &dim, &strides, DLPACK_FLAG_BITMASK_READ_ONLY)
        }
    }
}
