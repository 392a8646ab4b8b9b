//! ndarray <-> dlpack-core <-> dlpark <-> candle.
//!
//! What is zero-copy and what copies (dlpark 0.10, `src/interop/candle`):
//! - ndarray -> `ManagedTensor` -> dlpark handle -> ndarray view: no copy anywhere.
//! - dlpark's ndarray export -> `ManagedTensor` -> `as_array`: no copy;
//!   `Array::from_dlpack` copies it (it is not our own export).
//! - candle -> dlpark (`TryFrom<Box<Tensor>>`) -> `ManagedTensor` -> ndarray view: no
//!   copy; the boxed candle tensor keeps its storage alive until the deleter runs.
//! - dlpark handle -> candle (`TryFromDlpack<&Managed<_>>` for `candle_core::Tensor`):
//!   always a copy, because candle has no tensor type over borrowed memory.
//!
//! Every tensor is counted: its owner, or a wrapper around it, bumps a counter when
//! dropped, which must happen exactly once and only at the end.

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use candle_core::{CpuStorage, Device as CandleDevice, Storage, Tensor};
use dlpack_core::{DataType, Device, Error, FromDLPack, ManagedTensor, ToDLPack};
use dlpark::allocation::dynamic;
use dlpark::ffi::{DLDevice, DLManagedTensor, DLManagedTensorVersioned};
use dlpark::metadata::Dynamic;
use dlpark::{DlpackElement, DlpackFlags, TryFromDlpack};
use ndarray::{Array2, ArrayD, ArrayView, ArrayViewD, Ix2, IxDyn, RemoveAxis, ShapeBuilder};

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

/// Exports `array` through `ManagedTensor::from_owner`, with an owner that counts its
/// drop: the tensor's deleter dropping the owner is the counted event.
fn counted_array(array: ArrayD<f32>, drops: &Drops) -> ManagedTensor {
    let shape: Vec<i64> = array.shape().iter().map(|&d| d as i64).collect();
    let strides: Vec<i64> = array.strides().iter().map(|&s| s as i64).collect();
    let owner = Counted {
        value: array,
        drops: drops.clone(),
    };
    // SAFETY:
    // - `as_mut_ptr` is element `[0, ...]` of the owned array; shape and strides are
    //   its own, so every reachable element lies in its buffer, which stays put and
    //   alive, unmoved on the heap, for as long as the owner lives;
    // - the array is owned by the tensor alone, so the memory is writable and nobody
    //   else reads or writes it; `f32` on the CPU matches the memory.
    unsafe {
        ManagedTensor::from_owner(
            owner,
            |o| o.value.as_mut_ptr().cast::<c_void>(),
            &shape,
            Some(&strides),
            DataType::F32,
            Device::CPU,
            0,
        )
    }
    .unwrap()
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

/// A tensor made by dlpark's own allocator, with a context that counts its drop.
fn dlpark_counted<M: dlpark::ManagedTensorBase>(
    array: ArrayD<f32>,
    drops: &Drops,
) -> dlpark::Managed<M> {
    let data = array.as_ptr().cast_mut().cast::<c_void>();
    let metadata = Dynamic::new(array.shape().to_vec(), array.strides().to_vec());
    let context = Box::new(Counted {
        value: array,
        drops: drops.clone(),
    });
    let mut initialized: dynamic::Initialized<M> = metadata.initialize_as(context).unwrap();
    initialized
        .set_data(data)
        .set_dtype(f32::DTYPE)
        .set_device(DLDevice::CPU);
    // SAFETY: the descriptor is complete; the boxed context owns the array, whose heap
    // buffer does not move with the box and lives until the deleter drops the
    // context; flags are empty and the buffer is writable and not shared.
    unsafe { initialized.finish() }
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

// -------------------------------------------------------------------------------------
// ndarray <-> dlpark
// -------------------------------------------------------------------------------------

#[test]
fn ndarray_to_dlpark_view_without_copy() {
    let drops = Drops::default();
    let a = sample(3, 4);
    let expected = a.clone();
    let ptr = a.as_ptr();
    let tensor = counted_array(a, &drops);

    let dlpack: dlpark::versioned::Dlpack = tensor.into();
    {
        // SAFETY: the tensor's data is a live, unshared f32 array on the CPU.
        let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&dlpack, ()) }.unwrap();
        assert_eq!(view.as_ptr(), ptr);
        assert_eq!(view, expected);
    }
    assert_eq!(drops.get(), 0);

    // And back: our checked view of the same memory.
    // SAFETY: as above: the handle still holds our export.
    let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
    let view = tensor.as_array::<f32, Ix2>().unwrap();
    assert_eq!(view.as_ptr(), ptr);
    assert_eq!(view.into_dyn(), expected);
    assert_eq!(drops.get(), 0);
    drop(tensor);
    assert_eq!(drops.get(), 1);
}

#[test]
fn ndarray_to_dlpark_legacy_view_without_copy() {
    let drops = Drops::default();
    let a = sample(2, 5);
    let expected = a.clone();
    let ptr = a.as_ptr();
    let tensor = counted_array(a, &drops);

    let dlpack = dlpark::legacy::Dlpack::try_from(tensor).unwrap();
    // SAFETY: the tensor's data is a live, unshared f32 array on the CPU.
    let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&dlpack, ()) }.unwrap();
    assert_eq!(view.as_ptr(), ptr);
    assert_eq!(view, expected);
    assert_eq!(drops.get(), 0);
    drop(dlpack);
    assert_eq!(drops.get(), 1);
}

#[test]
fn array_export_round_trips_through_dlpark_without_copy() {
    let a = Array2::<f32>::from_shape_fn((3, 2).f(), |(i, j)| (i + 10 * j) as f32);
    let expected = a.clone();
    let ptr = a.as_ptr();
    let dlpack = a.to_dlpack().unwrap().into_dlpark();
    // SAFETY: our own export: live, writable, unshared.
    let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&dlpack, ()) }.unwrap();
    assert_eq!(view.as_ptr(), ptr);
    assert_eq!(view, expected.view().into_dyn());
    // SAFETY: as above.
    let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
    let back = Array2::<f32>::from_dlpack(tensor).unwrap();
    assert_eq!(
        back.as_ptr(),
        ptr,
        "our own export is reclaimed, not copied"
    );
    assert_eq!(back, expected);
}

#[test]
fn dlpark_ndarray_export_to_our_views() {
    let a = Array2::<f32>::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f32);
    let expected = a.clone();
    let ptr = a.as_ptr();
    let initialized: dynamic::Initialized<DLManagedTensorVersioned> =
        Box::new(a).try_into().unwrap();
    // SAFETY: dlpark's ndarray producer fills a complete descriptor of the box.
    let dlpack = unsafe { initialized.finish() };
    // SAFETY: the boxed array is live, writable and unshared.
    let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
    let view = tensor.as_array::<f32, Ix2>().unwrap();
    assert_eq!(view.as_ptr(), ptr, "zero-copy view");
    assert_eq!(view, expected);
    let copied = Array2::<f32>::from_dlpack(tensor).unwrap();
    assert_ne!(copied.as_ptr(), ptr, "a foreign export is copied");
    assert_eq!(copied, expected);
}

#[test]
fn dlpark_allocations_are_released_once_on_every_path() {
    // Versioned: view, then drop.
    let drops = Drops::default();
    let a = sample(2, 3);
    let (expected, ptr) = (a.clone(), a.as_ptr());
    let dlpack = dlpark_counted::<DLManagedTensorVersioned>(a, &drops);
    // SAFETY: a complete descriptor of a live, writable, unshared array.
    let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
    assert_eq!(tensor.as_array::<f32, Ix2>().unwrap().as_ptr(), ptr);
    assert_eq!(
        Array2::<f32>::from_dlpack(tensor).unwrap().into_dyn(),
        expected
    );
    assert_eq!(drops.get(), 1);

    // Legacy: mutate through our view, back to dlpark, view there, drop there.
    let drops = Drops::default();
    let dlpack = dlpark_counted::<DLManagedTensor>(sample(2, 3), &drops);
    // SAFETY: as above; the array is writable.
    let mut tensor = unsafe { ManagedTensor::from_dlpark_legacy(dlpack) }.unwrap();
    tensor.as_array_mut::<f32, Ix2>().unwrap()[[1, 1]] = -7.0;
    let dlpack = tensor.into_dlpark_legacy().unwrap();
    // SAFETY: as above.
    let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&dlpack, ()) }.unwrap();
    assert_eq!(view[[1, 1]], -7.0);
    assert_eq!(drops.get(), 0);
    drop(dlpack);
    assert_eq!(drops.get(), 1);

    // Legacy -> versioned: a wrapper, whose deleter releases the allocation once.
    let drops = Drops::default();
    let dlpack = dlpark_counted::<DLManagedTensor>(sample(1, 4), &drops);
    // SAFETY: as above.
    let tensor = unsafe { ManagedTensor::from_dlpark_legacy(dlpack) }.unwrap();
    let dlpack = tensor.into_dlpark();
    assert_eq!(dlpack.validate().unwrap().shape(), &[1, 4]);
    drop(dlpack);
    assert_eq!(drops.get(), 1);

    // A rejected import still releases it once.
    let drops = Drops::default();
    let dlpack = dlpark_counted::<DLManagedTensorVersioned>(sample(2, 2), &drops);
    let raw = dlpack.into_raw();
    // SAFETY: `raw` is the live header we just took out of the handle.
    unsafe { (*raw).dl_tensor.ndim = -2 };
    // SAFETY: still an initialised header that we own; only the version is read.
    let dlpack = unsafe { dlpark::versioned::Dlpack::from_raw(raw) }.unwrap();
    // SAFETY: the import fails on `ndim` before any data is read.
    let err = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap_err();
    assert_eq!(err, Error::NegativeNdim { ndim: -2 });
    assert_eq!(drops.get(), 1);
}

#[test]
fn a_read_only_tensor_is_refused_as_legacy_and_given_back() {
    let drops = Drops::default();
    let dlpack = {
        let array = sample(2, 2);
        let data = array.as_ptr().cast_mut().cast::<c_void>();
        let context = Box::new(Counted {
            value: array,
            drops: drops.clone(),
        });
        let mut initialized = Dynamic::new(vec![2usize, 2], vec![2isize, 1])
            .initialize(context)
            .unwrap();
        initialized
            .set_data(data)
            .set_dtype(f32::DTYPE)
            .set_device(DLDevice::CPU)
            .set_flags(DlpackFlags::READ_ONLY)
            .unwrap();
        // SAFETY: a complete descriptor of a live array that nobody writes.
        unsafe { initialized.finish() }
    };
    // SAFETY: as above; `READ_ONLY` forbids writes through the tensor.
    let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
    assert!(tensor.is_read_only());
    let err = dlpark::legacy::Dlpack::try_from(tensor).err().unwrap();
    assert_eq!(drops.get(), 0);
    let mut tensor = err.into_tensor();
    assert_eq!(
        tensor.as_array_mut::<f32, Ix2>().unwrap_err(),
        Error::ReadOnly
    );
    let err = tensor.into_dlpark_legacy().err().unwrap();
    drop(err);
    assert_eq!(drops.get(), 1);
}

// -------------------------------------------------------------------------------------
// ndarray <-> candle, through dlpark's `candle` feature
// -------------------------------------------------------------------------------------

#[test]
fn ndarray_becomes_a_candle_tensor() {
    let drops = Drops::default();
    let a = sample(2, 3);
    let expected = a.clone();
    let ptr = a.as_ptr();
    let dlpack = counted_array(a, &drops).into_dlpark();
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
    let dlpack = counted_array(t, &drops).into_dlpark();
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
    let dlpack = counted_array(a, &drops).into_dlpark();
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

#[test]
fn handles_are_send() {
    let drops = Drops::default();
    let dlpack = counted_array(sample(2, 2), &drops).into_dlpark();
    std::thread::spawn(move || {
        // SAFETY: the tensor's data is a live, unshared f32 array on the CPU.
        let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
        assert_eq!(tensor.as_array::<f32, Ix2>().unwrap()[[1, 1]], 3.5);
    })
    .join()
    .unwrap();
    assert_eq!(drops.get(), 1);
}
