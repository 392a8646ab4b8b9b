//! The frame of the generated code: an anonymous `const` that binds the crate path once
//! as `_dlpack`, so that the impls inside reach everything through
//! `_dlpack::__private::...` and nothing depends on what the user has in scope.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::{Path, PathSegment};

/// The name under which the generated code sees `dlpack_core`.
const CRATE_ALIAS: &str = "_dlpack";
/// The module of `dlpack_core` that holds everything the generated code calls.
const PRIVATE: &str = "__private";

/// `_dlpack::__private`, for quoting.
pub(crate) fn private() -> TokenStream {
    let alias = Ident::new(CRATE_ALIAS, Span::call_site());
    let private = Ident::new(PRIVATE, Span::call_site());
    quote!(#alias::#private)
}

/// `_dlpack::__private::<name>`, spanned at `span`.
pub(crate) fn private_path(name: &str, span: Span) -> Path {
    Path {
        leading_colon: None,
        segments: [CRATE_ALIAS, PRIVATE, name]
            .into_iter()
            .map(|segment| PathSegment::from(Ident::new(segment, span)))
            .collect(),
    }
}

/// Wraps `code` in `const _: () = { use <crate path> as _dlpack; <code> };`, with
/// `::dlpack_core` unless `#[dlpack(crate = "...")]` names another path.
pub(crate) fn wrap_in_const(crate_path: Option<&Path>, code: TokenStream) -> TokenStream {
    // A given path spans the whole `use`, so that an unresolved path is reported at the
    // attribute's string rather than at the derive.
    let use_crate = match crate_path {
        Some(path) => {
            let alias = Ident::new(CRATE_ALIAS, path.span());
            quote_spanned!(path.span()=> use #path as #alias;)
        }
        None => {
            let alias = Ident::new(CRATE_ALIAS, Span::call_site());
            quote!(use ::dlpack_core as #alias;)
        }
    };
    quote! {
        #[doc(hidden)]
        const _: () = {
            #use_crate
            #code
        };
    }
}
