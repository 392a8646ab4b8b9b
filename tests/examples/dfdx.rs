//! ndarray <-> dfdx, and what it costs.
//!
//! dfdx 0.13 keeps a CPU tensor's storage private (`pub(crate)`), so it can neither lend
//! its memory to DLPack nor adopt foreign memory. What it can adopt is a `Vec`:
//! `tensor_from_vec` moves the vector in. A tensor exported by this crate (an `Array`,
//! or any `Vec` handed over with `ManagedTensor::from_buffer`) comes back from
//! `Array::from_dlpack` as the same vector, so the way into dfdx moves the buffer without
//! a copy. Every other way, and the way out of dfdx, copies once.
//!
//! The example counts the bytes allocated on each step (a counting global allocator),
//! since dfdx has no public data pointer to compare.
//!
//! Run with `cargo run --example dfdx`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use dfdx::prelude::{Cpu, Tensor, TensorFromVec};
use dlpack_core::{FromDLPack, ManagedTensor, ToDLPack};
use ndarray::{Array2, Ix2};

/// The system allocator, counting the bytes it hands out.
struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments, unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is `System::alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes
        // through `alloc` above).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` and returns its result with the bytes it allocated.
fn allocated<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = ALLOCATED.load(Ordering::Relaxed);
    let result = f();
    (result, ALLOCATED.load(Ordering::Relaxed) - before)
}

const ROWS: usize = 512;
const COLS: usize = 1024;
const BYTES: usize = ROWS * COLS * 4;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dev = Cpu::default();

    // ndarray -> DLPack -> ndarray -> Vec -> dfdx: the buffer moves all the way.
    let a = Array2::<f32>::from_shape_fn((ROWS, COLS), |(i, j)| (i + j) as f32);
    let ptr = a.as_ptr();
    let tensor: ManagedTensor = a.to_dlpack()?;
    let (x, bytes_in) = allocated(|| -> Result<_, Box<dyn std::error::Error>> {
        let back = Array2::<f32>::from_dlpack(tensor)?;
        let (vec, offset) = back.into_raw_vec_and_offset();
        assert_eq!((vec.as_ptr(), offset), (ptr, Some(0)), "the same buffer");
        Ok(dev.tensor_from_vec(vec, (ROWS, COLS)))
    });
    let x: Tensor<(usize, usize), f32, Cpu> = x?;
    assert!(bytes_in < BYTES / 100, "no copy of the data on the way in");
    println!("ndarray -> dfdx: {bytes_in} bytes allocated for {BYTES} bytes of data (no copy)");

    // A custom container handed over with `from_buffer` moves the same way.
    let pixels: Vec<f32> = vec![0.5; ROWS * COLS];
    let ptr = pixels.as_ptr();
    let tensor = ManagedTensor::from_buffer(pixels, 0, &[ROWS, COLS], &[COLS as isize, 1])?;
    let (vec, bytes) =
        allocated(|| Array2::<f32>::from_dlpack(tensor).map(|a| a.into_raw_vec_and_offset().0));
    let vec = vec?;
    assert_eq!(vec.as_ptr(), ptr);
    assert!(bytes < BYTES / 100);
    let _y: Tensor<(usize, usize), f32, Cpu> = dev.tensor_from_vec(vec, (ROWS, COLS));
    println!("from_buffer(Vec) -> dfdx: {bytes} bytes allocated (no copy)");

    // dfdx -> DLPack: one copy out of dfdx's private storage, then the vector moves.
    let (tensor, bytes_out) = allocated(|| {
        let vec = x.as_vec();
        ManagedTensor::from_buffer(vec, 0, &[ROWS, COLS], &[COLS as isize, 1])
    });
    let tensor = tensor?;
    assert!(bytes_out >= BYTES, "dfdx's storage is copied once");
    assert!(bytes_out < 2 * BYTES, "and only once");
    let view = tensor.as_array::<f32, Ix2>()?;
    assert_eq!(view[[3, 4]], 7.0);
    println!(
        "dfdx -> DLPack: {bytes_out} bytes allocated (one copy, dfdx keeps its storage private)"
    );
    Ok(())
}
