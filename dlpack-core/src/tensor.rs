//! [`ManagedTensor`], the one owning handle of a DLPack tensor, and the producer side:
//! the single-allocation export header that every tensor made by this crate uses.

use core::any::TypeId;
use core::ffi::c_void;
use core::fmt;
use core::mem::ManuallyDrop;
use core::ptr::{self, NonNull};
use std::alloc::{self, Layout};

use crate::device::Device;
use crate::dtype::{DataType, Element};
use crate::error::{Error, Result};
use crate::ffi::{
    DLManagedTensor, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED,
    DLPACK_FLAG_BITMASK_READ_ONLY, DLPackVersion, DLTensor,
};
use crate::layout;

/// An owned DLPack tensor: the one handle through which this crate holds a
/// `DLManagedTensorVersioned` (DLPack 1.x) or a legacy `DLManagedTensor`.
///
/// - **Consume once.** It is not `Clone`; passing it on moves it.
/// - **Deleter exactly once.** `Drop` calls the producer's deleter once, and never a NULL
///   one. [`into_raw`](Self::into_raw) hands that duty to the receiver instead.
/// - **Either ABI.** [`into_raw`](Self::into_raw) and
///   [`into_raw_legacy`](Self::into_raw_legacy) give whichever struct a consumer wants,
///   wrapping the other kind in one allocation whose deleter chains to the original.
///
/// Borrowed, checked ndarray views come from `as_array` / `as_array_mut` (feature
/// `ndarray`); tensors are made from arrays with [`ToDLPack`](crate::ToDLPack), or from
/// any buffer with [`from_buffer`](Self::from_buffer) and
/// [`from_owner`](Self::from_owner).
///
/// # Thread safety
///
/// `ManagedTensor` is `Send` and `Sync`. The standard lets the consumer call the deleter
/// from any thread, and [`from_raw`](Self::from_raw) makes the caller promise exactly
/// that; shared references only read metadata or create read-only views.
pub struct ManagedTensor {
    raw: Raw,
}

#[derive(Clone, Copy)]
enum Raw {
    Versioned(NonNull<DLManagedTensorVersioned>),
    Legacy(NonNull<DLManagedTensor>),
}

// SAFETY:
// - `from_raw`/`from_raw_legacy` require that the deleter may be called from any thread
//   and that the data may be accessed from any thread; our own headers use owners that
//   are `Send` (see `Header` construction), so dropping them elsewhere is sound;
// - the handle holds no thread-local state.
unsafe impl Send for ManagedTensor {}
// SAFETY:
// - through `&ManagedTensor` only metadata is read and read-only views of `Element`
//   data (which are `Sync`) are created; nothing is mutated through a shared reference;
// - the `from_raw` contract rules out writers outside this handle while it lives.
unsafe impl Sync for ManagedTensor {}

impl ManagedTensor {
    /// Takes ownership of a DLPack 1.x tensor.
    ///
    /// Checks what can be checked without trusting the contents: the pointer is not
    /// NULL; `version.major` is 1 (otherwise the deleter is called and
    /// [`Error::UnsupportedVersion`] returned, as the standard requires); `ndim >= 0`;
    /// `shape` is non-NULL and aligned when `ndim > 0`; `strides` is aligned when
    /// non-NULL. On every error but a NULL pointer the deleter has run once when this
    /// returns. Shape, strides, dtype, device and data are checked later, by the view
    /// constructors.
    ///
    /// # Safety
    ///
    /// - `ptr` is NULL or points to a `DLManagedTensorVersioned`, aligned and readable,
    ///   whose ownership the caller hands over: nobody else will call its deleter;
    /// - if `version.major == 1`, `shape` (when `ndim > 0`) points to `ndim` readable
    ///   `i64`s and `strides` is NULL or points to `ndim` readable `i64`s, and the struct
    ///   and these arrays stay valid and unchanged until the deleter is called;
    /// - `data + byte_offset` addresses memory on `device` that holds the elements
    ///   described by shape, strides and dtype, valid for reads until the deleter is
    ///   called, and for writes unless the `READ_ONLY` flag is set;
    /// - while the tensor lives nobody else writes that memory, and while a mutable
    ///   view borrowed from it lives nobody else reads it either;
    /// - the deleter, if not NULL, may be called once, from any thread, with `ptr`.
    pub unsafe fn from_raw(ptr: *mut DLManagedTensorVersioned) -> Result<Self> {
        let ptr = NonNull::new(ptr).ok_or(Error::NullPointer {
            what: "managed tensor",
        })?;
        // SAFETY:
        // - the caller guarantees `ptr` is aligned and readable as the struct;
        // - `version` is in the prefix that every major version keeps stable.
        let version = unsafe { (*ptr.as_ptr()).version };
        // From here on, dropping `tensor` calls the deleter.
        let tensor = Self {
            raw: Raw::Versioned(ptr),
        };
        if version.major != crate::ffi::DLPACK_MAJOR_VERSION {
            return Err(Error::UnsupportedVersion {
                major: version.major,
                minor: version.minor,
            });
        }
        tensor.check_header()?;
        Ok(tensor)
    }

    /// Takes ownership of a legacy (pre-1.0) `DLManagedTensor`.
    ///
    /// Performs the same checks as [`from_raw`](Self::from_raw) except the version,
    /// which legacy tensors do not carry. Legacy tensors have no flags: they are
    /// treated as writable, as PyTorch and JAX treat them.
    ///
    /// # Safety
    ///
    /// As for [`from_raw`](Self::from_raw), for a `DLManagedTensor`; in addition, since
    /// a legacy tensor cannot say it is read-only, the producer must allow writes to
    /// the data.
    pub unsafe fn from_raw_legacy(ptr: *mut DLManagedTensor) -> Result<Self> {
        let ptr = NonNull::new(ptr).ok_or(Error::NullPointer {
            what: "managed tensor",
        })?;
        let tensor = Self {
            raw: Raw::Legacy(ptr),
        };
        tensor.check_header()?;
        Ok(tensor)
    }

    fn check_header(&self) -> Result<()> {
        let t = self.dl_tensor();
        if t.ndim < 0 {
            return Err(Error::NegativeNdim { ndim: t.ndim });
        }
        if t.ndim > 0 {
            check_array_ptr(t.shape, "shape")?;
            if !t.strides.is_null() {
                check_array_ptr(t.strides, "strides")?;
            }
        }
        Ok(())
    }

    /// Gives up ownership: returns the `DLManagedTensorVersioned` pointer, whose deleter
    /// the receiver must call once.
    ///
    /// A legacy tensor is wrapped in a new versioned struct (one allocation, flags 0)
    /// whose deleter frees the wrapper and calls the legacy deleter; a tensor that this
    /// crate wrapped the other way is unwrapped instead of wrapped twice.
    pub fn into_raw(self) -> *mut DLManagedTensorVersioned {
        let this = self.unwrap_adapter();
        match this.raw {
            Raw::Versioned(ptr) => {
                core::mem::forget(this);
                ptr.as_ptr()
            }
            Raw::Legacy(_) => wrap::<DLManagedTensorVersioned>(this).as_ptr(),
        }
    }

    /// Gives up ownership as a legacy `DLManagedTensor`, for consumers that predate
    /// DLPack 1.0; the receiver must call its deleter once.
    ///
    /// A versioned tensor is wrapped in a new legacy struct (one allocation) whose
    /// deleter frees the wrapper and calls the versioned deleter.
    ///
    /// # Errors
    ///
    /// A tensor flagged `READ_ONLY` comes back unchanged in `Err`: a legacy consumer
    /// would assume it may write. (Copy it first, or keep it versioned.)
    pub fn into_raw_legacy(self) -> Result<*mut DLManagedTensor, Self> {
        if self.is_read_only() {
            return Err(self);
        }
        let this = self.unwrap_adapter();
        Ok(match this.raw {
            Raw::Legacy(ptr) => {
                core::mem::forget(this);
                ptr.as_ptr()
            }
            Raw::Versioned(_) => wrap::<DLManagedTensor>(this).as_ptr(),
        })
    }

    /// Gives up ownership of the header as it is, of either ABI (no adapter made or
    /// unwrapped): `(pointer, true)` for a legacy `DLManagedTensor`, `(pointer, false)`
    /// for a `DLManagedTensorVersioned`. The receiver must call its deleter once.
    #[cfg(feature = "pyo3")]
    pub(crate) fn into_raw_as_is(self) -> (*mut c_void, bool) {
        let this = ManuallyDrop::new(self);
        match this.raw {
            Raw::Versioned(ptr) => (ptr.as_ptr().cast(), false),
            Raw::Legacy(ptr) => (ptr.as_ptr().cast(), true),
        }
    }

    /// If this is an ABI adapter made by [`into_raw`](Self::into_raw) or
    /// [`into_raw_legacy`](Self::into_raw_legacy), the tensor it wraps; else itself.
    fn unwrap_adapter(self) -> Self {
        let mut this = self;
        loop {
            match this.into_owner::<Adapter>() {
                Ok(Adapter(inner)) => this = inner,
                Err(original) => return original,
            }
        }
    }

    /// The plain `DLTensor` description.
    pub fn dl_tensor(&self) -> &DLTensor {
        match self.raw {
            // SAFETY:
            // - `ptr` is non-null, aligned and valid until the deleter runs (the
            //   `from_raw` contract, or our own header), which is after `self` dies;
            // - nobody mutates the struct while we own it.
            Raw::Versioned(ptr) => unsafe { &(*ptr.as_ptr()).dl_tensor },
            // SAFETY: as above, for the legacy struct.
            Raw::Legacy(ptr) => unsafe { &(*ptr.as_ptr()).dl_tensor },
        }
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        // `check_header` rejected negative values.
        usize::try_from(self.dl_tensor().ndim).unwrap_or(0)
    }

    /// The extents, as the producer gave them (not yet validated: see `as_array`).
    pub fn shape(&self) -> &[i64] {
        let t = self.dl_tensor();
        // SAFETY:
        // - `check_header` ensured `shape` is non-null and aligned when `ndim > 0`;
        // - the producer guarantees `ndim` readable values that outlive `self`.
        unsafe { raw_slice(t.shape, self.ndim()) }
    }

    /// The strides in elements, or `None` when the producer passed NULL
    /// (C-contiguous, allowed before DLPack 1.2).
    pub fn strides(&self) -> Option<&[i64]> {
        let t = self.dl_tensor();
        if t.strides.is_null() {
            return None;
        }
        // SAFETY:
        // - `strides` is non-null here, and `check_header` ensured it is aligned;
        // - the producer guarantees `ndim` readable values that outlive `self`.
        Some(unsafe { raw_slice(t.strides, self.ndim()) })
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        DataType::from_raw(self.dl_tensor().dtype)
    }

    /// Where the data lives.
    pub fn device(&self) -> Device {
        Device::from_raw(self.dl_tensor().device)
    }

    /// Offset in bytes from [`data`](Self::data) to the first element.
    pub fn byte_offset(&self) -> u64 {
        self.dl_tensor().byte_offset
    }

    /// The raw data pointer as the producer gave it (see also
    /// [`data_ptr`](Self::data_ptr)).
    pub fn data(&self) -> *mut c_void {
        self.dl_tensor().data
    }

    /// The address of the first element, `data + byte_offset` (computed with wrapping
    /// arithmetic; views check it).
    pub fn data_ptr(&self) -> *mut c_void {
        let t = self.dl_tensor();
        t.data.wrapping_byte_add(t.byte_offset as usize)
    }

    /// The `DLPACK_FLAG_BITMASK_*` flags; always 0 for a legacy tensor.
    pub fn flags(&self) -> u64 {
        match self.raw {
            // SAFETY: the header is valid while `self` lives (see `dl_tensor`).
            Raw::Versioned(ptr) => unsafe { (*ptr.as_ptr()).flags },
            Raw::Legacy(_) => 0,
        }
    }

    /// Whether the producer forbids writes (`READ_ONLY`).
    pub fn is_read_only(&self) -> bool {
        self.flags() & DLPACK_FLAG_BITMASK_READ_ONLY != 0
    }

    /// Whether the producer copied the data for this export (`IS_COPIED`).
    pub fn is_copied(&self) -> bool {
        self.flags() & DLPACK_FLAG_BITMASK_IS_COPIED != 0
    }

    /// The DLPack version of a versioned tensor; `None` for a legacy one.
    pub fn version(&self) -> Option<DLPackVersion> {
        match self.raw {
            // SAFETY: the header is valid while `self` lives (see `dl_tensor`).
            Raw::Versioned(ptr) => Some(unsafe { (*ptr.as_ptr()).version }),
            Raw::Legacy(_) => None,
        }
    }

    /// Whether this holds a legacy `DLManagedTensor`.
    pub fn is_legacy(&self) -> bool {
        matches!(self.raw, Raw::Legacy(_))
    }

    /// The number of elements, checked: the product of the extents, or an error for a
    /// negative extent or an overflow.
    pub fn num_elements(&self) -> Result<usize> {
        layout::element_count(self.shape())
    }

    fn manager_ctx(&self) -> *mut c_void {
        match self.raw {
            // SAFETY: the header is valid while `self` lives (see `dl_tensor`).
            Raw::Versioned(ptr) => unsafe { (*ptr.as_ptr()).manager_ctx },
            // SAFETY: as above.
            Raw::Legacy(ptr) => unsafe { (*ptr.as_ptr()).manager_ctx },
        }
    }

    /// Whether this crate allocated the header (its `manager_ctx` is our marker).
    pub(crate) fn is_own(&self) -> bool {
        ptr::eq(self.manager_ctx(), export_marker())
    }

    fn own_head_owner_type(&self) -> Option<TypeId> {
        if !self.is_own() {
            return None;
        }
        Some(match self.raw {
            // SAFETY:
            // - `manager_ctx` is our marker, so the pointer is the start of a
            //   `Header<DLManagedTensorVersioned, _>`, whose `repr(C)` prefix `Head`
            //   does not depend on the owner type;
            // - the header is valid while `self` lives.
            Raw::Versioned(ptr) => unsafe {
                (*ptr.as_ptr().cast::<Head<DLManagedTensorVersioned>>()).owner_type
            },
            // SAFETY: as above, for `Header<DLManagedTensor, _>`.
            Raw::Legacy(ptr) => unsafe {
                (*ptr.as_ptr().cast::<Head<DLManagedTensor>>()).owner_type
            },
        })
    }

    /// The owner value of a tensor made by this crate with owner type `O`; `None` for
    /// any other tensor. Crate-internal: a public `&O` could reach the data through an
    /// owner's interior mutability while views borrowed from the tensor read it.
    pub(crate) fn owner<O: Sync + 'static>(&self) -> Option<&O> {
        // SAFETY: `owner_ptr` points to an initialised owner that lives as long as
        // `self` and is only moved out by `into_owner`, which consumes `self`.
        self.owner_ptr::<O>().map(|owner| unsafe { &*owner })
    }

    /// Where the owner of a tensor made by this crate with owner type `O` lives.
    fn owner_ptr<O: 'static>(&self) -> Option<*const O> {
        if self.own_head_owner_type()? != TypeId::of::<O>() {
            return None;
        }
        Some(match self.raw {
            // SAFETY:
            // - the marker and the matching `TypeId` prove the allocation is a
            //   `Header<DLManagedTensorVersioned, O>` with an initialised owner;
            // - this only computes a field address inside that live allocation.
            Raw::Versioned(ptr) => unsafe {
                (&raw const (*Header::<_, O>::of(ptr)).owner).cast::<O>()
            },
            // SAFETY: as above, for `Header<DLManagedTensor, O>`.
            Raw::Legacy(ptr) => unsafe {
                (&raw const (*Header::<_, O>::of(ptr)).owner).cast::<O>()
            },
        })
    }

    /// Takes the owner value back out of a tensor made by this crate with owner type `O`
    /// ([`from_owner`](Self::from_owner), [`from_buffer`](Self::from_buffer); array
    /// exports own an `Array<A, D>` or a shared `ArcArray<A, D>`), freeing the header
    /// without running the deleter: the zero-copy way back for custom containers. Any
    /// other tensor comes back in `Err`.
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
        if self.owner_ptr::<O>().is_none() {
            return Err(self);
        }
        let this = ManuallyDrop::new(self);
        Ok(match this.raw {
            // SAFETY:
            // - `owner_ptr::<O>` proved the allocation is a `Header<_, O>` made by `build`;
            // - `this` is never dropped, so the deleter never runs and the owner is
            //   read (moved out) exactly once before the memory is freed.
            Raw::Versioned(ptr) => unsafe { Header::<_, O>::take(ptr) },
            // SAFETY: as above, for the legacy header.
            Raw::Legacy(ptr) => unsafe { Header::<_, O>::take(ptr) },
        })
    }
}

impl Drop for ManagedTensor {
    fn drop(&mut self) {
        match self.raw {
            Raw::Versioned(ptr) => {
                // SAFETY:
                // - the header is valid until its deleter runs, which is here;
                // - `deleter` is in the prefix that every major version keeps stable.
                if let Some(deleter) = unsafe { (*ptr.as_ptr()).deleter } {
                    // SAFETY:
                    // - we own the tensor and call its deleter exactly once (`Drop`);
                    // - the producer allowed any thread to call it.
                    unsafe { deleter(ptr.as_ptr()) }
                }
            }
            Raw::Legacy(ptr) => {
                // SAFETY: the header is valid until its deleter runs, which is here.
                if let Some(deleter) = unsafe { (*ptr.as_ptr()).deleter } {
                    // SAFETY: as above, for the legacy deleter.
                    unsafe { deleter(ptr.as_ptr()) }
                }
            }
        }
    }
}

impl fmt::Debug for ManagedTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedTensor")
            .field("shape", &self.shape())
            .field("strides", &self.strides())
            .field("dtype", &self.dtype())
            .field("device", &self.device())
            .field("byte_offset", &self.byte_offset())
            .field("flags", &self.flags())
            .field("version", &self.version())
            .finish()
    }
}

fn check_array_ptr(ptr: *const i64, what: &'static str) -> Result<()> {
    if ptr.is_null() {
        return Err(Error::NullPointer { what });
    }
    if !ptr.is_aligned() {
        return Err(Error::Misaligned {
            what,
            address: ptr as usize,
            align: align_of::<i64>(),
        });
    }
    Ok(())
}

/// A slice of `len` values at `ptr`; empty without touching `ptr` when `len == 0`.
///
/// # Safety
///
/// - if `len > 0`, `ptr` is non-null, aligned, and points to `len` initialised values
///   that stay valid and unmodified for `'a`.
unsafe fn raw_slice<'a, T>(ptr: *const T, len: usize) -> &'a [T] {
    if len == 0 {
        return &[];
    }
    // SAFETY:
    // - `len > 0`, so the caller guarantees `ptr` is non-null, aligned and points to
    //   `len` initialised values valid for `'a`;
    // - `len` values were allocated by the producer, so their size fits `isize`.
    unsafe { core::slice::from_raw_parts(ptr, len) }
}

// ---------------------------------------------------------------------------------------
// Producer side: one allocation holds the managed struct, our bookkeeping, the owner and
// the shape and strides arrays.
// ---------------------------------------------------------------------------------------

/// Marks headers allocated by this crate (version-specific, so two copies of the crate
/// in one process never mistake each other's headers).
static EXPORT_MARKER: [u8; 24] = *b"dlpack-core 0.1 export\0\0";

fn export_marker() -> *mut c_void {
    (&raw const EXPORT_MARKER).cast_mut().cast()
}

/// The two managed structs a header can start with.
pub(crate) trait Abi: Sized + 'static {
    fn new(
        dl_tensor: DLTensor,
        flags: u64,
        manager_ctx: *mut c_void,
        deleter: unsafe extern "C" fn(*mut Self),
    ) -> Self;
    fn into_tensor(ptr: NonNull<Self>) -> ManagedTensor;
}

impl Abi for DLManagedTensorVersioned {
    fn new(
        dl_tensor: DLTensor,
        flags: u64,
        manager_ctx: *mut c_void,
        deleter: unsafe extern "C" fn(*mut Self),
    ) -> Self {
        Self {
            version: DLPackVersion::CURRENT,
            manager_ctx,
            deleter: Some(deleter),
            flags,
            dl_tensor,
        }
    }
    fn into_tensor(ptr: NonNull<Self>) -> ManagedTensor {
        ManagedTensor {
            raw: Raw::Versioned(ptr),
        }
    }
}

impl Abi for DLManagedTensor {
    fn new(
        dl_tensor: DLTensor,
        _flags: u64,
        manager_ctx: *mut c_void,
        deleter: unsafe extern "C" fn(*mut Self),
    ) -> Self {
        Self {
            dl_tensor,
            manager_ctx,
            deleter: Some(deleter),
        }
    }
    fn into_tensor(ptr: NonNull<Self>) -> ManagedTensor {
        ManagedTensor {
            raw: Raw::Legacy(ptr),
        }
    }
}

/// The part of a header that does not depend on the owner type.
#[repr(C)]
struct Head<M> {
    managed: M,
    owner_type: TypeId,
    ndim: usize,
}

/// A header made by this crate; `2 * ndim` `i64`s (shape, then strides) follow it.
#[repr(C)]
struct Header<M, O> {
    head: Head<M>,
    owner: ManuallyDrop<O>,
}

impl<M: Abi, O> Header<M, O> {
    /// The layout of the allocation and the offset of the shape array in it.
    fn layout(ndim: usize) -> (Layout, usize) {
        let dims = Layout::array::<i64>(2 * ndim).expect("ndim comes from an i32");
        let (layout, offset) = Layout::new::<Self>()
            .extend(dims)
            .expect("a header with i32::MAX dimensions fits isize on 64-bit targets");
        (layout.pad_to_align(), offset)
    }

    fn of(ptr: NonNull<M>) -> *mut Self {
        ptr.as_ptr().cast()
    }

    /// Moves the owner out and frees the allocation.
    ///
    /// # Safety
    ///
    /// - `ptr` points to a live `Header<M, O>` made by `build` with an initialised owner;
    /// - its deleter is never called afterwards.
    unsafe fn take(ptr: NonNull<M>) -> O {
        let header = Self::of(ptr);
        // SAFETY: the caller guarantees `header` is live and its owner initialised.
        let ndim = unsafe { (*header).head.ndim };
        // SAFETY: the caller guarantees `header` is live; this only computes an address.
        let owner_ptr = unsafe { &raw const (*header).owner };
        // SAFETY:
        // - the owner is initialised and, since the deleter never runs, read only here;
        // - `owner_ptr` is aligned and points into the live allocation.
        let owner = unsafe { ptr::read(owner_ptr) };
        // SAFETY: the memory was allocated by `build` with exactly this layout.
        unsafe { alloc::dealloc(header.cast(), Self::layout(ndim).0) };
        ManuallyDrop::into_inner(owner)
    }

    /// The deleter of every header made by `build`.
    ///
    /// # Safety
    ///
    /// - `managed` is a pointer returned by `build::<M, O>`, not yet deleted or taken.
    unsafe extern "C" fn delete(managed: *mut M) {
        let header = managed.cast::<Self>();
        // SAFETY: the caller passes a live header made by `build::<M, O>`.
        let ndim = unsafe { (*header).head.ndim };
        // SAFETY: the header is live (see above) and nothing else references its owner.
        let owner: &mut ManuallyDrop<O> = unsafe { &mut (*header).owner };
        // SAFETY:
        // - the owner is initialised and dropped only here, once;
        // - a panic in its `Drop` cannot unwind out of this `extern "C"` fn (it aborts).
        unsafe { ManuallyDrop::drop(owner) };
        // SAFETY: the memory was allocated by `build` with exactly this layout.
        unsafe { alloc::dealloc(header.cast(), Self::layout(ndim).0) };
    }
}

/// What a producer declares about the memory it hands over.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Desc<'a> {
    pub(crate) dims: Dims<'a>,
    pub(crate) dtype: DataType,
    pub(crate) device: Device,
    pub(crate) byte_offset: u64,
    pub(crate) flags: u64,
}

/// Shape and strides, in DLPack's or in ndarray's integer types.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Dims<'a> {
    /// DLPack's `i64`s; `None` strides are written as C-contiguous ones.
    Raw {
        shape: &'a [i64],
        strides: Option<&'a [i64]>,
    },
    /// ndarray's `usize` extents and `isize` strides, each known to fit `i64`.
    Native {
        shape: &'a [usize],
        strides: NativeStrides<'a>,
    },
}

/// ndarray strides: `isize`s, or `usize`s holding `isize` bit patterns (as ndarray's
/// `Dimension` stores them).
#[derive(Clone, Copy, Debug)]
pub(crate) enum NativeStrides<'a> {
    Signed(&'a [isize]),
    #[cfg_attr(not(feature = "ndarray"), allow(dead_code))]
    Bits(&'a [usize]),
}

impl NativeStrides<'_> {
    fn write_to(self, out: &mut [i64]) {
        match self {
            Self::Signed(s) => out.iter_mut().zip(s).for_each(|(o, &s)| *o = s as i64),
            Self::Bits(s) => out
                .iter_mut()
                .zip(s)
                .for_each(|(o, &s)| *o = s as isize as i64),
        }
    }
}

impl Dims<'_> {
    fn ndim(&self) -> usize {
        match self {
            Self::Raw { shape, .. } => shape.len(),
            Self::Native { shape, .. } => shape.len(),
        }
    }
}

/// Allocates one header holding `owner`, the managed struct, shape and strides; the
/// deleter drops `owner` and frees the allocation.
///
/// # Safety
///
/// - the rank fits `i32`, strides (when given) have one value per axis, and `Native`
///   values fit `i64`;
/// - the pointer returned by `data` (called once, with the owner at its final address)
///   plus `desc.byte_offset` satisfies the data requirements of
///   [`ManagedTensor::from_raw`] for `desc` for as long as the owner is alive and not
///   moved, given that from then on the owner is only read through shared references
///   (`ManagedTensor::owner`, crate-internal, for owners whose shared references
///   cannot write the data) until it is dropped, or moved out together with the tensor
///   ([`ManagedTensor::into_owner`], which ends the tensor).
pub(crate) unsafe fn build<M: Abi, O: Send + 'static>(
    owner: O,
    data: impl FnOnce(&mut O) -> *mut c_void,
    desc: Desc<'_>,
) -> ManagedTensor {
    let ndim = desc.dims.ndim();
    let (layout, dims_offset) = Header::<M, O>::layout(ndim);
    // SAFETY: the layout has non-zero size (it contains the managed struct).
    let base = unsafe { alloc::alloc(layout) };
    if base.is_null() {
        alloc::handle_alloc_error(layout);
    }
    let header = base.cast::<Header<M, O>>();
    // SAFETY: `base` is a fresh allocation of `layout`, which starts with a
    // `Header<M, O>` and is aligned for it; this only computes a field address.
    let owner_ptr = unsafe { &raw mut (*header).owner };
    // SAFETY:
    // - `owner_ptr` is aligned and inside the allocation;
    // - the owner field is written before anyone reads it.
    unsafe { owner_ptr.write(ManuallyDrop::new(owner)) };
    // SAFETY: the owner was just initialised; no other reference to it exists.
    let owner_ref: &mut O = unsafe { &mut (*header).owner };
    let data_ptr = data(owner_ref);
    // SAFETY: `dims_offset` was computed by `Layout::extend` for this allocation.
    let shape_ptr = unsafe { base.add(dims_offset) }.cast::<i64>();
    // SAFETY: the allocation holds `2 * ndim` `i64`s at `shape_ptr`, aligned by `extend`.
    unsafe { ptr::write_bytes(shape_ptr, 0, 2 * ndim) };
    // SAFETY:
    // - `2 * ndim` aligned, now initialised `i64`s inside the fresh allocation;
    // - nothing else references them while this borrow lives.
    let dims: &mut [i64] = unsafe { core::slice::from_raw_parts_mut(shape_ptr, 2 * ndim) };
    let (shape_out, strides_out) = dims.split_at_mut(ndim);
    match desc.dims {
        Dims::Raw { shape, strides } => {
            shape_out.copy_from_slice(shape);
            match strides {
                Some(strides) => strides_out.copy_from_slice(strides),
                // DLPack 1.2+ consumers need explicit strides: fill in C-contiguous ones
                // (wrapping only for a shape that no consumer would accept anyway).
                None => {
                    let mut stride: i64 = 1;
                    for (out, &extent) in strides_out.iter_mut().zip(shape).rev() {
                        *out = stride;
                        stride = stride.wrapping_mul(extent);
                    }
                }
            }
        }
        Dims::Native { shape, strides } => {
            for (out, &d) in shape_out.iter_mut().zip(shape) {
                *out = d as i64;
            }
            strides.write_to(strides_out);
        }
    }
    let strides_ptr = strides_out.as_mut_ptr();
    let shape_ptr = shape_out.as_mut_ptr();
    let dl_tensor = DLTensor {
        data: data_ptr,
        device: desc.device.to_raw(),
        ndim: ndim as i32,
        dtype: desc.dtype.to_raw(),
        shape: if ndim == 0 {
            ptr::null_mut()
        } else {
            shape_ptr
        },
        strides: if ndim == 0 {
            ptr::null_mut()
        } else {
            strides_ptr
        },
        byte_offset: desc.byte_offset,
    };
    let head = Head {
        managed: M::new(
            dl_tensor,
            desc.flags,
            export_marker(),
            Header::<M, O>::delete,
        ),
        owner_type: TypeId::of::<O>(),
        ndim,
    };
    // SAFETY: as for `owner_ptr`, this only computes a field address.
    let head_ptr = unsafe { &raw mut (*header).head };
    // SAFETY: `head` is the first field of the fresh, aligned allocation.
    unsafe { head_ptr.write(head) };
    // SAFETY: `header` came from a successful allocation, so it is non-null.
    let managed = unsafe { NonNull::new_unchecked(header.cast::<M>()) };
    M::into_tensor(managed)
}

/// The owner of an ABI adapter: the tensor it wraps.
struct Adapter(ManagedTensor);

/// Wraps `inner` in a header of the other ABI; the wrapper's deleter drops `inner`.
fn wrap<M: Abi>(inner: ManagedTensor) -> NonNull<M> {
    let t = *inner.dl_tensor();
    let shape: Vec<i64> = inner.shape().to_vec();
    let strides: Option<Vec<i64>> = inner.strides().map(<[i64]>::to_vec);
    let desc = Desc {
        dims: Dims::Raw {
            shape: &shape,
            strides: strides.as_deref(),
        },
        dtype: inner.dtype(),
        device: inner.device(),
        byte_offset: t.byte_offset,
        flags: inner.flags(),
    };
    // SAFETY:
    // - `ndim` came from an `i32` and strides, if any, have `ndim` values;
    // - the data pointer is the wrapped tensor's, valid while `inner` (the owner) lives,
    //   with the same description, so its producer's guarantees carry over.
    let tensor = unsafe { build::<M, Adapter>(Adapter(inner), |a| a.0.data(), desc) };
    let tensor = ManuallyDrop::new(tensor);
    match tensor.raw {
        Raw::Versioned(ptr) => ptr.cast(),
        Raw::Legacy(ptr) => ptr.cast(),
    }
}

impl ManagedTensor {
    /// Makes a tensor over a buffer of elements that `owner` owns, without copying: the
    /// owner moves into the tensor's single allocation and is dropped by its deleter.
    ///
    /// Element `[0, 0, ...]` is `buffer[offset]`; element `index` is at
    /// `offset + sum(index[i] * strides[i])`, strides in elements and possibly negative.
    /// Every reachable element must lie inside the buffer, or this is an
    /// [`Error::InvalidLayout`]. The tensor is on the CPU, writable, flags 0.
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
        // Check against the buffer as it is now; `data` below re-checks the length at
        // the owner's final address, in case `as_mut` is not stable across calls.
        let len = owner.as_mut().len();
        layout::check_in_buffer(shape, strides, offset, len)?;
        let desc = Desc {
            dims: Dims::Native {
                shape,
                strides: NativeStrides::Signed(strides),
            },
            dtype: A::DTYPE,
            device: Device::CPU,
            byte_offset: 0,
            flags,
        };
        let data = move |owner: &mut O| -> *mut c_void {
            let buf = owner.as_mut();
            if buf.len() != len {
                // A buffer that changed length between two `as_mut` calls: refuse by
                // pointing at nothing; the tensor then fails validation as NULL data
                // unless it is empty. Never happens with `Vec`, `Box<[A]>`, arrays.
                return ptr::null_mut();
            }
            buf.as_mut_ptr().wrapping_add(offset).cast()
        };
        // SAFETY:
        // - `check_in_buffer` checked the rank fits i32, one stride per axis, values fit i64;
        // - `check_in_buffer` proved every element reachable from `buffer[offset]` lies
        //   inside the buffer, which the owner keeps alive, unmoved and only read until
        //   its drop (its heap data or inline data now lives inside our allocation);
        // - the `&mut [A]` from `as_mut` is exclusive, so nobody else accesses it, and it
        //   is writable; `A: Element` makes the dtype match the memory.
        let tensor = unsafe { build::<DLManagedTensorVersioned, O>(owner, data, desc) };
        if tensor.data().is_null() && !shape.contains(&0) {
            return Err(Error::InvalidLayout {
                reason: "buffer changed length between two calls to `as_mut`".into(),
            });
        }
        Ok(tensor)
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
    /// [`Error::InvalidLayout`] when `strides` and `shape` differ in length or the rank
    /// does not fit `i32`.
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
        if i32::try_from(shape.len()).is_err() {
            return Err(Error::InvalidLayout {
                reason: format!("ndim {} does not fit i32", shape.len()),
            });
        }
        if let Some(strides) = strides {
            if strides.len() != shape.len() {
                return Err(Error::InvalidLayout {
                    reason: format!("{} strides for {} dimensions", strides.len(), shape.len()),
                });
            }
        }
        let desc = Desc {
            dims: Dims::Raw { shape, strides },
            dtype,
            device,
            byte_offset: 0,
            flags,
        };
        // SAFETY:
        // - lengths were checked above;
        // - the caller guarantees the data requirements for as long as the owner lives.
        Ok(unsafe { build::<DLManagedTensorVersioned, O>(owner, data, desc) })
    }
}
