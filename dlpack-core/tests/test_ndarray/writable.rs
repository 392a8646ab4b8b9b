//! `DLPackArray`'s writable views (the read-only view is derived from the mutable one):
//! negative strides, extent-1 axes, empty tensors, threads, `assume_exclusive`.

use dlpack_core::{DLPackArray, DataType, Error, ManagedTensor, ToDLPack};
use ndarray::{Array2, Ix2, Ix3, IxDyn, array, s};

use super::bytes_f64;
use super::common::{Counter, Spec, buffer_from_bytes, versioned};

/// A writable 2 x 3 `f64` tensor whose axes are both reversed (strides `[-3, -1]`).
fn neg_spec() -> Spec {
    let mut spec = Spec::new(
        &[2, 3],
        DataType::F64.to_raw(),
        buffer_from_bytes(&bytes_f64(&[0., 1., 2., 3., 4., 5.])),
    );
    spec.strides = Some(vec![-3, -1]);
    spec.data_at = Some(5 * 8);
    spec
}

#[test]
fn dlpack_array_writable_with_negative_strides_reads_and_writes() {
    let counter = Counter::new();
    // SAFETY: a fresh, honest tensor whose memory nothing else uses.
    let t = unsafe { ManagedTensor::from_raw(versioned(&neg_spec(), &counter)) }.unwrap();
    assert!(t.is_exclusive() && !t.is_read_only());
    let mut a = DLPackArray::<f64, Ix2>::new(t).unwrap();
    assert_eq!(a.view(), array![[5., 4., 3.], [2., 1., 0.]]);
    assert_eq!(a.view().strides(), &[-3, -1]);
    let v0 = a.view()[[0, 0]];
    {
        let mut m = a.view_mut().unwrap();
        m[[0, 0]] = 50.0;
        m[[1, 2]] = -1.0;
        let r = &mut m[[0, 1]];
        *r += 1.0;
    }
    let v = a.view();
    let r1 = &v[[0, 0]];
    let v2 = a.view();
    let r2 = &v2[[1, 2]];
    assert_eq!((*r1, *r2, v0), (50.0, -1.0, 5.0));
    {
        let mut m = a.view_mut().unwrap();
        m.fill(7.0);
    }
    assert_eq!(a.view().sum(), 42.0);
    let owned = a.into_owned().unwrap();
    assert_eq!(owned, Array2::from_elem((2, 3), 7.0));
    assert_eq!(counter.get(), 1);
}

#[test]
fn dlpack_array_writable_with_a_reversed_axis_of_extent_one() {
    // shape [1, 3, 2], strides [-6, -2, 1]: axis 0 has len 1 (not inverted).
    let vals: Vec<f64> = (0..6).map(|x| x as f64).collect();
    let mut spec = Spec::new(
        &[1, 3, 2],
        DataType::F64.to_raw(),
        buffer_from_bytes(&bytes_f64(&vals)),
    );
    spec.strides = Some(vec![-6, -2, 1]);
    spec.data_at = Some(4 * 8);
    let counter = Counter::new();
    // SAFETY: a fresh, honest tensor whose memory nothing else uses.
    let t = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap();
    let mut a = DLPackArray::<f64, Ix3>::new(t).unwrap();
    assert_eq!(a.view(), array![[[4., 5.], [2., 3.], [0., 1.]]]);
    a.view_mut().unwrap()[[0, 2, 1]] = 9.0;
    assert_eq!(a.view()[[0, 2, 1]], 9.0);
    let owned = a.into_owned().unwrap();
    assert_eq!(owned[[0, 2, 1]], 9.0);
    drop(owned);
    assert_eq!(counter.get(), 1);
}

#[test]
fn dlpack_array_writable_and_empty() {
    for shape in [[0i64, 3], [3, 0], [0, 0]] {
        let counter = Counter::new();
        let mut spec = Spec::new(&shape, DataType::F64.to_raw(), vec![]);
        spec.data_at = None; // NULL data, allowed when empty
        // SAFETY: a fresh, honest tensor whose memory nothing else uses.
        let t = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap();
        let mut a = DLPackArray::<f64, Ix2>::new(t).unwrap();
        assert_eq!(a.view().len(), 0);
        assert_eq!(a.view().sum(), 0.0);
        assert_eq!(a.view_mut().unwrap().len(), 0);
        let _ = format!("{a:?}");
        let owned = a.into_owned().unwrap();
        assert_eq!(owned.shape(), &[shape[0] as usize, shape[1] as usize]);
        assert_eq!(counter.get(), 1);
    }
    // Our own export of an empty array, reclaimed.
    let e = Array2::<f32>::zeros((0, 4));
    let mut a = DLPackArray::<f32, Ix2>::new(e.to_dlpack().unwrap()).unwrap();
    assert_eq!(a.view().len(), 0);
    let _ = a.view_mut().unwrap();
    let _ = a.into_owned().unwrap();
    // Empty with negative stride.
    let mut spec = Spec::new(&[0, 3], DataType::F64.to_raw(), vec![0]);
    spec.strides = Some(vec![-3, -1]);
    let counter = Counter::new();
    // SAFETY: a fresh, honest tensor whose memory nothing else uses.
    let t = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap();
    let a = DLPackArray::<f64, IxDyn>::new(t).unwrap();
    assert_eq!(a.view().len(), 0);
    drop(a);
    assert_eq!(counter.get(), 1);
}

#[test]
fn dlpack_array_views_from_threads_and_writes_on_another() {
    let counter = Counter::new();
    // SAFETY: a fresh, honest tensor whose memory nothing else uses.
    let t = unsafe { ManagedTensor::from_raw(versioned(&neg_spec(), &counter)) }.unwrap();
    let mut a = DLPackArray::<f64, Ix2>::new(t).unwrap();
    a.view_mut().unwrap()[[0, 0]] = 11.0;
    std::thread::scope(|s| {
        let a = &a;
        let h: Vec<_> = (0..3).map(|_| s.spawn(move || a.view().sum())).collect();
        for h in h {
            assert_eq!(h.join().unwrap(), 11.0 + 4. + 3. + 2. + 1.);
        }
    });
    // Send: moved to another thread, written there.
    let b = std::thread::spawn(move || {
        a.view_mut().unwrap()[[1, 1]] = 100.0;
        a
    })
    .join()
    .unwrap();
    assert_eq!(b.view()[[1, 1]], 100.0);
    drop(b);
    assert_eq!(counter.get(), 1);
}

#[test]
fn dlpack_array_assume_exclusive_then_views() {
    let counter = Counter::new();
    // SAFETY: a fresh, honest tensor.
    let t = unsafe { ManagedTensor::from_raw_shared(versioned(&neg_spec(), &counter)) }.unwrap();
    let mut a = DLPackArray::<f64, Ix2>::new(t).unwrap();
    let before = a.view();
    let x = before[[0, 0]];
    assert_eq!(a.view_mut().unwrap_err(), Error::NotExclusive);
    // SAFETY: nothing else holds the test's buffer; the first view is not used again.
    unsafe { a.assume_exclusive() }.unwrap();
    // SAFETY: as above (a second call changes nothing).
    unsafe { a.assume_exclusive() }.unwrap();
    a.view_mut().unwrap()[[0, 0]] = x + 1.0;
    assert_eq!(a.view()[[0, 0]], 6.0);
    assert_eq!(a.view(), array![[6., 4., 3.], [2., 1., 0.]]);
    drop(a);
    assert_eq!(counter.get(), 1);
    // Overlapping strides: assume_exclusive fails, views stay read-only.
    let mut spec = Spec::new(
        &[2, 3],
        DataType::F64.to_raw(),
        buffer_from_bytes(&bytes_f64(&[1., 2., 3.])),
    );
    spec.strides = Some(vec![0, 1]);
    let counter = Counter::new();
    // SAFETY: a fresh, honest tensor.
    let t = unsafe { ManagedTensor::from_raw_shared(versioned(&spec, &counter)) }.unwrap();
    let mut a = DLPackArray::<f64, Ix2>::new(t).unwrap();
    // SAFETY: nothing else holds the test's buffer.
    let refused = unsafe { a.assume_exclusive() }.unwrap_err();
    assert_eq!(refused, Error::OverlappingStrides);
    assert_eq!(a.view_mut().unwrap_err(), Error::NotExclusive);
    // Unchanged: the tensor is still shared.
    assert!(!a.tensor().is_exclusive());
    assert_eq!(a.view().sum(), 12.0);
    let o = a.into_owned().unwrap();
    assert_eq!(o.sum(), 12.0);
}

#[test]
fn dlpack_array_of_our_reversed_slice_writes_and_comes_back() {
    let a = Array2::from_shape_fn((4, 5), |(i, j)| (i * 5 + j) as f32);
    let sl = a.slice_move(s![..;-1, 1..;-2]);
    let expected = sl.to_owned();
    let mut d = DLPackArray::<f32, Ix2>::new(sl.to_dlpack().unwrap()).unwrap();
    assert_eq!(d.view(), expected);
    d.view_mut().unwrap()[[0, 0]] = -5.0;
    let v = d.view();
    assert_eq!(v[[0, 0]], -5.0);
    let back = d.into_owned().unwrap();
    assert_eq!(back[[0, 0]], -5.0);
}
