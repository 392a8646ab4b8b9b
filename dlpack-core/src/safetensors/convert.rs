//! Float conversions on load, as PyTorch's `Tensor.to(dtype)` makes them on the CPU:
//! widening (`bfloat16` or `float16` to `float32` or `float64`, `float32` to `float64`)
//! is exact; narrowing rounds to nearest, ties to even, through `float32` as PyTorch's
//! element types convert (a `float64` becomes `float32` first, then `bfloat16` or
//! `float16`); a NaN stays a NaN and infinities stay infinite.
//!
//! Bytes in, bytes out (safetensors stores little-endian), in blocks small enough for
//! the cache, with loops the compiler vectorises (`bfloat16` is the top half of a
//! `float32`) and `half`'s slice conversions (hardware instructions where the CPU has
//! them) for `float16`. No `unsafe`.

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

use crate::dtype::DataType;

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
    let Scratch { floats, halves } = scratch;
    for (src, dst) in src
        .chunks(BLOCK * from_size)
        .zip(dst.chunks_mut(BLOCK * to_size))
    {
        let n = src.len() / from_size;
        floats.resize(n, 0.0);
        decode(from, src, floats, halves);
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
fn decode(from: DataType, src: &[u8], out: &mut [f32], halves: &mut Vec<u16>) {
    if from == DataType::BF16 {
        for (o, s) in out.iter_mut().zip(src.chunks_exact(2)) {
            *o = f32::from_bits(u32::from(u16::from_le_bytes([s[0], s[1]])) << 16);
        }
    } else if from == DataType::F16 {
        halves.clear();
        halves.extend(
            src.chunks_exact(2)
                .map(|s| u16::from_le_bytes([s[0], s[1]])),
        );
        halves.reinterpret_cast::<f16>().convert_to_f32_slice(out);
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
}
