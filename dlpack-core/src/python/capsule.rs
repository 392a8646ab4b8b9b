//! DLPack capsules: their names, creation, destruction (the specification's destructor,
//! hardened against tampering) and consumption, and how deleters that may run Python
//! code are called.

use core::ffi::{CStr, c_void};
use core::ptr::{self, NonNull};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};

use crate::error::Error;
use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLPACK_MAJOR_VERSION};
use crate::tensor::{Abi, ManagedTensor, Raw, delete};

/// Name of an unconsumed legacy capsule.
const LEGACY: &CStr = c"dltensor";
/// Name of a consumed legacy capsule.
const USED_LEGACY: &CStr = c"used_dltensor";
/// Name of an unconsumed versioned capsule.
const VERSIONED: &CStr = c"dltensor_versioned";
/// Name of a consumed versioned capsule.
const USED_VERSIONED: &CStr = c"used_dltensor_versioned";

/// Moves a header into a new capsule whose destructor frees it unless it was consumed.
#[inline]
pub(super) fn into_capsule(py: Python<'_>, tensor: ManagedTensor) -> PyResult<Bound<'_, PyAny>> {
    // `export` makes legacy headers only over writable or freshly copied data (checked
    // there).
    match tensor.into_raw_as_is() {
        Raw::Versioned(ptr) => capsule(py, ptr, VERSIONED, destroy_versioned),
        Raw::Legacy(ptr) => capsule(py, ptr, LEGACY, destroy_legacy),
    }
}

/// A capsule named `name` owning the managed tensor at `pointer`; its context is the
/// same pointer, so that the destructor frees only the tensor it was made with.
#[inline]
fn capsule<'py, M: Abi>(
    py: Python<'py>,
    pointer: NonNull<M>,
    name: &'static CStr,
    destructor: unsafe extern "C" fn(*mut ffi::PyObject),
) -> PyResult<Bound<'py, PyAny>> {
    let tensor = pointer;
    let pointer = pointer.as_ptr().cast::<c_void>();
    // SAFETY:
    // - `pointer` is a non-null managed tensor of the kind `name` announces, whose
    //   ownership the capsule takes: `destructor` frees it unless a consumer renamed the
    //   capsule (and so took ownership);
    // - `name` is a `'static` C string, as capsules require (they keep the pointer);
    // - `destructor` may run on any thread holding the GIL; the thread is attached now.
    let capsule = unsafe { ffi::PyCapsule_New(pointer, name.as_ptr(), Some(destructor)) };
    // SAFETY: `capsule` is a new reference, or NULL with an exception set; attached.
    let capsule = match unsafe { Bound::from_owned_ptr_or_err(py, capsule) } {
        Ok(capsule) => capsule,
        Err(err) => {
            // SAFETY: the capsule was not made, so we still own the header: freed once.
            unsafe { delete(tensor) };
            return Err(err);
        }
    };
    // SAFETY: `capsule` is a live capsule; the context is an opaque pointer it keeps.
    if unsafe { ffi::PyCapsule_SetContext(capsule.as_ptr(), pointer) } != 0 {
        // Not possible for a valid capsule; its destructor then leaks the tensor.
        return Err(PyErr::fetch(py));
    }
    Ok(capsule)
}

/// The destructor of the legacy capsules made here.
///
/// # Safety
///
/// - `capsule` is a live capsule object made by [`into_capsule`], and the thread holds
///   the GIL (Python calls capsule destructors that way).
unsafe extern "C" fn destroy_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: the caller passes a live capsule made with these names, holding the GIL.
    unsafe { destroy::<DLManagedTensor>(capsule, LEGACY, USED_LEGACY) }
}

/// The destructor of the versioned capsules made here.
///
/// # Safety
///
/// - as for [`destroy_legacy`].
unsafe extern "C" fn destroy_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: the caller passes a live capsule made with these names, holding the GIL.
    unsafe { destroy::<DLManagedTensorVersioned>(capsule, VERSIONED, USED_VERSIONED) }
}

/// The DLPack Python specification's capsule destructor: releases the tensor unless the
/// capsule was consumed. It never panics, keeps any exception in flight, and never hands
/// the dying capsule to an API that could take a reference to it (which would run this
/// destructor again on a freed object).
///
/// A capsule renamed to anything but its two DLPack names, or whose pointer no longer
/// matches the tensor it was made with, has been tampered with: its tensor is leaked
/// rather than freed on a guess, and the problem reported as an unraisable exception.
///
/// # Safety
///
/// - `capsule` is a live capsule made by [`capsule`] with the name `name`, being
///   destroyed; while it is named `name` and its pointer is its context, the pointer is
///   an unconsumed `M` that the capsule owns;
/// - the thread holds the GIL.
#[inline]
unsafe fn destroy<M: Abi>(capsule: *mut ffi::PyObject, name: &CStr, used: &CStr) {
    // SAFETY: `capsule` is a live object and `used` a C string; the GIL is held.
    if unsafe { ffi::PyCapsule_IsValid(capsule, used.as_ptr()) } == 1 {
        // Consumed (the common case): the consumer owns the tensor and calls the
        // deleter.
        return;
    }
    // SAFETY: the caller's guarantees, passed on.
    unsafe { release_unconsumed::<M>(capsule, name) }
}

/// The destructor of a capsule that was not consumed as the protocol says: see
/// [`destroy`].
///
/// # Safety
///
/// - as for [`destroy`].
#[cold]
unsafe fn release_unconsumed<M: Abi>(capsule: *mut ffi::PyObject, name: &CStr) {
    // SAFETY: CPython destroys capsules on an attached thread.
    let py = unsafe { Python::assume_attached() };
    with_exception_saved(py, || {
        // SAFETY: `capsule` is a live object and `name` a C string; the GIL is held.
        if unsafe { ffi::PyCapsule_IsValid(capsule, name.as_ptr()) } != 1 {
            // SAFETY: as above; the name stays valid while the capsule lives.
            let found = unsafe { ffi::PyCapsule_GetName(capsule) };
            let found = if found.is_null() {
                "NULL".to_owned()
            } else {
                // SAFETY: a capsule's name is a NUL-terminated string it keeps alive.
                format!("{:?}", unsafe { CStr::from_ptr(found) })
            };
            report_unraisable(
                py,
                format!(
                    "a DLPack capsule was destroyed unconsumed under the name {found}: \
                     its tensor is leaked, since the renaming consumer may own it"
                ),
            );
            return;
        }
        // SAFETY: a valid capsule named `name` (checked above); the GIL is held.
        let pointer = unsafe { ffi::PyCapsule_GetPointer(capsule, name.as_ptr()) };
        // SAFETY: as above; a NULL context is returned without an exception.
        let context = unsafe { ffi::PyCapsule_GetContext(capsule) };
        match NonNull::new(pointer.cast::<M>()) {
            Some(tensor) if pointer == context => {
                // SAFETY:
                // - under its unconsumed name, with the pointer it was made with, the
                //   capsule owns this tensor;
                // - nobody else calls its deleter: consumers rename the capsule first.
                unsafe { delete(tensor) }
            }
            _ => report_unraisable(
                py,
                "a DLPack capsule's pointer was replaced: the tensor it was made with is \
                 leaked, and the new pointer is left alone"
                    .to_owned(),
            ),
        }
    });
}

/// Runs `f`, which releases a tensor whose deleter may run Python code, keeping the
/// thread's exception state as it was: an exception in flight (capsules die during
/// unwinding too) stays in flight, and one that `f` leaves set (a foreign deleter
/// should not, but may) is reported as unraisable instead of surfacing in unrelated
/// code.
///
/// It uses the C API rather than `PyErr::take`, which resumes a Rust panic when it
/// takes a `PanicException`: a destructor cannot unwind.
#[inline]
fn with_exception_saved(py: Python<'_>, f: impl FnOnce()) {
    let _ = py;
    // SAFETY: the thread is attached (`py`).
    let saved = if unsafe { ffi::PyErr_Occurred() }.is_null() {
        None
    } else {
        // SAFETY: the thread is attached.
        Some(unsafe { SavedException::take() })
    };
    f();
    // SAFETY: the thread is attached.
    if !unsafe { ffi::PyErr_Occurred() }.is_null() {
        // SAFETY: an exception is set, and the thread is attached; no object is given.
        unsafe { ffi::PyErr_WriteUnraisable(ptr::null_mut()) };
    }
    if let Some(saved) = saved {
        // SAFETY: the thread is attached, and no exception is set now.
        unsafe { saved.restore() };
    }
}

/// Releases a tensor imported from Python (see [`with_exception_saved`]). A thread that
/// is not attached to the interpreter has no exception state to keep: the deleter runs
/// as it is (and takes the GIL itself if it needs Python).
#[cfg(not(Py_LIMITED_API))]
#[inline]
pub(crate) fn release_python_tensor(release: impl FnOnce()) {
    // SAFETY: `Py_IsInitialized` may be called at any time, from any thread.
    let running = unsafe { ffi::Py_IsInitialized() } != 0;
    // SAFETY: `PyGILState_Check` may be called from any thread once the interpreter is
    // initialized (checked first).
    if running && unsafe { ffi::PyGILState_Check() } == 1 {
        // SAFETY: this thread holds the GIL (checked just above).
        with_exception_saved(unsafe { Python::assume_attached() }, release);
    } else {
        release();
    }
}

/// Releases a tensor imported from Python (see [`with_exception_saved`]). The stable ABI
/// has no `PyGILState_Check`: the deleter runs attached to the interpreter if it still
/// runs (it takes the GIL anyway), as it is otherwise.
#[cfg(Py_LIMITED_API)]
pub(crate) fn release_python_tensor(release: impl FnOnce()) {
    let mut release = Some(release);
    Python::try_attach(|py| {
        if let Some(release) = release.take() {
            with_exception_saved(py, release);
        }
    });
    if let Some(release) = release {
        release();
    }
}

/// Reports `message` as an unraisable `RuntimeError` (printed by `sys.unraisablehook`).
fn report_unraisable(py: Python<'_>, message: String) {
    PyRuntimeError::new_err(message).write_unraisable(py, None);
}

/// The exception state of the thread, taken out of it.
struct SavedException {
    #[cfg(Py_3_12)]
    exception: *mut ffi::PyObject,
    #[cfg(not(Py_3_12))]
    parts: [*mut ffi::PyObject; 3],
}

impl SavedException {
    /// Takes the exception in flight, if any, leaving none set.
    ///
    /// # Safety
    ///
    /// - the thread is attached.
    unsafe fn take() -> Self {
        #[cfg(Py_3_12)]
        {
            Self {
                // SAFETY: the thread is attached; a new reference or NULL.
                exception: unsafe { ffi::PyErr_GetRaisedException() },
            }
        }
        #[cfg(not(Py_3_12))]
        {
            let mut parts = [ptr::null_mut(); 3];
            let [ty, value, traceback] = &mut parts;
            // SAFETY: three writable out-pointers; the thread is attached.
            unsafe { ffi::PyErr_Fetch(ty, value, traceback) };
            Self { parts }
        }
    }

    /// Sets the saved exception again (nothing if there was none).
    ///
    /// # Safety
    ///
    /// - the thread is attached and no exception is set.
    unsafe fn restore(self) {
        #[cfg(Py_3_12)]
        // SAFETY: takes back the reference `take` returned (NULL sets nothing).
        unsafe {
            ffi::PyErr_SetRaisedException(self.exception)
        };
        #[cfg(not(Py_3_12))]
        {
            let [ty, value, traceback] = self.parts;
            // SAFETY: takes back the references `PyErr_Fetch` returned.
            #[allow(deprecated)]
            unsafe {
                ffi::PyErr_Restore(ty, value, traceback)
            };
        }
    }
}

/// Takes ownership of the tensor in a DLPack capsule, renaming it `used_*`.
///
/// The tensor is shared (see "Import safety" in the crate documentation) unless its
/// producer flagged it `IS_COPIED`; its deleter runs with the interpreter's exception
/// state kept intact, whoever drops it.
pub(super) fn consume(capsule: &Bound<'_, PyCapsule>) -> PyResult<ManagedTensor> {
    // One consumer at a time, with or without a GIL (free-threaded Python): the name is
    // checked and changed under the capsule's lock, and no Python code runs meanwhile.
    let raw =
        pyo3::sync::critical_section::with_critical_section(capsule.as_any(), || take(capsule))?;
    // SAFETY:
    // - the capsule held the tensor and is now renamed, so its destructor will not call
    //   the deleter: ownership passed to us, and the handle calls the deleter once, on
    //   a failed check below or when it drops;
    // - the DLPack protocol makes the producer promise what `from_raw` requires (valid
    //   header, shape, strides and data, a deleter callable from any thread), except
    //   that nobody else uses the data: the handle is marked shared before any view
    //   can be made, unless the producer copied the data for this consumer alone.
    let tensor = unsafe { ManagedTensor::adopt(raw) }.into_python().check()?;
    Ok(if tensor.is_copied() {
        tensor
    } else {
        tensor.into_shared()
    })
}

/// Checks that `capsule` holds an unconsumed DLPack tensor of major version 1 and
/// renames it `used_*`: from then on its destructor leaves the tensor to the caller.
fn take(capsule: &Bound<'_, PyCapsule>) -> PyResult<Raw> {
    if capsule.is_valid_checked(Some(VERSIONED)) {
        let pointer = capsule
            .pointer_checked(Some(VERSIONED))?
            .cast::<DLManagedTensorVersioned>();
        check_aligned(pointer)?;
        // SAFETY:
        // - by the DLPack protocol a capsule named `dltensor_versioned` holds a readable
        //   `DLManagedTensorVersioned` (checked non-null and aligned above);
        // - `version` is in the prefix that every major version keeps stable.
        let version = unsafe { (*pointer.as_ptr()).version };
        if version.major != DLPACK_MAJOR_VERSION {
            // Leave the capsule unconsumed: its producer's destructor calls the deleter.
            return Err(Error::UnsupportedVersion {
                major: version.major,
                minor: version.minor,
            }
            .into());
        }
        rename(capsule, USED_VERSIONED)?;
        return Ok(Raw::Versioned(pointer));
    }
    if capsule.is_valid_checked(Some(LEGACY)) {
        let pointer = capsule
            .pointer_checked(Some(LEGACY))?
            .cast::<DLManagedTensor>();
        check_aligned(pointer)?;
        rename(capsule, USED_LEGACY)?;
        return Ok(Raw::Legacy(pointer));
    }
    if capsule.is_valid_checked(Some(USED_VERSIONED)) || capsule.is_valid_checked(Some(USED_LEGACY))
    {
        return Err(PyValueError::new_err(
            "the DLPack capsule was already consumed: a capsule can be imported only once",
        ));
    }
    let name = match capsule.name()? {
        // SAFETY: the name is read at once, before any Python code could rename the
        // capsule or free the string.
        Some(name) => format!("{:?}", unsafe { name.as_cstr() }),
        None => "NULL".to_owned(),
    };
    Err(PyTypeError::new_err(format!(
        "expected a DLPack capsule named \"dltensor_versioned\" or \"dltensor\", \
         got a capsule named {name}"
    )))
}

fn check_aligned<T>(pointer: NonNull<T>) -> PyResult<()> {
    if pointer.is_aligned() {
        return Ok(());
    }
    Err(Error::Misaligned {
        what: "managed tensor",
        address: pointer.as_ptr() as usize,
        align: align_of::<T>(),
    }
    .into())
}

fn rename(capsule: &Bound<'_, PyCapsule>, name: &'static CStr) -> PyResult<()> {
    // SAFETY:
    // - `capsule` is a live capsule and the thread is attached;
    // - `name` is `'static`: the capsule keeps the pointer.
    if unsafe { ffi::PyCapsule_SetName(capsule.as_ptr(), name.as_ptr()) } != 0 {
        return Err(PyErr::fetch(capsule.py()));
    }
    Ok(())
}
