//! [`TensorFields`]: a value's tensors reached by reference, by their `state_dict` names,
//! without exporting the value: what a Rust model shared with Python reads (attributes,
//! `state_dict`) and replaces (setters).

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use crate::dtype::DataType;
use crate::error::Result;
use crate::tensor::ManagedTensor;

use super::names::{IndexFormatter, is_segment, parse_index, push_segment, split_path};

/// How [`TensorField::python_object`] makes a Python object of a share.
#[cfg(feature = "pyo3")]
pub(crate) type WrapShare =
    fn(pyo3::Python<'_>, ManagedTensor) -> pyo3::PyResult<pyo3::Py<pyo3::PyAny>>;

/// How [`TensorField::python_object`] tells that nothing but the field's own reference
/// holds an object that `wrap` made.
#[cfg(feature = "pyo3")]
pub(crate) type Unused = fn(&pyo3::Bound<'_, pyo3::PyAny>) -> bool;

/// What a path names inside a value ([`TensorFields::find_tensor`]).
pub enum Found<'a> {
    /// One tensor.
    Tensor(&'a dyn TensorField),
    /// A group of tensors (a struct, a `Vec`, a map, ...): the path is a prefix of
    /// tensor names (`fc1` of `fc1.weight`), or empty.
    Group,
    /// Nothing.
    Nothing,
}

/// One tensor field that Python can share: its dtype and shape, a zero-copy tensor of
/// its memory, and its replacement by another tensor.
///
/// This crate implements it for `Parameter` (feature
/// `ndarray`): see [`TensorFields`] for the sharing rule.
pub trait TensorField {
    /// The element type.
    fn dtype(&self) -> DataType;

    /// The extent of each axis.
    fn shape(&self) -> &[usize];

    /// A writable tensor of the field's memory, without a copy, that keeps the memory
    /// alive whatever happens to the field afterwards. It is *shared*
    /// ([`ManagedTensor::is_exclusive`] is false): the field still reaches the memory.
    fn share(&self) -> Result<ManagedTensor>;

    /// Replaces the field's value by `tensor`, which must have the field's dtype, rank and
    /// shape (the errors of `DLPackArray`'s checks, and
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch)). Without a copy when the
    /// tensor is a writable share of such a field (the two then share one buffer, as
    /// tied weights do), with one copy otherwise. The tensor is consumed either way.
    fn replace(&mut self, tensor: ManagedTensor) -> Result<()>;

    /// Makes the field share the buffer of `tensor` when `tensor` is a writable
    /// [`share`](Self::share) of a field of this type and shape (tied weights), and
    /// returns whether it did; nothing changes otherwise.
    fn tie(&mut self, tensor: &ManagedTensor) -> bool;

    /// The field's tensor as a Python object, for a model's attribute reads and
    /// `state_dict` (feature `pyo3`; what `dlpack_core::python::model` calls, not
    /// meant to be called elsewhere): `wrap(py, share)` makes the object of a
    /// [`share`](Self::share), by default at each call. `Parameter` keeps the object
    /// it made and returns it again until Rust writes or replaces the field (as
    /// `nn.Module` returns the same `Parameter`), and lets it go early where
    /// `unused(object)` says that nothing else holds it. Runs no Python code beyond
    /// `wrap`'s: the model is borrowed around the call.
    #[cfg(feature = "pyo3")]
    #[doc(hidden)]
    fn python_object(
        &self,
        py: pyo3::Python<'_>,
        wrap: WrapShare,
        unused: Unused,
    ) -> pyo3::PyResult<pyo3::Py<pyo3::PyAny>> {
        let _ = unused;
        wrap(py, self.share()?)
    }
}

/// A value's tensors by reference, named as [`ToDLPack`](crate::ToDLPack) names them
/// (`fc1.weight`, `layers.3.bias`): the Python model class of `#[pymodel]` (features
/// `pyo3` and `derive`) reads and replaces them through this trait.
///
/// `#[derive(ToDLPack)]` provides it for every struct whose exchanged fields all have it
/// (skipped fields are left out; a struct with a field exchanged through a `with`
/// module has none, since such a field could be neither shared nor loaded); this crate
/// provides it for `Parameter` (feature `ndarray`), `Option`,
/// `Vec`, `Box`, and maps with `String` keys (a key that is empty or holds a `.` is left
/// out, as the exchange refuses it). A recursive struct (a `Vec` of itself) has none:
/// its bounds never end. It is implemented through [`TensorFieldsOf`], which the
/// derive implements for every struct (an impl that applies only where the fields have
/// it); implement that one for a container of your own.
///
/// # Why `Parameter`
///
/// A tensor handed to Python must keep its memory alive whatever Rust does to the field
/// afterwards, and Rust must never hold a `&mut` over memory that a Python view can
/// write: a `Parameter` is both (its documentation says how). An `Array` field cannot be
/// shared: its buffer is freed with the field; nor can an `ArcArray`: its clones are
/// values that Rust code may read anywhere, which Python's writes would reach.
pub trait TensorFields {
    /// Calls `visit` with the name and the field of every tensor of the value, in the
    /// order [`ToDLPack`](crate::ToDLPack) exports them. `name` holds the prefix on
    /// entry (empty at the top level) and again on return.
    fn visit_tensors(&self, name: &mut String, visit: &mut dyn FnMut(&str, &dyn TensorField));

    /// What `path` (a name relative to the value, `""` for the value itself) names.
    fn find_tensor(&self, path: &str) -> Found<'_>;

    /// The tensor field that `path` names, for replacement.
    fn find_tensor_mut(&mut self, path: &str) -> Option<&mut dyn TensorField>;

    /// The names of a struct's own fields (renamed, not flattened nor skipped): those a
    /// Python class may make attributes of its own. Empty for anything but a struct.
    fn field_names() -> &'static [&'static str]
    where
        Self: Sized;
}

impl<T: TensorFieldsOf<()> + ?Sized> TensorFields for T {
    fn field_names() -> &'static [&'static str]
    where
        Self: Sized,
    {
        <T as TensorFieldsOf<()>>::field_names()
    }

    fn visit_tensors(&self, name: &mut String, visit: &mut dyn FnMut(&str, &dyn TensorField)) {
        TensorFieldsOf::visit_tensors(self, name, visit);
    }
    fn find_tensor(&self, path: &str) -> Found<'_> {
        TensorFieldsOf::find_tensor(self, path)
    }
    fn find_tensor_mut(&mut self, path: &str) -> Option<&mut dyn TensorField> {
        TensorFieldsOf::find_tensor_mut(self, path)
    }
}

/// What implements [`TensorFields`], with the methods of the same names: the parameter
/// `M` is only there so that a derived impl can ask it of its fields' types without
/// failing to compile where they do not have it (a bound that names no parameter would
/// be an error); implement it for every `M`, and let the fields' impls do the rest.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be shared with Python as a model's tensors",
    label = "not a `Parameter`, or a struct deriving `ToDLPack` whose fields all are",
    note = "a model shared with Python keeps its arrays as `dlpack_core::Parameter` \
            (`Parameter2<f32>`, ...): a tensor handed to Python keeps the buffer alive, \
            and Rust's writes copy it first while Python holds it (copy-on-write); a \
            struct with a field exchanged through a `with` module cannot be shared"
)]
pub trait TensorFieldsOf<M: ?Sized> {
    /// [`TensorFields::visit_tensors`].
    fn visit_tensors(&self, name: &mut String, visit: &mut dyn FnMut(&str, &dyn TensorField));

    /// [`TensorFields::find_tensor`].
    fn find_tensor(&self, path: &str) -> Found<'_>;

    /// [`TensorFields::find_tensor_mut`].
    fn find_tensor_mut(&mut self, path: &str) -> Option<&mut dyn TensorField>;

    /// [`TensorFields::field_names`]; none unless overridden.
    fn field_names() -> &'static [&'static str]
    where
        Self: Sized,
    {
        &[]
    }
}

impl<T: TensorFieldsOf<M>, M: ?Sized> TensorFieldsOf<M> for Option<T> {
    fn visit_tensors(&self, name: &mut String, visit: &mut dyn FnMut(&str, &dyn TensorField)) {
        if let Some(value) = self {
            value.visit_tensors(name, visit);
        }
    }
    fn find_tensor(&self, path: &str) -> Found<'_> {
        match self {
            Some(value) => value.find_tensor(path),
            None => Found::Nothing,
        }
    }
    fn find_tensor_mut(&mut self, path: &str) -> Option<&mut dyn TensorField> {
        self.as_mut()?.find_tensor_mut(path)
    }
}

impl<T: TensorFieldsOf<M> + ?Sized, M: ?Sized> TensorFieldsOf<M> for Box<T> {
    fn visit_tensors(&self, name: &mut String, visit: &mut dyn FnMut(&str, &dyn TensorField)) {
        (**self).visit_tensors(name, visit);
    }
    fn find_tensor(&self, path: &str) -> Found<'_> {
        (**self).find_tensor(path)
    }
    fn find_tensor_mut(&mut self, path: &str) -> Option<&mut dyn TensorField> {
        (**self).find_tensor_mut(path)
    }
}

impl<T: TensorFieldsOf<M>, M: ?Sized> TensorFieldsOf<M> for Vec<T> {
    fn visit_tensors(&self, name: &mut String, visit: &mut dyn FnMut(&str, &dyn TensorField)) {
        let mut digits = IndexFormatter::default();
        for (i, item) in self.iter().enumerate() {
            let len = push_segment(name, digits.format(i));
            item.visit_tensors(name, visit);
            name.truncate(len);
        }
    }
    fn find_tensor(&self, path: &str) -> Found<'_> {
        find_item(path, |head| self.get(parse_index(head)?))
    }
    fn find_tensor_mut(&mut self, path: &str) -> Option<&mut dyn TensorField> {
        let (head, rest) = split_path(path);
        self.get_mut(parse_index(head)?)?.find_tensor_mut(rest)
    }
}

/// What `path` names in a container whose item `item(segment)` is named by the path's
/// first segment: the container itself (a group) for an empty path.
fn find_item<'a, T: TensorFieldsOf<M> + 'a, M: ?Sized>(
    path: &str,
    item: impl FnOnce(&str) -> Option<&'a T>,
) -> Found<'a> {
    if path.is_empty() {
        return Found::Group;
    }
    let (head, rest) = split_path(path);
    match item(head) {
        Some(item) => item.find_tensor(rest),
        None => Found::Nothing,
    }
}

/// Implements [`TensorFields`] for a map with `String` keys, whose entries are named by
/// key in the order `iter` gives (sorted for the `HashMap`, as its export is).
macro_rules! map_fields {
    (impl[$($generics:tt)*] for $ty:ty { |$map:ident| $entries:expr }) => {
        impl<$($generics)*> TensorFieldsOf<M> for $ty {
            fn visit_tensors(
                &self,
                name: &mut String,
                visit: &mut dyn FnMut(&str, &dyn TensorField),
            ) {
                let $map = self;
                // A key that is no name segment is refused by the exchange too.
                for (key, item) in $entries {
                    if !is_segment(key) {
                        continue;
                    }
                    let len = push_segment(name, key);
                    item.visit_tensors(name, visit);
                    name.truncate(len);
                }
            }
            fn find_tensor(&self, path: &str) -> Found<'_> {
                find_item(path, |head| self.get(head).filter(|_| is_segment(head)))
            }
            fn find_tensor_mut(&mut self, path: &str) -> Option<&mut dyn TensorField> {
                let (head, rest) = split_path(path);
                self.get_mut(head).filter(|_| is_segment(head))?.find_tensor_mut(rest)
            }
        }
    };
}

map_fields! {
    impl[T: TensorFieldsOf<M>, M: ?Sized] for BTreeMap<String, T> { |map| map.iter() }
}

map_fields! {
    impl[T: TensorFieldsOf<M>, M: ?Sized, H: BuildHasher] for HashMap<String, T, H> {
        |map| {
            let mut entries: Vec<(&String, &T)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            entries
        }
    }
}

/// A value's tensors as a batch of shares (here, beside [`TensorFields`], so that the
/// batch knows nothing of the traits).
impl crate::batch::TensorBatch {
    /// Every tensor of `value` (a model: a struct that derives `ToDLPack` over
    /// `Parameter` fields), each a share of the field's buffer, without a copy, named
    /// and ordered as its `state_dict`: what a model's Rust method saves from `&self`,
    /// with no round trip through Python and no `Clone`
    /// (`TensorBatch::share(self)?.write_checkpoint(dir, max_shard_bytes)`). Each share
    /// keeps its buffer alive, and counts as a holder while it lives: a Rust write to
    /// the field copies first (see `Parameter`), so drop the batch once it is written.
    ///
    /// # Errors
    ///
    /// A share that cannot be made (the allocation of a `bool` field's copy), named
    /// ([`Error::Tensor`](crate::Error::Tensor)).
    #[cfg_attr(all(feature = "derive", feature = "ndarray"), doc = "```")]
    #[cfg_attr(not(all(feature = "derive", feature = "ndarray")), doc = "```ignore")]
    /// use dlpack_core::{FromDLPack, Parameter1, Parameter2, TensorBatch, ToDLPack};
    /// use ndarray::{Array1, Array2};
    ///
    /// #[derive(ToDLPack, FromDLPack)]
    /// struct Linear {
    ///     weight: Parameter2<f32>,
    ///     bias: Parameter1<f32>,
    /// }
    ///
    /// impl Linear {
    ///     fn save(&self) -> dlpack_core::Result<TensorBatch> {
    ///         // With feature `safetensors`: `.write_checkpoint(dir, 5 << 30)` on it.
    ///         TensorBatch::share(self)
    ///     }
    /// }
    ///
    /// let fc = Linear {
    ///     weight: Array2::<f32>::ones((2, 3)).into(),
    ///     bias: Array1::<f32>::zeros(2).into(),
    /// };
    /// let batch = fc.save()?;
    /// assert_eq!(batch.names().collect::<Vec<_>>(), ["weight", "bias"]);
    /// let weight = batch.get("weight").map(|t| t.data_ptr().cast::<f32>().cast_const());
    /// assert_eq!(weight, Some(fc.weight.view().as_ptr())); // the field's own buffer
    /// # Ok::<(), dlpack_core::Error>(())
    /// ```
    pub fn share<T: TensorFields + ?Sized>(value: &T) -> Result<Self> {
        let mut batch = Self::new();
        let mut failed = None;
        let mut name = String::new();
        value.visit_tensors(&mut name, &mut |name, field| {
            if failed.is_some() {
                return;
            }
            let shared = field
                .share()
                .map_err(|e| e.in_tensor(name))
                .and_then(|tensor| batch.insert(name, tensor));
            if let Err(e) = shared {
                failed = Some(e);
            }
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(batch),
        }
    }
}
