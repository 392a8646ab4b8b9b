//! Every tensor this crate makes is ONE allocation, a block that holds its header (the
//! managed struct, of either ABI), the bookkeeping below, the owner that keeps the data
//! alive, and the shape and strides arrays.
//!
//! ```text
//! [ M: managed struct | Meta | owner: O | shape: [i64; ndim] | strides: [i64; ndim] ]
//! ```
//!
//! Our headers are recognised by two properties that a copy made elsewhere cannot have
//! together: `manager_ctx` holds the header's own address, and the deleter is this
//! crate's own (one non-generic function per ABI). Only then is anything past the
//! managed struct read.

use core::any::TypeId;
use core::ffi::c_void;
use core::mem::{ManuallyDrop, offset_of};
use core::ptr::{self, NonNull};
use std::alloc::{self, Layout};

use crate::device::Device;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLTensor};

use super::abi::{Abi, with_abi};
use super::{ManagedTensor, with_header};

/// What a header's `describe` callback reports about the data (the shape and strides
/// it writes in place).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Desc {
    /// The data pointer; element `[0, ...]` is at `data + byte_offset`.
    pub(crate) data: *mut c_void,
    pub(crate) dtype: DataType,
    pub(crate) device: Device,
    pub(crate) byte_offset: u64,
    pub(crate) flags: u64,
}

/// The bookkeeping after the managed struct, the same for every owner type (three
/// words: a header keeps the size it had before our headers were recognised by their
/// own address).
#[derive(Clone, Copy)]
#[repr(C)]
struct Meta {
    /// The owner's type, for [`ManagedTensor::into_owner`]: [`type_of::<O>`](type_of).
    owner_type: fn() -> TypeId,
    /// Drops the owner and frees the allocation: [`release::<M, O>`](release).
    release: unsafe fn(*mut u8),
    /// The rank the header was allocated for, kept where a holder of the raw pointer,
    /// who may rewrite the managed struct's `ndim`, does not write.
    ndim: usize,
}

/// The [`TypeId`] of `O`, as a function that [`Meta`] can point to.
fn type_of<O: 'static>() -> TypeId {
    TypeId::of::<O>()
}

/// The part of a block that does not depend on the owner type.
#[repr(C)]
struct Head<M> {
    managed: M,
    meta: Meta,
}

/// The block of a tensor with owner `O`; `2 * ndim` `i64`s (shape, then strides)
/// follow it.
#[repr(C)]
struct Block<M, O> {
    head: Head<M>,
    owner: ManuallyDrop<O>,
}

/// The layout of a block with owner `O` and `ndim` dimensions, and the offset of the
/// shape array in it; `None` if it does not fit the address space.
fn layout<M: Abi, O>(ndim: usize) -> Option<(Layout, usize)> {
    let dims = Layout::array::<i64>(ndim.checked_mul(2)?).ok()?;
    let (layout, offset) = Layout::new::<Block<M, O>>().extend(dims).ok()?;
    Some((layout.pad_to_align(), offset))
}

/// A managed struct that this crate allocates headers with.
pub(crate) trait Own: Abi {
    /// The deleter of every header this crate allocates with this struct (one
    /// non-generic function per struct, so its address identifies our headers).
    const DELETER: unsafe extern "C" fn(*mut Self);
}

impl Own for DLManagedTensorVersioned {
    const DELETER: unsafe extern "C" fn(*mut Self) = delete_versioned;
}

impl Own for DLManagedTensor {
    const DELETER: unsafe extern "C" fn(*mut Self) = delete_legacy;
}

/// Whether the managed struct `managed`, at `ptr`, is a header made by [`build`]:
/// `manager_ctx` holds its own address (which no copy shares) and its deleter is ours.
#[inline]
pub(crate) fn is_own<M: Own>(ptr: NonNull<M>, managed: &M) -> bool {
    ptr::eq(managed.manager_ctx(), ptr.as_ptr().cast())
        && managed
            .deleter()
            .is_some_and(|deleter| ptr::fn_addr_eq(deleter, M::DELETER))
}

/// Allocates a header for `owner` and lets `describe` fill it in: one allocation for
/// the managed struct, the owner, and `ndim` extents and strides.
///
/// `describe` is called once, with the owner at its final address and zeroed shape and
/// strides of length `ndim` to write; an error from it frees the header and drops the
/// owner. The deleter drops the owner and frees the allocation.
///
/// # Errors
///
/// [`Error::TooManyDimensions`] when `ndim` does not fit `i32`, [`Error::AllocationFailed`]
/// when the header cannot be allocated, or the error of `describe`; the owner has been
/// dropped then.
///
/// # Safety
///
/// - the shape and strides that `describe` writes and the [`Desc`] it returns satisfy
///   the data requirements of [`ManagedTensor::from_raw`] for as long as the owner
///   lives at its address, given that from then on it is only read through shared
///   references (`ManagedTensor::owner`, for owners whose shared references cannot
///   write the data), moved out together with the tensor
///   ([`ManagedTensor::into_owner`], which ends the tensor), or dropped by the deleter.
pub(crate) unsafe fn build<M: Own, O: Send + 'static>(
    owner: O,
    ndim: usize,
    describe: impl FnOnce(&mut O, &mut [i64], &mut [i64]) -> Result<Desc>,
) -> Result<ManagedTensor> {
    let Ok(ndim_c) = i32::try_from(ndim) else {
        return Err(Error::TooManyDimensions { ndim });
    };
    let too_big = || Error::AllocationFailed { bytes: usize::MAX };
    let (layout, dims_offset) = layout::<M, O>(ndim).ok_or_else(too_big)?;
    // SAFETY: the layout has a non-zero size: it holds the managed struct.
    let base = unsafe { alloc::alloc(layout) };
    let Some(base) = NonNull::new(base) else {
        return Err(Error::AllocationFailed {
            bytes: layout.size(),
        });
    };
    let block = base.cast::<Block<M, O>>();
    // SAFETY: `base` is a fresh allocation of `layout`, which starts with an aligned
    // `Block<M, O>`; this only computes a field address.
    let owner_field = unsafe { &raw mut (*block.as_ptr()).owner };
    // SAFETY: the field is aligned and inside the allocation; nothing reads it before.
    unsafe { owner_field.write(ManuallyDrop::new(owner)) };
    // From here until the block is complete, an error from `describe`, or a panic in
    // it, drops the owner and frees the allocation.
    let unfinished = Unfinished {
        base,
        owner: owner_field,
        layout,
    };
    // SAFETY: `dims_offset` comes from `Layout::extend` for this allocation.
    let dims_ptr = unsafe { base.as_ptr().add(dims_offset) }.cast::<i64>();
    // SAFETY: the allocation holds `2 * ndim` `i64`s at `dims_ptr`, aligned by `extend`.
    unsafe { ptr::write_bytes(dims_ptr, 0, 2 * ndim) };
    // SAFETY:
    // - `2 * ndim` aligned, initialised `i64`s inside the allocation;
    // - nothing else references them while this borrow lives.
    let dims = unsafe { core::slice::from_raw_parts_mut(dims_ptr, 2 * ndim) };
    let (shape, strides) = dims.split_at_mut(ndim);
    // SAFETY: the owner was just written; this is the only reference to it.
    let owner_ref: &mut O = unsafe { &mut *owner_field };
    let desc = describe(owner_ref, shape, strides)?;
    let (shape, strides) = if ndim == 0 {
        (ptr::null_mut(), ptr::null_mut())
    } else {
        (shape.as_mut_ptr(), strides.as_mut_ptr())
    };
    let dl_tensor = DLTensor {
        data: desc.data,
        device: desc.device.to_raw(),
        ndim: ndim_c,
        dtype: desc.dtype.to_raw(),
        shape,
        strides,
        byte_offset: desc.byte_offset,
    };
    let head = Head {
        managed: M::new(dl_tensor, desc.flags, base.as_ptr().cast(), M::DELETER),
        meta: Meta {
            owner_type: type_of::<O>,
            release: release::<M, O>,
            ndim,
        },
    };
    // SAFETY: as for `owner_field`, this only computes a field address.
    let head_field = unsafe { &raw mut (*block.as_ptr()).head };
    // SAFETY: the first field of the fresh, aligned allocation, not yet initialised.
    unsafe { head_field.write(head) };
    core::mem::forget(unfinished);
    // SAFETY: a complete block, starting with its header, whose data `describe` vouched
    // for, owned by nobody else.
    Ok(unsafe { ManagedTensor::from_raw_unchecked(M::raw(block.cast::<M>())) })
}

/// A block under construction: on drop (an error or a panic in `describe`) it drops
/// the owner and frees the allocation; `build` forgets it once the block is complete.
struct Unfinished<O> {
    base: NonNull<u8>,
    owner: *mut ManuallyDrop<O>,
    layout: Layout,
}

impl<O> Drop for Unfinished<O> {
    fn drop(&mut self) {
        // SAFETY: the owner was written before this guard was made, and nothing else
        // references it while `build` unwinds or returns its error.
        let owner = unsafe { &mut *self.owner };
        // SAFETY: the owner is dropped here, once, and never used again.
        unsafe { ManuallyDrop::drop(owner) };
        // SAFETY: `base` was allocated by `build` with `layout` and is not used again.
        unsafe { alloc::dealloc(self.base.as_ptr(), self.layout) };
    }
}

/// Drops the owner of a `Block<M, O>` and frees the allocation. An owner whose `Drop`
/// panics aborts the process here (a deleter cannot unwind).
///
/// # Safety
///
/// - `block` is a live `Block<M, O>` made by [`build`], released once.
unsafe fn release<M: Abi, O>(block: *mut u8) {
    let block = block.cast::<Block<M, O>>();
    // SAFETY: the caller passes a live block; its bookkeeping is ours alone.
    let ndim = unsafe { (*block).head.meta.ndim };
    // SAFETY: the block is live and nothing else references its owner.
    let owner: &mut ManuallyDrop<O> = unsafe { &mut (*block).owner };
    // SAFETY: the owner is initialised and dropped only here, once.
    unsafe { ManuallyDrop::drop(owner) };
    // `build` allocated exactly this layout for this rank.
    if let Some((layout, _)) = layout::<M, O>(ndim) {
        // SAFETY: the allocation was made by `build` with this layout and is not used
        // again.
        unsafe { alloc::dealloc(block.cast(), layout) };
    }
}

/// The owner type of a header made by [`build`].
///
/// # Safety
///
/// - `ptr` is a live header made by [`build`] (see [`is_own`]).
pub(crate) unsafe fn owner_type<M: Abi>(ptr: NonNull<M>) -> TypeId {
    // SAFETY: the caller guarantees a live header, which starts with a `Head<M>`.
    let owner_type = unsafe { (*ptr.cast::<Head<M>>().as_ptr()).meta.owner_type };
    owner_type()
}

/// The owner of a header made by [`build`], if it has type `O`.
///
/// # Safety
///
/// - `ptr` is a live header made by [`build`] (see [`is_own`]), with its owner in place.
pub(crate) unsafe fn owner<M: Abi, O: 'static>(ptr: NonNull<M>) -> Option<NonNull<O>> {
    // SAFETY: the caller guarantees a live header made by `build`.
    if unsafe { owner_type(ptr) } != TypeId::of::<O>() {
        return None;
    }
    let offset = offset_of!(Block<M, O>, owner);
    // SAFETY: the allocation is a `Block<M, O>` (its owner type says so), whose owner
    // lies `offset` bytes in (`ManuallyDrop<O>` has the layout of `O`).
    Some(unsafe { ptr.cast::<u8>().add(offset) }.cast::<O>())
}

/// Moves the owner out of a header made by [`build`] and frees its block, without
/// running the deleter.
///
/// # Safety
///
/// - `ptr` is a live header made by [`build`] whose owner has type `O` (checked with
///   [`owner`]);
/// - nobody uses it, or calls its deleter, afterwards.
pub(crate) unsafe fn take<M: Abi, O>(ptr: NonNull<M>) -> O {
    let block = ptr.cast::<Block<M, O>>();
    // SAFETY: the caller guarantees a live block; its bookkeeping is ours alone.
    let ndim = unsafe { (*block.as_ptr()).head.meta.ndim };
    // SAFETY: the caller guarantees a live block; this only computes a field address.
    let owner_field = unsafe { &raw const (*block.as_ptr()).owner };
    // SAFETY: the owner is initialised and, since the deleter never runs, moved out
    // only here; the field is aligned and inside the allocation.
    let owner = unsafe { owner_field.read() };
    // `build` allocated exactly this layout for this rank.
    if let Some((layout, _)) = layout::<M, O>(ndim) {
        // SAFETY: the allocation was made by `build` with this layout and is not used
        // again.
        unsafe { alloc::dealloc(ptr.as_ptr().cast(), layout) };
    }
    ManuallyDrop::into_inner(owner)
}

/// The deleter of every versioned header made by [`build`].
///
/// # Safety
///
/// - `managed` is a live versioned header made by [`build`], deleted once.
pub(crate) unsafe extern "C" fn delete_versioned(managed: *mut DLManagedTensorVersioned) {
    // SAFETY: the caller passes a live header made by `build`.
    unsafe { delete_own(managed) }
}

/// The deleter of every legacy header made by [`build`].
///
/// # Safety
///
/// - `managed` is a live legacy header made by [`build`], deleted once.
pub(crate) unsafe extern "C" fn delete_legacy(managed: *mut DLManagedTensor) {
    // SAFETY: the caller passes a live header made by `build`.
    unsafe { delete_own(managed) }
}

/// Releases a header made by [`build`], whatever its owner type.
///
/// # Safety
///
/// - `managed` is a live header made by [`build`], deleted once.
unsafe fn delete_own<M: Abi>(managed: *mut M) {
    // SAFETY: the caller passes a live header, which starts with a `Head<M>`.
    let release = unsafe { (*managed.cast::<Head<M>>()).meta.release };
    // SAFETY: `release` was made for this header's owner type; it runs once.
    unsafe { release(managed.cast()) };
}

/// The owner of a header of ours over memory that is another party's, not Rust's (a
/// NumPy array read in place): a pointer to what keeps the memory alive, released once,
/// from whichever thread drops the tensor. [`ManagedTensor::is_rust_immutable`] knows a
/// tensor it owns by its type.
#[cfg(feature = "pyo3")]
pub(crate) struct ForeignOwner {
    keeper: NonNull<c_void>,
    release: fn(NonNull<c_void>),
}

#[cfg(feature = "pyo3")]
impl ForeignOwner {
    /// An owner that calls `release(keeper)` once when dropped.
    ///
    /// # Safety
    ///
    /// - `release(keeper)` may be called once, from any thread, at any time from now
    ///   (it releases what the caller hands over).
    pub(crate) unsafe fn new(keeper: NonNull<c_void>, release: fn(NonNull<c_void>)) -> Self {
        Self { keeper, release }
    }
}

// SAFETY:
// - the pointer is only handed to `release`, once, by `Drop`, which `new`'s caller
//   allows on any thread.
#[cfg(feature = "pyo3")]
unsafe impl Send for ForeignOwner {}
// SAFETY: nothing is reachable through `&ForeignOwner` (its fields are private and no
// method reads them).
#[cfg(feature = "pyo3")]
unsafe impl Sync for ForeignOwner {}

#[cfg(feature = "pyo3")]
impl Drop for ForeignOwner {
    fn drop(&mut self) {
        (self.release)(self.keeper);
    }
}

/// Our own headers, seen from the handle: the owner's type, the owner itself, and the
/// zero-copy way back to it.
impl ManagedTensor {
    /// Whether this crate allocated the header (see `is_own`).
    #[inline]
    pub(crate) fn is_own(&self) -> bool {
        with_header!(self, ptr, m => is_own(ptr, m))
    }

    /// Whether the tensor is read-only memory that Rust code may also read, as
    /// immutable, through other handles: read-only, CPU-accessible, under a header this
    /// crate made over an owner of Rust's (a shared `ArcArray`, burn's bytes with other
    /// handles, a `from_owner` owner). Such memory must not reach a consumer that
    /// ignores `READ_ONLY` (PyTorch): the bridges to Python and to dlpark hand it on as
    /// a copy. Not a producer's header (the memory is the producer's), nor a header of
    /// ours over another party's memory (a [`ForeignOwner`]: a NumPy array read in
    /// place; a header marked as from Python: an Arrow column of a Python producer); a
    /// header over another tensor (`__dlpack__`'s, taken back) answers for
    /// that tensor.
    #[cfg(any(feature = "pyo3", feature = "dlpark"))]
    pub(crate) fn is_rust_immutable(&self) -> bool {
        let mut tensor = self;
        loop {
            if !tensor.is_read_only() || !tensor.device().is_cpu_accessible() || !tensor.is_own() {
                return false;
            }
            if let Some(inner) = tensor.owner_ptr::<std::sync::Arc<ManagedTensor>>() {
                // SAFETY: `owner_ptr` points to an initialised owner that lives as long
                // as `tensor`, which only moves it out by `into_owner` (taking `tensor`
                // by value); it is only read here.
                tensor = unsafe { inner.as_ref() };
                continue;
            }
            // (An owner of ours over another party's memory: a NumPy array read in
            // place, an Arrow column a Python producer exported.)
            #[cfg(feature = "pyo3")]
            if tensor.owner_ptr::<ForeignOwner>().is_some() || tensor.is_from_python() {
                return false;
            }
            return true;
        }
    }

    /// The owner value of a tensor made by this crate with owner type `O`; `None` for
    /// any other tensor. Crate-internal: a public `&O` could reach the data through an
    /// owner's interior mutability while views borrowed from the tensor read it.
    #[cfg(feature = "ndarray")]
    pub(crate) fn owner<O: Sync + 'static>(&self) -> Option<&O> {
        // As in `into_owner_if`: no owner of `bool`s that foreign code could have written.
        if self.may_hold_foreign_bools() {
            return None;
        }
        // SAFETY: `owner_ptr` points to an initialised owner that lives as long as
        // `self` and is only moved out by `into_owner`, which consumes `self`.
        self.owner_ptr::<O>().map(|owner| unsafe { owner.as_ref() })
    }

    /// The owner type of a tensor made by this crate; `None` for any other tensor.
    #[cfg(feature = "ndarray")]
    #[inline]
    pub(crate) fn owner_type(&self) -> Option<core::any::TypeId> {
        if !self.is_own() {
            return None;
        }
        // SAFETY: `is_own` proved the pointer is a live header made by `build`.
        Some(with_abi!(self.raw(), ptr => unsafe { owner_type(ptr) }))
    }

    /// Where the owner of a tensor made by this crate with owner type `O` lives.
    #[inline]
    fn owner_ptr<O: 'static>(&self) -> Option<NonNull<O>> {
        if !self.is_own() {
            return None;
        }
        // SAFETY: `is_own` proved the pointer is a live header made by `build`, whose
        // owner stays in place while `self` lives.
        with_abi!(self.raw(), ptr => unsafe { owner::<_, O>(ptr) })
    }

    /// Takes the owner value back out of a tensor made by this crate with owner type `O`
    /// ([`from_owner`](Self::from_owner), [`from_buffer`](Self::from_buffer); array
    /// exports own an `Array<A, D>` or a shared `ArcArray<A, D>`), freeing the header
    /// without running the deleter: the zero-copy way back for custom containers. Any
    /// other tensor comes back in `Err`, and so does a `bool` tensor that was handed to
    /// Python (its consumers could have stored bytes that are no `bool`: import a
    /// checked copy, `as_array` and `to_owned`).
    ///
    /// ```
    /// use dlpack_core::ManagedTensor;
    ///
    /// let t = ManagedTensor::from_buffer(vec![1u8, 2, 3], 0, &[3], &[1])?;
    /// let t = t.into_owner::<Box<[u8]>>().unwrap_err(); // not that type
    /// let pixels: Vec<u8> = t.into_owner().unwrap();
    /// assert_eq!(pixels, [1, 2, 3]);
    /// # Ok::<(), dlpack_core::Error>(())
    /// ```
    pub fn into_owner<O: 'static>(self) -> Result<O, Self> {
        self.into_owner_if(|_| true)
    }

    /// [`into_owner`](Self::into_owner) when `keep` accepts the owner; the tensor back
    /// otherwise (one check of the header for both).
    #[inline]
    pub(crate) fn into_owner_if<O: 'static>(
        self,
        keep: impl FnOnce(&O) -> bool,
    ) -> Result<O, Self> {
        // A `bool` tensor that Python's consumers could write may hold bytes that are no
        // `bool`: its owner is not handed back unchecked (a checked copy is the way).
        if self.may_hold_foreign_bools() {
            return Err(self);
        }
        let Some(owner) = self.owner_ptr::<O>() else {
            return Err(self);
        };
        // SAFETY: `owner_ptr` points to an initialised owner that lives as long as
        // `self`; it is only read here.
        if !keep(unsafe { owner.as_ref() }) {
            return Err(self);
        }
        let this = ManuallyDrop::new(self);
        // SAFETY:
        // - `owner_ptr::<O>` proved the pointer is a live header made by `build` whose
        //   owner has type `O`;
        // - `this` is never dropped, so the deleter never runs and the header is not
        //   used again.
        Ok(with_abi!(this.raw(), ptr => unsafe { take::<_, O>(ptr) }))
    }
}
