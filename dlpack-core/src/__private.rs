//! Items that derived code and exported macros call. Not public API: no stability
//! guarantees.

pub use core::default::Default;
pub use core::result::Result::{Err, Ok};
pub use std::string::String;

pub use crate::error::Result;
pub use crate::tensor_batch::TensorBatch;
pub use crate::traits::{FromDLPack, ToDLPack, join_name};

#[cfg(feature = "half")]
pub use half;
#[cfg(feature = "complex")]
pub use num_complex::Complex;

/// Exports a derived value into a fresh batch.
pub fn batch_of<T: ToDLPack>(value: T) -> Result<TensorBatch> {
    crate::traits::batch_of(value)
}

/// Imports a derived value from a whole batch, refusing leftovers.
pub fn strict_from<T: FromDLPack>(batch: TensorBatch) -> Result<T> {
    crate::traits::strict_from(batch)
}
