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

use std::sync::atomic::AtomicUsize;

use dlpack_core::Element;
use dlpack_core::ffi::DLDataType;

#[path = "../common/mod.rs"]
mod common;
mod export_import;
mod foreign;
mod model;

// What the reference model and the run of a foreign tensor share: the tensor as a
// producer describes it, the model's expectation, and the counts of the run.

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

static CASES: AtomicUsize = AtomicUsize::new(0);
static VIEWS: AtomicUsize = AtomicUsize::new(0);
static ERRORS: AtomicUsize = AtomicUsize::new(0);
static REFUSED: AtomicUsize = AtomicUsize::new(0);
