//! Missing files and folders are I/O errors with the path; randomly damaged files are a
//! batch or a typed error, never a panic.

use std::path::{Path, PathBuf};

use dlpack_core::{Error, TensorBatch, ToDLPack};

use super::{folder, model};

#[test]
fn missing_files_and_folders_are_io_errors_with_the_path() {
    let dir = folder();
    let missing = dir.path().join("missing.safetensors");
    let err = TensorBatch::read_safetensors(&missing).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, kind: std::io::ErrorKind::NotFound, .. } if path == &missing),
        "{err}"
    );
    assert!(err.to_string().contains("missing.safetensors"));
    let err = TensorBatch::read_safetensors(dir.path()).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Io {
                kind: std::io::ErrorKind::IsADirectory,
                ..
            }
        ),
        "{err}"
    );
    if !cfg!(miri) {
        // SAFETY: nothing is mapped: both fail first.
        let err = unsafe { TensorBatch::map_safetensors(&missing) }.unwrap_err();
        assert!(matches!(
            err,
            Error::Io {
                kind: std::io::ErrorKind::NotFound,
                ..
            }
        ));
        // SAFETY: as above.
        let err = unsafe { TensorBatch::map_safetensors(dir.path()) }.unwrap_err();
        assert!(matches!(
            err,
            Error::Io {
                kind: std::io::ErrorKind::IsADirectory,
                ..
            }
        ));
    }
}

/// Random damage to a valid file's header and data: every outcome is a batch or a typed
/// error, never a panic, and (outside Miri) the mapping agrees with the read.
#[test]
fn damaged_files_never_panic() {
    use proptest::prelude::*;
    let dir = folder();
    let path: PathBuf = dir.path().join("model.safetensors");
    model()
        .to_dlpack()
        .unwrap()
        .write_safetensors(&path)
        .unwrap();
    let original = std::fs::read(&path).unwrap();
    let damaged = dir.path().join("damaged.safetensors");
    let cases = if cfg!(miri) { 4 } else { 256 };
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let len = original.len();
    runner
        .run(
            &(
                proptest::collection::vec((0..len, any::<u8>()), 1..6),
                0..len + 8,
            ),
            |(edits, cut)| {
                let mut bytes = original.clone();
                for (at, byte) in edits {
                    // Mostly the header (where a byte changes the meaning), sometimes data.
                    let at = if at % 4 == 0 {
                        at
                    } else {
                        8 + at % 300.min(len - 8)
                    };
                    bytes[at] = byte;
                }
                bytes.truncate(cut.min(len));
                check_damaged(&damaged, &bytes);
                Ok(())
            },
        )
        .unwrap();
}

fn check_damaged(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    let read = TensorBatch::read_safetensors(path);
    if !cfg!(miri) {
        // SAFETY: the file lives in a private folder that nothing else touches.
        let mapped = unsafe { TensorBatch::map_safetensors(path) };
        assert_eq!(read.is_ok(), mapped.is_ok());
    }
    if let Err(err) = read {
        assert!(
            matches!(
                err,
                Error::InvalidFile { .. } | Error::AllocationFailed { .. }
            ),
            "{err}"
        );
    }
}
