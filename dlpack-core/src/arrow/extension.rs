//! The canonical `arrow.fixed_shape_tensor` extension: its metadata read (both key
//! spellings in use, nulls as absent) and written (the specification's form), and the
//! strides its `permutation` gives.

use std::collections::HashMap;

use arrow_schema::Field;
use serde_json::{Map, Value, json};

use crate::error::{ArrowErrorKind, Error, Result};

/// The extension's name, under the field metadata key [`EXTENSION_NAME_KEY`].
pub const FIXED_SHAPE_TENSOR: &str = "arrow.fixed_shape_tensor";
/// The field metadata key of an extension type's name.
pub const EXTENSION_NAME_KEY: &str = "ARROW:extension:name";
/// The field metadata key of an extension type's serialized metadata.
pub const EXTENSION_METADATA_KEY: &str = "ARROW:extension:metadata";

/// The metadata of an `arrow.fixed_shape_tensor` column: each row is a tensor of
/// `shape`, stored as a fixed-size list of `shape`'s product elements.
///
/// `permutation` is the order of the logical axes in memory (`None`: as listed, row
/// major); `dim_names` names the axes. Read from either spelling in use
/// (`permutation`, the specification's and Arrow C++'s; `permutations`, which
/// arrow-rs 60 writes), with JSON nulls taken as absent; written in the specification's
/// form, nulls left out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedShapeTensor {
    /// The shape of one row's tensor.
    pub shape: Vec<usize>,
    /// The names of its axes, if any.
    pub dim_names: Option<Vec<String>>,
    /// The physical order of its axes, if not row major.
    pub permutation: Option<Vec<usize>>,
}

fn metadata_error(column: &str, reason: String) -> Error {
    Error::Arrow {
        column: column.to_owned(),
        kind: ArrowErrorKind::Metadata,
        reason,
    }
}

impl FixedShapeTensor {
    /// The extension of `field`: `None` when its metadata names no extension or
    /// another one; an error when it names this one and its metadata cannot be read or
    /// contradicts itself (a permutation that is not one of the axes, names of another
    /// number of axes).
    pub fn from_field(field: &Field) -> Result<Option<Self>> {
        let metadata = field.metadata();
        if metadata.get(EXTENSION_NAME_KEY).map(String::as_str) != Some(FIXED_SHAPE_TENSOR) {
            return Ok(None);
        }
        let text = metadata
            .get(EXTENSION_METADATA_KEY)
            .map_or("", String::as_str);
        Self::parse(field.name(), text).map(Some)
    }

    /// Reads the extension's serialized metadata (JSON).
    fn parse(column: &str, text: &str) -> Result<Self> {
        let bad =
            |reason: String| metadata_error(column, format!("{FIXED_SHAPE_TENSOR}: {reason}"));
        let value: Value =
            serde_json::from_str(text).map_err(|e| bad(format!("metadata is not JSON ({e})")))?;
        let Value::Object(object) = value else {
            return Err(bad("metadata is not a JSON object".to_owned()));
        };
        let present = |key: &str| object.get(key).filter(|v| !v.is_null());
        let numbers = |key: &str, value: &Value| -> Result<Vec<usize>> {
            let items = value
                .as_array()
                .ok_or_else(|| bad(format!("`{key}` is not a list")))?;
            items
                .iter()
                .map(|item| {
                    item.as_u64()
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or_else(|| bad(format!("`{key}` holds {item}, not a size")))
                })
                .collect()
        };
        let shape = numbers(
            "shape",
            present("shape").ok_or_else(|| bad("no `shape`".to_owned()))?,
        )?;
        let permutation = match (present("permutation"), present("permutations")) {
            (Some(p), _) => Some(numbers("permutation", p)?),
            (None, Some(p)) => Some(numbers("permutations", p)?),
            (None, None) => None,
        };
        let dim_names = match present("dim_names") {
            None => None,
            Some(value) => {
                let items = value
                    .as_array()
                    .ok_or_else(|| bad("`dim_names` is not a list".to_owned()))?;
                Some(
                    items
                        .iter()
                        .map(|item| {
                            item.as_str()
                                .map(str::to_owned)
                                .ok_or_else(|| bad(format!("`dim_names` holds {item}, not a name")))
                        })
                        .collect::<Result<Vec<_>>>()?,
                )
            }
        };
        let this = Self {
            shape,
            dim_names,
            permutation,
        };
        this.check(column)?;
        Ok(this)
    }

    /// Checks that the permutation is one of the axes and that the names count them.
    pub(crate) fn check(&self, column: &str) -> Result<()> {
        let ndim = self.shape.len();
        if let Some(permutation) = &self.permutation {
            let mut seen = vec![false; ndim];
            let valid = permutation.len() == ndim
                && permutation
                    .iter()
                    .all(|&axis| axis < ndim && !std::mem::replace(&mut seen[axis], true));
            if !valid {
                return Err(metadata_error(
                    column,
                    format!(
                        "{FIXED_SHAPE_TENSOR}: permutation {permutation:?} is not an order of \
                         the {ndim} axes of shape {:?}",
                        self.shape
                    ),
                ));
            }
        }
        if let Some(names) = &self.dim_names {
            if names.len() != ndim {
                return Err(metadata_error(
                    column,
                    format!(
                        "{FIXED_SHAPE_TENSOR}: {} dim_names for the {ndim} axes of shape {:?}",
                        names.len(),
                        self.shape
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The number of elements of one row's tensor, or `None` on overflow.
    pub(crate) fn cell_len(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// The serialized metadata, in the specification's form (`permutation`, no nulls).
    pub fn to_json(&self) -> String {
        let mut object = Map::new();
        object.insert("shape".to_owned(), json!(self.shape));
        if let Some(names) = &self.dim_names {
            object.insert("dim_names".to_owned(), json!(names));
        }
        if let Some(permutation) = &self.permutation {
            object.insert("permutation".to_owned(), json!(permutation));
        }
        Value::Object(object).to_string()
    }

    /// The field metadata that marks a column as this extension.
    pub fn field_metadata(&self) -> HashMap<String, String> {
        HashMap::from([
            (EXTENSION_NAME_KEY.to_owned(), FIXED_SHAPE_TENSOR.to_owned()),
            (EXTENSION_METADATA_KEY.to_owned(), self.to_json()),
        ])
    }

    /// The strides, in elements, of a column of these tensors stored row after row:
    /// the row's axis first (one whole cell), then each axis of the cell as the
    /// permutation lays it out.
    pub(crate) fn strides(&self) -> Option<Vec<i64>> {
        let ndim = self.shape.len();
        let order: Vec<usize> = match &self.permutation {
            Some(p) => p.clone(),
            None => (0..ndim).collect(),
        };
        let mut strides = vec![0i64; ndim + 1];
        let mut step: i64 = 1;
        // The physical axes, innermost last: `order[k]` is the logical axis stored k-th.
        for &axis in order.iter().rev() {
            strides[axis + 1] = step;
            step = step.checked_mul(i64::try_from(self.shape[axis]).ok()?)?;
        }
        strides[0] = step;
        Some(strides)
    }

    /// The permutation that strides of a tensor `[rows, cell...]` describe, when its rows
    /// are whole cells laid one after the other and each cell holds its elements
    /// densely in some order of its axes: `Some(None)` for row-major cells,
    /// `Some(Some(p))` for another order, `None` when the strides are no such layout.
    pub(crate) fn permutation_of(shape: &[i64], strides: &[i64]) -> Option<Option<Vec<usize>>> {
        if shape.contains(&0) {
            // No element: any strides describe it, as row-major ones do.
            return Some(None);
        }
        let cell = &shape[1..];
        let cell_strides = &strides[1..];
        // Axes of extent 1 take any stride: sort by stride, then extent-1 axes last in
        // their logical order, so a row-major layout is recognised whatever they hold.
        let mut order: Vec<usize> = (0..cell.len()).collect();
        order.sort_by_key(|&axis| {
            if cell[axis] == 1 {
                (0, axis)
            } else {
                (1, usize::MAX - cell_strides[axis] as usize)
            }
        });
        let (ones, mut rest): (Vec<usize>, Vec<usize>) =
            order.into_iter().partition(|&axis| cell[axis] == 1);
        // Put extent-1 axes where row-major order would have them: merge by position.
        let mut physical = Vec::with_capacity(cell.len());
        let mut ones = ones.into_iter().peekable();
        for axis in rest.drain(..) {
            while let Some(&one) = ones.peek() {
                if one < axis {
                    physical.push(one);
                    ones.next();
                } else {
                    break;
                }
            }
            physical.push(axis);
        }
        physical.extend(ones);
        let mut step: i64 = 1;
        for &axis in physical.iter().rev() {
            if cell[axis] != 1 && cell_strides[axis] != step {
                return None;
            }
            step = step.checked_mul(cell[axis])?;
        }
        if shape[0] > 1 && strides[0] != step {
            return None;
        }
        let row_major = physical.iter().enumerate().all(|(i, &axis)| i == axis);
        Some((!row_major).then_some(physical))
    }
}
