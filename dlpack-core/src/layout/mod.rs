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

mod positions;

#[cfg(any(feature = "ndarray", feature = "safetensors"))]
pub(crate) use positions::Positions;

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

/// Writes `shape` and `strides` into a new header's arrays: C-contiguous strides when
/// there are none (DLPack 1.2 and later require them).
pub(crate) fn copy_into(
    shape: &[i64],
    strides: Option<&[i64]>,
    shape_out: &mut [i64],
    strides_out: &mut [i64],
) {
    shape_out.copy_from_slice(shape);
    match strides {
        Some(given) => strides_out.copy_from_slice(given),
        None => c_strides(shape, strides_out),
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
