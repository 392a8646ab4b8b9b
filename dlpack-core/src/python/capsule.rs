//! DLPack capsules: their names, creation, destruction (the specification's destructor,
//! hardened against tampering) and consumption. What a capsule promises is stated for
//! users in `Tensor`'s docs ("Capsules") and `from_dlpack`'s; here, how it is kept.
//! (What a deleter that may run Python code needs from the interpreter is
//! `crate::interpreter`'s.)
//!
//! Capsules are made with `PyCapsule_New` and static names, and their context set to
//! the tensor's pointer. The destructor calls the DLPack deleter only while the capsule
//! still has its unconsumed name (`dltensor` or `dltensor_versioned`) and that pointer,
//! as the DLPack Python specification's reference code does, and never hands the dying
//! capsule to Python (an unraisable hook that took a reference would run it again). On
//! import, a capsule is renamed `used_dltensor[_versioned]` under its lock, immediately
//! before ownership passes to the new [`ManagedTensor`] (whose `Drop` calls the
//! deleter); a versioned capsule of another major version is left unrenamed, so that
//! its producer's destructor frees it.

use core::ffi::{CStr, c_void};
use core::ptr::NonNull;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};

use crate::error::Error;
use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned};
use crate::tensor::{Abi, ManagedTensor, Raw, delete};

use super::adopt::adopt;
use crate::interpreter::{report_unraisable, with_exception_saved};

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
    // - `destructor` may run on any attached thread; this thread is attached now.
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
/// - `capsule` is a live capsule object made by [`into_capsule`], and the thread is
///   attached to the interpreter (holds the GIL, on a build that has one): Python calls
///   capsule destructors that way, on whichever thread frees the capsule.
unsafe extern "C" fn destroy_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: the caller passes a live capsule made with these names, attached.
    unsafe { destroy::<DLManagedTensor>(capsule, LEGACY, USED_LEGACY) }
}

/// The destructor of the versioned capsules made here.
///
/// # Safety
///
/// - as for [`destroy_legacy`].
unsafe extern "C" fn destroy_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: the caller passes a live capsule made with these names, attached.
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
/// - the thread is attached to the interpreter.
#[inline]
unsafe fn destroy<M: Abi>(capsule: *mut ffi::PyObject, name: &CStr, used: &CStr) {
    // SAFETY: `capsule` is a live object and `used` a C string; the thread is attached.
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
        // SAFETY: `capsule` is a live object and `name` a C string; the thread is attached.
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
        // SAFETY: a valid capsule named `name` (checked above); the thread is attached.
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

/// Takes ownership of the tensor in a DLPack capsule, renaming it `used_*`, and adopts
/// it by the one import policy ([`adopt`]).
pub(super) fn consume(capsule: &Bound<'_, PyCapsule>) -> PyResult<ManagedTensor> {
    // One consumer at a time among those that take the capsule's lock (this crate, and
    // on builds with a GIL every consumer): the name is checked and changed under the
    // lock, and no Python code runs meanwhile.
    let raw =
        pyo3::sync::critical_section::with_critical_section(capsule.as_any(), || take(capsule))?;
    // SAFETY:
    // - the capsule held the tensor and is now renamed, so its destructor will not call
    //   the deleter: ownership passed to us;
    // - by the DLPack protocol, the producer of a capsule of that name promises what
    //   `adopt` requires.
    unsafe { adopt(raw) }
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
        // Leave the capsule unconsumed on error: its producer's destructor calls the
        // deleter.
        Error::check_version(version)?;
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
    Ok(Error::check_aligned("managed tensor", pointer.as_ptr())?)
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
