//! The one way this crate's C entry points (the vectorcall `__dlpack__`, the C exchange
//! table's entries) run Rust code: an error becomes the raised Python exception, a
//! panic becomes a raised `PanicException` with its message (as PyO3's own trampolines
//! make it), and nothing unwinds into C.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::prelude::*;

/// Runs `body` on a thread attached to the interpreter: its value, or `None` after
/// raising its error (or a `PanicException` for a panic) as the thread's exception.
///
/// # Safety
///
/// - the calling thread is attached to the interpreter (CPython's convention for
///   methods, and the DLPack standard's for the exchange table's entries).
#[inline]
pub(super) unsafe fn trampoline<T>(body: impl FnOnce(Python<'_>) -> PyResult<T>) -> Option<T> {
    // SAFETY: the caller is attached (this function's contract).
    let py = unsafe { Python::assume_attached() };
    let err = match catch_unwind(AssertUnwindSafe(|| body(py))) {
        Ok(Ok(value)) => return Some(value),
        Ok(Err(err)) => err,
        Err(payload) => pyo3::panic::PanicException::new_err(panic_message(&*payload)),
    };
    err.restore(py);
    None
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic in dlpack-core".to_owned())
}
