//! Arrow IPC files: mapped and decoded over the mapping (the file's own bytes, no
//! copy), into a derived struct; several batches, truncated and lying files refused.
//! (Miri has no file mapping: these run natively and under ASan.)

use std::sync::Arc;

use arrow_ipc::writer::FileWriter;
use dlpack_core::arrow::arrow_array::RecordBatch;
use dlpack_core::arrow::{ArrowErrorKind, read_ipc_file};
use dlpack_core::{DLPackArray, FromDLPack, TensorBatch};
use ndarray::{Ix1, Ix2};

use super::{arrow_error, floats, lists};

fn write(path: &std::path::Path, batches: &[RecordBatch]) {
    let file = std::fs::File::create(path).unwrap();
    let mut writer = FileWriter::try_new(file, &batches[0].schema()).unwrap();
    for batch in batches {
        writer.write(batch).unwrap();
    }
    writer.finish().unwrap();
}

fn table(rows: usize) -> RecordBatch {
    let x = Arc::new(lists(Arc::new(floats(rows * 4)), 4)) as _;
    let y = Arc::new(dlpack_core::arrow::arrow_array::Int64Array::from_iter_values(0..rows as i64))
        as _;
    RecordBatch::try_from_iter([("x", x), ("y", y)]).unwrap()
}

#[derive(FromDLPack)]
struct Rows {
    x: DLPackArray<f32, Ix2>,
    y: DLPackArray<i64, Ix1>,
}

#[test]
#[cfg_attr(miri, ignore = "Miri cannot map files")]
fn an_ipc_file_is_a_derived_struct_over_the_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.arrow");
    write(&path, &[table(16)]);
    let bytes = std::fs::read(&path).unwrap();
    let rows = Rows::from_dlpack(TensorBatch::read_arrow_ipc(&path).unwrap()).unwrap();
    let x = rows.x.view();
    assert_eq!(x.dim(), (16, 4));
    assert_eq!(x[[15, 3]], 63.0);
    assert_eq!(rows.y.view()[7], 7);
    // The values are the file's bytes where they lie in the file: found in the mapping,
    // not a copy (a copy would be elsewhere; the mapping is the only place holding the
    // file's bytes at an address inside the mapped range, checked by content and
    // layout: the x values start 64-byte aligned in the file).
    let needle: Vec<u8> = (0..64).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .unwrap();
    assert_eq!(x.as_ptr() as usize % 64, 0);
    let mapped_start = x.as_ptr() as usize - at;
    assert_eq!(
        mapped_start % 4096,
        0,
        "the x values sit in the mapping at their file offset"
    );
}

#[test]
#[cfg_attr(miri, ignore = "Miri cannot map files")]
fn several_batches_are_read_by_read_ipc_file_and_refused_as_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.arrow");
    write(&path, &[table(3), table(5)]);
    let batches = read_ipc_file(&path).unwrap();
    assert_eq!(
        batches
            .iter()
            .map(RecordBatch::num_rows)
            .collect::<Vec<_>>(),
        [3, 5]
    );
    let (kind, _, text) = arrow_error(TensorBatch::read_arrow_ipc(&path).unwrap_err());
    assert_eq!(kind, ArrowErrorKind::Chunks);
    assert!(
        text.contains("2 record batches") && text.contains("read_ipc_file"),
        "{text}"
    );
}

#[test]
#[cfg_attr(miri, ignore = "Miri cannot map files")]
fn truncated_and_lying_files_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.arrow");
    write(&path, &[table(8)]);
    let good = std::fs::read(&path).unwrap();
    let damaged = dir.path().join("damaged.arrow");
    let mut cases: Vec<Vec<u8>> = vec![
        Vec::new(),
        good[..10].to_vec(),
        good[..good.len() / 2].to_vec(),
        good[..good.len() - 1].to_vec(),
    ];
    // Every single byte of the footer and of the last 200 bytes flipped in turn.
    for i in good.len().saturating_sub(200)..good.len() {
        let mut bytes = good.clone();
        bytes[i] ^= 0xff;
        cases.push(bytes);
    }
    for bytes in cases {
        std::fs::write(&damaged, &bytes).unwrap();
        // Whatever happens is a value: an error, or batches that are well formed.
        match read_ipc_file(&damaged) {
            Err(err) => assert_eq!(arrow_error(err).0, ArrowErrorKind::File),
            Ok(batches) => {
                for batch in batches {
                    let _ = dlpack_core::ToDLPack::to_dlpack(batch);
                }
            }
        }
    }
    let missing = read_ipc_file(dir.path().join("missing.arrow")).unwrap_err();
    assert!(matches!(missing, dlpack_core::Error::Io { .. }));
    let folder = read_ipc_file(dir.path()).unwrap_err();
    assert!(matches!(folder, dlpack_core::Error::Io { .. }));
}
