//! The index as the allowlist, and broken checkpoints: every one a typed error naming
//! the file and the tensor.

use std::path::Path;

use dlpack_core::safetensors::Checkpoint;
use dlpack_core::{Error, FromDLPack, TensorBatch, ToDLPack};
use ndarray::{Array1, Ix1};

use super::folder;

/// A folder with two shards and an index written by hand: `a` in shard 1, `b` in
/// shard 2; shard 2 also holds an unlisted `a` of other values.
fn hand_made(dir: &Path, index: &str) {
    let tensor = |v: f32| Array1::from_elem(4, v).to_dlpack().unwrap();
    let one = TensorBatch::try_from(vec![("a", tensor(1.0))]).unwrap();
    one.write_safetensors(dir.join("one.safetensors")).unwrap();
    let two = TensorBatch::try_from(vec![("b", tensor(2.0)), ("a", tensor(-1.0))]).unwrap();
    two.write_safetensors(dir.join("two.safetensors")).unwrap();
    std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
}

const GOOD: &str = r#"{"metadata": {"total_size": 32}, "weight_map": {"a": "one.safetensors", "b": "two.safetensors"}}"#;

#[test]
fn the_index_is_the_allowlist() {
    let dir = folder();
    hand_made(dir.path(), GOOD);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.names().collect::<Vec<_>>(), ["a", "b"]);
    let mut batches = vec![checkpoint.read_where(|_| true).unwrap()];
    if !cfg!(miri) {
        // SAFETY: nothing modifies the files while the batch lives.
        batches.push(unsafe { checkpoint.map() }.unwrap());
    }
    for batch in batches {
        assert_eq!(batch.len(), 2);
        // `a` from the shard the index names, never the other shard's `a`.
        let a = batch.get("a").unwrap().as_array::<f32, Ix1>().unwrap();
        assert_eq!(a, ndarray::arr1(&[1.0f32; 4]));
    }
    // Unlisted tensors do not exist: listing only `b` hides shard one entirely.
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        r#"{"weight_map": {"b": "two.safetensors"}}"#,
    )
    .unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.names().collect::<Vec<_>>(), ["b"]);
    assert_eq!(checkpoint.shards().len(), 1);
}

/// The error of opening `dir` with `index`, and its text.
fn refused(index: &str) -> (Error, String) {
    let dir = folder();
    hand_made(dir.path(), index);
    let err = Checkpoint::open(dir.path()).unwrap_err();
    let text = err.to_string();
    // (Miri cannot map files.)
    if !cfg!(miri) {
        // SAFETY: the test's own files, which nothing modifies while mapped.
        let mapped = unsafe { TensorBatch::map_checkpoint(dir.path()) }.unwrap_err();
        assert_eq!(
            mapped.to_string(),
            text,
            "map_checkpoint refuses as open does"
        );
    }
    (err, text)
}

#[test]
fn broken_indexes_are_typed_errors_naming_the_file_and_tensor() {
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("not json", None, "not valid JSON"),
        (r#"{"metadata": {}}"#, None, "no `weight_map`"),
        (r#"{"weight_map": {"a": 7}}"#, Some("a"), "its shard is 7"),
        (
            r#"{"weight_map": {"a": null}}"#,
            Some("a"),
            "its shard is null",
        ),
        (
            r#"{"weight_map": {"a": "../one.safetensors"}}"#,
            Some("a"),
            "path separator",
        ),
        (
            r#"{"weight_map": {"a": "/etc/passwd"}}"#,
            Some("a"),
            "path separator",
        ),
        (
            r#"{"weight_map": {"a": ".."}}"#,
            Some("a"),
            "names a folder",
        ),
        (r#"{"weight_map": {"a": ""}}"#, Some("a"), "is empty"),
        (
            r#"{"weight_map": {"a": "one.safetensors", "a": "two.safetensors"}}"#,
            None,
            "the tensor `a` appears twice",
        ),
        (
            r#"{"weight_map": {"b": "one.safetensors"}}"#,
            Some("b"),
            "which does not hold it",
        ),
        (
            r#"{"weight_map": {}, "metadata": []}"#,
            None,
            "`metadata` to be an object",
        ),
    ];
    for &(index, tensor, reason) in cases {
        let (err, text) = refused(index);
        let Error::InvalidFile {
            path,
            tensor: named,
            ..
        } = &err
        else {
            panic!("{index}: {err:?}")
        };
        assert!(
            path.ends_with("model.safetensors.index.json"),
            "{index}: {text}"
        );
        assert_eq!(named.as_deref(), tensor, "{index}: {text}");
        assert!(text.contains(reason), "{index}: {text}");
    }
}

#[test]
fn a_shard_outside_the_folder_is_never_opened() {
    // A real file one level up, under the name the index gives: refused by name.
    let outer = folder();
    let dir = outer.path().join("checkpoint");
    std::fs::create_dir(&dir).unwrap();
    let batch = TensorBatch::try_from(vec![(
        "a",
        Array1::from_elem(2, 5.0f32).to_dlpack().unwrap(),
    )])
    .unwrap();
    batch
        .write_safetensors(outer.path().join("secret.safetensors"))
        .unwrap();
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        r#"{"weight_map": {"a": "../secret.safetensors"}}"#,
    )
    .unwrap();
    let err = Checkpoint::open(&dir).unwrap_err();
    assert!(
        err.to_string()
            .contains("not a file name inside the index's folder"),
        "{err}"
    );
}

#[test]
fn broken_shards_are_typed_errors_naming_the_shard_and_tensor() {
    // A shard missing: the I/O error of the shard, in the tensor the index places there.
    let (err, text) = refused(r#"{"weight_map": {"a": "gone.safetensors"}}"#);
    let Error::Tensor { name, error } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(name, "a");
    assert!(
        matches!(&**error, Error::Io { path, kind: std::io::ErrorKind::NotFound, .. } if path.ends_with("gone.safetensors")),
        "{text}"
    );

    // A truncated shard, and one whose header is not JSON.
    for damage in ["truncate", "garble"] {
        let dir = folder();
        hand_made(dir.path(), GOOD);
        let shard = dir.path().join("two.safetensors");
        let mut bytes = std::fs::read(&shard).unwrap();
        match damage {
            "truncate" => bytes.truncate(bytes.len() - 3),
            _ => bytes[9] = b'!',
        }
        std::fs::write(&shard, &bytes).unwrap();
        let err = Checkpoint::open(dir.path()).unwrap_err();
        if !cfg!(miri) {
            // SAFETY: the test's own files, which nothing modifies while mapped.
            let mapped = unsafe { TensorBatch::map_checkpoint(dir.path()) }.unwrap_err();
            assert_eq!(mapped.to_string(), err.to_string(), "{damage}");
        }
        let Error::Tensor { name, error } = &err else {
            panic!("{damage}: {err:?}")
        };
        assert_eq!(name, "b", "{damage}");
        let Error::InvalidFile { path, .. } = &**error else {
            panic!("{damage}: {err:?}")
        };
        assert_eq!(path, &shard, "{damage}");
    }

    // A shard cut short, or grown, after it was opened: the read refuses it, naming
    // the shard (its header no longer describes it); the map too.
    for change in [-20i64, 20] {
        let dir = folder();
        hand_made(dir.path(), GOOD);
        let checkpoint = Checkpoint::open(dir.path()).unwrap();
        let shard = dir.path().join("two.safetensors");
        let len = std::fs::metadata(&shard).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&shard)
            .unwrap()
            .set_len(len.checked_add_signed(change).unwrap())
            .unwrap();
        let err = checkpoint.read_where(|_| true).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidFile { path, reason, .. }
                if *path == shard && reason.contains("changed since it was opened")),
            "{change}: {err}"
        );
        // (Miri cannot map files.)
        if !cfg!(miri) {
            // SAFETY: the test's own files, which nothing modifies while mapped.
            let err = unsafe { checkpoint.map() }.unwrap_err();
            assert!(
                matches!(&err, Error::InvalidFile { path, .. } if *path == shard),
                "{change}: {err}"
            );
        }
        // The other shard's tensors still read.
        let batch = checkpoint.read_where(|name| name == "a").unwrap();
        assert_eq!(batch.len(), 1);
    }
}

#[test]
fn an_empty_tensor_of_huge_extents_is_an_error_not_a_panic() {
    // No element, but extents whose non-zero product passes `isize`, which ndarray
    // cannot hold.
    let dir = folder();
    let path = dir.path().join("x.safetensors");
    let header = format!(
        r#"{{"t":{{"dtype":"F32","shape":[0,{},4],"data_offsets":[0,0]}}}}"#,
        1u64 << 62
    );
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    std::fs::write(&path, bytes).unwrap();
    let mut batch = TensorBatch::read_safetensors(&path).unwrap();
    let err = ndarray::Array3::<f32>::from_dlpack(batch.remove("t").unwrap()).unwrap_err();
    assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
    #[derive(FromDLPack, Debug)]
    struct T {
        t: ndarray::Array3<f32>,
    }
    let err = Checkpoint::open(&path).unwrap().read::<T>().unwrap_err();
    assert!(err.to_string().contains("overflow"), "{err}");

    // Read or mapped, of a type Rust has an element for or not, such a tensor has the
    // same strides, all 0 (C strides would wrap).
    for dtype in ["F32", "F8_E4M3"] {
        let header = format!(
            r#"{{"t":{{"dtype":"{dtype}","shape":[0,{},3],"data_offsets":[0,0]}}}}"#,
            1u64 << 62
        );
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        std::fs::write(&path, bytes).unwrap();
        let mut batches = vec![TensorBatch::read_safetensors(&path).unwrap()];
        // (Miri cannot map files.)
        if !cfg!(miri) {
            // SAFETY: the test's own file, which nothing modifies while mapped.
            batches.push(unsafe { TensorBatch::map_safetensors(&path) }.unwrap());
        }
        for batch in &batches {
            let t = batch.get("t").unwrap();
            assert_eq!(t.shape(), [0, 1 << 62, 3], "{dtype}");
            assert_eq!(t.strides(), Some(&[0i64, 0, 0][..]), "{dtype}");
        }
    }
}

#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "runs mkfifo")]
fn only_regular_files_are_read_and_a_pipe_is_never_waited_for() {
    let refused = |err: Error| {
        let kind = std::io::ErrorKind::InvalidInput;
        assert!(
            matches!(err.root(), Error::Io { kind: k, .. } if *k == kind),
            "{err}"
        );
    };
    let dir = folder();
    let pipe = dir.path().join("pipe.safetensors");
    let made = std::process::Command::new("mkfifo")
        .arg(&pipe)
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        r#"{"weight_map": {"a": "pipe.safetensors"}}"#,
    )
    .unwrap();
    // Each returns at once (a pipe without a writer would block a plain open).
    refused(Checkpoint::open(dir.path()).unwrap_err());
    refused(TensorBatch::read_safetensors(&pipe).unwrap_err());
    // A device in the index's place is not read (it would never end).
    let index = dir.path().join("other.index.json");
    std::os::unix::fs::symlink("/dev/zero", &index).unwrap();
    refused(Checkpoint::open(&index).unwrap_err());
}

#[test]
fn wrong_paths_say_what_was_found_and_what_to_open() {
    let dir = folder();
    hand_made(dir.path(), GOOD);
    let index = dir.path().join("model.safetensors.index.json");
    // The index given as a safetensors file.
    let err = TensorBatch::read_safetensors(&index).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid checkpoint index {}: the file starts with JSON, not with the 8-byte \
             length of a safetensors header: a checkpoint's index \
             (`*.safetensors.index.json`) or the folder that holds it is opened with \
             `Checkpoint::open`, and a model's configuration holds no weights",
            index.display()
        )
    );
    // A model's configuration given as a checkpoint.
    let config = dir.path().join("config.json");
    std::fs::write(&config, r#"{"model_type": "llama", "hidden_size": 64}"#).unwrap();
    let err = Checkpoint::open(&config).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid checkpoint index {}: it has no `weight_map`, so it is not the index of \
             a checkpoint's shards (`model.safetensors.index.json`, which `save_pretrained` \
             writes beside them): open that file, or the folder that holds the weights",
            config.display()
        )
    );
    // A folder of shards without their index.
    std::fs::remove_file(&index).unwrap();
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(matches!(
        err,
        Error::Io {
            kind: std::io::ErrorKind::NotFound,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        format!(
            "{}: the folder holds neither model.safetensors.index.json nor \
             model.safetensors; it holds 2 safetensors files (one.safetensors, \
             two.safetensors): open one of them (`Checkpoint::open` of the file, e.g. \
             one.safetensors), or write the index that lists them \
             (`TensorBatch::write_checkpoint` writes one with the shards)",
            dir.path().display()
        )
    );
}

#[test]
#[cfg_attr(miri, ignore = "maps files")]
fn map_checkpoint_finds_the_errors_open_finds_in_the_order_open_finds_them() {
    // `x`, listed first, is in neither shard; shard two's header is garbled: the
    // garbled header is the error (headers are read before names are matched), and
    // without it the missing `x`, before the missing `y` of shard two.
    let index = r#"{"weight_map": {"x": "one.safetensors", "a": "one.safetensors", "y": "two.safetensors", "b": "two.safetensors"}}"#;
    for garble in [true, false] {
        let dir = folder();
        hand_made(dir.path(), index);
        if garble {
            let shard = dir.path().join("two.safetensors");
            let mut bytes = std::fs::read(&shard).unwrap();
            bytes[9] = b'!';
            std::fs::write(&shard, &bytes).unwrap();
        }
        let opened = Checkpoint::open(dir.path()).unwrap_err();
        // SAFETY: the test's own files, which nothing modifies while mapped.
        let mapped = unsafe { TensorBatch::map_checkpoint(dir.path()) }.unwrap_err();
        assert_eq!(mapped.to_string(), opened.to_string());
        let named = match &mapped {
            Error::Tensor { name, .. } => name.clone(),
            Error::InvalidFile { tensor, .. } => tensor.clone().unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(named, if garble { "y" } else { "x" }, "{mapped}");
    }
}

#[test]
#[cfg_attr(miri, ignore = "maps files")]
fn map_checkpoint_reads_every_header_before_it_makes_a_tensor() {
    // Shard one's `bool` holds a byte 2 (an error of `map`); shard two is missing (an
    // error of `open`): the missing shard is the error, as `open` + `map` finds it.
    let dir = folder();
    let header = r#"{"a":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.push(2);
    std::fs::write(dir.path().join("one.safetensors"), &bytes).unwrap();
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        r#"{"weight_map": {"a": "one.safetensors", "b": "two.safetensors"}}"#,
    )
    .unwrap();
    let opened = Checkpoint::open(dir.path()).unwrap_err();
    // SAFETY: the test's own files, which nothing modifies while mapped.
    let mapped = unsafe { TensorBatch::map_checkpoint(dir.path()) }.unwrap_err();
    assert_eq!(mapped.to_string(), opened.to_string());
    assert!(
        matches!(&mapped, Error::Tensor { name, error } if name == "b"
            && matches!(**error, Error::Io { kind: std::io::ErrorKind::NotFound, .. })),
        "{mapped}"
    );
    // With shard two there, the byte is the error, as `map` finds it.
    let two = TensorBatch::try_from(vec![(
        "b",
        Array1::from_elem(2, 1.0f32).to_dlpack().unwrap(),
    )])
    .unwrap();
    two.write_safetensors(dir.path().join("two.safetensors"))
        .unwrap();
    // SAFETY: as above.
    let opened = unsafe { Checkpoint::open(dir.path()).unwrap().map() }.unwrap_err();
    // SAFETY: as above.
    let mapped = unsafe { TensorBatch::map_checkpoint(dir.path()) }.unwrap_err();
    assert_eq!(mapped.to_string(), opened.to_string());
    assert!(mapped.to_string().contains("byte 2"), "{mapped}");
}
