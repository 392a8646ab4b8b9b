//! ndarray <-> candle through the `dlpark` bridge.
//!
//! An ndarray array becomes a `candle_core::Tensor`, candle computes with it, and the
//! result comes back as an ndarray view of candle's own memory. dlpark's candle import
//! copies once (candle cannot hold borrowed memory); its candle export and every other
//! step move a pointer.
//!
//! Run with `cargo run --example candle`.

use candle_core::Tensor;
use dlpack_core::{ManagedTensor, ToDLPack};
use dlpark::allocation::dynamic;
use dlpark::ffi::DLManagedTensorVersioned;
use dlpark::{DlpackFlags, TryFromDlpack};
use ndarray::{Array2, Ix2};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // ndarray -> dlpack-core -> dlpark: the buffer moves, nothing is copied.
    let a = Array2::<f32>::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f32);
    let dlpack = a.to_dlpack()?.into_dlpark()?;

    // dlpark -> candle: one copy into candle's storage.
    // SAFETY: the tensor is our own export of `a`: live, CPU, f32, and nothing else
    // accesses it.
    let x = unsafe { Tensor::try_from_dlpack(&dlpack, ()) }?;
    drop(dlpack); // frees `a`'s buffer: candle has its own copy

    let y = (x.t()? * 10.0)?; // candle computes; `t()` is a strided view

    // candle -> dlpark -> dlpack-core: zero-copy, the boxed tensor keeps the storage
    // alive until the deleter runs. We keep `y` too, so the export is read-only.
    let mut export: dynamic::Initialized<DLManagedTensorVersioned> =
        Box::new(y.clone()).try_into()?;
    export.set_flags(DlpackFlags::READ_ONLY)?;
    // SAFETY: dlpark's candle producer filled a complete descriptor of `y`'s storage,
    // which the boxed clone keeps alive; `READ_ONLY` states that it is shared.
    let dlpack = unsafe { export.finish() };
    // SAFETY: a complete CPU descriptor of live memory, and nobody writes it while
    // the tensor lives: `y` is only read below, and `READ_ONLY` forbids writes
    // through the tensor.
    let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }?;

    let view = tensor.as_array::<f32, Ix2>()?; // checked, borrowed, zero-copy
    println!("candle: {:?}", y.to_vec2::<f32>()?);
    println!("ndarray view (strides {:?}):\n{view}", view.strides());
    assert_eq!(view, a_times_ten_transposed());
    Ok(())
}

fn a_times_ten_transposed() -> Array2<f32> {
    Array2::from_shape_fn((3, 2), |(i, j)| (j * 3 + i) as f32 * 10.0)
}
