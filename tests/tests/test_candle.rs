//! ndarray <-> dlpack-core <-> dlpark <-> candle: candle reached through the dlpark
//! bridge (whose own tests, with dlpark's ndarray interop, are dlpack-core's
//! `tests/test_dlpark.rs`; candle is a dependency of these tests alone).
//!
//! What is zero-copy and what copies (dlpark 0.10, `src/interop/candle`):
//! - candle -> dlpark (`TryFrom<Box<Tensor>>`) -> `ManagedTensor` -> ndarray view: no
//!   copy; the boxed candle tensor keeps its storage alive until the deleter runs.
//! - dlpark handle -> candle (`TryFromDlpack<&Managed<_>>` for `candle_core::Tensor`):
//!   always a copy, because candle has no tensor type over borrowed memory.
//!
//! Every tensor is counted: its owner, or a wrapper around it, bumps a counter when
//! dropped, which must happen exactly once and only at the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use candle_core::{CpuStorage, Device as CandleDevice, Storage, Tensor};
use dlpack_core::{Error, FromDLPack, ManagedTensor, ToDLPack};
use dlpark::allocation::dynamic;
use dlpark::ffi::{DLManagedTensor, DLManagedTensorVersioned};
use dlpark::{DlpackFlags, TryFromDlpack};
use ndarray::{Array2, ArrayD, ArrayView, Ix2, IxDyn, RemoveAxis};

/// Counts drops.
#[derive(Clone, Default)]
struct Drops(Arc<AtomicUsize>);

impl Drops {
    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A value that bumps its counter when dropped (after the value itself is dropped).
struct Counted<T> {
    value: T,
    drops: Drops,
}

impl<T> Drop for Counted<T> {
    fn drop(&mut self) {
        self.drops.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Wraps any tensor in one whose deleter drops it and then counts: proves that the
/// wrapped tensor (whatever its producer) is released exactly once, at the end.
fn counted(tensor: ManagedTensor, drops: &Drops) -> ManagedTensor {
    let shape = tensor.shape().to_vec();
    let strides = tensor.strides().expect("explicit strides").to_vec();
    let (dtype, device, flags) = (tensor.dtype(), tensor.device(), tensor.flags());
    let owner = Counted {
        value: tensor,
        drops: drops.clone(),
    };
    // SAFETY:
    // - the pointer, shape, strides, dtype and device are the wrapped tensor's own,
    //   whose producer keeps the memory valid until its deleter runs, which is when
    //   the owner is dropped;
    // - the flags are copied, so `READ_ONLY` is kept; the wrapped tensor is reachable
    //   only through the owner, so its exclusivity carries over.
    unsafe {
        ManagedTensor::from_owner(
            owner,
            |o| o.value.data_ptr(),
            &shape,
            Some(&strides),
            dtype,
            device,
            flags,
        )
    }
    .unwrap()
}

/// Our own export of `array`, wrapped by `counted`: released once, at the end.
fn counted_array(array: ArrayD<f32>, drops: &Drops) -> ManagedTensor {
    counted(array.to_dlpack().unwrap(), drops)
}

fn sample(rows: usize, cols: usize) -> ArrayD<f32> {
    ArrayD::from_shape_fn(IxDyn(&[rows, cols]), |ix| {
        (ix[0] * cols + ix[1]) as f32 + 0.5
    })
}

/// The rows of a 2-d array, as `candle_core::Tensor::to_vec2` gives them.
fn rows<D: RemoveAxis>(a: ArrayView<'_, f32, D>) -> Vec<Vec<f32>> {
    a.outer_iter()
        .map(|r| r.iter().copied().collect())
        .collect()
}

/// The address of element `[0, ...]` of a CPU f32 candle tensor.
fn candle_ptr(tensor: &Tensor) -> *const f32 {
    let (storage, layout) = tensor.storage_and_layout();
    match &*storage {
        Storage::Cpu(CpuStorage::F32(data)) => data[layout.start_offset()..].as_ptr(),
        _ => panic!("expected a CPU f32 tensor"),
    }
}

/// A zero-copy candle export, as dlpark makes it.
fn candle_export<M: dlpark::ManagedTensorBase>(
    tensor: &Tensor,
    flags: DlpackFlags,
) -> dlpark::Managed<M> {
    let mut initialized: dynamic::Initialized<M> = Box::new(tensor.clone()).try_into().unwrap();
    initialized.set_flags(flags).unwrap();
    // SAFETY: dlpark's candle producer fills a complete descriptor of the boxed
    // tensor, whose storage it keeps alive; the caller's `flags` say whether the
    // storage stays shared with other candle handles (`READ_ONLY`).
    unsafe { initialized.finish() }
}

#[test]
fn ndarray_becomes_a_candle_tensor() {
    let drops = Drops::default();
    let a = sample(2, 3);
    let expected = a.clone();
    let ptr = a.as_ptr();
    let dlpack = counted_array(a, &drops).into_dlpark().unwrap();
    // SAFETY: the tensor's data is a live, unshared f32 array on the CPU.
    let tensor = unsafe { Tensor::try_from_dlpack(&dlpack, ()) }.unwrap();
    // dlpark's candle import copies: candle cannot hold borrowed memory.
    assert_ne!(candle_ptr(&tensor), ptr);
    drop(dlpack);
    assert_eq!(drops.get(), 1);
    assert_eq!(tensor.dims(), &[2, 3]);
    let values: Vec<Vec<f32>> = tensor.to_vec2().unwrap();
    assert_eq!(values, rows(expected.view()));

    // A non-contiguous array: dlpark gathers it into candle's row-major storage.
    let drops = Drops::default();
    let t = sample(3, 2).reversed_axes();
    let expected = t.to_owned();
    let dlpack = counted_array(t, &drops).into_dlpark().unwrap();
    // SAFETY: as above.
    let tensor = unsafe { Tensor::try_from_dlpack(&dlpack, ()) }.unwrap();
    drop(dlpack);
    assert_eq!(drops.get(), 1);
    let values: Vec<Vec<f32>> = tensor.to_vec2().unwrap();
    assert_eq!(values, rows(expected.view()));
}

#[test]
fn a_candle_tensor_becomes_an_ndarray_view_without_copy() {
    let drops = Drops::default();
    let data: Vec<f32> = (0..6).map(|i| i as f32 * 1.5).collect();
    let tensor = Tensor::from_vec(data, (2, 3), &CandleDevice::Cpu).unwrap();
    let ptr = candle_ptr(&tensor);
    let expected: Vec<Vec<f32>> = tensor.to_vec2().unwrap();

    // `tensor` keeps sharing the storage, so the export is flagged `READ_ONLY` and
    // nothing writes through either handle while the view lives.
    let dlpack = candle_export::<DLManagedTensorVersioned>(&tensor, DlpackFlags::READ_ONLY);
    // SAFETY: dlpark's candle export is a complete descriptor of candle's live CPU
    // storage; nobody writes it (the candle tensor is only read, and `READ_ONLY`
    // forbids writes through ours).
    let imported = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
    let mut imported = counted(imported, &drops);
    let view = imported.as_array::<f32, Ix2>().unwrap();
    assert_eq!(view.as_ptr(), ptr, "candle's storage, not a copy");
    assert_eq!(rows(view), expected);
    assert_eq!(
        imported.as_array_mut::<f32, Ix2>().unwrap_err(),
        Error::ReadOnly
    );
    drop(imported);
    assert_eq!(drops.get(), 1);
    // The candle tensor is still intact after the export's deleter dropped its clone.
    assert_eq!(tensor.to_vec2::<f32>().unwrap(), expected);
}

#[test]
fn strided_and_offset_candle_tensors_keep_their_layout() {
    let base = Tensor::arange(0f32, 12., &CandleDevice::Cpu)
        .unwrap()
        .reshape((3, 4))
        .unwrap();

    // A transpose: strides (1, 4), same storage.
    let drops = Drops::default();
    let t = base.t().unwrap();
    let dlpack = candle_export::<DLManagedTensorVersioned>(&t, DlpackFlags::READ_ONLY);
    // SAFETY: as in the test above: live storage, only read.
    let imported = counted(
        unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap(),
        &drops,
    );
    assert_eq!(imported.strides(), Some(&[1, 4][..]));
    let view = imported.as_array::<f32, Ix2>().unwrap();
    assert_eq!(view.as_ptr(), candle_ptr(&base));
    assert_eq!(rows(view), t.to_vec2::<f32>().unwrap());
    drop(imported);
    assert_eq!(drops.get(), 1);

    // A narrowed view: a start offset into the same storage, as a legacy tensor.
    let drops = Drops::default();
    let n = base.narrow(0, 1, 2).unwrap();
    let dlpack = candle_export::<DLManagedTensor>(&n, DlpackFlags::empty());
    // SAFETY: as above; a legacy tensor is writable, and nothing writes it here.
    let imported = counted(
        unsafe { ManagedTensor::from_dlpark_legacy(dlpack) }.unwrap(),
        &drops,
    );
    let view = imported.as_array::<f32, Ix2>().unwrap();
    assert_eq!(view.as_ptr(), candle_ptr(&n));
    assert_eq!(view.as_ptr(), candle_ptr(&base).wrapping_add(4));
    assert_eq!(rows(view), n.to_vec2::<f32>().unwrap());
    drop(imported);
    assert_eq!(drops.get(), 1);
}

#[test]
fn ndarray_to_candle_and_back() {
    // ndarray -> candle (one copy, by dlpark's import) -> compute -> ndarray (no copy).
    let drops = Drops::default();
    let a = sample(2, 2);
    let expected = a.mapv(|x| 2.0 * x);
    let dlpack = counted_array(a, &drops).into_dlpark().unwrap();
    // SAFETY: the tensor's data is a live, unshared f32 array on the CPU.
    let x = unsafe { Tensor::try_from_dlpack(&dlpack, ()) }.unwrap();
    drop(dlpack);
    assert_eq!(drops.get(), 1);
    let y = (x * 2.0).unwrap();
    let ptr = candle_ptr(&y);

    let drops = Drops::default();
    let dlpack = candle_export::<DLManagedTensorVersioned>(&y, DlpackFlags::empty());
    drop(y); // the export's boxed clone is now the storage's only owner
    // SAFETY: live storage that only the export references, so it is writable and
    // unshared.
    let mut back = counted(
        unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap(),
        &drops,
    );
    assert_eq!(back.as_array::<f32, Ix2>().unwrap().as_ptr(), ptr);
    assert_eq!(back.as_array::<f32, Ix2>().unwrap().into_dyn(), expected);
    back.as_array_mut::<f32, Ix2>().unwrap()[[0, 0]] = 42.0;
    let owned = Array2::<f32>::from_dlpack(back).unwrap();
    assert_eq!(owned[[0, 0]], 42.0);
    assert_eq!(drops.get(), 1);
}
