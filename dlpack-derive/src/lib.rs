//! `#[derive(ToDLPack, FromDLPack)]` and `#[pymodel]`; use them through `dlpack-core`'s
//! `derive` feature (and `pyo3` for `#[pymodel]`).
//!
//! The pipeline: `ast` borrows the input and reads its `#[dlpack(...)]` attributes
//! (`attr`), `valid` checks them against each other, then `to_dlpack` (with the
//! `TensorFields` impl of `tensor_fields`) and `from_dlpack` generate the impls, with
//! where-clauses from `bound`, inside the anonymous `const` of `dummy`. Errors are
//! collected in `ctxt`, so that all errors of one input are reported at once.
#![forbid(unsafe_code)]

mod ast;
mod attr;
mod bound;
mod ctxt;
mod dummy;
mod from_dlpack;
mod pymodel;
mod tensor_fields;
mod to_dlpack;
mod valid;

#[cfg(test)]
mod expand_tests;

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

/// Derives `dlpack_core::ToDLPack`.
#[proc_macro_derive(ToDLPack, attributes(dlpack))]
pub fn derive_to_dlpack(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    to_dlpack::derive(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Derives `dlpack_core::FromDLPack`.
#[proc_macro_derive(FromDLPack, attributes(dlpack))]
pub fn derive_from_dlpack(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    from_dlpack::derive(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// `#[pymodel]` on the `#[pymethods]` block of a model class: see `dlpack_core::pymodel`.
#[proc_macro_attribute]
pub fn pymodel(args: TokenStream, input: TokenStream) -> TokenStream {
    pymodel::expand(args.into(), input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
