//! Saving: `write_checkpoint` in `save_pretrained`'s layout, one file when it fits,
//! nothing stale left beside it, atomic saves, and every path a save refuses or fails on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use dlpack_core::safetensors::Checkpoint;
use dlpack_core::{DataType, Error, FromDLPack, ManagedTensor, TensorBatch, ToDLPack};
use ndarray::Array1;

use super::{Model, files, folder, index, model, save};

#[test]
fn a_derived_model_round_trips_through_shards() {
    let dir = folder();
    let original = model(3, 8);
    save(original.clone(), dir.path(), 600);
    let names = files(dir.path());
    assert!(names.contains("model.safetensors.index.json"), "{names:?}");
    assert!(!names.contains("model.safetensors"));
    let shards: Vec<&String> = names.iter().filter(|n| n.starts_with("model-")).collect();
    let n = shards.len();
    assert!(n > 2, "{names:?}");
    for (k, shard) in shards.iter().enumerate() {
        assert_eq!(**shard, format!("model-{:05}-of-{n:05}.safetensors", k + 1));
    }

    // The index as `save_pretrained` writes it: the tensors' bytes, every tensor's
    // shard, keys sorted.
    let index = index(dir.path());
    let total: usize = original
        .clone()
        .to_dlpack()
        .unwrap()
        .iter()
        .map(|(_, t)| t.num_elements().unwrap() * 4)
        .sum();
    assert_eq!(index["metadata"]["total_size"], total as u64);
    let weight_map = index["weight_map"].as_object().unwrap();
    assert_eq!(weight_map.len(), 2 + 2 * 3 + 1);
    let keys: Vec<&String> = weight_map.keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);

    // Opened from the folder, the index or ... as a whole.
    for path in [
        dir.path().to_owned(),
        dir.path().join("model.safetensors.index.json"),
    ] {
        let checkpoint = Checkpoint::open(&path).unwrap();
        assert_eq!(checkpoint.len(), weight_map.len());
        assert_eq!(checkpoint.shards().len(), n);
        assert_eq!(checkpoint.metadata()["format"], "pt");
        assert_eq!(checkpoint.index_metadata()["total_size"], total.to_string());
        let loaded: Model<f32> = checkpoint.read().unwrap();
        assert_eq!(loaded, original);
        let weight = checkpoint.tensor("layers.1.weight").unwrap();
        assert_eq!(weight.dtype(), DataType::F32);
        assert_eq!(weight.shape(), &[8, 8]);
        assert_eq!(weight.byte_len(), 256);
        assert!(weight.shard().starts_with(dir.path()));
        assert!(checkpoint.tensor("layers.9.weight").is_none());
    }
}

#[test]
fn shards_keep_tensors_whole_and_in_batch_order() {
    let dir = folder();
    let tensor = |n: usize| ManagedTensor::from_buffer(vec![1u8; n], 0, &[n], &[1]).unwrap();
    let batch = TensorBatch::try_from(vec![
        ("a", tensor(40)),
        ("b", tensor(40)),
        ("c", tensor(30)),
        ("big", tensor(500)),
        ("d", tensor(10)),
    ])
    .unwrap();
    batch.write_checkpoint(dir.path(), 100).unwrap();
    let index = index(dir.path());
    let shard = |name: &str| index["weight_map"][name].as_str().unwrap().to_owned();
    // 40 + 40 fit 100, 30 more would not; the 500 takes a shard of its own.
    assert_eq!(shard("a"), "model-00001-of-00004.safetensors");
    assert_eq!(shard("b"), "model-00001-of-00004.safetensors");
    assert_eq!(shard("c"), "model-00002-of-00004.safetensors");
    assert_eq!(shard("big"), "model-00003-of-00004.safetensors");
    assert_eq!(shard("d"), "model-00004-of-00004.safetensors");
    assert_eq!(index["metadata"]["total_size"], 620);
}

#[test]
fn a_checkpoint_that_fits_is_one_file_and_saves_leave_nothing_stale() {
    let dir = folder();
    std::fs::write(dir.path().join("config.json"), "{}").unwrap();
    std::fs::write(dir.path().join("model-00009-of-00010.safetensors"), "old").unwrap();
    // Sharded first...
    save(model(4, 8), dir.path(), 600);
    let sharded = files(dir.path());
    assert!(sharded.contains("model.safetensors.index.json"));
    assert!(
        !sharded.contains("model-00009-of-00010.safetensors"),
        "{sharded:?}"
    );
    // ...then smaller, and fitting: one file, no index, no shard left.
    save(model(1, 8), dir.path(), 1 << 20);
    assert_eq!(
        files(dir.path()),
        BTreeSet::from(["config.json".to_owned(), "model.safetensors".to_owned()])
    );
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.shards().len(), 1);
    assert!(checkpoint.index_metadata().is_empty());
    assert_eq!(checkpoint.read::<Model<f32>>().unwrap(), model(1, 8));
    // And sharded again, into fewer shards than an earlier save: none of those left.
    save(model(6, 8), dir.path(), 300);
    let many = files(dir.path()).len();
    save(model(6, 8), dir.path(), 900);
    let fewer = files(dir.path());
    assert!(fewer.len() < many, "{fewer:?}");
    assert!(!fewer.contains("model.safetensors"));
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.shards().len() + 2, fewer.len());
    assert_eq!(checkpoint.read::<Model<f32>>().unwrap(), model(6, 8));
}

#[test]
fn a_single_file_is_a_checkpoint_too() {
    let dir = folder();
    let path = dir.path().join("weights.safetensors");
    let mut batch = model(2, 4).to_dlpack().unwrap();
    batch.metadata_mut().insert("format".into(), "pt".into());
    batch.write_safetensors(&path).unwrap();
    let checkpoint = Checkpoint::open(&path).unwrap();
    assert_eq!(checkpoint.path(), path);
    assert_eq!(checkpoint.metadata()["format"], "pt");
    assert_eq!(checkpoint.read::<Model<f32>>().unwrap(), model(2, 4));
    // A folder with neither file.
    let err = Checkpoint::open(dir.path()).unwrap_err();
    let Error::Io { path, kind, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (path.as_path(), *kind),
        (dir.path(), std::io::ErrorKind::NotFound)
    );
}

#[test]
fn checkpoints_cannot_be_written_with_tensors_a_file_refuses() {
    let dir = folder();
    let batch = TensorBatch::try_from(vec![
        ("fine", Array1::from_elem(3, 1.0f32).to_dlpack().unwrap()),
        (
            "__metadata__",
            Array1::from_elem(3, 1.0f32).to_dlpack().unwrap(),
        ),
    ])
    .unwrap();
    let err = batch
        .write_checkpoint(dir.path().join("out"), 4)
        .unwrap_err();
    assert!(err.to_string().contains("__metadata__"), "{err}");
    // Nothing was written, not even the folder.
    assert!(!dir.path().join("out").exists());
}

/// Three one-tensor shards `a`, `b`, `c` of `value`, in `dir`.
fn save_abc(dir: &Path, value: f32) -> dlpack_core::Result<()> {
    let tensor = || Array1::from_elem(2, value).to_dlpack().unwrap();
    let batch = TensorBatch::try_from(vec![("a", tensor()), ("b", tensor()), ("c", tensor())])?;
    batch.write_checkpoint(dir, 8)
}

#[derive(FromDLPack, Debug)]
struct Abc {
    a: Array1<f32>,
    b: Array1<f32>,
    c: Array1<f32>,
}

#[test]
fn a_save_that_fails_midway_leaves_no_index_over_mixed_shards() {
    let outer = folder();
    let dir = outer.path().join("ckpt");
    save_abc(&dir, 1.0).unwrap();
    // Something in the way of shard 3: the second save fails after writing two shards.
    let third = dir.join("model-00003-of-00003.safetensors");
    std::fs::remove_file(&third).unwrap();
    std::fs::create_dir(&third).unwrap();
    std::fs::write(third.join("x"), b"x").unwrap();
    assert!(save_abc(&dir, 2.0).is_err());
    std::fs::remove_dir_all(&third).unwrap();
    save_abc(&outer.path().join("old"), 1.0).unwrap();
    // (Read and written, not `fs::copy`, whose `copy_file_range` Miri cannot run.)
    let old = outer.path().join("old/model-00003-of-00003.safetensors");
    std::fs::write(&third, std::fs::read(old).unwrap()).unwrap();
    // New shards 1 and 2, the old 3: no index holds them together.
    let err = Checkpoint::open(&dir).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Io {
                kind: std::io::ErrorKind::NotFound,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_checkpoint_open_during_a_save_keeps_reading_what_it_opened() {
    let outer = folder();
    let dir = outer.path().join("ckpt");
    save_abc(&dir, 1.0).unwrap();
    let checkpoint = Checkpoint::open(&dir).unwrap();
    save_abc(&dir, 2.0).unwrap();
    let old: Abc = checkpoint.read().unwrap();
    assert_eq!((old.a[0], old.b[0], old.c[0]), (1.0, 1.0, 1.0));
    let new: Abc = Checkpoint::open(&dir).unwrap().read().unwrap();
    assert_eq!((new.a[0], new.b[0], new.c[0]), (2.0, 2.0, 2.0));
}

/// Every regular file under `dir` (links not followed), with its bytes.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut folders = vec![dir.to_owned()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            let name = entry
                .path()
                .strip_prefix(dir)
                .unwrap()
                .display()
                .to_string();
            if kind.is_dir() {
                folders.push(entry.path());
            } else if kind.is_file() {
                files.insert(name, std::fs::read(entry.path()).unwrap());
            }
        }
    }
    files
}

#[test]
#[cfg(unix)]
#[cfg_attr(
    miri,
    ignore = "file system semantics, no unsafe code: too slow to interpret"
)]
fn a_save_into_a_cache_snapshot_replaces_its_links_and_writes_no_blob() {
    // The Hugging Face cache: a snapshot's files are links to content-addressed blobs
    // that other revisions share.
    let cache = folder();
    let blobs = cache.path().join("blobs");
    let snapshot = cache.path().join("snapshots/rev");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::create_dir_all(&snapshot).unwrap();
    let linked = [
        ("model-00001-of-00003.safetensors", "eighteen bytes ..."),
        ("model-00002-of-00003.safetensors", "fifteen bytes.."),
        ("model.safetensors.index.json", "{\"weight_map\": {}}"),
        ("model.safetensors", "a single file"),
        ("config.json", "{}"),
    ];
    for (i, (name, text)) in linked.iter().enumerate() {
        std::fs::write(blobs.join(format!("blob{i}")), text).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/blob{i}"), snapshot.join(name)).unwrap();
    }
    let blobs_before = tree(&blobs);

    // Sharded: the shard and index links become files of the snapshot's own; the
    // single file's link, stale beside shards, is removed; the config's stays a link.
    save_abc(&snapshot, 2.0).unwrap();
    assert_eq!(tree(&blobs), blobs_before, "a blob was written");
    for name in [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ] {
        let meta = std::fs::symlink_metadata(snapshot.join(name)).unwrap();
        assert!(meta.is_file(), "{name} is still a link");
    }
    assert!(std::fs::symlink_metadata(snapshot.join("model.safetensors")).is_err());
    let config = std::fs::symlink_metadata(snapshot.join("config.json")).unwrap();
    assert!(config.file_type().is_symlink());
    let abc: Abc = Checkpoint::open(&snapshot).unwrap().read().unwrap();
    assert_eq!((abc.a[0], abc.b[0], abc.c[0]), (2.0, 2.0, 2.0));
    // Nothing was written outside the snapshot folder: the cache holds the blobs and
    // the snapshot's files, no temporary file anywhere.
    let outside: Vec<String> = tree(cache.path())
        .into_keys()
        .filter(|name| !name.starts_with("blobs/") && !name.starts_with("snapshots/rev/"))
        .collect();
    assert!(outside.is_empty(), "{outside:?}");

    // A single file over a link: the link is replaced, its blob kept.
    let other = cache.path().join("snapshots/other");
    std::fs::create_dir_all(&other).unwrap();
    std::os::unix::fs::symlink("../../blobs/blob3", other.join("model.safetensors")).unwrap();
    let batch = TensorBatch::try_from(vec![(
        "a",
        Array1::from_elem(2, 5.0f32).to_dlpack().unwrap(),
    )])
    .unwrap();
    batch.write_checkpoint(&other, u64::MAX).unwrap();
    assert_eq!(tree(&blobs), blobs_before, "a blob was written");
    assert!(
        std::fs::symlink_metadata(other.join("model.safetensors"))
            .unwrap()
            .is_file()
    );
    let names: Vec<String> = tree(&other).into_keys().collect();
    assert_eq!(names, ["model.safetensors"]);
}

#[test]
fn a_checkpoint_saved_to_an_empty_path_is_refused_before_anything_is_written() {
    let dir = folder();
    let before = tree(dir.path());
    let batch = TensorBatch::try_from(vec![(
        "a",
        Array1::from_elem(2, 1.0f32).to_dlpack().unwrap(),
    )])
    .unwrap();
    // (The current folder is the process's: what would be written there is compared
    // with a folder of the test's own through the error alone, and `"."` is the
    // spelling that saves there.)
    for err in [
        batch.write_checkpoint("", 1).unwrap_err(),
        batch.write_safetensors("").unwrap_err(),
    ] {
        let Error::Io {
            path,
            kind,
            message,
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(path, Path::new(""));
        assert_eq!(*kind, std::io::ErrorKind::InvalidInput);
        assert!(message.contains("\".\""), "{message}");
    }
    assert!(!Path::new("model.safetensors").exists());
    assert_eq!(tree(dir.path()), before);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "file system semantics, no unsafe code: too slow to interpret"
)]
fn every_io_error_of_a_save_names_its_path() {
    let dir = folder();
    let batch = TensorBatch::try_from(vec![(
        "a",
        Array1::from_elem(2, 1.0f32).to_dlpack().unwrap(),
    )])
    .unwrap();
    // A file where the folder should be; a folder where the file should be.
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = batch.write_checkpoint(file.join("sub"), 1).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, .. } if path == &file.join("sub")),
        "{err}"
    );
    let ckpt = dir.path().join("ckpt");
    std::fs::create_dir_all(ckpt.join("model.safetensors")).unwrap();
    let err = batch.write_checkpoint(&ckpt, u64::MAX).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, .. } if path == &ckpt.join("model.safetensors")),
        "{err}"
    );
    assert!(err.to_string().contains("model.safetensors"), "{err}");
}
