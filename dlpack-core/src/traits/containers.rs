//! [`ToDLPack`]/[`FromDLPack`] for the values that hold tensors: a tensor itself, a batch,
//! and the containers that nest with PyTorch `state_dict` names. `Option<T>` contributes
//! nothing when `None`, `Vec<T>` names its items `0`, `1`, ..., and
//! `BTreeMap<String, T>` / `HashMap<String, T>` name entries by key (keys must be
//! non-empty and free of `.`; a `HashMap` exports in sorted key order so names are
//! deterministic).
//!
//! A container imports every item it can and reports every problem at once (see
//! `Problems`), so that a strict import names every missing and mismatched tensor.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasher;

use crate::batch::{TensorBatch, is_under};
use crate::error::{Error, Result};
use crate::tensor::ManagedTensor;

use super::load::{EmptyContainer, LoadReport, Problems};
use super::names::{IndexFormatter, join_name};
use super::select::{Expected, Selection};
use super::{FromDLPack, ToDLPack, batch_of, leaf_from, strict_from};

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
    fn select_in(prefix: &str, selection: &mut Selection<'_>) {
        selection.take(prefix, Expected::ANY);
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
    /// Every tensor named `prefix.*` (everything for an empty prefix).
    fn select_in(prefix: &str, selection: &mut Selection<'_>) {
        let names: Vec<String> = selection
            .under(prefix)
            .filter(|name| prefix.is_empty() || *name != prefix)
            .map(str::to_owned)
            .collect();
        for name in names {
            selection.take(&name, Expected::ANY);
        }
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
    fn select_in(prefix: &str, selection: &mut Selection<'_>) {
        if selection.contains_prefix(prefix) {
            T::select_in(prefix, selection);
        }
    }
    /// `Some` loads in place; `None` becomes `Some` when the batch has tensors for it.
    /// Nothing is missing either way: the value is optional.
    fn load_dlpack_in(
        &mut self,
        prefix: &str,
        batch: &mut TensorBatch,
        report: &mut LoadReport,
    ) -> Result<()> {
        match self {
            Some(value) => value.load_dlpack_in(prefix, batch, report),
            None => {
                *self = Self::from_dlpack_in(prefix, batch)?;
                Ok(())
            }
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
    /// Items `prefix.0`, `prefix.1`, ... up to the first index with no tensor; the
    /// problems of every item are reported together.
    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        let mut items = Vec::new();
        let mut problems = Problems::default();
        let mut index = IndexFormatter::default();
        for i in 0.. {
            let name = join_name(prefix, index.format(i));
            if !batch.contains_prefix(&name) {
                break;
            }
            if let Some(item) = problems.field(T::from_dlpack_in(&name, batch)) {
                items.push(item);
            }
        }
        problems.finish()?;
        Ok(items)
    }
    fn select_in(prefix: &str, selection: &mut Selection<'_>) {
        let mut index = IndexFormatter::default();
        for i in 0.. {
            let name = join_name(prefix, index.format(i));
            if !selection.contains_prefix(&name) {
                if i == 0 {
                    selection.took_none(prefix, "Vec");
                }
                break;
            }
            T::select_in(&name, selection);
        }
    }
    /// Loads every existing item in place; tensors of further items are left in the
    /// batch (unexpected). An empty `Vec` takes nothing (and is in the report's
    /// [`empty`](LoadReport::empty) when unexpected names look like its items).
    fn load_dlpack_in(
        &mut self,
        prefix: &str,
        batch: &mut TensorBatch,
        report: &mut LoadReport,
    ) -> Result<()> {
        if self.is_empty() {
            report.empty.push(EmptyContainer {
                name: prefix.to_owned(),
                kind: "Vec",
                like: Vec::new(),
            });
        }
        let mut problems = Problems::default();
        let mut index = IndexFormatter::default();
        for (i, item) in self.iter_mut().enumerate() {
            let name = join_name(prefix, index.format(i));
            problems.check(item.load_dlpack_in(&name, batch, report));
        }
        problems.finish()
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
    /// One entry per distinct name segment after `prefix.`; the problems of every entry
    /// are reported together.
    fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Self> {
        let mut map = BTreeMap::new();
        let mut problems = Problems::default();
        for key in keys_under(prefix, batch) {
            if let Some(value) = problems.field(T::from_dlpack_in(&join_name(prefix, &key), batch))
            {
                map.insert(key, value);
            }
        }
        problems.finish()?;
        Ok(map)
    }
    fn select_in(prefix: &str, selection: &mut Selection<'_>) {
        let keys = selection.keys_under(prefix);
        if keys.is_empty() {
            selection.took_none(prefix, "map");
        }
        for key in keys {
            T::select_in(&join_name(prefix, &key), selection);
        }
    }
    /// Loads every existing entry in place; tensors of other keys are left in the batch
    /// (unexpected).
    fn load_dlpack_in(
        &mut self,
        prefix: &str,
        batch: &mut TensorBatch,
        report: &mut LoadReport,
    ) -> Result<()> {
        load_entries(self.iter_mut(), prefix, batch, report)
    }
}

/// Loads map entries in place, reporting the problems of all of them together.
fn load_entries<'a, T: FromDLPack + 'a>(
    entries: impl Iterator<Item = (&'a String, &'a mut T)>,
    prefix: &str,
    batch: &mut TensorBatch,
    report: &mut LoadReport,
) -> Result<()> {
    let mut problems = Problems::default();
    let mut none = true;
    for (key, value) in entries {
        none = false;
        problems.check(value.load_dlpack_in(&join_name(prefix, key), batch, report));
    }
    if none {
        report.empty.push(EmptyContainer {
            name: prefix.to_owned(),
            kind: "map",
            like: Vec::new(),
        });
    }
    problems.finish()
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
    fn select_in(prefix: &str, selection: &mut Selection<'_>) {
        BTreeMap::<String, T>::select_in(prefix, selection);
    }
    fn load_dlpack_in(
        &mut self,
        prefix: &str,
        batch: &mut TensorBatch,
        report: &mut LoadReport,
    ) -> Result<()> {
        load_entries(self.iter_mut(), prefix, batch, report)
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
    fn select_in(prefix: &str, selection: &mut Selection<'_>) {
        T::select_in(prefix, selection);
    }
    fn load_dlpack_in(
        &mut self,
        prefix: &str,
        batch: &mut TensorBatch,
        report: &mut LoadReport,
    ) -> Result<()> {
        (**self).load_dlpack_in(prefix, batch, report)
    }
}
