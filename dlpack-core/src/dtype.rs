//! Element types: the safe [`DataType`] and the [`Element`] trait that maps a Rust scalar
//! to its DLPack type.

use core::fmt;

use crate::ffi::{DLDataType, DLDataTypeCode};

/// The type of one tensor element: a DLPack `(code, bits, lanes)` triple.
///
/// Displays like NumPy names it: `float32`, `int64`, `bool`, `complex64`, `bfloat16`;
/// vector types get a lane suffix (`float32x4`) and unknown codes their number.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DataType(DLDataType);

impl DataType {
    /// `bool`: code `kDLBool`, 8 bits.
    pub const BOOL: Self = Self::new(DLDataTypeCode::kDLBool, 8, 1);
    /// `int8`.
    pub const I8: Self = Self::new(DLDataTypeCode::kDLInt, 8, 1);
    /// `int16`.
    pub const I16: Self = Self::new(DLDataTypeCode::kDLInt, 16, 1);
    /// `int32`.
    pub const I32: Self = Self::new(DLDataTypeCode::kDLInt, 32, 1);
    /// `int64`.
    pub const I64: Self = Self::new(DLDataTypeCode::kDLInt, 64, 1);
    /// `uint8`.
    pub const U8: Self = Self::new(DLDataTypeCode::kDLUInt, 8, 1);
    /// `uint16`.
    pub const U16: Self = Self::new(DLDataTypeCode::kDLUInt, 16, 1);
    /// `uint32`.
    pub const U32: Self = Self::new(DLDataTypeCode::kDLUInt, 32, 1);
    /// `uint64`.
    pub const U64: Self = Self::new(DLDataTypeCode::kDLUInt, 64, 1);
    /// `float16` (IEEE half precision).
    pub const F16: Self = Self::new(DLDataTypeCode::kDLFloat, 16, 1);
    /// `float32`.
    pub const F32: Self = Self::new(DLDataTypeCode::kDLFloat, 32, 1);
    /// `float64`.
    pub const F64: Self = Self::new(DLDataTypeCode::kDLFloat, 64, 1);
    /// `bfloat16`.
    pub const BF16: Self = Self::new(DLDataTypeCode::kDLBfloat, 16, 1);
    /// `complex64`: two `float32`, real part first.
    pub const C64: Self = Self::new(DLDataTypeCode::kDLComplex, 64, 1);
    /// `complex128`: two `float64`, real part first.
    pub const C128: Self = Self::new(DLDataTypeCode::kDLComplex, 128, 1);
    /// `float8_e4m3fn`: 4 exponent bits, 3 mantissa bits, finite (no infinities), as
    /// PyTorch's `float8_e4m3fn` and safetensors' `F8_E4M3`.
    pub const F8_E4M3FN: Self = Self::new(DLDataTypeCode::kDLFloat8_e4m3fn, 8, 1);
    /// `float8_e4m3fnuz`: finite, unsigned zero (safetensors' `F8_E4M3FNUZ`).
    pub const F8_E4M3FNUZ: Self = Self::new(DLDataTypeCode::kDLFloat8_e4m3fnuz, 8, 1);
    /// `float8_e5m2`: 5 exponent bits, 2 mantissa bits (safetensors' `F8_E5M2`).
    pub const F8_E5M2: Self = Self::new(DLDataTypeCode::kDLFloat8_e5m2, 8, 1);
    /// `float8_e5m2fnuz`: finite, unsigned zero (safetensors' `F8_E5M2FNUZ`).
    pub const F8_E5M2FNUZ: Self = Self::new(DLDataTypeCode::kDLFloat8_e5m2fnuz, 8, 1);
    /// `float8_e8m0fnu`: an 8-bit power of two, the scale of microscaling formats
    /// (safetensors' `F8_E8M0`).
    pub const F8_E8M0FNU: Self = Self::new(DLDataTypeCode::kDLFloat8_e8m0fnu, 8, 1);
    /// `float6_e2m3fn`: 6 bits, packed below a byte (safetensors' `F6_E2M3`).
    pub const F6_E2M3FN: Self = Self::new(DLDataTypeCode::kDLFloat6_e2m3fn, 6, 1);
    /// `float6_e3m2fn`: 6 bits, packed below a byte (safetensors' `F6_E3M2`).
    pub const F6_E3M2FN: Self = Self::new(DLDataTypeCode::kDLFloat6_e3m2fn, 6, 1);
    /// `float4_e2m1fn`: 4 bits, two to a byte (safetensors' `F4`).
    pub const F4_E2M1FN: Self = Self::new(DLDataTypeCode::kDLFloat4_e2m1fn, 4, 1);

    /// A data type from its parts.
    pub const fn new(code: DLDataTypeCode, bits: u8, lanes: u16) -> Self {
        Self(DLDataType { code, bits, lanes })
    }

    /// The type code.
    pub const fn code(self) -> DLDataTypeCode {
        self.0.code
    }

    /// Bits per lane.
    pub const fn bits(self) -> u8 {
        self.0.bits
    }

    /// Lanes per element (1 for every scalar type).
    pub const fn lanes(self) -> u16 {
        self.0.lanes
    }

    /// Bytes per element, `(bits * lanes + 7) / 8` as the standard computes it.
    pub const fn size_in_bytes(self) -> usize {
        (self.0.bits as usize * self.0.lanes as usize).div_ceil(8)
    }

    /// The raw C struct.
    pub const fn to_raw(self) -> DLDataType {
        self.0
    }

    /// Wraps a raw C struct; any value is accepted.
    pub const fn from_raw(raw: DLDataType) -> Self {
        Self(raw)
    }
}

/// The right of the first pair whose left is `left`, in a table of pairs: a foreign type
/// system's types beside DLPack's, one table for both directions (read it the other way
/// with the pairs swapped, [`right_to_left`]).
#[cfg(any(feature = "burn", feature = "safetensors"))]
pub(crate) fn left_to_right<L: PartialEq, R: Copy>(pairs: &[(L, R)], left: &L) -> Option<R> {
    pairs.iter().find(|(l, _)| l == left).map(|&(_, r)| r)
}

/// The left of the first pair whose right is `right` (see [`left_to_right`]).
#[cfg(any(feature = "burn", feature = "safetensors"))]
pub(crate) fn right_to_left<L: Copy, R: PartialEq>(pairs: &[(L, R)], right: &R) -> Option<L> {
    pairs.iter().find(|(_, r)| r == right).map(|&(l, _)| l)
}

impl From<DLDataType> for DataType {
    fn from(raw: DLDataType) -> Self {
        Self(raw)
    }
}

impl From<DataType> for DLDataType {
    fn from(dtype: DataType) -> Self {
        dtype.0
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits = self.bits();
        match self.code() {
            DLDataTypeCode::kDLBool if bits == 8 => f.write_str("bool")?,
            DLDataTypeCode::kDLBool => write!(f, "bool{bits}")?,
            DLDataTypeCode::kDLInt => write!(f, "int{bits}")?,
            DLDataTypeCode::kDLUInt => write!(f, "uint{bits}")?,
            DLDataTypeCode::kDLFloat => write!(f, "float{bits}")?,
            DLDataTypeCode::kDLBfloat => write!(f, "bfloat{bits}")?,
            DLDataTypeCode::kDLComplex => write!(f, "complex{bits}")?,
            DLDataTypeCode::kDLOpaqueHandle => write!(f, "opaque{bits}")?,
            code => match code.name() {
                // "kDLFloat8_e4m3fn" -> "float8_e4m3fn"
                Some(name) => {
                    let name = name.trim_start_matches("kDL");
                    let mut chars = name.chars();
                    if let Some(first) = chars.next() {
                        write!(f, "{}{}", first.to_ascii_lowercase(), chars.as_str())?;
                    }
                }
                None => write!(f, "code{}_{bits}", code.0)?,
            },
        }
        if self.lanes() != 1 {
            write!(f, "x{}", self.lanes())?;
        }
        Ok(())
    }
}

impl fmt::Debug for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DataType({self})")
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust scalar that is laid out exactly like a DLPack element type.
///
/// Implemented for `i8`..`i64`, `u8`..`u64`, `f32`, `f64`, `bool`, and with features
/// `half` (`half::f16`, `half::bf16`) and `complex` (`num_complex::Complex<f32>`,
/// `Complex<f64>`). The trait is sealed: a wrong mapping would let safe code read
/// foreign memory as the wrong type.
///
/// `bool` is the one type where not every byte is a valid value: an import of a `bool`
/// tensor reads every element once (O(n)) and rejects bytes other than 0 and 1.
///
/// # Safety
///
/// - `size_of::<Self>()` equals `DTYPE.size_in_bytes()` and `DTYPE.lanes()` is 1;
/// - the memory layout of `Self` is the one the standard gives `DTYPE` (native byte
///   order; complex numbers as `(re, im)`);
/// - every bit pattern of that size is a valid `Self`, unless `CHECK_BYTES` is true, in
///   which case exactly the bytes 0 and 1 are valid (this is `bool`).
pub unsafe trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The DLPack type of this scalar.
    const DTYPE: DataType;
    /// Whether an import must check every byte: only for `bool`, whose valid bytes are
    /// 0 and 1.
    #[doc(hidden)]
    const CHECK_BYTES: bool = Self::DTYPE.code().0 == DLDataTypeCode::kDLBool.0;
}

/// Calls a macro once for every [`Element`] type this build of the crate has, with the
/// type, the name of its [`DataType`] constant and its NumPy name: the one list of
/// element types that everything else (the `Element` impls, dtype dispatch in the
/// Python module, your own) is generated from.
///
/// `for_each_element!(callback)` expands to `callback!(bool, BOOL, "bool");
/// callback!(i8, I8, "int8"); ...`, and `for_each_element!(callback(args...))` passes
/// `args...;` first, in statement or item position. `half` and `complex` types appear
/// when the crate is built with those features (the paths then go through this crate's
/// re-exports).
///
/// ```
/// use dlpack_core::{DataType, Element, for_each_element};
///
/// /// The size in bytes of the element type named `name`, if this build maps it.
/// fn size_of_dtype(name: &str) -> Option<usize> {
///     macro_rules! arm {
///         ($ty:ty, $constant:ident, $name:literal) => {
///             if name == $name {
///                 assert_eq!(<$ty as Element>::DTYPE, DataType::$constant);
///                 return Some(size_of::<$ty>());
///             }
///         };
///     }
///     for_each_element!(arm);
///     None
/// }
/// assert_eq!(size_of_dtype("int16"), Some(2));
/// assert_eq!(size_of_dtype("string"), None);
/// ```
#[macro_export]
macro_rules! for_each_element {
    ($callback:ident $(($($args:tt)*))?) => {
        $callback!($($($args)*;)? bool, BOOL, "bool");
        $callback!($($($args)*;)? i8, I8, "int8");
        $callback!($($($args)*;)? i16, I16, "int16");
        $callback!($($($args)*;)? i32, I32, "int32");
        $callback!($($($args)*;)? i64, I64, "int64");
        $callback!($($($args)*;)? u8, U8, "uint8");
        $callback!($($($args)*;)? u16, U16, "uint16");
        $callback!($($($args)*;)? u32, U32, "uint32");
        $callback!($($($args)*;)? u64, U64, "uint64");
        $callback!($($($args)*;)? f32, F32, "float32");
        $callback!($($($args)*;)? f64, F64, "float64");
        $crate::__if_half! {
            $callback!($($($args)*;)? $crate::__private::half::f16, F16, "float16");
            $callback!($($($args)*;)? $crate::__private::half::bf16, BF16, "bfloat16");
        }
        $crate::__if_complex! {
            $callback!($($($args)*;)? $crate::__private::Complex<f32>, C64, "complex64");
            $callback!($($($args)*;)? $crate::__private::Complex<f64>, C128, "complex128");
        }
    };
}

/// Keeps its input when the crate has the `half` feature.
#[cfg(feature = "half")]
#[doc(hidden)]
#[macro_export]
macro_rules! __if_half {
    ($($tokens:tt)*) => { $($tokens)* };
}

/// Keeps its input when the crate has the `half` feature.
#[cfg(not(feature = "half"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __if_half {
    ($($tokens:tt)*) => {};
}

/// Keeps its input when the crate has the `complex` feature.
#[cfg(feature = "complex")]
#[doc(hidden)]
#[macro_export]
macro_rules! __if_complex {
    ($($tokens:tt)*) => { $($tokens)* };
}

/// Keeps its input when the crate has the `complex` feature.
#[cfg(not(feature = "complex"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __if_complex {
    ($($tokens:tt)*) => {};
}

/// Implements [`Element`] for one type of the list.
macro_rules! element {
    ($ty:ty, $constant:ident, $name:literal) => {
        impl sealed::Sealed for $ty {}
        // SAFETY:
        // - the size of the type matches the bits of its `DataType` constant (asserted
        //   below for every type);
        // - integers, floats, `bool`, `half`'s types and `Complex` (a `repr(C)` pair, real
        //   part first) are stored as the standard says, in native byte order;
        // - every bit pattern is a valid value, except for `bool`, whose `CHECK_BYTES`
        //   (true for the `kDLBool` code) makes every import check each byte is 0 or 1
        //   before a view exists.
        unsafe impl Element for $ty {
            const DTYPE: DataType = DataType::$constant;
        }
        const _: () = assert!(size_of::<$ty>() == DataType::$constant.size_in_bytes());
    };
}

for_each_element!(element);
