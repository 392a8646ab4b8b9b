//! A foreign producer's raw capsule, whose deleter may misbehave.

use dlpack_core::ffi::DLManagedTensorVersioned;
use dlpack_core::{DataType, Device};
use pyo3::prelude::*;

use super::Counted;

/// A foreign producer's tensor: a boxed versioned header over `n` counted `f32`s (all
/// `1.0`), whose deleter frees the box and, if `raise`, leaves a Python exception set,
/// as a misbehaving C producer might.
#[repr(C)]
struct Foreign {
    managed: DLManagedTensorVersioned,
    data: Counted<Vec<f32>>,
    shape: [i64; 1],
    strides: [i64; 1],
    raise: bool,
}

/// The deleter of [`Foreign`] tensors.
///
/// # Safety
///
/// - `managed` is the header of a live boxed [`Foreign`], deleted once.
unsafe extern "C" fn delete_foreign(managed: *mut DLManagedTensorVersioned) {
    // SAFETY: the header is the first field of a `Foreign` made by `Box::into_raw`.
    let foreign = unsafe { Box::from_raw(managed.cast::<Foreign>()) };
    let raise = foreign.raise;
    drop(foreign);
    if raise {
        Python::attach(|py| {
            pyo3::exceptions::PyRuntimeError::new_err("a deleter that leaves an exception set")
                .restore(py);
        });
    }
}

/// The destructor of [`foreign_tensor`] capsules: the specification's, releasing the
/// tensor unless the capsule was consumed.
///
/// # Safety
///
/// - `capsule` is a live capsule made by [`foreign_tensor`]; the GIL is held.
unsafe extern "C" fn destroy_foreign(capsule: *mut pyo3::ffi::PyObject) {
    let name = c"dltensor_versioned";
    // SAFETY: a live capsule and a C string; the GIL is held.
    if unsafe { pyo3::ffi::PyCapsule_IsValid(capsule, name.as_ptr()) } != 1 {
        return;
    }
    // SAFETY: as above; the capsule is valid under this name.
    let pointer = unsafe { pyo3::ffi::PyCapsule_GetPointer(capsule, name.as_ptr()) };
    // SAFETY: an unconsumed capsule owns its `Foreign` tensor.
    unsafe { delete_foreign(pointer.cast()) };
}

/// A raw `dltensor_versioned` capsule from a foreign producer: `n` counted `float32`
/// ones whose deleter leaves a `RuntimeError` set if `raise_in_deleter`, with NULL
/// strides (C-contiguous, as producers before DLPack 1.2 may say) if `null_strides`.
#[pyfunction]
#[pyo3(signature = (n, raise_in_deleter = false, null_strides = false))]
pub(super) fn foreign_tensor(
    py: Python<'_>,
    n: usize,
    raise_in_deleter: bool,
    null_strides: bool,
) -> PyResult<Bound<'_, PyAny>> {
    let mut foreign = Box::new(Foreign {
        managed: DLManagedTensorVersioned {
            version: dlpack_core::ffi::DLPackVersion::CURRENT,
            manager_ctx: core::ptr::null_mut(),
            deleter: Some(delete_foreign),
            flags: 0,
            dl_tensor: dlpack_core::ffi::DLTensor {
                data: core::ptr::null_mut(),
                device: Device::CPU.to_raw(),
                ndim: 1,
                dtype: DataType::F32.to_raw(),
                shape: core::ptr::null_mut(),
                strides: core::ptr::null_mut(),
                byte_offset: 0,
            },
        },
        data: Counted::new(vec![1.0; n]),
        shape: [n as i64],
        strides: [1],
        raise: raise_in_deleter,
    });
    foreign.managed.dl_tensor.data = foreign.data.0.as_mut_ptr().cast();
    foreign.managed.dl_tensor.shape = foreign.shape.as_mut_ptr();
    if !null_strides {
        foreign.managed.dl_tensor.strides = foreign.strides.as_mut_ptr();
    }
    let pointer = Box::into_raw(foreign).cast::<core::ffi::c_void>();
    // SAFETY:
    // - `pointer` is a boxed `Foreign` starting with its versioned header, owned by the
    //   capsule until a consumer renames it;
    // - the name is a static C string; the destructor matches the capsule's contents;
    // - the thread is attached.
    let capsule = unsafe {
        pyo3::ffi::PyCapsule_New(
            pointer,
            c"dltensor_versioned".as_ptr(),
            Some(destroy_foreign),
        )
    };
    // SAFETY: a new reference or NULL with an exception set; the thread is attached.
    unsafe { Bound::from_owned_ptr_or_err(py, capsule) }
}
