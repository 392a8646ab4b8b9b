//! [`Parameter`]: the array type of a model's fields that Python shares, and its
//! [`TensorField`] impl.

use core::fmt;

use ndarray::{
    ArcArray, Array, ArrayView, ArrayViewMut, Dimension, Ix0, Ix1, Ix2, Ix3, Ix4, Ix5, Ix6, IxDyn,
};

use crate::dtype::{DataType, Element};
use crate::error::{Error, Result};
use crate::tensor::ManagedTensor;
use crate::traits::{Found, FromDLPack, TensorField, TensorFieldsOf};

use super::DLPackArray;
use super::convert::{
    copy_standard, export_array, export_copy, export_owner, load_into, stride_bits,
};
use super::slot::ObjectSlot;

/// An array whose buffer Python may share: the type of the tensor fields of a Rust model
/// shared with Python (`#[pymodel]`, features `pyo3` and `derive`; see
/// `dlpack_core::python::model` for the whole rule).
///
/// - [`view`](Self::view) reads the buffer. While Python holds a tensor of it (an
///   attribute read, a `state_dict`), Python may write it: an optimizer step that the
///   next Rust read sees. A Python write while a view lives (from another thread, or
///   from Python code that your method runs: a callback, a finalizer that an
///   allocation's garbage collection runs) is a data race, undefined behaviour that the
///   crate cannot prevent: see `dlpack_core::python::model` for the pattern that
///   avoids it.
/// - [`view_mut`](Self::view_mut) is copy-on-write: while Python holds a tensor of the
///   buffer, the array first gets a fresh copy of its own, so Rust never holds a `&mut`
///   over memory Python can reach; else it writes in place.
/// - [`Clone`] copies the elements: a clone is a value of its own, which Python's
///   writes to the original never reach. No other Rust handle of the buffer exists
///   (the crate never gives out the `ArcArray` inside), so Python's writes reach only
///   this array and the fields tied to it.
///
/// `bool` arrays are handed to Python as copies: Python could store bytes that are no
/// `bool`.
///
/// With feature `pyo3`, the field keeps the Python object its first read from Python
/// made, and every later read returns that object (as `nn.Module` returns the same
/// `Parameter`), until [`view_mut`](Self::view_mut) or a replacement lets it go.
///
/// ```
/// use dlpack_core::Parameter2;
/// use dlpack_core::implement::TensorField;
/// use ndarray::Array2;
///
/// let mut weight = Parameter2::from(Array2::<f32>::zeros((2, 3)));
/// let before = weight.view().as_ptr();
/// let tensor = weight.share()?; // what Python gets: the same buffer
/// assert_eq!(tensor.data().cast::<f32>().cast_const(), before);
/// weight.view_mut().fill(1.0); // a view lives: copy first
/// assert_ne!(weight.view().as_ptr(), before);
/// assert_eq!(tensor.as_array::<f32, ndarray::Ix2>()?[[0, 0]], 0.0);
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub struct Parameter<A, D: Dimension>(ArcArray<A, D>, ObjectSlot);

/// A one-dimensional [`Parameter`].
pub type Parameter1<A> = Parameter<A, Ix1>;
/// A two-dimensional [`Parameter`].
pub type Parameter2<A> = Parameter<A, Ix2>;
/// A three-dimensional [`Parameter`].
pub type Parameter3<A> = Parameter<A, Ix3>;
/// A four-dimensional [`Parameter`].
pub type Parameter4<A> = Parameter<A, Ix4>;
/// A zero-dimensional [`Parameter`].
pub type Parameter0<A> = Parameter<A, Ix0>;
/// A five-dimensional [`Parameter`].
pub type Parameter5<A> = Parameter<A, Ix5>;
/// A six-dimensional [`Parameter`].
pub type Parameter6<A> = Parameter<A, Ix6>;
/// A [`Parameter`] of any rank.
pub type ParameterD<A> = Parameter<A, IxDyn>;

impl<A: Element, D: Dimension> Parameter<A, D> {
    /// A view of the elements.
    pub fn view(&self) -> ArrayView<'_, A, D> {
        self.0.view()
    }

    /// A mutable view of the elements: first a copy of its own when Python holds a
    /// tensor of the buffer (copy-on-write), in place otherwise. The field's Python
    /// object (what attribute reads return) is let go first: the next read makes a new
    /// one, over the buffer written.
    pub fn view_mut(&mut self) -> ArrayViewMut<'_, A, D> {
        self.1.clear();
        if !self.0.is_unique() {
            // The copy in a buffer of the crate's (64-byte aligned), where ndarray's own
            // copy-on-write would copy the vector as it is; ndarray's copy (which aborts
            // when memory runs out, as any `Vec` growth does) when that cannot be
            // allocated.
            if let Ok(copy) = copy_standard(self.0.view()) {
                self.0 = copy.into_shared();
            }
        }
        self.0.view_mut()
    }

    /// The extent of each axis.
    pub fn shape(&self) -> &[usize] {
        self.0.shape()
    }

    /// The extents as a `D`.
    pub fn raw_dim(&self) -> D {
        self.0.raw_dim()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether anything else holds the buffer (a tensor handed to Python, a tied field):
    /// the next [`view_mut`](Self::view_mut) copies. The field's own Python object,
    /// kept for attribute reads, counts only while something else holds it (a Python
    /// reference, an array made from it): when nothing does, it is let go here. That is
    /// looked at only on a thread attached to the interpreter (inside a `#[pymethods]`
    /// method, say): this never waits for the GIL, and on another thread the object
    /// counts as a holder.
    pub fn is_shared(&self) -> bool {
        self.1.release_unused();
        !self.0.is_unique()
    }

    /// A copy of the elements as an owned array.
    pub fn to_owned(&self) -> Array<A, D> {
        copy_standard(self.0.view()).unwrap_or_else(|_| self.0.to_owned())
    }

    /// The elements as an owned array: the buffer itself when nothing else holds it, else
    /// a copy.
    pub fn into_owned(self) -> Array<A, D> {
        let Self(array, mut slot) = self;
        slot.clear();
        match array.try_into_owned_nocopy() {
            Ok(array) => array,
            Err(shared) => copy_standard(shared.view()).unwrap_or_else(|_| shared.into_owned()),
        }
    }

    /// Shares the buffer of `tensor` when it is a writable share of a field of this type
    /// (and of the shape `like`, when given).
    pub(super) fn tied(tensor: &ManagedTensor, like: Option<&[usize]>) -> Option<Self>
    where
        D: 'static,
    {
        shared_owner::<A, D>(tensor, like).map(|array| Self(array.clone(), ObjectSlot::new()))
    }
}

impl<A: Element, D: Dimension> From<Array<A, D>> for Parameter<A, D> {
    /// Takes the array's buffer, without a copy.
    fn from(array: Array<A, D>) -> Self {
        Self(array.into_shared(), ObjectSlot::new())
    }
}

impl<A: Element, D: Dimension> Clone for Parameter<A, D> {
    /// A copy of the elements (see the type's documentation: a clone is a value of its
    /// own, not another handle of a buffer Python may write).
    fn clone(&self) -> Self {
        Self(self.to_owned().into_shared(), ObjectSlot::new())
    }
}

impl<A: Element + fmt::Debug, D: Dimension> fmt::Debug for Parameter<A, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.view().fmt(f)
    }
}

impl<A: Element, D: Dimension + 'static> TensorField for Parameter<A, D> {
    fn dtype(&self) -> DataType {
        A::DTYPE
    }

    fn shape(&self) -> &[usize] {
        self.0.shape()
    }

    fn share(&self) -> Result<ManagedTensor> {
        share_writable(&self.0)
    }

    #[cfg(feature = "pyo3")]
    fn python_object(
        &self,
        py: pyo3::Python<'_>,
        wrap: crate::traits::WrapShare,
        unused: crate::traits::Unused,
    ) -> pyo3::PyResult<pyo3::Py<pyo3::PyAny>> {
        // A `bool` field is handed out as a copy: a kept copy would show Python's own
        // writes to it, which the field never sees, so each read copies afresh.
        if A::DTYPE == DataType::BOOL {
            return wrap(py, share_writable(&self.0)?);
        }
        self.1
            .get_or_make(py, || wrap(py, share_writable(&self.0)?), unused)
    }

    fn replace(&mut self, tensor: ManagedTensor) -> Result<()> {
        let checked = DLPackArray::<A, D>::new(tensor)?;
        let found = checked.view().shape().to_vec();
        if found != self.0.shape() {
            return Err(Error::ShapeMismatch {
                expected: self.0.shape().to_vec(),
                found,
            });
        }
        let tensor = checked.into_inner();
        if !self.tie(&tensor) {
            *self = Self::from(Array::<A, D>::from_dlpack(tensor)?);
        }
        Ok(())
    }

    fn tie(&mut self, tensor: &ManagedTensor) -> bool {
        match Self::tied(tensor, Some(self.0.shape())) {
            Some(tied) => {
                *self = tied;
                true
            }
            None => false,
        }
    }
}

impl<A: Element, D: Dimension + 'static, M: ?Sized> TensorFieldsOf<M> for Parameter<A, D> {
    fn visit_tensors(&self, name: &mut String, visit: &mut dyn FnMut(&str, &dyn TensorField)) {
        visit(name, self);
    }

    fn find_tensor(&self, path: &str) -> Found<'_> {
        if path.is_empty() {
            Found::Tensor(self)
        } else {
            Found::Nothing
        }
    }

    fn find_tensor_mut(&mut self, path: &str) -> Option<&mut dyn TensorField> {
        if path.is_empty() { Some(self) } else { None }
    }
}

/// The inside, for the export of `convert`.
impl<A, D: Dimension> Parameter<A, D> {
    pub(super) fn into_arc(self) -> ArcArray<A, D> {
        let Self(array, mut slot) = self;
        slot.clear();
        array
    }
}

/// The owner of a [`share_writable`] tensor: the `ArcArray` clone that keeps the buffer
/// alive, under a type of its own, so that no path that takes back an `ArcArray` or an
/// `Array` owner (`reclaim`, `into_owner`) ever gets a handle of a buffer that Python
/// may write; only [`shared_owner`] reads it, for `Parameter`.
struct ShareOwner<A, D>(ArcArray<A, D>);

/// A writable tensor of a `Parameter`'s buffer, without a copy, marked shared: what a
/// model field hands to Python. `bool` buffers are copied instead (flagged
/// `IS_COPIED`): Python could store bytes that are no `bool`.
fn share_writable<A: Element, D: Dimension + 'static>(
    array: &ArcArray<A, D>,
) -> Result<ManagedTensor> {
    if A::DTYPE == crate::dtype::DataType::BOOL {
        return export_copy(array);
    }
    // SAFETY:
    // - `as_ptr` is element `[0, ...]` of the shared buffer, which the owner's `Arc`
    //   keeps alive and unmoved for as long as the tensor lives;
    // - writable although others hold the elements: the tensor is marked shared below,
    //   before it leaves this function, so this crate never gives a mutable view through
    //   it (`as_array_mut` and `view_mut` refuse it; `reclaim` and `into_owner` do not
    //   know the owner's type), and the other holders are `Parameter`s (the field, and
    //   fields tied to it), which copy the buffer before any write of their own
    //   (copy-on-write: the owner's reference keeps the count above one) and whose
    //   reads are the sharing rule of `python::model`; no `ArcArray` handle of the buffer
    //   leaves `Parameter`. Every bit pattern is a valid element (`bool` is copied
    //   above), so a foreign write cannot make one invalid.
    let tensor = unsafe {
        export_owner::<A, _, _>(
            ShareOwner(array.clone()),
            |o| o.0.as_ptr().cast_mut().cast(),
            &array.raw_dim(),
            &stride_bits(array),
            0,
        )
    }?;
    Ok(tensor.into_shared())
}

/// The buffer of a writable [`share_writable`] tensor of the same type (and of the shape
/// `like`, when given), for a field that then shares it (tied weights); `None` for any
/// other tensor.
fn shared_owner<'a, A: Element, D: Dimension + 'static>(
    tensor: &'a ManagedTensor,
    like: Option<&[usize]>,
) -> Option<&'a ArcArray<A, D>> {
    if tensor.is_read_only() {
        return None;
    }
    tensor
        .owner::<ShareOwner<A, D>>()
        .map(|owner| &owner.0)
        .filter(|array| like.is_none_or(|like| array.shape() == like))
}

to_one_tensor! {
    /// Moves the buffer like an `Array` when nothing else holds it; else a writable
    /// share of it, as the field's own shares are (`bool`: a copy).
    impl[A: Element, D: Dimension + 'static] for Parameter<A, D> {
        |array| match array.into_arc().try_into_owned_nocopy() {
            Ok(array) => export_array(array, 0),
            Err(shared) => share_writable(&shared),
        }
    }
}

from_one_tensor! {
    /// A writable share of a `Parameter` comes back sharing its buffer (tied), our own
    /// `Array` export without a copy; anything else is copied.
    impl[A: Element, D: Dimension + 'static] for Parameter<A, D> {
        |tensor| {
            if let Some(tied) = Parameter::tied(&tensor, None) {
                return Ok(tied);
            }
            Array::<A, D>::from_dlpack(tensor).map(Parameter::from)
        },
        load |array, tensor| load_into(array.view_mut(), tensor)
    }
}
