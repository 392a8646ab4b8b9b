//! When an import takes back the vector or array it exported, and when it copies.

use dlpack_core::{Error, FromDLPack, ManagedTensor, ToDLPack};
use ndarray::{Array1, Array2, ArrayD, Ix0, array};

#[test]
fn fixed_rank_mismatch_does_not_reclaim() {
    let a = array![[1.0f32, 2.0]];
    let t = a.to_dlpack().unwrap();
    let err = Array1::<f32>::from_dlpack(t).unwrap_err();
    assert_eq!(
        err,
        Error::NdimMismatch {
            expected: 1,
            found: 2
        }
    );
    // A dynamic-rank import of a fixed-rank export is still zero-copy.
    let a = array![[1.0f32, 2.0]];
    let ptr = a.as_ptr();
    let back = ArrayD::<f32>::from_dlpack(a.to_dlpack().unwrap()).unwrap();
    assert_eq!(back.as_ptr(), ptr);
    let dyn_a = back.clone();
    let ptr = dyn_a.as_ptr();
    let back = Array2::<f32>::from_dlpack(dyn_a.to_dlpack().unwrap()).unwrap();
    assert_eq!(back.as_ptr(), ptr);
    let _ = Ix0;
}

#[test]
fn reclaim_trusts_the_owner_not_a_rewritten_header() {
    let a = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let raw = a.to_dlpack().unwrap().into_raw();
    // A raw holder rewrites `ndim` (the header is plain writable memory).
    // SAFETY: `raw` is a live tensor we own; `ndim` 1 still describes memory inside it
    // (the first axis: 2 elements with stride 3).
    unsafe { (*raw).dl_tensor.ndim = 1 };
    // SAFETY: ownership comes back; the header is still honest about its memory.
    let t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    // The owner is 2-d, so no 1-d reclaim: a checked copy of what the header says.
    assert_eq!(Array1::<f32>::from_dlpack(t).unwrap(), array![1.0, 4.0]);
}

#[test]
fn from_buffer_vectors_in_standard_layout_come_back_without_a_copy() {
    let values: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let ptr = values.as_ptr();
    let t = ManagedTensor::from_buffer(values, 0, &[2, 3], &[3, 1]).unwrap();
    let a = Array2::<f32>::from_dlpack(t).unwrap();
    assert_eq!(a.as_ptr(), ptr, "the vector moved into the array");
    assert_eq!(a, array![[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]);

    // Any rank type that fits, and strides of extent-1 axes do not matter.
    let values = vec![1u16, 2, 3];
    let ptr = values.as_ptr();
    let t = ManagedTensor::from_buffer(values, 0, &[1, 3], &[99, 1]).unwrap();
    let a = ArrayD::<u16>::from_dlpack(t).unwrap();
    assert_eq!(a.as_ptr(), ptr);
    assert_eq!(a.shape(), [1, 3]);

    // An empty vector.
    let t = ManagedTensor::from_buffer(Vec::<f64>::new(), 0, &[0, 4], &[4, 1]).unwrap();
    assert_eq!(Array2::<f64>::from_dlpack(t).unwrap().dim(), (0, 4));
}

#[test]
fn from_buffer_vectors_in_other_layouts_are_copied() {
    let copied = |t: ManagedTensor, ptr: *const f32| {
        let a = Array2::<f32>::from_dlpack(t).unwrap();
        assert_ne!(a.as_ptr(), ptr);
        a
    };
    let values: Vec<f32> = (0..6).map(|i| i as f32).collect();
    // Column-major.
    let ptr = values.as_ptr();
    let t = ManagedTensor::from_buffer(values.clone(), 0, &[2, 3], &[1, 2]).unwrap();
    assert_eq!(copied(t, ptr), array![[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]);
    // An offset.
    let ptr = values.as_ptr();
    let t = ManagedTensor::from_buffer(values.clone(), 1, &[1, 5], &[5, 1]).unwrap();
    assert_eq!(copied(t, ptr), array![[1.0, 2.0, 3.0, 4.0, 5.0]]);
    // Fewer elements than the vector holds.
    let ptr = values.as_ptr();
    let t = ManagedTensor::from_buffer(values.clone(), 0, &[2, 2], &[2, 1]).unwrap();
    assert_eq!(copied(t, ptr), array![[0.0, 1.0], [2.0, 3.0]]);
    // Another element type or rank is the usual error, not a reclaim.
    let t = ManagedTensor::from_buffer(values.clone(), 0, &[2, 3], &[3, 1]).unwrap();
    assert!(matches!(
        Array2::<f64>::from_dlpack(t),
        Err(Error::DtypeMismatch { .. })
    ));
    let t = ManagedTensor::from_buffer(values, 0, &[2, 3], &[3, 1]).unwrap();
    assert!(matches!(
        Array1::<f32>::from_dlpack(t),
        Err(Error::NdimMismatch { .. })
    ));
}
