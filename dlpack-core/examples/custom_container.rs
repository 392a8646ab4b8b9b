//! Export your own container types: `ManagedTensor::from_buffer` (safe, for anything that
//! owns a slice of elements) and `ManagedTensor::from_owner` (unsafe, for any memory an
//! owner keeps alive), then get the container back without a copy with `into_owner`.
//!
//! Run with `cargo run -p custom-container`.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ffi::c_void;
use std::ptr::NonNull;

use dlpack_core::ndarray::Ix3;
use dlpack_core::{
    DataType, Device, Error, FromDLPack, ManagedTensor, Result, TensorBatch, ToDLPack,
};

/// An interleaved RGB image, rows of `width * 3` bytes.
#[derive(Debug, PartialEq)]
struct Image {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

impl ToDLPack for Image {
    type Output = ManagedTensor;

    /// Zero-copy: the pixel buffer moves into the tensor, shaped `(height, width, 3)`.
    fn to_dlpack(self) -> Result<ManagedTensor> {
        let (h, w) = (self.height, self.width);
        // `from_buffer` checks that every element lies inside the buffer.
        ManagedTensor::from_buffer(self.pixels, 0, &[h, w, 3], &[(w * 3) as isize, 3, 1])
    }

    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        batch.insert(prefix, self.to_dlpack()?)
    }
}

impl FromDLPack for Image {
    type Input = ManagedTensor;

    /// Our own export comes back without a copy; any other `(h, w, 3)` uint8 tensor is
    /// copied.
    fn from_dlpack(tensor: ManagedTensor) -> Result<Self> {
        let (height, width, channels) = tensor.as_array::<u8, Ix3>()?.dim();
        if channels != 3 {
            // An RGB image has 3 channels.
            return Err(Error::ShapeMismatch {
                expected: vec![height, width, 3],
                found: vec![height, width, channels],
            });
        }
        // Our own export: the very `Vec` we exported, if it is still laid out as we left
        // it (another `Vec<u8>` export may have another layout: then copy from it).
        let first = tensor.data_ptr() as usize;
        let strides: Vec<isize> = tensor
            .strides()
            .unwrap_or(&[])
            .iter()
            .map(|&s| s as isize)
            .collect();
        let standard = tensor.as_array::<u8, Ix3>()?.is_standard_layout();
        let tensor = match tensor.into_owner::<Vec<u8>>() {
            Ok(pixels)
                if standard
                    && pixels.as_ptr() as usize == first
                    && pixels.len() == height * width * 3 =>
            {
                return Ok(Self {
                    width,
                    height,
                    pixels,
                });
            }
            Ok(pixels) => {
                let offset = first - pixels.as_ptr() as usize;
                ManagedTensor::from_buffer(pixels, offset, &[height, width, 3], &strides)?
            }
            Err(tensor) => tensor,
        };
        let pixels = tensor
            .as_array::<u8, Ix3>()?
            .as_standard_layout()
            .iter()
            .copied()
            .collect();
        Ok(Self {
            width,
            height,
            pixels,
        })
    }

    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        let tensor = batch.remove(prefix).ok_or_else(|| Error::MissingTensor {
            name: prefix.to_owned(),
        })?;
        Self::from_dlpack(tensor)
    }
}

/// A 64-byte aligned buffer of `f32` from the global allocator, as SIMD code or a C
/// library might hand out.
struct AlignedF32 {
    ptr: NonNull<f32>,
    len: usize,
}

// SAFETY: the buffer is owned uniquely by this value; nothing in it is thread-bound.
unsafe impl Send for AlignedF32 {}

impl AlignedF32 {
    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len * size_of::<f32>(), 64).expect("small buffer")
    }

    fn zeroed(len: usize) -> Self {
        assert!(len > 0);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc_zeroed(Self::layout(len)) }.cast::<f32>();
        let ptr = NonNull::new(raw).expect("allocation failed");
        Self { ptr, len }
    }
}

impl Drop for AlignedF32 {
    fn drop(&mut self) {
        println!(
            "AlignedF32 of {} floats freed by the tensor's deleter",
            self.len
        );
        // SAFETY: allocated in `zeroed` with this layout, freed once.
        unsafe { dealloc(self.ptr.as_ptr().cast(), Self::layout(self.len)) };
    }
}

fn main() -> Result<()> {
    // 1. A safe container, out and back without a copy.
    let image = Image {
        width: 4,
        height: 2,
        pixels: (0..24).collect(),
    };
    let buffer = image.pixels.as_ptr();
    let t = image.to_dlpack()?;
    println!("image tensor: shape {:?}, {}", t.shape(), t.dtype());
    assert_eq!(t.as_array::<u8, Ix3>()?[[1, 3, 2]], 23);
    let back = Image::from_dlpack(t)?;
    assert_eq!(back.pixels.as_ptr(), buffer);
    println!("image back without a copy: {}x{}", back.width, back.height);

    // 2. Memory the crate knows nothing about, through the unsafe constructor.
    let aligned = AlignedF32::zeroed(6);
    // SAFETY:
    // - the data pointer is the owner's 64-byte aligned allocation of 6 zeroed f32,
    //   which lives until the owner is dropped by the tensor's deleter;
    // - a (2, 3) C-contiguous layout addresses exactly those 6 elements;
    // - nobody else reads or writes the buffer while the tensor lives.
    let mut t = unsafe {
        ManagedTensor::from_owner(
            aligned,
            |a| a.ptr.as_ptr().cast::<c_void>(),
            &[2, 3],
            None,
            DataType::F32,
            Device::CPU,
            0,
        )
    }?;
    t.as_array_mut::<f32, dlpack_core::ndarray::Ix2>()?
        .fill(1.5);
    println!(
        "aligned tensor sum: {}",
        t.as_array::<f32, dlpack_core::ndarray::Ix2>()?.sum()
    );
    drop(t);
    Ok(())
}
