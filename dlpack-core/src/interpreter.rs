//! The interpreter's state around code that may run Python code behind our back: whether
//! this thread is attached, the exception in flight kept across a foreign deleter,
//! unraisable reports. A leaf below the core handle: `ManagedTensor`'s `Drop` calls
//! [`release_python_tensor`] for a tensor imported from Python, and `python` uses the
//! rest; nothing here knows about handles, capsules or tables. What this means for
//! users is stated in "Dropping an import" of `python::from_dlpack`'s docs.

use core::ptr::{self, NonNull};

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;

/// Whether this thread is attached to an interpreter (holds the GIL, on a build that
/// has one).
///
/// Not `PyGILState_Check`: once a process has created a subinterpreter, that check
/// answers 1 on every thread, attached or not (CPython's GIL-state API serves the main
/// interpreter only, and gives up checking when there are others).
///
/// From CPython 3.12 on, the "current thread state" is this thread's own (NULL when it
/// is not attached). Before 3.12 it is the thread state of whichever thread holds the
/// GIL, a global: the thread is attached only when that state is its own, the one the
/// GIL-state API gave it (`PyGILState_GetThisThreadState`, which every thread of the
/// main interpreter has; a thread of a 3.11 subinterpreter that was the main
/// interpreter's first reads as not attached).
#[cfg(not(Py_LIMITED_API))]
#[inline]
fn attached() -> Attached {
    // SAFETY: reads the current thread state (NULL when none); callable from any thread
    // at any time, before initialisation and after finalisation too.
    let current = unsafe { ffi::compat::PyThreadState_GetUnchecked() };
    attached_as(current, cfg!(Py_3_12))
}

/// [`attached`] from the current thread state, and whether it is this thread's own
/// (CPython 3.12 and later) or the GIL holder's (before).
#[inline]
fn attached_as(current: *mut ffi::PyThreadState, thread_local: bool) -> Attached {
    if current.is_null() {
        return Attached::No;
    }
    // SAFETY: reads this thread's slot of the GIL-state API (NULL when it has none);
    // callable from any thread without the GIL.
    if thread_local || current == unsafe { ffi::PyGILState_GetThisThreadState() } {
        Attached::Yes
    } else {
        Attached::No
    }
}

/// Whether this thread is attached (see the full-API version). The stable ABI has no
/// function that says so without taking the GIL, but every CPython since 3.5.2 exports
/// one (`PyThreadState_GetUnchecked` from 3.13, `_PyThreadState_UncheckedGet` before):
/// it is looked up once in the process's symbols, and the interpreter's version (for
/// what its answer means) once. Where it cannot be found (another platform, a
/// libpython loaded privately), the answer is `Unknown`.
#[cfg(Py_LIMITED_API)]
fn attached() -> Attached {
    match unchecked_thread_state() {
        // SAFETY: CPython's function of that name takes nothing and returns the current
        // thread state or NULL, from any thread at any time.
        Some(get) => attached_as(unsafe { get() }, thread_local_state()),
        None => Attached::Unknown,
    }
}

/// Whether the running CPython keeps its current thread state per thread (3.12 and
/// later), read once from its version string.
#[cfg(Py_LIMITED_API)]
fn thread_local_state() -> bool {
    use std::sync::OnceLock;
    static THREAD_LOCAL: OnceLock<bool> = OnceLock::new();
    *THREAD_LOCAL.get_or_init(|| {
        // SAFETY: takes nothing; callable from any thread without the GIL.
        let version = unsafe { ffi::Py_GetVersion() };
        // SAFETY: a static, NUL-terminated string ("3.11.7 (main, ...").
        let version = unsafe { core::ffi::CStr::from_ptr(version) };
        let mut parts = version.to_bytes().split(|&b| b == b'.' || b == b' ');
        let mut number = || {
            core::str::from_utf8(parts.next()?)
                .ok()?
                .parse::<u32>()
                .ok()
        };
        // (Unreadable: as before 3.12, which is right on every version.)
        matches!((number(), number()), (Some(major), Some(minor)) if (major, minor) >= (3, 12))
    })
}

/// CPython's "current thread state, or NULL" function, found among the process's
/// symbols (once).
#[cfg(all(Py_LIMITED_API, unix))]
fn unchecked_thread_state() -> Option<unsafe extern "C" fn() -> *mut ffi::PyThreadState> {
    use std::sync::OnceLock;
    static FOUND: OnceLock<Option<unsafe extern "C" fn() -> *mut ffi::PyThreadState>> =
        OnceLock::new();
    *FOUND.get_or_init(|| {
        [
            c"PyThreadState_GetUnchecked",
            c"_PyThreadState_UncheckedGet",
        ]
        .into_iter()
        .find_map(|name| {
            // SAFETY: `dlsym` with the default search order and a C string; it only
            // reads the process's symbol tables.
            let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            (!symbol.is_null()).then(|| {
                // SAFETY: a function of that name in a process running CPython is
                // CPython's `PyThreadState *(void)` (the `Py` prefix is reserved to
                // it), so the pointer has this type.
                unsafe {
                    core::mem::transmute::<
                        *mut core::ffi::c_void,
                        unsafe extern "C" fn() -> *mut ffi::PyThreadState,
                    >(symbol)
                }
            })
        })
    })
}

#[cfg(all(Py_LIMITED_API, not(unix)))]
fn unchecked_thread_state() -> Option<unsafe extern "C" fn() -> *mut ffi::PyThreadState> {
    None
}

/// Runs `f` if this thread is attached to the interpreter, and returns `None` without
/// running it if it is not (or may not be): it never attaches, so it never waits for
/// the GIL (a thread that attached while holding a lock that the GIL's holder waits
/// for would deadlock).
pub(crate) fn if_attached<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    match attached() {
        // SAFETY: this thread has a current thread state: it is attached.
        Attached::Yes => Some(f(unsafe { Python::assume_attached() })),
        Attached::No | Attached::Unknown => None,
    }
}

/// Lets a reference to a Python object go, from any thread, without waiting for the
/// GIL where PyO3 can defer it: at once on an attached thread (whoever attached it:
/// PyO3's own `Py` drop asks PyO3's count of its attachments, which a thread attached by
/// Python code, a C callback or the GIL-state API does not have); on one that is not,
/// as PyO3 lets a `Py` go (its reference pool releases it at the next attach). Where
/// the pool is disabled (`--cfg pyo3_disable_reference_pool`, under which PyO3 aborts
/// on such a drop) it attaches through the GIL-state API, as NumPy's deleters do.
pub(crate) fn release_object(obj: Py<PyAny>) {
    if attached() != Attached::Yes && cfg!(not(pyo3_disable_reference_pool)) {
        drop(obj);
    } else if let Some(obj) = NonNull::new(obj.into_ptr()) {
        release_reference(obj);
    }
}

/// What [`attached`] knows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Attached {
    Yes,
    No,
    /// Only under the stable ABI, where the function that says it was not found.
    #[cfg_attr(not(Py_LIMITED_API), allow(dead_code))]
    Unknown,
}

/// Releases a tensor imported from Python, whose deleter may run Python code: on an
/// attached thread the exception state is kept as it was (see
/// [`with_exception_saved`]); a thread that is not attached has no exception state to
/// keep, so the deleter runs as it is (and takes the GIL itself if it needs Python, as
/// NumPy's and PyTorch's do).
///
/// Under the stable ABI where the thread's state cannot be read (see [`attached`]), the
/// deleter runs attached to the interpreter if it still runs, which takes the GIL: a
/// thread that drops such a tensor while another holds the GIL and waits for it
/// blocks, as it would in the deleter of NumPy or PyTorch.
#[inline]
pub(crate) fn release_python_tensor(release: impl FnOnce()) {
    match attached() {
        // SAFETY: this thread has a current thread state: it is attached.
        Attached::Yes => with_exception_saved(unsafe { Python::assume_attached() }, release),
        Attached::No => release(),
        Attached::Unknown => {
            let mut release = Some(release);
            with_gil_state(|py| {
                if let Some(release) = release.take() {
                    with_exception_saved(py, release);
                }
            });
            if let Some(release) = release {
                release();
            }
        }
    }
}

/// Releases a strong reference to a Python object, from any thread: at once on an
/// attached thread (the exception state kept, as [`with_exception_saved`] keeps it),
/// attaching to the interpreter first ([`with_gil_state`]) on a thread that is not (or
/// may not be) attached. After the interpreter has finalised the reference is left, as
/// NumPy's own deleter leaves it.
pub(crate) fn release_reference(obj: NonNull<ffi::PyObject>) {
    // SAFETY: a strong reference that the caller gives up, released once, on a thread
    // attached to the interpreter (each call site below).
    let release = || unsafe { ffi::Py_DECREF(obj.as_ptr()) };
    match attached() {
        Attached::Yes => {
            // SAFETY: a live object; the thread is attached.
            // (Without the GIL another thread may drop a reference between the read and
            // the release, which could then be the last: the slow path there.)
            if !cfg!(Py_GIL_DISABLED) && unsafe { ffi::Py_REFCNT(obj.as_ptr()) } > 1 {
                // Not the last reference: no code runs, no exception state to keep.
                release();
            } else {
                // SAFETY: this thread has a current thread state: it is attached.
                with_exception_saved(unsafe { Python::assume_attached() }, release);
            }
        }
        Attached::No | Attached::Unknown => {
            with_gil_state(|py| with_exception_saved(py, release));
        }
    }
}

/// Runs `f` attached to the interpreter through CPython's GIL-state API
/// (`PyGILState_Ensure`, then `PyGILState_Release`), as NumPy's and PyTorch's deleters
/// attach; `None`, without running `f`, once the interpreter is finalising or gone.
///
/// Not `Python::attach`: PyO3 counts the attachments it made itself, and skips
/// attaching while its count says so, but foreign code called from Python (PyTorch
/// freeing a storage in `Tensor.set_`, a C consumer) may run a deleter with the GIL
/// released inside a call into an extension, where that count is still positive.
fn with_gil_state<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    // SAFETY: callable from any thread at any time.
    if unsafe { ffi::Py_IsInitialized() } == 0 {
        return None;
    }
    /// Gives the thread state back, even if `f` panics.
    struct Release(ffi::PyGILState_STATE);
    impl Drop for Release {
        fn drop(&mut self) {
            // SAFETY: pairs with the `PyGILState_Ensure` below, on the same thread.
            unsafe { ffi::PyGILState_Release(self.0) };
        }
    }
    // SAFETY: the interpreter is initialised; callable whether or not this thread is
    // attached (it attaches it, creating a thread state if it has none).
    let _release = Release(unsafe { ffi::PyGILState_Ensure() });
    // SAFETY: attached until `_release` is dropped, after `f` returns.
    Some(f(unsafe { Python::assume_attached() }))
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
pub(crate) fn with_exception_saved(py: Python<'_>, f: impl FnOnce()) {
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

/// Reports `message` as an unraisable `RuntimeError` (printed by `sys.unraisablehook`).
pub(crate) fn report_unraisable(py: Python<'_>, message: String) {
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
