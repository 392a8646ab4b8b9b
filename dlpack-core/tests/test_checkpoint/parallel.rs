//! Tensor-parallel loads: fields declared `#[dlpack(split = D)]`, read as one rank of a
//! group (`ReadOptions::tensor_parallel`), each getting `torch.chunk(full, world, D)[rank]`
//! and reading only those bytes; shapes checked against the full tensors first.

use dlpack_core::safetensors::{Checkpoint, ReadOptions};
use dlpack_core::{DLPackArray, DataType, Error, FromDLPack, ManagedTensor, ToDLPack};
use half::bf16;
use ndarray::{Array1, Array2, Array3, ArrayD, Axis, Ix1, Ix2, Ix3, Slice, concatenate};

use super::{Linear, folder, linear, save, state_dict};

/// The checkpoint's layout, read whole.
#[derive(ToDLPack, FromDLPack, Debug, PartialEq, Clone)]
struct Full<T> {
    q: Array2<T>,
    o: Array2<T>,
    norm: Array1<T>,
    rotary: Array3<T>,
    up: Linear<T>,
    layers: Vec<Linear<T>>,
}

/// The same names, as one rank takes them: `q`, `up` (both its tensors) and every
/// layer's split along dimension 0 (column-parallel), `o` along 1 (row-parallel),
/// `rotary` along its middle dimension, `norm` replicated.
#[derive(FromDLPack, Debug, PartialEq, Clone)]
struct Sharded<T> {
    #[dlpack(split = 0)]
    q: Array2<T>,
    #[dlpack(split = 1)]
    o: Array2<T>,
    norm: Array1<T>,
    #[dlpack(split = 1)]
    rotary: Array3<T>,
    #[dlpack(split = 0)]
    up: Linear<T>,
    #[dlpack(split = 0)]
    layers: Vec<Linear<T>>,
}

fn full(n: usize) -> Full<f32> {
    Full {
        q: Array2::from_shape_fn((2 * n, n), |(i, j)| (i * 100 + j) as f32),
        o: Array2::from_shape_fn((n, 2 * n), |(i, j)| -((i * 100 + j) as f32)),
        norm: Array1::from_shape_fn(n, |i| i as f32 + 0.5),
        rotary: Array3::from_shape_fn((3, n, 2), |(i, j, k)| (i * 1000 + j * 10 + k) as f32),
        up: linear(n, 7.0),
        layers: (0..3).map(|l| linear(n, l as f32)).collect(),
    }
}

/// `torch.chunk(full, world, dim)[rank]` of an even split.
fn chunk<A: Clone, D: ndarray::Dimension>(
    full: &ndarray::Array<A, D>,
    dim: usize,
    rank: usize,
    world: usize,
) -> ndarray::Array<A, D> {
    let part = full.len_of(Axis(dim)) / world;
    let range = Slice::from(rank * part..(rank + 1) * part);
    full.slice_axis(Axis(dim), range).to_owned()
}

fn expected<T: Clone>(full: &Full<T>, rank: usize, world: usize) -> Sharded<T> {
    let linear = |l: &Linear<T>| Linear {
        weight: chunk(&l.weight, 0, rank, world),
        bias: chunk(&l.bias, 0, rank, world),
    };
    Sharded {
        q: chunk(&full.q, 0, rank, world),
        o: chunk(&full.o, 1, rank, world),
        norm: full.norm.clone(),
        rotary: chunk(&full.rotary, 1, rank, world),
        up: linear(&full.up),
        layers: full.layers.iter().map(linear).collect(),
    }
}

#[test]
fn each_rank_reads_its_chunk_and_the_ranks_make_the_whole() {
    let dir = folder();
    let whole = full(8);
    save(whole.clone(), dir.path(), 800);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert!(checkpoint.shards().len() > 2);
    for world in [1, 2, 4] {
        let ranks: Vec<Sharded<f32>> = (0..world)
            .map(|rank| {
                let options = ReadOptions::new().tensor_parallel(rank, world).threads(2);
                let sharded: Sharded<f32> = checkpoint.read_with(&options).unwrap();
                assert_eq!(sharded, expected(&whole, rank, world), "{rank} of {world}");
                sharded
            })
            .collect();
        // The concatenation of every rank's part along its dimension is the full tensor.
        let cat = |dim: usize, parts: Vec<ndarray::ArrayViewD<'_, f32>>| {
            concatenate(Axis(dim), &parts).unwrap()
        };
        let q = cat(0, ranks.iter().map(|r| r.q.view().into_dyn()).collect());
        let o = cat(1, ranks.iter().map(|r| r.o.view().into_dyn()).collect());
        let rotary = cat(
            1,
            ranks.iter().map(|r| r.rotary.view().into_dyn()).collect(),
        );
        let w2 = cat(
            0,
            ranks
                .iter()
                .map(|r| r.layers[2].weight.view().into_dyn())
                .collect(),
        );
        assert_eq!(q, whole.q.clone().into_dyn());
        assert_eq!(o, whole.o.clone().into_dyn());
        assert_eq!(rotary, whole.rotary.clone().into_dyn());
        assert_eq!(w2, whole.layers[2].weight.clone().into_dyn());
        assert!(ranks.iter().all(|r| r.norm == whole.norm));
    }
    // Without the option, the split fields are read whole, as at world size 1.
    let plain: Sharded<f32> = checkpoint.read().unwrap();
    assert_eq!(plain, expected(&whole, 0, 1));
}

#[test]
fn a_rank_converts_its_part_and_loads_leniently_and_in_place() {
    let dir = folder();
    let whole = full(8);
    let narrow = Full {
        q: whole.q.mapv(bf16::from_f32),
        o: whole.o.mapv(bf16::from_f32),
        norm: whole.norm.mapv(bf16::from_f32),
        rotary: whole.rotary.mapv(bf16::from_f32),
        up: Linear {
            weight: whole.up.weight.mapv(bf16::from_f32),
            bias: whole.up.bias.mapv(bf16::from_f32),
        },
        layers: (whole.layers.iter())
            .map(|l| Linear {
                weight: l.weight.mapv(bf16::from_f32),
                bias: l.bias.mapv(bf16::from_f32),
            })
            .collect(),
    };
    save(narrow.clone(), dir.path(), 1_000);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    // bfloat16 to float32 is exact: the values are the float32 model's, rounded once.
    let rounded = Full {
        q: narrow.q.mapv(f32::from),
        o: narrow.o.mapv(f32::from),
        norm: narrow.norm.mapv(f32::from),
        rotary: narrow.rotary.mapv(f32::from),
        up: Linear {
            weight: narrow.up.weight.mapv(f32::from),
            bias: narrow.up.bias.mapv(f32::from),
        },
        layers: (narrow.layers.iter())
            .map(|l| Linear {
                weight: l.weight.mapv(f32::from),
                bias: l.bias.mapv(f32::from),
            })
            .collect(),
    };
    for rank in 0..4 {
        let options = ReadOptions::new()
            .tensor_parallel(rank, 4)
            .convert_floats(DataType::F32);
        let sharded: Sharded<f32> = checkpoint.read_with(&options).unwrap();
        assert_eq!(sharded, expected(&rounded, rank, 4));
        let (lenient, report): (Sharded<f32>, _) = checkpoint.read_lenient_with(&options).unwrap();
        assert_eq!(lenient, sharded);
        assert!(report.is_empty());
        // In place: a value of the rank's shapes, its buffers kept.
        let mut value = expected(&rounded, (rank + 1) % 4, 4);
        let pointer = value.o.as_ptr();
        checkpoint.load_into_with(&mut value, &options).unwrap();
        assert_eq!(value, sharded);
        assert_eq!(value.o.as_ptr(), pointer);
        // The same rank, unconverted, is the bfloat16 part.
        let options = ReadOptions::new().tensor_parallel(rank, 4);
        let sharded: Sharded<bf16> = checkpoint.read_with(&options).unwrap();
        assert_eq!(sharded, expected(&narrow, rank, 4));
    }
}

#[derive(ToDLPack, FromDLPack)]
struct Pair {
    a: Array2<f32>,
    b: ArrayD<f32>,
}

#[derive(FromDLPack, Debug)]
struct BadSplits {
    #[dlpack(split = 0)]
    a: Array2<f32>,
    #[dlpack(split = 2)]
    b: ArrayD<f32>,
}

#[test]
fn uneven_splits_and_missing_dimensions_are_refused_before_reading() {
    let dir = folder();
    let pair = Pair {
        a: Array2::zeros((6, 4)),
        b: Array2::zeros((4, 8)).into_dyn(),
    };
    save(pair, dir.path(), 1 << 20);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let options = ReadOptions::new().tensor_parallel(1, 4);
    let err = checkpoint.read_with::<BadSplits>(&options).unwrap_err();
    let (missing, unexpected, failed) = state_dict(&err);
    assert!(missing.is_empty() && unexpected.is_empty());
    let failed: Vec<String> = failed.iter().map(Error::to_string).collect();
    assert_eq!(
        failed,
        [
            "tensor `a`: cannot split a tensor of shape [6, 4] along dimension 0 between 4 \
             ranks: 6 is not a multiple of 4",
            "tensor `b`: cannot split a tensor of shape [4, 8] along dimension 2 between 4 \
             ranks: it has 2 dimensions",
        ]
    );
    assert!(matches!(
        err_root(&err),
        Error::InvalidSplit {
            dim: 0,
            world_size: 4,
            ..
        }
    ));
    // Checked at every world size: a missing dimension at world size 1 too, and the
    // in-place loads as the fresh ones.
    let one = ReadOptions::new().tensor_parallel(0, 1);
    let err = checkpoint.read_with::<BadSplits>(&one).unwrap_err();
    let (_, _, failed) = state_dict(&err);
    assert_eq!(failed.len(), 1, "{err}");
    assert_eq!(
        failed[0].to_string(),
        "tensor `b`: cannot split a tensor of shape [4, 8] along dimension 2 between 1 \
         ranks: it has 2 dimensions"
    );
    let mut value = BadSplits {
        a: Array2::zeros((1, 4)),
        b: Array2::zeros((4, 8)).into_dyn(),
    };
    let err = checkpoint.load_into_with(&mut value, &options).unwrap_err();
    assert_eq!(state_dict(&err).2.len(), 2, "{err}");
    // Even splits of the same tensors pass: `a` in two, `b` whole.
    #[derive(FromDLPack)]
    struct Halves {
        #[dlpack(split = 0)]
        a: Array2<f32>,
        b: ArrayD<f32>,
    }
    let halves: Halves = checkpoint
        .read_with(&ReadOptions::new().tensor_parallel(1, 2))
        .unwrap();
    assert_eq!(halves.a.dim(), (3, 4));
    assert_eq!(halves.b.shape(), [4, 8]);
}

/// The innermost error of a state dict's first failure.
fn err_root(err: &Error) -> &Error {
    state_dict(err).2[0].root()
}

#[test]
fn a_rank_outside_its_group_is_refused() {
    let dir = folder();
    save(full(4), dir.path(), 1 << 20);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    for (rank, world, message) in [
        (
            4,
            4,
            "invalid tensor-parallel rank 4: the ranks of a world of size 4 are 0 to 3",
        ),
        (
            0,
            0,
            "invalid tensor-parallel world size 0: a group has at least one rank",
        ),
    ] {
        let options = ReadOptions::new().tensor_parallel(rank, world);
        let err = checkpoint.read_with::<Sharded<f32>>(&options).unwrap_err();
        assert_eq!(
            err,
            Error::InvalidRank {
                rank,
                world_size: world
            }
        );
        assert_eq!(err.to_string(), message);
        let mut value = expected(&full(4), 0, 2);
        let err = checkpoint.load_into_with(&mut value, &options).unwrap_err();
        assert_eq!(err.to_string(), message);
    }
}

/// The bytes this thread passed through `read` calls so far (`rchar` of
/// `/proc/thread-self/io`: the reads of a load with one thread, whatever the other tests
/// read meanwhile), or `None` where the system does not count them.
fn rchar() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/thread-self/io").ok()?;
    let line = io.lines().find(|l| l.starts_with("rchar:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[derive(ToDLPack, FromDLPack)]
struct Wide {
    column: Array2<f32>,
    row: Array2<f32>,
    norm: Array1<f32>,
}

#[derive(FromDLPack)]
struct WideRank {
    #[dlpack(split = 0)]
    column: Array2<f32>,
    #[dlpack(split = 1)]
    row: Array2<f32>,
    norm: Array1<f32>,
}

#[derive(FromDLPack)]
struct ColumnRank {
    #[dlpack(split = 0)]
    column: Array2<f32>,
}

#[test]
fn a_rank_reads_only_its_bytes() {
    let dir = folder();
    let (n, m) = (512, 256);
    let wide = Wide {
        column: Array2::from_shape_fn((n, m), |(i, j)| (i * m + j) as f32),
        row: Array2::from_shape_fn((m, n), |(i, j)| -((i * n + j) as f32)),
        norm: Array1::ones(m),
    };
    save(wide, dir.path(), 600_000);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert!(checkpoint.shards().len() >= 2);
    let Some(_) = rchar() else {
        return;
    };
    let tensor_bytes = |name: &str| checkpoint.tensor(name).unwrap().byte_len() as u64;
    for world in [2, 4] {
        for rank in 0..world {
            let options = ReadOptions::new().tensor_parallel(rank, world).threads(1);
            // A dim-0 split: one range, the rank's share.
            let before = rchar().unwrap();
            let part: ColumnRank = checkpoint.read_lenient_with(&options).unwrap().0;
            let read = rchar().unwrap() - before;
            let share = tensor_bytes("column") / world as u64;
            assert!(
                share <= read && read <= share + share / 100,
                "{read} {share}"
            );
            assert_eq!(part.column[[0, 0]], (rank * n / world * m) as f32);
            // With a dim-1 split too (row segments, each read exactly) and a replicated
            // tensor: the rank's shares and the whole `norm`, nothing more.
            let before = rchar().unwrap();
            let part: WideRank = checkpoint.read_with(&options).unwrap();
            let read = rchar().unwrap() - before;
            let share = (tensor_bytes("column") + tensor_bytes("row")) / world as u64
                + tensor_bytes("norm");
            assert!(
                share <= read && read <= share + share / 100,
                "{read} {share}"
            );
            assert_eq!(part.row.dim(), (m, n / world));
            assert_eq!(part.row[[1, 0]], -((n + rank * n / world) as f32));
        }
    }
}

/// What a rank maps: fields that keep the tensor they are given (views of the mapping).
#[derive(FromDLPack)]
struct MappedRank {
    #[dlpack(split = 0)]
    q: DLPackArray<f32, Ix2>,
    #[dlpack(split = 1)]
    o: DLPackArray<f32, Ix2>,
    norm: DLPackArray<f32, Ix1>,
    #[dlpack(split = 1)]
    rotary: DLPackArray<f32, Ix3>,
}

/// The tensors `MappedRank` takes, whole.
#[derive(ToDLPack, Clone)]
struct Attention<T> {
    q: Array2<T>,
    o: Array2<T>,
    norm: Array1<T>,
    rotary: Array3<T>,
}

fn attention(n: usize) -> Attention<f32> {
    let whole = full(n);
    Attention {
        q: whole.q,
        o: whole.o,
        norm: whole.norm,
        rotary: whole.rotary,
    }
}

#[test]
#[cfg_attr(miri, ignore = "maps files")]
fn a_mapped_rank_is_a_view_of_its_part_of_the_mapping() {
    let dir = folder();
    let n = 8;
    let whole = attention(n);
    save(whole.clone(), dir.path(), 300);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert!(checkpoint.shards().len() > 1);
    for world in [1, 2, 4] {
        let mut qs = Vec::new();
        let mut os = Vec::new();
        for rank in 0..world {
            let options = ReadOptions::new().tensor_parallel(rank, world);
            // SAFETY: the test's own files, unchanged while the values live.
            let mapped: MappedRank = unsafe { checkpoint.read_mapped_with(&options) }.unwrap();
            let at = format!("rank {rank} of {world}");
            assert_eq!(mapped.q.view(), chunk(&whole.q, 0, rank, world), "{at}");
            assert_eq!(mapped.o.view(), chunk(&whole.o, 1, rank, world), "{at}");
            assert_eq!(mapped.rotary.view(), chunk(&whole.rotary, 1, rank, world));
            assert_eq!(mapped.norm.view(), whole.norm);
            // Views, not copies: a split along an inner dimension keeps the whole
            // tensor's strides (its rows a whole row apart), and nothing is flagged copied.
            assert_eq!(mapped.o.view().strides(), [2 * n as isize, 1], "{at}");
            assert_eq!(mapped.rotary.view().strides(), [2 * n as isize, 2, 1]);
            assert_eq!(mapped.q.view().strides(), [n as isize, 1], "{at}");
            for tensor in [
                mapped.q.tensor(),
                mapped.o.tensor(),
                mapped.norm.tensor(),
                mapped.rotary.tensor(),
            ] {
                assert!(!tensor.is_copied(), "{at}");
            }
            qs.push(mapped.q.view().to_owned().into_dyn());
            os.push(mapped.o.view().to_owned().into_dyn());
        }
        fn views(parts: &[ndarray::ArrayD<f32>]) -> Vec<ndarray::ArrayViewD<'_, f32>> {
            parts.iter().map(|p| p.view()).collect()
        }
        assert_eq!(
            concatenate(Axis(0), &views(&qs)).unwrap(),
            whole.q.clone().into_dyn()
        );
        assert_eq!(
            concatenate(Axis(1), &views(&os)).unwrap(),
            whole.o.clone().into_dyn()
        );
    }
    // A write to a rank's view stays in its private mapping: the file is unchanged.
    let options = ReadOptions::new().tensor_parallel(1, 2);
    // SAFETY: as above.
    let mut mapped: MappedRank = unsafe { checkpoint.read_mapped_with(&options) }.unwrap();
    mapped.o.view_mut().unwrap().fill(0.0);
    // SAFETY: as above.
    let reread: MappedRank = unsafe { checkpoint.read_mapped() }.unwrap();
    assert_eq!(reread.o.view(), whole.o);
    assert_eq!(mapped.o.view().sum(), 0.0);
    assert_eq!(mapped.q.view(), chunk(&whole.q, 0, 1, 2));
}

#[test]
fn a_mapped_rank_converts_by_reading_and_refuses_what_it_cannot_split() {
    let dir = folder();
    let whole = attention(8);
    let narrow: Attention<bf16> = Attention {
        q: whole.q.mapv(bf16::from_f32),
        o: whole.o.mapv(bf16::from_f32),
        norm: whole.norm.mapv(bf16::from_f32),
        rotary: whole.rotary.mapv(bf16::from_f32),
    };
    save(narrow.clone(), dir.path(), 1 << 20);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let options = ReadOptions::new()
        .tensor_parallel(3, 4)
        .convert_floats(DataType::F32);
    // SAFETY: the test's own files, unchanged while the values live.
    let mapped: MappedRank = unsafe { checkpoint.read_mapped_with(&options) }.unwrap();
    // Read, converted: bf16 widened exactly.
    let o = narrow.o.mapv(f32::from);
    let rotary = narrow.rotary.mapv(f32::from);
    assert_eq!(mapped.o.view(), chunk(&o, 1, 3, 4));
    assert_eq!(mapped.rotary.view(), chunk(&rotary, 1, 3, 4));
    assert!(mapped.o.view().is_standard_layout());
    // Without conversion, the dtype is refused from the header, nothing mapped.
    let plain = ReadOptions::new().tensor_parallel(3, 4);
    // SAFETY: as above.
    let err = unsafe { checkpoint.read_mapped_with::<MappedRank>(&plain) }
        .err()
        .unwrap();
    assert!(err.to_string().contains("bfloat16"), "{err}");
    // Three ranks cannot split extents of 8.
    let three = ReadOptions::new()
        .tensor_parallel(0, 3)
        .convert_floats(DataType::F32);
    // SAFETY: as above.
    let err = unsafe { checkpoint.read_mapped_with::<MappedRank>(&three) }
        .err()
        .unwrap();
    assert!(matches!(&err, Error::StateDict { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: tensor `q`: cannot split a tensor of shape [16, 8] along \
         dimension 0 between 3 ranks: 16 is not a multiple of 3; tensor `o`: cannot split a \
         tensor of shape [8, 16] along dimension 1 between 3 ranks: 16 is not a multiple of 3; \
         tensor `rotary`: cannot split a tensor of shape [3, 8, 2] along dimension 1 between 3 \
         ranks: 8 is not a multiple of 3"
    );
}

#[test]
fn tensors_that_cannot_be_split_alike_are_one_line() {
    let dir = folder();
    let whole = full(8);
    save(whole, dir.path(), 1 << 20);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let options = ReadOptions::new().tensor_parallel(0, 3);
    let err = checkpoint.read_with::<Sharded<f32>>(&options).unwrap_err();
    // Every layer's weight and bias alike: one line each, the names by pattern (the
    // error's fields still list every tensor).
    assert_eq!(
        err.to_string(),
        "state_dict does not fit: tensor `q`: cannot split a tensor of shape [16, 8] along \
         dimension 0 between 3 ranks: 16 is not a multiple of 3; tensor `o`: cannot split a \
         tensor of shape [8, 16] along dimension 1 between 3 ranks: 16 is not a multiple of 3; \
         tensor `rotary`: cannot split a tensor of shape [3, 8, 2] along dimension 1 between 3 \
         ranks: 8 is not a multiple of 3; tensors `up.weight`, `layers.{0..2}.weight` (3): \
         cannot split a tensor of shape [8, 8] along dimension 0 between 3 ranks: 8 is not a \
         multiple of 3; tensors `up.bias`, `layers.{0..2}.bias` (3): cannot split a tensor of \
         shape [8] along dimension 0 between 3 ranks: 8 is not a multiple of 3"
    );
    assert_eq!(state_dict(&err).2.len(), 11);
}

/// A rank's parts of tensors that are not plain numbers, each split along its columns.
#[derive(FromDLPack)]
struct OddRank {
    #[dlpack(split = 1)]
    w: ManagedTensor,
    #[dlpack(split = 1)]
    b: ManagedTensor,
    #[dlpack(split = 1)]
    z: ManagedTensor,
}

#[test]
#[cfg_attr(miri, ignore = "maps files")]
fn a_mapped_rank_reads_packed_columns_and_checks_only_its_own_bools() {
    let dir = folder();
    // `w`: float4 [2, 8], a row of 8 in 4 bytes; `b`: bool [2, 4], a 2 in the last
    // column (rank 1's of 2); `z`: empty, with a huge second extent.
    let mut json = String::from(
        r#"{"w":{"dtype":"F4","shape":[2,8],"data_offsets":[0,8]},"b":{"dtype":"BOOL","shape":[2,4],"data_offsets":[8,16]},"z":{"dtype":"F32","shape":[0,1099511627776],"data_offsets":[16,16]}}"#,
    );
    while (8 + json.len()) % 8 != 0 {
        json.push(' ');
    }
    let w: Vec<u8> = (0..8u8)
        .map(|i| i.wrapping_mul(37).wrapping_add(11))
        .collect();
    let b = [1u8, 0, 1, 0, 0, 1, 1, 2];
    let mut file = (json.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(json.as_bytes());
    file.extend_from_slice(&w);
    file.extend_from_slice(&b);
    std::fs::write(dir.path().join("model.safetensors"), &file).unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let options = ReadOptions::new().tensor_parallel(0, 2);
    // SAFETY: the test's own file, unchanged while the values live.
    let rank: OddRank = unsafe { checkpoint.read_mapped_with(&options) }.unwrap();
    // The packed columns are two bytes of each row, read (no strides describe them).
    assert_eq!(rank.w.shape(), [2, 4]);
    let len = 4;
    // SAFETY: a tensor read into a buffer of its own, C-contiguous: 8 float4 in 4
    // bytes, alive while `rank` is.
    let got = unsafe { std::slice::from_raw_parts(rank.w.data_ptr().cast::<u8>(), len) };
    assert_eq!(got, [w[0], w[1], w[4], w[5]]);
    // The bools are a view of the mapping, the 2 in the other rank's column no error.
    let bools = rank.b.as_array::<bool, ndarray::IxDyn>().unwrap();
    assert_eq!(bools.strides(), [4, 1]);
    assert_eq!(
        bools.iter().copied().collect::<Vec<_>>(),
        [true, false, false, true]
    );
    assert_eq!(rank.z.shape(), [0, 1 << 39]);
    // Rank 1's column holds the 2: refused, naming the tensor and the element.
    let options = ReadOptions::new().tensor_parallel(1, 2);
    // SAFETY: as above.
    let err = unsafe { checkpoint.read_mapped_with::<OddRank>(&options) }
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(
        text.contains("`b`") && text.contains("element 7 holds byte 2"),
        "{text}"
    );
}

/// Two split fields of `f32`.
#[derive(FromDLPack)]
struct Columns {
    #[dlpack(split = 0)]
    rows: DLPackArray<f32, Ix2>,
    #[dlpack(split = 1)]
    columns: DLPackArray<f32, Ix2>,
}

#[test]
#[cfg_attr(miri, ignore = "maps files")]
fn a_mapped_rank_of_a_misaligned_shard_copies_its_part_alone() {
    let dir = folder();
    // The data section starts 2 bytes off a 4-byte boundary: no `f32` view of it.
    let mut json = String::from(
        r#"{"rows":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]},"columns":{"dtype":"F32","shape":[2,4],"data_offsets":[32,64]}}"#,
    );
    while (8 + json.len()) % 8 != 2 {
        json.push(' ');
    }
    let values: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let mut file = (json.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(json.as_bytes());
    values
        .iter()
        .for_each(|v| file.extend_from_slice(&v.to_le_bytes()));
    std::fs::write(dir.path().join("model.safetensors"), &file).unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let rows = Array2::from_shape_vec((4, 2), values[..8].to_vec()).unwrap();
    let columns = Array2::from_shape_vec((2, 4), values[8..].to_vec()).unwrap();
    for rank in 0..2 {
        let options = ReadOptions::new().tensor_parallel(rank, 2);
        // SAFETY: the test's own file, unchanged while the value lives.
        let got: Columns = unsafe { checkpoint.read_mapped_with(&options) }.unwrap();
        assert!(got.rows.tensor().is_copied() && got.columns.tensor().is_copied());
        assert_eq!(got.rows.view(), chunk(&rows, 0, rank, 2));
        assert_eq!(got.columns.view(), chunk(&columns, 1, rank, 2));
        assert!(got.columns.view().is_standard_layout());
    }
}
