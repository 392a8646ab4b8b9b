//! Ownership: the deleter of every tensor runs exactly once, on every path.

mod common;

use common::{Counter, Spec, buffer_from_bytes, legacy, versioned};
use dlpack_core::ffi::{DLDataType, DLDataTypeCode, DLDeviceType, DLPackVersion};
use dlpack_core::{DataType, Device, Error, ManagedTensor};

fn f32_spec(shape: &[i64]) -> Spec {
    let n: i64 = shape.iter().product();
    let bytes: Vec<u8> = (0..n as usize * 4).map(|i| i as u8).collect();
    Spec::new(shape, DataType::F32.to_raw(), buffer_from_bytes(&bytes))
}

#[test]
fn drop_calls_deleter_once() {
    let counter = Counter::new();
    let ptr = versioned(&f32_spec(&[2, 3]), &counter);
    // SAFETY: a fresh, well-formed tensor whose ownership we hand over.
    let t = unsafe { ManagedTensor::from_raw(ptr) }.unwrap();
    assert_eq!(counter.get(), 0);
    assert_eq!(t.shape(), &[2, 3]);
    assert_eq!(t.strides(), None);
    assert_eq!(t.dtype(), DataType::F32);
    assert_eq!(t.device(), Device::CPU);
    assert_eq!(t.version(), Some(DLPackVersion { major: 1, minor: 3 }));
    assert!(!t.is_read_only() && !t.is_copied() && !t.is_legacy());
    assert_eq!(t.num_elements(), Ok(6));
    drop(t);
    assert_eq!(counter.get(), 1);
}

#[test]
fn legacy_drop_calls_deleter_once() {
    let counter = Counter::new();
    let ptr = legacy(&f32_spec(&[4]), &counter);
    // SAFETY: a fresh, well-formed tensor whose ownership we hand over.
    let t = unsafe { ManagedTensor::from_raw_legacy(ptr) }.unwrap();
    assert!(t.is_legacy());
    assert_eq!(t.version(), None);
    assert_eq!(t.flags(), 0);
    drop(t);
    assert_eq!(counter.get(), 1);
}

#[test]
fn into_raw_then_from_raw_keeps_one_deleter_call() {
    let counter = Counter::new();
    let ptr = versioned(&f32_spec(&[2]), &counter);
    // SAFETY: fresh tensor.
    let t = unsafe { ManagedTensor::from_raw(ptr) }.unwrap();
    let raw = t.into_raw();
    assert_eq!(raw, ptr, "a versioned tensor is handed back as is");
    assert_eq!(counter.get(), 0);
    // SAFETY: `into_raw` handed the ownership back to us.
    let t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    assert_eq!(counter.get(), 0);
    drop(t);
    assert_eq!(counter.get(), 1);
}

#[test]
fn versioned_to_legacy_dropped_on_legacy_side() {
    let counter = Counter::new();
    let mut spec = f32_spec(&[2, 2]);
    spec.strides = Some(vec![1, 2]);
    // SAFETY: fresh tensor.
    let t = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap();
    let data = t.data();
    let raw = t.into_raw_legacy().unwrap();
    assert_eq!(counter.get(), 0);
    // SAFETY: `raw` is a live legacy tensor we own.
    let tensor = unsafe { &(*raw).dl_tensor };
    // SAFETY: the wrapper's shape holds `ndim` = 2 values while it lives.
    let shape = unsafe { std::slice::from_raw_parts(tensor.shape, 2) }.to_vec();
    // SAFETY: as above, for the strides.
    let strides = unsafe { std::slice::from_raw_parts(tensor.strides, 2) }.to_vec();
    let wrapped_data = tensor.data;
    assert_eq!((shape, strides), (vec![2, 2], vec![1, 2]));
    assert_eq!(wrapped_data, data);
    // A legacy consumer calls the deleter itself.
    // SAFETY: `raw` is a live tensor we own.
    let deleter = unsafe { (*raw).deleter }.unwrap();
    // SAFETY: `raw` is live; its deleter is called once.
    unsafe { deleter(raw) };
    assert_eq!(counter.get(), 1);
}

#[test]
fn versioned_to_legacy_dropped_on_our_side() {
    let counter = Counter::new();
    // SAFETY: fresh tensor.
    let t = unsafe { ManagedTensor::from_raw(versioned(&f32_spec(&[3]), &counter)) }.unwrap();
    let raw = t.into_raw_legacy().unwrap();
    // SAFETY: `raw` came from `into_raw_legacy`: ownership comes back.
    let t = unsafe { ManagedTensor::from_raw_legacy(raw) }.unwrap();
    assert!(t.is_legacy());
    assert_eq!(t.shape(), &[3]);
    drop(t);
    assert_eq!(counter.get(), 1);
}

#[test]
fn legacy_to_versioned_dropped_on_either_side() {
    // Dropped by a versioned consumer.
    let counter = Counter::new();
    // SAFETY: fresh tensor.
    let t = unsafe { ManagedTensor::from_raw_legacy(legacy(&f32_spec(&[5]), &counter)) }.unwrap();
    let raw = t.into_raw();
    // SAFETY: `raw` is a live versioned tensor we own.
    let version = unsafe { (*raw).version };
    assert_eq!(version.major, 1);
    // SAFETY: `raw` is a live tensor we own.
    let deleter = unsafe { (*raw).deleter }.unwrap();
    // SAFETY: `raw` is live; its deleter is called once.
    unsafe { deleter(raw) };
    assert_eq!(counter.get(), 1);

    // NULL strides of a legacy producer become explicit C-contiguous strides.
    let counter = Counter::new();
    // SAFETY: fresh tensor.
    let t =
        unsafe { ManagedTensor::from_raw_legacy(legacy(&f32_spec(&[2, 3, 4]), &counter)) }.unwrap();
    assert_eq!(t.strides(), None);
    // SAFETY: ownership comes back from `into_raw`.
    let t = unsafe { ManagedTensor::from_raw(t.into_raw()) }.unwrap();
    assert_eq!(t.strides(), Some(&[12i64, 4, 1][..]));
    drop(t);
    assert_eq!(counter.get(), 1);

    // Dropped by us, after a round trip through both ABIs.
    let counter = Counter::new();
    let original = legacy(&f32_spec(&[5]), &counter);
    // SAFETY: fresh tensor.
    let t = unsafe { ManagedTensor::from_raw_legacy(original) }.unwrap();
    let raw = t.into_raw();
    // SAFETY: ownership comes back from `into_raw`.
    let t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    let back = t.into_raw_legacy().unwrap();
    assert_eq!(
        back, original,
        "the adapter is unwrapped, not wrapped twice"
    );
    // SAFETY: ownership comes back from `into_raw_legacy`.
    drop(unsafe { ManagedTensor::from_raw_legacy(back) }.unwrap());
    assert_eq!(counter.get(), 1);
}

#[test]
fn read_only_is_not_handed_to_legacy_consumers() {
    let counter = Counter::new();
    let mut spec = f32_spec(&[2]);
    spec.flags = dlpack_core::ffi::DLPACK_FLAG_BITMASK_READ_ONLY;
    // SAFETY: fresh tensor.
    let t = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap();
    assert!(t.is_read_only());
    let err = t.into_raw_legacy().unwrap_err();
    assert_eq!(err.to_string(), Error::ReadOnlyLegacy.to_string());
    let t = err.into_tensor();
    assert!(t.is_read_only());
    assert_eq!(counter.get(), 0);
    drop(t);
    assert_eq!(counter.get(), 1);
}

#[test]
fn major_version_two_is_rejected_and_deleted() {
    for major in [0, 2, u32::MAX] {
        let counter = Counter::new();
        let mut spec = f32_spec(&[2]);
        spec.version = DLPackVersion { major, minor: 7 };
        // SAFETY: fresh tensor; only its version and deleter are read.
        let err = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap_err();
        assert_eq!(err, Error::UnsupportedVersion { major, minor: 7 });
        assert_eq!(counter.get(), 1, "deleter of a rejected tensor runs once");
    }
}

#[test]
fn malformed_headers_are_errors_and_deleted() {
    let cases: Vec<(Spec, Error)> = vec![
        (
            {
                let mut s = f32_spec(&[2]);
                s.ndim = Some(-1);
                s
            },
            Error::NegativeNdim { ndim: -1 },
        ),
        (
            {
                let mut s = f32_spec(&[2, 2]);
                s.shape_null = true;
                s
            },
            Error::NullPointer { what: "shape" },
        ),
    ];
    for (spec, expected) in cases {
        let counter = Counter::new();
        // SAFETY: fresh tensor; the malformed fields are the ones `from_raw` checks.
        let err = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap_err();
        assert_eq!(err, expected);
        assert_eq!(counter.get(), 1);
        let counter = Counter::new();
        // SAFETY: as above, legacy.
        let err = unsafe { ManagedTensor::from_raw_legacy(legacy(&spec, &counter)) }.unwrap_err();
        assert_eq!(err, expected);
        assert_eq!(counter.get(), 1);
    }
    let counter = Counter::new();
    let mut spec = f32_spec(&[2, 2]);
    spec.shape_misaligned = true;
    // SAFETY: fresh tensor; the shape pointer is checked before it is read.
    let err = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Misaligned {
                what: "shape",
                align: 8,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(counter.get(), 1);
}

#[test]
fn null_pointer_is_an_error() {
    // SAFETY: NULL is allowed by the contract.
    let err = unsafe { ManagedTensor::from_raw(std::ptr::null_mut()) }.unwrap_err();
    assert_eq!(
        err,
        Error::NullPointer {
            what: "managed tensor"
        }
    );
    // SAFETY: as above.
    let err = unsafe { ManagedTensor::from_raw_legacy(std::ptr::null_mut()) }.unwrap_err();
    assert_eq!(
        err,
        Error::NullPointer {
            what: "managed tensor"
        }
    );
}

#[test]
fn null_deleter_is_never_called() {
    let counter = Counter::new();
    let mut spec = f32_spec(&[2]);
    spec.null_deleter = true;
    let ptr = versioned(&spec, &counter);
    // SAFETY: fresh tensor with a NULL deleter: dropping it does nothing.
    let t = unsafe { ManagedTensor::from_raw(ptr) }.unwrap();
    drop(t);
    assert_eq!(counter.get(), 0);
    // SAFETY: nobody freed it, as the NULL deleter says; we do.
    unsafe { common::free_versioned_without_deleter(ptr) };
}

#[test]
fn drop_on_another_thread() {
    let counter = Counter::new();
    // SAFETY: fresh tensor; our deleter may run on any thread.
    let t = unsafe { ManagedTensor::from_raw(versioned(&f32_spec(&[8]), &counter)) }.unwrap();
    let shape = std::thread::spawn(move || {
        let shape = t.shape().to_vec();
        drop(t);
        shape
    })
    .join()
    .unwrap();
    assert_eq!(shape, [8]);
    assert_eq!(counter.get(), 1);
}

#[test]
fn scalar_with_null_shape_and_strides() {
    let counter = Counter::new();
    let mut spec = Spec::new(&[], DataType::F64.to_raw(), vec![42f64.to_bits()]);
    spec.shape_null = true;
    // SAFETY: fresh tensor; a 0-d tensor may have NULL shape since DLPack 1.3.
    let t = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap();
    assert_eq!(t.ndim(), 0);
    assert_eq!(t.shape(), &[] as &[i64]);
    assert_eq!(t.num_elements(), Ok(1));
    drop(t);
    assert_eq!(counter.get(), 1);
}

#[test]
fn unknown_enum_values_are_representable() {
    let counter = Counter::new();
    let mut spec = f32_spec(&[1]);
    spec.dtype = DLDataType {
        code: DLDataTypeCode(200),
        bits: 12,
        lanes: 3,
    };
    spec.device.device_type = DLDeviceType(99);
    // SAFETY: fresh tensor; unknown codes are plain integers.
    let t = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap();
    assert_eq!(t.dtype().to_string(), "code200_12x3");
    assert_eq!(t.device().to_string(), "device_type99:0");
    assert!(!t.device().is_cpu_accessible());
    drop(t);
    assert_eq!(counter.get(), 1);
}

#[test]
fn display_names() {
    assert_eq!(DataType::F32.to_string(), "float32");
    assert_eq!(DataType::BOOL.to_string(), "bool");
    assert_eq!(DataType::C64.to_string(), "complex64");
    assert_eq!(DataType::BF16.to_string(), "bfloat16");
    assert_eq!(DataType::U8.to_string(), "uint8");
    assert_eq!(
        DataType::new(DLDataTypeCode::kDLFloat8_e4m3fn, 8, 1).to_string(),
        "float8_e4m3fn"
    );
    assert_eq!(
        DataType::new(DLDataTypeCode::kDLFloat, 32, 4).to_string(),
        "float32x4"
    );
    assert_eq!(Device::CPU.to_string(), "cpu:0");
    assert_eq!(Device::new(DLDeviceType::kDLCUDA, 1).to_string(), "cuda:1");
    assert_eq!(
        Device::new(DLDeviceType::kDLCUDAHost, 0).to_string(),
        "cuda_host:0"
    );
}

#[test]
fn from_buffer_owns_and_frees() {
    let t = ManagedTensor::from_buffer(vec![1u16, 2, 3, 4, 5, 6], 0, &[2, 3], &[3, 1]).unwrap();
    assert_eq!(t.shape(), &[2, 3]);
    assert_eq!(t.strides(), Some(&[3i64, 1][..]));
    assert_eq!(t.dtype(), DataType::U16);
    assert_eq!(t.version(), Some(DLPackVersion { major: 1, minor: 3 }));
    // Negative strides rooted at the end of the buffer.
    let t = ManagedTensor::from_buffer(Box::new([1u8, 2, 3]) as Box<[u8]>, 2, &[3], &[-1]).unwrap();
    assert_eq!(t.strides(), Some(&[-1i64][..]));
    // Out of the buffer: refused.
    let err = ManagedTensor::from_buffer(vec![0f32; 5], 0, &[2, 3], &[3, 1]).unwrap_err();
    assert_eq!(err, Error::OutOfBuffer { offset: 0, len: 5 });
    let err = ManagedTensor::from_buffer(vec![0f32; 5], 0, &[2], &[1, 1]).unwrap_err();
    assert_eq!(
        err,
        Error::StridesLength {
            ndim: 1,
            strides: 2
        }
    );
}

#[test]
fn from_owner_drops_the_owner_once() {
    struct Owner(Vec<f64>, Counter);
    impl Drop for Owner {
        fn drop(&mut self) {
            self.1.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let counter = Counter::new();
    let owner = Owner(vec![1.0, 2.0], counter.clone());
    // SAFETY: the pointer is the owner's heap buffer of 2 f64, kept alive by the owner.
    let t = unsafe {
        ManagedTensor::from_owner(
            owner,
            |o| o.0.as_mut_ptr().cast(),
            &[2],
            None,
            DataType::F64,
            Device::CPU,
            0,
        )
    }
    .unwrap();
    assert_eq!(
        t.strides(),
        Some(&[1i64][..]),
        "explicit strides, as DLPack 1.2+ wants"
    );
    let raw = t.into_raw();
    assert_eq!(counter.get(), 0);
    // SAFETY: `raw` is ours again.
    drop(unsafe { ManagedTensor::from_raw(raw) }.unwrap());
    assert_eq!(counter.get(), 1);
}

/// An owner that counts its drops.
struct Dropped(Counter);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn a_panicking_data_callback_drops_the_owner_once() {
    let counter = Counter::new();
    let result = std::panic::catch_unwind(|| {
        // SAFETY: no tensor is made: `data` panics before the header is complete.
        unsafe {
            ManagedTensor::from_owner(
                Dropped(counter.clone()),
                |_| panic!("the owner's data is not ready"),
                &[2],
                None,
                DataType::F64,
                Device::CPU,
                0,
            )
        }
    });
    assert!(result.is_err());
    assert_eq!(counter.get(), 1);
}

#[test]
fn a_buffer_that_changes_length_is_refused_and_dropped() {
    /// A buffer that hands out one element less on every call of `as_mut`.
    struct Shrinking(Vec<u8>, Counter);
    impl AsMut<[u8]> for Shrinking {
        fn as_mut(&mut self) -> &mut [u8] {
            self.0.pop();
            &mut self.0
        }
    }
    impl Drop for Shrinking {
        fn drop(&mut self) {
            self.1.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let counter = Counter::new();
    let err = ManagedTensor::from_buffer(Shrinking(vec![0; 8], counter.clone()), 0, &[4], &[1])
        .unwrap_err();
    assert_eq!(
        err,
        Error::BufferResized {
            before: 7,
            after: 6
        }
    );
    assert_eq!(counter.get(), 1);
}

#[test]
fn an_io_error_of_your_own_converts_with_question_mark_and_reads_as_itself() {
    fn open(path: &std::path::Path) -> dlpack_core::Result<std::fs::File> {
        Ok(std::fs::File::open(path)?)
    }
    let err = open(std::path::Path::new("/nonexistent/dlpack-core-test")).unwrap_err();
    let dlpack_core::Error::Io {
        path,
        kind,
        message,
    } = &err
    else {
        panic!("not an Io error: {err:?}");
    };
    assert_eq!(*kind, std::io::ErrorKind::NotFound);
    assert!(path.as_os_str().is_empty());
    // No path to name: the message alone, never a leading ": ".
    assert_eq!(err.to_string(), *message);
    assert!(!err.to_string().starts_with(':'));
}
