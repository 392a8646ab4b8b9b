//! [`Error`] to the exception NumPy raises in the same situation.

use pyo3::exceptions::{
    PyBufferError, PyKeyError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::intern;
use pyo3::prelude::*;

use crate::dtype::DataType;
use crate::error::Error;
use crate::ffi::DLDataTypeCode;

impl From<Error> for PyErr {
    /// The exception NumPy raises in the same situation: `BufferError` when data cannot
    /// be exchanged through DLPack (unsupported device, version, lanes or element type, a
    /// malformed or misaligned header, a read-only tensor asked for as a legacy capsule),
    /// `TypeError` when a supported element type or the rank differs from the Rust
    /// type's, `KeyError` for a missing batch entry, `RuntimeError` for a write torch
    /// refuses (as torch raises it), and `ValueError` otherwise. Errors
    /// about a named tensor of a batch are classified by their cause and keep the name
    /// in the message.
    fn from(err: Error) -> Self {
        let message = python_message(&err);
        // Every variant is listed: a new one is a compile error here, not a silent
        // `ValueError`.
        match err.root() {
            // PyO3 picks the `OSError` subclass of the kind.
            Error::Io { kind, .. } => std::io::Error::new(*kind, message).into(),
            Error::UnsupportedDevice { .. }
            | Error::UnsupportedVersion { .. }
            | Error::UnsupportedLanes { .. }
            | Error::UnsupportedDtype { .. }
            | Error::PackedLayout { .. }
            | Error::ReadOnlyLegacy
            | Error::Framework { .. }
            | Error::NullPointer { .. }
            | Error::Misaligned { .. }
            | Error::NegativeNdim { .. }
            | Error::NullData { .. } => PyBufferError::new_err(message),
            Error::DtypeMismatch { found, .. } if !is_standard_dtype(*found) => {
                PyBufferError::new_err(message)
            }
            Error::DtypeMismatch { .. } | Error::NdimMismatch { .. } => {
                PyTypeError::new_err(message)
            }
            Error::MissingTensor { .. } => PyKeyError::new_err(message),
            #[cfg(feature = "arrow")]
            Error::Arrow {
                kind: crate::error::ArrowErrorKind::Type,
                ..
            } => PyTypeError::new_err(message),
            #[cfg(feature = "arrow")]
            Error::Arrow { .. } => PyValueError::new_err(message),
            Error::AllocationFailed { .. } => PyMemoryError::new_err(message),
            Error::NotExclusive => PyBufferError::new_err(message),
            // As torch raises it.
            Error::InPlaceRefused { .. } => PyRuntimeError::new_err(message),
            Error::NegativeExtent { .. }
            | Error::Overflow { .. }
            | Error::ShapeMismatch { .. }
            | Error::ReadOnly
            | Error::OverlappingStrides
            | Error::InvalidBool { .. }
            | Error::StridesLength { .. }
            | Error::TooManyDimensions { .. }
            | Error::OutOfBuffer { .. }
            | Error::BufferResized { .. }
            | Error::DuplicateName { .. }
            | Error::UnexpectedTensors { .. }
            | Error::NotSelected { .. }
            | Error::StateDict { .. }
            | Error::EmptyContainer { .. }
            | Error::LoneShard { .. }
            | Error::InvalidName { .. }
            | Error::InvalidRank { .. }
            | Error::InvalidSplit { .. }
            | Error::InvalidFile { .. }
            // (`root` never returns a `Tensor`: it unwraps them.)
            | Error::Tensor { .. } => PyValueError::new_err(message),
        }
    }
}

/// The message of an error in Python's words: shapes as tuples, names in single quotes
/// (no Rust backticks), and no Rust API in the advice.
pub(super) fn python_message(err: &Error) -> String {
    match err {
        Error::Tensor { name, error } => format!("tensor '{name}': {}", python_message(error)),
        Error::ShapeMismatch { expected, found } => format!(
            "shape mismatch: expected {}, found {}",
            py_tuple(expected),
            py_tuple(found)
        ),
        Error::InvalidSplit {
            shape,
            dim,
            world_size,
            dtype,
        } => crate::error::split_text(&py_tuple(shape), shape, *dim, *world_size, *dtype),
        Error::StateDict {
            missing,
            unexpected,
            failed,
        } => {
            let text = crate::error::state_dict_text(missing, unexpected, failed, &python_message);
            format!("state_dict does not fit: {text}").replace('`', "'")
        }
        // The reader is the extension's author, testing from Python: the fix is in the
        // extension (passing a copy does not help: it is shared too).
        Error::NotExclusive => "shared tensor: this function writes in place into memory \
                                that something else still reaches (for an argument, the \
                                caller's array; a copy passed from Python is shared too); \
                                the fix is in the extension: return a new array, import a \
                                copy (copy=True for NumPy; PyTorch does not flag its \
                                copies, so copy in Rust), or call assume_exclusive (Rust) on an \
                                array its caller hands over to be written (dlpack_core::python \
                                docs, \"Writing into a caller's array, in place\")"
            .to_owned(),
        Error::ReadOnly => "read-only tensor: this function writes in place, and the array \
                            is read-only (a NumPy array with writeable=False, a broadcast or \
                            other read-only view, a tensor its producer flagged read-only); \
                            it needs a writable one (a.copy() for NumPy, t.clone() for \
                            PyTorch)"
            .to_owned(),
        other => other.to_string().replace('`', "'"),
    }
}

/// `(2, 3)`, `(3,)` or `()`: a shape as Python writes it.
pub(super) fn py_tuple<T: core::fmt::Display>(items: &[T]) -> String {
    match items {
        [one] => format!("({one},)"),
        _ => {
            let items: Vec<String> = items.iter().map(ToString::to_string).collect();
            format!("({})", items.join(", "))
        }
    }
}

/// How to convert an array to `dtype` in NumPy and in PyTorch, for a message.
pub(super) fn conversion_hint(dtype: DataType) -> Option<String> {
    if !is_standard_dtype(dtype) {
        return None;
    }
    let numpy = numpy_astype(dtype);
    let torch = format!("t.to(torch.{dtype})");
    Some(match numpy {
        Some(numpy) => format!("convert it first: {numpy} for NumPy, {torch} for PyTorch"),
        None => format!("convert it first: {torch} for PyTorch"),
    })
}

/// `a.astype(numpy.<dtype>)`, NumPy's conversion of an array `a` to `dtype` (a
/// standard one, see [`is_standard_dtype`]), or `None` where NumPy has no such type
/// (bfloat16).
pub(super) fn numpy_astype(dtype: DataType) -> Option<String> {
    match dtype.to_string().as_str() {
        "bfloat16" => None,
        "bool" => Some("a.astype(numpy.bool_)".to_owned()),
        name => Some(format!("a.astype(numpy.{name})")),
    }
}

/// Whether `dtype` is one that NumPy, PyTorch or JAX exchange through DLPack (a
/// scalar bool, integer, IEEE or brain float, or complex of a standard width): a
/// mismatch with it is the caller's type error, while any other type cannot be
/// exchanged at all.
pub(super) fn is_standard_dtype(dtype: DataType) -> bool {
    let bits = dtype.bits();
    dtype.lanes() == 1
        && match dtype.code() {
            DLDataTypeCode::kDLBool => bits == 8,
            DLDataTypeCode::kDLInt | DLDataTypeCode::kDLUInt => matches!(bits, 8 | 16 | 32 | 64),
            DLDataTypeCode::kDLFloat => matches!(bits, 16 | 32 | 64),
            DLDataTypeCode::kDLBfloat => bits == 16,
            DLDataTypeCode::kDLComplex => matches!(bits, 64 | 128),
            _ => false,
        }
}

/// What NumPy needs to exchange arrays of `dtype` (`bfloat16`, a float8 type: types
/// NumPy has only through a dtype package) through DLPack: NumPy 2.5 or later, where
/// the type is registered (`ml_dtypes` 0.7 or later registers its types when imported).
pub(super) fn numpy_hint(py: Python<'_>, dtype: &str) -> String {
    let numpy = py.import(intern!(py, "numpy")).ok();
    let registers = numpy
        .as_ref()
        .and_then(|np| np.getattr(intern!(py, "dtypes")).ok())
        .is_some_and(|dtypes| {
            dtypes
                .hasattr(intern!(py, "register_dlpack_dtype"))
                .unwrap_or(false)
        });
    if registers {
        format!(
            "NumPy exchanges {dtype} through DLPack only once a package registers the \
             type (np.dtypes.register_dlpack_dtype): ml_dtypes 0.7 or later registers \
             bfloat16 and the float8 types when imported"
        )
    } else {
        let version = numpy
            .as_ref()
            .and_then(|np| np.getattr(intern!(py, "__version__")).ok())
            .and_then(|v| v.str().ok())
            .map_or_else(|| "?".to_owned(), |v| v.to_string_lossy().into_owned());
        format!(
            "NumPy {version} cannot exchange {dtype} through DLPack; NumPy 2.5 and later \
             can, with ml_dtypes 0.7 or later imported (pip install 'numpy>=2.5' \
             'ml_dtypes>=0.7')"
        )
    }
}

/// `err` with `hint` after its message (same exception type), `err` as its cause.
pub(super) fn with_hint(py: Python<'_>, err: PyErr, hint: &str) -> PyErr {
    let message = err.value(py).to_string();
    let message = message.trim_end_matches('.');
    let hinted = PyErr::from_type(err.get_type(py), format!("{message}: {hint}"));
    hinted.set_cause(py, Some(err));
    hinted
}

pub(super) fn buffer_error(message: impl Into<String>) -> PyErr {
    PyBufferError::new_err(message.into())
}
/// The name of an object's type, for messages.
pub(super) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "an object".to_owned(), |n| n.to_string())
}
