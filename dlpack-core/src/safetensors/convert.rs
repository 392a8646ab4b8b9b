//! Float conversions on load, as PyTorch's `Tensor.to(dtype)` makes them on the CPU:
//! widening (`bfloat16` or `float16` to `float32` or `float64`, `float32` to `float64`)
//! is exact; narrowing rounds to nearest, ties to even, through `float32` as PyTorch's
//! element types convert (a `float64` becomes `float32` first, then `bfloat16` or
//! `float16`); a NaN stays a NaN and infinities stay infinite.
//!
//! Bytes in, bytes out (safetensors stores little-endian), in blocks small enough for
//! the cache, with loops the compiler vectorises: `bfloat16` is the top half of a
//! `float32`; `float16` widens by integer and float arithmetic without a branch (the
//! result of the hardware's conversion, which PyTorch's `.float()` also gives: a
//! signalling NaN comes out quiet, its payload kept), compiled a second time for AVX2,
//! which runs where the CPU has it (the one `unsafe` here: the call after the
//! check). Narrowing to `float16` uses `half`'s slice conversion.

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

use crate::dtype::DataType;
use crate::error::{Error, Result};

/// Elements converted at a time, through [`Scratch`]: 16 Ki `f32`s and `u16`s (96 KiB).
const BLOCK: usize = 16 * 1024;

/// Whether a load converts between `dtype` and the other float types.
pub(super) fn is_float(dtype: DataType) -> bool {
    [DataType::BF16, DataType::F16, DataType::F32, DataType::F64].contains(&dtype)
}

/// The working memory of one converting thread: at most [`BLOCK`] `f32`s and `u16`s.
#[derive(Default)]
pub(super) struct Scratch {
    floats: Vec<f32>,
    halves: Vec<u16>,
}

/// Converts the little-endian floats of `from` in `src` into `to` in `dst`, as a
/// converting load does ([`ReadOptions::convert_floats`](super::ReadOptions::convert_floats)):
/// widening (`bfloat16` or `float16` to `float32` or `float64`, `float32` to `float64`)
/// is exact, NaN payloads included, bit for bit as PyTorch's `.float()` and
/// `.double()`; narrowing rounds to nearest, ties to even, through `float32` as
/// PyTorch converts. The same type in and out is a copy. For bytes that are not a
/// file's: a mapped tensor of another float type, say.
///
/// ```
/// use dlpack_core::DataType;
/// use dlpack_core::safetensors::convert_floats;
///
/// let bf16 = [0x80u8, 0x3F, 0x00, 0xC0]; // 1.0, -2.0
/// let mut f32s = [0u8; 8];
/// convert_floats(DataType::BF16, DataType::F32, &bf16, &mut f32s)?;
/// assert_eq!(f32::from_le_bytes(f32s[4..].try_into().unwrap()), -2.0);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::UnsupportedDtype`] when `from` or `to` is not `bfloat16`, `float16`,
/// `float32` or `float64`; [`Error::ShapeMismatch`], in bytes, when `src` is not a
/// whole number of elements or `dst` has not exactly room for as many.
pub fn convert_floats(from: DataType, to: DataType, src: &[u8], dst: &mut [u8]) -> Result<()> {
    for dtype in [from, to] {
        if !is_float(dtype) {
            return Err(Error::UnsupportedDtype { dtype });
        }
    }
    let count = src.len() / from.size_in_bytes();
    let whole = count * from.size_in_bytes();
    if whole != src.len() {
        return Err(Error::ShapeMismatch {
            expected: vec![whole],
            found: vec![src.len()],
        });
    }
    let needed = count * to.size_in_bytes();
    if dst.len() != needed {
        return Err(Error::ShapeMismatch {
            expected: vec![needed],
            found: vec![dst.len()],
        });
    }
    if from == to {
        dst.copy_from_slice(src);
        return Ok(());
    }
    convert(from, to, src, dst, &mut Scratch::default());
    Ok(())
}

/// Converts the elements of `from` in `src` (little-endian) into `to` in `dst`
/// (little-endian): `dst` holds exactly as many elements as `src`. Both are float types
/// ([`is_float`]), and distinct.
pub(super) fn convert(
    from: DataType,
    to: DataType,
    src: &[u8],
    dst: &mut [u8],
    scratch: &mut Scratch,
) {
    let (from_size, to_size) = (from.size_in_bytes(), to.size_in_bytes());
    debug_assert_eq!(src.len() / from_size, dst.len() / to_size);
    // The hot paths, without a pass through `float32`.
    if from == DataType::BF16 && to == DataType::F32 {
        return bf16_to_f32(src, dst);
    }
    if from == DataType::F32 && to == DataType::BF16 {
        return f32_to_bf16(src, dst);
    }
    if from == DataType::F16 && to == DataType::F32 {
        return f16_to_f32(src, dst);
    }
    let Scratch { floats, halves } = scratch;
    for (src, dst) in src
        .chunks(BLOCK * from_size)
        .zip(dst.chunks_mut(BLOCK * to_size))
    {
        let n = src.len() / from_size;
        floats.resize(n, 0.0);
        decode(from, src, floats);
        encode(to, floats, dst, halves);
    }
}

/// `bfloat16` to `float32`: the 16 bits become the top half (exact, NaNs kept bit for
/// bit, as PyTorch does).
fn bf16_to_f32(src: &[u8], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(4).zip(src.chunks_exact(2)) {
        let bits = u32::from(u16::from_le_bytes([s[0], s[1]])) << 16;
        d.copy_from_slice(&bits.to_le_bytes());
    }
}

/// `float16` to `float32` (exact; a NaN keeps its sign and payload, quieted), with the
/// widest vectors the CPU has.
fn f16_to_f32(src: &[u8], dst: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY:
        // - the CPU has AVX2 (detected just above), the one feature the function is
        //   compiled for.
        return unsafe { f16_to_f32_avx2(src, dst) };
    }
    f16_to_f32_blocks(src, dst);
}

/// [`f16_to_f32_blocks`] compiled for AVX2.
///
/// # Safety
///
/// - the CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn f16_to_f32_avx2(src: &[u8], dst: &mut [u8]) {
    f16_to_f32_blocks(src, dst);
}

/// `float16` to `float32` in blocks of 16 (fixed-size arrays, which the compiler turns
/// into vector code), then the rest one by one.
#[inline(always)]
fn f16_to_f32_blocks(src: &[u8], dst: &mut [u8]) {
    let mut src_blocks = src.chunks_exact(32);
    let mut dst_blocks = dst.chunks_exact_mut(64);
    for (s, d) in (&mut src_blocks).zip(&mut dst_blocks) {
        let mut out = [0u32; 16];
        for (i, o) in out.iter_mut().enumerate() {
            *o = f16_to_f32_bits(u16::from_le_bytes([s[2 * i], s[2 * i + 1]]));
        }
        for (d, o) in d.chunks_exact_mut(4).zip(out) {
            d.copy_from_slice(&o.to_le_bytes());
        }
    }
    let rest = src_blocks.remainder().chunks_exact(2);
    for (d, s) in dst_blocks.into_remainder().chunks_exact_mut(4).zip(rest) {
        d.copy_from_slice(&f16_to_f32_bits(u16::from_le_bytes([s[0], s[1]])).to_le_bytes());
    }
}

/// The bits of the `float32` equal to the `float16` of bits `h`, without a branch:
/// the value's bits moved into a `float32`'s places and scaled by 2^-112 (exact, and
/// infinities and NaNs stay what they are, a signalling NaN quieted by the
/// multiplication as the hardware's conversion quiets it), or, for a subnormal `h`,
/// its mantissa placed under the exponent of 0.5 and 0.5 taken away (exact).
#[inline(always)]
fn f16_to_f32_bits(h: u16) -> u32 {
    let w = u32::from(h) << 16;
    let sign = w & 0x8000_0000;
    // The exponent and mantissa, at the top (the sign shifted out).
    let two_w = w.wrapping_add(w);
    // 2^-112: the exponent bias of `float32` (127) less that of `float16` (15), and
    // the 0xE0 added to the exponent below, which turns `float16`'s all-ones
    // exponent into `float32`'s.
    let scale = f32::from_bits(0x0780_0000);
    let normal = (f32::from_bits((two_w >> 4) + (0xE0 << 23)) * scale).to_bits();
    let subnormal = (f32::from_bits((two_w >> 17) | (126 << 23)) - 0.5).to_bits();
    // All ones where `h` is subnormal or zero (an exponent of 0).
    let small = u32::from(two_w < (1 << 27)).wrapping_neg();
    // Infinities and NaNs by bits alone (Rust leaves the payload of a NaN that
    // arithmetic makes unspecified): the mantissa moved up, a NaN's quiet bit set.
    let mantissa = u32::from(h & 0x3FF);
    let special = 0x7F80_0000 | (u32::from(mantissa != 0) << 22) | (mantissa << 13);
    let top = u32::from(h & 0x7C00 == 0x7C00).wrapping_neg();
    let finite = (subnormal & small) | (normal & !small);
    sign | (special & top) | (finite & !top)
}

/// `float32` to `bfloat16`, rounded to nearest, ties to even, as PyTorch rounds; a NaN
/// becomes a quiet NaN.
fn f32_to_bf16(src: &[u8], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(2).zip(src.chunks_exact(4)) {
        let value = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        d.copy_from_slice(&bf16_bits(value).to_le_bytes());
    }
}

/// The `bfloat16` nearest to `value` (ties to even); NaN is `0x7FC0`.
fn bf16_bits(value: f32) -> u16 {
    if value.is_nan() {
        return 0x7FC0;
    }
    let bits = value.to_bits();
    let rounding = 0x7FFF + ((bits >> 16) & 1);
    // No overflow: the largest finite or infinite pattern is below `u32::MAX - 0x8000`.
    (bits.wrapping_add(rounding) >> 16) as u16
}

/// Reads the elements of `from` in `src` as `float32`s into `out` (as many as `src`
/// holds): exact but for `float64`, rounded to nearest, ties to even.
fn decode(from: DataType, src: &[u8], out: &mut [f32]) {
    if from == DataType::BF16 {
        for (o, s) in out.iter_mut().zip(src.chunks_exact(2)) {
            *o = f32::from_bits(u32::from(u16::from_le_bytes([s[0], s[1]])) << 16);
        }
    } else if from == DataType::F16 {
        for (o, s) in out.iter_mut().zip(src.chunks_exact(2)) {
            *o = f32::from_bits(f16_to_f32_bits(u16::from_le_bytes([s[0], s[1]])));
        }
    } else if from == DataType::F32 {
        for (o, s) in out.iter_mut().zip(src.chunks_exact(4)) {
            *o = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        }
    } else {
        for (o, s) in out.iter_mut().zip(src.chunks_exact(8)) {
            let bytes = [s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]];
            *o = f64::from_le_bytes(bytes) as f32;
        }
    }
}

/// Writes the `float32`s of `values` as `to` into `dst`: exact for `float32` and
/// `float64`, rounded to nearest, ties to even, for `bfloat16` and `float16`.
fn encode(to: DataType, values: &[f32], dst: &mut [u8], halves: &mut Vec<u16>) {
    if to == DataType::BF16 {
        for (d, &v) in dst.chunks_exact_mut(2).zip(values) {
            d.copy_from_slice(&bf16_bits(v).to_le_bytes());
        }
    } else if to == DataType::F16 {
        halves.clear();
        halves.resize(values.len(), 0);
        halves
            .reinterpret_cast_mut::<f16>()
            .convert_from_f32_slice(values);
        for (d, h) in dst.chunks_exact_mut(2).zip(halves.iter()) {
            d.copy_from_slice(&h.to_le_bytes());
        }
    } else if to == DataType::F32 {
        for (d, v) in dst.chunks_exact_mut(4).zip(values) {
            d.copy_from_slice(&v.to_le_bytes());
        }
    } else {
        for (d, &v) in dst.chunks_exact_mut(8).zip(values) {
            d.copy_from_slice(&f64::from(v).to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(from: DataType, to: DataType, src: &[u8]) -> Vec<u8> {
        let n = src.len() / from.size_in_bytes();
        let mut dst = vec![0u8; n * to.size_in_bytes()];
        convert(from, to, src, &mut dst, &mut Scratch::default());
        dst
    }

    fn bytes_f32(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn f32s(bytes: &[u8]) -> Vec<f32> {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    #[test]
    fn bf16_widens_exactly_and_narrows_to_nearest_even() {
        // 1.0, -2.0, the smallest subnormal, infinity, a NaN with a payload.
        let bf16: Vec<u16> = vec![0x3F80, 0xC000, 0x0001, 0x7F80, 0x7FC1];
        let src: Vec<u8> = bf16.iter().flat_map(|b| b.to_le_bytes()).collect();
        let wide = run(DataType::BF16, DataType::F32, &src);
        let bits: Vec<u32> = f32s(&wide).iter().map(|v| v.to_bits()).collect();
        assert_eq!(
            bits,
            [
                0x3F80_0000,
                0xC000_0000,
                0x0001_0000,
                0x7F80_0000,
                0x7FC1_0000
            ]
        );
        // Back again: the same bits, but the NaN, which narrows to the quiet NaN
        // PyTorch gives.
        let mut back = src.clone();
        back[8..].copy_from_slice(&0x7FC0u16.to_le_bytes());
        assert_eq!(run(DataType::F32, DataType::BF16, &wide), back);
        // Ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7; 1 + 3 * 2^-8 rounds
        // up to the even 1 + 2^-6. Past the largest finite value: infinity.
        let ties = bytes_f32(&[1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, f32::MAX, f32::NAN]);
        let narrow = run(DataType::F32, DataType::BF16, &ties);
        let narrow: Vec<u16> = narrow
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(narrow, [0x3F80, 0x3F82, 0x7F80, 0x7FC0]);
    }

    #[test]
    fn every_pair_of_float_types_round_trips_what_both_can_hold() {
        let floats = [DataType::BF16, DataType::F16, DataType::F32, DataType::F64];
        // Values every one of the four types holds exactly.
        let values = [0.0f32, -0.0, 1.0, -1.5, 0.25, 3.0, 1024.0, -0.0078125];
        for &from in &floats {
            let src = run(DataType::F32, from, &bytes_f32(&values));
            if from == DataType::F32 {
                continue;
            }
            assert_eq!(f32s(&run(from, DataType::F32, &src)), values, "{from}");
            for &to in &floats {
                if to == from {
                    continue;
                }
                let there = run(from, to, &src);
                assert_eq!(run(to, from, &there), src, "{from} -> {to} -> {from}");
            }
        }
    }

    #[test]
    fn float64_narrows_through_float32() {
        // Just above the halfway point between two bfloat16s only in float64: rounded to
        // float32 first it becomes the tie, which goes to even (down), as PyTorch gives.
        let x = 1.0f64 + 1.0 / 256.0 + 1e-12;
        let src = x.to_le_bytes();
        let out = run(DataType::F64, DataType::BF16, &src);
        assert_eq!(u16::from_le_bytes([out[0], out[1]]), 0x3F80);
    }

    #[test]
    #[cfg_attr(miri, ignore = "converts tens of thousands of elements")]
    fn conversions_longer_than_a_block_convert_every_element() {
        let many: Vec<f32> = (0..BLOCK as u32 * 2 + 3).map(|i| i as f32).collect();
        let halves = run(DataType::F32, DataType::F16, &bytes_f32(&many));
        let back = f32s(&run(DataType::F16, DataType::F32, &halves));
        for (i, v) in back.iter().enumerate() {
            assert_eq!(*v, half::f16::from_f32(i as f32).to_f32());
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "converts every one of 65,536 values")]
    fn f16_widens_every_value_exactly_and_quiets_nans_keeping_payloads() {
        // One more than a block of 16, and the rest: both loops, both code paths.
        let every: Vec<u16> = (0..=u16::MAX).chain([0x7C01, 0xFE01, 0x0001]).collect();
        let src: Vec<u8> = every.iter().flat_map(|h| h.to_le_bytes()).collect();
        let expected = |h: u16| {
            let (sign, exponent, mantissa) = (h & 0x8000, h & 0x7C00, u32::from(h & 0x3FF));
            if exponent == 0x7C00 && mantissa != 0 {
                (u32::from(sign) << 16) | 0x7FC0_0000 | (mantissa << 13)
            } else {
                f16::from_bits(h).to_f32().to_bits()
            }
        };
        for to in [DataType::F32, DataType::F64] {
            let out = run(DataType::F16, to, &src);
            for (i, &h) in every.iter().enumerate() {
                let bits = if to == DataType::F32 {
                    let got = u32::from_le_bytes(out[4 * i..4 * i + 4].try_into().unwrap());
                    assert_eq!(got, expected(h), "{h:#06x}");
                    continue;
                } else {
                    u64::from_le_bytes(out[8 * i..8 * i + 8].try_into().unwrap())
                };
                let want = f64::from(f32::from_bits(expected(h))).to_bits();
                assert_eq!(bits, want, "{h:#06x}");
            }
        }
        // The portable loop gives what the dispatched one gives.
        let mut portable = vec![0u8; src.len() * 2];
        f16_to_f32_blocks(&src, &mut portable);
        assert_eq!(portable, run(DataType::F16, DataType::F32, &src));
    }

    #[test]
    fn convert_floats_checks_types_and_lengths() {
        let mut out = [0u8; 8];
        assert!(
            convert_floats(DataType::F16, DataType::F32, &[0, 0x3C, 0, 0xC0], &mut out).is_ok()
        );
        assert_eq!(f32::from_le_bytes(out[..4].try_into().unwrap()), 1.0);
        assert_eq!(f32::from_le_bytes(out[4..].try_into().unwrap()), -2.0);
        let err = convert_floats(DataType::U8, DataType::F32, &[0], &mut out).unwrap_err();
        assert!(matches!(err, Error::UnsupportedDtype { .. }), "{err}");
        let err = convert_floats(DataType::F16, DataType::F32, &[0, 0, 0], &mut out).unwrap_err();
        assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
        let err = convert_floats(DataType::F16, DataType::F32, &[0, 0], &mut out).unwrap_err();
        assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
        let mut same = [0u8; 4];
        convert_floats(DataType::F16, DataType::F16, &[1, 2, 3, 4], &mut same).unwrap();
        assert_eq!(same, [1, 2, 3, 4]);
    }
}
