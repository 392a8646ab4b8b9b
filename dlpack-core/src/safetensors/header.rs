//! A safetensors header, read as foreign input: its length, its JSON (names unique, the
//! `__metadata__` map, every tensor's dtype, shape and offsets), and the checks that
//! make the data section's layout safe to read (offsets in order, without overlaps or
//! gaps, byte lengths that match, element counts that do not overflow, a data section
//! of exactly the described size). Every problem is an [`Error::InvalidFile`] naming
//! the file and, where there is one, the tensor.
//!
//! Why not the `safetensors` crate's own parser (`SafeTensors::read_metadata`), whose
//! format types (`Dtype`, its `TensorInfo` for writing) this crate does use:
//! - it needs the whole file in one slice (it checks the data section's length against
//!   the slice), so a read that takes only the tensors it needs, or only a header,
//!   would have to map or read the whole file first; this parser reads the header's
//!   bytes alone and checks the data section against the file's length;
//! - it collects names into a map, so a name given twice keeps one entry silently;
//!   here it is an error (a duplicate could hide a tensor that a reader of the file
//!   with another tool would see);
//! - its errors name neither the file nor the tensor, and it caps neither a shape's
//!   rank (a header could make its parse use many times its own size) nor an extent
//!   to the `i64` that DLPack needs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path;

use safetensors::Dtype;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::dtype::{DataType, left_to_right, right_to_left};
use crate::error::{Error, Result};

/// The size of the header's length field.
pub(super) const LENGTH_BYTES: usize = 8;

/// The largest header the format allows (the reference implementation's limit).
pub(super) const MAX_HEADER: usize = 100_000_000;

/// The largest rank read from a file (NumPy's own limit is 64): a longer shape is an
/// error while it is parsed, so that a header cannot make its parse use many times its
/// own size in memory.
const MAX_RANK: usize = 1024;

/// One tensor of a file.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) name: String,
    pub(super) dtype: DataType,
    pub(super) shape: Vec<usize>,
    /// Offsets in the data section, `begin..end`.
    pub(super) begin: usize,
    pub(super) end: usize,
}

/// A parsed and checked header.
#[derive(Debug)]
pub(super) struct Header {
    /// The tensors, in the header's order.
    pub(super) entries: Vec<Entry>,
    pub(super) metadata: BTreeMap<String, String>,
    /// Where the data section starts in the file.
    pub(super) data_start: usize,
    /// The file's length: the header's and the data section's.
    pub(super) file_len: u64,
    /// The file, for errors.
    pub(super) path: std::path::PathBuf,
}

/// An [`Error::InvalidFile`] about `path` (and `tensor`).
pub(super) fn invalid(path: &Path, tensor: Option<&str>, reason: impl Into<String>) -> Error {
    Error::InvalidFile {
        path: path.to_owned(),
        tensor: tensor.map(str::to_owned),
        reason: reason.into(),
    }
}

/// The header's length from the file's first bytes, checked against the file's length
/// and the format's limit.
pub(super) fn header_length(path: &Path, first: &[u8], file_len: u64) -> Result<usize> {
    let Some(bytes) = first.get(..LENGTH_BYTES) else {
        return Err(invalid(
            path,
            None,
            format!("the file has {file_len} bytes, fewer than the 8 of the header's length"),
        ));
    };
    let mut length = [0u8; LENGTH_BYTES];
    length.copy_from_slice(bytes);
    let n = u64::from_le_bytes(length);
    if n > MAX_HEADER as u64 || n > file_len - LENGTH_BYTES as u64 {
        // Text where the length should be: most often JSON, a checkpoint's index or a
        // model's configuration given for its weights.
        if let Some(what) = looks_like_text(bytes) {
            return Err(invalid(
                path,
                None,
                format!(
                    "the file starts with {what}, not with the 8-byte length of a safetensors \
                     header: a checkpoint's index (`*.safetensors.index.json`) or the folder \
                     that holds it is opened with `Checkpoint::open`, and a model's \
                     configuration holds no weights"
                ),
            ));
        }
    }
    if n > MAX_HEADER as u64 {
        return Err(invalid(
            path,
            None,
            format!("the header's length {n} is above the format's limit of {MAX_HEADER} bytes"),
        ));
    }
    if n > file_len - LENGTH_BYTES as u64 {
        return Err(invalid(
            path,
            None,
            format!(
                "the header's length {n} goes past the end of the file ({} bytes after the \
                 length)",
                file_len - LENGTH_BYTES as u64
            ),
        ));
    }
    // Below the limit, so it fits.
    Ok(n as usize)
}

/// What the first bytes of a file are, if they are printable text rather than a
/// header's length: JSON, or text.
fn looks_like_text(first: &[u8]) -> Option<&'static str> {
    let printable = first
        .iter()
        .all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace());
    if !printable {
        return None;
    }
    match first.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{' | b'[') => Some("JSON"),
        _ => Some("text"),
    }
}

/// Parses and checks the header text `json` of a file of `file_len` bytes.
pub(super) fn parse(path: &Path, json: &[u8], file_len: u64) -> Result<Header> {
    let text = core::str::from_utf8(json)
        .map_err(|e| invalid(path, None, format!("the header is not UTF-8: {e}")))?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let raw = deserializer
        .deserialize_map(HeaderVisitor)
        .and_then(|raw| deserializer.end().map(|()| raw))
        .map_err(|e| {
            invalid(
                path,
                None,
                format!("the header is not a valid JSON header: {e}"),
            )
        })?;
    let mut entries = Vec::with_capacity(raw.tensors.len());
    for (name, info) in raw.tensors {
        let dtype = data_type(info.dtype).ok_or_else(|| {
            invalid(
                path,
                Some(&name),
                format!("dtype {:?} is not supported", info.dtype),
            )
        })?;
        let (begin, end) = info.data_offsets;
        entries.push(Entry {
            name,
            dtype,
            shape: info.shape,
            begin,
            end,
        });
    }
    let data_len = check_layout(path, &entries)?;
    let data_start = LENGTH_BYTES + json.len();
    let found = file_len - data_start as u64;
    if found != data_len as u64 {
        let what = if found < data_len as u64 {
            "truncated"
        } else {
            "longer than described"
        };
        return Err(invalid(
            path,
            None,
            format!(
                "the data section is {what}: the header describes {data_len} bytes, the file \
                 holds {found}"
            ),
        ));
    }
    Ok(Header {
        entries,
        metadata: raw.metadata,
        data_start,
        file_len,
        path: path.to_owned(),
    })
}

/// Checks that the tensors, in offset order, cover the data section from 0 without a gap
/// or an overlap, each with the byte length its dtype and shape call for; returns the
/// data section's length.
fn check_layout(path: &Path, entries: &[Entry]) -> Result<usize> {
    let mut order: Vec<&Entry> = entries.iter().collect();
    order.sort_by_key(|e| (e.begin, e.end));
    let mut at = 0usize;
    for entry in order {
        let name = Some(entry.name.as_str());
        if entry.end < entry.begin {
            return Err(invalid(
                path,
                name,
                format!(
                    "its offsets [{}, {}] are out of order",
                    entry.begin, entry.end
                ),
            ));
        }
        if entry.begin != at {
            let what = if entry.begin < at {
                "overlaps the tensor before it"
            } else {
                "leaves a gap after the tensor before it"
            };
            return Err(invalid(
                path,
                name,
                format!(
                    "it starts at byte {} and {what}, which ends at {at}",
                    entry.begin
                ),
            ));
        }
        let count = entry
            .shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| {
                invalid(
                    path,
                    name,
                    format!("its shape {:?} has too many elements", entry.shape),
                )
            })?;
        // In `u64`: on a 32-bit target, the bits of a tensor past 512 MiB pass `usize`.
        let bits = (count as u64)
            .checked_mul(u64::from(entry.dtype.bits()))
            .ok_or_else(|| invalid(path, name, "its byte size overflows"))?;
        if bits % 8 != 0 {
            return Err(invalid(
                path,
                name,
                format!(
                    "{count} elements of {} bits are not a whole number of bytes",
                    entry.dtype.bits()
                ),
            ));
        }
        let size = bits / 8;
        if (entry.end - entry.begin) as u64 != size {
            return Err(invalid(
                path,
                name,
                format!(
                    "it has {} bytes, but {count} elements of {} take {size}",
                    entry.end - entry.begin,
                    entry.dtype
                ),
            ));
        }
        if isize::try_from(size).is_err() || i64::try_from(count).is_err() {
            return Err(invalid(path, name, "it is larger than the address space"));
        }
        if let Some(&extent) = entry.shape.iter().find(|&&d| i64::try_from(d).is_err()) {
            // An empty tensor may have any extents, but a DLPack extent is an `i64`.
            return Err(invalid(
                path,
                name,
                format!("its extent {extent} does not fit an i64"),
            ));
        }
        at = entry.end;
    }
    Ok(at)
}

/// The 22 dtypes safetensors 0.8 writes beside DLPack's types: the one table both
/// directions read. safetensors' `F8_E4M3` is the finite ("fn") variant, as PyTorch's
/// `float8_e4m3fn`.
const DTYPES: [(Dtype, DataType); 22] = [
    (Dtype::BOOL, DataType::BOOL),
    (Dtype::U8, DataType::U8),
    (Dtype::I8, DataType::I8),
    (Dtype::U16, DataType::U16),
    (Dtype::I16, DataType::I16),
    (Dtype::U32, DataType::U32),
    (Dtype::I32, DataType::I32),
    (Dtype::U64, DataType::U64),
    (Dtype::I64, DataType::I64),
    (Dtype::F16, DataType::F16),
    (Dtype::BF16, DataType::BF16),
    (Dtype::F32, DataType::F32),
    (Dtype::F64, DataType::F64),
    (Dtype::C64, DataType::C64),
    (Dtype::F8_E4M3, DataType::F8_E4M3FN),
    (Dtype::F8_E5M2, DataType::F8_E5M2),
    (Dtype::F8_E4M3FNUZ, DataType::F8_E4M3FNUZ),
    (Dtype::F8_E5M2FNUZ, DataType::F8_E5M2FNUZ),
    (Dtype::F8_E8M0, DataType::F8_E8M0FNU),
    (Dtype::F6_E2M3, DataType::F6_E2M3FN),
    (Dtype::F6_E3M2, DataType::F6_E3M2FN),
    (Dtype::F4, DataType::F4_E2M1FN),
];

/// The DLPack type of a safetensors dtype.
pub(super) fn data_type(dtype: Dtype) -> Option<DataType> {
    left_to_right(&DTYPES, &dtype)
}

/// The safetensors dtype of a DLPack type, if the format has one.
pub(super) fn safetensors_dtype(dtype: DataType) -> Option<Dtype> {
    right_to_left(&DTYPES, &dtype)
}

/// What the header's JSON holds, before the checks.
struct RawHeader {
    tensors: Vec<(String, RawEntry)>,
    metadata: BTreeMap<String, String>,
}

/// One tensor's entry, as the format writes it.
#[derive(Deserialize)]
struct RawEntry {
    dtype: Dtype,
    #[serde(deserialize_with = "shape")]
    shape: Vec<usize>,
    data_offsets: (usize, usize),
}

/// A shape of at most [`MAX_RANK`] extents.
fn shape<'de, D: Deserializer<'de>>(deserializer: D) -> core::result::Result<Vec<usize>, D::Error> {
    struct Shape;
    impl<'de> Visitor<'de> for Shape {
        type Value = Vec<usize>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a list of at most {MAX_RANK} extents")
        }
        fn visit_seq<A: SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> core::result::Result<Vec<usize>, A::Error> {
            let mut shape = Vec::new();
            while let Some(extent) = seq.next_element::<usize>()? {
                if shape.len() == MAX_RANK {
                    return Err(de::Error::custom(format!(
                        "a shape of more than {MAX_RANK} extents"
                    )));
                }
                shape.push(extent);
            }
            Ok(shape)
        }
    }
    deserializer.deserialize_seq(Shape)
}

/// Reads the header's top-level object key by key, refusing a name given twice (a map
/// would keep one of them silently).
struct HeaderVisitor;

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = RawHeader;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of tensors and an optional `__metadata__` object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> core::result::Result<RawHeader, A::Error> {
        let mut tensors = Vec::new();
        let mut seen = HashSet::new();
        let mut metadata = None;
        while let Some(name) = map.next_key::<String>()? {
            if !seen.insert(name.clone()) {
                return Err(de::Error::custom(format!(
                    "the name `{name}` appears twice"
                )));
            }
            if name == "__metadata__" {
                // `null` is no metadata, as the reference implementation reads it.
                let values: Option<HashMap<String, String>> = map.next_value()?;
                metadata = values.map(|values| values.into_iter().collect());
            } else {
                let info: RawEntry = map.next_value()?;
                tensors.push((name, info));
            }
        }
        Ok(RawHeader {
            tensors,
            metadata: metadata.unwrap_or_default(),
        })
    }
}
