//! The layout engine: pure, `unsafe`-free functions that decide whether a DLPack
//! description (shape, strides, byte offset, element size, address) can be viewed by
//! ndarray, and how.
//!
//! ndarray's `from_shape_ptr` needs non-negative strides, a non-null aligned pointer,
//! element and byte spans that fit `isize`, and (for mutable views) strides that never
//! alias. DLPack allows negative strides, NULL strides (C-contiguous, before 1.2), NULL
//! data for empty tensors, and says nothing about overflow. This module bridges the two:
//!
//! - a negative stride is made positive and its axis is inverted after the view is built,
//!   with the pointer rebased to the lowest address the tensor touches;
//! - strides of axes with extent 1 are ignored (any value is legal there), and every
//!   stride of an empty tensor is 0 (no element is ever addressed);
//! - every product and sum is checked, so an overflow is an error instead of a wrap.

use crate::error::{Error, Result};

/// How to view a validated tensor with positive strides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Number of elements.
    pub(crate) count: usize,
    /// Elements from the first element (index `[0, ...]`) back to the lowest address.
    pub(crate) low: usize,
    /// Elements from the lowest to the highest address touched, plus one; 0 when empty.
    pub(crate) span: usize,
}

/// Number of elements of `shape`: an error for a negative extent or an overflow.
pub(crate) fn element_count(shape: &[i64]) -> Result<usize> {
    let mut count: usize = 1;
    for (axis, &extent) in shape.iter().enumerate() {
        let extent = to_extent(axis, extent)?;
        count = count.checked_mul(extent).ok_or(Error::Overflow {
            what: "element count",
        })?;
    }
    Ok(count)
}

fn to_extent(axis: usize, extent: i64) -> Result<usize> {
    if extent < 0 {
        return Err(Error::NegativeExtent { axis, extent });
    }
    usize::try_from(extent).map_err(|_| Error::Overflow { what: "extent" })
}

/// Validates `shape` and `strides` (NULL = `None` = C-contiguous) for elements of
/// `elem_size` bytes and writes ndarray's dimensions and non-negative strides into
/// `dim_out` and `strides_out` (both of length `shape.len()`).
///
/// An axis whose stride is negative (and extent > 1) must be inverted after the view is
/// built with these positive strides at `first - plan.low` elements.
pub(crate) fn plan(
    shape: &[i64],
    strides: Option<&[i64]>,
    elem_size: usize,
    dim_out: &mut [usize],
    strides_out: &mut [usize],
) -> Result<Plan> {
    let ndim = shape.len();
    debug_assert!(dim_out.len() == ndim && strides_out.len() == ndim);
    debug_assert!(strides.is_none_or(|s| s.len() == ndim));
    let too_big = |what| Error::Overflow { what };
    // Extents, element count, and ndarray's rule that the product of non-zero extents
    // fits `isize` (it holds for empty arrays too).
    let mut count: usize = 1;
    let mut nonzero: usize = 1;
    for (axis, &extent) in shape.iter().enumerate() {
        let extent = to_extent(axis, extent)?;
        dim_out[axis] = extent;
        count = count.saturating_mul(extent);
        if extent != 0 {
            nonzero = nonzero
                .checked_mul(extent)
                .ok_or_else(|| too_big("element count"))?;
        }
    }
    let max_elems = isize::MAX as usize / elem_size.max(1);
    if nonzero > max_elems {
        return Err(too_big("element count"));
    }
    if count == 0 {
        // No element is ever addressed: zero strides make every offset trivially valid.
        strides_out.fill(0);
        return Ok(Plan {
            count: 0,
            low: 0,
            span: 0,
        });
    }
    let (low, high) = match strides {
        None => {
            // C-contiguous; the element count fits, so every stride does too.
            let mut stride = 1;
            for axis in (0..ndim).rev() {
                strides_out[axis] = if dim_out[axis] > 1 { stride } else { 0 };
                stride *= dim_out[axis];
            }
            (0, count - 1)
        }
        Some(strides) => {
            let mut reach = Reach::default();
            for axis in 0..ndim {
                // Any stride is legal on an axis that is never stepped along.
                strides_out[axis] = reach.add(dim_out[axis], strides[axis])?;
            }
            (reach.low, reach.high)
        }
    };
    let span = low
        .checked_add(high)
        .and_then(|s| s.checked_add(1))
        .ok_or_else(|| too_big("element span"))?;
    if span > max_elems {
        return Err(too_big("byte span"));
    }
    Ok(Plan { count, low, span })
}

/// Checks the address of a planned tensor: non-NULL data when it has elements, the
/// first element at `data + byte_offset` aligned to `align`, and the whole span inside
/// the address space. Returns the byte distance from `data` to the lowest address.
///
/// For an empty tensor nothing is checked and the result is meaningless (the view uses a
/// dangling pointer).
pub(crate) fn check_address(
    data: usize,
    byte_offset: u64,
    plan: &Plan,
    elem_size: usize,
    align: usize,
) -> Result<isize> {
    if plan.count == 0 {
        return Ok(0);
    }
    if data == 0 {
        return Err(Error::NullData {
            elements: plan.count,
        });
    }
    let too_big = |what| Error::Overflow { what };
    let offset = usize::try_from(byte_offset).map_err(|_| too_big("byte offset"))?;
    let first = data
        .checked_add(offset)
        .ok_or_else(|| too_big("byte offset"))?;
    if first % align != 0 {
        return Err(Error::Misaligned {
            what: "data",
            address: first,
            align,
        });
    }
    // `plan` guarantees these products fit isize.
    let low_bytes = plan.low * elem_size;
    let lowest = first
        .checked_sub(low_bytes)
        .ok_or_else(|| too_big("address"))?;
    lowest
        .checked_add(plan.span * elem_size)
        .ok_or_else(|| too_big("address"))?;
    // Both `offset` and `low_bytes` are at most isize::MAX... but their difference must
    // fit isize as a signed distance from `data`.
    let delta = offset as i128 - low_bytes as i128;
    isize::try_from(delta).map_err(|_| too_big("byte offset"))
}

/// Checks that positive `strides` (as produced by [`plan`]) never map two indices to the
/// same element: sorted by stride, each stride must exceed the largest offset reachable
/// through all smaller ones. This is exact for the layouts NumPy, PyTorch and ndarray
/// produce, and conservative (may refuse) for exotic interleaved ones.
pub(crate) fn check_no_overlap(dim: &[usize], strides: &[usize]) -> Result<()> {
    if dim.contains(&0) {
        // No elements, nothing to alias.
        return Ok(());
    }
    let mut axes: Vec<(usize, usize)> = dim
        .iter()
        .zip(strides)
        .filter(|&(&d, _)| d > 1)
        .map(|(&d, &s)| (s, d))
        .collect();
    axes.sort_unstable();
    let mut reach: usize = 0;
    for (stride, extent) in axes {
        if stride <= reach {
            return Err(Error::OverlappingStrides);
        }
        // Fits: `plan` bounded the total span.
        reach += stride * (extent - 1);
    }
    Ok(())
}

/// How far a layout reaches from its first element, in elements: below it (through
/// negative strides) and above it (through positive ones). The one span computation of
/// the crate, axis by axis.
#[derive(Default)]
struct Reach {
    low: usize,
    high: usize,
}

impl Reach {
    /// Adds an axis; returns its stride's magnitude, or 0 for an axis that is never
    /// stepped along (extent 0 or 1, whatever its stride). An error when a distance does
    /// not fit `usize`.
    fn add(&mut self, extent: usize, stride: i64) -> Result<usize> {
        if extent <= 1 {
            return Ok(0);
        }
        let too_big = |what| Error::Overflow { what };
        let abs = usize::try_from(stride.unsigned_abs()).map_err(|_| too_big("stride"))?;
        let reach = abs
            .checked_mul(extent - 1)
            .ok_or_else(|| too_big("element span"))?;
        let side = if stride < 0 {
            &mut self.low
        } else {
            &mut self.high
        };
        *side = side
            .checked_add(reach)
            .ok_or_else(|| too_big("element span"))?;
        Ok(abs)
    }
}

/// Checks that an ndarray-style layout can be written as DLPack's `i64`s: one stride per
/// axis, a rank that fits `i32`, extents that fit `i64` (strides, `isize`s, always do).
pub(crate) fn check_native_layout(shape: &[usize], strides_len: usize) -> Result<()> {
    if shape.len() != strides_len {
        return Err(Error::StridesLength {
            ndim: shape.len(),
            strides: strides_len,
        });
    }
    if i32::try_from(shape.len()).is_err() {
        return Err(Error::TooManyDimensions { ndim: shape.len() });
    }
    if shape.iter().any(|&d| i64::try_from(d).is_err()) {
        return Err(Error::Overflow { what: "extent" });
    }
    // isize -> i64 is lossless on every supported target.
    Ok(())
}

/// Checks that a layout rooted at `buffer[offset]` stays inside a buffer of `len`
/// elements (a Rust slice, whose byte size already fits `isize`).
pub(crate) fn check_in_buffer(
    shape: &[usize],
    strides: &[isize],
    offset: usize,
    len: usize,
) -> Result<()> {
    check_native_layout(shape, strides.len())?;
    let outside = || Error::OutOfBuffer { offset, len };
    let mut count: usize = 1;
    for &d in shape {
        count = count.checked_mul(d).ok_or(Error::Overflow {
            what: "element count",
        })?;
    }
    if count == 0 {
        return if offset <= len {
            Ok(())
        } else {
            Err(outside())
        };
    }
    let mut reach = Reach::default();
    for (&extent, &stride) in shape.iter().zip(strides) {
        reach.add(extent, stride as i64)?;
    }
    if reach.low > offset {
        return Err(outside());
    }
    let last = offset.checked_add(reach.high).ok_or_else(outside)?;
    if last >= len {
        return Err(outside());
    }
    Ok(())
}

/// Writes C-contiguous strides for `shape` into `out` (wrapping only for a shape that no
/// consumer would accept anyway).
pub(crate) fn c_strides(shape: &[i64], out: &mut [i64]) {
    let mut stride: i64 = 1;
    for (out, &extent) in out.iter_mut().zip(shape).rev() {
        *out = stride;
        stride = stride.wrapping_mul(extent);
    }
}

/// Writes an ndarray-style layout (checked by [`check_native_layout`]: every value fits
/// `i64`) as DLPack's `i64`s.
pub(crate) fn write_native(
    shape: &[usize],
    strides: &[isize],
    shape_out: &mut [i64],
    strides_out: &mut [i64],
) {
    for (out, &extent) in shape_out.iter_mut().zip(shape) {
        *out = extent as i64;
    }
    for (out, &stride) in strides_out.iter_mut().zip(strides) {
        *out = stride as i64;
    }
}

/// The distinct element offsets of a layout with non-negative strides (as [`plan`]
/// produces them): each offset is visited once however many indices reach it, so that
/// a check of every byte of a broadcast tensor costs what its memory holds, not what
/// its shape says.
///
/// Axes of extent 1 and axes with stride 0 contribute one position. The other axes,
/// sorted by stride, are merged into arithmetic progressions where one continues
/// another without gaps (its stride a multiple of the progression's, at most one
/// progression long: contiguous axes, and sliding windows such as NumPy's
/// `as_strided` makes). When the progressions do not overlap each other (each stride
/// exceeds the reach of all smaller ones: every layout NumPy, PyTorch and ndarray make,
/// and every broadcast and window of them) each offset is visited exactly once;
/// otherwise some offsets are visited more than once, never more often than the
/// tensor's index combinations reach them.
#[derive(Debug)]
pub(crate) struct Positions {
    progressions: Vec<Progression>,
}

/// Offsets `0, stride, ..., (extent - 1) * stride`, made of one or more axes.
#[derive(Debug)]
struct Progression {
    stride: usize,
    extent: usize,
    /// `(axis, step, extent)`: the axes merged here, each `step` progression strides
    /// per index, in increasing order of `step`.
    axes: Vec<(usize, usize, usize)>,
}

impl Positions {
    pub(crate) fn new(dim: &[usize], strides: &[usize]) -> Self {
        let mut axes: Vec<(usize, usize, usize)> = dim
            .iter()
            .zip(strides)
            .enumerate()
            .filter(|&(_, (&extent, &stride))| extent > 1 && stride > 0)
            .map(|(axis, (&extent, &stride))| (stride, axis, extent))
            .collect();
        axes.sort_unstable();
        let mut progressions: Vec<Progression> = Vec::new();
        for (stride, axis, extent) in axes {
            if let Some(last) = progressions.last_mut() {
                let step = stride / last.stride;
                if stride % last.stride == 0 && step <= last.extent {
                    // The union of `extent` copies shifted by `step` leaves no gap.
                    // Fits: it is at most the span, which `plan` bounded.
                    last.extent += (extent - 1) * step;
                    last.axes.push((axis, step, extent));
                    continue;
                }
            }
            progressions.push(Progression {
                stride,
                extent,
                axes: vec![(axis, 1, extent)],
            });
        }
        Self { progressions }
    }

    /// The first visited offset for which `found` holds, as one index (per axis of the
    /// layout, along its non-negative strides) that reaches it.
    pub(crate) fn find(
        &self,
        ndim: usize,
        mut found: impl FnMut(usize) -> bool,
    ) -> Option<Vec<usize>> {
        let progs = &self.progressions;
        let mut at = vec![0usize; progs.len()];
        let mut offset = 0usize;
        loop {
            if found(offset) {
                return Some(self.index_of(ndim, &at));
            }
            // The next combination, the smallest stride fastest (memory order).
            let mut k = 0;
            loop {
                let prog = progs.get(k)?;
                if at[k] + 1 < prog.extent {
                    at[k] += 1;
                    offset += prog.stride;
                    break;
                }
                offset -= (prog.extent - 1) * prog.stride;
                at[k] = 0;
                k += 1;
            }
        }
    }

    /// An index of the layout reaching position `at[k]` of every progression.
    fn index_of(&self, ndim: usize, at: &[usize]) -> Vec<usize> {
        let mut index = vec![0; ndim];
        for (prog, &position) in self.progressions.iter().zip(at) {
            // Largest step first: each takes as much as it can, and what is left is
            // always reachable by the smaller ones (they cover it without gaps).
            let mut rest = position;
            for &(axis, step, extent) in prog.axes.iter().rev() {
                let i = (rest / step).min(extent - 1);
                index[axis] = i;
                rest -= i * step;
            }
        }
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        shape: &[i64],
        strides: Option<&[i64]>,
        size: usize,
    ) -> Result<(Plan, Vec<usize>, Vec<usize>)> {
        let mut d = vec![0; shape.len()];
        let mut s = vec![0; shape.len()];
        let p = plan(shape, strides, size, &mut d, &mut s)?;
        Ok((p, d, s))
    }

    #[test]
    fn c_contiguous_when_strides_null() {
        let (p, d, s) = run(&[2, 3, 4], None, 4).unwrap();
        assert_eq!(
            p,
            Plan {
                count: 24,
                low: 0,
                span: 24
            }
        );
        assert_eq!(d, [2, 3, 4]);
        assert_eq!(s, [12, 4, 1]);
    }

    #[test]
    fn negative_strides_rebase() {
        let (p, _, s) = run(&[3, 2], Some(&[-2, 1]), 8).unwrap();
        assert_eq!(
            p,
            Plan {
                count: 6,
                low: 4,
                span: 6
            }
        );
        assert_eq!(s, [2, 1]);
    }

    #[test]
    fn extent_one_strides_ignored() {
        let (p, _, s) = run(&[1, 4], Some(&[i64::MIN, 1]), 4).unwrap();
        assert_eq!(p.span, 4);
        assert_eq!(s, [0, 1]);
    }

    #[test]
    fn empty_has_zero_strides_and_no_span() {
        let (p, _, s) = run(&[0, 5], Some(&[i64::MAX, -3]), 4).unwrap();
        assert_eq!(
            p,
            Plan {
                count: 0,
                low: 0,
                span: 0
            }
        );
        assert_eq!(s, [0, 0]);
    }

    #[test]
    fn errors() {
        assert_eq!(
            run(&[2, -1], None, 4).unwrap_err(),
            Error::NegativeExtent {
                axis: 1,
                extent: -1
            }
        );
        assert!(matches!(
            run(&[i64::MAX, 2], None, 1),
            Err(Error::Overflow { .. })
        ));
        assert!(matches!(
            run(&[0, i64::MAX, 4], None, 1),
            Err(Error::Overflow { .. })
        ));
        assert!(matches!(
            run(&[2], Some(&[i64::MAX]), 1),
            Err(Error::Overflow { .. })
        ));
        assert!(matches!(
            run(&[3], Some(&[i64::MAX / 4]), 4),
            Err(Error::Overflow { .. })
        ));
        assert!(matches!(
            run(&[2], Some(&[i64::MIN]), 1),
            Err(Error::Overflow { .. })
        ));
    }

    #[test]
    fn addresses() {
        let p = Plan {
            count: 6,
            low: 4,
            span: 6,
        };
        assert_eq!(check_address(0x1000, 32, &p, 8, 8), Ok(0));
        assert!(matches!(
            check_address(0, 0, &p, 8, 8),
            Err(Error::NullData { elements: 6 })
        ));
        assert!(matches!(
            check_address(0x1001, 0, &p, 8, 8),
            Err(Error::Misaligned { .. })
        ));
        assert!(matches!(
            check_address(8, 0, &p, 8, 8),
            Err(Error::Overflow { .. })
        ));
        assert!(matches!(
            check_address(
                usize::MAX - 7,
                0,
                &Plan {
                    count: 2,
                    low: 0,
                    span: 2
                },
                8,
                8
            ),
            Err(Error::Overflow { .. })
        ));
        let empty = Plan {
            count: 0,
            low: 0,
            span: 0,
        };
        assert_eq!(check_address(0, u64::MAX, &empty, 8, 8), Ok(0));
    }

    #[test]
    fn overlap() {
        assert!(check_no_overlap(&[2, 3], &[3, 1]).is_ok());
        assert!(check_no_overlap(&[2, 3], &[1, 2]).is_ok());
        assert!(check_no_overlap(&[2, 3], &[1, 1]).is_err());
        assert!(check_no_overlap(&[2, 3], &[0, 1]).is_err());
        assert!(check_no_overlap(&[1, 3], &[0, 1]).is_ok());
        assert!(check_no_overlap(&[2, 0], &[0, 0]).is_ok());
    }

    /// Every offset reachable through `dim` and `strides`, with how many indices reach it.
    fn brute_force(dim: &[usize], strides: &[usize]) -> std::collections::BTreeMap<usize, usize> {
        let mut counts = std::collections::BTreeMap::new();
        let count: usize = dim.iter().product();
        for flat in 0..count {
            let mut rest = flat;
            let mut offset = 0;
            for (&d, &s) in dim.iter().zip(strides).rev() {
                offset += (rest % d) * s;
                rest /= d;
            }
            *counts.entry(offset).or_insert(0) += 1;
        }
        counts
    }

    fn offset_of(index: &[usize], strides: &[usize]) -> usize {
        index.iter().zip(strides).map(|(i, s)| i * s).sum()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: if cfg!(miri) { 4 } else { 2000 },
            failure_persistence: None,
            ..Default::default()
        })]

        /// `Positions` visits every reachable offset, each once when the layout does not
        /// overlap itself, and `find` names an index that reaches the offset it found.
        #[test]
        fn positions_visit_every_offset(
            axes in proptest::collection::vec((1usize..5, 0usize..7), 0..5),
            pick in 0usize..1000,
        ) {
            let dim: Vec<usize> = axes.iter().map(|a| a.0).collect();
            let strides: Vec<usize> = axes.iter().map(|a| a.1).collect();
            let expected = brute_force(&dim, &strides);
            let positions = Positions::new(&dim, &strides);
            let mut seen = std::collections::BTreeMap::new();
            let none = positions.find(dim.len(), |offset| {
                *seen.entry(offset).or_insert(0usize) += 1;
                false
            });
            proptest::prop_assert!(none.is_none());
            proptest::prop_assert_eq!(
                seen.keys().collect::<Vec<_>>(),
                expected.keys().collect::<Vec<_>>()
            );
            // Never more visits than indices reach an offset; exactly one when no two
            // indices with distinct positions along non-broadcast axes collide.
            for (offset, &visits) in &seen {
                proptest::prop_assert!(visits <= expected[offset]);
            }
            let reduced: Vec<usize> = dim
                .iter()
                .zip(&strides)
                .map(|(&d, &s)| if s == 0 { 1 } else { d })
                .collect();
            if check_no_overlap(&reduced, &strides).is_ok() {
                proptest::prop_assert!(seen.values().all(|&v| v == 1));
            }
            // `find` stops at the offset asked for, with an index that reaches it.
            let keys: Vec<usize> = expected.keys().copied().collect();
            let target = keys[pick % keys.len()];
            let index = positions.find(dim.len(), |offset| offset == target).unwrap();
            proptest::prop_assert_eq!(index.len(), dim.len());
            proptest::prop_assert!(index.iter().zip(&dim).all(|(i, d)| i < d));
            proptest::prop_assert_eq!(offset_of(&index, &strides), target);
        }
    }

    #[test]
    fn positions_of_broadcast_and_windows() {
        let count = |dim: &[usize], strides: &[usize]| {
            let mut n = 0;
            Positions::new(dim, strides).find(dim.len(), |_| {
                n += 1;
                false
            });
            n
        };
        // 2^40 elements over one byte; one axis broadcast; a window of 2^20 x 2^20.
        assert_eq!(count(&[1 << 40], &[0]), 1);
        assert_eq!(count(&[1 << 30, 3], &[0, 1]), 3);
        let n = if cfg!(miri) { 1 << 8 } else { 1 << 20 };
        assert_eq!(count(&[n, n], &[1, 1]), 2 * n - 1);
        // Interleaved but disjoint, and C order.
        assert_eq!(count(&[2, 3], &[1, 2]), 6);
        assert_eq!(count(&[4, 5, 6], &[30, 6, 1]), 120);
    }

    #[test]
    fn in_buffer() {
        assert!(check_in_buffer(&[2, 3], &[3, 1], 0, 6).is_ok());
        assert!(check_in_buffer(&[2, 3], &[3, 1], 1, 6).is_err());
        assert!(check_in_buffer(&[3], &[-1], 2, 3).is_ok());
        assert!(check_in_buffer(&[3], &[-1], 1, 3).is_err());
        assert!(check_in_buffer(&[0, 3], &[3, 1], 6, 6).is_ok());
        assert!(check_in_buffer(&[2], &[1, 1], 0, 6).is_err());
    }
}
