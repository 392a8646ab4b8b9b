//! 1. Export -> import of random arrays, for every element type.

use std::fmt::Debug;

use dlpack_core::ffi::{DLDataTypeCode, DLPACK_FLAG_BITMASK_IS_COPIED};
use dlpack_core::{DLPackArray, Element, FromDLPack, ToDLPack};
use ndarray::{ArcArray, ArrayD, Axis, IxDyn, Slice};
use proptest::prelude::*;

trait TestElem: Element + PartialEq + Debug {
    fn from_index(i: usize) -> Self;
}

macro_rules! test_elem {
    ($($ty:ty => |$i:ident| $e:expr),* $(,)?) => {$(
        impl TestElem for $ty {
            fn from_index($i: usize) -> Self { $e }
        }
    )*};
}

test_elem! {
    i8 => |i| i as i8, i16 => |i| -(i as i16), i32 => |i| i as i32 * 7, i64 => |i| -(i as i64) << 33,
    u8 => |i| i as u8, u16 => |i| i as u16, u32 => |i| i as u32 * 3, u64 => |i| (i as u64) << 40,
    f32 => |i| i as f32 * 0.5, f64 => |i| i as f64 * -0.25, bool => |i| i % 3 == 0,
}
#[cfg(feature = "half")]
test_elem! {
    half::f16 => |i| half::f16::from_f32(i as f32), half::bf16 => |i| half::bf16::from_f32(i as f32),
}
#[cfg(feature = "complex")]
test_elem! {
    num_complex::Complex<f32> => |i| num_complex::Complex::new(i as f32, -(i as f32)),
    num_complex::Complex<f64> => |i| num_complex::Complex::new(i as f64, 1.0),
}

#[derive(Clone, Debug)]
struct LayoutCase {
    shape: Vec<usize>,
    slices: Vec<(isize, isize, isize)>,
    perm: Vec<usize>,
}

fn layout_case() -> impl Strategy<Value = LayoutCase> {
    // Under Miri, which interprets every element's copy and comparison, small arrays of
    // fewer axes: the layouts (slices, steps, permutations) are the same kinds.
    let (extent, rank) = if cfg!(miri) { (3, 4) } else { (5, 6) };
    proptest::collection::vec(0usize..=extent, 0..=rank).prop_flat_map(|shape| {
        let slices: Vec<_> = shape
            .iter()
            .map(|&len| {
                (0..=len as isize).prop_flat_map(move |start| {
                    (
                        Just(start),
                        start..=len as isize,
                        prop_oneof![-3isize..=-1, 1isize..=3],
                    )
                })
            })
            .collect();
        let perm = Just((0..shape.len()).collect::<Vec<_>>()).prop_shuffle();
        (Just(shape), slices, perm).prop_map(|(shape, slices, perm)| LayoutCase {
            shape,
            slices,
            perm,
        })
    })
}

fn build<A: TestElem>(case: &LayoutCase) -> ArrayD<A> {
    let mut n = 0;
    let mut a = ArrayD::from_shape_simple_fn(IxDyn(&case.shape), || {
        n += 1;
        A::from_index(n)
    });
    for (axis, &(start, end, step)) in case.slices.iter().enumerate() {
        a.slice_axis_inplace(Axis(axis), Slice::new(start, Some(end), step));
    }
    a.permuted_axes(IxDyn(&case.perm))
}

fn export_import<A: TestElem>(case: &LayoutCase) -> Result<(), TestCaseError> {
    // Owned: moves out and comes back.
    let array = build::<A>(case);
    let expected = array.to_owned();
    let ptr = array.as_ptr();
    let t = array.to_dlpack().unwrap();
    let view = t.as_array::<A, IxDyn>().unwrap();
    prop_assert_eq!(&view, &expected);
    if !expected.is_empty() {
        prop_assert_eq!(view.as_ptr(), ptr);
    }
    let back = ArrayD::<A>::from_dlpack(t).unwrap();
    prop_assert_eq!(back.as_ptr(), ptr);
    prop_assert_eq!(&back, &expected);
    let owned = DLPackArray::<A, IxDyn>::new(back.to_dlpack().unwrap()).unwrap();
    prop_assert_eq!(owned.view(), expected.view());
    prop_assert_eq!(owned.into_owned().unwrap().as_ptr(), ptr);

    // Shared: read-only, same buffer, comes back shared; `bool` is copied (a consumer
    // that ignores `READ_ONLY` could store bytes that are no `bool`).
    let shared: ArcArray<A, IxDyn> = build::<A>(case).into_shared();
    let keep = shared.clone();
    let t = shared.to_dlpack().unwrap();
    if t.dtype().code() == DLDataTypeCode::kDLBool {
        prop_assert!(!t.is_read_only() && t.flags() & DLPACK_FLAG_BITMASK_IS_COPIED != 0);
        prop_assert_eq!(&t.as_array::<A, IxDyn>().unwrap(), &expected);
        if !expected.is_empty() {
            prop_assert_ne!(t.data().cast::<A>().cast_const(), keep.as_ptr());
        }
        return Ok(());
    }
    prop_assert!(t.is_read_only());
    let view = t.as_array::<A, IxDyn>().unwrap();
    prop_assert_eq!(&view, &expected);
    if !expected.is_empty() {
        prop_assert_eq!(view.as_ptr(), keep.as_ptr());
    }
    let back = ArcArray::<A, IxDyn>::from_dlpack(t).unwrap();
    prop_assert_eq!(back.as_ptr(), keep.as_ptr());
    Ok(())
}

macro_rules! export_import_tests {
    ($($name:ident: $ty:ty),* $(,)?) => {
        proptest! {$(
            #[test]
            fn $name(case in layout_case()) {
                export_import::<$ty>(&case)?;
            }
        )*}
    };
}

export_import_tests! {
    export_import_i8: i8, export_import_i16: i16, export_import_i32: i32, export_import_i64: i64,
    export_import_u8: u8, export_import_u16: u16, export_import_u32: u32, export_import_u64: u64,
    export_import_f32: f32, export_import_f64: f64, export_import_bool: bool,
}
#[cfg(feature = "half")]
export_import_tests! { export_import_f16: half::f16, export_import_bf16: half::bf16 }
#[cfg(feature = "complex")]
export_import_tests! {
    export_import_c64: num_complex::Complex<f32>, export_import_c128: num_complex::Complex<f64>,
}
