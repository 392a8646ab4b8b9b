//! Checkpoints of many shards: shards replaced after the checkpoint was opened, and
//! more shards than the limit of open files.

use std::collections::HashMap;
use std::path::Path;

use dlpack_core::safetensors::Checkpoint;
use dlpack_core::{Error, TensorBatch, ToDLPack};
use ndarray::{Array1, Ix1};

use super::{files, folder};

/// `count` one-tensor shards `t0000`, `t0001`, ... of `value` (each its own shard).
fn save_many(dir: &Path, count: usize, value: f32) {
    let batch = TensorBatch::try_from(
        (0..count)
            .map(|i| {
                let tensor = Array1::from_elem(1, value + i as f32).to_dlpack().unwrap();
                (format!("t{i:04}"), tensor)
            })
            .collect::<Vec<_>>(),
    )
    .unwrap();
    batch.write_checkpoint(dir, 4).unwrap();
}

#[test]
#[cfg_attr(miri, ignore = "maps files")]
fn past_the_first_shards_a_replaced_shard_is_refused_and_the_rest_still_read() {
    let outer = folder();
    let dir = outer.path().join("ckpt");
    save_many(&dir, 40, 0.0);
    let checkpoint = Checkpoint::open(&dir).unwrap();
    // Replaced by a save of the same layout: the first 32 shards, kept open, read as
    // they were; shard 40, opened again to read, is another file now.
    save_many(&dir, 40, 100.0);
    let first = checkpoint.read_where(|name| name < "t0032").unwrap();
    assert_eq!(first.len(), 32);
    let view = first.get("t0031").unwrap().as_array::<f32, Ix1>().unwrap();
    assert_eq!(view[0], 31.0);
    let err = checkpoint.read_where(|name| name == "t0039").unwrap_err();
    let shard = dir.join("model-00040-of-00040.safetensors");
    assert!(
        matches!(&err, Error::InvalidFile { path, reason, .. }
            if *path == shard && reason.contains("changed since it was opened")),
        "{err}"
    );
    // SAFETY: the test's own files, which nothing modifies while mapped.
    let err = unsafe { checkpoint.map() }.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidFile { path, .. } if path.starts_with(&dir)),
        "{err}"
    );
    // Opened again, the checkpoint reads the new save.
    let batch = Checkpoint::open(&dir)
        .unwrap()
        .read_where(|name| name == "t0039")
        .unwrap();
    assert_eq!(
        batch.get("t0039").unwrap().as_array::<f32, Ix1>().unwrap()[0],
        139.0
    );
}

/// The test below, run in a child process whose limit of open files is 256.
const CHILD: &str = "DLPACK_TEST_FEW_OPEN_FILES";

#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "runs a child process")]
fn a_checkpoint_of_more_shards_than_the_limit_of_open_files_opens_reads_and_maps() {
    // The test's path in the harness: its module's, without the crate's name.
    let module = module_path!().split_once("::").unwrap().1;
    let name = format!(
        "{module}::a_checkpoint_of_more_shards_than_the_limit_of_open_files_opens_reads_and_maps"
    );
    if std::env::var_os(CHILD).is_none() {
        // (The limit is the process's: a child of its own, so that the other tests
        // running beside it keep theirs.)
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg("ulimit -n 256 && exec \"$0\" --exact \"$1\" --test-threads=1 --quiet")
            .arg(std::env::current_exe().unwrap())
            .arg(name)
            .env(CHILD, "1")
            .status()
            .unwrap();
        assert!(status.success(), "the child failed: {status}");
        return;
    }
    let outer = folder();
    let dir = outer.path().join("ckpt");
    save_many(&dir, 1100, 0.0);
    assert_eq!(files(&dir).len(), 1101);
    let checkpoint = Checkpoint::open(&dir).unwrap();
    assert_eq!(checkpoint.shards().len(), 1100);
    let batch = checkpoint.read_where(|_| true).unwrap();
    assert_eq!(batch.len(), 1100);
    for (i, (_, tensor)) in batch.iter().enumerate() {
        assert_eq!(tensor.as_array::<f32, Ix1>().unwrap()[0], i as f32);
    }
    // A derived type's load goes the same way.
    let loaded: HashMap<String, Array1<f32>> = checkpoint.read().unwrap();
    assert_eq!(loaded["t1099"][0], 1099.0);
    // SAFETY: the test's own files, which nothing modifies while mapped.
    let mapped = unsafe { checkpoint.map() }.unwrap();
    assert_eq!(
        mapped.get("t0777").unwrap().as_array::<f32, Ix1>().unwrap()[0],
        777.0
    );
    // A map in one call closes each shard once mapped.
    // SAFETY: as above.
    let mapped = unsafe { TensorBatch::map_checkpoint(&dir) }.unwrap();
    assert_eq!(mapped.len(), 1100);
    assert_eq!(
        mapped.get("t1099").unwrap().as_array::<f32, Ix1>().unwrap()[0],
        1099.0
    );
    // Several open at once stay within the limit too.
    let more: Vec<Checkpoint> = (0..3).map(|_| Checkpoint::open(&dir).unwrap()).collect();
    assert!(
        more.iter()
            .all(|c| c.read_where(|n| n == "t1000").unwrap().len() == 1)
    );
}

#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "hundreds of files: too slow to interpret")]
fn a_shard_replaced_by_a_file_of_the_same_length_and_inode_is_refused() {
    let outer = folder();
    let dir = outer.path().join("ckpt");
    save_many(&dir, 40, 0.0);
    let checkpoint = Checkpoint::open(&dir).unwrap();
    // The last shard removed and written again, same length: a file system may give
    // the new file the old one's inode (its change time differs).
    let shard = dir.join("model-00040-of-00040.safetensors");
    let bytes = std::fs::read(&shard).unwrap();
    std::fs::remove_file(&shard).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut other = bytes.clone();
    let last = other.len() - 1;
    other[last] ^= 0x40;
    std::fs::write(&shard, &other).unwrap();
    let err = checkpoint.read_where(|name| name == "t0039").unwrap_err();
    assert!(
        matches!(&err, Error::InvalidFile { path, reason, .. }
            if *path == shard && reason.contains("changed since it was opened")),
        "{err}"
    );
}
