//! The dlpark bridge: ownership moves both ways as one pointer, nothing is copied, and
//! the producer's deleter runs exactly once on every path, error paths included; with
//! tensors of a C-like producer, of our own exports, of dlpark's allocator and of its
//! ndarray interop. (candle, reached through dlpark: tests/tests/test_candle.rs.)
#![cfg(all(feature = "dlpark", feature = "ndarray"))]

mod common;

use std::ffi::c_void;

use common::{
    Counted, Counter, Spec, buffer_from_bytes, free_versioned_without_deleter, legacy, versioned,
};
use dlpack_core::ReadOnlyLegacyError;
use dlpack_core::ffi::{DLManagedTensor, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_READ_ONLY};
use dlpack_core::{DataType, Error, FromDLPack, ManagedTensor, ToDLPack};
use dlpark::allocation::dynamic;
use dlpark::ffi::DLDevice;
use dlpark::metadata::Dynamic;
use dlpark::{DlpackElement, DlpackFlags, TryFromDlpack};
use ndarray::{Array2, ArrayD, ArrayViewD, Ix2, IxDyn, ShapeBuilder, array};

/// A well-formed C-contiguous f32 tensor with explicit strides (DLPack 1.2 and later
/// require them, and dlpark checks it).
fn f32_spec(shape: &[i64]) -> Spec {
    let n: i64 = shape.iter().product();
    let bytes: Vec<u8> = (0..n as usize)
        .flat_map(|i| (i as f32).to_ne_bytes())
        .collect();
    let mut spec = Spec::new(shape, DataType::F32.to_raw(), buffer_from_bytes(&bytes));
    let mut strides = vec![1i64; shape.len()];
    for axis in (0..shape.len().saturating_sub(1)).rev() {
        strides[axis] = strides[axis + 1] * shape[axis + 1];
    }
    spec.strides = Some(strides);
    spec
}

fn take_versioned(
    spec: &Spec,
    counter: &Counter,
) -> (ManagedTensor, *mut DLManagedTensorVersioned) {
    let raw = versioned(spec, counter);
    // SAFETY: a fresh, well-formed tensor whose ownership we hand over.
    (unsafe { ManagedTensor::from_raw(raw) }.unwrap(), raw)
}

fn take_legacy(spec: &Spec, counter: &Counter) -> (ManagedTensor, *mut DLManagedTensor) {
    let raw = legacy(spec, counter);
    // SAFETY: a fresh, well-formed, writable tensor whose ownership we hand over.
    (unsafe { ManagedTensor::from_raw_legacy(raw) }.unwrap(), raw)
}

/// `rows x cols` values `0.5, 1.5, ...` in C order, in a buffer that counts its drop; and
/// the same values as an array, to compare with.
fn counted_values(rows: usize, cols: usize, counter: &Counter) -> (Counted, ArrayD<f32>) {
    let data: Vec<f32> = (0..rows * cols).map(|i| i as f32 + 0.5).collect();
    let expected = ArrayD::from_shape_vec(IxDyn(&[rows, cols]), data.clone()).unwrap();
    let counted = Counted {
        data,
        counter: counter.clone(),
    };
    (counted, expected)
}

/// Our own export of `counted_values`: its deleter dropping the buffer is the counted
/// event. With the buffer's address and the values.
fn counted_export(
    rows: usize,
    cols: usize,
    counter: &Counter,
) -> (ManagedTensor, *const f32, ArrayD<f32>) {
    let (owner, expected) = counted_values(rows, cols, counter);
    let ptr = owner.data.as_ptr();
    let tensor = ManagedTensor::from_buffer(owner, 0, &[rows, cols], &[cols as isize, 1]);
    (tensor.unwrap(), ptr, expected)
}

/// A tensor made by dlpark's own allocator, whose context is a buffer of
/// `counted_values` that counts its drop. With the buffer's address and the values.
fn dlpark_counted<M: dlpark::ManagedTensorBase>(
    rows: usize,
    cols: usize,
    counter: &Counter,
    flags: DlpackFlags,
) -> (dlpark::Managed<M>, *const f32, ArrayD<f32>) {
    let (owner, expected) = counted_values(rows, cols, counter);
    let ptr = owner.data.as_ptr();
    let metadata = Dynamic::new(vec![rows, cols], vec![cols as isize, 1]);
    let mut initialized: dynamic::Initialized<M> = metadata.initialize_as(Box::new(owner)).unwrap();
    initialized
        .set_data(ptr.cast_mut().cast::<c_void>())
        .set_dtype(f32::DTYPE)
        .set_device(DLDevice::CPU)
        .set_flags(flags)
        .unwrap();
    // SAFETY: the descriptor is complete; the boxed context owns the buffer, whose heap
    // memory does not move with the box and lives until the deleter drops the context;
    // the buffer is writable and not shared (unless `flags` says `READ_ONLY`, and then
    // nobody writes it).
    (unsafe { initialized.finish() }, ptr, expected)
}

#[test]
fn versioned_moves_to_dlpark_and_back_as_the_same_pointer() {
    let counter = Counter::new();
    let (tensor, raw) = take_versioned(&f32_spec(&[2, 3]), &counter);
    let dlpack: dlpark::versioned::Dlpack = tensor.try_into().unwrap();
    assert_eq!(dlpack.as_ptr().cast::<DLManagedTensorVersioned>(), raw);
    assert_eq!(dlpack.validate().unwrap().shape(), &[2, 3]);
    assert_eq!(dlpack.validate().unwrap().strides(), Some(&[3, 1][..]));
    assert_eq!(counter.get(), 0);

    // SAFETY: the common producer's data is valid, writable and not shared.
    let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
    assert_eq!(counter.get(), 0);
    let view = tensor.as_array::<f32, Ix2>().unwrap();
    assert_eq!(view, array![[0.0f32, 1.0, 2.0], [3.0, 4.0, 5.0]]);
    let raw_again = tensor.into_raw();
    assert_eq!(raw_again, raw);
    // SAFETY: `into_raw` handed the ownership back to us.
    drop(unsafe { ManagedTensor::from_raw(raw_again) }.unwrap());
    assert_eq!(counter.get(), 1);
}

#[test]
fn dropping_a_dlpark_handle_runs_the_deleter_once() {
    let counter = Counter::new();
    let (tensor, _) = take_versioned(&f32_spec(&[4]), &counter);
    let dlpack = tensor.into_dlpark().unwrap();
    assert_eq!(counter.get(), 0);
    drop(dlpack);
    assert_eq!(counter.get(), 1);

    let counter = Counter::new();
    let (tensor, _) = take_legacy(&f32_spec(&[4]), &counter);
    let dlpack = tensor.into_dlpark_legacy().unwrap();
    drop(dlpack);
    assert_eq!(counter.get(), 1);
}

#[test]
fn a_dlpark_handle_may_be_dropped_on_another_thread() {
    let counter = Counter::new();
    let (tensor, _) = take_versioned(&f32_spec(&[2, 2]), &counter);
    let dlpack = tensor.into_dlpark().unwrap();
    std::thread::spawn(move || drop(dlpack)).join().unwrap();
    assert_eq!(counter.get(), 1);
}

#[test]
fn a_dlpark_handle_may_be_imported_on_another_thread() {
    let counter = Counter::new();
    let (tensor, _, _) = counted_export(2, 2, &counter);
    let dlpack = tensor.into_dlpark().unwrap();
    std::thread::spawn(move || {
        // SAFETY: our own export: valid, writable data that nothing else accesses.
        let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
        assert_eq!(tensor.as_array::<f32, Ix2>().unwrap()[[1, 1]], 3.5);
    })
    .join()
    .unwrap();
    assert_eq!(counter.get(), 1);
}

#[test]
fn our_export_is_viewed_by_dlpark_and_by_us_without_copy() {
    let counter = Counter::new();
    let (tensor, ptr, expected) = counted_export(3, 4, &counter);
    let dlpack: dlpark::versioned::Dlpack = tensor.try_into().unwrap();
    {
        // SAFETY: our own export: valid, writable data that nothing else accesses.
        let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&dlpack, ()) }.unwrap();
        assert_eq!(view.as_ptr(), ptr);
        assert_eq!(view, expected);
    }
    assert_eq!(counter.get(), 0);

    // And back: our checked view of the same memory.
    // SAFETY: as above: the handle still holds our export.
    let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
    let view = tensor.as_array::<f32, Ix2>().unwrap();
    assert_eq!(view.as_ptr(), ptr);
    assert_eq!(view.into_dyn(), expected);
    assert_eq!(counter.get(), 0);
    drop(tensor);
    assert_eq!(counter.get(), 1);

    // As a legacy handle, dropped by dlpark.
    let counter = Counter::new();
    let (tensor, ptr, expected) = counted_export(2, 5, &counter);
    let dlpack = dlpark::legacy::Dlpack::try_from(tensor).unwrap();
    // SAFETY: our own export: valid, writable data that nothing else accesses.
    let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&dlpack, ()) }.unwrap();
    assert_eq!(view.as_ptr(), ptr);
    assert_eq!(view, expected);
    assert_eq!(counter.get(), 0);
    drop(dlpack);
    assert_eq!(counter.get(), 1);
}

#[test]
fn legacy_moves_to_dlpark_legacy_and_back_as_the_same_pointer() {
    let counter = Counter::new();
    let (tensor, raw) = take_legacy(&f32_spec(&[3]), &counter);
    let dlpack = dlpark::legacy::Dlpack::try_from(tensor).unwrap();
    assert_eq!(dlpack.as_ptr().cast::<DLManagedTensor>(), raw);
    // SAFETY: the common producer's data is valid, writable and not shared.
    let tensor = unsafe { ManagedTensor::from_dlpark_legacy(dlpack) }.unwrap();
    assert!(tensor.is_legacy());
    assert_eq!(
        tensor.as_array::<f32, ndarray::Ix1>().unwrap(),
        array![0.0f32, 1.0, 2.0]
    );
    assert_eq!(counter.get(), 0);
    drop(tensor);
    assert_eq!(counter.get(), 1);
}

#[test]
fn crossing_abis_wraps_once_and_unwraps_on_the_way_back() {
    // Legacy -> versioned dlpark handle -> back to legacy: the original pointer again.
    let counter = Counter::new();
    let (tensor, raw) = take_legacy(&f32_spec(&[2, 3]), &counter);
    let dlpack = tensor.into_dlpark().unwrap();
    assert_ne!(dlpack.as_ptr().cast::<DLManagedTensor>(), raw);
    assert_eq!(dlpack.version().major, 1);
    assert_eq!(dlpack.flags(), DlpackFlags::empty());
    assert_eq!(dlpack.validate().unwrap().shape(), &[2, 3]);
    // SAFETY: the wrapper describes the common producer's valid, unshared data.
    let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
    let dlpack = tensor.into_dlpark_legacy().unwrap();
    assert_eq!(dlpack.as_ptr().cast::<DLManagedTensor>(), raw);
    assert_eq!(counter.get(), 0);
    drop(dlpack);
    assert_eq!(counter.get(), 1);

    // Versioned -> legacy dlpark handle -> dropped there: the wrapper's deleter calls
    // the original deleter once.
    let counter = Counter::new();
    let (tensor, raw) = take_versioned(&f32_spec(&[5]), &counter);
    let dlpack = tensor.into_dlpark_legacy().unwrap();
    assert_ne!(dlpack.as_ptr().cast::<DLManagedTensorVersioned>(), raw);
    // SAFETY: the wrapper describes the common producer's valid, unshared data.
    let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&dlpack, ()) }.unwrap();
    assert_eq!(view.as_slice().unwrap(), &[0.0, 1.0, 2.0, 3.0, 4.0]);
    assert_eq!(counter.get(), 0);
    drop(dlpack);
    assert_eq!(counter.get(), 1);
}

#[test]
fn read_only_is_refused_by_the_legacy_abi_and_given_back() {
    let counter = Counter::new();
    let mut spec = f32_spec(&[2]);
    spec.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    let (tensor, raw) = take_versioned(&spec, &counter);

    let err: ReadOnlyLegacyError = dlpark::legacy::Dlpack::try_from(tensor).err().unwrap();
    assert_eq!(counter.get(), 0);
    assert!(err.tensor().is_read_only());
    assert_eq!(err.to_string(), Error::ReadOnlyLegacy.to_string());
    let tensor = err.into_tensor();
    assert_eq!(counter.get(), 0);

    // Still usable: the versioned ABI carries the flag.
    let dlpack = tensor.into_dlpark().unwrap();
    assert_eq!(dlpack.as_ptr().cast::<DLManagedTensorVersioned>(), raw);
    assert_eq!(dlpack.flags(), DlpackFlags::READ_ONLY);
    drop(dlpack);
    assert_eq!(counter.get(), 1);

    // A tensor dlpark's allocator flags `READ_ONLY`: the flag survives the import, our
    // view refuses writes, and the tensor refused twice is released once.
    let counter = Counter::new();
    let (dlpack, _, _) = dlpark_counted::<dlpark::ffi::DLManagedTensorVersioned>(
        2,
        2,
        &counter,
        DlpackFlags::READ_ONLY,
    );
    // SAFETY: a complete descriptor of a live buffer that nobody writes; `READ_ONLY`
    // forbids writes through the tensor.
    let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
    assert!(tensor.is_read_only());
    let err = dlpark::legacy::Dlpack::try_from(tensor).err().unwrap();
    assert_eq!(counter.get(), 0);
    let mut tensor = err.into_tensor();
    assert_eq!(
        tensor.as_array_mut::<f32, Ix2>().unwrap_err(),
        Error::ReadOnly
    );
    let err = tensor.into_dlpark_legacy().err().unwrap();
    drop(err);
    assert_eq!(counter.get(), 1);
}

#[test]
fn a_dropped_read_only_error_runs_the_deleter_once() {
    let counter = Counter::new();
    let mut spec = f32_spec(&[2]);
    spec.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    let (tensor, _) = take_versioned(&spec, &counter);
    let err = tensor.into_dlpark_legacy().err().unwrap();
    drop(err);
    assert_eq!(counter.get(), 1);

    // `?` into the crate's error drops the tensor the same way.
    fn export(tensor: ManagedTensor) -> dlpack_core::Result<dlpark::legacy::Dlpack> {
        Ok(tensor.into_dlpark_legacy()?)
    }
    let counter = Counter::new();
    let (tensor, _) = take_versioned(&spec, &counter);
    assert_eq!(export(tensor).err(), Some(Error::ReadOnlyLegacy));
    assert_eq!(counter.get(), 1);
}

#[test]
fn a_rejected_import_runs_the_deleter_once() {
    let counter = Counter::new();
    let mut spec = f32_spec(&[2]);
    spec.ndim = Some(-1);
    let raw = versioned(&spec, &counter);
    // SAFETY: an initialised header owned by us; dlpark reads only its version here.
    let dlpack = unsafe { dlpark::versioned::Dlpack::from_raw(raw.cast()) }.unwrap();
    // SAFETY: the import fails before anything but the header is read.
    let err = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap_err();
    assert_eq!(err, Error::NegativeNdim { ndim: -1 });
    assert_eq!(counter.get(), 1);

    let counter = Counter::new();
    let mut spec = f32_spec(&[2, 2]);
    spec.shape_misaligned = true;
    let raw = legacy(&spec, &counter);
    // SAFETY: an initialised header owned by us; dlpark does not read the shape here.
    let dlpack = unsafe { dlpark::legacy::Dlpack::from_raw(raw.cast()) }.unwrap();
    // SAFETY: the import fails before the shape is read.
    let err = unsafe {
        <ManagedTensor as TryFromDlpack<dlpark::legacy::Dlpack>>::try_from_dlpack(dlpack, ())
    }
    .unwrap_err();
    assert!(
        matches!(err, Error::Misaligned { what: "shape", .. }),
        "{err}"
    );
    assert_eq!(counter.get(), 1);
}

#[test]
fn a_null_deleter_is_never_called() {
    let counter = Counter::new();
    let mut spec = f32_spec(&[3]);
    spec.null_deleter = true;
    let (tensor, raw) = take_versioned(&spec, &counter);
    let dlpack = tensor.into_dlpark().unwrap();
    // SAFETY: the common producer's data is valid, writable and not shared.
    let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
    drop(tensor);
    assert_eq!(counter.get(), 0);
    // SAFETY: the producer kept ownership; nobody uses `raw` any more.
    unsafe { free_versioned_without_deleter(raw) };
}

#[test]
fn our_array_export_is_viewed_by_dlpark_and_reclaimed_without_copy() {
    // In C order and in Fortran order.
    let c = Array2::<f32>::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f32);
    let f = Array2::<f32>::from_shape_fn((3, 2).f(), |(i, j)| (i + 10 * j) as f32);
    for a in [c, f] {
        let expected = a.clone();
        let ptr = a.as_ptr();
        let dlpack: dlpark::versioned::Dlpack = a.to_dlpack().unwrap().try_into().unwrap();
        // SAFETY: our own export: valid, writable data that nothing else accesses.
        let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&dlpack, ()) }.unwrap();
        assert_eq!(view.as_ptr(), ptr);
        assert_eq!(view, expected.view().into_dyn());
        // SAFETY: still our own export.
        let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
        let back = Array2::<f32>::from_dlpack(tensor).unwrap();
        assert_eq!(back.as_ptr(), ptr, "our export comes back without a copy");
        assert_eq!(back, expected);
    }
}

#[test]
fn dlpark_array_exports_import_without_copy() {
    let expected = Array2::<i32>::from_shape_fn((2, 3), |(i, j)| (10 * i + j) as i32);

    // Versioned, through dlpark's conversion trait and through `from_dlpark`.
    type Versioned = dlpark::versioned::Dlpack;
    let imports: [fn(Versioned) -> ManagedTensor; 2] = [
        // SAFETY: the boxed array is valid and writable, and nothing else accesses it.
        |dlpack| unsafe { TryFromDlpack::try_from_dlpack(dlpack, ()) }.unwrap(),
        // SAFETY: as above.
        |dlpack| unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap(),
    ];
    for import in imports {
        let a = expected.clone();
        let ptr = a.as_ptr();
        let initialized: dynamic::Initialized<dlpark::ffi::DLManagedTensorVersioned> =
            Box::new(a).try_into().unwrap();
        // SAFETY: dlpark's ndarray producer fills a complete descriptor of the boxed
        // array.
        let tensor = import(unsafe { initialized.finish() });
        let view = tensor.as_array::<i32, Ix2>().unwrap();
        assert_eq!(view.as_ptr(), ptr, "zero-copy view");
        assert_eq!(view, expected);
        let copied = Array2::<i32>::from_dlpack(tensor).unwrap();
        assert_ne!(copied.as_ptr(), ptr, "a foreign export is copied");
        assert_eq!(copied, expected);
    }

    // Legacy, writable: mutate through our view.
    let a = expected.clone();
    let ptr = a.as_ptr();
    let initialized: dynamic::Initialized<dlpark::ffi::DLManagedTensor> =
        Box::new(a).try_into().unwrap();
    // SAFETY: as above.
    let dlpack = unsafe { initialized.finish() };
    // SAFETY: as above; the array is writable.
    let mut tensor = unsafe { ManagedTensor::from_dlpark_legacy(dlpack) }.unwrap();
    assert_eq!(tensor.as_array::<i32, Ix2>().unwrap().as_ptr(), ptr);
    tensor.as_array_mut::<i32, Ix2>().unwrap()[[1, 2]] = -1;
    assert_eq!(tensor.as_array::<i32, Ix2>().unwrap()[[1, 2]], -1);
}

#[test]
fn dlpark_allocations_are_released_once_on_every_path() {
    // Versioned: view, then drop.
    let counter = Counter::new();
    let (dlpack, ptr, expected) = dlpark_counted::<dlpark::ffi::DLManagedTensorVersioned>(
        2,
        3,
        &counter,
        DlpackFlags::empty(),
    );
    // SAFETY: a complete descriptor of a live, writable, unshared buffer.
    let tensor = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap();
    assert_eq!(tensor.as_array::<f32, Ix2>().unwrap().as_ptr(), ptr);
    assert_eq!(
        Array2::<f32>::from_dlpack(tensor).unwrap().into_dyn(),
        expected
    );
    assert_eq!(counter.get(), 1);

    // Legacy: mutate through our view, back to dlpark, view there, drop there.
    let counter = Counter::new();
    let (dlpack, _, _) =
        dlpark_counted::<dlpark::ffi::DLManagedTensor>(2, 3, &counter, DlpackFlags::empty());
    // SAFETY: as above; the buffer is writable.
    let mut tensor = unsafe { ManagedTensor::from_dlpark_legacy(dlpack) }.unwrap();
    tensor.as_array_mut::<f32, Ix2>().unwrap()[[1, 1]] = -7.0;
    let dlpack = tensor.into_dlpark_legacy().unwrap();
    // SAFETY: as above.
    let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&dlpack, ()) }.unwrap();
    assert_eq!(view[[1, 1]], -7.0);
    assert_eq!(counter.get(), 0);
    drop(dlpack);
    assert_eq!(counter.get(), 1);

    // Legacy -> versioned: a wrapper, whose deleter releases the allocation once.
    let counter = Counter::new();
    let (dlpack, _, _) =
        dlpark_counted::<dlpark::ffi::DLManagedTensor>(1, 4, &counter, DlpackFlags::empty());
    // SAFETY: as above.
    let tensor = unsafe { ManagedTensor::from_dlpark_legacy(dlpack) }.unwrap();
    let dlpack = tensor.into_dlpark().unwrap();
    assert_eq!(dlpack.validate().unwrap().shape(), &[1, 4]);
    drop(dlpack);
    assert_eq!(counter.get(), 1);

    // A rejected import still releases it once.
    let counter = Counter::new();
    let (dlpack, _, _) = dlpark_counted::<dlpark::ffi::DLManagedTensorVersioned>(
        2,
        2,
        &counter,
        DlpackFlags::empty(),
    );
    let raw = dlpack.into_raw();
    // SAFETY: `raw` is the live header we just took out of the handle.
    unsafe { (*raw).dl_tensor.ndim = -2 };
    // SAFETY: still an initialised header that we own; only the version is read.
    let dlpack = unsafe { dlpark::versioned::Dlpack::from_raw(raw) }.unwrap();
    // SAFETY: the import fails on `ndim` before any data is read.
    let err = unsafe { ManagedTensor::from_dlpark(dlpack) }.unwrap_err();
    assert_eq!(err, Error::NegativeNdim { ndim: -2 });
    assert_eq!(counter.get(), 1);
}

#[test]
fn read_only_memory_that_rust_reads_goes_to_dlpark_as_a_copy() {
    let kept = ndarray::ArcArray1::from_vec(vec![1.0f32, 2.0, 3.0]);
    let tensor = kept.clone().to_dlpack().unwrap();
    assert!(tensor.is_read_only());
    let dlpack = tensor.into_dlpark().unwrap();
    let flags = dlpack.flags();
    // A copy of its own (dlpark could hand it to PyTorch, which would write it).
    // SAFETY: the copy is the handle's alone: valid, writable, and not shared.
    let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&dlpack, ()) }.unwrap();
    assert_ne!(view.as_ptr(), kept.as_ptr());
    assert_eq!(view.as_slice().unwrap(), &[1.0, 2.0, 3.0]);
    assert!(flags.contains(DlpackFlags::IS_COPIED) && !flags.contains(DlpackFlags::READ_ONLY));
    drop(dlpack);

    // The unchecked door hands it over as it is, still read-only.
    let tensor = kept.clone().to_dlpack().unwrap();
    // SAFETY: nothing writes the memory through the handle, which stays in this test.
    let dlpack = unsafe { tensor.into_dlpark_unchecked() };
    // SAFETY: read only, while `kept` (which nobody writes) keeps the memory.
    let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&dlpack, ()) }.unwrap();
    assert_eq!(view.as_ptr(), kept.as_ptr());
    assert!(dlpack.flags().contains(DlpackFlags::READ_ONLY));

    // A shared array that was the only handle is exported writable: it moves.
    let only = ndarray::ArcArray1::from_vec(vec![4.0f32]);
    let ptr = only.as_ptr();
    let dlpack = only.to_dlpack().unwrap().into_dlpark().unwrap();
    // SAFETY: our own export, nothing else reaches it.
    let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&dlpack, ()) }.unwrap();
    assert_eq!(view.as_ptr(), ptr);
}
