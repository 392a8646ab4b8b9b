//! A stand-in foreign producer: tensors allocated the way a C library would, with a
//! deleter that counts its calls; and a buffer that counts its drop.
#![allow(dead_code, unreachable_pub)]

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_core::ffi::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
};

/// Counts deleter calls.
#[derive(Clone, Default, Debug)]
pub struct Counter(pub Arc<AtomicUsize>);

impl Counter {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A buffer of `f32` that bumps `counter` when dropped: the owner of a tensor made by
/// `ManagedTensor::from_buffer` (or a producer's context), whose drop is the counted event.
pub struct Counted {
    pub data: Vec<f32>,
    pub counter: Counter,
}

impl AsMut<[f32]> for Counted {
    fn as_mut(&mut self) -> &mut [f32] {
        &mut self.data
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.counter.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Everything a foreign producer could put in a tensor, honest or not.
#[derive(Clone, Debug)]
pub struct Spec {
    pub version: DLPackVersion,
    pub ndim: Option<i32>,
    pub shape: Vec<i64>,
    pub shape_null: bool,
    pub shape_misaligned: bool,
    pub strides: Option<Vec<i64>>,
    pub dtype: DLDataType,
    pub device: DLDevice,
    pub byte_offset: u64,
    pub flags: u64,
    /// The data buffer (8-byte aligned storage).
    pub buffer: Vec<u64>,
    /// Where `data` points: `None` = NULL, `Some(n)` = `n` bytes from the buffer start
    /// (wrapping; may lie outside it, as `byte_offset` brings it back).
    pub data_at: Option<isize>,
    pub null_deleter: bool,
}

impl Spec {
    /// A well-formed C-contiguous tensor over `buffer`.
    pub fn new(shape: &[i64], dtype: DLDataType, buffer: Vec<u64>) -> Self {
        Self {
            version: DLPackVersion { major: 1, minor: 3 },
            ndim: None,
            shape: shape.to_vec(),
            shape_null: false,
            shape_misaligned: false,
            strides: None,
            dtype,
            device: DLDevice {
                device_type: dlpack_core::ffi::DLDeviceType::kDLCPU,
                device_id: 0,
            },
            byte_offset: 0,
            flags: 0,
            buffer,
            data_at: Some(0),
            null_deleter: false,
        }
    }
}

/// The producer's context, reached through `manager_ctx`.
struct Ctx {
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    buffer: Vec<u64>,
    counter: Counter,
}

impl Ctx {
    fn dl_tensor(&mut self, spec: &Spec) -> DLTensor {
        let base = self.buffer.as_mut_ptr().cast::<u8>();
        let data = match spec.data_at {
            None => std::ptr::null_mut(),
            Some(at) => base.wrapping_offset(at).cast::<c_void>(),
        };
        let ndim = spec.ndim.unwrap_or(spec.shape.len() as i32);
        let shape = if spec.shape_null {
            std::ptr::null_mut()
        } else if spec.shape_misaligned {
            self.shape.as_mut_ptr().cast::<u8>().wrapping_add(1).cast()
        } else {
            self.shape.as_mut_ptr()
        };
        let strides = match &mut self.strides {
            Some(s) => s.as_mut_ptr(),
            None => std::ptr::null_mut(),
        };
        DLTensor {
            data,
            device: spec.device,
            ndim,
            dtype: spec.dtype,
            shape,
            strides,
            byte_offset: spec.byte_offset,
        }
    }
}

fn context(spec: &Spec, counter: &Counter) -> Box<Ctx> {
    let mut shape = spec.shape.clone();
    // Room for a misaligned view of `ndim` values.
    shape.push(0);
    let mut strides = spec.strides.clone();
    if let Some(s) = &mut strides {
        s.push(0);
    }
    Box::new(Ctx {
        shape,
        strides,
        buffer: spec.buffer.clone(),
        counter: counter.clone(),
    })
}

unsafe extern "C" fn delete_versioned(managed: *mut DLManagedTensorVersioned) {
    // SAFETY: `managed` came from `Box::into_raw` in `versioned` and is deleted once.
    let managed = unsafe { Box::from_raw(managed) };
    // SAFETY: `manager_ctx` came from `Box::into_raw` in `versioned`.
    let ctx = unsafe { Box::from_raw(managed.manager_ctx.cast::<Ctx>()) };
    ctx.counter.0.fetch_add(1, Ordering::SeqCst);
}

unsafe extern "C" fn delete_legacy(managed: *mut DLManagedTensor) {
    // SAFETY: `managed` came from `Box::into_raw` in `legacy` and is deleted once.
    let managed = unsafe { Box::from_raw(managed) };
    // SAFETY: `manager_ctx` came from `Box::into_raw` in `legacy`.
    let ctx = unsafe { Box::from_raw(managed.manager_ctx.cast::<Ctx>()) };
    ctx.counter.0.fetch_add(1, Ordering::SeqCst);
}

/// A heap-allocated versioned tensor whose deleter bumps `counter`.
pub fn versioned(spec: &Spec, counter: &Counter) -> *mut DLManagedTensorVersioned {
    let mut ctx = context(spec, counter);
    let dl_tensor = ctx.dl_tensor(spec);
    Box::into_raw(Box::new(DLManagedTensorVersioned {
        version: spec.version,
        manager_ctx: Box::into_raw(ctx).cast(),
        deleter: if spec.null_deleter {
            None
        } else {
            Some(delete_versioned)
        },
        flags: spec.flags,
        dl_tensor,
    }))
}

/// A heap-allocated legacy tensor whose deleter bumps `counter`.
pub fn legacy(spec: &Spec, counter: &Counter) -> *mut DLManagedTensor {
    let mut ctx = context(spec, counter);
    let dl_tensor = ctx.dl_tensor(spec);
    Box::into_raw(Box::new(DLManagedTensor {
        dl_tensor,
        manager_ctx: Box::into_raw(ctx).cast(),
        deleter: if spec.null_deleter {
            None
        } else {
            Some(delete_legacy)
        },
    }))
}

/// Frees a tensor made with `null_deleter` (nobody else can).
///
/// # Safety
///
/// `ptr` came from [`versioned`] and is not used afterwards.
pub unsafe fn free_versioned_without_deleter(ptr: *mut DLManagedTensorVersioned) {
    // SAFETY: per the contract, `ptr` is a live `Box` from `versioned`.
    let managed = unsafe { Box::from_raw(ptr) };
    // SAFETY: `manager_ctx` came from `Box::into_raw` in `versioned`.
    drop(unsafe { Box::from_raw(managed.manager_ctx.cast::<Ctx>()) });
}

/// `n` bytes of buffer, as aligned `u64` storage, filled from `bytes`.
pub fn buffer_from_bytes(bytes: &[u8]) -> Vec<u64> {
    let mut buf = vec![0u64; bytes.len().div_ceil(8) + 1];
    for (i, &b) in bytes.iter().enumerate() {
        let word = &mut buf[i / 8];
        let mut le = word.to_ne_bytes();
        le[i % 8] = b;
        *word = u64::from_ne_bytes(le);
    }
    buf
}
