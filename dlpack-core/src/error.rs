//! The error type of every fallible operation in this crate.

use crate::device::Device;
use crate::dtype::DataType;

/// `Result` with [`Error`] as its default error type.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Everything that can go wrong when handing tensors across the DLPack boundary.
///
/// Bad input from a foreign producer is always one of these, never a panic; a rejected
/// tensor's deleter has already run when you see the error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A pointer that must not be NULL was NULL.
    #[error("null pointer: {what} must not be null")]
    NullPointer {
        /// The pointer, e.g. `"managed tensor"` or `"shape"`.
        what: &'static str,
    },
    /// A pointer was not aligned for the type read through it.
    #[error("misaligned pointer: {what} at address {address:#x} is not aligned to {align} bytes")]
    Misaligned {
        /// The pointer, e.g. `"shape"` or `"data"`.
        what: &'static str,
        /// Its address.
        address: usize,
        /// The required alignment in bytes.
        align: usize,
    },
    /// The versioned tensor has a major version this crate cannot read.
    #[error("unsupported DLPack version {major}.{minor}: major version must be 1")]
    UnsupportedVersion {
        /// Major version found.
        major: u32,
        /// Minor version found.
        minor: u32,
    },
    /// `ndim` is negative.
    #[error("invalid ndim {ndim}: must not be negative")]
    NegativeNdim {
        /// The value found.
        ndim: i32,
    },
    /// An extent is negative.
    #[error("invalid shape: extent {extent} of axis {axis} is negative")]
    NegativeExtent {
        /// The axis.
        axis: usize,
        /// The value found.
        extent: i64,
    },
    /// A size computed from the shape, strides or offset does not fit the address space.
    #[error("overflow: {what} does not fit in isize")]
    Overflow {
        /// What overflowed, e.g. `"element count"` or `"byte span"`.
        what: &'static str,
    },
    /// The tensor has elements but its data pointer is NULL.
    #[error("null data pointer for a tensor of {elements} elements")]
    NullData {
        /// The number of elements.
        elements: usize,
    },
    /// The element type differs from the one requested.
    #[error("dtype mismatch: expected {expected}, found {found}")]
    DtypeMismatch {
        /// The requested type.
        expected: DataType,
        /// The tensor's type.
        found: DataType,
    },
    /// The element type is a vector type (lanes != 1), which ndarray cannot represent.
    #[error("unsupported dtype {dtype}: lanes must be 1")]
    UnsupportedLanes {
        /// The tensor's type.
        dtype: DataType,
    },
    /// The rank differs from the one requested.
    #[error("ndim mismatch: expected {expected}, found {found}")]
    NdimMismatch {
        /// The requested rank.
        expected: usize,
        /// The tensor's rank.
        found: usize,
    },
    /// The memory is not readable by the CPU.
    #[error("unsupported device {device}: the CPU cannot access it")]
    UnsupportedDevice {
        /// The tensor's device.
        device: Device,
    },
    /// A mutable view was requested of a tensor flagged `READ_ONLY`.
    #[error("read-only tensor: a mutable view is not allowed")]
    ReadOnly,
    /// A mutable view was requested of a tensor that other live handles may reach (an
    /// import through a safe path that cannot prove it has the data to itself).
    #[error(
        "shared tensor: a mutable view needs exclusive access, and other handles (such as \
         the Python array it came from) may reach this memory; import a copy, or see \
         `ManagedTensor::assume_exclusive`"
    )]
    NotExclusive,
    /// A mutable view was requested of a tensor whose strides make elements alias.
    #[error("overlapping strides: a mutable view needs every element at its own address")]
    OverlappingStrides,
    /// A `bool` tensor holds a byte other than 0 or 1.
    #[error("invalid bool: element {index} holds byte {byte}, expected 0 or 1")]
    InvalidBool {
        /// The flat index (in logical row-major order) of the first bad element.
        index: usize,
        /// The byte found.
        byte: u8,
    },
    /// Memory could not be allocated: for a copy of the data, or for a header.
    #[error("allocation failed: cannot allocate {}", bytes_text(*bytes))]
    AllocationFailed {
        /// The size asked for, in bytes; `usize::MAX` when it does not even fit `usize`.
        bytes: usize,
    },
    /// The shape and strides given to a producer helper are inconsistent with its buffer.
    #[error("invalid layout: {reason}")]
    InvalidLayout {
        /// What is wrong.
        reason: String,
    },
    /// A legacy (`DLManagedTensor`) tensor cannot carry the `READ_ONLY` flag.
    #[error("read-only tensor cannot be exported as legacy DLPack, which has no read-only flag")]
    ReadOnlyLegacy,
    /// Two tensors of a batch have the same name.
    #[error("duplicate tensor name `{name}`")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// A tensor expected in a batch is not there.
    #[error("missing tensor `{name}`")]
    MissingTensor {
        /// The name.
        name: String,
    },
    /// A batch holds tensors that the target struct does not expect.
    #[error("unexpected tensors: {}", quoted(names))]
    UnexpectedTensors {
        /// The names, in batch order.
        names: Vec<String>,
    },
    /// A name cannot be used as a tensor name or name segment.
    #[error("invalid tensor name `{name}`: {reason}")]
    InvalidName {
        /// The name.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// An error about one named tensor of a batch.
    #[error("tensor `{name}`: {source}")]
    Tensor {
        /// The tensor's name.
        name: String,
        /// What went wrong.
        source: Box<Error>,
    },
    /// A Python object could not be exchanged.
    #[error("python: {message}")]
    Python {
        /// What went wrong.
        message: String,
    },
}

fn bytes_text(bytes: usize) -> String {
    if bytes == usize::MAX {
        "more bytes than the address space holds".to_owned()
    } else {
        format!("{bytes} bytes")
    }
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Error {
    /// Wraps this error with the name of the tensor it is about (no-op for an empty name).
    pub fn in_tensor(self, name: &str) -> Self {
        if name.is_empty() {
            return self;
        }
        Self::Tensor {
            name: name.to_owned(),
            source: Box::new(self),
        }
    }

    /// The innermost error, looking through [`Error::Tensor`].
    pub fn root(&self) -> &Self {
        match self {
            Self::Tensor { source, .. } => source.root(),
            other => other,
        }
    }
}
