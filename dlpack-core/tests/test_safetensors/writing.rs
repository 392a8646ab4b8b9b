//! Saves: tensors a file cannot hold are refused and leave no file, a save replaces a
//! file only when complete, the same batch always gives the same file, and links,
//! permissions and long names are kept.

use dlpack_core::ffi::{DLDataTypeCode, DLDeviceType};
use dlpack_core::{DataType, Device, Error, ManagedTensor, TensorBatch, ToDLPack};

use super::{bytes_tensor, every_dtype_batch, folder, model};

#[test]
fn tensors_that_cannot_be_written_are_errors_and_leave_no_file() {
    let dir = folder();
    let path = dir.path().join("refused.safetensors");
    type Expected = fn(&Error) -> bool;
    let cases: Vec<(&str, ManagedTensor, Expected)> = vec![
        ("gpu", cuda_tensor(), |e| {
            matches!(e, Error::UnsupportedDevice { .. })
        }),
        (
            "wide",
            bytes_tensor(vec![0; 16], &[1], DataType::C128),
            |e| matches!(e, Error::UnsupportedDtype { .. }),
        ),
        (
            "vector",
            bytes_tensor(
                vec![0; 16],
                &[2],
                DataType::new(DLDataTypeCode::kDLFloat, 32, 2),
            ),
            |e| matches!(e, Error::UnsupportedDtype { .. }),
        ),
        (
            "__metadata__",
            bytes_tensor(vec![0; 4], &[1], DataType::F32),
            |e| matches!(e, Error::InvalidName { .. }),
        ),
    ];
    for (name, tensor, expected) in cases {
        let mut batch = TensorBatch::new();
        batch
            .insert("fine", bytes_tensor(vec![1; 4], &[4], DataType::U8))
            .unwrap();
        batch.insert(name, tensor).unwrap();
        let err = batch.write_safetensors(&path).unwrap_err();
        match &err {
            Error::Tensor { name: named, error } => {
                assert_eq!(named, name);
                assert!(expected(error), "{name}: {err}");
            }
            other => panic!("{name}: {other}"),
        }
        assert!(!path.exists());
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no temporary file left"
    );
    // A folder that does not exist: the I/O error names it.
    let nowhere = dir.path().join("missing").join("x.safetensors");
    let err = every_dtype_batch().write_safetensors(&nowhere).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, kind: std::io::ErrorKind::NotFound, .. } if path.ends_with("missing")),
        "{err}"
    );
}

/// An empty CUDA tensor: an honest header on any device, since it has no data.
fn cuda_tensor() -> ManagedTensor {
    // SAFETY: no elements, so no memory is described.
    unsafe {
        ManagedTensor::from_owner(
            (),
            |_| std::ptr::null_mut(),
            &[0],
            None,
            DataType::F32,
            Device::new(DLDeviceType::kDLCUDA, 0),
            0,
        )
    }
    .unwrap()
}

#[test]
fn a_save_replaces_a_file_only_when_complete() {
    let dir = folder();
    let path = dir.path().join("model.safetensors");
    model()
        .to_dlpack()
        .unwrap()
        .write_safetensors(&path)
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    let mut batch = TensorBatch::new();
    batch
        .insert("ok", bytes_tensor(vec![1; 4], &[4], DataType::U8))
        .unwrap();
    batch.insert("gpu", cuda_tensor()).unwrap();
    assert!(batch.write_safetensors(&path).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// The same batch always gives the same file, metadata of several keys included.
#[test]
fn writes_are_deterministic() {
    let dir = folder();
    let batch = every_dtype_batch();
    let files: Vec<Vec<u8>> = (0..4)
        .map(|i| {
            let path = dir.path().join(format!("{i}.safetensors"));
            batch.write_safetensors(&path).unwrap();
            std::fs::read(&path).unwrap()
        })
        .collect();
    assert!(files.windows(2).all(|w| w[0] == w[1]));
}

/// A save replaces the file a symbolic link points to (the link stays), keeps the
/// permissions of a file it replaces, and works whatever the length of the name.
#[test]
#[cfg(unix)]
#[cfg_attr(
    miri,
    ignore = "permissions and links are system calls Miri does not model"
)]
fn a_save_keeps_links_permissions_and_long_names() {
    use std::os::unix::fs::PermissionsExt;
    let dir = folder();
    let batch = every_dtype_batch();
    let private = dir.path().join("private.safetensors");
    batch.write_safetensors(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    batch.write_safetensors(&private).unwrap();
    let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let link = dir.path().join("link.safetensors");
    std::os::unix::fs::symlink(&private, &link).unwrap();
    let mut small = TensorBatch::new();
    small
        .insert("x", bytes_tensor(vec![1, 2], &[2], DataType::U8))
        .unwrap();
    small.write_safetensors(&link).unwrap();
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let read = TensorBatch::read_safetensors(&private).unwrap();
    assert_eq!(read.names().collect::<Vec<_>>(), ["x"]);

    let long = dir.path().join(format!("{}.st", "w".repeat(250)));
    small.write_safetensors(&long).unwrap();
    assert_eq!(TensorBatch::read_safetensors(&long).unwrap().len(), 1);
    // Nothing else is left in the folder.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
}
