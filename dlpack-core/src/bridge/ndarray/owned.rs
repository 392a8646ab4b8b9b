//! [`DLPackArray`]: an owned, zero-copy import validated once.

use core::fmt;

use ndarray::{Array, ArrayView, ArrayViewMut, Dimension, RawArrayView, RawArrayViewMut};

use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::tensor::ManagedTensor;

use super::convert::{copy_standard, reclaim};

/// An owned, zero-copy import: a [`ManagedTensor`] validated once as an array of `A`
/// with dimension `D`.
///
/// ndarray's storage traits are sealed, so an `Array` cannot own foreign memory; this
/// wrapper holds the tensor (its deleter runs when the wrapper drops) and lends views.
///
/// ```
/// use dlpack_core::{DLPackArray, ToDLPack};
/// use ndarray::{array, Ix1};
///
/// let t = array![1.0f32, 2.0, 3.0].to_dlpack()?;
/// let mut a = DLPackArray::<f32, Ix1>::new(t)?;
/// a.view_mut()?[0] = 10.0;
/// assert_eq!(a.view().sum(), 15.0);
/// let owned = a.into_owned()?; // our own export: no copy
/// # Ok::<(), dlpack_core::Error>(())
/// ```
pub struct DLPackArray<A, D> {
    views: Views<A, D>,
    tensor: ManagedTensor,
    /// Why the producer's own rules refuse an in-place write (PyTorch's autograd),
    /// read when a typed Python argument is extracted; `None` otherwise. Asked only by
    /// [`assume_exclusive`](Self::assume_exclusive).
    #[cfg(feature = "pyo3")]
    refused_write: Option<WriteRefusal>,
}

/// Why the producer's own rules refuse an in-place write that DLPack's flags allow (the
/// reason, in the producer's words), recorded where a typed Python argument is extracted
/// (`python::import` reads PyTorch's autograd rule).
#[cfg(feature = "pyo3")]
#[derive(Clone, Copy)]
pub(crate) struct WriteRefusal(pub(crate) &'static str);

/// The validated views: mutable when the tensor allows it, else read-only with the
/// reason.
enum Views<A, D> {
    Mut(RawArrayViewMut<A, D>),
    Const(RawArrayView<A, D>, Refusal),
}

/// Why the views are read-only: one of the errors of a mutable view, kept small (the
/// array is moved by value through extraction).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Refusal {
    ReadOnly,
    NotExclusive,
    OverlappingStrides,
}

impl Refusal {
    fn of(err: &Error) -> Option<Self> {
        match err {
            Error::ReadOnly => Some(Self::ReadOnly),
            Error::NotExclusive => Some(Self::NotExclusive),
            Error::OverlappingStrides => Some(Self::OverlappingStrides),
            _ => None,
        }
    }

    fn error(self) -> Error {
        match self {
            Self::ReadOnly => Error::ReadOnly,
            Self::NotExclusive => Error::NotExclusive,
            Self::OverlappingStrides => Error::OverlappingStrides,
        }
    }
}

// SAFETY:
// - `raw` is a pointer into the memory owned by `tensor`, which is `Send`;
// - `A: Element` is `Send`, and moving the wrapper moves no element.
unsafe impl<A: Element, D: Dimension> Send for DLPackArray<A, D> {}
// SAFETY:
// - `&DLPackArray` only creates read-only views (`A: Sync`); mutation needs `&mut`;
// - `tensor` is `Sync`.
unsafe impl<A: Element, D: Dimension> Sync for DLPackArray<A, D> {}

impl<A: Element, D: Dimension + 'static> DLPackArray<A, D> {
    /// Validates `tensor` as [`ManagedTensor::as_array`] does and keeps it. On error the
    /// tensor is dropped (its deleter runs).
    pub fn new(tensor: ManagedTensor) -> Result<Self> {
        Self::try_new(tensor).map_err(|(err, _)| err)
    }

    /// [`new`](Self::new), giving the tensor back with the error (for a message that
    /// describes it, built only on the error path).
    pub(crate) fn try_new(
        tensor: ManagedTensor,
    ) -> core::result::Result<Self, (Error, ManagedTensor)> {
        // What `validate(true)` would refuse first without looking at the layout: a
        // shared or read-only tensor (every import from Python) is validated once.
        let refusal = if tensor.is_read_only() {
            Some(Refusal::ReadOnly)
        } else if !tensor.is_exclusive() {
            Some(Refusal::NotExclusive)
        } else {
            None
        };
        let views = match refusal {
            Some(why) => match tensor.validate::<A, D>(false) {
                Ok(valid) => Views::Const(valid.into_raw_view(), why),
                Err(err) => return Err((err, tensor)),
            },
            None => match tensor.validate::<A, D>(true) {
                Ok(valid) => Views::Mut(valid.into_raw_view_mut()),
                Err(err) => match Refusal::of(&err) {
                    Some(why) => match tensor.validate::<A, D>(false) {
                        Ok(valid) => Views::Const(valid.into_raw_view(), why),
                        Err(err) => return Err((err, tensor)),
                    },
                    None => return Err((err, tensor)),
                },
            },
        };
        Ok(Self {
            views,
            tensor,
            #[cfg(feature = "pyo3")]
            refused_write: None,
        })
    }

    /// Records why the producer refuses in-place writes (see
    /// [`assume_exclusive`](Self::assume_exclusive)).
    #[cfg(feature = "pyo3")]
    pub(crate) fn refusing_writes(mut self, reason: Option<WriteRefusal>) -> Self {
        self.refused_write = reason;
        self
    }

    fn raw_view(&self) -> RawArrayView<A, D> {
        match &self.views {
            // SAFETY: the view passed `validate` and its memory lives while `self` does;
            // the read-only view made here is never dereferenced and lives only for this
            // expression, which gives its raw view back (same pointer, extents and
            // strides); no mutable view can be alive meanwhile (`view_mut` borrows
            // `self` mutably).
            Views::Mut(raw) => unsafe { raw.clone().deref_into_view() }.raw_view(),
            Views::Const(raw, _) => raw.clone(),
        }
    }

    /// A read-only view.
    pub fn view(&self) -> ArrayView<'_, A, D> {
        // SAFETY: the view passed `validate` (see `ManagedTensor::as_array`), and it
        // borrows `self`, which owns the tensor.
        unsafe { self.raw_view().deref_into_view() }
    }

    /// A mutable view; an error if the tensor is shared ([`Error::NotExclusive`]),
    /// `READ_ONLY`, or its strides alias.
    pub fn view_mut(&mut self) -> Result<ArrayViewMut<'_, A, D>> {
        match &self.views {
            // SAFETY: validated as writable without aliasing (see
            // `ManagedTensor::as_array_mut`), and `&mut self` excludes every other view
            // borrowed from us.
            Views::Mut(raw) => Ok(unsafe { raw.clone().deref_into_view_mut() }),
            Views::Const(_, why) => Err(why.error()),
        }
    }

    /// Declares that nothing else reaches the array's memory, so that
    /// [`view_mut`](Self::view_mut) writes in place: the typed door of
    /// [`ManagedTensor::assume_exclusive`], for a `#[pyfunction]` that fills a caller's
    /// array (see "Writing into a caller's array" in the `python` module's docs).
    ///
    /// # Errors
    ///
    /// [`Error::ReadOnly`] for a `READ_ONLY` tensor, [`Error::OverlappingStrides`] when
    /// two indices share an element, [`Error::InPlaceRefused`] when torch's rule
    /// refuses the write (below); the array is unchanged then (views stay read-only,
    /// the tensor shared).
    ///
    /// # Safety
    ///
    /// While a mutable view borrowed from the array lives, nothing else reads or writes
    /// its memory:
    ///
    /// - no Python code that can reach the producer's array runs, and the interpreter
    ///   is not released to other threads (`Python::detach`), which could run some; on
    ///   a free-threaded interpreter, no other thread holds the producer's array;
    /// - never a JAX array: JAX arrays are immutable by contract, and its legacy capsule
    ///   cannot say so (no `READ_ONLY` flag), so a write breaks every JAX computation
    ///   that shares the buffer;
    /// - never the memory of a torch tensor that autograd tracks (`requires_grad`, or a
    ///   view of one) while grad mode is on, unless the array came from a Python
    ///   argument that is itself that torch tensor (whose rule is checked, below): torch
    ///   refuses its own in-place operations there, and a write behind its back gives
    ///   silently wrong gradients (an array made with [`new`](Self::new), or from
    ///   `t.detach().numpy()` or a wrapper's `__dlpack__`, is not checked);
    /// - while the array lives, nothing else writes the memory.
    ///
    /// Between the import and the write, no Python code may free or move the memory
    /// either (torch's `resize_` or `set_`, NumPy's `resize(refcheck=False)`): see the
    /// [import safety guide](crate::guide::import_safety). This function runs none: it
    /// reads two flags.
    ///
    /// # PyTorch's autograd
    ///
    /// An array extracted from a Python argument that is a torch tensor (feature `pyo3`)
    /// follows torch's requires-grad rule for in-place operations, read when the
    /// argument was extracted (just after its import, with torch functions off, so that
    /// no Python code runs between the import and the write): a tensor that requires
    /// grad (a `Parameter`, a view of one, a result computed from one) is refused with
    /// [`Error::InPlaceRefused`] if grad mode was on (autograd cannot record a write
    /// made outside torch), and written if the call runs under `torch.no_grad()`, where
    /// optimizer steps run; a tensor whose flag cannot be read is refused. Only that
    /// rule: the write does not bump torch's version counter (do not write a tensor
    /// that a pending backward pass saved), and an inference tensor is written outside
    /// inference mode too.
    pub unsafe fn assume_exclusive(&mut self) -> Result<()> {
        if let Views::Const(_, Refusal::NotExclusive) = &self.views {
            #[cfg(feature = "pyo3")]
            if let Some(WriteRefusal(reason)) = self.refused_write {
                return Err(Error::InPlaceRefused {
                    reason: reason.to_owned(),
                });
            }
            // SAFETY: the caller's contract, which is `ManagedTensor::assume_exclusive`'s.
            unsafe { self.tensor.assume_exclusive() };
            match self.tensor.validate::<A, D>(true) {
                Ok(valid) => self.views = Views::Mut(valid.into_raw_view_mut()),
                Err(err) => {
                    // Unchanged: still shared.
                    self.tensor.mark_shared();
                    return Err(err);
                }
            }
        }
        match &self.views {
            Views::Mut(..) => Ok(()),
            Views::Const(_, why) => Err(why.error()),
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        match &self.views {
            Views::Mut(raw) => raw.shape(),
            Views::Const(raw, _) => raw.shape(),
        }
    }

    /// The tensor.
    pub fn tensor(&self) -> &ManagedTensor {
        &self.tensor
    }

    /// Gives back the tensor.
    pub fn into_inner(self) -> ManagedTensor {
        self.tensor
    }

    /// An owned `Array`: our own `Array` export comes back without a copy; anything
    /// else is copied into standard layout.
    ///
    /// # Errors
    ///
    /// [`Error::AllocationFailed`] when the copy cannot be allocated (a broadcast
    /// tensor can describe far more elements than memory holds); the tensor is dropped.
    pub fn into_owned(self) -> Result<Array<A, D>> {
        let raw = self.raw_view();
        match reclaim::<A, D>(self.tensor) {
            Ok(array) => Ok(array),
            Err(tensor) => {
                // SAFETY: `raw` still describes `tensor`'s memory, alive until it drops
                // below, after the copy.
                let view = unsafe { raw.deref_into_view() };
                let owned = copy_standard(view);
                drop(tensor);
                owned
            }
        }
    }
}

impl<A: Element + fmt::Debug, D: Dimension + 'static> fmt::Debug for DLPackArray<A, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DLPackArray")
            .field("array", &self.view())
            .field("tensor", &self.tensor)
            .finish()
    }
}

impl<A: Element, D: Dimension + 'static> TryFrom<ManagedTensor> for DLPackArray<A, D> {
    type Error = Error;
    fn try_from(tensor: ManagedTensor) -> Result<Self> {
        Self::new(tensor)
    }
}

to_one_tensor! {
    /// The tensor it holds.
    impl[A: Element, D: Dimension + 'static] for DLPackArray<A, D> { |array| Ok(array.into_inner()) }
}

from_one_tensor! {
    /// Zero-copy: validates and keeps the tensor.
    impl[A: Element, D: Dimension + 'static] for DLPackArray<A, D> { |tensor| Self::new(tensor) }
}
