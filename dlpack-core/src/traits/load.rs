//! Strict imports and in-place loads that report every problem at once, as PyTorch's
//! `load_state_dict` does: [`Problems`] collects the errors of the fields and items of
//! one value, and the top-level functions add the names nobody took.

use crate::batch::{TensorBatch, is_under};
use crate::error::{Error, Result};

use super::FromDLPack;

/// What a lenient load found missing or unexpected, like PyTorch's `_IncompatibleKeys`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Tensors the value expects that the batch does not have, by name.
    pub missing: Vec<String>,
    /// Tensors of the batch that the value does not expect, by name, in batch order.
    pub unexpected: Vec<String>,
    /// The value's containers (a `Vec`, a map) that took no items while unexpected
    /// names at their level look like their items: most likely misnamed fields
    /// (`blocks` where the checkpoint says `layers`), a model that would run with no
    /// layers. Every name of theirs is in `unexpected` too. A `Vec` takes `name.0`,
    /// `name.1`, ... up to the first gap; one that takes none where nothing looks like
    /// its items is a valid empty list, and not listed here. A strict load reports
    /// each as an [`Error::EmptyContainer`].
    pub empty: Vec<EmptyContainer>,
}

impl LoadReport {
    /// Whether nothing was missing or unexpected.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.empty.is_empty()
    }
}

/// A container field that took no items while names beside it look like its items
/// (see [`LoadReport::empty`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EmptyContainer {
    /// The field's full name (`model.blocks`).
    pub name: String,
    /// What it is: `"Vec"` or `"map"`.
    pub kind: &'static str,
    /// The unexpected names at its level that look like its items
    /// (`model.layers.0.weight`, ...), in the batch's order.
    pub like: Vec<String>,
}

impl From<EmptyContainer> for Error {
    /// An [`Error::EmptyContainer`] of the same fields.
    fn from(empty: EmptyContainer) -> Self {
        Error::EmptyContainer {
            name: empty.name,
            kind: empty.kind,
            like: empty.like,
        }
    }
}

/// The containers of `empty` (full name, kind) that some of the `unexpected` names
/// look like the items of: names under the container's parent whose first segment is
/// followed by an index (for a `Vec`) or by anything (for a map).
pub(crate) fn look_alikes(
    empty: impl IntoIterator<Item = (String, &'static str)>,
    unexpected: &[String],
) -> Vec<EmptyContainer> {
    let is_index = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mut out: Vec<EmptyContainer> = Vec::new();
    for (name, kind) in empty {
        if name.is_empty() || out.iter().any(|e| e.name == name) {
            continue;
        }
        let parent = name.rsplit_once('.').map_or("", |(parent, _)| parent);
        let like: Vec<String> = unexpected
            .iter()
            .filter(|n| {
                let rest = if parent.is_empty() {
                    n.as_str()
                } else if is_under(n, parent) {
                    &n[parent.len() + 1..]
                } else {
                    return false;
                };
                let mut segments = rest.split('.').skip(1);
                match segments.next() {
                    Some(second) => kind != "Vec" || is_index(second),
                    None => false,
                }
            })
            .cloned()
            .collect();
        if !like.is_empty() {
            out.push(EmptyContainer { name, kind, like });
        }
    }
    out
}

/// The errors met while importing or loading the fields or items of one value, which
/// goes on past the first so that all are reported together.
#[derive(Debug, Default)]
pub struct Problems {
    errors: Vec<Error>,
}

impl Problems {
    /// No problems yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `result`, or `None` after recording its error.
    pub fn field<T>(&mut self, result: Result<T>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(err) => {
                self.errors.push(err);
                None
            }
        }
    }

    /// Records the error of `result`, if any.
    pub fn check(&mut self, result: Result<()>) {
        if let Err(err) = result {
            self.errors.push(err);
        }
    }

    /// `Ok` if nothing was recorded, else every problem in one error.
    pub fn finish(self) -> Result<()> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self.into_error())
        }
    }

    /// Every problem recorded, in one [`Error::StateDict`] (its lists empty if there
    /// were none).
    pub fn into_error(self) -> Error {
        merge(self.errors, Vec::new())
    }
}

/// One [`Error::StateDict`] from the errors of several fields or items (flattening the
/// ones they reported themselves) and the names nobody took.
pub(crate) fn merge(errors: Vec<Error>, unexpected: Vec<String>) -> Error {
    let mut missing = Vec::new();
    let mut unexpected_all = Vec::new();
    let mut failed = Vec::new();
    for err in errors {
        match err {
            Error::MissingTensor { name } => missing.push(name),
            Error::UnexpectedTensors { names } => unexpected_all.extend(names),
            Error::StateDict {
                missing: m,
                unexpected: u,
                failed: f,
            } => {
                missing.extend(m);
                unexpected_all.extend(u);
                failed.extend(f);
            }
            other => failed.push(other),
        }
    }
    unexpected_all.extend(unexpected);
    Error::StateDict {
        missing,
        unexpected: unexpected_all,
        failed,
    }
}

fn leftovers(batch: &TensorBatch) -> Vec<String> {
    batch.names().map(str::to_owned).collect()
}

/// Imports a value from a whole batch, refusing leftovers: every problem in one error.
pub(crate) fn strict_from<T: FromDLPack>(mut batch: TensorBatch) -> Result<T> {
    let value = T::from_dlpack_in("", &mut batch);
    match value {
        Ok(value) if batch.is_empty() => Ok(value),
        Ok(_) => Err(merge(Vec::new(), leftovers(&batch))),
        Err(err) => Err(merge(vec![err], leftovers(&batch))),
    }
}

/// Loads a whole batch into `value`: what it found missing and unexpected, and the
/// error of the tensors that did not fit, if any.
pub(crate) fn load_in<T: FromDLPack>(
    value: &mut T,
    mut batch: TensorBatch,
) -> (LoadReport, Option<Error>) {
    let mut report = LoadReport::default();
    let result = value.load_dlpack_in("", &mut batch, &mut report);
    report.unexpected = leftovers(&batch);
    let empty = core::mem::take(&mut report.empty);
    report.empty = look_alikes(
        empty.into_iter().map(|e| (e.name, e.kind)),
        &report.unexpected,
    );
    (report, result.err())
}

/// The outcome of [`load_in`]: strictly, every missing or unexpected tensor is an
/// error too, beside those that did not fit (PyTorch's `strict=True`); leniently, they
/// are the report.
pub(crate) fn finish(report: LoadReport, err: Option<Error>, lenient: bool) -> Result<LoadReport> {
    match err {
        None if lenient || report.is_empty() => Ok(report),
        Some(err) if lenient => Err(merge(vec![err], Vec::new())),
        err => {
            let mut errors: Vec<Error> = err.into_iter().collect();
            errors.extend(
                report
                    .missing
                    .into_iter()
                    .map(|name| Error::MissingTensor { name }),
            );
            errors.extend(report.empty.into_iter().map(Error::from));
            Err(merge(errors, report.unexpected))
        }
    }
}

/// [`FromDLPack::load_dlpack`].
pub(super) fn strict<T: FromDLPack>(value: &mut T, batch: TensorBatch) -> Result<()> {
    let (report, err) = load_in(value, batch);
    finish(report, err, false).map(drop)
}

/// [`FromDLPack::load_dlpack_lenient`].
pub(super) fn lenient<T: FromDLPack>(value: &mut T, batch: TensorBatch) -> Result<LoadReport> {
    let (report, err) = load_in(value, batch);
    finish(report, err, true)
}
