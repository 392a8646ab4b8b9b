//! [`ToDLPack`] and [`FromDLPack`]: one array becomes one [`ManagedTensor`], a struct of
//! arrays a [`TensorBatch`] of named tensors.
//!
//! Containers nest with PyTorch `state_dict` names: `Option<T>` contributes nothing when
//! `None`, `Vec<T>` names its items `0`, `1`, ..., and `BTreeMap<String, T>` /
//! `HashMap<String, T>` name entries by key (keys must be non-empty and free of `.`;
//! a `HashMap` exports in sorted key order so names are deterministic).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasher;

use crate::error::{Error, Result};
use crate::tensor::ManagedTensor;
use crate::tensor_batch::{TensorBatch, is_under};

/// Export to DLPack.
///
/// Arrays export as one [`ManagedTensor`]; structs deriving `ToDLPack` export as a
/// [`TensorBatch`] whose names follow the fields.
pub trait ToDLPack: Sized {
    /// [`ManagedTensor`] for one array; [`TensorBatch`] for a struct of arrays.
    type Output;

    /// Exports `self`.
    fn to_dlpack(self) -> Result<Self::Output>;

    /// Adds this value's tensors to `batch` under `prefix`: a single tensor is named
    /// `prefix` itself, the tensors of a struct `prefix.field` (or `field` when the
    /// prefix is empty). This is how derived impls nest.
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()>;
}

/// Import from DLPack.
///
/// `from_dlpack` is strict for batches, like `load_state_dict(strict=True)`: a missing
/// name, a leftover name, or a dtype/rank mismatch is an error naming the tensor. For a
/// lenient import that leaves unknown tensors alone, use
/// [`TensorBatch::extract`].
pub trait FromDLPack: Sized {
    /// [`ManagedTensor`] for one array; [`TensorBatch`] for a struct of arrays.
    type Input;

    /// Imports from `input`.
    fn from_dlpack(input: Self::Input) -> Result<Self>;

    /// Takes this value's tensors out of `batch` from under `prefix` (see
    /// [`ToDLPack::to_dlpack_into`]), leaving other tensors in place.
    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self>;
}

/// `prefix.name`, or `name` when the prefix is empty.
pub fn join_name(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        let mut joined = String::with_capacity(prefix.len() + 1 + name.len());
        joined.push_str(prefix);
        joined.push('.');
        joined.push_str(name);
        joined
    }
}

/// Exports a value that becomes a single tensor under the name `name`.
#[cfg_attr(not(feature = "ndarray"), allow(dead_code))]
pub(crate) fn leaf_into<T>(value: T, name: &str, batch: &mut TensorBatch) -> Result<()>
where
    T: ToDLPack<Output = ManagedTensor>,
{
    let tensor = value.to_dlpack().map_err(|e| e.in_tensor(name))?;
    batch.insert(name, tensor)
}

/// Imports a value that is a single tensor named `name`.
pub(crate) fn leaf_from<T>(name: &str, batch: &mut TensorBatch) -> Result<T>
where
    T: FromDLPack<Input = ManagedTensor>,
{
    let tensor = batch.remove(name).ok_or_else(|| Error::MissingTensor {
        name: name.to_owned(),
    })?;
    T::from_dlpack(tensor).map_err(|e| e.in_tensor(name))
}

/// Exports a value into a fresh batch at the top level.
pub(crate) fn batch_of<T: ToDLPack>(value: T) -> Result<TensorBatch> {
    let mut batch = TensorBatch::new();
    value.to_dlpack_into("", &mut batch)?;
    Ok(batch)
}

/// Imports a value from a whole batch, refusing leftovers.
pub(crate) fn strict_from<T: FromDLPack>(mut batch: TensorBatch) -> Result<T> {
    let value = T::from_dlpack_in("", &mut batch)?;
    batch.expect_empty()?;
    Ok(value)
}

impl ToDLPack for ManagedTensor {
    type Output = ManagedTensor;
    fn to_dlpack(self) -> Result<ManagedTensor> {
        Ok(self)
    }
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        batch.insert(prefix, self)
    }
}

impl FromDLPack for ManagedTensor {
    type Input = ManagedTensor;
    fn from_dlpack(input: ManagedTensor) -> Result<Self> {
        Ok(input)
    }
    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        leaf_from(prefix, batch)
    }
}

impl ToDLPack for TensorBatch {
    type Output = TensorBatch;
    fn to_dlpack(self) -> Result<TensorBatch> {
        Ok(self)
    }
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        for (name, tensor) in self {
            batch.insert(join_name(prefix, &name), tensor)?;
        }
        Ok(())
    }
}

impl FromDLPack for TensorBatch {
    type Input = TensorBatch;
    fn from_dlpack(input: TensorBatch) -> Result<Self> {
        Ok(input)
    }
    /// Takes every tensor named `prefix.*` (everything for an empty prefix), with the
    /// prefix stripped.
    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        if prefix.is_empty() {
            return Ok(core::mem::take(batch));
        }
        let names: Vec<String> = batch
            .names()
            .filter(|n| is_under(n, prefix))
            .map(str::to_owned)
            .collect();
        let mut out = TensorBatch::with_capacity(names.len());
        for name in names {
            if let Some(tensor) = batch.remove(&name) {
                out.insert(&name[prefix.len() + 1..], tensor)?;
            }
        }
        Ok(out)
    }
}

impl<T: ToDLPack> ToDLPack for Option<T> {
    type Output = Option<T::Output>;
    fn to_dlpack(self) -> Result<Self::Output> {
        self.map(T::to_dlpack).transpose()
    }
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        match self {
            Some(value) => value.to_dlpack_into(prefix, batch),
            None => Ok(()),
        }
    }
}

impl<T: FromDLPack> FromDLPack for Option<T> {
    type Input = Option<T::Input>;
    fn from_dlpack(input: Self::Input) -> Result<Self> {
        input.map(T::from_dlpack).transpose()
    }
    /// `Some` when any tensor is named `prefix` or `prefix.*`.
    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        if batch.contains_prefix(prefix) {
            T::from_dlpack_in(prefix, batch).map(Some)
        } else {
            Ok(None)
        }
    }
}

impl<T: ToDLPack> ToDLPack for Vec<T> {
    type Output = TensorBatch;
    fn to_dlpack(self) -> Result<TensorBatch> {
        batch_of(self)
    }
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        let mut index = IndexFormatter::default();
        for (i, item) in self.into_iter().enumerate() {
            item.to_dlpack_into(&join_name(prefix, index.format(i)), batch)?;
        }
        Ok(())
    }
}

impl<T: FromDLPack> FromDLPack for Vec<T> {
    type Input = TensorBatch;
    fn from_dlpack(input: TensorBatch) -> Result<Self> {
        strict_from(input)
    }
    /// Items `prefix.0`, `prefix.1`, ... up to the first index with no tensor.
    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        let mut items = Vec::new();
        let mut index = IndexFormatter::default();
        loop {
            let name = join_name(prefix, index.format(items.len()));
            if !batch.contains_prefix(&name) {
                return Ok(items);
            }
            items.push(T::from_dlpack_in(&name, batch)?);
        }
    }
}

fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidName {
            name: key.to_owned(),
            reason: "a map key must not be empty",
        });
    }
    if key.contains('.') {
        return Err(Error::InvalidName {
            name: key.to_owned(),
            reason: "a map key must not contain `.`, which separates name segments",
        });
    }
    Ok(())
}

/// The distinct first segments of the names under `prefix`, sorted.
fn keys_under(prefix: &str, batch: &TensorBatch) -> BTreeSet<String> {
    batch
        .names()
        .filter_map(|name| {
            let rest = if prefix.is_empty() {
                name
            } else if is_under(name, prefix) {
                &name[prefix.len() + 1..]
            } else {
                return None;
            };
            Some(rest.split('.').next().unwrap_or(rest).to_owned())
        })
        .collect()
}

impl<T: ToDLPack> ToDLPack for BTreeMap<String, T> {
    type Output = TensorBatch;
    fn to_dlpack(self) -> Result<TensorBatch> {
        batch_of(self)
    }
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        for (key, value) in self {
            check_key(&key)?;
            value.to_dlpack_into(&join_name(prefix, &key), batch)?;
        }
        Ok(())
    }
}

impl<T: FromDLPack> FromDLPack for BTreeMap<String, T> {
    type Input = TensorBatch;
    fn from_dlpack(input: TensorBatch) -> Result<Self> {
        strict_from(input)
    }
    /// One entry per distinct name segment after `prefix.`.
    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        keys_under(prefix, batch)
            .into_iter()
            .map(|key| {
                let value = T::from_dlpack_in(&join_name(prefix, &key), batch)?;
                Ok((key, value))
            })
            .collect()
    }
}

impl<T: ToDLPack, S: BuildHasher> ToDLPack for HashMap<String, T, S> {
    type Output = TensorBatch;
    fn to_dlpack(self) -> Result<TensorBatch> {
        batch_of(self)
    }
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        let sorted: BTreeMap<String, T> = self.into_iter().collect();
        sorted.to_dlpack_into(prefix, batch)
    }
}

impl<T: FromDLPack, S: BuildHasher + Default> FromDLPack for HashMap<String, T, S> {
    type Input = TensorBatch;
    fn from_dlpack(input: TensorBatch) -> Result<Self> {
        strict_from(input)
    }
    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        let sorted = BTreeMap::<String, T>::from_dlpack_in(prefix, batch)?;
        Ok(sorted.into_iter().collect())
    }
}

impl<T: ToDLPack> ToDLPack for Box<T> {
    type Output = T::Output;
    fn to_dlpack(self) -> Result<T::Output> {
        (*self).to_dlpack()
    }
    fn to_dlpack_into(self, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        (*self).to_dlpack_into(prefix, batch)
    }
}

impl<T: FromDLPack> FromDLPack for Box<T> {
    type Input = T::Input;
    fn from_dlpack(input: T::Input) -> Result<Self> {
        T::from_dlpack(input).map(Box::new)
    }
    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        T::from_dlpack_in(prefix, batch).map(Box::new)
    }
}

/// Formats indices into one reused buffer (no allocation per index).
#[derive(Default)]
struct IndexFormatter(String);

impl IndexFormatter {
    fn format(&mut self, i: usize) -> &str {
        use core::fmt::Write;
        self.0.clear();
        let _ = write!(self.0, "{i}");
        &self.0
    }
}
