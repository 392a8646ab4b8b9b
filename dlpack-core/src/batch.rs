//! [`TensorBatch`]: named tensors, as a PyTorch `state_dict` holds them, and its
//! iterators.

use core::fmt;
use std::collections::BTreeMap;

use indexmap::IndexMap;

use crate::error::{Error, Result};
use crate::tensor::ManagedTensor;

/// An ordered collection of uniquely named [`ManagedTensor`]s.
///
/// Names follow PyTorch `state_dict` conventions: nested fields are joined by `.`
/// (`fc1.weight`), `Vec` items by index (`layers.0.bias`), map entries by key. Order is
/// insertion order. This is what `#[derive(ToDLPack)]` produces for a struct of arrays,
/// and what `#[derive(FromDLPack)]` consumes.
///
/// ```
/// use dlpack_core::{ManagedTensor, TensorBatch};
///
/// let tensor = |values: Vec<f32>| {
///     let n = values.len();
///     ManagedTensor::from_buffer(values, 0, &[n], &[1])
/// };
/// let mut batch = TensorBatch::new();
/// batch.insert("weight", tensor(vec![1.0, 2.0, 3.0, 4.0])?)?;
/// batch.insert("bias", tensor(vec![0.5, -0.5])?)?;
/// assert_eq!(batch.names().collect::<Vec<_>>(), ["weight", "bias"]);
/// assert!(batch.insert("bias", tensor(vec![0.0])?).is_err());
/// assert_eq!(batch.get("bias").map(|t| t.shape()), Some(&[2i64][..]));
/// # Ok::<(), dlpack_core::Error>(())
/// ```
///
/// # Methods that need a feature
///
/// Without its feature a method does not exist, and the compiler says only "no method
/// named ... found" (E0599):
///
/// | methods | feature |
/// |---|---|
/// | `read_safetensors`, `map_safetensors`, `map_checkpoint`, `write_safetensors`, `write_checkpoint` | `safetensors` |
/// | to and from a Python `dict` (`IntoPyObject`, `FromPyObject`) | `pyo3` |
#[derive(Default)]
pub struct TensorBatch {
    tensors: IndexMap<String, ManagedTensor>,
    metadata: BTreeMap<String, String>,
}

impl TensorBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty batch with room for `capacity` tensors.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            tensors: IndexMap::with_capacity(capacity),
            metadata: BTreeMap::new(),
        }
    }

    /// String metadata of the batch: what a safetensors file's `__metadata__` holds
    /// after `read_safetensors` or `map_safetensors`, and what `write_safetensors`
    /// writes there (feature `safetensors`). Empty unless set.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The string metadata, to change before a save.
    ///
    /// ```
    /// let mut batch = dlpack_core::TensorBatch::new();
    /// batch.metadata_mut().insert("format".into(), "pt".into());
    /// assert_eq!(batch.metadata()["format"], "pt");
    /// ```
    pub fn metadata_mut(&mut self) -> &mut BTreeMap<String, String> {
        &mut self.metadata
    }

    /// Adds a tensor under `name`.
    ///
    /// # Errors
    ///
    /// [`Error::DuplicateName`] if the name is taken and [`Error::InvalidName`] if it is
    /// empty; the rejected tensor is dropped (its deleter runs).
    pub fn insert(&mut self, name: impl Into<String>, tensor: ManagedTensor) -> Result<()> {
        let name = name.into();
        if name.is_empty() {
            return Err(Error::InvalidName {
                name,
                reason: "a tensor name must not be empty",
            });
        }
        match self.tensors.entry(name) {
            indexmap::map::Entry::Occupied(entry) => Err(Error::DuplicateName {
                name: entry.key().clone(),
            }),
            indexmap::map::Entry::Vacant(entry) => {
                entry.insert(tensor);
                Ok(())
            }
        }
    }

    /// The tensor named `name`.
    pub fn get(&self, name: &str) -> Option<&ManagedTensor> {
        self.tensors.get(name)
    }

    /// The tensor named `name`, mutably (for `as_array_mut`).
    pub fn get_mut(&mut self, name: &str) -> Option<&mut ManagedTensor> {
        self.tensors.get_mut(name)
    }

    /// Removes and returns the tensor named `name`, keeping the order of the others.
    pub fn remove(&mut self, name: &str) -> Option<ManagedTensor> {
        self.tensors.shift_remove(name)
    }

    /// Whether a tensor is named `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Whether a tensor is named `prefix` or starts with `prefix.` (any name at all
    /// for an empty prefix).
    pub fn contains_prefix(&self, prefix: &str) -> bool {
        if prefix.is_empty() {
            return !self.is_empty();
        }
        self.contains(prefix) || self.tensors.keys().any(|name| is_under(name, prefix))
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The names, in order.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.tensors.keys().map(String::as_str)
    }

    /// `(name, tensor)` pairs, in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            inner: self.tensors.iter(),
        }
    }

    /// Errors with [`Error::UnexpectedTensors`] unless the batch is empty.
    pub fn expect_empty(&self) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        Err(Error::UnexpectedTensors {
            names: self.names().map(str::to_owned).collect(),
        })
    }
}

/// Whether `name` is strictly below `prefix`, i.e. starts with `prefix.`.
pub(crate) fn is_under(name: &str, prefix: &str) -> bool {
    name.len() > prefix.len() + 1
        && name.starts_with(prefix)
        && name.as_bytes()[prefix.len()] == b'.'
}

impl fmt::Debug for TensorBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.tensors.iter()).finish()?;
        if !self.metadata.is_empty() {
            write!(f, " with metadata {:?}", self.metadata)?;
        }
        Ok(())
    }
}

/// Iterator over `(name, tensor)` pairs of a [`TensorBatch`].
#[derive(Debug)]
pub struct Iter<'a> {
    inner: indexmap::map::Iter<'a, String, ManagedTensor>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a ManagedTensor);
    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(|(k, v)| (k.as_str(), v))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl ExactSizeIterator for Iter<'_> {}

/// Owning iterator over `(name, tensor)` pairs of a [`TensorBatch`].
#[derive(Debug)]
pub struct IntoIter {
    inner: indexmap::map::IntoIter<String, ManagedTensor>,
}

impl Iterator for IntoIter {
    type Item = (String, ManagedTensor);
    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next()
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl ExactSizeIterator for IntoIter {}

impl IntoIterator for TensorBatch {
    type Item = (String, ManagedTensor);
    type IntoIter = IntoIter;
    fn into_iter(self) -> IntoIter {
        IntoIter {
            inner: self.tensors.into_iter(),
        }
    }
}

impl<'a> IntoIterator for &'a TensorBatch {
    type Item = (&'a str, &'a ManagedTensor);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl<N: Into<String>> TryFrom<Vec<(N, ManagedTensor)>> for TensorBatch {
    type Error = Error;
    /// Collects named tensors; a duplicate or empty name is an error.
    fn try_from(items: Vec<(N, ManagedTensor)>) -> Result<Self> {
        let mut batch = Self::with_capacity(items.len());
        for (name, tensor) in items {
            batch.insert(name, tensor)?;
        }
        Ok(batch)
    }
}
