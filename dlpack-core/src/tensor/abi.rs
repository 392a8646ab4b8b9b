//! The standard's two managed-tensor structs, `DLManagedTensorVersioned` (DLPack 1.x) and
//! the legacy `DLManagedTensor`, behind one sealed trait: field accessors and the one
//! raw delete, so that the ownership code is written once for both.

use core::ffi::c_void;
use core::ptr::NonNull;

use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor};

mod sealed {
    pub(crate) trait Sealed {}
    impl Sealed for crate::ffi::DLManagedTensorVersioned {}
    impl Sealed for crate::ffi::DLManagedTensor {}
}

/// A pointer to a managed tensor of either ABI.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Raw {
    Versioned(NonNull<DLManagedTensorVersioned>),
    Legacy(NonNull<DLManagedTensor>),
}

/// Evaluates `$body` with `$ptr` bound to the pointer of a [`Raw`], whatever its ABI:
/// the body is written once and compiled for each struct.
macro_rules! with_abi {
    ($raw:expr, $ptr:ident => $body:expr) => {
        match $raw {
            $crate::tensor::abi::Raw::Versioned($ptr) => $body,
            $crate::tensor::abi::Raw::Legacy($ptr) => $body,
        }
    };
}
pub(crate) use with_abi;

/// What this crate needs of a managed-tensor struct.
pub(crate) trait Abi: sealed::Sealed + Sized + 'static {
    /// A struct describing `dl_tensor`.
    fn new(
        dl_tensor: DLTensor,
        flags: u64,
        manager_ctx: *mut c_void,
        deleter: unsafe extern "C" fn(*mut Self),
    ) -> Self;

    /// The pointer, tagged with its ABI.
    fn raw(ptr: NonNull<Self>) -> Raw;

    /// The plain tensor description.
    fn dl_tensor(&self) -> &DLTensor;

    /// The producer's context.
    fn manager_ctx(&self) -> *mut c_void;

    /// The deleter.
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)>;

    /// The `DLPACK_FLAG_BITMASK_*` flags (0 for the legacy struct).
    fn flags(&self) -> u64;

    /// The version (`None` for the legacy struct).
    fn version(&self) -> Option<DLPackVersion>;

    /// Reads the deleter through a raw pointer, touching only the prefix that every
    /// major version of the standard keeps stable.
    ///
    /// # Safety
    ///
    /// - `ptr` points to a readable, aligned struct of this kind, of any major version.
    unsafe fn deleter_of(ptr: NonNull<Self>) -> Option<unsafe extern "C" fn(*mut Self)>;
}

/// The accessors of the fields both structs have, under the same names.
macro_rules! common_fields {
    () => {
        fn dl_tensor(&self) -> &DLTensor {
            &self.dl_tensor
        }

        fn manager_ctx(&self) -> *mut c_void {
            self.manager_ctx
        }

        fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
            self.deleter
        }

        unsafe fn deleter_of(ptr: NonNull<Self>) -> Option<unsafe extern "C" fn(*mut Self)> {
            // SAFETY:
            // - the caller guarantees `ptr` is readable and aligned;
            // - only the field is read, no reference to the whole struct is made, and a
            //   versioned struct keeps `deleter` in the prefix (`version`,
            //   `manager_ctx`, `deleter`) that every major version keeps stable.
            unsafe { (*ptr.as_ptr()).deleter }
        }
    };
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

    fn raw(ptr: NonNull<Self>) -> Raw {
        Raw::Versioned(ptr)
    }

    fn flags(&self) -> u64 {
        self.flags
    }

    fn version(&self) -> Option<DLPackVersion> {
        Some(self.version)
    }

    common_fields!();
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

    fn raw(ptr: NonNull<Self>) -> Raw {
        Raw::Legacy(ptr)
    }

    fn flags(&self) -> u64 {
        0
    }

    fn version(&self) -> Option<DLPackVersion> {
        None
    }

    common_fields!();
}

/// Releases a managed tensor: calls its deleter once, or nothing when it is NULL. Every
/// path that lets go of a tensor (`Drop`, a capsule's destructor, a rejected import)
/// comes here.
///
/// # Safety
///
/// - `ptr` points to a readable, aligned managed tensor of any major version, owned by
///   the caller, who gives it up: nobody calls its deleter again or uses it afterwards;
/// - its deleter may be called from this thread.
pub(crate) unsafe fn delete<M: Abi>(ptr: NonNull<M>) {
    // SAFETY: the caller guarantees the struct is readable and aligned.
    if let Some(deleter) = unsafe { M::deleter_of(ptr) } {
        // SAFETY: the caller owns the tensor and gives it up: this is the one call.
        unsafe { deleter(ptr.as_ptr()) }
    }
}
