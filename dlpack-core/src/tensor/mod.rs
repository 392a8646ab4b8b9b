//! [`ManagedTensor`], the one owning handle of a DLPack tensor.
//!
//! - `abi`: the standard's two managed structs behind one sealed trait, and the one
//!   raw delete;
//! - `own`: the tensors this crate makes, each one allocation (header, owner, shape
//!   and strides), and how they are recognised;
//! - `producer`: `from_buffer` and `from_owner`, for users' own containers;
//! - `span`: where a tensor's elements lie in memory ([`ByteSpan`], the layout check
//!   every bridge makes);
//! - `runs`: a tensor's bytes in C order, as runs of its memory, for copies and writers
//!   of any element type;
//! - `buffers`: the buffers this crate allocates for copies and for files read;
//! - `adapter`: a tensor of one ABI wrapped in a header of the other.

mod abi;
mod adapter;
// The features that copy tensor bytes, read them from a file or allocate arrays.
#[cfg(any(
    feature = "pyo3",
    feature = "burn",
    feature = "safetensors",
    feature = "dlpark",
    feature = "ndarray"
))]
mod buffers;
mod own;
mod producer;
#[cfg(any(
    feature = "pyo3",
    feature = "burn",
    feature = "safetensors",
    feature = "dlpark"
))]
mod runs;
mod span;

use core::ffi::c_void;
use core::fmt;
use core::ptr::NonNull;

use crate::device::Device;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::ffi::{
    DLManagedTensor, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED,
    DLPACK_FLAG_BITMASK_READ_ONLY, DLPackVersion, DLTensor,
};
use crate::layout;

pub(crate) use abi::{Abi, Raw, delete, with_abi};
use adapter::{Adapter, wrap};
#[cfg(any(feature = "pyo3", feature = "burn", feature = "safetensors"))]
pub(crate) use buffers::AlignedBytes;
#[cfg(any(feature = "safetensors", feature = "ndarray"))]
pub(crate) use buffers::aligned_elements;
#[cfg(feature = "safetensors")]
pub(crate) use buffers::huge_pages;
#[cfg(feature = "safetensors")]
pub(crate) use buffers::typed::{element_bytes_mut, into_bools};
#[cfg(feature = "pyo3")]
pub(crate) use own::ForeignOwner;
pub(crate) use own::{Desc, Own, build};
pub use span::ByteSpan;

/// An owned DLPack tensor: the one handle through which this crate holds a
/// `DLManagedTensorVersioned` (DLPack 1.x) or a legacy `DLManagedTensor`.
///
/// - **Consume once.** It is not `Clone`; passing it on moves it.
/// - **Deleter exactly once.** `Drop` calls the producer's deleter once, and never a NULL
///   one. [`into_raw`](Self::into_raw) hands that duty to the receiver instead.
/// - **Either ABI.** [`into_raw`](Self::into_raw) and
///   [`into_raw_legacy`](Self::into_raw_legacy) give whichever struct a consumer wants,
///   wrapping the other kind in one allocation whose deleter chains to the original.
/// - **Exclusive or shared.** Mutable views need a tensor whose data no other live
///   handle can reach ([`is_exclusive`](Self::is_exclusive)): see the
///   [import safety guide](crate::guide::import_safety).
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
    /// The managed struct, of the ABI that `kind` says.
    ptr: NonNull<c_void>,
    kind: Kind,
}

/// What a [`ManagedTensor`] holds, beside the pointer (one byte, so that the handle stays
/// two words).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Kind(u8);

impl Kind {
    /// The pointer is a legacy `DLManagedTensor` (else a `DLManagedTensorVersioned`).
    const LEGACY: u8 = 1 << 0;
    /// Other live handles may reach the data (see "Import safety").
    const SHARED: u8 = 1 << 1;
    /// The deleter may run Python code: the tensor came from Python, and dropping it
    /// keeps the interpreter's exception state intact.
    #[cfg(feature = "pyo3")]
    const PYTHON: u8 = 1 << 2;
    /// Foreign code may have written the elements (the tensor was handed to Python as a
    /// `Tensor`): an owner of `bool`s is not taken back unchecked (`into_owner`).
    #[cfg(feature = "pyo3")]
    const EXPOSED: u8 = 1 << 3;

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }
}

// SAFETY:
// - `from_raw`/`from_raw_legacy` require that the deleter may be called from any thread
//   and that the data may be accessed from any thread; our own headers hold owners that
//   are `Send` (`build` requires it), so dropping them elsewhere is sound;
// - the handle holds no thread-local state.
unsafe impl Send for ManagedTensor {}
// SAFETY:
// - through `&ManagedTensor` only metadata is read and read-only views of `Element`
//   data (which are `Sync`) are created; nothing is mutated through a shared reference;
// - writers outside this handle are ruled out while it lives: by the `from_raw`
//   contract, or for a shared tensor by the protocol (see "Import safety").
unsafe impl Sync for ManagedTensor {}

/// Evaluates `$body` with `$ptr` bound to the pointer of a tensor's header and `$m` to
/// the header itself, borrowed as the struct of its ABI, whatever that is: the one
/// borrow of a header (see [`with_abi!`]).
macro_rules! with_header {
    ($tensor:expr, $ptr:ident, $m:ident => $body:expr) => {{
        let tensor: &$crate::ManagedTensor = $tensor;
        $crate::tensor::abi::with_abi!(tensor.raw(), $ptr => {
            // SAFETY: `$ptr` is the handle's own header pointer, of its ABI.
            let $m = unsafe { $crate::tensor::borrow_header(tensor, $ptr) };
            $body
        })
    }};
}
pub(crate) use with_header;

/// The header behind `ptr`, borrowed for as long as `tensor` is.
///
/// # Safety
///
/// - `ptr` is `tensor`'s own header pointer, and `M` its ABI (as `with_abi!` on
///   `tensor.raw()` binds it).
#[inline]
pub(crate) unsafe fn borrow_header<M>(_tensor: &ManagedTensor, ptr: NonNull<M>) -> &M {
    // SAFETY:
    // - the pointer is non-null, aligned and valid until the deleter runs (the
    //   `from_raw` contract, or our own header), which is after the handle dies, and
    //   the borrow is tied to the handle's;
    // - nobody mutates the struct while the handle owns it.
    unsafe { ptr.as_ref() }
}

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
    /// The tensor is [exclusive](Self::is_exclusive): the contract below says that
    /// nobody else uses the data.
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
        if let Err(err) = Error::check_version(version) {
            // SAFETY: the caller hands the tensor over; its deleter may be called from
            // here, reading only the stable prefix.
            unsafe { delete(ptr) };
            return Err(err);
        }
        Self::checked(Raw::Versioned(ptr))
    }

    /// Takes ownership of a DLPack 1.x tensor whose producer keeps other handles to the
    /// same memory (a framework's tensor that still has views of its storage): the
    /// result is [shared](Self::is_exclusive), so mutable views are refused, while
    /// read-only views rely on the DLPack protocol's promise, as Python imports do.
    ///
    /// Checks as [`from_raw`](Self::from_raw) does, with the deleter run on every error
    /// but a NULL pointer.
    ///
    /// # Safety
    ///
    /// As for [`from_raw`](Self::from_raw), except the fourth point: other handles of the
    /// producer may reach the data, and nobody writes it while a view borrowed from
    /// this tensor is read (the protocol's promise to consumers).
    pub unsafe fn from_raw_shared(ptr: *mut DLManagedTensorVersioned) -> Result<Self> {
        // SAFETY:
        // - the caller's contract is `from_raw`'s but for exclusive access;
        // - the handle is marked shared before any view can be made, which is all that
        //   `from_raw`'s exclusivity point is needed for.
        unsafe { Self::from_raw(ptr) }.map(Self::into_shared)
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
        Self::checked(Raw::Legacy(ptr))
    }

    /// An exclusive handle of `raw` after checking its header; on error the handle is
    /// dropped (the deleter runs).
    fn checked(raw: Raw) -> Result<Self> {
        // SAFETY: `from_raw`'s caller hands over a valid header (and the version of a
        // versioned one was checked).
        unsafe { Self::from_raw_unchecked(raw) }.check()
    }

    /// Checks what `from_raw` checks of the header; on error the handle is dropped (the
    /// deleter runs).
    pub(crate) fn check(self) -> Result<Self> {
        let tensor = self;
        let t = tensor.dl_tensor();
        if t.ndim < 0 {
            return Err(Error::NegativeNdim { ndim: t.ndim });
        }
        if t.ndim > 0 {
            check_array_ptr(t.shape, "shape")?;
            if !t.strides.is_null() {
                check_array_ptr(t.strides, "strides")?;
            }
        }
        Ok(tensor)
    }

    /// An exclusive handle of `raw`, unchecked.
    ///
    /// # Safety
    ///
    /// - `raw` satisfies the requirements of [`from_raw`](Self::from_raw) (of a
    ///   versioned tensor, the major version is 1), except that nobody else needs to
    ///   stay away from the data if the handle is marked shared before any view is made.
    pub(crate) unsafe fn from_raw_unchecked(raw: Raw) -> Self {
        let (ptr, kind) = match raw {
            Raw::Versioned(ptr) => (ptr.cast(), Kind(0)),
            Raw::Legacy(ptr) => (ptr.cast(), Kind(Kind::LEGACY)),
        };
        Self { ptr, kind }
    }

    /// Marks the tensor shared: another live handle may reach its data, so mutable
    /// views are refused from now on. Bridges to other frameworks use it for exports
    /// of tensors that the framework may still reach (a torch tensor with other views
    /// of its storage). Safe: it only takes a permission away.
    #[must_use]
    pub fn into_shared(mut self) -> Self {
        self.mark_shared();
        self
    }

    /// [`into_shared`](Self::into_shared) in place.
    pub(crate) fn mark_shared(&mut self) {
        self.kind.0 |= Kind::SHARED;
    }

    /// Marks the tensor as handed to Python, whose consumers may write its elements.
    #[cfg(feature = "pyo3")]
    pub(crate) fn mark_exposed(&mut self) {
        self.kind.0 |= Kind::EXPOSED;
    }

    /// Whether foreign code may have written a `bool` tensor's elements, so that bytes
    /// other than 0 and 1 may be there.
    pub(crate) fn may_hold_foreign_bools(&self) -> bool {
        #[cfg(feature = "pyo3")]
        {
            self.kind.has(Kind::EXPOSED)
                && self.dtype().code() == crate::ffi::DLDataTypeCode::kDLBool
        }
        #[cfg(not(feature = "pyo3"))]
        {
            false
        }
    }

    /// Marks the tensor as coming from Python: its deleter may run Python code.
    #[cfg(feature = "pyo3")]
    pub(crate) fn into_python(mut self) -> Self {
        self.kind.0 |= Kind::PYTHON;
        self
    }

    /// Whether the tensor came from Python (see [`into_python`](Self::into_python)).
    #[cfg(feature = "pyo3")]
    pub(crate) fn is_from_python(&self) -> bool {
        self.kind.has(Kind::PYTHON)
    }

    /// Whether no other live handle can reach the data, so that mutable views
    /// (`as_array_mut`, `DLPackArray::view_mut`) are allowed.
    ///
    /// True for tensors made by this crate's exports and for tensors taken over with
    /// an `unsafe` constructor, whose caller promised it; false for imports through a
    /// safe path that cannot prove it (from Python, unless the producer copied the
    /// data for this import). See "Import safety" in the
    /// [import safety guide](crate::guide::import_safety).
    #[inline]
    pub fn is_exclusive(&self) -> bool {
        !self.kind.has(Kind::SHARED)
    }

    /// Declares that nothing else reaches the data, so that mutable views are allowed:
    /// for example after importing a NumPy array that Python no longer uses.
    ///
    /// # Safety
    ///
    /// - while a mutable view borrowed from this tensor lives, nobody else reads or
    ///   writes the data (Python code holding the original array, other threads, other
    ///   imports of the same object);
    /// - never a JAX array (immutable by contract), nor a torch tensor that autograd
    ///   tracks (`requires_grad`, or a view of one) while grad mode is on: a write behind
    ///   torch's back gives silently wrong gradients. (`DLPackArray::assume_exclusive`
    ///   on a typed Python argument checks torch's rule itself; this door cannot, as it
    ///   does not know where the tensor came from.)
    /// - while the tensor lives, nobody else writes it.
    pub unsafe fn assume_exclusive(&mut self) {
        self.kind.0 &= !Kind::SHARED;
    }

    /// The pointer, tagged with its ABI.
    #[inline]
    pub(super) fn raw(&self) -> Raw {
        if self.kind.has(Kind::LEGACY) {
            Raw::Legacy(self.ptr.cast())
        } else {
            Raw::Versioned(self.ptr.cast())
        }
    }

    /// Gives up ownership: returns the `DLManagedTensorVersioned` pointer, whose deleter
    /// the receiver must call once.
    ///
    /// A legacy tensor is wrapped in a new versioned struct (one allocation, flags 0)
    /// whose deleter frees the wrapper and calls the legacy deleter; a tensor that this
    /// crate wrapped the other way is unwrapped instead of wrapped twice. If that small
    /// allocation fails the process aborts, as `Box::new` does.
    pub fn into_raw(self) -> *mut DLManagedTensorVersioned {
        let this = self.unwrap_adapter();
        match this.raw() {
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
    /// A tensor flagged `READ_ONLY` comes back unchanged inside the
    /// [`ReadOnlyLegacyError`]: a legacy consumer would assume it may write. (Copy it
    /// first, or keep it versioned.)
    pub fn into_raw_legacy(self) -> Result<*mut DLManagedTensor, ReadOnlyLegacyError> {
        if self.is_read_only() {
            return Err(ReadOnlyLegacyError::new(self));
        }
        let this = self.unwrap_adapter();
        Ok(match this.raw() {
            Raw::Legacy(ptr) => {
                core::mem::forget(this);
                ptr.as_ptr()
            }
            Raw::Versioned(_) => wrap::<DLManagedTensor>(this).as_ptr(),
        })
    }

    /// Gives up ownership of the header as it is, of either ABI (no adapter made or
    /// unwrapped). The receiver must call its deleter once.
    #[cfg(feature = "pyo3")]
    pub(crate) fn into_raw_as_is(self) -> Raw {
        core::mem::ManuallyDrop::new(self).raw()
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
    #[inline]
    pub fn dl_tensor(&self) -> &DLTensor {
        with_header!(self, _ptr, m => m.dl_tensor())
    }

    /// Number of dimensions.
    #[inline]
    pub fn ndim(&self) -> usize {
        // `checked` rejected negative values.
        usize::try_from(self.dl_tensor().ndim).unwrap_or(0)
    }

    /// The extents, as the producer gave them (not yet validated: see `as_array`).
    #[inline]
    pub fn shape(&self) -> &[i64] {
        let t = self.dl_tensor();
        // SAFETY:
        // - `checked` ensured `shape` is non-null and aligned when `ndim > 0`;
        // - the producer guarantees `ndim` readable values that outlive `self`.
        unsafe { raw_slice(t.shape, self.ndim()) }
    }

    /// The strides in elements, or `None` when the producer passed NULL
    /// (C-contiguous, allowed before DLPack 1.2).
    #[inline]
    pub fn strides(&self) -> Option<&[i64]> {
        let t = self.dl_tensor();
        if t.strides.is_null() {
            return None;
        }
        // SAFETY:
        // - `strides` is non-null here, and `checked` ensured it is aligned;
        // - the producer guarantees `ndim` readable values that outlive `self`.
        Some(unsafe { raw_slice(t.strides, self.ndim()) })
    }

    /// The element type.
    #[inline]
    pub fn dtype(&self) -> DataType {
        DataType::from_raw(self.dl_tensor().dtype)
    }

    /// Where the data lives.
    #[inline]
    pub fn device(&self) -> Device {
        Device::from_raw(self.dl_tensor().device)
    }

    /// Offset in bytes from [`data`](Self::data) to the first element.
    #[inline]
    pub fn byte_offset(&self) -> u64 {
        self.dl_tensor().byte_offset
    }

    /// The raw data pointer as the producer gave it (see also
    /// [`data_ptr`](Self::data_ptr)).
    #[inline]
    pub fn data(&self) -> *mut c_void {
        self.dl_tensor().data
    }

    /// The address of the first element, `data + byte_offset` (computed with wrapping
    /// arithmetic; views check it).
    #[inline]
    pub fn data_ptr(&self) -> *mut c_void {
        let t = self.dl_tensor();
        t.data.wrapping_byte_add(t.byte_offset as usize)
    }

    /// The `DLPACK_FLAG_BITMASK_*` flags; always 0 for a legacy tensor.
    #[inline]
    pub fn flags(&self) -> u64 {
        with_header!(self, _ptr, m => m.flags())
    }

    /// Whether the producer forbids writes (`READ_ONLY`).
    #[inline]
    pub fn is_read_only(&self) -> bool {
        self.flags() & DLPACK_FLAG_BITMASK_READ_ONLY != 0
    }

    /// Whether the producer copied the data for this export (`IS_COPIED`).
    #[inline]
    pub fn is_copied(&self) -> bool {
        self.flags() & DLPACK_FLAG_BITMASK_IS_COPIED != 0
    }

    /// The DLPack version of a versioned tensor; `None` for a legacy one.
    #[inline]
    pub fn version(&self) -> Option<DLPackVersion> {
        with_header!(self, _ptr, m => m.version())
    }

    /// Whether this holds a legacy `DLManagedTensor`.
    #[inline]
    pub fn is_legacy(&self) -> bool {
        self.kind.has(Kind::LEGACY)
    }

    /// The number of elements, checked: the product of the extents, or an error for a
    /// negative extent or an overflow.
    pub fn num_elements(&self) -> Result<usize> {
        layout::element_count(self.shape())
    }
}

impl Drop for ManagedTensor {
    fn drop(&mut self) {
        #[cfg(feature = "pyo3")]
        if self.kind.has(Kind::PYTHON) {
            let raw = self.raw();
            // SAFETY: we own the tensor and give it up here, once; the producer allowed
            // any thread to call its deleter.
            let release = || with_abi!(raw, ptr => unsafe { delete(ptr) });
            crate::interpreter::release_python_tensor(release);
            return;
        }
        // SAFETY:
        // - we own the tensor and call its deleter exactly once (`Drop`);
        // - the producer allowed any thread to call it.
        with_abi!(self.raw(), ptr => unsafe { delete(ptr) });
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
            .field("exclusive", &self.is_exclusive())
            .finish()
    }
}

fn check_array_ptr(ptr: *const i64, what: &'static str) -> Result<()> {
    if ptr.is_null() {
        return Err(Error::NullPointer { what });
    }
    Error::check_aligned(what, ptr)
}

/// A slice of `len` values at `ptr`; empty without touching `ptr` when `len == 0`.
///
/// # Safety
///
/// - if `len > 0`, `ptr` is non-null, aligned, and points to `len` initialised values
///   that stay valid and unmodified for `'a`.
#[inline]
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

/// A `READ_ONLY` tensor was offered to the legacy ABI, which cannot carry the flag
/// ([`ManagedTensor::into_raw_legacy`], and the dlpark bridge's legacy hand-off).
///
/// The tensor is inside, untouched: take it back with
/// [`into_tensor`](Self::into_tensor) (to keep it versioned, or to copy it), or drop the
/// error, which drops the tensor and so runs its deleter once. Converting it into
/// [`Error`] gives [`Error::ReadOnlyLegacy`] and drops the tensor the same way.
pub struct ReadOnlyLegacyError {
    tensor: ManagedTensor,
}

impl ReadOnlyLegacyError {
    pub(crate) fn new(tensor: ManagedTensor) -> Self {
        Self { tensor }
    }

    /// The refused tensor.
    pub fn tensor(&self) -> &ManagedTensor {
        &self.tensor
    }

    /// Gives the refused tensor back.
    pub fn into_tensor(self) -> ManagedTensor {
        self.tensor
    }
}

impl fmt::Debug for ReadOnlyLegacyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadOnlyLegacyError")
            .field("tensor", &self.tensor)
            .finish()
    }
}

impl fmt::Display for ReadOnlyLegacyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Error::ReadOnlyLegacy, f)
    }
}

impl std::error::Error for ReadOnlyLegacyError {}

impl From<ReadOnlyLegacyError> for Error {
    /// [`Error::ReadOnlyLegacy`]; the tensor is dropped, so its deleter runs once.
    fn from(_: ReadOnlyLegacyError) -> Self {
        Error::ReadOnlyLegacy
    }
}
