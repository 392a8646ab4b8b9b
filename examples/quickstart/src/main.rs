//! Export an ndarray as a DLPack tensor, look at it, view it, and take it back:
//! nothing is copied on the way.
//!
//! Run with `cargo run -p quickstart` (about 20 crates to build: a project of yours).

use dlpack_core::ffi::{DLManagedTensorVersioned, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
use dlpack_core::ndarray::{Array2, Ix2, s};
use dlpack_core::{FromDLPack, ManagedTensor, ToDLPack};

fn main() -> dlpack_core::Result<()> {
    println!(
        "DLPack {DLPACK_MAJOR_VERSION}.{DLPACK_MINOR_VERSION}: DLManagedTensorVersioned is {} bytes",
        size_of::<DLManagedTensorVersioned>()
    );

    // Export: the array's buffer moves into the tensor.
    let a = Array2::<f32>::from_shape_fn((3, 4), |(i, j)| (10 * i + j) as f32);
    let buffer = a.as_ptr();
    let t: ManagedTensor = a.to_dlpack()?;
    println!(
        "exported: shape {:?}, strides {:?}, {} on {}, read-only: {}",
        t.shape(),
        t.strides(),
        t.dtype(),
        t.device(),
        t.is_read_only()
    );

    // A checked, borrowed view: dtype, rank, device and layout are verified.
    let view = t.as_array::<f32, Ix2>()?;
    assert_eq!(view.as_ptr(), buffer);
    println!("view[[2, 3]] = {}", view[[2, 3]]);
    assert!(
        t.as_array::<i64, Ix2>().is_err(),
        "a wrong dtype is an error, not UB"
    );

    // Back to an Array: our own export is reclaimed without a copy.
    let back = Array2::<f32>::from_dlpack(t)?;
    assert_eq!(back.as_ptr(), buffer);

    // Any layout travels as it is, negative strides included: NumPy takes it; PyTorch
    // refuses negative strides, JAX any layout but a compact one
    // (`as_standard_layout().into_owned()` first).
    let reversed = back.slice_move(s![..;-1, ..]);
    let t = reversed.to_dlpack()?;
    println!("reversed rows: strides {:?}", t.strides());
    println!("first row is now {}", t.as_array::<f32, Ix2>()?.row(0));

    // A raw pointer for a C consumer, and back.
    let raw = t.into_raw();
    // SAFETY: `raw` came from `into_raw` just above; ownership comes back once.
    let t = unsafe { ManagedTensor::from_raw(raw) }?;
    println!("round trip through a raw pointer: shape {:?}", t.shape());
    Ok(())
}
