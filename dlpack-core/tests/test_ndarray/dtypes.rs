//! Every element type, exported and imported back, without a copy.

use dlpack_core::{DataType, FromDLPack, ToDLPack};
use ndarray::{Array, Array2, Ix2};

macro_rules! dtype_round_trips {
    ($($name:ident: $ty:ty = $values:expr, $dtype:expr;)*) => {$(
        #[test]
        fn $name() {
            let values: Vec<$ty> = $values;
            let n = values.len();
            let a = Array::from_shape_vec((2, n / 2), values).unwrap();
            let exported = a.clone();
            let ptr = exported.as_ptr();
            let t = exported.to_dlpack().unwrap();
            assert_eq!(t.dtype(), $dtype);
            assert_eq!(t.as_array::<$ty, Ix2>().unwrap(), a);
            let back = Array2::<$ty>::from_dlpack(t).unwrap();
            assert_eq!((back.as_ptr(), &back), (ptr, &a));
            // Transposed, through a copy.
            let t = a.t().to_dlpack().unwrap();
            assert_eq!(t.as_array::<$ty, Ix2>().unwrap(), a.t());
        }
    )*};
}

dtype_round_trips! {
    dtype_i8: i8 = vec![-1, 2, -3, 4], DataType::I8;
    dtype_i16: i16 = vec![-1, 2, -3, 4], DataType::I16;
    dtype_i32: i32 = vec![-1, 2, -3, 4], DataType::I32;
    dtype_i64: i64 = vec![-1, 2, -3, i64::MIN], DataType::I64;
    dtype_u8: u8 = vec![1, 2, 3, 255], DataType::U8;
    dtype_u16: u16 = vec![1, 2, 3, 4], DataType::U16;
    dtype_u32: u32 = vec![1, 2, 3, 4], DataType::U32;
    dtype_u64: u64 = vec![1, 2, 3, u64::MAX], DataType::U64;
    dtype_f32: f32 = vec![1.5, -2.0, 3.25, 4.0], DataType::F32;
    dtype_f64: f64 = vec![1.5, -2.0, 3.25, f64::MAX], DataType::F64;
    dtype_bool: bool = vec![true, false, false, true], DataType::BOOL;
}

#[cfg(feature = "half")]
dtype_round_trips! {
    dtype_f16: half::f16 = [1.0f32, -2.0, 0.5, 65504.0].map(half::f16::from_f32).to_vec(), DataType::F16;
    dtype_bf16: half::bf16 = [1.0f32, -2.0, 0.5, 3.0e38].map(half::bf16::from_f32).to_vec(), DataType::BF16;
}

#[cfg(feature = "complex")]
dtype_round_trips! {
    dtype_c64: num_complex::Complex<f32> = vec![num_complex::Complex::new(1.0, -1.0); 4], DataType::C64;
    dtype_c128: num_complex::Complex<f64> = (0..4).map(|i| num_complex::Complex::new(i as f64, -(i as f64))).collect(), DataType::C128;
}
