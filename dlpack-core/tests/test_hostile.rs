//! Valid-but-huge and hostile inputs: broadcast tensors whose copies cannot be
//! allocated, `bool` views of broadcast memory, and headers copied by a foreign producer.
//! Every case is a typed error or a correct result, never an abort, a hang or a double
//! free, and every deleter runs exactly once.
#![cfg(feature = "ndarray")]

mod common;

use std::time::{Duration, Instant};

use common::{Counter, Spec, buffer_from_bytes};
use dlpack_core::ffi::DLManagedTensorVersioned;
use dlpack_core::{DLPackArray, DataType, Error, FromDLPack, ManagedTensor, ToDLPack};
use ndarray::{Array1, ArrayD, Ix1, Ix2, IxDyn, array};

/// A foreign tensor of one byte (`value`) broadcast to `shape` (every stride 0).
fn broadcast(dtype: DataType, value: u8, shape: &[i64]) -> (ManagedTensor, Counter) {
    let mut spec = Spec::new(shape, dtype.to_raw(), buffer_from_bytes(&[value; 16]));
    spec.strides = Some(vec![0; shape.len()]);
    let counter = Counter::new();
    let raw = common::versioned(&spec, &counter);
    // SAFETY: a well-formed tensor whose every element is the buffer's first bytes.
    let tensor = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    (tensor, counter)
}

const HUGE: i64 = 1 << 62;

fn is_allocation_failure(err: &Error) -> bool {
    matches!(err, Error::AllocationFailed { .. })
}

// Miri and the sanitizers stop at an allocation this large instead of returning NULL.
#[test]
#[cfg_attr(miri, ignore = "Miri refuses to attempt a 4 EiB allocation")]
fn copying_a_huge_broadcast_tensor_is_an_allocation_error() {
    let (tensor, counter) = broadcast(DataType::I8, 7, &[HUGE]);
    // A view is fine: it addresses one byte.
    let view = tensor.as_array::<i8, Ix1>().unwrap();
    assert_eq!(view.len(), HUGE as usize);
    assert_eq!(view[[HUGE as usize - 1]], 7);
    // An owned copy would need 4 EiB.
    let err = Array1::<i8>::from_dlpack(tensor).unwrap_err();
    assert!(is_allocation_failure(&err), "{err}");
    assert_eq!(counter.get(), 1);

    let (tensor, counter) = broadcast(DataType::I8, 7, &[1 << 31, 1 << 31]);
    let owned = DLPackArray::<i8, Ix2>::new(tensor).unwrap();
    assert!(is_allocation_failure(&owned.into_owned().unwrap_err()));
    assert_eq!(counter.get(), 1);

    // A Rust broadcast view copies on export: the same error.
    let one = array![1u8];
    let wide = one.broadcast(HUGE as usize).unwrap();
    assert!(is_allocation_failure(&wide.to_dlpack().unwrap_err()));
}

#[test]
fn copying_a_broadcast_tensor_that_fits_works() {
    let (tensor, counter) = broadcast(DataType::U8, 3, &[4, 5]);
    let owned = ArrayD::<u8>::from_dlpack(tensor).unwrap();
    assert_eq!(owned, ArrayD::from_elem(IxDyn(&[4, 5]), 3u8));
    assert!(owned.is_standard_layout());
    assert_eq!(counter.get(), 1);
}

/// Runs `f` and checks it took less than `limit`: a check that visits every logical
/// element of a 2^40-element tensor takes hours.
fn quick<R>(limit: Duration, f: impl FnOnce() -> R) -> R {
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    // Miri interprets every step, thousands of times slower: the count of steps is what
    // matters, and it is the same there.
    assert!(cfg!(miri) || took < limit, "took {took:?}");
    out
}

#[test]
fn bool_views_of_broadcast_memory_check_each_byte_once() {
    // 2^40 elements, one byte.
    let (tensor, counter) = broadcast(DataType::BOOL, 1, &[1 << 40]);
    let view = quick(Duration::from_secs(5), || tensor.as_array::<bool, Ix1>()).unwrap();
    assert!(view[[(1 << 40) - 1]]);
    drop(tensor);
    assert_eq!(counter.get(), 1);

    // Broadcast along one axis of two, with a bad byte.
    let mut spec = Spec::new(
        &[1 << 30, 3],
        DataType::BOOL.to_raw(),
        buffer_from_bytes(&[0, 1, 2]),
    );
    spec.strides = Some(vec![0, 1]);
    let counter = Counter::new();
    // SAFETY: a well-formed tensor over three bytes.
    let tensor = unsafe { ManagedTensor::from_raw(common::versioned(&spec, &counter)) }.unwrap();
    let err = quick(Duration::from_secs(5), || {
        tensor.as_array::<bool, Ix2>().map(|_| ())
    })
    .unwrap_err();
    // The first element holding the bad byte, in row-major order.
    assert_eq!(err, Error::InvalidBool { index: 2, byte: 2 });
    drop(tensor);
    assert_eq!(counter.get(), 1);
}

#[test]
fn bool_views_of_sliding_windows_check_each_byte_once() {
    // Windows of 2^12 over 2^13 - 1 bytes (`as_strided` with strides (1, 1)): 2^24
    // logical elements over 8191 bytes.
    let n: i64 = 1 << 12;
    let mut bytes = vec![1u8; 2 * n as usize - 1];
    bytes[n as usize + 5] = 0;
    let mut spec = Spec::new(&[n, n], DataType::BOOL.to_raw(), buffer_from_bytes(&bytes));
    spec.strides = Some(vec![1, 1]);
    let counter = Counter::new();
    // SAFETY: a well-formed tensor over `bytes`.
    let tensor = unsafe { ManagedTensor::from_raw(common::versioned(&spec, &counter)) }.unwrap();
    let view = quick(Duration::from_secs(20), || tensor.as_array::<bool, Ix2>()).unwrap();
    assert!(!view[[n as usize - 1, 6]]);
    assert!(view[[0, 0]]);
    drop(tensor);

    bytes[7] = 9;
    let mut spec = Spec::new(&[n, n], DataType::BOOL.to_raw(), buffer_from_bytes(&bytes));
    spec.strides = Some(vec![1, 1]);
    // SAFETY: as above.
    let tensor = unsafe { ManagedTensor::from_raw(common::versioned(&spec, &counter)) }.unwrap();
    let err = quick(Duration::from_secs(20), || {
        tensor.as_array::<bool, Ix2>().map(|_| ())
    })
    .unwrap_err();
    assert!(matches!(err, Error::InvalidBool { byte: 9, .. }), "{err}");
    drop(tensor);
    assert_eq!(counter.get(), 2);
}

#[test]
fn bool_views_of_overlapping_windows_cost_their_span() {
    // Byte strides (2, 3), which do not divide each other (NumPy's `as_strided`): 2^40
    // logical elements over 5 MiB. Visiting every element would take hours; each
    // reachable byte is checked once.
    let n: usize = if cfg!(miri) { 1 << 6 } else { 1 << 20 };
    let mut bytes = vec![1u8; 5 * n];
    let spec = |bytes: &[u8]| {
        let mut spec = Spec::new(
            &[n as i64, n as i64],
            DataType::BOOL.to_raw(),
            buffer_from_bytes(bytes),
        );
        spec.strides = Some(vec![2, 3]);
        spec
    };
    let counter = Counter::new();
    // SAFETY: a well-formed tensor over `bytes`.
    let tensor =
        unsafe { ManagedTensor::from_raw(common::versioned(&spec(&bytes), &counter)) }.unwrap();
    let view = quick(Duration::from_secs(20), || tensor.as_array::<bool, Ix2>()).unwrap();
    assert_eq!(view.len(), n * n);
    assert!(view[[n - 1, n - 1]]);
    drop(tensor);

    // Byte 1 is no element's (2a + 3b never makes 1): a bad value there is not read.
    bytes[1] = 7;
    // Byte 7 is only element [2, 1]'s (2 * 2 + 3 * 1).
    bytes[7] = 9;
    // SAFETY: as above.
    let tensor =
        unsafe { ManagedTensor::from_raw(common::versioned(&spec(&bytes), &counter)) }.unwrap();
    let err = quick(Duration::from_secs(20), || {
        tensor.as_array::<bool, Ix2>().map(|_| ())
    })
    .unwrap_err();
    assert_eq!(
        err,
        Error::InvalidBool {
            index: 2 * n + 1,
            byte: 9
        }
    );
    drop(tensor);
    assert_eq!(counter.get(), 2);
}

/// A foreign producer that copied one of our headers into a larger struct of its own
/// (the managed struct and the bytes that follow it), keeping `manager_ctx`, with its
/// own deleter that releases the original.
#[repr(C)]
struct Copied {
    bytes: [u64; 19],
    original: *mut DLManagedTensorVersioned,
    counter: Counter,
}

unsafe extern "C" fn delete_copied(managed: *mut DLManagedTensorVersioned) {
    // SAFETY: `managed` is the `Copied` box made in the test, deleted once.
    let copied = unsafe { Box::from_raw(managed.cast::<Copied>()) };
    // SAFETY: the original header is ours, and only this deleter releases it.
    drop(unsafe { ManagedTensor::from_raw(copied.original) });
    copied
        .counter
        .0
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

#[test]
fn a_copied_header_is_not_taken_for_ours() {
    let a = Array1::from(vec![1.0f32, 2.0, 3.0]);
    let ptr = a.as_ptr();
    let original = a.to_dlpack().unwrap().into_raw();
    let counter = Counter::new();
    let copied = Box::into_raw(Box::new(Copied {
        bytes: [0; 19],
        original,
        counter: counter.clone(),
    }));
    // SAFETY: our header is one allocation of more than 152 bytes (managed struct,
    // bookkeeping, the owner array, shape and strides), all initialised; the copy
    // (an untyped one, which keeps the pointers' provenance) goes into the fresh box.
    unsafe {
        core::ptr::copy_nonoverlapping(original.cast::<u64>(), copied.cast::<u64>(), 19);
    }
    // SAFETY: `Copied` starts with the bytes of a `DLManagedTensorVersioned` (its
    // first 80 bytes), aligned to 8.
    unsafe { (*copied.cast::<DLManagedTensorVersioned>()).deleter = Some(delete_copied) };
    // SAFETY: the copy describes the original's live data, which nothing else uses;
    // its deleter releases both.
    let tensor = unsafe { ManagedTensor::from_raw(copied.cast()) }.unwrap();
    assert_eq!(tensor.data_ptr().cast::<f32>().cast_const(), ptr);
    let tensor = tensor.into_owner::<Array1<f32>>().unwrap_err();
    let back = Array1::<f32>::from_dlpack(tensor).unwrap();
    assert_eq!(back, array![1.0, 2.0, 3.0]);
    assert_ne!(back.as_ptr(), ptr, "a copy, not the original's buffer");
    assert_eq!(counter.get(), 1);
}

/// A foreign tensor of `spec`, counted.
fn foreign(spec: &Spec) -> (ManagedTensor, Counter) {
    let counter = Counter::new();
    let raw = common::versioned(spec, &counter);
    // SAFETY: every spec here keeps its data inside the buffer, or has none to read
    // (`byte_span` reads no element).
    (unsafe { ManagedTensor::from_raw(raw) }.unwrap(), counter)
}

#[test]
fn the_byte_span_is_checked_for_any_layout() {
    // 2^62 elements broadcast from one: the span is one element, whatever the count.
    let (t, counter) = broadcast(DataType::F32, 1, &[HUGE]);
    let span = t.byte_span().unwrap();
    assert_eq!((span.elements, span.len), (1 << 62, 4));
    assert_eq!(span.start, span.first);
    drop(t);
    assert_eq!(counter.get(), 1);

    // Negative strides: the span starts below the first element.
    let mut spec = Spec::new(&[2, 3], DataType::I16.to_raw(), vec![0; 2]);
    spec.strides = Some(vec![-3, 1]);
    spec.byte_offset = 6;
    let (t, counter) = foreign(&spec);
    let span = t.byte_span().unwrap();
    assert_eq!(span.first, t.data() as usize + 6);
    assert_eq!((span.start, span.len), (t.data() as usize, 12));
    span.check_aligned(2).unwrap();
    assert!(matches!(
        span.check_aligned(16),
        Err(Error::Misaligned { align: 16, .. })
    ));
    drop(t);
    assert_eq!(counter.get(), 1);

    // An empty tensor may have NULL data; a non-empty one may not.
    let mut spec = Spec::new(&[0, 5], DataType::F64.to_raw(), vec![]);
    spec.data_at = None;
    let (t, _) = foreign(&spec);
    let span = t.byte_span().unwrap();
    assert_eq!((span.elements, span.len), (0, 0));
    span.check_aligned(8).unwrap();
    let mut spec = Spec::new(&[1], DataType::F64.to_raw(), vec![]);
    spec.data_at = None;
    let (t, counter) = foreign(&spec);
    assert!(matches!(
        t.byte_span(),
        Err(Error::NullData { elements: 1 })
    ));
    drop(t);
    assert_eq!(counter.get(), 1);

    // Extents and spans that do not fit.
    let (t, _) = foreign(&Spec::new(&[-1], DataType::U8.to_raw(), vec![0]));
    assert!(matches!(t.byte_span(), Err(Error::NegativeExtent { .. })));
    let mut spec = Spec::new(&[2, 2], DataType::F64.to_raw(), vec![0]);
    spec.strides = Some(vec![1 << 61, 1]);
    let (t, _) = foreign(&spec);
    assert!(matches!(t.byte_span(), Err(Error::Overflow { .. })));
    // A byte offset that wraps the address space.
    let mut spec = Spec::new(&[2], DataType::U8.to_raw(), vec![0]);
    spec.byte_offset = u64::MAX - 8;
    let (t, _) = foreign(&spec);
    assert!(matches!(t.byte_span(), Err(Error::Overflow { .. })));

    // Packed four-bit elements must be C-contiguous.
    let float4 = DataType::from_raw(dlpack_core::ffi::DLDataType {
        code: dlpack_core::ffi::DLDataTypeCode::kDLFloat4_e2m1fn,
        bits: 4,
        lanes: 1,
    });
    let (t, _) = foreign(&Spec::new(&[3], float4.to_raw(), vec![0]));
    assert_eq!(t.byte_span().unwrap().len, 2);
    let mut spec = Spec::new(&[3], float4.to_raw(), vec![0]);
    spec.strides = Some(vec![2]);
    let (t, _) = foreign(&spec);
    assert!(matches!(t.byte_span(), Err(Error::PackedLayout { .. })));
}

#[test]
fn the_byte_span_stays_within_reach_of_the_data_pointer() {
    // 2^60 elements of 4 bytes 2^62 bytes past `data`: each part fits `isize`, the
    // whole does not, so no allocation starting at `data` could hold it.
    let mut spec = Spec::new(&[1 << 60], DataType::F32.to_raw(), vec![0; 2]);
    spec.byte_offset = 1 << 62;
    let (t, counter) = foreign(&spec);
    assert!(matches!(t.byte_span(), Err(Error::Overflow { .. })));
    drop(t);
    assert_eq!(counter.get(), 1);
    // NULL data is reported with the element count, packed elements included.
    let float4 = DataType::from_raw(dlpack_core::ffi::DLDataType {
        code: dlpack_core::ffi::DLDataTypeCode::kDLFloat4_e2m1fn,
        bits: 4,
        lanes: 1,
    });
    let mut spec = Spec::new(&[3], float4.to_raw(), vec![]);
    spec.data_at = None;
    let (t, _) = foreign(&spec);
    assert!(matches!(
        t.byte_span(),
        Err(Error::NullData { elements: 3 })
    ));
}
