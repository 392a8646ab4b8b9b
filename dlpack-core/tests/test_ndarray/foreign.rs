//! Foreign producers: negative strides, copies into standard layout, every check of a
//! foreign header, bool bytes and unknown dtype codes.

use dlpack_core::ffi::{DLDataTypeCode, DLDeviceType, DLPACK_FLAG_BITMASK_READ_ONLY};
use dlpack_core::{DataType, Error, FromDLPack, ManagedTensor, ToDLPack};
use ndarray::{ArcArray, Array2, Ix1, Ix2, Ix3, IxDyn, array};

use super::common::{Counter, Spec, buffer_from_bytes, legacy, versioned};
use super::{bytes_f64, bytes_i32};

/// Imports a foreign tensor; returns the result of `f` and checks the deleter ran once.
fn with_foreign<R>(spec: &Spec, f: impl FnOnce(&mut ManagedTensor) -> R) -> R {
    let counter = Counter::new();
    // SAFETY: tests build honest tensors: every element they describe is in the buffer.
    let mut t = unsafe { ManagedTensor::from_raw(versioned(spec, &counter)) }.unwrap();
    let r = f(&mut t);
    drop(t);
    assert_eq!(counter.get(), 1);
    r
}

#[test]
fn foreign_negative_strides() {
    // NumPy's `np.arange(6).reshape(2, 3)[::-1, ::-1]`: data points at the last element.
    let mut spec = Spec::new(
        &[2, 3],
        DataType::F64.to_raw(),
        buffer_from_bytes(&bytes_f64(&[0., 1., 2., 3., 4., 5.])),
    );
    spec.strides = Some(vec![-3, -1]);
    spec.data_at = Some(5 * 8);
    with_foreign(&spec, |t| {
        let v = t.as_array::<f64, Ix2>().unwrap();
        assert_eq!(v, array![[5., 4., 3.], [2., 1., 0.]]);
        assert_eq!(v.strides(), &[-3, -1]);
        assert_eq!(v.as_ptr() as usize, t.data() as usize);
        let mut m = t.as_array_mut::<f64, Ix2>().unwrap();
        m[[0, 0]] = 50.0;
        assert_eq!(t.as_array::<f64, IxDyn>().unwrap()[[0, 0]], 50.0);
        let owned = Array2::<f64>::from_dlpack(
            // Copy via a borrowed view of this tensor's data.
            t.as_array::<f64, Ix2>().unwrap().to_dlpack().unwrap(),
        )
        .unwrap();
        assert!(owned.is_standard_layout());
    });
    // Through `byte_offset` instead of the data pointer.
    spec.data_at = Some(0);
    spec.byte_offset = 5 * 8;
    with_foreign(&spec, |t| {
        assert_eq!(
            t.as_array::<f64, Ix2>().unwrap(),
            array![[5., 4., 3.], [2., 1., 0.]]
        );
    });
}

#[test]
fn foreign_copies_into_standard_layout() {
    let mut spec = Spec::new(
        &[2, 3],
        DataType::I32.to_raw(),
        buffer_from_bytes(&bytes_i32(&[0, 1, 2, 3, 4, 5])),
    );
    spec.strides = Some(vec![1, 2]);
    let counter = Counter::new();
    // SAFETY: honest tensor.
    let t = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap();
    let a = Array2::<i32>::from_dlpack(t).unwrap();
    assert_eq!(counter.get(), 1, "consumed and deleted");
    assert!(a.is_standard_layout());
    assert_eq!(a, array![[0, 2, 4], [1, 3, 5]]);
    // Legacy too.
    let counter = Counter::new();
    // SAFETY: honest tensor.
    let t = unsafe { ManagedTensor::from_raw_legacy(legacy(&spec, &counter)) }.unwrap();
    let a = ArcArray::<i32, IxDyn>::from_dlpack(t).unwrap();
    assert_eq!(counter.get(), 1);
    assert_eq!(a, array![[0, 2, 4], [1, 3, 5]].into_dyn());
}

#[test]
fn foreign_checks() {
    let base = || {
        Spec::new(
            &[2, 2],
            DataType::F32.to_raw(),
            buffer_from_bytes(&[0u8; 16]),
        )
    };
    let f32_2d = |t: &mut ManagedTensor| t.as_array::<f32, Ix2>().map(|v| v.to_owned());

    // NULL strides: C-contiguous.
    with_foreign(&base(), |t| {
        assert_eq!(f32_2d(t).unwrap().strides(), &[2, 1])
    });
    // dtype, lanes, rank, device.
    assert!(matches!(
        with_foreign(&base(), |t| t.as_array::<i32, Ix2>().map(|_| ())),
        Err(Error::DtypeMismatch { .. })
    ));
    let mut s = base();
    s.dtype.lanes = 4;
    assert!(matches!(
        with_foreign(&s, f32_2d),
        Err(Error::UnsupportedLanes { .. })
    ));
    assert_eq!(
        with_foreign(&base(), |t| t.as_array::<f32, Ix3>().map(|_| ())),
        Err(Error::NdimMismatch {
            expected: 3,
            found: 2
        })
    );
    let mut s = base();
    s.device.device_type = DLDeviceType::kDLCUDA;
    assert!(matches!(
        with_foreign(&s, f32_2d),
        Err(Error::UnsupportedDevice { .. })
    ));
    for host in [
        DLDeviceType::kDLCUDAHost,
        DLDeviceType::kDLROCMHost,
        DLDeviceType::kDLCUDAManaged,
    ] {
        let mut s = base();
        s.device.device_type = host;
        assert!(
            with_foreign(&s, f32_2d).is_ok(),
            "{host:?} is CPU-accessible"
        );
    }
    // Data pointer: NULL with elements, misaligned.
    let mut s = base();
    s.data_at = None;
    assert_eq!(
        with_foreign(&s, f32_2d),
        Err(Error::NullData { elements: 4 })
    );
    let mut s = base();
    s.byte_offset = 2;
    assert!(matches!(
        with_foreign(&s, f32_2d),
        Err(Error::Misaligned {
            what: "data",
            align: 4,
            ..
        })
    ));
    // Negative extent and overflow.
    let mut s = base();
    s.shape = vec![2, -2];
    assert_eq!(
        with_foreign(&s, f32_2d),
        Err(Error::NegativeExtent {
            axis: 1,
            extent: -2
        })
    );
    let mut s = base();
    s.strides = Some(vec![i64::MAX / 2, 1]);
    assert!(matches!(
        with_foreign(&s, f32_2d),
        Err(Error::Overflow { .. })
    ));
    // Negative stride that would walk below address 0.
    let mut s = base();
    s.strides = Some(vec![-(1 << 60), 1]);
    s.data_at = Some(0);
    assert!(matches!(
        with_foreign(&s, f32_2d),
        Err(Error::Overflow { .. })
    ));
    // NULL data is fine when empty, with any strides.
    let mut s = base();
    s.shape = vec![0, 3];
    s.strides = Some(vec![i64::MIN, i64::MAX]);
    s.data_at = None;
    assert_eq!(with_foreign(&s, f32_2d).unwrap().dim(), (0, 3));
    // Extent-1 axes: their strides are ignored.
    let mut s = base();
    s.shape = vec![1, 4];
    s.strides = Some(vec![i64::MIN, 1]);
    assert_eq!(with_foreign(&s, f32_2d).unwrap().dim(), (1, 4));
    // Broadcast (stride 0) is a fine read-only view, but not a mutable one.
    let mut s = base();
    s.strides = Some(vec![0, 1]);
    assert!(with_foreign(&s, f32_2d).is_ok());
    assert_eq!(
        with_foreign(&s, |t| t.as_array_mut::<f32, Ix2>().map(|_| ())),
        Err(Error::OverlappingStrides)
    );
    // READ_ONLY refuses mutable views.
    let mut s = base();
    s.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    assert_eq!(
        with_foreign(&s, |t| t.as_array_mut::<f32, Ix2>().map(|_| ())),
        Err(Error::ReadOnly)
    );
}

#[test]
fn bool_bytes_are_checked() {
    let bool_spec = |bytes: &[u8]| {
        Spec::new(
            &[bytes.len() as i64],
            DataType::BOOL.to_raw(),
            buffer_from_bytes(bytes),
        )
    };
    with_foreign(&bool_spec(&[0, 1, 1, 0]), |t| {
        assert_eq!(
            t.as_array::<bool, Ix1>().unwrap(),
            array![false, true, true, false]
        );
    });
    let err = with_foreign(&bool_spec(&[0, 1, 2, 1]), |t| {
        t.as_array::<bool, Ix1>().map(|_| ())
    })
    .unwrap_err();
    assert_eq!(err, Error::InvalidBool { index: 2, byte: 2 });
    let err = with_foreign(&bool_spec(&[0, 255]), |t| {
        t.as_array_mut::<bool, Ix1>().map(|_| ())
    })
    .unwrap_err();
    assert_eq!(
        err,
        Error::InvalidBool {
            index: 1,
            byte: 255
        }
    );
    // Reading it as bytes is fine.
    assert_eq!(
        with_foreign(
            &{
                let mut s = bool_spec(&[2]);
                s.dtype = DataType::U8.to_raw();
                s
            },
            |t| t.as_array::<u8, Ix1>().unwrap()[0]
        ),
        2
    );
    // Logical index, not memory index, with a negative stride.
    let mut s = bool_spec(&[3, 0, 0]);
    s.strides = Some(vec![-1]);
    s.data_at = Some(2);
    let err = with_foreign(&s, |t| t.as_array::<bool, Ix1>().map(|_| ())).unwrap_err();
    assert_eq!(err, Error::InvalidBool { index: 2, byte: 3 });
    // Our own bool export round trips.
    let a = array![[true, false], [false, true]];
    let t = a.clone().to_dlpack().unwrap();
    assert_eq!(t.dtype(), DataType::BOOL);
    assert_eq!(Array2::<bool>::from_dlpack(t).unwrap(), a);
}

#[test]
fn unknown_dtype_codes_are_mismatches() {
    let mut s = Spec::new(&[2], DataType::F32.to_raw(), buffer_from_bytes(&[0u8; 8]));
    s.dtype.code = DLDataTypeCode::kDLFloat8_e4m3fn;
    s.dtype.bits = 8;
    let err = with_foreign(&s, |t| t.as_array::<u8, Ix1>().map(|_| ())).unwrap_err();
    assert_eq!(
        err.to_string(),
        "dtype mismatch: expected uint8, found float8_e4m3fn"
    );
}
