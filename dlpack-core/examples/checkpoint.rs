//! A derived model saved as a sharded checkpoint (the layout Hugging Face's
//! `save_pretrained` writes), one layer of it loaded alone, and the same weights stored
//! in bfloat16 and loaded into the model's float32 fields, converted while they are
//! read.
//!
//! ```sh
//! cargo run -p checkpoint
//! # or, building the workspace's test dependencies too:
//! cargo run --example checkpoint --features safetensors
//! ```

use dlpack_core::ndarray::{Array1, Array2};
use dlpack_core::safetensors::{Checkpoint, ReadOptions};
use dlpack_core::{DataType, FromDLPack, ToDLPack};

#[derive(ToDLPack, FromDLPack, Clone, PartialEq, Debug)]
struct Linear {
    weight: Array2<f32>,
    bias: Array1<f32>,
}

#[derive(ToDLPack, FromDLPack, Clone, PartialEq, Debug)]
struct Model {
    layers: Vec<Linear>,
    norm: Array1<f32>,
}

fn main() -> dlpack_core::Result<()> {
    let n = 256;
    let layer = |seed: usize| Linear {
        weight: Array2::from_shape_fn((n, n), |(i, j)| {
            ((i * 31 + j * 17 + seed) % 97) as f32 / 97.0
        }),
        bias: Array1::from_shape_fn(n, |i| i as f32 - seed as f32),
    };
    let model = Model {
        layers: (0..4).map(layer).collect(),
        norm: Array1::ones(n),
    };
    let folder = std::env::temp_dir().join(format!("dlpack-checkpoint-{}", std::process::id()));
    let dir = folder.join("model");

    // Save: shards of at most 300 KB (a layer's weight is 256 KiB), and the index.
    let mut batch = model.clone().to_dlpack()?;
    // What `transformers` writes in every shard (see the safetensors-file example).
    batch.metadata_mut().insert("format".into(), "pt".into());
    batch.write_checkpoint(&dir, 300_000)?;
    let checkpoint = Checkpoint::open(&dir)?;
    println!(
        "saved {} tensors in {} shards: {}",
        checkpoint.len(),
        checkpoint.shards().len(),
        checkpoint
            .shards()
            .map(|p| p
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned())
            .collect::<Vec<_>>()
            .join(", ")
    );

    // The whole model, strictly: every tensor, none missing, none left over.
    let loaded: Model = checkpoint.read()?;
    assert_eq!(loaded, model);

    // One layer alone, from under its prefix (`layers.2.weight`, `layers.2.bias`):
    // only its two tensors are read.
    let third: Linear = checkpoint.load_at("layers.2")?;
    assert_eq!(third, model.layers[2]);
    println!(
        "loaded layer 2 alone ({} bytes read)",
        ["layers.2.weight", "layers.2.bias"]
            .iter()
            .filter_map(|name| checkpoint.tensor(name))
            .map(|t| t.byte_len())
            .sum::<usize>(),
    );

    // The same weights stored in bfloat16, as most published checkpoints are: written
    // here by converting while reading, then loaded into the float32 model.
    let bf16_dir = folder.join("model-bf16");
    let narrow = ReadOptions::new().convert_floats(DataType::BF16);
    let stored = checkpoint.read_where_with(|_| true, &narrow)?;
    stored.write_checkpoint(&bf16_dir, 300_000)?;
    let bf16_checkpoint = Checkpoint::open(&bf16_dir)?;
    let dtype = bf16_checkpoint.tensor("norm").map(|t| t.dtype());
    println!(
        "stored in {} shards, dtype {dtype:?}",
        bf16_checkpoint.shards().len()
    );
    // Without conversion, bfloat16 tensors for float32 fields are an error that says
    // how many, names a few, and gives the fix.
    let err = bf16_checkpoint.read::<Model>().unwrap_err();
    println!("without conversion: {err}");
    let wide = ReadOptions::new().convert_floats(DataType::F32);
    let converted: Model = bf16_checkpoint.read_with(&wide)?;
    let largest = converted.layers[1]
        .weight
        .iter()
        .zip(&model.layers[1].weight)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!("loaded converting bfloat16 to float32: largest difference {largest:.5}");
    assert!(largest <= 1.0 / 256.0);
    let _ = std::fs::remove_dir_all(&folder);
    Ok(())
}
