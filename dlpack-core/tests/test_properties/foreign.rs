//! 2. Malformed foreign tensors, against the reference model.

use std::fmt::Debug;
use std::sync::atomic::Ordering;

use dlpack_core::ffi::{
    DLDataType, DLDataTypeCode, DLDeviceType, DLPACK_FLAG_BITMASK_READ_ONLY, DLPackVersion,
};
use dlpack_core::{Element, ManagedTensor};
use ndarray::{Dimension, IntoDimension, Ix2, IxDyn};
use proptest::prelude::*;

use super::common::{Counter, Spec, buffer_from_bytes, versioned};
use super::model::{BASE, kind, model};
use super::{CASES, ERRORS, Elem, Expect, Foreign, REFUSED, VIEWS};

fn extent() -> impl Strategy<Value = i64> {
    prop_oneof![
        16 => 0i64..=4,
        1 => Just(-1i64),
        1 => Just(i64::MIN),
        1 => Just(i64::MAX),
        1 => Just(1i64 << 40),
        1 => Just(1i64 << 62),
    ]
}

fn stride() -> impl Strategy<Value = i64> {
    prop_oneof![
        16 => -6i64..=6,
        1 => Just(i64::MIN),
        1 => Just(i64::MAX),
        1 => Just(1i64 << 62),
        1 => Just(-(1i64 << 62)),
        1 => Just(3i64 << 61),
    ]
}

fn foreign() -> impl Strategy<Value = Foreign> {
    let elem = prop_oneof![
        Just(Elem::U8),
        Just(Elem::I32),
        Just(Elem::F64),
        Just(Elem::Bool)
    ];
    (0usize..=6, elem).prop_flat_map(|(ndim, elem)| {
        let dtype = prop_oneof![
            8 => Just(elem.dtype()),
            1 => (0u8..=20, prop_oneof![Just(1u8), Just(8), Just(16), Just(32), Just(64), Just(128), any::<u8>()], prop_oneof![Just(0u16), Just(1), Just(2), Just(4)])
                .prop_map(|(code, bits, lanes)| DLDataType { code: DLDataTypeCode(code), bits, lanes }),
        ];
        let header = (
            any::<bool>(),
            any::<bool>(),
            prop_oneof![12 => Just(1u32), 1 => Just(0u32), 1 => Just(2u32)],
            prop_oneof![20 => Just(None), 1 => Just(Some(-1i32)), 1 => Just(Some(i32::MIN))],
            prop::bool::weighted(0.03),
        );
        let tensor = (
            proptest::collection::vec(extent(), ndim),
            prop_oneof![1 => Just(None), 4 => proptest::collection::vec(stride(), ndim).prop_map(Some)],
            dtype,
            prop_oneof![8 => Just(1i32), 1 => Just(3), 1 => Just(13), 1 => -2i32..=20],
        );
        let memory = (
            prop::bool::weighted(0.05),
            prop_oneof![6 => Just(0usize), 1 => 1usize..8],
            prop_oneof![4 => Just(0u64), 4 => 0u64..64, 1 => (u64::MAX - 64)..=u64::MAX],
            any::<bool>(),
            prop_oneof![6 => Just(None), 1 => (0usize..64).prop_map(Some)],
        );
        (Just(elem), header, tensor, memory).prop_map(
            |(elem, (fixed_rank, mutable, major, ndim_override, shape_null), (shape, strides, dtype, device), (null_data, misalign, byte_offset, read_only, bad_bool_at))| Foreign {
                elem,
                fixed_rank,
                mutable,
                major,
                ndim_override,
                shape_null,
                shape,
                strides,
                dtype,
                device,
                null_data,
                misalign,
                byte_offset,
                read_only,
                bad_bool_at,
            },
        )
    })
}

fn read<A: FromBytes>(buffer: &[u8], at: usize) -> A {
    A::from_bytes(&buffer[at..at + size_of::<A>()])
}

trait FromBytes: Element + PartialEq + Debug {
    fn from_bytes(b: &[u8]) -> Self;
}
impl FromBytes for u8 {
    fn from_bytes(b: &[u8]) -> Self {
        b[0]
    }
}
impl FromBytes for i32 {
    fn from_bytes(b: &[u8]) -> Self {
        i32::from_ne_bytes(b.try_into().unwrap())
    }
}
impl FromBytes for f64 {
    fn from_bytes(b: &[u8]) -> Self {
        f64::from_ne_bytes(b.try_into().unwrap())
    }
}
impl FromBytes for bool {
    fn from_bytes(b: &[u8]) -> Self {
        b[0] == 1
    }
}

fn run_foreign(f: &Foreign) -> Result<(), TestCaseError> {
    let (expect, buffer_len) = model(f);
    prop_assume!(expect != Expect::Err("too big"));
    // The honest producer's memory: bytes with a pattern; bools 0/1 with maybe a bad one.
    let mut bytes: Vec<u8> = (0..buffer_len).map(|i| (i * 37 % 251) as u8).collect();
    if f.elem == Elem::Bool {
        for b in &mut bytes {
            *b &= 1;
        }
    }
    let first = match &expect {
        Expect::View { first, .. } => *first,
        _ => BASE + f.misalign,
    };
    let mut expect = expect;
    if let (
        Expect::View {
            first,
            count,
            strides,
            ..
        },
        Elem::Bool,
        Some(k),
    ) = (&expect, f.elem, f.bad_bool_at)
    {
        if *count > 0 && address_error(f, *count).is_none() {
            // Plant a bad byte at logical element k % count.
            let k = k % count;
            let offset = logical_offset(&f.shape, strides, k);
            bytes[(*first as i64 + offset) as usize] = 2;
            expect = Expect::Err("bool");
        }
    }
    let mut spec = Spec::new(&f.shape, f.dtype, buffer_from_bytes(&bytes));
    spec.version = DLPackVersion {
        major: f.major,
        minor: 1,
    };
    spec.ndim = f.ndim_override;
    spec.shape_null = f.shape_null;
    spec.strides = f.strides.clone();
    spec.device.device_type = DLDeviceType(f.device);
    spec.flags = if f.read_only {
        DLPACK_FLAG_BITMASK_READ_ONLY
    } else {
        0
    };
    spec.byte_offset = f.byte_offset;
    spec.data_at = if f.null_data {
        None
    } else {
        Some((first as i64).wrapping_sub(f.byte_offset as i64) as isize)
    };
    let counter = Counter::new();
    let ptr = versioned(&spec, &counter);
    // SAFETY: the producer is honest about its memory: whenever the model says the
    // layout is valid, every element lies inside the buffer it allocated.
    let outcome = match unsafe { ManagedTensor::from_raw(ptr) } {
        Err(err) => Err(kind(&err)),
        Ok(mut t) => match f.elem {
            Elem::U8 => check_view::<u8>(f, &mut t, &bytes, &expect),
            Elem::I32 => check_view::<i32>(f, &mut t, &bytes, &expect),
            Elem::F64 => check_view::<f64>(f, &mut t, &bytes, &expect),
            Elem::Bool => check_view::<bool>(f, &mut t, &bytes, &expect),
        },
    };
    prop_assert_eq!(counter.get(), 1, "deleter runs exactly once");
    CASES.fetch_add(1, Ordering::Relaxed);
    match (&expect, outcome) {
        (Expect::Err(e), Err(got)) => prop_assert_eq!(*e, got, "{:?}", f),
        (Expect::View { count, .. }, Err(got)) => {
            prop_assert_eq!(Some(got), address_error(f, *count), "{:?}", f);
            ERRORS.fetch_add(1, Ordering::Relaxed);
        }
        (Expect::Err(e), Ok(())) => prop_assert!(false, "expected {e}, got a view: {f:?}"),
        (Expect::View { count, .. }, Ok(())) => {
            prop_assert_eq!(address_error(f, *count), None, "{:?}", f);
            VIEWS.fetch_add(1, Ordering::Relaxed);
        }
    }
    if matches!(expect, Expect::Err(_)) {
        ERRORS.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// The error `check_address` must raise for a layout that is otherwise valid.
fn address_error(f: &Foreign, count: usize) -> Option<&'static str> {
    if count == 0 {
        return None;
    }
    // data = buffer + first - byte_offset (wrapping), so data + byte_offset wraps past
    // the end of the address space exactly when the offset is huge.
    if f.byte_offset > (usize::MAX / 2) as u64 {
        return Some("overflow");
    }
    if f.misalign % f.elem.size() != 0 {
        return Some("misaligned");
    }
    None
}

fn logical_offset(shape: &[i64], strides: &[i64], mut k: usize) -> i64 {
    let mut offset = 0;
    for axis in (0..shape.len()).rev() {
        let e = shape[axis] as usize;
        offset += (k % e) as i64 * strides[axis];
        k /= e;
    }
    offset
}

fn check_view<A: FromBytes>(
    f: &Foreign,
    t: &mut ManagedTensor,
    bytes: &[u8],
    expect: &Expect,
) -> Result<(), &'static str> {
    fn compare<A: FromBytes, D: Dimension>(
        view: ndarray::ArrayView<'_, A, D>,
        bytes: &[u8],
        expect: &Expect,
    ) {
        let Expect::View {
            first,
            count,
            strides,
            ..
        } = expect
        else {
            // Reported by the caller, with the input.
            return;
        };
        assert_eq!(view.len(), *count);
        for (index, value) in view.indexed_iter() {
            let index: D = index.into_dimension();
            let offset: i64 = index
                .slice()
                .iter()
                .zip(strides)
                .map(|(&i, &s)| i as i64 * s)
                .sum();
            let at = (*first as i64 + offset * size_of::<A>() as i64) as usize;
            assert_eq!(*value, read::<A>(bytes, at));
        }
    }
    let r = match (f.fixed_rank, f.mutable) {
        (true, false) => t.as_array::<A, Ix2>().map(|v| compare(v, bytes, expect)),
        (true, true) => t
            .as_array_mut::<A, Ix2>()
            .map(|v| compare(v.view(), bytes, expect)),
        (false, false) => t.as_array::<A, IxDyn>().map(|v| compare(v, bytes, expect)),
        (false, true) => t
            .as_array_mut::<A, IxDyn>()
            .map(|v| compare(v.view(), bytes, expect)),
    };
    r.map_err(|e| kind(&e))
}

fn cases() -> u32 {
    std::env::var("DLPACK_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000)
}

#[test]
fn malformed_foreign_tensors() {
    use std::io::Write;
    let config = ProptestConfig {
        cases: cases(),
        max_global_rejects: 1_000_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&foreign(), |f| run_foreign(&f));
    // Written straight to stderr so that the count shows even when output is captured.
    let _ = writeln!(
        std::io::stderr(),
        "malformed_foreign_tensors: {} cases through from_raw + as_array: {} views, {} typed errors, {} refusals of non-aliasing strides for mutable views (documented, conservative); every deleter ran once",
        CASES.load(Ordering::Relaxed),
        VIEWS.load(Ordering::Relaxed),
        ERRORS.load(Ordering::Relaxed),
        REFUSED.load(Ordering::Relaxed),
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(CASES.load(Ordering::Relaxed) >= cases() as usize);
}
