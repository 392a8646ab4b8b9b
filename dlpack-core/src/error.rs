//! The error type of every fallible operation in this crate.

use std::path::PathBuf;

use crate::device::Device;
use crate::dtype::DataType;

mod patterns;

/// `Result` with [`Error`] as its default error type.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Everything that can go wrong when handing tensors across the DLPack boundary.
///
/// Bad input from a foreign producer is always one of these, never a panic; a rejected
/// tensor's deleter has already run when you see the error. With the `pyo3` feature each
/// variant becomes the Python exception NumPy raises in the same situation, named in
/// its documentation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A pointer that must not be NULL was NULL. Python: `BufferError`.
    #[error("null pointer: {what} must not be null")]
    NullPointer {
        /// The pointer, e.g. `"managed tensor"` or `"shape"`.
        what: &'static str,
    },
    /// A pointer was not aligned for the type read through it. Python: `BufferError`.
    #[error("misaligned pointer: {what} at address {address:#x} is not aligned to {align} bytes")]
    Misaligned {
        /// The pointer, e.g. `"shape"` or `"data"`.
        what: &'static str,
        /// Its address.
        address: usize,
        /// The required alignment in bytes.
        align: usize,
    },
    /// The versioned tensor has a major version this crate cannot read. Python:
    /// `BufferError`.
    #[error("unsupported DLPack version {major}.{minor}: major version must be 1")]
    UnsupportedVersion {
        /// Major version found.
        major: u32,
        /// Minor version found.
        minor: u32,
    },
    /// `ndim` is negative. Python: `BufferError`.
    #[error("invalid ndim {ndim}: must not be negative")]
    NegativeNdim {
        /// The value found.
        ndim: i32,
    },
    /// An extent is negative. Python: `ValueError`.
    #[error("invalid shape: extent {extent} of axis {axis} is negative")]
    NegativeExtent {
        /// The axis.
        axis: usize,
        /// The value found.
        extent: i64,
    },
    /// A size computed from the shape, strides or offset does not fit the address space.
    /// Python: `ValueError`.
    #[error("overflow: {what} does not fit in isize")]
    Overflow {
        /// What overflowed, e.g. `"element count"` or `"byte span"`.
        what: &'static str,
    },
    /// The tensor has elements but its data pointer is NULL. Python: `BufferError`.
    #[error("null data pointer for a tensor of {elements} elements")]
    NullData {
        /// The number of elements.
        elements: usize,
    },
    /// The element type differs from the one requested. Python: `TypeError`, or
    /// `BufferError` when the tensor's type is not one that NumPy, PyTorch or JAX
    /// exchange.
    #[error("dtype mismatch: expected {expected}, found {found}")]
    DtypeMismatch {
        /// The requested type.
        expected: DataType,
        /// The tensor's type.
        found: DataType,
    },
    /// The element type is a vector type (lanes != 1), which ndarray cannot represent.
    /// Python: `BufferError`.
    #[error("unsupported dtype {dtype}: lanes must be 1")]
    UnsupportedLanes {
        /// The tensor's type.
        dtype: DataType,
    },
    /// The element type cannot be handled here: zero bits, or a type with no Rust
    /// element where one is needed (a typed copy). Python: `BufferError`.
    #[error("unsupported dtype {dtype}")]
    UnsupportedDtype {
        /// The tensor's type.
        dtype: DataType,
    },
    /// Elements smaller than a byte (float6, float4) are packed: their tensor must be
    /// C-contiguous to be read, and packed (not flagged `IS_SUBBYTE_TYPE_PADDED`) to be
    /// written to a file. Python: `BufferError`.
    #[error(
        "a {dtype} tensor must be packed and C-contiguous: its elements are stored below a byte"
    )]
    PackedLayout {
        /// The tensor's type.
        dtype: DataType,
    },
    /// The rank differs from the one requested. Python: `TypeError`.
    #[error("ndim mismatch: expected {expected}, found {found}")]
    NdimMismatch {
        /// The requested rank.
        expected: usize,
        /// The tensor's rank.
        found: usize,
    },
    /// The extents differ from the ones expected (a check of your own, or a load into
    /// an existing array). Python: `ValueError`.
    #[error("shape mismatch: expected {expected:?}, found {found:?}")]
    ShapeMismatch {
        /// The expected extents.
        expected: Vec<usize>,
        /// The tensor's extents.
        found: Vec<usize>,
    },
    /// The memory is not readable by the CPU. Python: `BufferError`.
    #[error("unsupported device {device}: the CPU cannot access it")]
    UnsupportedDevice {
        /// The tensor's device.
        device: Device,
    },
    /// A mutable view was requested of a tensor flagged `READ_ONLY`. Python:
    /// `ValueError`.
    #[error("read-only tensor: a mutable view is not allowed")]
    ReadOnly,
    /// A mutable view was requested of a tensor that other live handles may reach (an
    /// import through a safe path that cannot prove it has the data to itself; see
    /// the [import safety guide](crate::guide::import_safety)). Python:
    /// `BufferError`.
    #[error(
        "shared tensor: a mutable view needs exclusive access, and other handles (such as \
         the Python array it came from) may reach this memory; import a copy, or see \
         `ManagedTensor::assume_exclusive`"
    )]
    NotExclusive,
    /// A mutable view was requested of a tensor whose strides make elements alias.
    /// Python: `ValueError`.
    #[error("overlapping strides: a mutable view needs every element at its own address")]
    OverlappingStrides,
    /// A `bool` tensor holds a byte other than 0 or 1. Python: `ValueError`.
    #[error("invalid bool: element {index} holds byte {byte}, expected 0 or 1")]
    InvalidBool {
        /// The flat index, in logical row-major order, of an element holding the byte.
        index: usize,
        /// The byte found.
        byte: u8,
    },
    /// Memory could not be allocated: for a copy of the data, or for a header. Python:
    /// `MemoryError`.
    #[error("allocation failed: cannot allocate {}", bytes_text(*bytes))]
    AllocationFailed {
        /// The size asked for, in bytes; `usize::MAX` when it does not even fit `usize`.
        bytes: usize,
    },
    /// A layout has a number of strides other than its number of dimensions. Python:
    /// `ValueError`.
    #[error("invalid layout: {strides} strides for {ndim} dimensions")]
    StridesLength {
        /// The number of dimensions.
        ndim: usize,
        /// The number of strides.
        strides: usize,
    },
    /// A layout has more dimensions than DLPack's `int32_t ndim` holds. Python:
    /// `ValueError`.
    #[error("invalid layout: {ndim} dimensions do not fit DLPack's int32 ndim")]
    TooManyDimensions {
        /// The number of dimensions.
        ndim: usize,
    },
    /// A layout given to [`ManagedTensor::from_buffer`](crate::ManagedTensor::from_buffer) reaches outside its buffer.
    /// Python: `ValueError`.
    #[error(
        "invalid layout: elements reachable from offset {offset} lie outside a buffer of {len}"
    )]
    OutOfBuffer {
        /// The offset of element `[0, ...]` in the buffer.
        offset: usize,
        /// The length of the buffer, in elements.
        len: usize,
    },
    /// The buffer given to [`ManagedTensor::from_buffer`](crate::ManagedTensor::from_buffer) changed length between two
    /// calls of `AsMut::as_mut`. Python: `ValueError`.
    #[error(
        "invalid buffer: its length changed from {before} to {after} between two calls to `as_mut`"
    )]
    BufferResized {
        /// The length first seen.
        before: usize,
        /// The length seen at the owner's final address.
        after: usize,
    },
    /// A `READ_ONLY` tensor cannot be handed to the legacy ABI, which has no read-only
    /// flag (see [`ReadOnlyLegacyError`](crate::ReadOnlyLegacyError), which gives the tensor back). Python:
    /// `BufferError`.
    #[error("read-only tensor cannot be exported as legacy DLPack, which has no read-only flag")]
    ReadOnlyLegacy,
    /// Another framework (libtorch through `dlpack-tch`, burn) refused the tensor or
    /// cannot represent it: a dtype, device or layout it lacks, or its own error.
    /// Python: `BufferError`.
    #[error("{framework}: {message}")]
    Framework {
        /// The framework: `"torch"`, `"burn"`.
        framework: &'static str,
        /// Its message, one line.
        message: String,
    },
    /// An in-place write into an array imported from Python that its producer's rules
    /// refuse (`DLPackArray::assume_exclusive`, feature `pyo3`): a PyTorch tensor that
    /// requires grad, extracted while grad mode was on. Python: `RuntimeError`, as
    /// torch raises.
    #[error("in-place write refused: {reason}")]
    InPlaceRefused {
        /// Why, and what to do instead.
        reason: String,
    },
    /// Two tensors of a batch have the same name. Python: `ValueError`.
    #[error("duplicate tensor name `{name}`")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// A tensor expected in a batch is not there. Python: `KeyError`.
    #[error("missing tensor `{name}`")]
    MissingTensor {
        /// The name.
        name: String,
    },
    /// A batch holds tensors that the target struct does not expect. Python:
    /// `ValueError`.
    #[error("unexpected tensors: {}", quoted(names))]
    UnexpectedTensors {
        /// The names, in batch order.
        names: Vec<String>,
    },
    /// A value took a tensor that its type's [`FromDLPack::select_in`] did not select,
    /// so the tensor was never read: a `FromDLPack` implementation whose `select_in`
    /// does not mirror its `from_dlpack_in`. Python: `ValueError`.
    ///
    /// [`FromDLPack::select_in`]: crate::FromDLPack::select_in
    #[error(
        "tensor `{name}` was taken but not selected: the type's `FromDLPack::select_in` \
         must select what its `from_dlpack_in` takes"
    )]
    NotSelected {
        /// The tensor's name.
        name: String,
    },
    /// A batch does not fit the value it is imported or loaded into, strictly (like
    /// PyTorch's `load_state_dict(strict=True)`): every missing name, every unexpected
    /// name and every tensor that could not be taken (each an [`Error::Tensor`] naming
    /// it, with the expected and found dtype, rank or shape), at once. Python:
    /// `ValueError`.
    ///
    /// The message is brief where the lists are long, and says the fix it can see; the
    /// fields keep every name:
    /// - names that differ only in integer segments are one pattern with a count:
    ///   `` `layers.{0..31}.self_attn.q_proj.weight` (32) `` (`{0..3,5,7..9}` for
    ///   indices with gaps), at most 8 patterns of each list, then "and N more";
    /// - a missing and an unexpected pattern alike but for one word are one rename:
    ///   "the struct has `self_attention` where the checkpoint has `self_attn`
    ///   (...): `#[dlpack(rename = "self_attn")]` on the field `self_attention`";
    /// - a prefix on every unexpected name that, stripped, gives the missing ones (at
    ///   least half of them) is one line with
    ///   `Checkpoint::load_at` (feature `safetensors`), and a prefix
    ///   on the missing names that the checkpoint lacks one with `#[dlpack(flatten)]`;
    /// - an [`Error::EmptyContainer`] or [`Error::LoneShard`] among `failed` says what
    ///   the unexpected or missing names mean;
    /// - float tensors of another float type are one line per pair of types, with
    ///   `ReadOptions::convert_floats` (feature `safetensors`).
    #[error(
        "state_dict does not fit: {}",
        state_dict_text(missing, unexpected, failed, &ToString::to_string)
    )]
    StateDict {
        /// Names the value expects that the batch does not have.
        missing: Vec<String>,
        /// Names of the batch that the value does not expect, in batch order.
        unexpected: Vec<String>,
        /// The tensors that are there but could not be imported, and what explains
        /// the missing or unexpected names ([`Error::EmptyContainer`],
        /// [`Error::LoneShard`]).
        failed: Vec<Error>,
    },
    /// A tensor-parallel rank that is not in its group: a world size of 0, or a rank
    /// not below the world size (`ReadOptions::tensor_parallel`). Python: `ValueError`.
    #[error("{}", rank_text(*rank, *world_size))]
    InvalidRank {
        /// The rank given.
        rank: usize,
        /// The world size given.
        world_size: usize,
    },
    /// A tensor that cannot be split into equal parts along the dimension its field
    /// declares (`#[dlpack(split = D)]`), one per rank: a dimension it does not have,
    /// an extent that is not a multiple of the world size, or packed elements (below
    /// a byte) whose parts would not start on whole bytes. Found from the headers,
    /// before anything is read; the error names the tensor (in an [`Error::Tensor`]).
    /// Python: `ValueError`.
    #[error("{}", split_text(&format!("{shape:?}"), shape, *dim, *world_size, *dtype))]
    InvalidSplit {
        /// The full tensor's extents, as the file stores them.
        shape: Vec<usize>,
        /// The dimension the field is split along.
        dim: usize,
        /// The number of ranks it is split between.
        world_size: usize,
        /// The tensor's element type in the file.
        dtype: DataType,
    },
    /// A `Vec` or map field took no items while names beside it, that nothing took, look
    /// like a container's items: most likely a misnamed field (`blocks` where the
    /// checkpoint says `layers`). A `Vec` field takes `name.0`, `name.1`, ... up to the
    /// first gap, and an empty one is a valid empty list where nothing looks like its
    /// items. A strict load reports it in an [`Error::StateDict`] (among its `failed`),
    /// a lenient one in [`LoadReport::empty`](crate::LoadReport::empty). Python:
    /// `ValueError`.
    #[error("{}", empty_container_text(name, kind, like))]
    EmptyContainer {
        /// The field's full name (`model.blocks`).
        name: String,
        /// What it is: `"Vec"` or `"map"`.
        kind: &'static str,
        /// The names at its level that nothing took and that look like its items
        /// (`model.layers.0.weight`, ...), in the checkpoint's order.
        like: Vec<String>,
    },
    /// Tensors are missing from a checkpoint opened as one shard of several: an index
    /// beside the file lists it among its shards. Reported in an [`Error::StateDict`]
    /// (among its `failed`) beside the missing names. Python: `ValueError`.
    #[error(
        "`{}` is one of the {shards} shards of `{}` beside it: open that index or its folder",
        file_name(shard),
        file_name(index)
    )]
    LoneShard {
        /// The file opened.
        shard: PathBuf,
        /// The index beside it that lists it.
        index: PathBuf,
        /// How many shards the index lists.
        shards: usize,
    },
    /// A name cannot be used as a tensor name or name segment. Python: `ValueError`.
    #[error("invalid tensor name `{name}`: {reason}")]
    InvalidName {
        /// The name.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A file could not be opened, read or written. Python: the `OSError` of its kind
    /// (`FileNotFoundError`, `IsADirectoryError`, `PermissionError`, ...).
    #[error("{}", io_text(path, message))]
    Io {
        /// The file (or the folder of a file being written); empty for an error converted
        /// with `From<std::io::Error>` (`?` on an I/O call of your own), which knows none.
        path: PathBuf,
        /// What kind of failure the operating system reported.
        kind: std::io::ErrorKind,
        /// The operating system's message.
        message: String,
    },
    /// A file does not hold what its format says: a safetensors file whose header is
    /// not JSON, whose offsets overlap or leave gaps, whose data section is truncated,
    /// ... Python: `ValueError`.
    #[error("invalid {} {}: {}{reason}", file_kind(path), path.display(), tensor_text(tensor))]
    InvalidFile {
        /// The file.
        path: PathBuf,
        /// The tensor the problem is about, if any.
        tensor: Option<String>,
        /// What is wrong.
        reason: String,
    },
    /// An Arrow column that cannot be a tensor, or a tensor that cannot be an Arrow
    /// column (feature `arrow`): nulls, a type with no tensor form, a layout or a
    /// buffer the other side cannot take, extension metadata that lies. The message
    /// names the column and the fix. Python: `TypeError` for a type
    /// ([`ArrowErrorKind::Type`]), `ValueError` otherwise.
    #[cfg(feature = "arrow")]
    #[error("{}", arrow_text(column, reason))]
    Arrow {
        /// The column (empty for an array without a name).
        column: String,
        /// What kind of problem.
        kind: ArrowErrorKind,
        /// What is wrong, and what to do.
        reason: String,
    },
    /// An error about one named tensor of a batch; the message includes the error's
    /// own (so it is not also returned as `source()`, which would show it twice).
    /// Python: the exception of the error itself.
    #[error("tensor `{name}`: {error}")]
    Tensor {
        /// The tensor's name.
        name: String,
        /// What went wrong.
        error: Box<Error>,
    },
}

/// What kind of problem an [`Error::Arrow`] is.
#[cfg(feature = "arrow")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ArrowErrorKind {
    /// The column has nulls (at any level of a nested list).
    Nulls,
    /// The type has no tensor form (strings, booleans, lists of variable length,
    /// dictionaries, decimals, times, structs where one column is expected), or the
    /// tensor's element type has no Arrow form.
    Type,
    /// The layout cannot be shared as it is: a tensor that is not in C order (nor a
    /// permutation of its cells), on a device the CPU cannot read, misaligned; a
    /// shape whose size overflows; columns of different lengths.
    Layout,
    /// A canonical extension's metadata that cannot be read or does not fit its storage.
    Metadata,
    /// Data that comes in several pieces (chunks, batches) where one buffer is needed.
    Chunks,
    /// An Arrow IPC file that cannot be read.
    File,
}

#[cfg(feature = "arrow")]
fn arrow_text(column: &str, reason: &str) -> String {
    if column.is_empty() {
        format!("Arrow array: {reason}")
    } else {
        format!("Arrow column `{column}`: {reason}")
    }
}

/// What a file of an [`Error::InvalidFile`] was read as: a checkpoint's index (JSON), or
/// a safetensors file.
fn file_kind(path: &std::path::Path) -> &'static str {
    if path.extension().is_some_and(|e| e == "json") {
        "checkpoint index"
    } else {
        "safetensors file"
    }
}

fn tensor_text(tensor: &Option<String>) -> String {
    tensor
        .as_ref()
        .map_or_else(String::new, |name| format!("tensor `{name}`: "))
}

fn io_text(path: &std::path::Path, message: &str) -> String {
    if path.as_os_str().is_empty() {
        message.to_owned()
    } else {
        format!("{}: {message}", path.display())
    }
}

fn rank_text(rank: usize, world_size: usize) -> String {
    if world_size == 0 {
        "invalid tensor-parallel world size 0: a group has at least one rank".to_owned()
    } else {
        format!(
            "invalid tensor-parallel rank {rank}: the ranks of a world of size {world_size} \
             are 0 to {}",
            world_size - 1
        )
    }
}

/// [`Error::InvalidSplit`]'s message, its shape written `shown` (Rust's `[4, 6]`, or
/// Python's `(4, 6)`).
pub(crate) fn split_text(
    shown: &str,
    shape: &[usize],
    dim: usize,
    world_size: usize,
    dtype: DataType,
) -> String {
    let head = format!(
        "cannot split a tensor of shape {shown} along dimension {dim} between \
         {world_size} ranks"
    );
    match shape.get(dim) {
        None => format!("{head}: it has {} dimensions", shape.len()),
        Some(&extent) if world_size == 0 || extent % world_size != 0 => {
            format!("{head}: {extent} is not a multiple of {world_size}")
        }
        Some(_) => format!(
            "{head}: a {dtype} element takes {} bits, and the parts would not start on \
             whole bytes",
            dtype.bits()
        ),
    }
}

fn bytes_text(bytes: usize) -> String {
    if bytes == usize::MAX {
        "more bytes than the address space holds".to_owned()
    } else {
        format!("{bytes} bytes")
    }
}

fn file_name(path: &std::path::Path) -> std::borrow::Cow<'_, str> {
    match path.file_name() {
        Some(name) => name.to_string_lossy(),
        None => path.to_string_lossy(),
    }
}

fn empty_container_text(name: &str, kind: &str, like: &[String]) -> String {
    let (parent, field) = match name.rsplit_once('.') {
        Some((parent, field)) => (parent, field),
        None => ("", name),
    };
    let vec = kind == "Vec";
    let (items, takes) = if vec {
        (
            "items",
            format!("a Vec takes `{name}.0`, `{name}.1`, … up to the first gap"),
        )
    } else {
        ("entries", format!("a map takes the names under `{name}.`"))
    };
    let segments = patterns::look_alike_segments(parent, like);
    let first = format!("{name}.0");
    let has_first = like
        .iter()
        .any(|n| *n == first || n.strip_prefix(&first).is_some_and(|r| r.starts_with('.')));
    let fix = match segments[..] {
        // A `Vec` in place, which loads into the items it has.
        [one] if one == field && has_first => "a load in place fills the items a Vec has, \
             and this one has none: read a new value, or give it its items first"
            .to_owned(),
        [one] if one == field => format!("{takes}, and there is no `{first}`"),
        [one] => {
            format!("`#[dlpack(rename = \"{one}\")]` on it if those are its {items} ({takes})")
        }
        _ => format!("`#[dlpack(rename = \"...\")]` on it with the name of its {items} ({takes})"),
    };
    format!(
        "the field `{name}` (a {kind}) took no {items} while the checkpoint has {} ({}): {fix}",
        patterns::look_alike_text(parent, like, vec),
        patterns::tensors(like.len())
    )
}

/// [`Error::StateDict`]'s message after its first words, each error among `failed` that
/// is shown as it is written by `render` (its `Display`, or in Python's words).
pub(crate) fn state_dict_text(
    missing: &[String],
    unexpected: &[String],
    failed: &[Error],
    render: &dyn Fn(&Error) -> String,
) -> String {
    let mut parts = Vec::new();
    let mut missing: Vec<&str> = missing.iter().map(String::as_str).collect();
    let mut unexpected: Vec<&str> = unexpected.iter().map(String::as_str).collect();
    // What explains the names first: a container that took nothing while its items
    // seem to be there under another name.
    let mut hints = Vec::new();
    let mut rest = Vec::new();
    for err in failed {
        match err {
            Error::EmptyContainer { name, kind, like } => {
                parts.push(empty_container_text(name, kind, like));
                let like: std::collections::HashSet<&str> =
                    like.iter().map(String::as_str).collect();
                unexpected.retain(|n| !like.contains(n));
            }
            Error::LoneShard { .. } => hints.push(render(err)),
            other => rest.push(other),
        }
    }
    // A prefix that one side has and the other lacks.
    if let Some((line, used_missing, used_unexpected)) =
        patterns::prefix_line(&missing, &unexpected)
    {
        parts.push(line);
        missing.retain(|n| !used_missing.contains(n));
        unexpected.retain(|n| !used_unexpected.contains(n));
    }
    // Fields named otherwise than the checkpoint names them.
    let (renames, used_missing, used_unexpected) = patterns::rename_lines(&missing, &unexpected);
    parts.extend(renames);
    missing.retain(|n| !used_missing.contains(n));
    unexpected.retain(|n| !used_unexpected.contains(n));
    parts.extend(patterns::list("missing", &missing));
    parts.extend(patterns::list("unexpected", &unexpected));
    // Float tensors of another float type, by the pair of types: one line each, with
    // the fix, then a few of their names (a 7B model has hundreds).
    let mut floats: Vec<((DataType, DataType), Vec<&str>)> = Vec::new();
    let mut others = Vec::new();
    for err in rest {
        match float_mismatch(err) {
            Some((name, pair)) => match floats.iter_mut().find(|(p, _)| *p == pair) {
                Some((_, names)) => names.push(name),
                None => floats.push((pair, vec![name])),
            },
            None => others.push(err),
        }
    }
    for ((found, expected), names) in &floats {
        parts.push(float_mismatch_text(*found, *expected, names));
    }
    // Tensors that cannot be split the same way (a shape repeated in every layer), one
    // line each, their names grouped by pattern.
    let mut splits: Vec<(String, Vec<&str>)> = Vec::new();
    for err in others {
        let text = match err {
            Error::Tensor { name, error } if matches!(**error, Error::InvalidSplit { .. }) => {
                Some((name.as_str(), render(error)))
            }
            _ => None,
        };
        let Some((name, text)) = text else {
            splits.push((render(err), Vec::new()));
            continue;
        };
        match splits
            .iter_mut()
            .find(|(t, names)| *t == text && !names.is_empty())
        {
            Some((_, names)) => names.push(name),
            None => splits.push((text, vec![name])),
        }
    }
    parts.extend(
        splits
            .into_iter()
            .map(|(text, names)| match names.as_slice() {
                [] => text,
                [name] => format!("tensor `{name}`: {text}"),
                names => format!("{}: {text}", patterns::names_text(names)),
            }),
    );
    parts.extend(hints);
    parts.join("; ")
}

/// The name, and the found and expected types, of a tensor refused for being of
/// another float type than its field.
fn float_mismatch(err: &Error) -> Option<(&str, (DataType, DataType))> {
    let Error::Tensor { name, error } = err else {
        return None;
    };
    let Error::DtypeMismatch { expected, found } = **error else {
        return None;
    };
    let floats = [DataType::BF16, DataType::F16, DataType::F32, DataType::F64];
    (floats.contains(&expected) && floats.contains(&found))
        .then_some((name.as_str(), (found, expected)))
}

/// How many names shown after the count of tensors of another float type.
const FLOAT_EXAMPLES: usize = 3;

fn float_mismatch_text(found: DataType, expected: DataType, names: &[&str]) -> String {
    let constant = match expected {
        DataType::BF16 => "BF16",
        DataType::F16 => "F16",
        DataType::F32 => "F32",
        _ => "F64",
    };
    let (count, are) = match names.len() {
        1 => ("1 tensor".to_owned(), "is"),
        n => (format!("{n} tensors"), "are"),
    };
    let shown: Vec<String> = names
        .iter()
        .take(FLOAT_EXAMPLES)
        .map(|n| format!("`{n}`"))
        .collect();
    let more = match names.len().saturating_sub(FLOAT_EXAMPLES) {
        0 => String::new(),
        rest => format!(" and {rest} more"),
    };
    format!(
        "{count} {are} {found} where the value takes {expected}: load with \
         `ReadOptions::new().convert_floats(DataType::{constant})` to convert them as \
         PyTorch's `.to()` does (e.g. {}{more})",
        shown.join(", ")
    )
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Error {
    /// An [`Error::Misaligned`] about the pointer `ptr`, which must be aligned for `T`.
    pub(crate) fn misaligned<T>(what: &'static str, ptr: *const T) -> Self {
        Self::Misaligned {
            what,
            address: ptr as usize,
            align: align_of::<T>(),
        }
    }

    /// `Ok` when `ptr` is aligned for `T`, else [`Error::misaligned`].
    pub(crate) fn check_aligned<T>(what: &'static str, ptr: *const T) -> Result<()> {
        if ptr.is_aligned() {
            Ok(())
        } else {
            Err(Self::misaligned(what, ptr))
        }
    }

    /// `Ok` for a DLPack version this crate reads (major version 1, any minor), else
    /// [`Error::UnsupportedVersion`]: the one version check of every import path.
    pub(crate) fn check_version(version: crate::ffi::DLPackVersion) -> Result<()> {
        if version.major == crate::ffi::DLPACK_MAJOR_VERSION {
            Ok(())
        } else {
            Err(Self::UnsupportedVersion {
                major: version.major,
                minor: version.minor,
            })
        }
    }

    /// An [`Error::Io`] about `path`.
    #[cfg(feature = "safetensors")]
    pub(crate) fn io(path: &std::path::Path, err: &std::io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            kind: err.kind(),
            message: err.to_string(),
        }
    }

    /// Wraps this error with the name of the tensor it is about (no-op for an empty name).
    pub fn in_tensor(self, name: &str) -> Self {
        if name.is_empty() {
            return self;
        }
        Self::Tensor {
            name: name.to_owned(),
            error: Box::new(self),
        }
    }

    /// The innermost error, looking through [`Error::Tensor`].
    pub fn root(&self) -> &Self {
        match self {
            Self::Tensor { error, .. } => error.root(),
            other => other,
        }
    }
}

impl From<std::io::Error> for Error {
    /// An [`Error::Io`] with no path (the error knows none), so that `?` works on I/O
    /// calls of your own beside this crate's; name the file with
    /// `map_err(|e| Error::Io { path, kind: e.kind(), message: e.to_string() })` where it
    /// matters.
    fn from(err: std::io::Error) -> Self {
        Self::Io {
            path: std::path::PathBuf::new(),
            kind: err.kind(),
            message: err.to_string(),
        }
    }
}
