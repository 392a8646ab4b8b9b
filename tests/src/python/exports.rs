//! Rust arrays exported to Python: of every dtype, rank and layout, counted, aligned,
//! read-only, of a dtype no `Element` maps, on another device, and capsules that claim
//! another major version or hold no tensor.

use dlpack_core::ffi::{DLDataTypeCode, DLDeviceType, DLManagedTensorVersioned};
use dlpack_core::python::Tensor;
use dlpack_core::{DataType, Device, Element, ManagedTensor, ToDLPack};
use ndarray::{Array1, ArrayD};
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyDict};

use super::Counted;
use super::elements::{TestElement, build_array};

/// Exports `array` counted: the owner is the array's own buffer, without a copy.
fn export_counted<A: Element>(array: ArrayD<A>) -> PyResult<ManagedTensor> {
    let shape = array.shape().to_vec();
    let strides = array.strides().to_vec();
    let (vec, offset) = array.into_raw_vec_and_offset();
    Ok(ManagedTensor::from_buffer(
        Counted::new(vec),
        offset.unwrap_or(0),
        &shape,
        &strides,
    )?)
}

/// A C-order export of `shape` whose first element is aligned to `align` bytes.
fn export_aligned<A: TestElement>(
    shape: &[usize],
    align: usize,
    counted: bool,
) -> PyResult<(ManagedTensor, usize)> {
    let n: usize = shape.iter().product();
    let pad = align.div_ceil(size_of::<A>());
    let mut vec: Vec<A> = vec![A::default(); n + pad];
    let offset = (0..=pad)
        .find(|&o| (vec.as_ptr().wrapping_add(o) as usize) % align == 0)
        .ok_or_else(|| PyValueError::new_err("cannot align"))?;
    for (i, v) in vec[offset..offset + n].iter_mut().enumerate() {
        *v = A::at(i);
    }
    let ptr = vec.as_ptr().wrapping_add(offset) as usize;
    let mut strides = vec![0isize; shape.len()];
    let mut step = 1isize;
    for (s, &n) in strides.iter_mut().zip(shape).rev() {
        *s = step;
        step *= n.max(1) as isize;
    }
    let tensor = if counted {
        ManagedTensor::from_buffer(Counted::new(vec), offset, shape, &strides)?
    } else {
        ManagedTensor::from_buffer(vec, offset, shape, &strides)?
    };
    Ok((tensor, ptr))
}

/// Makes a Rust array of `dtype` with extents `shape` and memory `layout` ("c", "f",
/// "sliced", "stepped", "negative") and exports it without copying. Returns the tensor
/// and the address of its first element as Rust saw it before the export.
///
/// `counted` exports through an owner counted by `live_exports()`; `align` (bytes, C
/// layout only) places the first element at an aligned address.
#[pyfunction]
#[pyo3(signature = (dtype, shape, layout = "c", counted = false, align = 0))]
pub(crate) fn make(
    dtype: &str,
    shape: Vec<usize>,
    layout: &str,
    counted: bool,
    align: usize,
) -> PyResult<(ManagedTensor, usize)> {
    with_dtype!(dtype, A => {
        if align > 0 {
            return export_aligned::<A>(&shape, align, counted);
        }
        let array = build_array::<A>(&shape, layout)?;
        let ptr = array.as_ptr() as usize;
        let tensor = if counted { export_counted(array)? } else { array.to_dlpack()? };
        Ok((tensor, ptr))
    })
}

/// A read-only export (an `ArcArray` still shared elsewhere when exported), handed to
/// Python as it is, flagged `READ_ONLY`, without the copy that `Tensor::new` makes its
/// consumers take: the clone is dropped before Python sees the tensor, so no Rust code
/// reads the buffer (for the tests of the flag's journey, whose consumers never write).
#[pyfunction]
#[pyo3(signature = (shape, counted = false))]
pub(super) fn make_read_only(shape: Vec<usize>, counted: bool) -> PyResult<Tensor> {
    let array = build_array::<f32>(&shape, "c")?.into_shared();
    let keep = array.clone();
    let tensor = if counted {
        let shape = array.shape().to_vec();
        let strides = array.strides().to_vec();
        let owner = Counted::new(array);
        let data = owner.0.as_ptr().cast_mut().cast();
        let shape: Vec<i64> = shape.iter().map(|&n| n as i64).collect();
        let strides: Vec<i64> = strides.iter().map(|&s| s as i64).collect();
        // SAFETY:
        // - `data` is element `[0, ...]` of the shared buffer, which the owner's
        //   `ArcArray` keeps alive and unmoved; shape and strides are the array's;
        // - the tensor is `READ_ONLY`, and `ArcArray` copies on write, so nobody writes
        //   the buffer while the tensor lives;
        // - the dtype is `f32`'s.
        unsafe {
            ManagedTensor::from_owner(
                owner,
                move |_| data,
                &shape,
                Some(&strides),
                DataType::F32,
                Device::CPU,
                dlpack_core::ffi::DLPACK_FLAG_BITMASK_READ_ONLY,
            )?
        }
    } else {
        array.to_dlpack()?
    };
    drop(keep);
    // SAFETY: no Rust handle of the buffer is left (`keep` is gone, the tensor owns the
    // last one), so no Rust code reads what a consumer could write.
    Ok(unsafe { Tensor::new_unchecked(tensor) })
}

/// An `ArcArray` that Rust keeps and reads, exported through the safe path: a shared
/// export, `READ_ONLY`, whose consumers get copies (`Tensor::copies_read_only`).
#[pyclass]
pub(super) struct KeptArc(ndarray::ArcArray1<f32>);

#[pymethods]
impl KeptArc {
    #[new]
    fn new(n: usize) -> Self {
        Self(Array1::from_iter((0..n).map(|i| i as f32)).into_shared())
    }

    /// A clone of the array, exported (`ArcArray: ToDLPack`), as a Python `Tensor`.
    fn export(&self) -> PyResult<ManagedTensor> {
        Ok(self.0.clone().to_dlpack()?)
    }

    /// The elements as Rust reads them.
    fn values(&self) -> Vec<f32> {
        self.0.to_vec()
    }

    /// The address of the first element.
    fn data_ptr(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

/// A counted tensor of `n` bytes of a float8 dtype that no `Element` maps: `kind`
/// `"e4m3fn"` (each byte 1.0) or `"e5m2"` (each byte 1.0 too).
#[pyfunction]
#[pyo3(signature = (n, kind = "e4m3fn"))]
pub(super) fn make_float8(n: usize, kind: &str) -> PyResult<ManagedTensor> {
    // 1.0 in each format: exponent bias 7 (e4m3fn) or 15 (e5m2), mantissa 0.
    let (code, one) = match kind {
        "e4m3fn" => (DLDataTypeCode::kDLFloat8_e4m3fn, 0x38u8),
        "e5m2" => (DLDataTypeCode::kDLFloat8_e5m2, 0x3cu8),
        _ => return Err(PyValueError::new_err(format!("no float8 kind {kind:?}"))),
    };
    let owner = Counted::new(vec![one; n]);
    let dtype = DataType::new(code, 8, 1);
    // SAFETY:
    // - the pointer is the start of the owner's `n` bytes, one per element, which the
    //   owner keeps alive and unmoved; every byte is a valid float8;
    // - nobody else holds the buffer; the tensor is writable.
    Ok(unsafe {
        ManagedTensor::from_owner(
            owner,
            |o| o.0.as_mut_ptr().cast(),
            &[n as i64],
            Some(&[1]),
            dtype,
            Device::CPU,
            0,
        )?
    })
}

/// A counted, empty `float32` tensor (shape `(0,)`, NULL data) on device
/// `(device_type, device_id)`: an honest tensor on any device, since it has no data.
#[pyfunction]
pub(crate) fn make_on_device(device_type: i32, device_id: i32) -> PyResult<ManagedTensor> {
    let owner = Counted::new(());
    let device = Device::new(DLDeviceType(device_type), device_id);
    // SAFETY: the tensor has no elements, so no memory is described; NULL data is
    // what the standard asks for then.
    Ok(unsafe {
        ManagedTensor::from_owner(
            owner,
            |_| core::ptr::null_mut(),
            &[0],
            Some(&[1]),
            DataType::F32,
            device,
            0,
        )?
    })
}

/// A versioned capsule over a counted tensor whose header claims major version `major`.
#[pyfunction]
pub(super) fn capsule_with_major(py: Python<'_>, major: u32) -> PyResult<Bound<'_, PyAny>> {
    let (tensor, _) = make("float32", vec![3], "c", true, 0)?;
    let object = Bound::new(py, Tensor::new(tensor))?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("max_version", (1, 3))?;
    let capsule = object.call_method("__dlpack__", (), Some(&kwargs))?;
    let pointer = capsule
        .cast::<PyCapsule>()?
        .pointer_checked(Some(c"dltensor_versioned"))?
        .cast::<DLManagedTensorVersioned>();
    // SAFETY:
    // - the capsule was just made by `__dlpack__` and holds an unconsumed header of ours,
    //   which nobody else reads or writes now;
    // - `version` is a plain field of the live, aligned header.
    unsafe { (*pointer.as_ptr()).version.major = major };
    Ok(capsule)
}

/// A capsule that is not a DLPack tensor.
#[pyfunction]
pub(super) fn foreign_capsule(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    PyCapsule::new_with_value(py, 0u64, c"not_a_tensor")
}
