//! [`ObjectSlot`]: where a [`Parameter`](super::Parameter) keeps its Python object
//! (feature `pyo3`), made by the first read from Python and returned by every later one,
//! as `nn.Module` returns the same `Parameter`. Without Python there is nothing to keep.

#[cfg(feature = "pyo3")]
pub(super) use with_python::ObjectSlot;
#[cfg(not(feature = "pyo3"))]
pub(super) use without_python::ObjectSlot;

#[cfg(feature = "pyo3")]
mod with_python {
    use std::sync::{Mutex, MutexGuard, PoisonError};

    use pyo3::prelude::*;

    use crate::interpreter::{if_attached, release_object};

    /// The object, and how to tell that nothing but the slot holds it.
    struct Kept(Option<Py<PyAny>>, fn(&Bound<'_, PyAny>) -> bool);

    impl Kept {
        fn object(&self) -> &Py<PyAny> {
            // (Taken only by `drop`.)
            self.0.as_ref().expect("a kept object until dropped")
        }
    }

    impl Drop for Kept {
        /// On any thread, never waiting for the GIL where PyO3 can defer the release
        /// ([`release_object`]).
        fn drop(&mut self) {
            if let Some(object) = self.0.take() {
                release_object(object);
            }
        }
    }

    /// The Python object of one field, kept beside the field: made once, returned again
    /// until Rust writes or replaces the field. What lets it go is what makes the field
    /// copy-on-write: the field's `&mut` access (`view_mut`) clears it first, so that the
    /// write then copies exactly when Python still holds the object (or anything made
    /// from it), and a replaced field is a new value with an empty slot.
    ///
    /// The object (a `Tensor` of a share of the field) holds the field's buffer, never
    /// the model: the model holds it, nothing in it refers back, so it makes no
    /// reference cycle and goes with the model.
    ///
    /// The lock guards the slot for threads that read one model at once (on a
    /// free-threaded build PyO3 lets shared borrows run together). It is held only to
    /// look at the slot, to clone the reference in it, or to put one in or take it out:
    /// never while Python code runs or an object is made or freed, and never while
    /// attaching to the interpreter (a thread attaches first, then takes the lock).
    pub(in crate::bridge::ndarray) struct ObjectSlot(Mutex<Option<Kept>>);

    impl ObjectSlot {
        /// An empty slot.
        pub(in crate::bridge::ndarray) const fn new() -> Self {
            Self(Mutex::new(None))
        }

        fn lock(&self) -> MutexGuard<'_, Option<Kept>> {
            // Nothing panics while holding the lock; a poisoned slot is valid anyway.
            self.0.lock().unwrap_or_else(PoisonError::into_inner)
        }

        /// The kept object, or `make()`'s, which is kept from then on. `unused` tells
        /// whether nothing but the slot's own reference holds such an object (see
        /// [`release_unused`](Self::release_unused)).
        pub(in crate::bridge::ndarray) fn get_or_make(
            &self,
            py: Python<'_>,
            make: impl FnOnce() -> PyResult<Py<PyAny>>,
            unused: fn(&Bound<'_, PyAny>) -> bool,
        ) -> PyResult<Py<PyAny>> {
            if let Some(kept) = &*self.lock() {
                return Ok(kept.object().clone_ref(py));
            }
            let made = make()?;
            // Another thread may have put its own object in meanwhile: every reader gets
            // that one, and this one goes once the lock is released.
            let (object, spare) = {
                let mut slot = self.lock();
                match &*slot {
                    Some(kept) => (kept.object().clone_ref(py), Some(made)),
                    None => {
                        *slot = Some(Kept(Some(made.clone_ref(py)), unused));
                        (made, None)
                    }
                }
            };
            if let Some(spare) = spare {
                release_object(spare);
            }
            Ok(object)
        }

        /// Lets the object go (the field is about to be written): the next read makes a
        /// new one. Attached to the interpreter, it goes now, and with it its hold on
        /// the buffer unless Python holds it; else PyO3 releases it at the next attach
        /// ([`release_object`]), so that a write made outside the interpreter copies
        /// once where one made inside would not.
        pub(in crate::bridge::ndarray) fn clear(&mut self) {
            let taken = self
                .0
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            drop(taken);
        }

        /// Lets the object go when nothing but the slot holds it (no Python reference,
        /// no capsule or array made from it): nothing can tell, since no one else can
        /// reach it to compare, and the buffer then loses a holder that only the slot
        /// kept. Looks only on a thread attached to the interpreter: it never attaches
        /// (which would wait for the GIL, and deadlock where the GIL's holder waits
        /// for a lock this thread holds); elsewhere the object stays, and counts as a
        /// holder.
        pub(in crate::bridge::ndarray) fn release_unused(&self) {
            if self.lock().is_none() {
                return;
            }
            // Attached before the lock is taken, never the other way around.
            let _ = if_attached(|py| {
                let unused = {
                    let mut slot = self.lock();
                    match &*slot {
                        Some(kept) if (kept.1)(kept.object().bind(py)) => slot.take(),
                        _ => None,
                    }
                };
                drop(unused);
            });
        }
    }
}

#[cfg(not(feature = "pyo3"))]
mod without_python {
    /// Nothing to keep without Python.
    pub(in crate::bridge::ndarray) struct ObjectSlot;

    impl ObjectSlot {
        pub(in crate::bridge::ndarray) const fn new() -> Self {
            Self
        }
        pub(in crate::bridge::ndarray) fn clear(&mut self) {}
        pub(in crate::bridge::ndarray) fn release_unused(&self) {}
    }
}
