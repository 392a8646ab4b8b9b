//! burn flex tensors ↔ ManagedTensor: zero-copy by pointer equality, copy-on-write and
//! exactly-once deleters by counting, hostile layouts refused.
#![cfg(feature = "burn")]

mod common;

use burn_flex::{FlexTensor, Layout};
use burn_std::{BoolStore, DType, Shape, TensorData};
use common::{Counted, Counter, Spec, buffer_from_bytes, versioned};
use dlpack_core::ffi::{DLDataTypeCode, DLDeviceType, DLPACK_FLAG_BITMASK_READ_ONLY};
use dlpack_core::{DataType, Error, FromDLPack, ManagedTensor, ToDLPack};
use ndarray::{Array2, Array3, Ix1, Ix2, IxDyn, ShapeBuilder, array, s};

fn flex_f32(values: Vec<f32>, shape: &[usize]) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, shape.to_vec()))
}

/// What burn itself reads, in logical order.
fn burn_values(t: FlexTensor) -> Vec<f32> {
    t.into_data().try_into_vec::<f32>().unwrap()
}

fn foreign(spec: &Spec) -> (ManagedTensor, Counter) {
    let counter = Counter::new();
    // SAFETY: `versioned` allocates a well-formed header over its own buffer, with a
    // deleter that frees it once; the specs here describe memory inside the buffer.
    let tensor = unsafe { ManagedTensor::from_raw(versioned(spec, &counter)) }.unwrap();
    (tensor, counter)
}

fn spec_f32(values: &[f32], shape: &[i64]) -> Spec {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    Spec::new(shape, DataType::F32.to_raw(), buffer_from_bytes(&bytes))
}

#[test]
fn a_unique_flex_tensor_exports_writable_without_a_copy() {
    let t = flex_f32(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let ptr = t.data_arc().as_ptr();
    let mut managed = t.to_dlpack().unwrap();
    assert_eq!(managed.data().cast_const().cast(), ptr);
    assert!(managed.is_exclusive() && !managed.is_read_only());
    assert_eq!(managed.shape(), [2, 3]);
    managed.as_array_mut::<f32, Ix2>().unwrap()[[1, 2]] = 60.0;
    assert_eq!(
        managed.as_array::<f32, Ix2>().unwrap(),
        array![[1.0, 2.0, 3.0], [4.0, 5.0, 60.0]]
    );
}

#[test]
fn a_shared_flex_tensor_exports_read_only_and_burn_copies_on_write() {
    let t = flex_f32(vec![1.0, 2.0, 3.0], &[3]);
    let mut other = t.clone();
    let ptr = t.data_arc().as_ptr();
    let mut managed = t.to_dlpack().unwrap();
    assert_eq!(managed.data().cast_const().cast(), ptr);
    assert!(managed.is_read_only() && !managed.is_exclusive());
    assert!(matches!(
        managed.as_array_mut::<f32, Ix1>(),
        Err(Error::ReadOnly)
    ));
    // burn writes into its own copy: the export still reads the original values.
    other.storage_mut::<f32>()[0] = 100.0;
    assert_ne!(other.data_arc().as_ptr(), ptr);
    assert_eq!(
        managed.as_array::<f32, Ix1>().unwrap().to_vec(),
        [1.0, 2.0, 3.0]
    );
}

#[test]
fn flex_views_export_their_layout() {
    let base = flex_f32((0..12).map(|i| i as f32).collect(), &[3, 4]);
    let ptr = base.data_arc().as_ptr().cast::<f32>();
    let transposed = base.transpose(0, 1).to_dlpack().unwrap();
    assert_eq!(transposed.shape(), [4, 3]);
    assert_eq!(transposed.strides(), Some(&[1, 4][..]));
    assert_eq!(transposed.data().cast_const().cast(), ptr);
    assert_eq!(
        transposed.as_array::<f32, Ix2>().unwrap(),
        Array2::from_shape_fn((4, 3), |(i, j)| (j * 4 + i) as f32)
    );
    let narrowed = base.narrow(1, 1, 2).to_dlpack().unwrap();
    assert_eq!(narrowed.data().cast_const().cast(), ptr.wrapping_add(1));
    assert_eq!(
        narrowed.as_array::<f32, Ix2>().unwrap(),
        array![[1.0, 2.0], [5.0, 6.0], [9.0, 10.0]]
    );
}

#[test]
fn a_flex_layout_outside_its_bytes_is_refused() {
    let t = flex_f32(vec![0.0; 4], &[4]);
    for layout in [
        Layout::new(Shape::from(vec![4]), vec![2], 0),
        Layout::new(Shape::from(vec![2, 2]), vec![2, 1], 1),
        Layout::new(Shape::from(vec![4]), vec![-1], 0),
        Layout::new(Shape::from(vec![3, 2]), vec![1 << 40, 1], 0),
    ] {
        let hostile = t.clone().with_layout(layout);
        let err = hostile.to_dlpack().unwrap_err();
        assert!(
            matches!(err, Error::OutOfBuffer { .. } | Error::Overflow { .. }),
            "{err}"
        );
    }
    // A huge broadcast stays inside its bytes: valid, and exported as it is.
    let broadcast = t.with_layout(Layout::new(
        Shape::from(vec![1usize << 62, 2]),
        vec![0, 1],
        0,
    ));
    let managed = broadcast.to_dlpack().unwrap();
    assert_eq!(managed.shape(), [1 << 62, 2]);
    assert_eq!(managed.strides(), Some(&[0, 1][..]));
}

#[test]
fn quantized_and_u32_bool_tensors_are_refused() {
    let t = FlexTensor::empty(Shape::from(vec![2]), DType::Bool(BoolStore::U32));
    assert!(matches!(
        t.to_dlpack(),
        Err(Error::Framework {
            framework: "burn",
            ..
        })
    ));
    let t = FlexTensor::empty(Shape::from(vec![2]), DType::Flex32);
    assert!(matches!(t.to_dlpack(), Err(Error::Framework { .. })));
}

#[test]
fn an_exclusive_import_is_read_and_written_in_place() {
    let a = Array2::<f32>::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f32);
    let ptr = a.as_ptr();
    let mut t = FlexTensor::from_dlpack(a.to_dlpack().unwrap()).unwrap();
    assert_eq!(t.dtype(), DType::F32);
    assert_eq!(t.storage::<f32>().as_ptr(), ptr, "imported without a copy");
    t.storage_mut::<f32>()[0] = 42.0;
    assert_eq!(t.storage::<f32>().as_ptr(), ptr, "written in place");
    assert_eq!(burn_values(t), [42.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn read_only_shared_and_broadcast_imports_copy_on_the_first_write() {
    // READ_ONLY: read in place, copied on write, the producer released then.
    let mut spec = spec_f32(&[1.0, 2.0, 3.0], &[3]);
    spec.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    let (tensor, counter) = foreign(&spec);
    let data = tensor.data().cast::<f32>().cast_const();
    let mut t = FlexTensor::from_dlpack(tensor).unwrap();
    assert_eq!(t.storage::<f32>().as_ptr(), data);
    assert_eq!(counter.get(), 0);
    t.storage_mut::<f32>()[1] = 20.0;
    assert_ne!(t.storage::<f32>().as_ptr(), data);
    assert_eq!(
        counter.get(),
        1,
        "the producer's deleter ran at the copy, once"
    );
    assert_eq!(burn_values(t), [1.0, 20.0, 3.0]);
    assert_eq!(counter.get(), 1);

    // Shared (as Python imports are).
    let spec = spec_f32(&[4.0, 5.0], &[2]);
    let counter = Counter::new();
    // SAFETY: as in `foreign`.
    let shared = unsafe { ManagedTensor::from_raw_shared(versioned(&spec, &counter)) }.unwrap();
    let data = shared.data().cast::<f32>().cast_const();
    let mut t = FlexTensor::from_dlpack(shared).unwrap();
    assert_eq!(t.storage::<f32>().as_ptr(), data);
    t.storage_mut::<f32>()[0] = 0.5;
    assert_ne!(t.storage::<f32>().as_ptr(), data);
    assert_eq!(counter.get(), 1);

    // A broadcast (stride 0): elements share addresses, so never written in place.
    let mut spec = spec_f32(&[7.0, 8.0], &[3, 2]);
    spec.strides = Some(vec![0, 1]);
    let (tensor, counter) = foreign(&spec);
    let mut t = FlexTensor::from_dlpack(tensor).unwrap();
    assert_eq!(t.layout().strides(), [0, 1]);
    t.storage_mut::<f32>()[0] = 1.0;
    assert_eq!(counter.get(), 1);
    drop(t);
    assert_eq!(counter.get(), 1);
}

#[test]
fn layouts_without_gaps_import_without_a_copy() {
    let cases: Vec<(Array2<f32>, &str)> = vec![
        (
            Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f32),
            "C",
        ),
        (
            Array2::from_shape_fn((3, 4).f(), |(i, j)| (i * 4 + j) as f32),
            "F",
        ),
        (
            Array3::from_shape_fn((2, 3, 4), |(i, j, k)| (i * 12 + j * 4 + k) as f32)
                .slice_move(s![1, .., ..]),
            "one block of three",
        ),
        (
            Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f32).slice_move(s![..;-1, ..;-1]),
            "negative",
        ),
    ];
    for (a, name) in cases {
        let expected: Vec<f32> = a.iter().cloned().collect();
        let managed = a.to_dlpack().unwrap();
        let lowest = {
            let view = managed.as_array::<f32, IxDyn>().unwrap();
            view.iter().map(|x| x as *const f32).min().unwrap()
        };
        let t = FlexTensor::from_dlpack(managed).unwrap();
        assert_eq!(t.storage::<f32>().as_ptr(), lowest, "{name}: no copy");
        assert_eq!(
            burn_values(t),
            expected,
            "{name}: burn reads the same values"
        );
    }
}

/// A layout whose elements leave gaps (a column, every other element) is copied element
/// by element at import: the gap bytes are someone else's, and are never read (they hold
/// a poison value here that would show in any copy of the whole region).
#[test]
fn layouts_with_gaps_are_copied_element_by_element() {
    let poison = f32::from_bits(0x7fc0_dead);
    for (shape, strides, name) in [
        (vec![3, 1], vec![4, 1], "column 0 of a 3 x 4 matrix"),
        (vec![2, 2], vec![-4, -2], "negative, every other element"),
        (vec![2, 3], vec![6, 2], "sliced, stepped"),
    ] {
        let mut values = vec![poison; 12];
        let mut expected = Vec::new();
        // Element [i, j] at `first + i * s0 + j * s1`, `first` chosen so that every
        // element lies in the buffer.
        let first: i64 = strides
            .iter()
            .zip(&shape)
            .map(|(&s, &d)| if s < 0 { -s * (d - 1) } else { 0 })
            .sum();
        for i in 0..shape[0] {
            for j in 0..shape[1] {
                let at = (first + i * strides[0] + j * strides[1]) as usize;
                values[at] = (i * 10 + j) as f32;
                expected.push(values[at]);
            }
        }
        let mut spec = spec_f32(&values, &shape);
        spec.strides = Some(strides.clone());
        spec.byte_offset = first as u64 * 4;
        let (tensor, counter) = foreign(&spec);
        let data = tensor.data().cast::<f32>().cast_const();
        let t = FlexTensor::from_dlpack(tensor).unwrap();
        assert_eq!(
            counter.get(),
            1,
            "{name}: the producer was released at the copy"
        );
        let storage = t.storage::<f32>().as_ptr();
        assert!(
            storage < data || storage > data.wrapping_add(12),
            "{name}: a copy"
        );
        let values = burn_values(t);
        assert_eq!(values, expected, "{name}");
        assert!(values.iter().all(|v| v.to_bits() != poison.to_bits()));
    }
}

#[test]
fn imports_check_dtype_device_alignment_and_bools() {
    let (t, counter) = foreign(&Spec::new(
        &[2],
        DataType::C64.to_raw(),
        buffer_from_bytes(&[0; 16]),
    ));
    assert!(matches!(
        FlexTensor::from_dlpack(t),
        Err(Error::Framework { .. })
    ));
    assert_eq!(counter.get(), 1);

    let mut spec = spec_f32(&[1.0, 2.0], &[1]);
    spec.byte_offset = 2;
    let (t, counter) = foreign(&spec);
    assert!(matches!(
        FlexTensor::from_dlpack(t),
        Err(Error::Misaligned { .. })
    ));
    assert_eq!(counter.get(), 1);

    let mut spec = spec_f32(&[1.0], &[1]);
    spec.device.device_type = DLDeviceType::kDLCUDA;
    let (t, counter) = foreign(&spec);
    assert!(matches!(
        FlexTensor::from_dlpack(t),
        Err(Error::UnsupportedDevice { .. })
    ));
    assert_eq!(counter.get(), 1);

    let (t, counter) = foreign(&Spec::new(
        &[3],
        DataType::BOOL.to_raw(),
        buffer_from_bytes(&[1, 0, 5]),
    ));
    assert!(matches!(
        FlexTensor::from_dlpack(t),
        Err(Error::InvalidBool { byte: 5, .. })
    ));
    assert_eq!(counter.get(), 1);

    let mut spec = Spec::new(&[2], DataType::F32.to_raw(), buffer_from_bytes(&[0; 8]));
    spec.dtype.lanes = 2;
    spec.dtype.code = DLDataTypeCode::kDLFloat;
    let (t, counter) = foreign(&spec);
    assert!(FlexTensor::from_dlpack(t).is_err());
    assert_eq!(counter.get(), 1);
}

#[test]
fn dtypes_round_trip() {
    macro_rules! round_trip {
        ($ty:ty, $dtype:expr, $values:expr) => {{
            let values: Vec<$ty> = $values;
            let a = ndarray::Array1::from(values.clone());
            let t = FlexTensor::from_dlpack(a.to_dlpack().unwrap()).unwrap();
            assert_eq!(t.dtype(), $dtype);
            let back = ndarray::Array1::<$ty>::from_dlpack(t.to_dlpack().unwrap()).unwrap();
            assert_eq!(back.to_vec(), values);
        }};
    }
    round_trip!(f64, DType::F64, vec![1.5, -2.0]);
    round_trip!(f32, DType::F32, vec![1.5, -2.0]);
    #[cfg(feature = "half")]
    {
        round_trip!(half::f16, DType::F16, vec![half::f16::from_f32(0.5)]);
        round_trip!(half::bf16, DType::BF16, vec![half::bf16::from_f32(3.0)]);
    }
    round_trip!(i64, DType::I64, vec![-1, i64::MAX]);
    round_trip!(i32, DType::I32, vec![-1, 7]);
    round_trip!(i16, DType::I16, vec![-1, 7]);
    round_trip!(i8, DType::I8, vec![-1, 7]);
    round_trip!(u64, DType::U64, vec![1, u64::MAX]);
    round_trip!(u32, DType::U32, vec![1, 7]);
    round_trip!(u16, DType::U16, vec![1, 7]);
    round_trip!(u8, DType::U8, vec![1, 7]);
    round_trip!(bool, DType::Bool(BoolStore::Native), vec![true, false]);
}

#[test]
fn deleters_run_once_when_the_last_burn_tensor_dies_on_any_thread() {
    let spec = spec_f32(&[1.0, 2.0, 3.0, 4.0], &[4]);
    let (tensor, counter) = foreign(&spec);
    let t = FlexTensor::from_dlpack(tensor).unwrap();
    let views: Vec<FlexTensor> = (0..4).map(|i| t.narrow(0, i, 1)).collect();
    drop(t);
    assert_eq!(counter.get(), 0);
    let handles: Vec<_> = views
        .into_iter()
        .map(|v| std::thread::spawn(move || drop(v)))
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(counter.get(), 1);

    // Empty tensors hold nothing of the producer's.
    let (tensor, counter) = foreign(&spec_f32(&[], &[0, 3]));
    let t = FlexTensor::from_dlpack(tensor).unwrap();
    assert_eq!(t.layout().shape().to_vec(), [0, 3]);
    assert_eq!(counter.get(), 1);
}

#[test]
fn a_round_trip_through_burn_keeps_the_pointer() {
    let a = Array2::<i32>::from_shape_fn((2, 2), |(i, j)| (i * 2 + j) as i32);
    let ptr = a.as_ptr();
    let t = FlexTensor::from_dlpack(a.to_dlpack().unwrap()).unwrap();
    let managed = t.to_dlpack().unwrap();
    assert_eq!(managed.data().cast_const().cast(), ptr);
    assert!(managed.is_exclusive());
    assert_eq!(
        managed.as_array::<i32, Ix2>().unwrap(),
        array![[0, 1], [2, 3]]
    );
}

/// An owner of elements that counts its drops (the deleter of `from_buffer` tensors).
#[test]
fn ndarray_to_burn_narrow_and_back_keeps_the_pointer_and_deletes_once() {
    let counter = Counter::new();
    let owner = Counted {
        data: (0..12).map(|i| i as f32).collect(),
        counter: counter.clone(),
    };
    let managed = ManagedTensor::from_buffer(owner, 0, &[4, 3], &[3, 1]).unwrap();
    let ptr = managed.data().cast::<f32>().cast_const();
    let t = FlexTensor::from_dlpack(managed).unwrap();
    assert_eq!(t.storage::<f32>().as_ptr(), ptr);
    let rows = t.narrow(0, 1, 2);
    drop(t);
    assert_eq!(counter.get(), 0, "the narrowed view keeps the memory alive");
    let back = rows.to_dlpack().unwrap();
    assert_eq!(counter.get(), 0);
    {
        let view = back.as_array::<f32, Ix2>().unwrap();
        assert_eq!(
            view.as_ptr(),
            ptr.wrapping_add(3),
            "the same memory, one row in"
        );
        assert_eq!(view, array![[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]);
    }
    drop(back);
    assert_eq!(
        counter.get(),
        1,
        "the original deleter ran once, after the last view"
    );
}

/// Exporting an import that burn must copy before it may write (here `READ_ONLY`, and
/// too big to copy: 2^46 bytes described over a few, never read) is an
/// `Error::AllocationFailed`, not a panic in burn's `DerefMut`; the deleter runs once.
#[test]
#[cfg_attr(miri, ignore = "asks the allocator for 64 TiB")]
fn an_export_whose_copy_cannot_be_allocated_is_an_error() {
    let mut spec = spec_f32(&[1.0, 2.0], &[1 << 44]);
    spec.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    let (tensor, counter) = foreign(&spec);
    let t = FlexTensor::from_dlpack(tensor).unwrap();
    let err = t.to_dlpack().unwrap_err();
    assert!(
        matches!(err, Error::AllocationFailed { bytes } if bytes == 1 << 46),
        "{err:?}"
    );
    assert_eq!(counter.get(), 1);
}
