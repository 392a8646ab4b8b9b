//! The one import policy: how a tensor that a Python producer hands over (in a capsule,
//! from a C exchange table, to our table's "to object" entry) becomes a
//! [`ManagedTensor`]. Every import path calls [`adopt`], so a rule changes here once.

use pyo3::prelude::*;

use crate::error::Error;
use crate::tensor::{AlignedBytes, ManagedTensor, Raw};

/// The owner of the tensors our C exchange table's allocator makes: a zeroed buffer
/// that nobody else has been given, so that such a tensor, handed back to us, stays
/// exclusive.
pub(super) struct Allocation(pub(super) AlignedBytes);

/// Whether `tensor` is one of our allocator's and still describes memory inside its
/// buffer: the caller that got it could have rewritten the header (data, shape,
/// strides) before handing it back, which would point the exclusive tensor elsewhere.
fn describes_its_allocation(tensor: &ManagedTensor) -> bool {
    let Some(Allocation(buffer)) = tensor.owner::<Allocation>() else {
        return false;
    };
    let buffer = buffer.as_bytes().as_ptr_range();
    // Addresses only: nothing of the memory the header names is read or borrowed, and
    // the check costs the same for any shape.
    tensor.device().is_cpu_accessible()
        && tensor.byte_span().is_ok_and(|span| {
            span.elements == 0
                || (buffer.start as usize <= span.start
                    && span.start + span.len <= buffer.end as usize)
        })
}

/// Takes over a tensor from a Python producer:
///
/// - a versioned tensor of another major version is released (its deleter runs once)
///   and refused with [`Error::UnsupportedVersion`];
/// - the header is checked as [`ManagedTensor::from_raw`] checks it (released on
///   error);
/// - a foreign deleter may run Python code: dropping the tensor keeps the
///   interpreter's exception state (our own headers' deleters are called as they are,
///   from any thread: they drop Rust owners, and the one owner that holds a Python
///   object, a NumPy array read in place, attaches and keeps the exception state
///   itself);
/// - the tensor is *shared* (see the import safety guide, `guide::import_safety`: the
///   producer keeps its own handle), except a copy its producer flagged `IS_COPIED`
///   and a tensor from our own table's allocator (that still describes memory inside
///   its buffer), which nobody else holds.
///
/// # Safety
///
/// - `raw` is a managed tensor whose ownership passes to the caller (nobody else calls
///   its deleter), readable and aligned;
/// - its producer promises what the DLPack protocol promises a consumer, which is what
///   [`ManagedTensor::from_raw`] requires except exclusive access: valid header, shape,
///   strides and data until the deleter runs, and a deleter callable from any thread.
pub(super) unsafe fn adopt(raw: Raw) -> PyResult<ManagedTensor> {
    // SAFETY: the caller hands over the tensor; it is marked shared below before any
    // view can be made, unless the rules above make it exclusive.
    let tensor = unsafe { ManagedTensor::from_raw_unchecked(raw) };
    if let Raw::Versioned(ptr) = raw {
        // SAFETY: readable and aligned (the contract); `version` is in the prefix that
        // every major version keeps.
        let version = unsafe { (*ptr.as_ptr()).version };
        if let Err(err) = Error::check_version(version) {
            // The deleter is read from the stable prefix only.
            drop(tensor.into_python());
            return Err(err.into());
        }
    }
    let tensor = if tensor.is_own() {
        tensor
    } else {
        tensor.into_python()
    }
    .check()?;
    let exclusive = tensor.is_copied() || describes_its_allocation(&tensor);
    Ok(if exclusive {
        tensor
    } else {
        tensor.into_shared()
    })
}
