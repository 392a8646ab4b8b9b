//! Items that derived code and exported macros call. Not public API: no stability
//! guarantees.

pub use core::default::Default;
pub use core::option::Option::{self, None, Some};
pub use core::result::Result::{Err, Ok};
pub use std::string::String;

pub use crate::batch::TensorBatch;
pub use crate::error::Result;
pub use crate::traits::{
    Found, FromDLPack, LoadReport, Problems, Selection, TensorField, TensorFieldsOf, ToDLPack,
    join_name, push_segment, split_path,
};

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

/// Loads a field exchanged by a `with` module: replaced by `from_dlpack_in` when the
/// batch has tensors for it, reported missing otherwise.
pub fn load_with_module<T>(
    value: &mut T,
    prefix: &str,
    batch: &mut TensorBatch,
    report: &mut LoadReport,
    from_dlpack_in: fn(&str, &mut TensorBatch) -> Result<T>,
) -> Result<()> {
    if !batch.contains_prefix(prefix) {
        report.missing.push(prefix.into());
        return Ok(());
    }
    *value = from_dlpack_in(prefix, batch)?;
    Ok(())
}

/// Stands for a field exchanged through a `with` module in the bounds of a derived
/// `TensorFieldsOf`, which it never satisfies: such a struct has no `TensorFields`.
pub struct ExchangedWithModule<M: ?Sized>(core::marker::PhantomData<M>);
