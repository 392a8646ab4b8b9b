//! The independent reference model of the rules a foreign tensor must meet.

use std::sync::atomic::Ordering;

use dlpack_core::Error;

use super::{Expect, Foreign, REFUSED};

/// Error kinds, so that the model need not predict messages.
pub(super) fn kind(err: &Error) -> &'static str {
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

pub(super) const BASE: usize = 64; // bytes of slack before the lowest element
const MAX_BUFFER: usize = 1 << 20;

/// An independent model of the rules, in i128 arithmetic. Returns the expectation and
/// the buffer size the honest producer must allocate.
pub(super) fn model(f: &Foreign) -> (Expect, usize) {
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
