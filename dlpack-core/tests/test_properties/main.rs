//! Property tests of the layout engine through the public API.
//!
//! 1. Export -> import of random arrays (rank 0-6, extents 0-5, random slices with
//!    positive and negative steps, random axis permutations) for every element type:
//!    equal elements, same data pointer, for owned and shared exports.
//! 2. Hand-built foreign tensors, honest about their memory but otherwise malformed in
//!    every way a producer could get wrong: each one is either a correct view or the
//!    typed error an independent reference model predicts, never a panic, and its
//!    deleter runs exactly once.
#![cfg(feature = "ndarray")]

mod common;

use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Counter, Spec, buffer_from_bytes, versioned};
use dlpack_core::ffi::{
    DLDataType, DLDataTypeCode, DLDeviceType, DLPACK_FLAG_BITMASK_IS_COPIED,
    DLPACK_FLAG_BITMASK_READ_ONLY, DLPackVersion,
};
use dlpack_core::{DLPackArray, Element, Error, FromDLPack, ManagedTensor, ToDLPack};
use ndarray::{ArcArray, ArrayD, Axis, Dimension, IntoDimension, Ix2, IxDyn, Slice};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------
// 1. Export -> import.
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// 2. Malformed foreign tensors.
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Elem {
    U8,
    I32,
    F64,
    Bool,
}

impl Elem {
    fn dtype(self) -> DLDataType {
        match self {
            Elem::U8 => <u8 as Element>::DTYPE,
            Elem::I32 => <i32 as Element>::DTYPE,
            Elem::F64 => <f64 as Element>::DTYPE,
            Elem::Bool => <bool as Element>::DTYPE,
        }
        .to_raw()
    }
    fn size(self) -> usize {
        match self {
            Elem::U8 | Elem::Bool => 1,
            Elem::I32 => 4,
            Elem::F64 => 8,
        }
    }
}

#[derive(Clone, Debug)]
struct Foreign {
    elem: Elem,
    fixed_rank: bool,
    mutable: bool,
    major: u32,
    ndim_override: Option<i32>,
    shape_null: bool,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    dtype: DLDataType,
    device: i32,
    null_data: bool,
    misalign: usize,
    byte_offset: u64,
    read_only: bool,
    bad_bool_at: Option<usize>,
}

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

/// What the reference model expects.
#[derive(Debug, PartialEq)]
enum Expect {
    Err(&'static str),
    /// A view; `first` is the byte offset of element 0 in the buffer.
    View {
        first: usize,
        count: usize,
        strides: Vec<i64>,
    },
}

/// Error kinds, so that the model need not predict messages.
fn kind(err: &Error) -> &'static str {
    match err {
        Error::UnsupportedVersion { .. } => "version",
        Error::NegativeNdim { .. } => "ndim",
        Error::NullPointer { .. } => "null pointer",
        Error::UnsupportedDevice { .. } => "device",
        Error::UnsupportedLanes { .. } => "lanes",
        Error::DtypeMismatch { .. } => "dtype",
        Error::NdimMismatch { .. } => "rank",
        Error::ReadOnly => "read-only",
        Error::NegativeExtent { .. } => "extent",
        Error::Overflow { .. } => "overflow",
        Error::OverlappingStrides => "overlap",
        Error::NullData { .. } => "null data",
        Error::Misaligned { .. } => "misaligned",
        Error::InvalidBool { .. } => "bool",
        other => panic!("unexpected error {other:?}"),
    }
}

const BASE: usize = 64; // bytes of slack before the lowest element
const MAX_BUFFER: usize = 1 << 20;

/// An independent model of the rules, in i128 arithmetic. Returns the expectation and
/// the buffer size the honest producer must allocate.
fn model(f: &Foreign) -> (Expect, usize) {
    use Expect::Err as E;
    if let Some(kind) = header_error(f) {
        return (E(kind), 0);
    }
    let size = f.elem.size() as i128;
    let max = isize::MAX as i128;
    let count = match element_count(&f.shape, size) {
        Ok(count) => count,
        Err(kind) => return (E(kind), 0),
    };
    if count == 0 {
        return (
            Expect::View {
                first: 0,
                count: 0,
                strides: vec![],
            },
            0,
        );
    }
    let strides = strides_or_c_order(f);
    let (low, high) = match reach(&f.shape, &strides) {
        Ok(reach) => reach,
        Err(kind) => return (E(kind), 0),
    };
    let span = low + high + 1;
    if span > max / size {
        return (E("overflow"), 0);
    }
    let span_bytes = span * size;
    if span_bytes as usize + 2 * BASE > MAX_BUFFER || count > 1 << 16 {
        // Valid, but more memory than an honest test producer wants to allocate.
        return (E("too big"), 0);
    }
    if f.mutable && refuses_overlap(&f.shape, &strides) {
        return (E("overlap"), 0);
    }
    let first = BASE + f.misalign + (low * size) as usize;
    let buffer = span_bytes as usize + 2 * BASE;
    if f.null_data {
        return (E("null data"), buffer);
    }
    (
        Expect::View {
            first,
            count: count as usize,
            strides,
        },
        buffer,
    )
}

/// The model's checks of the header alone, in the order the import makes them: the
/// error kind of the first that fails.
fn header_error(f: &Foreign) -> Option<&'static str> {
    if f.major != 1 {
        return Some("version");
    }
    if let Some(n) = f.ndim_override {
        if n < 0 {
            return Some("ndim");
        }
    }
    if f.shape_null && !f.shape.is_empty() {
        return Some("null pointer");
    }
    if ![1, 3, 11, 13].contains(&f.device) {
        return Some("device");
    }
    if f.dtype.lanes != 1 {
        return Some("lanes");
    }
    if f.dtype != f.elem.dtype() {
        return Some("dtype");
    }
    if f.fixed_rank && f.shape.len() != 2 {
        return Some("rank");
    }
    if f.mutable && f.read_only {
        return Some("read-only");
    }
    None
}

/// The number of elements of `shape`, or the error kind of its extents: a negative
/// one, or non-zero ones whose product passes `usize` or `isize::MAX` bytes of `size`.
fn element_count(shape: &[i64], size: i128) -> Result<i128, &'static str> {
    let max = isize::MAX as i128;
    let mut nonzero: i128 = 1;
    let mut count: i128 = 1;
    for &e in shape {
        if e < 0 {
            return Err("extent");
        }
        count *= e as i128;
        if e != 0 {
            nonzero *= e as i128;
            if nonzero > usize::MAX as i128 {
                return Err("overflow");
            }
        }
    }
    if nonzero > max / size {
        return Err("overflow");
    }
    Ok(count)
}

/// The producer's strides, or C order's when it gives none.
fn strides_or_c_order(f: &Foreign) -> Vec<i64> {
    match &f.strides {
        Some(s) => s.clone(),
        None => {
            let mut s = vec![0i64; f.shape.len()];
            let mut acc = 1i64;
            for axis in (0..f.shape.len()).rev() {
                s[axis] = acc;
                acc *= f.shape[axis];
            }
            s
        }
    }
}

/// How many elements the view reaches below element 0 and above it, or `"overflow"`
/// when either passes `usize`.
fn reach(shape: &[i64], strides: &[i64]) -> Result<(i128, i128), &'static str> {
    let (mut low, mut high) = (0i128, 0i128);
    for (&e, &s) in shape.iter().zip(strides) {
        if e <= 1 {
            continue;
        }
        let reach = (s as i128).abs() * (e as i128 - 1);
        if reach > usize::MAX as i128 {
            return Err("overflow");
        }
        if s < 0 {
            low += reach
        } else {
            high += reach
        }
        if low > usize::MAX as i128 || high > usize::MAX as i128 {
            return Err("overflow");
        }
    }
    Ok((low, high))
}

/// Whether a mutable view of these strides is refused as overlapping: the documented
/// rule, checked against the truth (it must refuse every overlap; the refusals of views
/// that do not overlap are counted).
fn refuses_overlap(shape: &[i64], strides: &[i64]) -> bool {
    let truth = overlaps(shape, strides);
    let rule = dominance_rule_refuses(shape, strides);
    assert!(
        rule || !truth,
        "the documented rule must refuse every overlap"
    );
    if rule && !truth {
        REFUSED.fetch_add(1, Ordering::Relaxed);
    }
    rule
}

/// The documented, conservative rule for mutable views: sorted by |stride|, each
/// stride must exceed the largest offset reachable through the smaller ones.
fn dominance_rule_refuses(shape: &[i64], strides: &[i64]) -> bool {
    let mut axes: Vec<(i128, i128)> = shape
        .iter()
        .zip(strides)
        .filter(|&(&e, _)| e > 1)
        .map(|(&e, &s)| ((s as i128).abs(), e as i128))
        .collect();
    axes.sort();
    let mut reach = 0;
    for (s, e) in axes {
        if s <= reach {
            return true;
        }
        reach += s * (e - 1);
    }
    false
}

/// Brute force: do two indices reach the same element?
fn overlaps(shape: &[i64], strides: &[i64]) -> bool {
    let mut seen = std::collections::HashSet::new();
    let mut index = vec![0i64; shape.len()];
    loop {
        let offset: i64 = index.iter().zip(strides).map(|(i, s)| i * s).sum();
        if !seen.insert(offset) {
            return true;
        }
        let mut axis = shape.len();
        loop {
            if axis == 0 {
                return false;
            }
            axis -= 1;
            index[axis] += 1;
            if index[axis] < shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

static CASES: AtomicUsize = AtomicUsize::new(0);
static VIEWS: AtomicUsize = AtomicUsize::new(0);
static ERRORS: AtomicUsize = AtomicUsize::new(0);
static REFUSED: AtomicUsize = AtomicUsize::new(0);

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
