//! Weights on disk, each operation beside its anchors in one run, on a GPT-2-small-shaped
//! file that the benchmark writes itself (148 float32 tensors, 124 M parameters, about
//! 475 MiB; nothing is downloaded), with a warm page cache:
//!
//! - `map`: `map_safetensors` beside dlpark 0.10's `SafeTensorFile::open` and its
//!   148 tensors, and the same map of a 10 MiB and a 1 GiB file of 148 tensors (the
//!   cost of a map follows the header, not the file);
//! - `read`: `read_safetensors` + `Gpt2::from_dlpack` into owned ndarray fields, beside
//!   one `std::fs::read` of the file (one copy from the page cache, the floor for owned
//!   memory);
//! - `write`: `write_safetensors`, beside one `std::fs::write` of the same bytes and the
//!   `safetensors` crate's `serialize_to_file` of the same tensors;
//!
//! then the read and the write again, alternating with their anchors (medians of 9
//! rounds: the ratios on a shared disk), and the memory each operation adds (resident
//! set, and the peak for the read and the write, from `/proc/self/status`), each in a
//! fresh process.
//!
//! Then checkpoints as published: the same weights written as 4 shards and an index
//! (`write_checkpoint`, beside `write_safetensors` of the one file), loaded into the
//! derived model (`Checkpoint::open` + `read`, beside `std::fs::read` of every shard one
//! after another), stored in bfloat16 and loaded converting to float32 (beside the
//! float32 load, and beside candle's mapped loader converting and fetching every
//! tensor, which is what `VarBuilder::from_mmaped_safetensors(&shards, DType::F32,
//! &Device::Cpu)` does on each `get`), mapped (`open` + `map`, beside the four files
//! mapped one by one, and `open` alone: its part), and the peak memory of the loads.
//!
//! Then one rank of a tensor-parallel group of 4 (`ReadOptions::tensor_parallel`): a
//! Llama-shaped checkpoint (float32, 4 shards) read by a struct whose projections,
//! embedding and head are split as Megatron splits them, beside the full load of the
//! same checkpoint.
//!
//! Run with `cargo bench -p dlpack-tests --bench safetensors`
//! (`DLPACK_BENCH_DIR` picks the folder of the files; by default a temporary folder;
//! `DLPACK_BENCH_ONLY=checkpoint` runs the checkpoint part alone,
//! `DLPACK_BENCH_ONLY=parallel` the tensor-parallel one, `DLPACK_BENCH_ONLY=load-at` one
//! layer by its prefix).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{BatchSize, Criterion};
use dlpack_core::safetensors::{Checkpoint, ReadOptions};
use dlpack_core::{DataType, FromDLPack, ManagedTensor, TensorBatch, ToDLPack};
use ndarray::{Array1, Array2};

/// `nn.LayerNorm`.
#[derive(ToDLPack, FromDLPack)]
struct Norm {
    weight: Array1<f32>,
    bias: Array1<f32>,
}

/// GPT-2's `Conv1D` (a linear layer stored `[in, out]`).
#[derive(ToDLPack, FromDLPack)]
struct Conv1D {
    weight: Array2<f32>,
    bias: Array1<f32>,
}

#[derive(ToDLPack, FromDLPack)]
struct Attention {
    c_attn: Conv1D,
    c_proj: Conv1D,
}

#[derive(ToDLPack, FromDLPack)]
struct Mlp {
    c_fc: Conv1D,
    c_proj: Conv1D,
}

#[derive(ToDLPack, FromDLPack)]
struct Block {
    ln_1: Norm,
    attn: Attention,
    ln_2: Norm,
    mlp: Mlp,
}

/// GPT-2 small: 12 blocks of width 768, a 50,257-token vocabulary, 1,024 positions.
#[derive(ToDLPack, FromDLPack)]
struct Gpt2 {
    wte: Array2<f32>,
    wpe: Array2<f32>,
    h: Vec<Block>,
    ln_f: Norm,
}

/// An array of `shape` filled with a cheap pattern (so that no page is all zeros).
fn filled<D: ndarray::Dimension>(
    shape: impl ndarray::ShapeBuilder<Dim = D>,
) -> ndarray::Array<f32, D> {
    let mut array = ndarray::Array::zeros(shape);
    for (i, x) in array.iter_mut().enumerate() {
        *x = (i % 1021) as f32 * 0.001;
    }
    array
}

/// A GPT-2-shaped model of width `d` and vocabulary `vocab` (GPT-2 small: 768, 50,257).
fn gpt2(d: usize, vocab: usize) -> Gpt2 {
    let norm = || Norm {
        weight: filled(d),
        bias: filled(d),
    };
    let conv = |i: usize, o: usize| Conv1D {
        weight: filled((i, o)),
        bias: filled(o),
    };
    Gpt2 {
        wte: filled((vocab, d)),
        wpe: filled((1024, d)),
        h: (0..12)
            .map(|_| Block {
                ln_1: norm(),
                attn: Attention {
                    c_attn: conv(d, 3 * d),
                    c_proj: conv(d, d),
                },
                ln_2: norm(),
                mlp: Mlp {
                    c_fc: conv(d, 4 * d),
                    c_proj: conv(4 * d, d),
                },
            })
            .collect(),
        ln_f: norm(),
    }
}

/// Writes a model of that shape to `folder/name` once, and warms the page cache.
fn model_file(folder: &Path, name: &str, d: usize, vocab: usize) -> PathBuf {
    let path = folder.join(name);
    if !path.exists() {
        gpt2(d, vocab)
            .to_dlpack()
            .unwrap()
            .write_safetensors(&path)
            .unwrap();
    }
    black_box(std::fs::read(&path).unwrap());
    path
}

/// `VmRSS` and `VmHWM` (the peak, since the last reset) of this process, in bytes.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets the peak resident set to the current one (Linux `clear_refs` 5).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// What `f` adds to the resident set at its peak, in bytes, with what `f` returns
/// (dropped only after the measure).
fn peak_of<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let (before, _) = memory();
    reset_peak();
    let value = f();
    let (_, peak) = memory();
    (peak.saturating_sub(before), value)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// What one operation adds to the resident set, measured in a fresh process (this
/// program again, with `DLPACK_BENCH_MEMORY` set): a map until touched, the peak of a
/// read into owned fields, the peak of a write beyond the tensors themselves.
fn memory_of(op: &str, path: &Path, out: &Path) -> String {
    let file = std::fs::metadata(path).unwrap().len();
    match op {
        "map" => {
            let (before, _) = memory();
            // SAFETY: the benchmark's own file, which nothing modifies while mapped.
            let mapped = unsafe { TensorBatch::map_safetensors(path) }.unwrap();
            let (after, _) = memory();
            drop(mapped);
            let added = after.saturating_sub(before);
            format!(
                "map, untouched: +{:.2} MiB ({:.3} % of the file)",
                mib(added),
                added as f64 / file as f64 * 100.0
            )
        }
        "read" => {
            let (added, model) = peak_of(|| {
                Gpt2::from_dlpack(TensorBatch::read_safetensors(path).unwrap()).unwrap()
            });
            drop(model);
            format!(
                "read into owned fields, peak: +{:.1} MiB ({:.3} x the file)",
                mib(added),
                added as f64 / file as f64
            )
        }
        "load" | "load-bf16" => {
            let (dir, options) = if op == "load" {
                (out.with_file_name("gpt2-4"), ReadOptions::new())
            } else {
                let options = ReadOptions::new().convert_floats(DataType::F32);
                (out.with_file_name("gpt2-4-bf16"), options)
            };
            let checkpoint = Checkpoint::open(&dir).unwrap();
            let (added, model) = peak_of(|| checkpoint.read_with::<Gpt2>(&options).unwrap());
            drop(model);
            let output = 4 * checkpoint
                .names()
                .filter_map(|n| checkpoint.tensor(n))
                .map(|t| t.shape().iter().product::<usize>())
                .sum::<usize>() as u64;
            format!(
                "{op} (Checkpoint::read_with, 4 shards) into owned fields, peak: +{:.1} MiB \
                 ({:.4} x the output, {:.1} MiB)",
                mib(added),
                added as f64 / output as f64,
                mib(output)
            )
        }
        _ => {
            let batch = TensorBatch::read_safetensors(path).unwrap();
            let (added, ()) = peak_of(|| batch.write_safetensors(out).unwrap());
            let _ = std::fs::remove_file(out);
            format!(
                "write, peak beyond the tensors: +{:.2} MiB ({:.3} % of the file)",
                mib(added),
                added as f64 / file as f64 * 100.0
            )
        }
    }
}

/// Medians of `rounds` timings of each of `runs`, taken in turn (every round runs each
/// once), so that all of them see the same machine: on a shared disk the alternation
/// matters more than the count.
fn alternating(rounds: usize, runs: &mut [(&str, &mut dyn FnMut())]) -> Vec<Duration> {
    let mut times = vec![Vec::with_capacity(rounds); runs.len()];
    for _ in 0..rounds {
        for ((_, run), times) in runs.iter_mut().zip(&mut times) {
            let start = std::time::Instant::now();
            run();
            times.push(start.elapsed());
        }
    }
    times
        .into_iter()
        .map(|mut t| {
            t.sort();
            t[t.len() / 2]
        })
        .collect()
}

fn print_alternating(title: &str, rounds: usize, runs: &mut [(&str, &mut dyn FnMut())]) {
    let medians = alternating(rounds, runs);
    println!("\n{title} (medians of {rounds}, alternating):");
    for ((name, _), median) in runs.iter().zip(&medians) {
        println!(
            "  {name:<52} {:>10.3} ms   {:.3} x the first",
            median.as_secs_f64() * 1e3,
            median.as_secs_f64() / medians[0].as_secs_f64()
        );
    }
}

fn main() {
    let temp = tempfile::tempdir().unwrap();
    let folder = std::env::var_os("DLPACK_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| temp.path().to_owned());
    std::fs::create_dir_all(&folder).unwrap();
    let gpt2_path = model_file(&folder, "gpt2.safetensors", 768, 50257);
    let out = folder.join("out.safetensors");
    if let Ok(op) = std::env::var("DLPACK_BENCH_MEMORY") {
        println!("{}", memory_of(&op, &gpt2_path, &out));
        return;
    }

    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10))
        .configure_from_args();
    if std::env::var("DLPACK_BENCH_ONLY").is_ok_and(|only| only == "checkpoint") {
        checkpoints(&mut c, &folder, &gpt2_path);
        return;
    }
    if std::env::var("DLPACK_BENCH_ONLY").is_ok_and(|only| only == "map-checkpoint") {
        let dir = folder.join("gpt2-4");
        if !dir.exists() {
            let batch = TensorBatch::read_safetensors(&gpt2_path).unwrap();
            let total: u64 = batch
                .iter()
                .map(|(_, t)| 4 * t.num_elements().unwrap() as u64)
                .sum();
            batch.write_checkpoint(&dir, total / 4 + (1 << 20)).unwrap();
        }
        let rounds = std::env::var("DLPACK_BENCH_ROUNDS").map_or(31, |r| r.parse().unwrap());
        alternate_maps(&dir, &shards_of(&dir), rounds);
        return;
    }
    if std::env::var("DLPACK_BENCH_ONLY").is_ok_and(|only| only == "cold") {
        cold_loads(&folder);
        return;
    }
    if std::env::var("DLPACK_BENCH_ONLY").is_ok_and(|only| only == "parallel") {
        parallel(&mut c, &folder);
        return;
    }
    if std::env::var("DLPACK_BENCH_ONLY").is_ok_and(|only| only == "load-at") {
        one_layer(&mut c, &folder);
        return;
    }
    if std::env::var("DLPACK_BENCH_ONLY").is_ok_and(|only| only == "convert") {
        bench_convert(&mut c);
        return;
    }

    bench_map(&mut c, &folder, &gpt2_path);
    bench_read(&mut c, &gpt2_path);
    let batch = TensorBatch::read_safetensors(&gpt2_path).unwrap();
    let bytes = std::fs::read(&gpt2_path).unwrap();
    bench_write(&mut c, &batch, &bytes, &out);
    let _ = std::fs::remove_file(&out);

    // The same comparisons, alternating, for the ratios (medians on a noisy machine).
    alternate_read_and_write(&gpt2_path, &batch, &bytes, &out);
    let _ = std::fs::remove_file(&out);
    c.final_summary();
    drop(batch);
    drop(bytes);

    let file = std::fs::metadata(&gpt2_path).unwrap().len();
    println!(
        "\nmemory, file of {:.1} MiB, each in a fresh process:",
        mib(file)
    );
    for op in ["map", "read", "write"] {
        print!("  {}", memory_in_fresh_process(op, &folder));
    }
    checkpoints(&mut c, &folder, &gpt2_path);
    parallel(&mut c, &folder);
}

/// Loads of a 1 GiB checkpoint (4 shards of 37 float32 tensors) with a cold page cache,
/// beside a sequential read of the same files (8 MiB reads, one after another: what
/// `dd` does) and the work of safetensors' `load_file` (each file mapped, its header
/// parsed by the `safetensors` crate, every tensor copied into memory of its own).
/// Before each run, every shard's pages are dropped from the page cache
/// (`posix_fadvise(POSIX_FADV_DONTNEED)`, which needs no privilege, where
/// `/proc/sys/vm/drop_caches` needs root); the bytes each run read from the disk
/// (`read_bytes` of `/proc/self/io`) are printed beside its time, to show that it was
/// cold.
fn cold_loads(folder: &Path) {
    let dir = folder.join("cold-1g");
    let per_tensor = (1usize << 30) / 4 / 148;
    if !dir.exists() {
        let mut batch = TensorBatch::new();
        for i in 0..148 {
            let t = Array1::from_shape_fn(per_tensor, |j| (i * 31 + j % 1009) as f32)
                .to_dlpack()
                .unwrap();
            batch.insert(format!("layers.{i}.weight"), t).unwrap();
        }
        batch.write_checkpoint(&dir, (1 << 28) + (1 << 20)).unwrap();
    }
    let shards = shards_of(&dir);
    let total: u64 = shards
        .iter()
        .map(|s| std::fs::metadata(s).unwrap().len())
        .sum();
    let evict = || {
        for shard in &shards {
            let file = std::fs::File::open(shard).unwrap();
            file.sync_all().unwrap();
            // SAFETY: a valid descriptor of an open file; advice only.
            let rc = unsafe {
                libc::posix_fadvise(
                    std::os::fd::AsRawFd::as_raw_fd(&file),
                    0,
                    0,
                    libc::POSIX_FADV_DONTNEED,
                )
            };
            assert_eq!(rc, 0);
        }
    };
    let read_bytes = || {
        let io = std::fs::read_to_string("/proc/self/io").unwrap();
        io.lines()
            .find_map(|l| l.strip_prefix("read_bytes: "))
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    type Run<'a> = (&'static str, Box<dyn FnMut() + 'a>);
    let mut runs: Vec<Run<'_>> = vec![
        (
            "dlpack-core Checkpoint::open + read_where (all, owned)",
            Box::new(|| {
                let batch = Checkpoint::open(&dir)
                    .unwrap()
                    .read_where(|_| true)
                    .unwrap();
                black_box(batch);
            }),
        ),
        (
            "the disk: each shard read in 8 MiB reads (dd)",
            Box::new(|| {
                let mut buf = vec![0u8; 8 << 20];
                for shard in &shards {
                    let mut file = std::fs::File::open(shard).unwrap();
                    while std::io::Read::read(&mut file, &mut buf).unwrap() > 0 {}
                }
                black_box(buf);
            }),
        ),
        (
            "safetensors load_file's work: map, deserialize, copy every tensor",
            Box::new(|| {
                let mut owned: Vec<Vec<u8>> = Vec::new();
                for shard in &shards {
                    let file = std::fs::File::open(shard).unwrap();
                    // SAFETY: the benchmark's own file, which nothing modifies while
                    // mapped.
                    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
                    let tensors = safetensors::SafeTensors::deserialize(&map).unwrap();
                    for (_, view) in tensors.tensors() {
                        owned.push(view.data().to_vec());
                    }
                }
                black_box(owned);
            }),
        ),
    ];
    let rounds = std::env::var("DLPACK_BENCH_ROUNDS").map_or(5, |r| r.parse().unwrap());
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    let mut disk: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    for _ in 0..rounds {
        for (i, (_, run)) in runs.iter_mut().enumerate() {
            if std::env::var_os("DLPACK_BENCH_WARM").is_none() {
                evict();
            }
            let before = read_bytes();
            let start = std::time::Instant::now();
            run();
            times[i].push(start.elapsed().as_secs_f64());
            disk[i].push((read_bytes() - before) as f64 / total as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let disk_time = median(&mut times[1].clone());
    println!(
        "\ncold cache: a {:.0} MiB checkpoint in {} shards (medians of {rounds}, alternating)",
        mib(total),
        shards.len()
    );
    for (i, (name, _)) in runs.iter().enumerate() {
        let t = median(&mut times[i]);
        println!(
            "  {name:<64} {:>8.1} ms  {:>7.1} MiB/s  {:.2} x the disk's bandwidth  \
             (read from disk: {:.2} x the files)",
            t * 1e3,
            mib(total) / t,
            disk_time / t,
            median(&mut disk[i]),
        );
    }
}

/// The `convert` group: the float conversion of a converting load
/// (`safetensors::convert_floats`, `bfloat16` and `float16` to `float32`) beside a
/// `memcpy` of its output (`copy_from_slice`), in the cache (64 Ki elements: 128 KiB in,
/// 256 KiB out) and beyond it (8 Mi elements: 16 MiB in, 32 MiB out), and beside
/// `half`'s own slice conversion (`convert_to_f32_slice`) of the same values.
fn bench_convert(c: &mut Criterion) {
    use half::slice::HalfFloatSliceExt;
    let mut group = c.benchmark_group("convert");
    for n in [64usize << 10, 8 << 20] {
        let src: Vec<u8> = (0..2 * n).map(|i| (i * 7 % 251) as u8 & 0x3f).collect();
        let other = vec![1u8; 4 * n];
        let mut dst = vec![0u8; 4 * n];
        let mut floats = vec![0f32; n];
        let halves: Vec<half::f16> = (0..n).map(|i| half::f16::from_f32(i as f32)).collect();
        group.throughput(criterion::Throughput::Bytes(4 * n as u64));
        group.bench_function(format!("{n}/memcpy of the output"), |b| {
            b.iter(|| dst.copy_from_slice(black_box(&other)))
        });
        for (name, from) in [("bf16", DataType::BF16), ("f16", DataType::F16)] {
            group.bench_function(format!("{n}/dlpack-core {name} -> f32"), |b| {
                b.iter(|| {
                    dlpack_core::safetensors::convert_floats(
                        from,
                        DataType::F32,
                        black_box(&src),
                        &mut dst,
                    )
                    .unwrap()
                })
            });
        }
        group.bench_function(format!("{n}/half convert_to_f32_slice (f16)"), |b| {
            b.iter(|| black_box(&halves[..]).convert_to_f32_slice(&mut floats))
        });
    }
    group.finish();
}

/// The `map` group: `map_safetensors` of the GPT-2 file beside dlpark's, and of a
/// 10 MiB and a 1 GiB file of as many tensors.
fn bench_map(c: &mut Criterion, folder: &Path, gpt2_path: &Path) {
    let mut group = c.benchmark_group("map");
    group.bench_function("gpt2/dlpack-core map_safetensors", |b| {
        b.iter_batched(
            || (),
            // SAFETY: the benchmark's own file, which nothing modifies while mapped.
            |()| unsafe { TensorBatch::map_safetensors(gpt2_path) }.unwrap(),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("gpt2/dlpark SafeTensorFile open + tensors", |b| {
        b.iter_batched(
            || (),
            |()| {
                let file = dlpark::interop::safetensors::SafeTensorFile::open(gpt2_path).unwrap();
                file.names()
                    .iter()
                    .map(|name| file.tensor(name).unwrap())
                    .collect::<Vec<_>>()
            },
            BatchSize::PerIteration,
        )
    });
    // The same tensor count, 10 MiB and 1 GiB: a map costs its header.
    for (name, d, vocab) in [("10MiB", 48, 50_000), ("1GiB", 1152, 65_000)] {
        let path = model_file(folder, &format!("{name}.safetensors"), d, vocab);
        let size = std::fs::metadata(&path).unwrap().len();
        group.bench_function(
            format!("{name} ({:.0} MiB)/dlpack-core map_safetensors", mib(size)),
            |b| {
                b.iter_batched(
                    || (),
                    // SAFETY: as above.
                    |()| unsafe { TensorBatch::map_safetensors(&path) }.unwrap(),
                    BatchSize::PerIteration,
                )
            },
        );
    }
    group.finish();
}

/// The `read` group: a read into the model's owned fields beside `std::fs::read`.
fn bench_read(c: &mut Criterion, gpt2_path: &Path) {
    let mut group = c.benchmark_group("read");
    group.bench_function(
        "gpt2/dlpack-core read_safetensors + Gpt2::from_dlpack",
        |b| {
            b.iter(|| Gpt2::from_dlpack(TensorBatch::read_safetensors(gpt2_path).unwrap()).unwrap())
        },
    );
    group.bench_function("gpt2/std::fs::read", |b| {
        b.iter(|| std::fs::read(gpt2_path).unwrap())
    });
    group.finish();
}

/// The `write` group: `batch` written to `out` beside `std::fs::write` of the file's
/// `bytes` and the `safetensors` crate's `serialize_to_file`.
fn bench_write(c: &mut Criterion, batch: &TensorBatch, bytes: &[u8], out: &Path) {
    let mut group = c.benchmark_group("write");
    group.bench_function("gpt2/dlpack-core write_safetensors", |b| {
        b.iter(|| batch.write_safetensors(out).unwrap())
    });
    group.bench_function("gpt2/std::fs::write", |b| {
        b.iter(|| std::fs::write(out, bytes).unwrap())
    });
    group.bench_function("gpt2/safetensors serialize_to_file", |b| {
        b.iter(|| {
            let views: Vec<(&str, safetensors::tensor::TensorView<'_>)> = batch
                .iter()
                .map(|(name, tensor)| (name, view(tensor)))
                .collect();
            safetensors::serialize_to_file(views, None, out).unwrap()
        })
    });
    group.finish();
}

/// The read and the write again, each alternating with its anchors.
fn alternate_read_and_write(gpt2_path: &Path, batch: &TensorBatch, bytes: &[u8], out: &Path) {
    print_alternating(
        "read, gpt2",
        9,
        &mut [
            ("read_safetensors + Gpt2::from_dlpack", &mut || {
                black_box(
                    Gpt2::from_dlpack(TensorBatch::read_safetensors(gpt2_path).unwrap()).unwrap(),
                );
            }),
            ("std::fs::read", &mut || {
                black_box(std::fs::read(gpt2_path).unwrap());
            }),
        ],
    );
    print_alternating(
        "write, gpt2",
        9,
        &mut [
            ("write_safetensors", &mut || {
                batch.write_safetensors(out).unwrap()
            }),
            ("std::fs::write", &mut || {
                std::fs::write(out, bytes).unwrap()
            }),
            ("safetensors serialize_to_file", &mut || {
                let views: Vec<_> = batch.iter().map(|(n, t)| (n, view(t))).collect();
                safetensors::serialize_to_file(views, None, out).unwrap()
            }),
        ],
    );
}

/// [`memory_of`] `op`, in a fresh process (this program again).
fn memory_in_fresh_process(op: &str, folder: &Path) -> String {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .env("DLPACK_BENCH_MEMORY", op)
        .env("DLPACK_BENCH_DIR", folder)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The shards of the checkpoint in `dir`, in order.
fn shards_of(dir: &Path) -> Vec<PathBuf> {
    let mut shards: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    shards.sort();
    shards
}

/// Checkpoints as published: the GPT-2 weights of `gpt2_path` as 4 shards (float32,
/// and bfloat16), written, loaded, converted and mapped beside their anchors.
fn checkpoints(c: &mut Criterion, folder: &Path, gpt2_path: &Path) {
    let checkpoints = Checkpoints::write(folder, gpt2_path);
    checkpoints.bench(c);
    checkpoints.alternate();
    let _ = std::fs::remove_dir_all(&checkpoints.out);
    let _ = std::fs::remove_file(&checkpoints.one);
    drop(checkpoints);
    println!("\nmemory of the checkpoint loads, each in a fresh process:");
    for op in ["load", "load-bf16"] {
        print!("  {}", memory_in_fresh_process(op, folder));
    }
    println!(
        "  (a load that converts stages at most 256 KiB + 96 KiB per thread; one that does \
         not, nothing)"
    );
}

/// The checkpoints of the GPT-2 weights, float32 and bfloat16, and where the writes go.
struct Checkpoints {
    batch: TensorBatch,
    /// The largest float32 shard (half of it for the bfloat16 shards).
    max: u64,
    dir: PathBuf,
    shards: Vec<PathBuf>,
    bf16_dir: PathBuf,
    bf16_shards: Vec<PathBuf>,
    /// Where `write_checkpoint` writes, and where `write_safetensors` does.
    out: PathBuf,
    one: PathBuf,
    /// The conversion of the bfloat16 loads.
    wide: ReadOptions,
}

impl Checkpoints {
    /// Writes the checkpoints of `gpt2_path` into `folder` and warms the page cache.
    fn write(folder: &Path, gpt2_path: &Path) -> Self {
        let batch = TensorBatch::read_safetensors(gpt2_path).unwrap();
        let total: u64 = batch
            .iter()
            .map(|(_, t)| 4 * t.num_elements().unwrap() as u64)
            .sum();
        // wte alone, then three shards of the blocks.
        let max = total / 4 + (1 << 20);
        let dir = folder.join("gpt2-4");
        batch.write_checkpoint(&dir, max).unwrap();
        let shards = shards_of(&dir);
        let bf16_dir = folder.join("gpt2-4-bf16");
        let narrow = ReadOptions::new().convert_floats(DataType::BF16);
        let stored = Checkpoint::open(&dir)
            .unwrap()
            .read_where_with(|_| true, &narrow)
            .unwrap();
        stored.write_checkpoint(&bf16_dir, max / 2).unwrap();
        drop(stored);
        let bf16_shards = shards_of(&bf16_dir);
        println!(
            "\ncheckpoints: {} float32 shards, {} bfloat16 shards, {:.1} MiB of float32",
            shards.len(),
            bf16_shards.len(),
            mib(total)
        );
        for shard in shards.iter().chain(&bf16_shards) {
            black_box(std::fs::read(shard).unwrap());
        }
        Self {
            batch,
            max,
            dir,
            shards,
            bf16_dir,
            bf16_shards,
            out: folder.join("out-checkpoint"),
            one: folder.join("out.safetensors"),
            wide: ReadOptions::new().convert_floats(DataType::F32),
        }
    }

    /// The `checkpoint` group: loads, the bfloat16 load converting, maps and writes.
    fn bench(&self, c: &mut Criterion) {
        let Self {
            batch,
            max,
            dir,
            shards,
            bf16_dir,
            bf16_shards,
            out,
            one,
            wide,
        } = self;
        let mut group = c.benchmark_group("checkpoint");
        group.bench_function("gpt2 4 shards/dlpack-core Checkpoint::open + read", |b| {
            b.iter(|| Checkpoint::open(dir).unwrap().read::<Gpt2>().unwrap())
        });
        group.bench_function("gpt2 4 shards/std::fs::read every shard, all kept", |b| {
            b.iter(|| {
                shards
                    .iter()
                    .map(|s| std::fs::read(s).unwrap())
                    .collect::<Vec<_>>()
            })
        });
        group.bench_function(
            "gpt2 4 shards bf16/dlpack-core load converting to f32",
            |b| {
                b.iter(|| {
                    let checkpoint = Checkpoint::open(bf16_dir).unwrap();
                    checkpoint.read_with::<Gpt2>(wide).unwrap()
                })
            },
        );
        group.bench_function(
            "gpt2 4 shards bf16/candle mmaped + to_dtype(F32) every tensor",
            |b| b.iter(|| candle_load(bf16_shards)),
        );
        group.bench_function("gpt2 4 shards/dlpack-core Checkpoint::open + map", |b| {
            b.iter_batched(
                || (),
                // SAFETY: the benchmark's own files, which nothing modifies while mapped.
                |()| unsafe { Checkpoint::open(dir).unwrap().map() }.unwrap(),
                BatchSize::PerIteration,
            )
        });
        group.bench_function(
            "gpt2 4 shards/dlpack-core map_safetensors of each shard",
            |b| {
                b.iter_batched(
                    || (),
                    |()| {
                        shards
                            .iter()
                            // SAFETY: the benchmark's own files, which nothing modifies
                            // while mapped.
                            .map(|s| unsafe { TensorBatch::map_safetensors(s) }.unwrap())
                            .collect::<Vec<_>>()
                    },
                    BatchSize::PerIteration,
                )
            },
        );
        group.bench_function("gpt2/dlpack-core write_checkpoint (4 shards)", |b| {
            b.iter(|| batch.write_checkpoint(out, *max).unwrap())
        });
        group.bench_function("gpt2/dlpack-core write_safetensors (one file)", |b| {
            b.iter(|| batch.write_safetensors(one).unwrap())
        });
        group.finish();
    }

    /// The loads, the maps and the writes again, each alternating with its anchors.
    fn alternate(&self) {
        let Self {
            batch,
            max,
            dir,
            shards,
            bf16_dir,
            bf16_shards,
            out,
            one,
            wide,
        } = self;
        print_alternating(
            "checkpoint load, gpt2 in 4 shards",
            9,
            &mut [
                ("Checkpoint::open + read::<Gpt2> (float32)", &mut || {
                    black_box(Checkpoint::open(dir).unwrap().read::<Gpt2>().unwrap());
                }),
                (
                    "std::fs::read of every shard, one after another, all kept",
                    &mut || {
                        // Every shard in memory at once, as a load's output is (a shard
                        // dropped before the next is read would lend its pages to the
                        // next).
                        let all: Vec<Vec<u8>> =
                            shards.iter().map(|s| std::fs::read(s).unwrap()).collect();
                        black_box(all);
                    },
                ),
                (
                    "bfloat16 shards: read_with::<Gpt2>(convert to float32)",
                    &mut || {
                        let checkpoint = Checkpoint::open(bf16_dir).unwrap();
                        black_box(checkpoint.read_with::<Gpt2>(wide).unwrap());
                    },
                ),
                (
                    "bfloat16 shards: candle mmaped + to_dtype(F32) every tensor",
                    &mut || {
                        black_box(candle_load(bf16_shards));
                    },
                ),
            ],
        );
        alternate_maps(dir, shards, 31);
        print_alternating(
            "checkpoint write, gpt2",
            9,
            &mut [
                ("write_checkpoint (4 shards and the index)", &mut || {
                    batch.write_checkpoint(out, *max).unwrap()
                }),
                ("write_safetensors (one file)", &mut || {
                    batch.write_safetensors(one).unwrap()
                }),
            ],
        );
    }
}

/// `Checkpoint::open` + `map` of the checkpoint in `dir` beside `map_safetensors` of
/// each of its `shards`, and `open` alone, alternating for `rounds` rounds.
fn alternate_maps(dir: &Path, shards: &[PathBuf], rounds: usize) {
    print_alternating(
        "checkpoint map, gpt2 in 4 shards",
        rounds,
        &mut [
            ("Checkpoint::open + map", &mut || {
                // SAFETY: the benchmark's own files, which nothing modifies while
                // mapped.
                black_box(unsafe { Checkpoint::open(dir).unwrap().map() }.unwrap());
            }),
            ("TensorBatch::map_checkpoint", &mut || {
                // SAFETY: as above.
                black_box(unsafe { TensorBatch::map_checkpoint(dir) }.unwrap());
            }),
            ("map_safetensors of each of the 4 shards", &mut || {
                for shard in shards {
                    // SAFETY: as above.
                    black_box(unsafe { TensorBatch::map_safetensors(shard) }.unwrap());
                }
            }),
            // Its part: the index and the four headers read and parsed.
            ("Checkpoint::open alone", &mut || {
                black_box(Checkpoint::open(dir).unwrap());
            }),
        ],
    );
}

/// candle's mapped loader over `paths`, converting and fetching every tensor, as
/// `VarBuilder::from_mmaped_safetensors(&paths, DType::F32, &Device::Cpu)` does on
/// each `get`.
fn candle_load(paths: &[PathBuf]) -> Vec<candle_core::Tensor> {
    let cpu = candle_core::Device::Cpu;
    // SAFETY: the benchmark's own files, which nothing modifies while mapped.
    let files = unsafe { candle_core::safetensors::MmapedSafetensors::multi(paths) }.unwrap();
    files
        .tensors()
        .into_iter()
        .map(|(name, _)| {
            let tensor = files.load(&name, &cpu).unwrap();
            tensor.to_dtype(candle_core::DType::F32).unwrap()
        })
        .collect::<Vec<_>>()
}

/// A `safetensors` view of a C-contiguous float32 tensor's bytes.
fn view(tensor: &ManagedTensor) -> safetensors::tensor::TensorView<'_> {
    let shape: Vec<usize> = tensor.shape().iter().map(|&d| d as usize).collect();
    let data = tensor.as_array::<f32, ndarray::IxDyn>().unwrap();
    let values = data.as_slice().unwrap();
    // SAFETY: the bytes of a slice of `f32`s, borrowed with it.
    let bytes =
        unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), size_of_val(values)) };
    safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape, bytes).unwrap()
}

// A Llama-shaped model, whole and as one rank of a tensor-parallel group takes it.

/// A weight alone (a linear layer without bias, an embedding, an RMS norm).
#[derive(ToDLPack, FromDLPack)]
struct Weight<D: ndarray::Dimension> {
    weight: ndarray::Array<f32, D>,
}

#[derive(ToDLPack, FromDLPack)]
struct LlamaLayer {
    q_proj: Weight<ndarray::Ix2>,
    k_proj: Weight<ndarray::Ix2>,
    v_proj: Weight<ndarray::Ix2>,
    o_proj: Weight<ndarray::Ix2>,
    gate_proj: Weight<ndarray::Ix2>,
    up_proj: Weight<ndarray::Ix2>,
    down_proj: Weight<ndarray::Ix2>,
    input_layernorm: Weight<ndarray::Ix1>,
}

#[derive(ToDLPack, FromDLPack)]
struct Llama {
    embed_tokens: Weight<ndarray::Ix2>,
    layers: Vec<LlamaLayer>,
    norm: Weight<ndarray::Ix1>,
    lm_head: Weight<ndarray::Ix2>,
}

/// The same names as one rank takes them: Megatron's column-parallel projections,
/// vocabulary-parallel embedding and head by rows (dimension 0), row-parallel ones by
/// columns (dimension 1), the norms replicated.
#[derive(FromDLPack)]
struct LlamaLayerRank {
    #[dlpack(split = 0)]
    q_proj: Weight<ndarray::Ix2>,
    #[dlpack(split = 0)]
    k_proj: Weight<ndarray::Ix2>,
    #[dlpack(split = 0)]
    v_proj: Weight<ndarray::Ix2>,
    #[dlpack(split = 1)]
    o_proj: Weight<ndarray::Ix2>,
    #[dlpack(split = 0)]
    gate_proj: Weight<ndarray::Ix2>,
    #[dlpack(split = 0)]
    up_proj: Weight<ndarray::Ix2>,
    #[dlpack(split = 1)]
    down_proj: Weight<ndarray::Ix2>,
    input_layernorm: Weight<ndarray::Ix1>,
}

#[derive(FromDLPack)]
struct LlamaRank {
    #[dlpack(split = 0)]
    embed_tokens: Weight<ndarray::Ix2>,
    layers: Vec<LlamaLayerRank>,
    norm: Weight<ndarray::Ix1>,
    #[dlpack(split = 0)]
    lm_head: Weight<ndarray::Ix2>,
}

/// A Llama of width `d`, MLP width `inner`, `layers` layers and vocabulary `vocab`.
fn llama(d: usize, inner: usize, layers: usize, vocab: usize) -> Llama {
    let w = |o: usize, i: usize| Weight {
        weight: filled((o, i)),
    };
    Llama {
        embed_tokens: w(vocab, d),
        layers: (0..layers)
            .map(|_| LlamaLayer {
                q_proj: w(d, d),
                k_proj: w(d, d),
                v_proj: w(d, d),
                o_proj: w(d, d),
                gate_proj: w(inner, d),
                up_proj: w(inner, d),
                down_proj: w(d, inner),
                input_layernorm: Weight { weight: filled(d) },
            })
            .collect(),
        norm: Weight { weight: filled(d) },
        lm_head: w(vocab, d),
    }
}

/// The `parallel` group: rank 0 and rank 3 of 4 (owned, float32) beside the full load
/// of the same checkpoint, then the same alternating, for the ratios.
/// One layer of twelve by its prefix (`Checkpoint::load_at`) beside the full load.
fn one_layer(c: &mut Criterion, folder: &Path) {
    let dir = folder.join("llama-12");
    if !dir.exists() {
        let batch = llama(768, 2048, 12, 32000).to_dlpack().unwrap();
        let total: u64 = batch
            .iter()
            .map(|(_, t)| 4 * t.num_elements().unwrap() as u64)
            .sum();
        batch.write_checkpoint(&dir, total / 4 + (1 << 20)).unwrap();
    }
    let shards = shards_of(&dir);
    for shard in &shards {
        black_box(std::fs::read(shard).unwrap());
    }
    let checkpoint = Checkpoint::open(&dir).unwrap();
    let bytes = |under: &str| -> u64 {
        let names: Vec<&str> = checkpoint.names().collect();
        names
            .iter()
            .filter(|n| under.is_empty() || n.starts_with(under))
            .map(|n| checkpoint.tensor(n).unwrap().byte_len() as u64)
            .sum()
    };
    println!(
        "\none layer: llama-shaped checkpoint, 12 layers, {} float32 shards, {:.1} MiB; \
         layer 7 is {:.1} MiB ({:.4} of the bytes)",
        shards.len(),
        mib(bytes("")),
        mib(bytes("layers.7.")),
        bytes("layers.7.") as f64 / bytes("") as f64
    );
    let mut group = c.benchmark_group("load_at");
    group.bench_function("llama 12 layers/Checkpoint::open + read (full)", |b| {
        b.iter(|| Checkpoint::open(&dir).unwrap().read::<Llama>().unwrap())
    });
    group.bench_function("llama 12 layers/open + load_at(\"layers.7\")", |b| {
        b.iter(|| {
            let checkpoint = Checkpoint::open(&dir).unwrap();
            checkpoint.load_at::<LlamaLayer>("layers.7").unwrap()
        })
    });
    group.finish();
    print_alternating(
        "one layer of twelve by its prefix",
        9,
        &mut [
            ("Checkpoint::open + read::<Llama> (full)", &mut || {
                black_box(Checkpoint::open(&dir).unwrap().read::<Llama>().unwrap());
            }),
            ("open + load_at::<LlamaLayer>(\"layers.7\")", &mut || {
                let checkpoint = Checkpoint::open(&dir).unwrap();
                black_box(checkpoint.load_at::<LlamaLayer>("layers.7").unwrap());
            }),
        ],
    );
}

fn parallel(c: &mut Criterion, folder: &Path) {
    let dir = folder.join("llama-4");
    if !dir.exists() {
        let batch = llama(768, 2048, 6, 32000).to_dlpack().unwrap();
        let total: u64 = batch
            .iter()
            .map(|(_, t)| 4 * t.num_elements().unwrap() as u64)
            .sum();
        batch.write_checkpoint(&dir, total / 4 + (1 << 20)).unwrap();
    }
    let shards = shards_of(&dir);
    let total: u64 = shards
        .iter()
        .map(|s| std::fs::metadata(s).unwrap().len())
        .sum();
    for shard in &shards {
        black_box(std::fs::read(shard).unwrap());
    }
    println!(
        "\ntensor-parallel: llama-shaped checkpoint, {} float32 shards, {:.1} MiB",
        shards.len(),
        mib(total)
    );
    let rank = |r: usize| ReadOptions::new().tensor_parallel(r, 4);
    let mut group = c.benchmark_group("parallel");
    group.bench_function("llama 4 shards/Checkpoint::open + read (full)", |b| {
        b.iter(|| Checkpoint::open(&dir).unwrap().read::<Llama>().unwrap())
    });
    for r in [0, 3] {
        group.bench_function(
            format!("llama 4 shards/open + read_with rank {r} of 4"),
            |b| {
                b.iter(|| {
                    let checkpoint = Checkpoint::open(&dir).unwrap();
                    checkpoint.read_with::<LlamaRank>(&rank(r)).unwrap()
                })
            },
        );
    }
    group.finish();
    print_alternating(
        "tensor-parallel load, llama in 4 shards",
        9,
        &mut [
            ("Checkpoint::open + read::<Llama> (full)", &mut || {
                black_box(Checkpoint::open(&dir).unwrap().read::<Llama>().unwrap());
            }),
            ("open + read_with::<LlamaRank>(rank 0 of 4)", &mut || {
                let checkpoint = Checkpoint::open(&dir).unwrap();
                black_box(checkpoint.read_with::<LlamaRank>(&rank(0)).unwrap());
            }),
            ("open + read_with::<LlamaRank>(rank 3 of 4)", &mut || {
                let checkpoint = Checkpoint::open(&dir).unwrap();
                black_box(checkpoint.read_with::<LlamaRank>(&rank(3)).unwrap());
            }),
        ],
    );
}
