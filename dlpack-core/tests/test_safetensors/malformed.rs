//! Hostile files: every malformed file is a typed error naming the file (and the
//! tensor), read or mapped alike.

use dlpack_core::{Error, TensorBatch};

use super::{file_with, folder, invalid_reason};

/// A file whose header holds a byte that is not UTF-8.
fn not_utf8() -> Vec<u8> {
    let header = b"{\"a\":\xff}";
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    file
}

/// Reads (and, outside Miri, maps) `bytes` as a file: both must fail alike, with an
/// error naming the file; returns the read's error.
fn refused(bytes: &[u8]) -> Error {
    let dir = folder();
    let path = dir.path().join("hostile.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let err = TensorBatch::read_safetensors(&path).unwrap_err();
    if !cfg!(miri) {
        // SAFETY: the file lives in a private folder that nothing else touches.
        let mapped = unsafe { TensorBatch::map_safetensors(&path) }.unwrap_err();
        assert_eq!(mapped.to_string(), err.to_string());
    }
    let text = err.to_string();
    assert!(text.contains("hostile.safetensors"), "{text}");
    err
}

/// The header of an `F32` tensor of the bytes from `begin` to `end`.
fn f32_at(begin: usize, end: usize) -> String {
    format!(
        r#"{{"dtype":"F32","shape":[{}],"data_offsets":[{begin},{end}]}}"#,
        (end - begin) / 4
    )
}

/// A malformed file: (what is wrong, the file's bytes, the tensor the error names, a
/// part of its reason).
type Case = (&'static str, Vec<u8>, Option<&'static str>, &'static str);

/// Each case, read and mapped, is an invalid file naming its tensor, for its reason.
fn all_refused(cases: Vec<Case>) {
    for (what, bytes, tensor, reason) in cases {
        let err = refused(&bytes);
        let (got_tensor, got_reason) = invalid_reason(&err);
        assert_eq!(got_tensor.as_deref(), tensor, "{what}: {err}");
        assert!(got_reason.contains(reason), "{what}: {err}");
    }
}

#[test]
fn malformed_length_prefixes_are_typed_errors() {
    all_refused(vec![
        ("empty file", vec![], None, "fewer than the 8"),
        ("short file", vec![1, 2, 3], None, "fewer than the 8"),
        (
            "length past the end",
            100u64.to_le_bytes().to_vec(),
            None,
            "past the end",
        ),
        (
            "length above the limit",
            (200_000_000u64).to_le_bytes().to_vec(),
            None,
            "limit",
        ),
    ]);
}

#[test]
fn malformed_header_json_is_a_typed_error() {
    all_refused(vec![
        ("not UTF-8", not_utf8(), None, "not UTF-8"),
        (
            "not JSON",
            file_with("{\"a\": [1, 2", &[]),
            None,
            "not a valid JSON",
        ),
        (
            "not an object",
            file_with("[1, 2]", &[]),
            None,
            "not a valid JSON",
        ),
        (
            "trailing text",
            file_with("{} x", &[]),
            None,
            "not a valid JSON",
        ),
        (
            "duplicate name",
            file_with(
                &format!(r#"{{"a":{},"a":{}}}"#, f32_at(0, 4), f32_at(4, 8)),
                &[0; 8],
            ),
            None,
            "appears twice",
        ),
        (
            "unknown dtype",
            file_with(
                r#"{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}"#,
                &[0; 16],
            ),
            None,
            "not a valid JSON",
        ),
        (
            "metadata not strings",
            file_with(r#"{"__metadata__":{"a":1}}"#, &[]),
            None,
            "not a valid JSON",
        ),
        (
            "negative extent",
            file_with(
                r#"{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}"#,
                &[],
            ),
            None,
            "not a valid JSON",
        ),
    ]);
}

#[test]
fn malformed_data_offsets_are_typed_errors() {
    all_refused(vec![
        (
            "offsets out of order",
            file_with(
                &format!(
                    r#"{{"a":{{"dtype":"U8","shape":[0],"data_offsets":[4,0]}},"b":{}}}"#,
                    f32_at(0, 4)
                ),
                &[0; 4],
            ),
            Some("a"),
            "out of order",
        ),
        (
            "overlapping",
            file_with(
                &format!(r#"{{"a":{},"b":{}}}"#, f32_at(0, 8), f32_at(4, 12)),
                &[0; 12],
            ),
            Some("b"),
            "overlaps",
        ),
        (
            "a gap",
            file_with(
                &format!(r#"{{"a":{},"b":{}}}"#, f32_at(0, 4), f32_at(8, 12)),
                &[0; 12],
            ),
            Some("b"),
            "gap",
        ),
        (
            "not starting at 0",
            file_with(&format!(r#"{{"a":{}}}"#, f32_at(4, 8)), &[0; 8]),
            Some("a"),
            "gap",
        ),
        (
            "truncated data",
            file_with(&format!(r#"{{"a":{}}}"#, f32_at(0, 8)), &[0; 5]),
            None,
            "truncated",
        ),
        (
            "trailing data",
            file_with(&format!(r#"{{"a":{}}}"#, f32_at(0, 4)), &[0; 9]),
            None,
            "longer than described",
        ),
    ]);
}

#[test]
fn malformed_tensors_are_typed_errors() {
    all_refused(vec![
        (
            "byte length and shape disagree",
            file_with(
                r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
                &[0; 8],
            ),
            Some("a"),
            "take 12",
        ),
        (
            "element count overflows",
            file_with(
                r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}}"#,
                &[],
            ),
            Some("a"),
            "too many elements",
        ),
        (
            "byte size overflows",
            file_with(
                r#"{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}}"#,
                &[],
            ),
            Some("a"),
            "byte size overflows",
        ),
        (
            "sub-byte count not a whole byte",
            file_with(
                r#"{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#,
                &[0; 2],
            ),
            Some("a"),
            "not a whole number",
        ),
        (
            "an invalid bool",
            file_with(
                r#"{"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}}"#,
                &[1, 0, 2],
            ),
            Some("m"),
            "byte 2",
        ),
        (
            "an extent that does not fit an i64",
            file_with(
                r#"{"a":{"dtype":"F8_E4M3","shape":[0,18446744073709551615],"data_offsets":[0,0]}}"#,
                &[],
            ),
            Some("a"),
            "does not fit an i64",
        ),
        (
            "a shape of 2000 extents",
            file_with(
                &format!(
                    r#"{{"a":{{"dtype":"U8","shape":[{}],"data_offsets":[0,1]}}}}"#,
                    vec!["1"; 2000].join(",")
                ),
                &[0],
            ),
            None,
            "more than 1024 extents",
        ),
        (
            "an empty name",
            file_with(
                r#"{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
                &[0],
            ),
            Some(""),
            "must not be empty",
        ),
    ]);
}
