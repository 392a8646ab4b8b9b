//! Reading: owned loads that keep their buffers, `read_where`, float conversion on
//! load, parallel reads, and maps.

use std::collections::HashMap;

use dlpack_core::safetensors::{Checkpoint, ReadOptions};
use dlpack_core::{DataType, Error, FromDLPack, ManagedTensor, TensorBatch, ToDLPack};
use half::{bf16, f16};
use ndarray::{Array1, Ix1};

use super::{Model, folder, model, save, to_bf16};

#[test]
fn owned_loads_keep_the_buffers_they_read_into() {
    let dir = folder();
    save(model(2, 16), dir.path(), 2000);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let batch = checkpoint.read_where(|_| true).unwrap();
    let pointers: HashMap<String, usize> = batch
        .iter()
        .map(|(name, t)| (name.to_owned(), t.data_ptr() as usize))
        .collect();
    for (_, tensor) in batch.iter() {
        assert!(tensor.is_exclusive() && !tensor.is_read_only());
    }
    let loaded = Model::<f32>::from_dlpack(batch).unwrap();
    assert_eq!(
        pointers["layers.1.weight"],
        loaded.layers[1].weight.as_ptr() as usize
    );
    assert_eq!(pointers["embed"], loaded.embed.as_ptr() as usize);
}

#[test]
fn read_where_reads_what_the_filter_accepts_in_index_order() {
    let dir = folder();
    save(model(3, 4), dir.path(), 200);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let batch = checkpoint
        .read_where(|name| name.ends_with(".bias"))
        .unwrap();
    let names: Vec<&str> = batch.names().collect();
    assert_eq!(
        names,
        [
            "head.bias",
            "layers.0.bias",
            "layers.1.bias",
            "layers.2.bias"
        ]
    );
    assert_eq!(batch.metadata()["format"], "pt");
    let bias = batch
        .get("layers.2.bias")
        .unwrap()
        .as_array::<f32, Ix1>()
        .unwrap();
    assert_eq!(bias, model(3, 4).layers[2].bias);
}

#[test]
fn floats_convert_on_load_only_when_asked() {
    let dir = folder();
    let original = model(2, 6);
    let stored = to_bf16(&original);
    save(stored.clone(), dir.path(), 300);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    // As stored.
    assert_eq!(checkpoint.read::<Model<bf16>>().unwrap(), stored);
    // bfloat16 to float32: exact, bit for bit.
    let options = ReadOptions::new().convert_floats(DataType::F32);
    let wide: Model<f32> = checkpoint.read_with(&options).unwrap();
    assert_eq!(wide.embed, stored.embed.mapv(bf16::to_f32));
    assert_eq!(
        wide.layers[1].weight,
        stored.layers[1].weight.mapv(bf16::to_f32)
    );
    // To float64 and float16 too, and back from float32 to bfloat16.
    let to = |dtype| ReadOptions::new().convert_floats(dtype);
    let f64s: Model<f64> = checkpoint.read_with(&to(DataType::F64)).unwrap();
    assert_eq!(
        f64s.layers[0].bias,
        stored.layers[0].bias.mapv(bf16::to_f64)
    );
    let halves: Model<f16> = checkpoint.read_with(&to(DataType::F16)).unwrap();
    assert_eq!(
        halves.head.as_ref().unwrap().weight,
        stored
            .head
            .as_ref()
            .unwrap()
            .weight
            .mapv(|v| f16::from_f32(v.to_f32()))
    );
    let dir32 = folder();
    save(original.clone(), dir32.path(), 300);
    let narrow: Model<bf16> = Checkpoint::open(dir32.path())
        .unwrap()
        .read_with(&ReadOptions::new().convert_floats(DataType::BF16))
        .unwrap();
    assert_eq!(narrow, stored);
    // Integers are read as they are; a conversion to a non-float is an error.
    let err = checkpoint
        .read_with::<Model<f32>>(&ReadOptions::new().convert_floats(DataType::I32))
        .unwrap_err();
    assert_eq!(
        err,
        Error::UnsupportedDtype {
            dtype: DataType::I32
        }
    );
}

#[test]
fn integers_and_bools_are_not_converted() {
    let dir = folder();
    let batch = TensorBatch::try_from(vec![
        (
            "ids",
            ManagedTensor::from_buffer(vec![1i64, 2, 3], 0, &[3], &[1]).unwrap(),
        ),
        (
            "mask",
            ManagedTensor::from_buffer(vec![true, false], 0, &[2], &[1]).unwrap(),
        ),
        (
            "x",
            ManagedTensor::from_buffer(vec![1.5f64, -2.0], 0, &[2], &[1]).unwrap(),
        ),
    ])
    .unwrap();
    batch.write_checkpoint(dir.path(), 16).unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    let options = ReadOptions::new().convert_floats(DataType::F32);
    let read = checkpoint.read_where_with(|_| true, &options).unwrap();
    assert_eq!(read.get("ids").unwrap().dtype(), DataType::I64);
    assert_eq!(
        read.get("mask").unwrap().as_array::<bool, Ix1>().unwrap(),
        ndarray::arr1(&[true, false])
    );
    assert_eq!(
        read.get("x").unwrap().as_array::<f32, Ix1>().unwrap(),
        ndarray::arr1(&[1.5f32, -2.0])
    );
}

#[test]
#[cfg_attr(miri, ignore = "tens of megabytes: too slow to interpret")]
fn large_tensors_are_read_by_several_threads_alike() {
    let dir = folder();
    // 3 M floats (12 MB, more than one chunk) and many small tensors.
    let big = Array1::from_shape_fn(3 << 20, |i| (i % 1000) as f32 - 500.5);
    let mut batch = TensorBatch::new();
    batch
        .insert("big", big.clone().to_dlpack().unwrap())
        .unwrap();
    for i in 0..50 {
        batch
            .insert(
                format!("small.{i}"),
                Array1::from_elem(7, i as f32).to_dlpack().unwrap(),
            )
            .unwrap();
    }
    batch.write_checkpoint(dir.path(), 1 << 20).unwrap();
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    for threads in [1, 2, 3, 8] {
        let options = ReadOptions::new().threads(threads);
        let read = checkpoint.read_where_with(|_| true, &options).unwrap();
        assert_eq!(
            read.get("big").unwrap().as_array::<f32, Ix1>().unwrap(),
            big
        );
        assert_eq!(
            read.get("small.33")
                .unwrap()
                .as_array::<f32, Ix1>()
                .unwrap()[6],
            33.0
        );
        let converted = checkpoint
            .read_where_with(|n| n == "big", &options.convert_floats(DataType::BF16))
            .unwrap();
        let halves = converted
            .get("big")
            .unwrap()
            .as_array::<bf16, Ix1>()
            .unwrap();
        assert_eq!(halves, big.mapv(bf16::from_f32));
    }
}

#[test]
#[cfg_attr(miri, ignore = "maps a file")]
fn a_mapped_checkpoint_takes_each_tensor_from_its_shard() {
    let dir = folder();
    save(model(3, 8), dir.path(), 500);
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    // SAFETY: nothing modifies the files while the batch lives.
    let batch = unsafe { checkpoint.map() }.unwrap();
    assert_eq!(
        batch.names().collect::<Vec<_>>(),
        checkpoint.names().collect::<Vec<_>>()
    );
    assert_eq!(batch.metadata()["format"], "pt");
    let mut loaded = Model::<f32>::from_dlpack(batch).unwrap();
    assert_eq!(loaded, model(3, 8));
    // Writable, private: the files keep their values.
    loaded.layers[0].weight[[0, 0]] = 1e9;
    let again: Model<f32> = Checkpoint::open(dir.path()).unwrap().read().unwrap();
    assert_eq!(again, model(3, 8));
}

#[test]
#[cfg_attr(miri, ignore = "maps files")]
fn map_checkpoint_gives_what_open_and_map_give() {
    let dir = folder();
    save(model(3, 8), dir.path(), 500);
    let index = dir.path().join("model.safetensors.index.json");
    let single = folder();
    save(model(1, 4), single.path(), 1 << 20);
    let file = single.path().join("model.safetensors");
    for path in [dir.path(), index.as_path(), single.path(), file.as_path()] {
        // SAFETY: nothing modifies the files while the batches live.
        let mapped = unsafe { TensorBatch::map_checkpoint(path) }.unwrap();
        // SAFETY: as above.
        let opened = unsafe { Checkpoint::open(path).unwrap().map() }.unwrap();
        assert_eq!(
            mapped.names().collect::<Vec<_>>(),
            opened.names().collect::<Vec<_>>(),
            "{path:?}"
        );
        assert_eq!(mapped.metadata(), opened.metadata(), "{path:?}");
        assert_eq!(mapped.metadata()["format"], "pt");
        for ((name, a), (_, b)) in mapped.iter().zip(opened.iter()) {
            assert_eq!(a.dtype(), b.dtype(), "{name}");
            assert_eq!(a.shape(), b.shape(), "{name}");
            // Each a view of its own mapping, exclusive and writable.
            assert_ne!(a.data_ptr(), b.data_ptr(), "{name}");
            assert!(a.is_exclusive() && !a.is_read_only(), "{name}");
            assert_eq!(
                a.as_array::<f32, ndarray::IxDyn>().unwrap(),
                b.as_array::<f32, ndarray::IxDyn>().unwrap(),
                "{name}"
            );
        }
    }
    // SAFETY: as above.
    let batch = unsafe { TensorBatch::map_checkpoint(dir.path()) }.unwrap();
    let mut loaded = Model::<f32>::from_dlpack(batch).unwrap();
    assert_eq!(loaded, model(3, 8));
    // Private: the files keep their values.
    loaded.layers[0].weight[[0, 0]] = 1e9;
    let again: Model<f32> = Checkpoint::open(dir.path()).unwrap().read().unwrap();
    assert_eq!(again, model(3, 8));
}
