//! Our exports: every rank and layout round-trips, shared and owned arrays, views,
//! copy-on-write arrays and `DLPackArray`.

use dlpack_core::ffi::{DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY};
use dlpack_core::{DLPackArray, DataType, Error, FromDLPack, ManagedTensor, ToDLPack};
use ndarray::{
    ArcArray, Array, Array0, Array1, Array2, Array3, ArrayD, Axis, CowArray, Dimension, Ix1, Ix2,
    Ix3, Ix4, Ix5, Ix6, IxDyn, ShapeBuilder, array, s,
};

use super::bytes_i32;
use super::common::{Counter, Spec, buffer_from_bytes, versioned};

/// Exports `a`, checks a borrowed view of fixed rank `D` and the reclaimed array.
fn round_trip<D: Dimension + 'static>(a: Array<f32, D>) {
    let expected = a.clone();
    let ptr = a.as_ptr();
    let strides = a.strides().to_vec();
    let t = a.to_dlpack().unwrap();
    assert!(!t.is_read_only() && !t.is_copied());
    assert_eq!(t.byte_offset(), 0);
    assert_eq!(
        t.strides()
            .unwrap_or(&[])
            .iter()
            .map(|&s| s as isize)
            .collect::<Vec<_>>(),
        strides
    );
    let view = t.as_array::<f32, D>().unwrap();
    assert_eq!(view, expected);
    if !expected.is_empty() {
        assert_eq!(view.as_ptr(), ptr, "zero-copy view");
    }
    let dyn_view = t.as_array::<f32, IxDyn>().unwrap();
    assert_eq!(dyn_view, expected.clone().into_dyn());
    let back = Array::<f32, D>::from_dlpack(t).unwrap();
    assert_eq!(back, expected);
    assert_eq!(
        back.as_ptr(),
        ptr,
        "our own export comes back without a copy"
    );
    assert_eq!(back.strides(), expected.strides());
}

fn iota(shape: &[usize]) -> ArrayD<f32> {
    let n = shape.iter().product::<usize>();
    ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(|i| i as f32).collect()).unwrap()
}

#[test]
fn every_rank() {
    round_trip(Array0::from_elem((), 7.0));
    round_trip(Array1::from_vec(vec![1.0, 2.0, 3.0]));
    round_trip(iota(&[2, 3]).into_dimensionality::<Ix2>().unwrap());
    round_trip(iota(&[2, 3, 4]).into_dimensionality::<Ix3>().unwrap());
    round_trip(iota(&[2, 1, 3, 2]).into_dimensionality::<Ix4>().unwrap());
    round_trip(iota(&[1, 2, 1, 3, 2]).into_dimensionality::<Ix5>().unwrap());
    round_trip(
        iota(&[2, 2, 1, 2, 1, 2])
            .into_dimensionality::<Ix6>()
            .unwrap(),
    );
    round_trip(iota(&[2, 1, 2, 1, 2, 1, 2]));
}

#[test]
fn every_layout() {
    let c = iota(&[3, 4]).into_dimensionality::<Ix2>().unwrap();
    // Fortran order.
    round_trip(c.clone().reversed_axes());
    let f = Array2::from_shape_vec((3, 4).f(), (0..12).map(|i| i as f32).collect()).unwrap();
    round_trip(f);
    // Sliced from the front, stepped, and negative strides.
    round_trip(c.clone().slice_move(s![1.., 1..3]));
    round_trip(c.clone().slice_move(s![..;2, ..;3]));
    round_trip(c.clone().slice_move(s![..;-1, ..]));
    round_trip(c.clone().slice_move(s![1..;-2, ..;-3]));
    let mut inverted = c.clone();
    inverted.invert_axis(Axis(1));
    round_trip(inverted);
    // Permuted 3-d.
    round_trip(iota(&[2, 3, 4]).permuted_axes(IxDyn(&[2, 0, 1])));
    // Empty, with and without other extents.
    round_trip(Array2::<f32>::zeros((0, 5)));
    round_trip(Array3::<f32>::zeros((2, 0, 3)));
    round_trip(c.slice_move(s![2..2, ..]));
}

#[test]
fn arc_array_shares_read_only_or_moves_when_unique() {
    let shared: ArcArray<i32, Ix2> = array![[1, 2], [3, 4]].into_shared();
    let keep = shared.clone();
    let mut t = shared.to_dlpack().unwrap();
    assert!(t.is_read_only());
    assert_eq!(t.as_array::<i32, Ix2>().unwrap().as_ptr(), keep.as_ptr());
    assert_eq!(t.as_array_mut::<i32, Ix2>().unwrap_err(), Error::ReadOnly);
    let back = ArcArray::<i32, Ix2>::from_dlpack(t).unwrap();
    assert_eq!(
        back.as_ptr(),
        keep.as_ptr(),
        "shared export comes back shared"
    );
    drop(back);

    // Copy-on-write: mutating our handle leaves the exported buffer alone.
    let t = keep.clone().to_dlpack().unwrap();
    let mut mine = keep;
    mine[[0, 0]] = 100;
    assert_eq!(t.as_array::<i32, Ix2>().unwrap()[[0, 0]], 1);

    let unique: ArcArray<i32, Ix1> = array![5, 6].into_shared();
    let ptr = unique.as_ptr();
    let mut t = unique.to_dlpack().unwrap();
    assert!(!t.is_read_only(), "the only handle moves, writable");
    t.as_array_mut::<i32, Ix1>().unwrap()[0] = 50;
    let back = Array1::<i32>::from_dlpack(t).unwrap();
    assert_eq!((back.as_ptr(), back[0]), (ptr, 50));
}

#[test]
fn views_and_references_are_copied() {
    let a = array![[1.0f64, 2.0], [3.0, 4.0]];
    let t = a.view().to_dlpack().unwrap();
    assert!(t.is_copied());
    assert_eq!(
        t.flags() & DLPACK_FLAG_BITMASK_IS_COPIED,
        DLPACK_FLAG_BITMASK_IS_COPIED
    );
    assert_ne!(t.as_array::<f64, Ix2>().unwrap().as_ptr(), a.as_ptr());
    assert_eq!(t.as_array::<f64, Ix2>().unwrap(), a);
    let t = (&a).to_dlpack().unwrap();
    assert!(t.is_copied());
    let mut b = a.clone();
    let t = b.view_mut().to_dlpack().unwrap();
    assert!(t.is_copied());
    // A reversed view keeps its layout in the copy's values.
    let t = a.slice(s![..;-1, ..]).to_dlpack().unwrap();
    assert_eq!(
        t.as_array::<f64, Ix2>().unwrap(),
        array![[3.0, 4.0], [1.0, 2.0]]
    );
}

#[test]
fn cow_array_by_variant() {
    let a = array![1u8, 2, 3];
    let ptr = a.as_ptr();
    let owned = CowArray::from(a.clone());
    let owned_ptr = owned.as_ptr();
    let t = owned.to_dlpack().unwrap();
    assert!(!t.is_copied());
    assert_eq!(t.as_array::<u8, Ix1>().unwrap().as_ptr(), owned_ptr);
    let t = CowArray::from(a.view()).to_dlpack().unwrap();
    assert!(t.is_copied());
    assert_ne!(t.as_array::<u8, Ix1>().unwrap().as_ptr(), ptr);
}

#[test]
fn unsafe_borrowed_export_shares() {
    let a = array![[1i16, 2, 3], [4, 5, 6]];
    let view = a.slice(s![.., ..;-1]);
    // SAFETY: `a` outlives the tensor, dropped at the end of this block, and is not
    // written meanwhile.
    let t = unsafe { ManagedTensor::from_view_unchecked(view) }.unwrap();
    assert!(t.is_read_only());
    assert_eq!(t.as_array::<i16, Ix2>().unwrap(), view);
    assert_eq!(t.as_array::<i16, Ix2>().unwrap().as_ptr(), view.as_ptr());
}

#[test]
fn dlpack_array_owns_and_lends() {
    let a = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let ptr = a.as_ptr();
    let mut owned = DLPackArray::<f32, Ix2>::new(a.to_dlpack().unwrap()).unwrap();
    assert_eq!(owned.shape(), &[2, 3]);
    owned.view_mut().unwrap()[[1, 2]] = 60.0;
    assert_eq!(owned.view()[[1, 2]], 60.0);
    assert_eq!(owned.view().as_ptr(), ptr);
    let back = owned.into_owned().unwrap();
    assert_eq!(back.as_ptr(), ptr);

    // A foreign tensor: a copy, then the deleter runs once.
    let counter = Counter::new();
    let mut spec = Spec::new(
        &[3],
        DataType::I32.to_raw(),
        buffer_from_bytes(&bytes_i32(&[7, 8, 9])),
    );
    spec.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    // SAFETY: a fresh, honest tensor.
    let t = unsafe { ManagedTensor::from_raw(versioned(&spec, &counter)) }.unwrap();
    let mut imported = DLPackArray::<i32, Ix1>::try_from(t).unwrap();
    assert_eq!(imported.view_mut().unwrap_err(), Error::ReadOnly);
    let copy = imported.into_owned().unwrap();
    assert_eq!(copy, array![7, 8, 9]);
    assert_eq!(counter.get(), 1);
}
