//! `#[derive(FromDLPack)]`: the struct imports from a `TensorBatch`, strictly at the top
//! level; each exchanged field takes its tensors from under `prefix.name` (from under
//! `prefix` itself when flattened), and each skipped field is `Default::default()`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::DeriveInput;
use syn::spanned::Spanned as _;

use crate::ast::{Derive, Input, Style};
use crate::{bound, dummy};

/// Expands `#[derive(FromDLPack)]` on `node`.
pub(crate) fn derive(node: &DeriveInput) -> syn::Result<TokenStream> {
    let input = Input::from_syn(node, Derive::FromDLPack)?;
    Ok(expand(&input))
}

fn expand(input: &Input<'_>) -> TokenStream {
    let private = dummy::private();
    let ident = input.ident;
    let generics = bound::with_bounds(input, "FromDLPack", Some("Default"));
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    // One expression per field, in declaration order (which is the order of evaluation).
    let values = input.fields.iter().map(|field| {
        let ty = field.ty;
        if field.is_skipped() {
            return quote_spanned! {ty.span()=>
                <#ty as #private::Default>::default()
            };
        }
        let prefix = field.prefix();
        quote_spanned! {ty.span()=>
            <#ty as #private::FromDLPack>::from_dlpack_in(#prefix, __batch)?
        }
    });
    let value = match input.style {
        Style::Named => {
            let members = input.fields.iter().map(|field| &field.member);
            quote!(Self { #(#members: #values),* })
        }
        Style::Tuple => quote!(Self(#(#values),*)),
        Style::Unit => quote!(Self),
    };
    let code = quote! {
        #[automatically_derived]
        #[allow(unused_qualifications)]
        impl #impl_generics #private::FromDLPack for #ident #ty_generics #where_clause {
            type Input = #private::TensorBatch;

            fn from_dlpack(__input: #private::TensorBatch) -> #private::Result<Self> {
                #private::strict_from(__input)
            }

            fn from_dlpack_in(
                __prefix: &str,
                __batch: &mut #private::TensorBatch,
            ) -> #private::Result<Self> {
                #private::Ok(#value)
            }
        }
    };
    dummy::wrap_in_const(input.attrs.crate_path.as_ref(), code)
}
