//! What a value takes from a source of named tensors, known before any tensor is read:
//! [`FromDLPack::select_in`] walks a type as `from_dlpack_in` would walk a batch, over
//! the names alone, so that a reader (a sharded checkpoint) reads only those tensors
//! and checks their dtype and rank first.

use std::collections::{BTreeMap, BTreeSet};

use crate::batch::is_under;
use crate::dtype::DataType;

/// What a value expects of one tensor it takes: its dtype and rank where its type fixes
/// them (an `Array2<f32>` field: `float32`, 2), `None` where anything goes (a
/// [`ManagedTensor`](crate::ManagedTensor) field, or `IxDyn`), and the dimension it is
/// split along between the ranks of a tensor-parallel group, if it is (a field with
/// `#[dlpack(split = D)]`: see [`Selection::split_along`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Expected {
    /// The element type, if the type fixes it.
    pub dtype: Option<DataType>,
    /// The number of dimensions, if the type fixes it.
    pub ndim: Option<usize>,
    /// The dimension the tensor is split along between the ranks of a tensor-parallel
    /// group, each rank taking an equal part (PyTorch's `torch.chunk(full, world_size,
    /// dim)[rank]`); `None` when every rank takes it whole (replicated).
    pub split: Option<usize>,
}

impl Expected {
    /// Any dtype, any rank.
    pub const ANY: Self = Self {
        dtype: None,
        ndim: None,
        split: None,
    };

    /// A tensor of `dtype` (if given) and `ndim` dimensions (if given).
    pub const fn new(dtype: Option<DataType>, ndim: Option<usize>) -> Self {
        Self {
            dtype,
            ndim,
            split: None,
        }
    }

    /// The same, split along dimension `dim` between the ranks of a tensor-parallel
    /// group.
    ///
    /// ```
    /// use dlpack_core::DataType;
    /// use dlpack_core::implement::Expected;
    ///
    /// let expected = Expected::new(Some(DataType::F32), Some(2)).split_along(1);
    /// assert_eq!(expected.split, Some(1));
    /// ```
    #[must_use]
    pub const fn split_along(mut self, dim: usize) -> Self {
        self.split = Some(dim);
        self
    }
}

/// The names of the tensors a value takes from a source, collected by
/// [`FromDLPack::select_in`] over the names the source holds (nothing is read), with
/// what the value expects of each, and the names it needs that the source lacks.
///
/// The names mirror what `from_dlpack_in` takes from a batch holding those names: a
/// field `prefix.name`, `Vec` items `prefix.0`, `prefix.1`, ... up to the first index
/// with no tensor, an `Option` only when some tensor is named `prefix` or `prefix.*`,
/// map entries by the segments after `prefix.`. As `from_dlpack_in` removes what it
/// takes from the batch, a name once taken is no longer among the names a later
/// question sees, and taking it again finds it missing.
///
/// [`FromDLPack::select_in`]: crate::FromDLPack::select_in
#[derive(Debug)]
pub struct Selection<'a> {
    /// The names the source holds.
    names: &'a BTreeSet<String>,
    /// The names taken, in the order they were taken, with what is expected of each.
    taken: Vec<(String, Expected)>,
    /// The index of each name in `taken`.
    seen: BTreeMap<String, usize>,
    /// Names taken that the source lacks.
    missing: Vec<String>,
    /// The dimension the tensors taken now are split along (inside
    /// [`split_along`](Self::split_along)).
    split: Option<usize>,
    /// Containers that took no items: full name, kind.
    empty: Vec<(String, &'static str)>,
}

impl<'a> Selection<'a> {
    /// An empty selection over the names a source holds.
    pub fn new(names: &'a BTreeSet<String>) -> Self {
        Self {
            names,
            taken: Vec::new(),
            seen: BTreeMap::new(),
            missing: Vec::new(),
            split: None,
            empty: Vec::new(),
        }
    }

    /// Whether the source holds a tensor named `name` that nothing took yet.
    pub fn contains(&self, name: &str) -> bool {
        self.names.contains(name) && !self.seen.contains_key(name)
    }

    /// Whether the source holds a tensor named `prefix` or `prefix.*` (any tensor for
    /// an empty prefix) that nothing took yet, as
    /// [`TensorBatch::contains_prefix`](crate::TensorBatch::contains_prefix) asks a
    /// batch.
    pub fn contains_prefix(&self, prefix: &str) -> bool {
        self.under(prefix).next().is_some()
    }

    /// The names the source holds that are `prefix` or start with `prefix.` (every
    /// name for an empty prefix) and that nothing took yet, in sorted order.
    pub fn under<'s>(&'s self, prefix: &'s str) -> impl Iterator<Item = &'a str> + 's {
        let names: &'a BTreeSet<String> = self.names;
        names
            .range::<str, _>((
                core::ops::Bound::Included(prefix),
                core::ops::Bound::Unbounded,
            ))
            .map(String::as_str)
            .take_while(move |name| name.starts_with(prefix))
            .filter(move |name| prefix.is_empty() || *name == prefix || is_under(name, prefix))
            .filter(move |name| !self.seen.contains_key(*name))
    }

    /// The distinct first segments of the names under `prefix.` (of every name for an
    /// empty prefix), sorted: the keys of a map stored under `prefix`.
    pub fn keys_under(&self, prefix: &str) -> BTreeSet<String> {
        self.under(prefix)
            .filter(|name| *name != prefix)
            .map(|name| {
                let rest = if prefix.is_empty() {
                    name
                } else {
                    &name[prefix.len() + 1..]
                };
                rest.split('.').next().unwrap_or(rest).to_owned()
            })
            .collect()
    }

    /// Runs `select` (a field's `select_in`) with every tensor it takes split along
    /// dimension `dim` between the ranks of a tensor-parallel group, unless what it
    /// takes says otherwise (its own [`Expected::split`], or a `split_along` inside):
    /// what a field with `#[dlpack(split = D)]` selects.
    ///
    /// ```
    /// use std::collections::BTreeSet;
    ///
    /// use dlpack_core::implement::{Expected, Selection};
    ///
    /// let names: BTreeSet<String> = ["q.weight", "o.weight"].map(String::from).into();
    /// let mut selection = Selection::new(&names);
    /// selection.split_along(0, |s| s.take("q.weight", Expected::ANY));
    /// selection.take("o.weight", Expected::ANY);
    /// assert_eq!(selection.taken()[0].1.split, Some(0));
    /// assert_eq!(selection.taken()[1].1.split, None);
    /// ```
    pub fn split_along(&mut self, dim: usize, select: impl FnOnce(&mut Self)) {
        let outer = self.split.replace(dim);
        select(self);
        self.split = outer;
    }

    /// Takes the tensor named `name`, expected to be as `expected` says (split along
    /// the dimension of an enclosing [`split_along`](Self::split_along) if `expected`
    /// does not say); a name the source lacks, or one already taken, is recorded as
    /// missing (as `from_dlpack_in` finds it missing from the batch).
    pub fn take(&mut self, name: &str, expected: Expected) {
        let expected = Expected {
            split: expected.split.or(self.split),
            ..expected
        };
        if !self.contains(name) {
            if !self.missing.iter().any(|m| m == name) {
                self.missing.push(name.to_owned());
            }
            return;
        }
        self.seen.insert(name.to_owned(), self.taken.len());
        self.taken.push((name.to_owned(), expected));
    }

    /// Takes every tensor named `prefix` or `prefix.*` that nothing took yet,
    /// expecting nothing of them: what a type takes when it does not say more (a
    /// `with` module's field).
    pub fn take_under(&mut self, prefix: &str) {
        let names: Vec<&str> = self.under(prefix).collect();
        for name in names {
            self.take(name, Expected::ANY);
        }
    }

    /// The names taken, in order, with what is expected of each.
    pub fn taken(&self) -> &[(String, Expected)] {
        &self.taken
    }

    /// The names taken that the source lacks, in order.
    pub fn missing(&self) -> &[String] {
        &self.missing
    }

    /// Whether `name` was taken.
    pub fn is_taken(&self, name: &str) -> bool {
        self.seen.contains_key(name)
    }

    /// Records that the container at `prefix` (`kind`: `"Vec"` or `"map"`) takes no
    /// items, so that a load can say so when names beside it that nothing takes look
    /// like its items (a misnamed field; see
    /// [`LoadReport::empty`](crate::LoadReport::empty)).
    pub fn took_none(&mut self, prefix: &str, kind: &'static str) {
        self.empty.push((prefix.to_owned(), kind));
    }

    /// The containers recorded by [`took_none`](Self::took_none), in order: full name,
    /// kind.
    pub fn empty_containers(&self) -> &[(String, &'static str)] {
        &self.empty
    }
}
