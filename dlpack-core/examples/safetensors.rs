//! Weights on disk: a derived model saved as a safetensors file, mapped back without
//! reading it (pages load when touched), changed in place (copy-on-write: the file is
//! untouched), and read into owned arrays (each tensor straight into the buffer its
//! field keeps).
//!
//! Run with `cargo run -p safetensors-file`.

use dlpack_core::ndarray::{Array1, Array2};
use dlpack_core::{FromDLPack, Result, TensorBatch, ToDLPack};

#[derive(ToDLPack, FromDLPack)]
struct Linear {
    weight: Array2<f32>,
    bias: Array1<f32>,
}

#[derive(ToDLPack, FromDLPack)]
struct Model {
    fc1: Linear,
    fc2: Linear,
}

fn layer(inputs: usize, outputs: usize) -> Linear {
    Linear {
        weight: Array2::from_shape_fn((outputs, inputs), |(i, j)| (i + j) as f32 / 10.0),
        bias: Array1::from_elem(outputs, 0.5),
    }
}

fn main() -> Result<()> {
    let folder = std::env::temp_dir().join(format!("dlpack-example-{}", std::process::id()));
    std::fs::create_dir_all(&folder)?; // `?`: `Error` takes `std::io::Error`
    let path = folder.join("model.safetensors");

    // Save: every field a named tensor, as in a PyTorch `state_dict`.
    let model = Model {
        fc1: layer(784, 256),
        fc2: layer(256, 10),
    };
    let mut batch = model.to_dlpack()?;
    // `{"format": "pt"}` is what Hugging Face's `transformers` writes in every file (its
    // releases before 5.0 refuse a file with metadata but no `format`); others ignore it.
    batch.metadata_mut().insert("format".into(), "pt".into());
    batch.write_safetensors(&path)?;
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "wrote {} ({size} bytes): {:?}",
        path.display(),
        batch.names().collect::<Vec<_>>()
    );

    // Map: O(header), tensors are views into one private mapping.
    // SAFETY: this program made the file in a folder of its own, and nothing else
    // modifies or truncates it while the model lives.
    let mapped = unsafe { TensorBatch::map_safetensors(&path) }?;
    println!("mapped, metadata {:?}", mapped.metadata());
    let mut model = Model::from_dlpack(mapped)?;
    model.fc2.bias[0] = 1.0; // a private page: the file does not change
    println!("fc2.bias[0] = {} in memory", model.fc2.bias[0]);

    // Read: owned arrays, each tensor read straight into the buffer its field keeps.
    let batch = TensorBatch::read_safetensors(&path)?;
    let weight = batch.get("fc1.weight").map(|t| t.data_ptr());
    let read = Model::from_dlpack(batch)?;
    println!(
        "read back: fc2.bias[0] = {} (the file kept the saved value), fc1.weight took the \
         read buffer without a copy: {}",
        read.fc2.bias[0],
        weight == Some(read.fc1.weight.as_ptr().cast_mut().cast())
    );
    let _ = std::fs::remove_dir_all(&folder);
    Ok(())
}
