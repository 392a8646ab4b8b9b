//! tch ↔ ManagedTensor: zero-copy by pointer equality, exactly-once deleters by counting,
//! values compared with what libtorch itself reads, hostile headers refused with typed
//! errors.

#[path = "../../dlpack-core/tests/common/mod.rs"]
mod common;

use std::sync::atomic::Ordering;

use common::{Counter, Spec, buffer_from_bytes, versioned};
use dlpack_core::ffi::{DLDataType, DLDataTypeCode, DLDeviceType, DLPACK_FLAG_BITMASK_READ_ONLY};
use dlpack_core::{DataType, Device, Error, FromDLPack, ManagedTensor, ToDLPack};
use dlpack_tch::{ManagedTensorExt, TensorExt, dlpack_device, tch_device};
use half::{bf16, f16};
use ndarray::{Array, Array0, Array1, Array2, Array3, ArrayD, Ix1, Ix2, IxDyn, ShapeBuilder, s};
use num_complex::Complex;
use tch::{Kind, Tensor};

/// An owner of elements that counts its drops (the deleter of `from_buffer` tensors).
struct Counted<T> {
    data: Vec<T>,
    counter: Counter,
}

impl<T> AsMut<[T]> for Counted<T> {
    fn as_mut(&mut self) -> &mut [T] {
        &mut self.data
    }
}

impl<T> Drop for Counted<T> {
    fn drop(&mut self) {
        self.counter.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counted_f32(n: usize) -> (Vec<f32>, Counter) {
    ((0..n).map(|i| i as f32).collect(), Counter::new())
}

/// What libtorch reads, in logical (row-major) order.
fn torch_values<T: tch::kind::Element + Copy>(t: &Tensor) -> Vec<T> {
    Vec::<T>::try_from(&t.flatten(0, -1)).expect("libtorch reads the tensor")
}

fn spec_f32(values: &[f32], shape: &[i64]) -> Spec {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    Spec::new(shape, DataType::F32.to_raw(), buffer_from_bytes(&bytes))
}

fn foreign(spec: &Spec) -> (ManagedTensor, Counter) {
    let counter = Counter::new();
    // SAFETY:
    // - `versioned` allocates a well-formed header over its own buffer, with a deleter
    //   that frees it once; the specs used here describe memory inside the buffer.
    let tensor = unsafe { ManagedTensor::from_raw(versioned(spec, &counter)) }.unwrap();
    (tensor, counter)
}

fn is_torch_error(err: &Error, needle: &str) -> bool {
    matches!(err, Error::Framework { framework: "torch", message }
        if message.contains(needle) && !message.contains('\n'))
}

#[test]
fn ndarray_to_torch_narrow_and_back_keeps_the_pointer_and_deletes_once() {
    let (data, counter) = counted_f32(12);
    let owner = Counted {
        data,
        counter: counter.clone(),
    };
    let managed = ManagedTensor::from_buffer(owner, 0, &[4, 3], &[3, 1]).unwrap();
    let ptr = managed.data().cast::<f32>();
    let t = managed.into_tch().unwrap();
    assert_eq!(
        t.data_ptr().cast::<f32>(),
        ptr,
        "ndarray -> torch moved no data"
    );
    assert_eq!(t.size(), [4, 3]);
    assert_eq!(
        torch_values::<f32>(&t),
        (0..12).map(|i| i as f32).collect::<Vec<_>>()
    );

    let rows = t.narrow(0, 1, 2);
    drop(t);
    assert_eq!(
        counter.get(),
        0,
        "the narrowed view keeps the storage alive"
    );
    let back = rows.into_managed().unwrap();
    // A torch view keeps its base tensor (autograd's view tracking), which also holds
    // the storage: the export is shared, read-only in Rust.
    assert!(!back.is_exclusive());
    assert_eq!(counter.get(), 0);
    {
        let view = back.as_array::<f32, Ix2>().unwrap();
        assert_eq!(
            view.as_ptr(),
            ptr.wrapping_add(3),
            "torch -> ndarray moved no data"
        );
        assert_eq!(
            view,
            Array2::from_shape_fn((2, 3), |(i, j)| ((i + 1) * 3 + j) as f32)
        );
    }
    drop(back);
    assert_eq!(
        counter.get(),
        1,
        "the original deleter ran once, after the last view"
    );
}

#[test]
fn an_owned_array_round_trips_through_torch_without_a_copy() {
    let a = Array2::<f64>::from_shape_fn((3, 5), |(i, j)| (i * 5 + j) as f64);
    let ptr = a.as_ptr();
    let t = a.to_dlpack().unwrap().into_tch().unwrap();
    assert_eq!(t.kind(), Kind::Double);
    assert_eq!(t.data_ptr().cast::<f64>().cast_const(), ptr);
    let t = t * 2.0; // torch computes on it, into a new tensor
    let doubled = Array2::<f64>::from_dlpack(t.into_managed().unwrap()).unwrap();
    assert_eq!(doubled[[2, 4]], 28.0);

    // Writes in Rust are seen by torch, and the other way around.
    let b = Array1::<i32>::from(vec![1, 2, 3]);
    let t = b.to_dlpack().unwrap().into_tch().unwrap();
    let _ = t.shallow_clone().g_mul_scalar_(10);
    let mut managed = t.into_managed().unwrap();
    assert!(managed.is_exclusive());
    managed.as_array_mut::<i32, Ix1>().unwrap()[0] = 7;
    let t = managed.into_tch().unwrap();
    assert_eq!(torch_values::<i32>(&t), [7, 20, 30]);
}

/// A torch tensor over memory that torch did not allocate (here a Rust vector, as
/// `from_numpy` lends NumPy's) is shared even when torch holds it alone: its owner can
/// still write it.
#[test]
fn exports_of_memory_torch_borrows_are_shared() {
    let mut data = vec![1.0f32, 2.0, 3.0];
    // SAFETY: `data` outlives the tensor and its export (both dropped below, first).
    let t = unsafe {
        Tensor::from_blob(
            data.as_mut_ptr().cast(),
            &[3],
            &[1],
            Kind::Float,
            tch::Device::Cpu,
        )
    };
    let mut managed = t.into_managed().unwrap();
    assert!(
        !managed.is_exclusive(),
        "the vector still reaches the memory"
    );
    assert!(matches!(
        managed.as_array_mut::<f32, Ix1>(),
        Err(Error::NotExclusive)
    ));
    assert_eq!(
        managed.as_array::<f32, Ix1>().unwrap().to_vec(),
        [1.0, 2.0, 3.0]
    );
    drop(managed);
    data[0] = 0.0;

    // Memory torch's allocator made, and an exclusive tensor handed to torch without a
    // copy, stay exclusive.
    let made = Tensor::zeros([2], (Kind::Float, tch::Device::Cpu));
    assert!(made.into_managed().unwrap().is_exclusive());
    let lent = Array1::<f32>::zeros(2)
        .to_dlpack()
        .unwrap()
        .into_tch()
        .unwrap();
    assert!(lent.into_managed().unwrap().is_exclusive());
}

#[test]
fn exports_of_tensors_that_torch_still_reaches_are_shared() {
    let t = Tensor::arange(6, (Kind::Float, tch::Device::Cpu)).view([2, 3]);
    let mut shared = t.to_managed().unwrap();
    assert!(!shared.is_exclusive());
    assert_eq!(shared.data(), t.data_ptr());
    assert!(matches!(
        shared.as_array_mut::<f32, Ix2>(),
        Err(Error::NotExclusive)
    ));
    assert_eq!(
        shared.as_array::<f32, Ix2>().unwrap(),
        Array2::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f32)
    );

    // A handle kept elsewhere (here a shallow clone) makes `into_managed` shared too.
    let other = t.shallow_clone();
    let managed = t.into_managed().unwrap();
    assert!(!managed.is_exclusive());
    drop(other);

    // The storage outlives every torch handle while the export lives.
    let t = Tensor::from_slice(&[1.5f32, 2.5]);
    let ptr = t.data_ptr();
    let managed = t.into_managed().unwrap();
    assert!(managed.is_exclusive());
    assert_eq!(managed.data(), ptr);
    assert_eq!(managed.as_array::<f32, Ix1>().unwrap().to_vec(), [1.5, 2.5]);

    // A shared tensor handed to torch is copied (torch tensors are writable).
    let shared_data = shared.data();
    let copy = shared.into_tch().unwrap();
    assert_ne!(copy.data_ptr(), shared_data);
    assert_eq!(torch_values::<f32>(&copy), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
}

macro_rules! dtype_round_trip {
    ($name:ident, $ty:ty, $kind:expr, $dtype:expr, $make:expr) => {
        #[test]
        fn $name() {
            let make: fn(usize) -> $ty = $make;
            let a = Array2::<$ty>::from_shape_fn((2, 3), |(i, j)| make(i * 3 + j));
            let expected: Vec<$ty> = a.iter().cloned().collect();
            let ptr = a.as_ptr();
            let t = a.to_dlpack().unwrap().into_tch().unwrap();
            assert_eq!(t.kind(), $kind);
            assert_eq!(t.data_ptr().cast::<$ty>().cast_const(), ptr);
            let managed = t.into_managed().unwrap();
            assert_eq!(managed.dtype(), $dtype);
            let back = Array2::<$ty>::from_dlpack(managed).unwrap();
            assert_eq!(back.iter().cloned().collect::<Vec<_>>(), expected);

            // From torch: a tensor libtorch made, read in place.
            let t = Tensor::arange(6, (Kind::Int64, tch::Device::Cpu)).to_kind($kind);
            let managed = t.to_managed().unwrap();
            assert_eq!(managed.dtype(), $dtype);
            assert_eq!(managed.data(), t.data_ptr());
            assert_eq!(managed.as_array::<$ty, Ix1>().unwrap().len(), 6);
        }
    };
}

dtype_round_trip!(dtype_u8, u8, Kind::Uint8, DataType::U8, |i| i as u8);
dtype_round_trip!(dtype_i8, i8, Kind::Int8, DataType::I8, |i| i as i8 - 3);
dtype_round_trip!(dtype_i16, i16, Kind::Int16, DataType::I16, |i| i as i16
    * -300);
dtype_round_trip!(dtype_i32, i32, Kind::Int, DataType::I32, |i| i as i32
    * -70000);
dtype_round_trip!(dtype_i64, i64, Kind::Int64, DataType::I64, |i| i as i64
    * -(1 << 40));
dtype_round_trip!(
    dtype_f16,
    f16,
    Kind::Half,
    DataType::F16,
    |i| f16::from_f32(i as f32 / 4.0)
);
dtype_round_trip!(dtype_bf16, bf16, Kind::BFloat16, DataType::BF16, |i| {
    bf16::from_f32(i as f32 * 3.0)
});
dtype_round_trip!(dtype_f32, f32, Kind::Float, DataType::F32, |i| i as f32
    - 2.5);
dtype_round_trip!(dtype_f64, f64, Kind::Double, DataType::F64, |i| i as f64
    * 1e300);
dtype_round_trip!(dtype_bool, bool, Kind::Bool, DataType::BOOL, |i| i % 2 == 1);
dtype_round_trip!(
    dtype_c64,
    Complex<f32>,
    Kind::ComplexFloat,
    DataType::C64,
    |i| Complex::new(i as f32, -(i as f32))
);
dtype_round_trip!(
    dtype_c128,
    Complex<f64>,
    Kind::ComplexDouble,
    DataType::C128,
    |i| Complex::new(-(i as f64), i as f64 / 8.0)
);

#[test]
fn values_match_what_libtorch_reads() {
    let a = Array2::<f32>::from_shape_fn((3, 4), |(i, j)| (i * 10 + j) as f32);
    let t = a.clone().to_dlpack().unwrap().into_tch().unwrap();
    assert_eq!(
        torch_values::<f32>(&t),
        a.iter().cloned().collect::<Vec<_>>()
    );
    let halves = Array1::from_iter((0..5).map(|i| f16::from_f32(i as f32 * 0.5)));
    let t = halves.clone().to_dlpack().unwrap().into_tch().unwrap();
    assert_eq!(torch_values::<f16>(&t), halves.to_vec());
    let flags = Array1::from(vec![true, false, true]);
    let t = flags.to_dlpack().unwrap().into_tch().unwrap();
    assert_eq!(torch_values::<bool>(&t), [true, false, true]);
    let z = Array1::from(vec![Complex::new(1.0f64, 2.0), Complex::new(-3.0, 4.5)]);
    let t = z.to_dlpack().unwrap().into_tch().unwrap();
    assert_eq!(torch_values::<f64>(&t.real()), [1.0, -3.0]);
    assert_eq!(torch_values::<f64>(&t.imag()), [2.0, 4.5]);
}

/// Each layout reaches torch with the same pointer, shape, strides and values.
fn check_layout<D: ndarray::Dimension + 'static>(a: Array<f32, D>) {
    let expected: Vec<f32> = a.iter().cloned().collect();
    let shape: Vec<i64> = a.shape().iter().map(|&n| n as i64).collect();
    let strides: Vec<i64> = a.strides().iter().map(|&s| s as i64).collect();
    let ptr = a.as_ptr();
    let t = a.to_dlpack().unwrap().into_tch().unwrap();
    assert_eq!(t.size(), shape);
    if t.numel() > 1 {
        assert_eq!(t.data_ptr().cast::<f32>().cast_const(), ptr);
        let torch_strides = t.stride();
        for (axis, (&n, (&ours, &theirs))) in shape
            .iter()
            .zip(strides.iter().zip(&torch_strides))
            .enumerate()
        {
            if n > 1 {
                assert_eq!(ours, theirs, "stride of axis {axis}");
            }
        }
    }
    assert_eq!(torch_values::<f32>(&t), expected);
}

#[test]
fn layouts_c_f_sliced_transposed_0d_and_empty() {
    check_layout(Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f32));
    check_layout(Array2::from_shape_fn((3, 4).f(), |(i, j)| {
        (i * 4 + j) as f32
    }));
    check_layout(
        Array3::from_shape_fn((4, 5, 6), |(i, j, k)| (i * 30 + j * 6 + k) as f32)
            .slice_move(s![1..3, ..;2, 3..]),
    );
    check_layout(Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f32).reversed_axes());
    check_layout(
        ArrayD::from_shape_fn(IxDyn(&[2, 3, 4]), |i| {
            (i[0] * 100 + i[1] * 10 + i[2]) as f32
        })
        .permuted_axes(IxDyn(&[2, 0, 1])),
    );
    check_layout(Array0::from_elem((), 4.5f32));
    check_layout(Array2::<f32>::zeros((0, 3)));
    check_layout(Array3::<f32>::zeros((2, 0, 3)));
}

#[test]
fn negative_strides_are_refused_and_the_deleter_runs_once() {
    let (data, counter) = counted_f32(6);
    let owner = Counted {
        data,
        counter: counter.clone(),
    };
    let reversed = ManagedTensor::from_buffer(owner, 5, &[6], &[-1]).unwrap();
    let err = reversed.into_tch().unwrap_err();
    assert!(is_torch_error(&err, "negative"), "{err}");
    assert_eq!(counter.get(), 1);
}

#[test]
fn byte_offset_is_folded_into_the_pointer() {
    let mut spec = spec_f32(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 2]);
    spec.byte_offset = 8;
    let (tensor, counter) = foreign(&spec);
    let base = tensor.data().cast::<u8>();
    let t = tensor.into_tch().unwrap();
    assert_eq!(t.data_ptr().cast::<u8>(), base.wrapping_add(8));
    assert_eq!(torch_values::<f32>(&t), [2.0, 3.0, 4.0, 5.0]);
    assert_eq!(counter.get(), 0);
    drop(t);
    assert_eq!(counter.get(), 1);
}

#[test]
fn read_only_and_shared_tensors_are_copied_once() {
    let mut spec = spec_f32(&[1.0, 2.0, 3.0], &[3]);
    spec.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    let (tensor, counter) = foreign(&spec);
    let data = tensor.data();
    let t = tensor.into_tch().unwrap();
    assert_ne!(
        t.data_ptr(),
        data,
        "a read-only tensor never reaches torch writable"
    );
    assert_eq!(counter.get(), 1, "the original was released after the copy");
    assert_eq!(torch_values::<f32>(&t), [1.0, 2.0, 3.0]);
    let _ = t.shallow_clone().fill_(0.0);
    drop(t);
    assert_eq!(counter.get(), 1);

    let spec = spec_f32(&[4.0, 5.0], &[2]);
    let counter = Counter::new();
    // SAFETY: as in `foreign`.
    let shared = unsafe { ManagedTensor::from_raw_shared(versioned(&spec, &counter)) }.unwrap();
    let data = shared.data();
    let t = shared.into_tch().unwrap();
    assert_ne!(t.data_ptr(), data);
    assert_eq!(counter.get(), 1);
    assert_eq!(torch_values::<f32>(&t), [4.0, 5.0]);
}

#[test]
fn libtorch_errors_are_typed_one_line_and_the_deleter_runs_once() {
    // A dtype torch does not have: 24-bit unsigned integers.
    let mut spec = Spec::new(
        &[2],
        DLDataType {
            code: DLDataTypeCode::kDLUInt,
            bits: 24,
            lanes: 1,
        },
        buffer_from_bytes(&[0; 6]),
    );
    spec.strides = Some(vec![1]);
    let (tensor, counter) = foreign(&spec);
    let err = tensor.into_tch().unwrap_err();
    assert!(
        matches!(err, Error::Framework { framework: "torch", ref message } if !message.contains('\n')),
        "{err}"
    );
    assert_eq!(counter.get(), 1);

    // Vector lanes.
    let spec = Spec::new(
        &[2],
        DLDataType {
            code: DLDataTypeCode::kDLFloat,
            bits: 32,
            lanes: 4,
        },
        buffer_from_bytes(&[0; 32]),
    );
    let (tensor, counter) = foreign(&spec);
    assert!(matches!(tensor.into_tch(), Err(Error::Framework { .. })));
    assert_eq!(counter.get(), 1);

    // A device type nobody has.
    let mut spec = spec_f32(&[1.0], &[1]);
    spec.device.device_type = DLDeviceType(99);
    let (tensor, counter) = foreign(&spec);
    let err = tensor.into_tch().unwrap_err();
    assert!(matches!(err, Error::Framework { .. }), "{err}");
    assert_eq!(counter.get(), 1);
}

#[test]
fn invalid_layouts_never_reach_libtorch() {
    // bool bytes other than 0 and 1.
    let spec = Spec::new(&[3], DataType::BOOL.to_raw(), buffer_from_bytes(&[1, 2, 0]));
    let (tensor, counter) = foreign(&spec);
    assert!(matches!(
        tensor.into_tch(),
        Err(Error::InvalidBool { byte: 2, .. })
    ));
    assert_eq!(counter.get(), 1);

    // Misaligned data.
    let mut spec = spec_f32(&[1.0, 2.0], &[1]);
    spec.byte_offset = 2;
    let (tensor, counter) = foreign(&spec);
    assert!(matches!(tensor.into_tch(), Err(Error::Misaligned { .. })));
    assert_eq!(counter.get(), 1);

    // NULL data with elements.
    let mut spec = spec_f32(&[1.0], &[1]);
    spec.data_at = None;
    let (tensor, counter) = foreign(&spec);
    assert!(matches!(
        tensor.into_tch(),
        Err(Error::NullData { elements: 1 })
    ));
    assert_eq!(counter.get(), 1);

    // A span past the address space.
    let mut spec = spec_f32(&[1.0], &[2, 2]);
    spec.strides = Some(vec![1 << 62, 1]);
    let (tensor, counter) = foreign(&spec);
    assert!(matches!(tensor.into_tch(), Err(Error::Overflow { .. })));
    assert_eq!(counter.get(), 1);

    // A byte offset and a span that each fit, but not together: torch's storage would
    // start at `data` and reach past `isize::MAX` bytes.
    let mut spec = spec_f32(&[1.0], &[1 << 60]);
    spec.byte_offset = 1 << 62;
    let (tensor, counter) = foreign(&spec);
    assert!(matches!(tensor.into_tch(), Err(Error::Overflow { .. })));
    assert_eq!(counter.get(), 1);

    // Negative extents.
    let spec = spec_f32(&[1.0], &[-1]);
    let (tensor, counter) = foreign(&spec);
    assert!(matches!(
        tensor.into_tch(),
        Err(Error::NegativeExtent { .. })
    ));
    assert_eq!(counter.get(), 1);
}

#[test]
fn a_huge_broadcast_tensor_is_a_view_of_one_element() {
    let mut spec = spec_f32(&[7.0], &[1 << 31, 1 << 31]);
    spec.strides = Some(vec![0, 0]);
    let (tensor, counter) = foreign(&spec);
    let t = tensor.into_tch().unwrap();
    assert_eq!(t.size(), [1 << 31, 1 << 31]);
    assert_eq!(t.stride(), [0, 0]);
    assert_eq!(f32::try_from(t.get(12345).get(678)).unwrap(), 7.0);
    drop(t);
    assert_eq!(counter.get(), 1);
}

#[test]
fn what_dlpack_cannot_carry_is_refused_on_export() {
    let t = Tensor::ones([3], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
    let err = t.to_managed().unwrap_err();
    assert!(is_torch_error(&err, "detach"), "{err}");
    assert!(t.detach().to_managed().is_ok());

    let z = Tensor::ones([2], (Kind::ComplexFloat, tch::Device::Cpu)).conj();
    let err = z.to_managed().unwrap_err();
    assert!(is_torch_error(&err, "resolve_conj"), "{err}");
    assert!(z.resolve_conj().into_managed().is_ok());

    let q =
        Tensor::ones([2], (Kind::Float, tch::Device::Cpu)).quantize_per_tensor(0.1, 0, Kind::QInt8);
    assert!(matches!(q.into_managed(), Err(Error::Framework { .. })));
}

#[test]
fn the_storage_dies_with_the_last_holder_on_any_thread() {
    let (data, counter) = counted_f32(4);
    let owner = Counted {
        data,
        counter: counter.clone(),
    };
    let t = ManagedTensor::from_buffer(owner, 0, &[4], &[1])
        .unwrap()
        .into_tch()
        .unwrap();
    let views: Vec<Tensor> = (0..4).map(|i| t.narrow(0, i, 1)).collect();
    drop(t);
    let handles: Vec<_> = views
        .into_iter()
        .map(|v| std::thread::spawn(move || drop(v)))
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(counter.get(), 1);

    // A torch export dropped on another thread.
    let managed = Tensor::from_slice(&[1i64, 2, 3]).into_managed().unwrap();
    std::thread::spawn(move || drop(managed)).join().unwrap();
}

#[test]
fn devices_map_as_libtorch_maps_them() {
    assert_eq!(tch_device(Device::CPU).unwrap(), tch::Device::Cpu);
    assert_eq!(
        tch_device(Device::new(DLDeviceType::kDLCUDA, 3)).unwrap(),
        tch::Device::Cuda(3)
    );
    assert!(matches!(
        tch_device(Device::new(DLDeviceType(99), 0)),
        Err(Error::Framework { .. })
    ));
    assert_eq!(dlpack_device(tch::Device::Cpu), Device::CPU);
    assert_eq!(
        dlpack_device(tch::Device::Cuda(2)),
        Device::new(DLDeviceType::kDLCUDA, 2)
    );
    for device in [tch::Device::Cpu, tch::Device::Cuda(0), tch::Device::Cuda(5)] {
        assert_eq!(tch_device(dlpack_device(device)).unwrap(), device);
    }
}

/// A CUDA tensor takes the same path as a CPU one: only the pointer and the device
/// move, so this runs without a GPU (the memory is never touched).
#[test]
fn a_cuda_tensor_moves_its_pointer_and_device_without_touching_memory() {
    let mut spec = spec_f32(&[1.0, 2.0], &[2]);
    spec.device = Device::new(DLDeviceType::kDLCUDA, 1).to_raw();
    let (tensor, counter) = foreign(&spec);
    let data = tensor.data();
    let t = tensor.into_tch().unwrap();
    assert_eq!(t.device(), tch::Device::Cuda(1));
    assert_eq!(t.data_ptr(), data);
    assert_eq!(t.size(), [2]);
    let back = t.to_managed().unwrap();
    assert_eq!(back.device(), Device::new(DLDeviceType::kDLCUDA, 1));
    assert_eq!(back.data(), data);
    assert!(matches!(
        back.as_array::<f32, Ix1>(),
        Err(Error::UnsupportedDevice { .. })
    ));
    drop(back);
    assert_eq!(counter.get(), 0);
    drop(t);
    assert_eq!(counter.get(), 1);
}
