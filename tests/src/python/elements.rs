//! The element types the tests build arrays of, each from its C-order flat index
//! (the formula `tests/python/helpers.py` mirrors), and the dispatch from a dtype's name
//! to its Rust type.

use dlpack_core::Element;
use half::{bf16, f16};
use ndarray::{ArrayD, Axis, Dimension, IxDyn, ShapeBuilder, Slice};
use num_complex::Complex;
use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyComplex;

/// A Rust element type that the tests can build from an index and report to Python.
pub(super) trait TestElement: Element + Default {
    /// The value of the element at C-order flat index `i` (the formula
    /// `tests/python/helpers.py` mirrors).
    fn at(i: usize) -> Self;
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
}

fn float_at(i: usize) -> f64 {
    (i % 64) as f64 * 0.5 - 8.0
}

macro_rules! int_element {
    ($($ty:ty => $at:expr),* $(,)?) => {$(
        impl TestElement for $ty {
            fn at(i: usize) -> Self {
                let f: fn(usize) -> $ty = $at;
                f(i)
            }
            fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.into_bound_py_any(py)
            }
        }
    )*};
}

int_element! {
    bool => |i| i % 3 == 0,
    i8 => |i| (i % 100) as i8 - 50,
    i16 => |i| (i % 100) as i16 - 50,
    i32 => |i| (i % 100) as i32 - 50,
    i64 => |i| (i % 100) as i64 - 50,
    u8 => |i| (i % 200) as u8,
    u16 => |i| (i % 200) as u16,
    u32 => |i| (i % 200) as u32,
    u64 => |i| (i % 200) as u64,
    f32 => |i| float_at(i) as f32,
    f64 => float_at,
}

impl TestElement for f16 {
    fn at(i: usize) -> Self {
        f16::from_f64(float_at(i))
    }
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.to_f64().into_bound_py_any(py)
    }
}

impl TestElement for bf16 {
    fn at(i: usize) -> Self {
        bf16::from_f64(float_at(i))
    }
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.to_f64().into_bound_py_any(py)
    }
}

macro_rules! complex_element {
    ($($ty:ty),*) => {$(
        impl TestElement for Complex<$ty> {
            fn at(i: usize) -> Self {
                Complex::new(float_at(i) as $ty, -((i % 16) as $ty))
            }
            fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                Ok(PyComplex::from_doubles(py, f64::from(self.re), f64::from(self.im)).into_any())
            }
        }
    )*};
}

complex_element!(f32, f64);

/// Calls `$body` with `$A` bound to the Rust type of the dtype named `$name` (every
/// element type of `dlpack_core::for_each_element!`); an unknown name is a
/// `BufferError`.
macro_rules! with_dtype {
    ($name:expr, $A:ident => $body:expr) => {{
        let name: &str = $name;
        (|| {
            dlpack_core::for_each_element!(dtype_arm(name, $A, $body));
            Err(PyBufferError::new_err(format!("unsupported dtype {name}")))
        })()
    }};
}

/// One arm of [`with_dtype!`].
macro_rules! dtype_arm {
    ($name:ident, $A:ident, $body:expr; $ty:ty, $constant:ident, $dtype:literal) => {
        if $name == $dtype {
            type $A = $ty;
            return $body;
        }
    };
}

/// The C-order flat index of `index` in an array of extents `shape`.
fn flat_index(index: &[usize], shape: &[usize]) -> usize {
    index.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
}

/// An array of extents `shape` holding `A::at(flat index)` at every index, stored with
/// the given memory layout.
pub(super) fn build_array<A: TestElement>(shape: &[usize], layout: &str) -> PyResult<ArrayD<A>> {
    let dim = IxDyn(shape);
    let mut array = match layout {
        "c" | "negative" => ArrayD::<A>::default(dim),
        "f" => ArrayD::<A>::default(dim.f()),
        "sliced" => {
            // One extra element on each side of every axis, then cut them off.
            let big: Vec<usize> = shape.iter().map(|&n| n + 2).collect();
            let mut a = ArrayD::<A>::default(IxDyn(&big));
            a.slice_each_axis_inplace(|ax| {
                let n = ax.len as isize;
                Slice::new(1.min(n), Some(n - 1), 1)
            });
            a
        }
        "stepped" => {
            // Every other element along every axis.
            let big: Vec<usize> = shape.iter().map(|&n| 2 * n).collect();
            let mut a = ArrayD::<A>::default(IxDyn(&big));
            a.slice_each_axis_inplace(|_| Slice::new(0, None, 2));
            a
        }
        other => return Err(PyValueError::new_err(format!("unknown layout {other}"))),
    };
    if layout == "negative" {
        for axis in 0..array.ndim() {
            array.invert_axis(Axis(axis));
        }
    }
    assert_eq!(
        array.shape(),
        shape,
        "layout {layout} built the wrong shape"
    );
    for (index, value) in array.indexed_iter_mut() {
        *value = A::at(flat_index(index.slice(), shape));
    }
    Ok(array)
}
