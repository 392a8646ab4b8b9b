//! The burn bridge (feature `burn`): [`ToDLPack`] and [`FromDLPack`] for burn's flex CPU
//! tensors (`burn_flex::FlexTensor`); see the guide page `guide::burn`.
//!
//! - Export shares the tensor's `Arc<Bytes>` (the header owns one reference), writable
//!   when that reference is the only one, `READ_ONLY` otherwise: burn then never writes
//!   in place (a non-unique `Arc` copies on write).
//! - Import wraps the tensor in an allocation controller ([`Imported`]) that owns the
//!   [`ManagedTensor`]: zero-copy for every layout whose elements fill the memory from
//!   their lowest to their highest byte (any axis order, negative strides, broadcast
//!   and window axes). A layout that leaves gaps (a column, every other element) is
//!   copied element by element at import: burn's `Bytes` is one slice, and the gap
//!   bytes belong to someone else, who may be writing them. Burn asks the controller
//!   for mutable memory before writing in place; the controller hands out the
//!   producer's memory only when the tensor is exclusive, writable and free of
//!   overlapping elements, and copies it first otherwise (copy-on-write, releasing the
//!   producer's tensor then, exactly once).

use core::mem::MaybeUninit;
use std::sync::Arc;

use burn_flex::{FlexTensor, Layout};
use burn_std::{
    AccessError, AccessPolicy, AllocationController, AllocationProperty, BoolStore, Bytes, DType,
    Shape, Writer,
};

use crate::batch::TensorBatch;
use crate::device::Device;
use crate::dtype::{DataType, left_to_right, right_to_left};
use crate::error::{Error, Result};
use crate::ffi::DLPACK_FLAG_BITMASK_READ_ONLY;
use crate::layout::{self, Positions};
use crate::tensor::{AlignedBytes, ManagedTensor};
use crate::traits::{Expected, FromDLPack, Selection, ToDLPack, leaf_from, leaf_into};

fn burn_error(message: String) -> Error {
    Error::Framework {
        framework: "burn",
        message,
    }
}

/// burn's dtypes beside DLPack's: the one table both directions read. A `bool` is one
/// byte holding 0 or 1 both ways (burn's `U8` store of booleans too, on export).
const DTYPES: [(DType, DataType); 13] = [
    (DType::F64, DataType::F64),
    (DType::F32, DataType::F32),
    (DType::F16, DataType::F16),
    (DType::BF16, DataType::BF16),
    (DType::I64, DataType::I64),
    (DType::I32, DataType::I32),
    (DType::I16, DataType::I16),
    (DType::I8, DataType::I8),
    (DType::U64, DataType::U64),
    (DType::U32, DataType::U32),
    (DType::U16, DataType::U16),
    (DType::U8, DataType::U8),
    (DType::Bool(BoolStore::Native), DataType::BOOL),
];

/// The DLPack type of a burn dtype.
fn to_dlpack_dtype(dtype: DType) -> Result<DataType> {
    let native = match dtype {
        DType::Bool(BoolStore::U8) => DType::Bool(BoolStore::Native),
        other => other,
    };
    left_to_right(&DTYPES, &native).ok_or_else(|| {
        burn_error(format!(
            "dtype {dtype:?} has no DLPack equivalent (dequantize, or cast first)"
        ))
    })
}

/// The burn dtype of a DLPack type.
fn to_burn_dtype(dtype: DataType) -> Result<DType> {
    right_to_left(&DTYPES, &dtype)
        .ok_or_else(|| burn_error(format!("dtype {dtype} has no burn flex equivalent")))
}

/// Exports a flex tensor without a copy.
fn export(tensor: FlexTensor) -> Result<ManagedTensor> {
    let dtype = to_dlpack_dtype(tensor.dtype())?;
    let size = tensor.dtype().size();
    let layout = tensor.layout();
    let shape: Vec<usize> = layout.shape().to_vec();
    let strides: Vec<isize> = layout.strides().to_vec();
    let start = layout.start_offset();
    let mut bytes: Arc<Bytes> = tensor.data_arc();
    drop(tensor);
    // A flex layout is not validated by burn (`Layout::new` accepts anything): every
    // element it reaches must lie inside the buffer before a consumer may read it.
    layout::check_in_buffer(&shape, &strides, start, bytes.len() / size)?;
    let unique = match Arc::get_mut(&mut bytes) {
        // Writable memory, asked for here where failing is an error: a controller that
        // cannot lend its memory for writing copies it now (burn's own `DerefMut`,
        // used below, would panic if that copy failed; it finds the copy made then).
        Some(owned) => {
            let len = owned.len();
            owned
                .write(Writer::new())
                .map_err(|_| Error::AllocationFailed { bytes: len })?;
            true
        }
        None => false,
    };
    let flags = if unique {
        0
    } else {
        DLPACK_FLAG_BITMASK_READ_ONLY
    };
    let shape_i64: Vec<i64> = shape.iter().map(|&n| n as i64).collect();
    let strides_i64: Vec<i64> = strides.iter().map(|&s| s as i64).collect();
    let first = start * size;
    let data = move |bytes: &mut Arc<Bytes>| match Arc::get_mut(bytes) {
        // The only reference: writable memory (made writable above).
        Some(owned) => owned.as_mut_ptr().wrapping_add(first).cast(),
        None => bytes.as_ptr().wrapping_add(first).cast_mut().cast(),
    };
    // SAFETY:
    // - `check_in_buffer` proved that every element reachable from element `start`
    //   through `shape` and `strides` lies inside the `Bytes`, which the owner (an
    //   `Arc`) keeps alive and unmoved until the deleter drops it;
    // - unique: the header holds the only reference, so nobody else reads or writes the
    //   memory, and `as_mut_ptr` came from a `&mut Bytes`;
    // - shared: the tensor is `READ_ONLY`, and burn never writes into a `Bytes` whose
    //   `Arc` is shared (it copies on write), which the header's reference ensures;
    // - the dtype is the burn dtype's DLPack equivalent; a burn bool is one byte holding
    //   0 or 1.
    let managed = unsafe {
        ManagedTensor::from_owner(
            bytes,
            data,
            &shape_i64,
            Some(&strides_i64),
            dtype,
            Device::CPU,
            flags,
        )
    }?;
    Ok(if unique {
        managed
    } else {
        managed.into_shared()
    })
}

/// An allocation controller over an imported tensor's memory: the region from the lowest
/// to the highest byte the tensor reaches, every byte of which belongs to an element
/// (`import` copies a layout with gaps), or over a copy.
struct Imported {
    /// The producer's tensor, until the memory is copied (copy-on-write) or dropped.
    tensor: Option<ManagedTensor>,
    /// Bytes from the tensor's `data` to the lowest byte it reaches.
    delta: isize,
    /// Bytes of the region.
    len: usize,
    /// Alignment of the producer's memory (the element size).
    align: usize,
    /// Whether burn may write into the producer's memory: an exclusive, writable
    /// tensor whose elements each have their own address.
    writable: bool,
    /// The copy: made at import for a layout with gaps, or on the first write that may
    /// not go to the producer's memory.
    copy: Option<AlignedBytes>,
}

impl Imported {
    fn region(&self) -> *mut u8 {
        match &self.tensor {
            Some(tensor) => tensor.data().cast::<u8>().wrapping_offset(self.delta),
            None => core::ptr::NonNull::<u128>::dangling().as_ptr().cast(),
        }
    }
}

impl AllocationController for Imported {
    fn alloc_align(&self) -> usize {
        if self.copy.is_some() {
            align_of::<u128>()
        } else {
            self.align
        }
    }

    fn property(&self) -> AllocationProperty {
        AllocationProperty::Other
    }

    fn capacity(&self) -> usize {
        self.len
    }

    fn memory(&self, _policy: AccessPolicy) -> Result<&[MaybeUninit<u8>], AccessError> {
        let data: *const u8 = match &self.copy {
            Some(copy) => copy.as_bytes().as_ptr(),
            None => self.region(),
        };
        // SAFETY:
        // - the copy holds `len` initialised bytes; otherwise the region is `len` bytes,
        //   each of them a byte of an element of the tensor (`import` copies layouts
        //   with gaps), which the producer's tensor keeps readable until it is dropped,
        //   which happens only through `&mut self` (`memory_mut`, `drop`), so not while
        //   this borrow of `self` lives (a dangling, aligned pointer when `len` is 0);
        // - `MaybeUninit<u8>` has no validity requirement.
        Ok(unsafe { core::slice::from_raw_parts(data.cast(), self.len) })
    }

    unsafe fn memory_mut(
        &mut self,
        policy: AccessPolicy,
    ) -> Result<&mut [MaybeUninit<u8>], AccessError> {
        if self.copy.is_none() && !self.writable {
            if !policy.copy_allowed() {
                return Err(AccessError::WouldCopy);
            }
            let mut copy = AlignedBytes::zeroed(self.len)
                .map_err(|_| AccessError::Read(format!("cannot allocate {} bytes", self.len)))?;
            // SAFETY:
            // - the region is `len` readable bytes, all the tensor's (see `memory`), the
            //   copy `len` writable ones, and the two allocations are distinct.
            unsafe { core::ptr::copy_nonoverlapping(self.region(), copy.as_mut_ptr(), self.len) };
            self.copy = Some(copy);
            // The producer's memory is no longer needed: its deleter runs now, once.
            drop(self.tensor.take());
        }
        let data: *mut u8 = match &mut self.copy {
            Some(copy) => copy.as_mut_ptr(),
            None => self.region(),
        };
        // SAFETY:
        // - the copy holds `len` bytes owned by `self`; otherwise the tensor is
        //   exclusive and writable (`writable`), so the producer's `len` bytes, all of
        //   them the tensor's, may be written through this one `&mut` borrow of `self`;
        // - `MaybeUninit<u8>` has no validity requirement.
        Ok(unsafe { core::slice::from_raw_parts_mut(data.cast(), self.len) })
    }
}

/// Imports a tensor as a flex tensor without a copy.
fn import(tensor: ManagedTensor) -> Result<FlexTensor> {
    let dtype = to_burn_dtype(tensor.dtype())?;
    let device = tensor.device();
    if !device.is_cpu_accessible() {
        return Err(Error::UnsupportedDevice { device });
    }
    let size = dtype.size();
    let ndim = tensor.ndim();
    let (mut dim, mut steps) = (vec![0; ndim], vec![0; ndim]);
    let plan = layout::plan(tensor.shape(), tensor.strides(), size, &mut dim, &mut steps)?;
    // burn reads elements through `bytemuck`, which needs them aligned.
    let to_lowest = layout::check_address(
        tensor.data() as usize,
        tensor.byte_offset(),
        &plan,
        size,
        size,
    )?;
    if dtype == DType::Bool(BoolStore::Native) {
        // Every distinct byte is 0 or 1, checked once.
        tensor.as_array::<bool, ::ndarray::IxDyn>()?;
    }
    if plan.count == 0 {
        return Ok(FlexTensor::empty(Shape::from(dim), dtype));
    }
    if !Positions::new(&dim, &steps).is_dense() {
        return copied(&tensor, dim, dtype);
    }
    // burn's layout: signed strides in elements from the lowest element.
    let strides: Vec<isize> = steps
        .iter()
        .zip(
            tensor
                .strides()
                .unwrap_or(&[])
                .iter()
                .chain(core::iter::repeat(&1)),
        )
        .map(|(&step, &original)| {
            if original < 0 {
                -(step as isize)
            } else {
                step as isize
            }
        })
        .collect();
    let writable = tensor.is_exclusive()
        && !tensor.is_read_only()
        && layout::check_no_overlap(&dim, &steps).is_ok();
    let len = plan.span * size;
    let controller = Imported {
        delta: to_lowest,
        tensor: Some(tensor),
        len,
        align: size,
        writable,
        copy: None,
    };
    // SAFETY:
    // - the controller's memory is `len` initialised bytes: the region of the
    //   producer's tensor (valid and initialised for reads until its deleter runs, by
    //   the DLPack contract and `plan`/`check_address`), or a copy of it.
    let bytes = unsafe { Bytes::from_controller(Box::new(controller), len) };
    Ok(FlexTensor::new(
        bytes,
        Layout::new(Shape::from(dim), strides, plan.low),
        dtype,
    ))
}

/// A flex tensor over a C-order copy of `tensor`'s elements, read element by element
/// (never the bytes between them); the producer's tensor is released when this returns.
fn copied(tensor: &ManagedTensor, dim: Vec<usize>, dtype: DType) -> Result<FlexTensor> {
    let copy = tensor.copy_c_order()?;
    let len = copy.as_bytes().len();
    let controller = Imported {
        tensor: None,
        delta: 0,
        len,
        align: dtype.size(),
        writable: true,
        copy: Some(copy),
    };
    // SAFETY: the controller's memory is the copy: `len` initialised bytes it owns.
    let bytes = unsafe { Bytes::from_controller(Box::new(controller), len) };
    Ok(FlexTensor::new(
        bytes,
        Layout::contiguous(Shape::from(dim)),
        dtype,
    ))
}

impl ToDLPack for FlexTensor {
    type Output = ManagedTensor;

    /// Shares the tensor's bytes without a copy: writable and exclusive when this was
    /// the only handle of them, `READ_ONLY` and shared otherwise.
    fn to_dlpack(self) -> Result<ManagedTensor> {
        export(self)
    }

    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        leaf_into(self, prefix, batch)
    }
}

impl FromDLPack for FlexTensor {
    type Input = ManagedTensor;

    /// Views the tensor's memory without a copy when its elements fill it without gaps
    /// (any axis order, negative strides, broadcast and window axes); burn copies it on
    /// its first write unless the tensor is exclusive, writable and has no overlapping
    /// elements. A layout with gaps between its elements (a column of a matrix, every
    /// other element) is copied element by element here.
    fn from_dlpack(tensor: ManagedTensor) -> Result<Self> {
        import(tensor)
    }

    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        leaf_from(prefix, batch)
    }

    fn select_in(prefix: &str, selection: &mut Selection<'_>) {
        selection.take(prefix, Expected::ANY);
    }
}
