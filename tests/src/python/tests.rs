//! Capsule ownership with an embedded interpreter (no Python packages needed); the
//! pytest suite covers NumPy, PyTorch and JAX.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_core::ffi::{DLDataTypeCode, DLDeviceType, DLManagedTensorVersioned};
use dlpack_core::python::{Tensor, from_dlpack};
use dlpack_core::{DataType, Device, ManagedTensor, TensorBatch};
use ndarray::{Array, IxDyn};
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyList, PyString};

use super::elements::{TestElement, build_array};

/// A buffer that counts itself alive in its own counter (tests run in parallel).
struct Probe(Vec<f32>, Arc<AtomicUsize>);

impl Probe {
    fn tensor(live: &Arc<AtomicUsize>) -> ManagedTensor {
        live.fetch_add(1, Ordering::SeqCst);
        let probe = Probe(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], Arc::clone(live));
        ManagedTensor::from_buffer(probe, 0, &[2, 3], &[3, 1]).unwrap()
    }
}

impl AsMut<[f32]> for Probe {
    fn as_mut(&mut self) -> &mut [f32] {
        &mut self.0
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.1.fetch_sub(1, Ordering::SeqCst);
    }
}

fn with_python<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> R {
    Python::initialize();
    Python::attach(f)
}

fn capsule<'py>(object: &Bound<'py, Tensor>, max_version: Option<(u32, u32)>) -> Bound<'py, PyAny> {
    let kwargs = PyDict::new(object.py());
    kwargs.set_item("max_version", max_version).unwrap();
    object.call_method("__dlpack__", (), Some(&kwargs)).unwrap()
}

fn name(capsule: &Bound<'_, PyAny>) -> String {
    let repr = capsule.repr().unwrap();
    repr.to_str().unwrap().split('"').nth(1).unwrap().to_owned()
}

#[test]
fn layouts_hold_the_formula_values() {
    for layout in ["c", "f", "sliced", "stepped", "negative"] {
        let a = build_array::<i32>(&[2, 3, 4], layout).unwrap();
        let expected = Array::from_shape_fn((2, 3, 4), |(i, j, k)| i32::at(i * 12 + j * 4 + k));
        assert_eq!(a, expected.into_dyn(), "{layout}");
    }
    let neg = build_array::<u8>(&[3, 2], "negative").unwrap();
    assert!(neg.strides().iter().all(|&s| s < 0));
    let f = build_array::<u8>(&[3, 2], "f").unwrap();
    assert_eq!(f.strides(), &[1, 3]);
}

#[test]
fn consumed_capsules_hand_over_ownership() {
    let live = Arc::new(AtomicUsize::new(0));
    with_python(|py| {
        let object = Probe::tensor(&live).into_pyobject(py).unwrap();
        for max_version in [None, Some((1, 0))] {
            let capsule = capsule(&object, max_version);
            let imported = from_dlpack(&capsule).unwrap();
            assert!(name(&capsule).starts_with("used_dltensor"));
            assert_eq!(imported.is_legacy(), max_version.is_none());
            let view = imported.as_array::<f32, ndarray::Ix2>().unwrap();
            assert_eq!(view.sum(), 21.0);
            drop(capsule); // renamed: its destructor leaves the tensor alone
            assert_eq!(live.load(Ordering::SeqCst), 1);
        }
        drop(object);
        assert_eq!(live.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn unconsumed_capsules_are_freed_by_their_destructor() {
    let live = Arc::new(AtomicUsize::new(0));
    with_python(|py| {
        let object = Probe::tensor(&live).into_pyobject(py).unwrap();
        let capsules = [capsule(&object, None), capsule(&object, Some((1, 3)))];
        assert_eq!(name(&capsules[0]), "dltensor");
        assert_eq!(name(&capsules[1]), "dltensor_versioned");
        drop(object);
        assert_eq!(live.load(Ordering::SeqCst), 1);
        drop(capsules);
        assert_eq!(live.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn a_capsule_is_consumed_once() {
    let live = Arc::new(AtomicUsize::new(0));
    with_python(|py| {
        let object = Probe::tensor(&live).into_pyobject(py).unwrap();
        let capsule = capsule(&object, Some((1, 0)));
        let first = from_dlpack(&capsule).unwrap();
        let err = from_dlpack(&capsule).unwrap_err();
        assert!(err.is_instance_of::<PyValueError>(py), "{err}");
        drop((first, capsule, object));
        assert_eq!(live.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn unsupported_major_version_leaves_the_capsule_to_its_destructor() {
    let live = Arc::new(AtomicUsize::new(0));
    with_python(|py| {
        let object = Probe::tensor(&live).into_pyobject(py).unwrap();
        let capsule = capsule(&object, Some((1, 0)));
        drop(object);
        let pointer = capsule
            .cast::<PyCapsule>()
            .unwrap()
            .pointer_checked(Some(c"dltensor_versioned"))
            .unwrap()
            .cast::<DLManagedTensorVersioned>();
        // SAFETY: the capsule holds an unconsumed header of ours that nothing else
        // reads or writes now; `version` is a plain field of it.
        unsafe { (*pointer.as_ptr()).version.major = 2 };
        let err = from_dlpack(&capsule).unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        assert_eq!(name(&capsule), "dltensor_versioned");
        assert_eq!(live.load(Ordering::SeqCst), 1);
        drop(capsule);
        assert_eq!(live.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn one_object_imported_twice_gives_no_mutable_view() {
    let live = Arc::new(AtomicUsize::new(0));
    with_python(|py| {
        let object = Probe::tensor(&live).into_pyobject(py).unwrap();
        let mut first = from_dlpack(&object).unwrap();
        let mut second = from_dlpack(&object).unwrap();
        assert_eq!(first.data_ptr(), second.data_ptr());
        assert!(!first.is_exclusive() && !second.is_exclusive());
        for tensor in [&mut first, &mut second] {
            assert_eq!(
                tensor.as_array_mut::<f32, ndarray::Ix2>().unwrap_err(),
                dlpack_core::Error::NotExclusive
            );
            let err =
                dlpack_core::DLPackArray::<f32, ndarray::Ix2>::new(from_dlpack(&object).unwrap())
                    .unwrap()
                    .view_mut()
                    .unwrap_err();
            assert_eq!(err, dlpack_core::Error::NotExclusive);
            // Reading is what the protocol allows.
            assert_eq!(tensor.as_array::<f32, ndarray::Ix2>().unwrap().sum(), 21.0);
        }
        drop((first, second, object));
        assert_eq!(live.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn imports_can_be_dropped_on_other_threads() {
    let live = Arc::new(AtomicUsize::new(0));
    with_python(|py| {
        let object = Probe::tensor(&live).into_pyobject(py).unwrap();
        let imported: ManagedTensor = object.extract().unwrap();
        drop(object);
        py.detach(|| std::thread::spawn(move || drop(imported)).join().unwrap());
        assert_eq!(live.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn batches_become_dicts_and_back() {
    let live = Arc::new(AtomicUsize::new(0));
    with_python(|py| {
        let mut batch = TensorBatch::new();
        batch.insert("a", Probe::tensor(&live)).unwrap();
        batch.insert("b.c", Probe::tensor(&live)).unwrap();
        let dict = batch.into_pyobject(py).unwrap();
        let back: TensorBatch = dict.extract().unwrap();
        assert_eq!(back.names().collect::<Vec<_>>(), ["a", "b.c"]);
        drop((dict, back));
        assert_eq!(live.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn errors_map_to_numpy_exception_types() {
    with_python(|py| {
        let err = |e: dlpack_core::Error| PyErr::from(e);
        let dtype = dlpack_core::Error::DtypeMismatch {
            expected: DataType::F32,
            found: DataType::F64,
        };
        assert!(err(dtype.clone()).is_instance_of::<PyTypeError>(py));
        assert!(err(dtype.in_tensor("w")).is_instance_of::<PyTypeError>(py));
        let exotic = dlpack_core::Error::DtypeMismatch {
            expected: DataType::F32,
            found: DataType::new(DLDataTypeCode::kDLFloat8_e5m2, 8, 1),
        };
        assert!(err(exotic).is_instance_of::<PyBufferError>(py));
        let device = dlpack_core::Error::UnsupportedDevice {
            device: Device::new(DLDeviceType::kDLCUDA, 0),
        };
        assert!(err(device).is_instance_of::<PyBufferError>(py));
        assert!(err(dlpack_core::Error::ReadOnly).is_instance_of::<PyValueError>(py));
        let not_a_tensor = PyString::new(py, "x").into_any();
        let e = from_dlpack(&not_a_tensor).unwrap_err();
        assert!(e.is_instance_of::<PyTypeError>(py));
    });
}

/// Our `Tensor`'s DLPack C exchange table, called as a C consumer calls it.
#[test]
fn the_exchange_table_works_from_c() {
    use core::ptr::{NonNull, null_mut};
    use dlpack_core::ffi::{DLPACK_EXCHANGE_API_CAPSULE_NAME, DLPackExchangeAPI, DLTensor};

    let live = Arc::new(AtomicUsize::new(0));
    with_python(|py| {
        let object = Probe::tensor(&live).into_pyobject(py).unwrap();
        let attr = object
            .get_type()
            .getattr("__dlpack_c_exchange_api__")
            .unwrap();
        let capsule = attr.cast::<PyCapsule>().unwrap();
        let name = Some(DLPACK_EXCHANGE_API_CAPSULE_NAME);
        let table = capsule.pointer_checked(name).unwrap();
        // SAFETY: our own table, a static that lives as long as the process.
        let api = unsafe { table.cast::<DLPackExchangeAPI>().as_ref() };

        // An owned tensor over the object's data, which outlives the object.
        let from_object = api.managed_tensor_from_py_object_no_sync.unwrap();
        let mut out = null_mut();
        // SAFETY: a live object and a writable out-pointer, from an attached thread.
        assert_eq!(unsafe { from_object(object.as_ptr().cast(), &mut out) }, 0);
        // SAFETY: success hands over a valid versioned tensor.
        let imported = unsafe { ManagedTensor::from_raw(out) }.unwrap();
        let data = object.get().tensor().data_ptr();
        assert_eq!(imported.data_ptr(), data);
        drop(object);
        assert_eq!(live.load(Ordering::SeqCst), 1);
        drop(imported);
        assert_eq!(live.load(Ordering::SeqCst), 0);

        // Not a `Tensor`: -1 and a TypeError.
        let list = PyList::empty(py);
        // SAFETY: as above.
        assert_eq!(unsafe { from_object(list.as_ptr().cast(), &mut out) }, -1);
        assert!(PyErr::take(py).unwrap().is_instance_of::<PyTypeError>(py));

        // A new zeroed tensor, into a Python object, back into Rust.
        let mut shape = [2_i64, 3];
        let mut prototype = DLTensor {
            data: null_mut(),
            device: Device::CPU.to_raw(),
            ndim: 2,
            dtype: DataType::F64.to_raw(),
            shape: shape.as_mut_ptr(),
            strides: null_mut(),
            byte_offset: 0,
        };
        let allocate = api.managed_tensor_allocator.unwrap();
        // SAFETY: a readable prototype whose shape holds `ndim` values, a writable
        // out-pointer, no error callback.
        let status = unsafe { allocate(&mut prototype, &mut out, null_mut(), None) };
        assert_eq!(status, 0);
        let to_object = api.managed_tensor_to_py_object_no_sync.unwrap();
        let mut made = null_mut();
        // SAFETY: the allocator's tensor, handed over, and a writable out-pointer.
        assert_eq!(unsafe { to_object(out, &mut made) }, 0);
        // SAFETY: success returns a new reference.
        let made = unsafe { Bound::from_owned_ptr(py, made.cast()) };
        let back = from_dlpack(&made).unwrap();
        let view = back.as_array::<f64, IxDyn>().unwrap();
        assert_eq!(view.shape(), &[2, 3]);
        assert!(view.iter().all(|&x| x == 0.0));

        // The borrowed description of the same object.
        let borrow = api.dltensor_from_py_object_no_sync.unwrap();
        let mut described = prototype;
        // SAFETY: a live object and a writable out-pointer, from an attached thread.
        assert_eq!(unsafe { borrow(made.as_ptr().cast(), &mut described) }, 0);
        assert_eq!(described.data.cast_const(), back.data_ptr().cast());

        // No stream for any device.
        let stream = api.current_work_stream.unwrap();
        let mut current = NonNull::<u8>::dangling().as_ptr().cast();
        // SAFETY: a writable out-pointer.
        assert_eq!(unsafe { stream(DLDeviceType::kDLCUDA, 0, &mut current) }, 0);
        assert!(current.is_null());
    });
    assert_eq!(live.load(Ordering::SeqCst), 0);
}

/// Before an extension adds the class to its module, it is `dlpack_core.Tensor`, never
/// `builtins.Tensor`.
#[test]
fn the_tensor_class_is_never_builtins() {
    with_python(|py| {
        let ty = py.get_type::<Tensor>();
        let module: String = ty.getattr("__module__").unwrap().extract().unwrap();
        assert!(
            module == "dlpack_core" || module == "dlpack_test_ext",
            "{module}"
        );
    });
}
