//! `#[derive(ToDLPack, FromDLPack)]`; use it through `dlpack-core`'s `derive` feature.
#![forbid(unsafe_code)]

use proc_macro::TokenStream;

/// Derives `dlpack_core::ToDLPack`.
#[proc_macro_derive(ToDLPack, attributes(dlpack))]
pub fn derive_to_dlpack(_input: TokenStream) -> TokenStream {
    TokenStream::new()
}

/// Derives `dlpack_core::FromDLPack`.
#[proc_macro_derive(FromDLPack, attributes(dlpack))]
pub fn derive_from_dlpack(_input: TokenStream) -> TokenStream {
    TokenStream::new()
}
