//! ndarray exchange: every rank and layout, our exports and foreign producers.
#![cfg(feature = "ndarray")]

mod common;

use common::{Counter, Spec, buffer_from_bytes, legacy, versioned};
use dlpack_core::ffi::{
    DLDataTypeCode, DLDeviceType, DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY,
};
use dlpack_core::{DLPackArray, DataType, Error, FromDLPack, ManagedTensor, ToDLPack};
use ndarray::{
    ArcArray, Array, Array0, Array1, Array2, Array3, ArrayD, Axis, CowArray, Dimension, Ix0, Ix1,
    Ix2, Ix3, Ix4, Ix5, Ix6, IxDyn, ShapeBuilder, array, s,
};

/// Exports `a`, checks a borrowed view of fixed rank `D` and the reclaimed array.
fn round_trip<D: Dimension + 'static>(a: Array<f32, D>) {
    let expected = a.clone();
    let ptr = a.as_ptr();
    let strides = a.strides().to_vec();
    let t = a.to_dlpack().unwrap();
    assert!(!t.is_read_only() && !t.is_copied());
    assert_eq!(t.byte_offset(), 0);
    assert_eq!(
        t.strides()
            .unwrap_or(&[])
            .iter()
            .map(|&s| s as isize)
            .collect::<Vec<_>>(),
        strides
    );
    let view = t.as_array::<f32, D>().unwrap();
    assert_eq!(view, expected);
    if !expected.is_empty() {
        assert_eq!(view.as_ptr(), ptr, "zero-copy view");
    }
    let dyn_view = t.as_array::<f32, IxDyn>().unwrap();
    assert_eq!(dyn_view, expected.clone().into_dyn());
    let back = Array::<f32, D>::from_dlpack(t).unwrap();
    assert_eq!(back, expected);
    assert_eq!(
        back.as_ptr(),
        ptr,
        "our own export comes back without a copy"
    );
    assert_eq!(back.strides(), expected.strides());
}

fn iota(shape: &[usize]) -> ArrayD<f32> {
    let n = shape.iter().product::<usize>();
    ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(|i| i as f32).collect()).unwrap()
}

#[test]
fn every_rank() {
    round_trip(Array0::from_elem((), 7.0));
    round_trip(Array1::from_vec(vec![1.0, 2.0, 3.0]));
    round_trip(iota(&[2, 3]).into_dimensionality::<Ix2>().unwrap());
    round_trip(iota(&[2, 3, 4]).into_dimensionality::<Ix3>().unwrap());
    round_trip(iota(&[2, 1, 3, 2]).into_dimensionality::<Ix4>().unwrap());
    round_trip(iota(&[1, 2, 1, 3, 2]).into_dimensionality::<Ix5>().unwrap());
    round_trip(
        iota(&[2, 2, 1, 2, 1, 2])
            .into_dimensionality::<Ix6>()
            .unwrap(),
    );
    round_trip(iota(&[2, 1, 2, 1, 2, 1, 2]));
}

#[test]
fn every_layout() {
    let c = iota(&[3, 4]).into_dimensionality::<Ix2>().unwrap();
    // Fortran order.
    round_trip(c.clone().reversed_axes());
    let f = Array2::from_shape_vec((3, 4).f(), (0..12).map(|i| i as f32).collect()).unwrap();
    round_trip(f);
    // Sliced from the front, stepped, and negative strides.
    round_trip(c.clone().slice_move(s![1.., 1..3]));
    round_trip(c.clone().slice_move(s![..;2, ..;3]));
    round_trip(c.clone().slice_move(s![..;-1, ..]));
    round_trip(c.clone().slice_move(s![1..;-2, ..;-3]));
    let mut inverted = c.clone();
    inverted.invert_axis(Axis(1));
    round_trip(inverted);
    // Permuted 3-d.
    round_trip(iota(&[2, 3, 4]).permuted_axes(IxDyn(&[2, 0, 1])));
    // Empty, with and without other extents.
    round_trip(Array2::<f32>::zeros((0, 5)));
    round_trip(Array3::<f32>::zeros((2, 0, 3)));
    round_trip(c.slice_move(s![2..2, ..]));
}

#[test]
fn arc_array_shares_read_only_or_moves_when_unique() {
    let shared: ArcArray<i32, Ix2> = array![[1, 2], [3, 4]].into_shared();
    let keep = shared.clone();
    let mut t = shared.to_dlpack().unwrap();
    assert!(t.is_read_only());
    assert_eq!(t.as_array::<i32, Ix2>().unwrap().as_ptr(), keep.as_ptr());
    assert_eq!(t.as_array_mut::<i32, Ix2>().unwrap_err(), Error::ReadOnly);
    let back = ArcArray::<i32, Ix2>::from_dlpack(t).unwrap();
    assert_eq!(
        back.as_ptr(),
        keep.as_ptr(),
        "shared export comes back shared"
    );
    drop(back);

    // Copy-on-write: mutating our handle leaves the exported buffer alone.
    let t = keep.clone().to_dlpack().unwrap();
    let mut mine = keep;
    mine[[0, 0]] = 100;
    assert_eq!(t.as_array::<i32, Ix2>().unwrap()[[0, 0]], 1);

    let unique: ArcArray<i32, Ix1> = array![5, 6].into_shared();
    let ptr = unique.as_ptr();
    let mut t = unique.to_dlpack().unwrap();
    assert!(!t.is_read_only(), "the only handle moves, writable");
    t.as_array_mut::<i32, Ix1>().unwrap()[0] = 50;
    let back = Array1::<i32>::from_dlpack(t).unwrap();
    assert_eq!((back.as_ptr(), back[0]), (ptr, 50));
}

#[test]
fn views_and_references_are_copied() {
    let a = array![[1.0f64, 2.0], [3.0, 4.0]];
    let t = a.view().to_dlpack().unwrap();
    assert!(t.is_copied());
    assert_eq!(
        t.flags() & DLPACK_FLAG_BITMASK_IS_COPIED,
        DLPACK_FLAG_BITMASK_IS_COPIED
    );
    assert_ne!(t.as_array::<f64, Ix2>().unwrap().as_ptr(), a.as_ptr());
    assert_eq!(t.as_array::<f64, Ix2>().unwrap(), a);
    let t = (&a).to_dlpack().unwrap();
    assert!(t.is_copied());
    let mut b = a.clone();
    let t = b.view_mut().to_dlpack().unwrap();
    assert!(t.is_copied());
    // A reversed view keeps its layout in the copy's values.
    let t = a.slice(s![..;-1, ..]).to_dlpack().unwrap();
    assert_eq!(
        t.as_array::<f64, Ix2>().unwrap(),
        array![[3.0, 4.0], [1.0, 2.0]]
    );
}

#[test]
fn cow_array_by_variant() {
    let a = array![1u8, 2, 3];
    let ptr = a.as_ptr();
    let owned = CowArray::from(a.clone());
    let owned_ptr = owned.as_ptr();
    let t = owned.to_dlpack().unwrap();
    assert!(!t.is_copied());
    assert_eq!(t.as_array::<u8, Ix1>().unwrap().as_ptr(), owned_ptr);
    let t = CowArray::from(a.view()).to_dlpack().unwrap();
    assert!(t.is_copied());
    assert_ne!(t.as_array::<u8, Ix1>().unwrap().as_ptr(), ptr);
}

#[test]
fn unsafe_borrowed_export_shares() {
    let a = array![[1i16, 2, 3], [4, 5, 6]];
    let view = a.slice(s![.., ..;-1]);
    // SAFETY: `a` outlives the tensor, dropped at the end of this block, and is not
    // written meanwhile.
    let t = unsafe { ManagedTensor::from_view_unchecked(view) }.unwrap();
    assert!(t.is_read_only());
    assert_eq!(t.as_array::<i16, Ix2>().unwrap(), view);
    assert_eq!(t.as_array::<i16, Ix2>().unwrap().as_ptr(), view.as_ptr());
}

#[test]
fn dlpack_array_owns_and_lends() {
    let a = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let ptr = a.as_ptr();
    let mut owned = DLPackArray::<f32, Ix2>::new(a.to_dlpack().unwrap()).unwrap();
    assert_eq!(owned.shape(), &[2, 3]);
    owned.view_mut().unwrap()[[1, 2]] = 60.0;
    assert_eq!(owned.view()[[1, 2]], 60.0);
    assert_eq!(owned.view().as_ptr(), ptr);
    let back = owned.into_owned().unwrap();
    assert_eq!(back.as_ptr(), ptr);

    // A foreign tensor: a copy, then the deleter runs once.
    let counter = Counter::new();
    let mut spec = Spec::new(
        &[3],
        DataType::I32.to_raw(),
        buffer_from_bytes(&bytes_i32(&[7, 8, 9])),
    );
    spec.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    // SAFETY: a fresh, honest tensor.
    let t = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap();
    let mut imported = DLPackArray::<i32, Ix1>::try_from(t).unwrap();
    assert_eq!(imported.view_mut().unwrap_err(), Error::ReadOnly);
    let copy = imported.into_owned().unwrap();
    assert_eq!(copy, array![7, 8, 9]);
    assert_eq!(counter.get(), 1);
}

fn bytes_i32(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

fn bytes_f64(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

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

macro_rules! dtype_round_trips {
    ($($name:ident: $ty:ty = $values:expr, $dtype:expr;)*) => {$(
        #[test]
        fn $name() {
            let values: Vec<$ty> = $values;
            let n = values.len();
            let a = Array::from_shape_vec((2, n / 2), values).unwrap();
            let exported = a.clone();
            let ptr = exported.as_ptr();
            let t = exported.to_dlpack().unwrap();
            assert_eq!(t.dtype(), $dtype);
            assert_eq!(t.as_array::<$ty, Ix2>().unwrap(), a);
            let back = Array2::<$ty>::from_dlpack(t).unwrap();
            assert_eq!((back.as_ptr(), &back), (ptr, &a));
            // Transposed, through a copy.
            let t = a.t().to_dlpack().unwrap();
            assert_eq!(t.as_array::<$ty, Ix2>().unwrap(), a.t());
        }
    )*};
}

dtype_round_trips! {
    dtype_i8: i8 = vec![-1, 2, -3, 4], DataType::I8;
    dtype_i16: i16 = vec![-1, 2, -3, 4], DataType::I16;
    dtype_i32: i32 = vec![-1, 2, -3, 4], DataType::I32;
    dtype_i64: i64 = vec![-1, 2, -3, i64::MIN], DataType::I64;
    dtype_u8: u8 = vec![1, 2, 3, 255], DataType::U8;
    dtype_u16: u16 = vec![1, 2, 3, 4], DataType::U16;
    dtype_u32: u32 = vec![1, 2, 3, 4], DataType::U32;
    dtype_u64: u64 = vec![1, 2, 3, u64::MAX], DataType::U64;
    dtype_f32: f32 = vec![1.5, -2.0, 3.25, 4.0], DataType::F32;
    dtype_f64: f64 = vec![1.5, -2.0, 3.25, f64::MAX], DataType::F64;
    dtype_bool: bool = vec![true, false, false, true], DataType::BOOL;
}

#[cfg(feature = "half")]
dtype_round_trips! {
    dtype_f16: half::f16 = [1.0f32, -2.0, 0.5, 65504.0].map(half::f16::from_f32).to_vec(), DataType::F16;
    dtype_bf16: half::bf16 = [1.0f32, -2.0, 0.5, 3.0e38].map(half::bf16::from_f32).to_vec(), DataType::BF16;
}

#[cfg(feature = "complex")]
dtype_round_trips! {
    dtype_c64: num_complex::Complex<f32> = vec![num_complex::Complex::new(1.0, -1.0); 4], DataType::C64;
    dtype_c128: num_complex::Complex<f64> = (0..4).map(|i| num_complex::Complex::new(i as f64, -(i as f64))).collect(), DataType::C128;
}

#[test]
fn fixed_rank_mismatch_does_not_reclaim() {
    let a = array![[1.0f32, 2.0]];
    let t = a.to_dlpack().unwrap();
    let err = Array1::<f32>::from_dlpack(t).unwrap_err();
    assert_eq!(
        err,
        Error::NdimMismatch {
            expected: 1,
            found: 2
        }
    );
    // A dynamic-rank import of a fixed-rank export is still zero-copy.
    let a = array![[1.0f32, 2.0]];
    let ptr = a.as_ptr();
    let back = ArrayD::<f32>::from_dlpack(a.to_dlpack().unwrap()).unwrap();
    assert_eq!(back.as_ptr(), ptr);
    let dyn_a = back.clone();
    let ptr = dyn_a.as_ptr();
    let back = Array2::<f32>::from_dlpack(dyn_a.to_dlpack().unwrap()).unwrap();
    assert_eq!(back.as_ptr(), ptr);
    let _ = Ix0;
}

#[test]
fn reclaim_trusts_the_owner_not_a_rewritten_header() {
    let a = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let raw = a.to_dlpack().unwrap().into_raw();
    // A raw holder rewrites `ndim` (the header is plain writable memory).
    // SAFETY: `raw` is a live tensor we own; `ndim` 1 still describes memory inside it
    // (the first axis: 2 elements with stride 3).
    unsafe { (*raw).dl_tensor.ndim = 1 };
    // SAFETY: ownership comes back; the header is still honest about its memory.
    let t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    // The owner is 2-d, so no 1-d reclaim: a checked copy of what the header says.
    assert_eq!(Array1::<f32>::from_dlpack(t).unwrap(), array![1.0, 4.0]);
}

#[test]
fn from_buffer_vectors_in_standard_layout_come_back_without_a_copy() {
    let values: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let ptr = values.as_ptr();
    let t = ManagedTensor::from_buffer(values, 0, &[2, 3], &[3, 1]).unwrap();
    let a = Array2::<f32>::from_dlpack(t).unwrap();
    assert_eq!(a.as_ptr(), ptr, "the vector moved into the array");
    assert_eq!(a, array![[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]);

    // Any rank type that fits, and strides of extent-1 axes do not matter.
    let values = vec![1u16, 2, 3];
    let ptr = values.as_ptr();
    let t = ManagedTensor::from_buffer(values, 0, &[1, 3], &[99, 1]).unwrap();
    let a = ArrayD::<u16>::from_dlpack(t).unwrap();
    assert_eq!(a.as_ptr(), ptr);
    assert_eq!(a.shape(), [1, 3]);

    // An empty vector.
    let t = ManagedTensor::from_buffer(Vec::<f64>::new(), 0, &[0, 4], &[4, 1]).unwrap();
    assert_eq!(Array2::<f64>::from_dlpack(t).unwrap().dim(), (0, 4));
}

#[test]
fn from_buffer_vectors_in_other_layouts_are_copied() {
    let copied = |t: ManagedTensor, ptr: *const f32| {
        let a = Array2::<f32>::from_dlpack(t).unwrap();
        assert_ne!(a.as_ptr(), ptr);
        a
    };
    let values: Vec<f32> = (0..6).map(|i| i as f32).collect();
    // Column-major.
    let ptr = values.as_ptr();
    let t = ManagedTensor::from_buffer(values.clone(), 0, &[2, 3], &[1, 2]).unwrap();
    assert_eq!(copied(t, ptr), array![[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]);
    // An offset.
    let ptr = values.as_ptr();
    let t = ManagedTensor::from_buffer(values.clone(), 1, &[1, 5], &[5, 1]).unwrap();
    assert_eq!(copied(t, ptr), array![[1.0, 2.0, 3.0, 4.0, 5.0]]);
    // Fewer elements than the vector holds.
    let ptr = values.as_ptr();
    let t = ManagedTensor::from_buffer(values.clone(), 0, &[2, 2], &[2, 1]).unwrap();
    assert_eq!(copied(t, ptr), array![[0.0, 1.0], [2.0, 3.0]]);
    // Another element type or rank is the usual error, not a reclaim.
    let t = ManagedTensor::from_buffer(values.clone(), 0, &[2, 3], &[3, 1]).unwrap();
    assert!(matches!(
        Array2::<f64>::from_dlpack(t),
        Err(Error::DtypeMismatch { .. })
    ));
    let t = ManagedTensor::from_buffer(values, 0, &[2, 3], &[3, 1]).unwrap();
    assert!(matches!(
        Array1::<f32>::from_dlpack(t),
        Err(Error::NdimMismatch { .. })
    ));
}

// DLPackArray's writable views (the read-only view is derived from the mutable one):
// negative strides, extent-1 axes, empty tensors, threads, `assume_exclusive`.

/// A writable 2 x 3 `f64` tensor whose axes are both reversed (strides `[-3, -1]`).
fn neg_spec() -> Spec {
    let mut spec = Spec::new(
        &[2, 3],
        DataType::F64.to_raw(),
        buffer_from_bytes(&bytes_f64(&[0., 1., 2., 3., 4., 5.])),
    );
    spec.strides = Some(vec![-3, -1]);
    spec.data_at = Some(5 * 8);
    spec
}

#[test]
fn dlpack_array_writable_with_negative_strides_reads_and_writes() {
    let counter = Counter::new();
    // SAFETY: a fresh, honest tensor whose memory nothing else uses.
    let t = unsafe { ManagedTensor::from_raw(versioned(&neg_spec(), &counter)) }.unwrap();
    assert!(t.is_exclusive() && !t.is_read_only());
    let mut a = DLPackArray::<f64, Ix2>::new(t).unwrap();
    assert_eq!(a.view(), array![[5., 4., 3.], [2., 1., 0.]]);
    assert_eq!(a.view().strides(), &[-3, -1]);
    let v0 = a.view()[[0, 0]];
    {
        let mut m = a.view_mut().unwrap();
        m[[0, 0]] = 50.0;
        m[[1, 2]] = -1.0;
        let r = &mut m[[0, 1]];
        *r += 1.0;
    }
    let v = a.view();
    let r1 = &v[[0, 0]];
    let v2 = a.view();
    let r2 = &v2[[1, 2]];
    assert_eq!((*r1, *r2, v0), (50.0, -1.0, 5.0));
    {
        let mut m = a.view_mut().unwrap();
        m.fill(7.0);
    }
    assert_eq!(a.view().sum(), 42.0);
    let owned = a.into_owned().unwrap();
    assert_eq!(owned, Array2::from_elem((2, 3), 7.0));
    assert_eq!(counter.get(), 1);
}

#[test]
fn dlpack_array_writable_with_a_reversed_axis_of_extent_one() {
    // shape [1, 3, 2], strides [-6, -2, 1]: axis 0 has len 1 (not inverted).
    let vals: Vec<f64> = (0..6).map(|x| x as f64).collect();
    let mut spec = Spec::new(
        &[1, 3, 2],
        DataType::F64.to_raw(),
        buffer_from_bytes(&bytes_f64(&vals)),
    );
    spec.strides = Some(vec![-6, -2, 1]);
    spec.data_at = Some(4 * 8);
    let counter = Counter::new();
    // SAFETY: a fresh, honest tensor whose memory nothing else uses.
    let t = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap();
    let mut a = DLPackArray::<f64, Ix3>::new(t).unwrap();
    assert_eq!(a.view(), array![[[4., 5.], [2., 3.], [0., 1.]]]);
    a.view_mut().unwrap()[[0, 2, 1]] = 9.0;
    assert_eq!(a.view()[[0, 2, 1]], 9.0);
    let owned = a.into_owned().unwrap();
    assert_eq!(owned[[0, 2, 1]], 9.0);
    drop(owned);
    assert_eq!(counter.get(), 1);
}

#[test]
fn dlpack_array_writable_and_empty() {
    for shape in [[0i64, 3], [3, 0], [0, 0]] {
        let counter = Counter::new();
        let mut spec = Spec::new(&shape, DataType::F64.to_raw(), vec![]);
        spec.data_at = None; // NULL data, allowed when empty
        // SAFETY: a fresh, honest tensor whose memory nothing else uses.
        let t = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap();
        let mut a = DLPackArray::<f64, Ix2>::new(t).unwrap();
        assert_eq!(a.view().len(), 0);
        assert_eq!(a.view().sum(), 0.0);
        assert_eq!(a.view_mut().unwrap().len(), 0);
        let _ = format!("{a:?}");
        let owned = a.into_owned().unwrap();
        assert_eq!(owned.shape(), &[shape[0] as usize, shape[1] as usize]);
        assert_eq!(counter.get(), 1);
    }
    // Our own export of an empty array, reclaimed.
    let e = Array2::<f32>::zeros((0, 4));
    let mut a = DLPackArray::<f32, Ix2>::new(e.to_dlpack().unwrap()).unwrap();
    assert_eq!(a.view().len(), 0);
    let _ = a.view_mut().unwrap();
    let _ = a.into_owned().unwrap();
    // Empty with negative stride.
    let mut spec = Spec::new(&[0, 3], DataType::F64.to_raw(), vec![0]);
    spec.strides = Some(vec![-3, -1]);
    let counter = Counter::new();
    // SAFETY: a fresh, honest tensor whose memory nothing else uses.
    let t = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap();
    let a = DLPackArray::<f64, IxDyn>::new(t).unwrap();
    assert_eq!(a.view().len(), 0);
    drop(a);
    assert_eq!(counter.get(), 1);
}

#[test]
fn dlpack_array_views_from_threads_and_writes_on_another() {
    let counter = Counter::new();
    // SAFETY: a fresh, honest tensor whose memory nothing else uses.
    let t = unsafe { ManagedTensor::from_raw(versioned(&neg_spec(), &counter)) }.unwrap();
    let mut a = DLPackArray::<f64, Ix2>::new(t).unwrap();
    a.view_mut().unwrap()[[0, 0]] = 11.0;
    std::thread::scope(|s| {
        let a = &a;
        let h: Vec<_> = (0..3).map(|_| s.spawn(move || a.view().sum())).collect();
        for h in h {
            assert_eq!(h.join().unwrap(), 11.0 + 4. + 3. + 2. + 1.);
        }
    });
    // Send: moved to another thread, written there.
    let b = std::thread::spawn(move || {
        a.view_mut().unwrap()[[1, 1]] = 100.0;
        a
    })
    .join()
    .unwrap();
    assert_eq!(b.view()[[1, 1]], 100.0);
    drop(b);
    assert_eq!(counter.get(), 1);
}

#[test]
fn dlpack_array_assume_exclusive_then_views() {
    let counter = Counter::new();
    // SAFETY: a fresh, honest tensor.
    let t = unsafe { ManagedTensor::from_raw_shared(versioned(&neg_spec(), &counter)) }.unwrap();
    let mut a = DLPackArray::<f64, Ix2>::new(t).unwrap();
    let before = a.view();
    let x = before[[0, 0]];
    assert_eq!(a.view_mut().unwrap_err(), Error::NotExclusive);
    // SAFETY: nothing else holds the test's buffer; the first view is not used again.
    unsafe { a.assume_exclusive() }.unwrap();
    // SAFETY: as above (a second call changes nothing).
    unsafe { a.assume_exclusive() }.unwrap();
    a.view_mut().unwrap()[[0, 0]] = x + 1.0;
    assert_eq!(a.view()[[0, 0]], 6.0);
    assert_eq!(a.view(), array![[6., 4., 3.], [2., 1., 0.]]);
    drop(a);
    assert_eq!(counter.get(), 1);
    // Overlapping strides: assume_exclusive fails, views stay read-only.
    let mut spec = Spec::new(
        &[2, 3],
        DataType::F64.to_raw(),
        buffer_from_bytes(&bytes_f64(&[1., 2., 3.])),
    );
    spec.strides = Some(vec![0, 1]);
    let counter = Counter::new();
    // SAFETY: a fresh, honest tensor.
    let t = unsafe { ManagedTensor::from_raw_shared(versioned(&spec, &counter)) }.unwrap();
    let mut a = DLPackArray::<f64, Ix2>::new(t).unwrap();
    // SAFETY: nothing else holds the test's buffer.
    let refused = unsafe { a.assume_exclusive() }.unwrap_err();
    assert_eq!(refused, Error::OverlappingStrides);
    assert_eq!(a.view_mut().unwrap_err(), Error::NotExclusive);
    // Unchanged: the tensor is still shared.
    assert!(!a.tensor().is_exclusive());
    assert_eq!(a.view().sum(), 12.0);
    let o = a.into_owned().unwrap();
    assert_eq!(o.sum(), 12.0);
}

#[test]
fn dlpack_array_of_our_reversed_slice_writes_and_comes_back() {
    let a = Array2::from_shape_fn((4, 5), |(i, j)| (i * 5 + j) as f32);
    let sl = a.slice_move(s![..;-1, 1..;-2]);
    let expected = sl.to_owned();
    let mut d = DLPackArray::<f32, Ix2>::new(sl.to_dlpack().unwrap()).unwrap();
    assert_eq!(d.view(), expected);
    d.view_mut().unwrap()[[0, 0]] = -5.0;
    let v = d.view();
    assert_eq!(v[[0, 0]], -5.0);
    let back = d.into_owned().unwrap();
    assert_eq!(back[[0, 0]], -5.0);
}
