//! One `__dlpack__` call: what it asks for ([`Request`]), and the header it gets (over
//! the tensor's own data, or over a copy).

mod tensor;

use std::sync::Arc;

use ndarray::IxDyn;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyTuple};

use crate::device::Device;
use crate::dtype::{DataType, Element};
use crate::error::Error;
use crate::ffi::{
    DLDeviceType, DLManagedTensor, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED,
    DLPACK_FLAG_BITMASK_READ_ONLY,
};
use crate::layout;
use crate::tensor::{Desc, ManagedTensor, Own, build};
use crate::traits::ToDLPack;

use crate::python::capsule::into_capsule;
use crate::python::error::{buffer_error, type_name};

pub use tensor::Tensor;
pub(super) use tensor::own_table;

/// A `(a, b)` argument of `__dlpack__`: anything else is a `TypeError`, as in NumPy.
fn pair<'py, T: FromPyObjectOwned<'py>>(arg: &Bound<'py, PyAny>) -> PyResult<(T, T)> {
    let (a, b) = two(arg)?;
    match (a.extract(), b.extract()) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        _ => Err(not_two_integers()),
    }
}

/// The major version of a `max_version=(major, minor)` argument: a tuple of two
/// integers, like [`pair`]'s, of which only the major matters.
#[inline]
fn major_version(arg: &Bound<'_, PyAny>) -> PyResult<i64> {
    let (major, minor) = two(arg)?;
    if !minor.is_instance_of::<PyInt>() && minor.extract::<i64>().is_err() {
        return Err(not_two_integers());
    }
    major.extract().map_err(|_| not_two_integers())
}

/// The two items of a tuple of length two. (Always inlined: on the path of every
/// `__dlpack__` call that passes `max_version`, where a call costs a few instructions
/// more than the inlined body; the error is out of line.)
#[inline(always)]
fn two<'a, 'py>(
    arg: &'a Bound<'py, PyAny>,
) -> PyResult<(Borrowed<'a, 'py, PyAny>, Borrowed<'a, 'py, PyAny>)> {
    let mut items = arg
        .cast::<PyTuple>()
        .ok()
        .filter(|t| t.len() == 2)
        .map(|t| t.iter_borrowed())
        .into_iter()
        .flatten();
    match (items.next(), items.next()) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(not_a_pair(arg)),
    }
}

/// The error of an argument that is not a tuple of two items.
#[cold]
fn not_a_pair(arg: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!(
        "expected None or a tuple of two integers, got {}",
        type_name(arg)
    ))
}

/// A `stream` or `copy` argument: anything but `what` is a `TypeError`.
fn scalar<'py, T: FromPyObjectOwned<'py>>(
    arg: &Borrowed<'_, 'py, PyAny>,
    what: &str,
    name: &str,
) -> PyResult<T> {
    arg.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "{name} must be None or {what}, got {}",
            type_name(arg)
        ))
    })
}

/// A `stream` argument: an integer of 64 bits (`TypeError` for another type, a
/// `ValueError` naming the value for an integer out of that range).
#[inline]
fn stream_value(arg: &Borrowed<'_, '_, PyAny>) -> PyResult<i64> {
    match arg.extract::<i64>() {
        Ok(stream) => Ok(stream),
        Err(_) if arg.is_instance_of::<PyInt>() => Err(PyValueError::new_err(format!(
            "stream={} is out of range: a stream is a 64-bit integer",
            arg.str().map(|s| s.to_string()).unwrap_or_default()
        ))),
        Err(_) => scalar(arg, "an integer", "stream"),
    }
}

fn not_two_integers() -> PyErr {
    PyTypeError::new_err("expected None or a tuple of two integers")
}

/// The keyword arguments of one `__dlpack__` call, `None` where absent: `stream`,
/// `max_version`, `dl_device`, `copy`.
#[derive(Default)]
struct DlpackArgs<'a, 'py> {
    values: [Option<Borrowed<'a, 'py, PyAny>>; 4],
}

impl<'a, 'py> DlpackArgs<'a, 'py> {
    /// Reads the request from the arguments: `stream` `None` or an integer,
    /// `max_version` and `dl_device` `None` or a tuple of two integers, `copy` `None` or
    /// a `bool`.
    #[inline]
    fn request(&self) -> PyResult<Request> {
        let given = |slot: usize| self.values[slot].filter(|v| !v.is_none());
        let [stream, max_version, dl_device, copy] = [0, 1, 2, 3].map(given);
        let stream: Option<i64> = stream.map(|v| stream_value(&v)).transpose()?;
        let major: Option<i64> = max_version.map(|v| major_version(&v)).transpose()?;
        let dl_device: Option<(i32, i32)> = dl_device.map(|v| pair(&v)).transpose()?;
        let copy: Option<bool> = copy.map(|v| scalar(&v, "a bool", "copy")).transpose()?;
        Ok(Request {
            stream,
            legacy: major.is_none_or(|major| major < 1),
            dl_device: dl_device.map(|(ty, id)| Device::new(DLDeviceType(ty), id)),
            copy,
        })
    }
}

/// What a `__dlpack__` caller asked for.
#[derive(Clone, Copy, Debug)]
struct Request {
    stream: Option<i64>,
    legacy: bool,
    dl_device: Option<Device>,
    copy: Option<bool>,
}

/// Checks `stream` against the array API standard's values for the tensor's device.
///
/// The data of a device tensor is complete when it is wrapped (the producer's promise
/// to `from_raw` and `from_owner`), so every valid stream is honoured with no work;
/// what is refused is what no producer could honour: a stream for the CPU (a
/// `RuntimeError`, as NumPy 2 raises), a value the standard forbids for CUDA (`0`,
/// ambiguous) or ROCm (`1`, `2`), a negative value other than `-1`, and any stream on a
/// device for which the standard defines none (`BufferError`). `device` is where the
/// consumer wants the data (a copy to the CPU takes no stream either).
#[inline]
fn check_stream(device: Device, stream: Option<i64>) -> PyResult<()> {
    let Some(stream) = stream else {
        return Ok(());
    };
    let allowed = match device.device_type {
        DLDeviceType::kDLCPU => {
            return Err(PyRuntimeError::new_err(
                "only stream=None is supported for a CPU tensor",
            ));
        }
        DLDeviceType::kDLCUDA | DLDeviceType::kDLCUDAManaged => stream == -1 || stream > 0,
        DLDeviceType::kDLROCM => stream == -1 || stream == 0 || stream > 2,
        // "On CPU and other device types without streams, only None is accepted."
        _ => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(buffer_error(format!(
            "stream={stream} is not a valid stream for a tensor on {device}"
        )))
    }
}

/// Answers one `__dlpack__` call: a fresh header over `object`'s tensor (or over a
/// copy), in a capsule.
#[inline]
fn export<'py>(py: Python<'py>, object: &Tensor, request: Request) -> PyResult<Bound<'py, PyAny>> {
    let shared = object.handle();
    let tensor = &**shared;
    let own = tensor.device();
    check_stream(request.dl_device.unwrap_or(own), request.stream)?;
    // Where the consumer wants the data, as the header will say.
    let device = match request.dl_device {
        None => own,
        Some(wanted) if wanted == own => own,
        Some(wanted) if wanted == Device::CPU && own.is_cpu_accessible() => Device::CPU,
        Some(wanted) => {
            return Err(buffer_error(format!(
                "unsupported device requested: cannot export a tensor on {own} to {wanted}"
            )));
        }
    };
    let guarded = object.copies_read_only();
    let needs_copy = (request.legacy && tensor.is_read_only()) || guarded;
    let copy = match request.copy {
        Some(true) => true,
        Some(false) if guarded => return Err(buffer_error(GUARDED_NO_COPY)),
        Some(false) if needs_copy => {
            return Err(buffer_error(
                "a read-only tensor can only be exported as a legacy (unversioned) DLPack \
                 capsule by copying, and copy=False forbids that; ask for max_version=(1, 0)",
            ));
        }
        Some(false) => false,
        None => needs_copy,
    };
    let (owner, device, flags) = if copy {
        if !own.is_cpu_accessible() {
            return Err(buffer_error(format!(
                "cannot copy a tensor on {own}: only CPU-accessible memory can be copied"
            )));
        }
        // A copy lives in ordinary host memory: it can be sent to `None` (the consumer
        // follows the data) or to the CPU, not to another kind of device.
        if let Some(wanted) = request.dl_device.filter(|&d| d != Device::CPU) {
            return Err(buffer_error(format!(
                "unsupported device requested: a copy is made on cpu:0, not {wanted}"
            )));
        }
        let copied = Arc::new(copy_tensor(tensor)?);
        (copied, Device::CPU, DLPACK_FLAG_BITMASK_IS_COPIED)
    } else {
        let flags = tensor.flags() & !DLPACK_FLAG_BITMASK_IS_COPIED;
        (Arc::clone(shared), device, flags)
    };
    // A legacy header cannot say "read-only": the rules above copy or refuse first.
    if request.legacy && flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0 {
        return Err(Error::ReadOnlyLegacy.into());
    }
    let header = if request.legacy {
        header_over::<DLManagedTensor>(owner, device, flags)
    } else {
        header_over::<DLManagedTensorVersioned>(owner, device, flags)
    };
    into_capsule(py, header?)
}

/// Why `copy=False` cannot be honoured for a read-only tensor of Rust's memory.
const GUARDED_NO_COPY: &str = "the tensor is read-only memory that Rust code also reads, \
    which a consumer could write (PyTorch ignores DLPack's read-only flag): it is exported \
    only as a copy, and copy=False forbids that; to share it without a copy, the extension \
    returns an array that Rust no longer holds (an owned ndarray, moved)";

/// The header `__dlpack__(max_version=(1, 3))` gives: versioned, over the tensor's own
/// data and device, with its flags (over a copy for a read-only tensor of Rust's memory,
/// see [`Tensor::copies_read_only`]).
fn versioned_header(object: &Tensor) -> PyResult<ManagedTensor> {
    let shared = object.handle();
    if object.copies_read_only() {
        return copy_tensor(shared).and_then(|copy| {
            let flags = copy.flags() | DLPACK_FLAG_BITMASK_IS_COPIED;
            header_over::<DLManagedTensorVersioned>(Arc::new(copy), Device::CPU, flags)
        });
    }
    let flags = shared.flags() & !DLPACK_FLAG_BITMASK_IS_COPIED;
    header_over::<DLManagedTensorVersioned>(Arc::clone(shared), shared.device(), flags)
}

/// A new header of ABI `M` describing the data of `owner` on `device`, which it keeps
/// alive.
#[inline]
fn header_over<M: Own>(
    owner: Arc<ManagedTensor>,
    device: Device,
    flags: u64,
) -> PyResult<ManagedTensor> {
    // Fold `byte_offset` into the pointer where addresses are plain byte addresses:
    // older PyTorch ignores `byte_offset` on import.
    let flat = device.is_cpu_accessible()
        || matches!(
            device.device_type,
            DLDeviceType::kDLCUDA | DLDeviceType::kDLROCM
        );
    let ndim = owner.ndim();
    let describe = move |owner: &mut Arc<ManagedTensor>, shape: &mut [i64], strides: &mut [i64]| {
        let source = &**owner;
        layout::copy_into(source.shape(), source.strides(), shape, strides);
        Ok(Desc {
            data: if flat {
                source.data_ptr()
            } else {
                source.data()
            },
            dtype: source.dtype(),
            device,
            byte_offset: if flat { 0 } else { source.byte_offset() },
            flags,
        })
    };
    // SAFETY:
    // - the shape, strides, dtype and data pointer are the source's own, read from the
    //   owner `Arc` at its final address (plus its `byte_offset` when folded, which is
    //   where its first element lies); the `Arc` keeps the source alive, so its
    //   producer keeps that memory valid until the last `Arc` is dropped, by this
    //   header's deleter or elsewhere; `device` is the source's own, or the CPU when
    //   the CPU can access it;
    // - writes: `flags` keeps the source's `READ_ONLY` bit, and `export` asks for a
    //   legacy header (which cannot carry flags) only over writable or freshly copied
    //   data. Other holders of the same `Arc` may write the same memory, as other
    //   holders of a NumPy array may: a Python consumer is never promised exclusive
    //   access (see the import safety guide, `guide::import_safety`).
    Ok(unsafe { build::<M, Arc<ManagedTensor>>(owner, ndim, describe) }?)
}

/// A copy of a CPU-accessible tensor into a fresh C-order buffer (a versioned tensor,
/// writable, on the CPU): an ndarray of its element type where Rust has one (`bool`
/// checked), its bytes otherwise (float8, float6, float4, ...).
fn copy_tensor(tensor: &ManagedTensor) -> PyResult<ManagedTensor> {
    fn copy<A: Element>(tensor: &ManagedTensor) -> PyResult<ManagedTensor> {
        let view = tensor.as_array::<A, IxDyn>()?;
        Ok(crate::bridge::ndarray::copy_standard(view)?.to_dlpack()?)
    }
    let dtype = tensor.dtype();
    macro_rules! dispatch {
        ($ty:ty, $constant:ident, $name:literal) => {
            if dtype == DataType::$constant {
                return copy::<$ty>(tensor);
            }
        };
    }
    crate::for_each_element!(dispatch);
    // Sub-byte and other types with no Rust element: their bytes.
    Ok(tensor.copy_as_bytes(false)?)
}
