//! `#[derive(ToDLPack)]`: the struct exports as a `TensorBatch`; each exchanged field adds
//! its tensors under `prefix.name` (under `prefix` itself when flattened), through its
//! `with` module when it has one. The `TensorFields` impl of `tensor_fields` comes with
//! it.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::DeriveInput;
use syn::spanned::Spanned as _;

use crate::ast::{Derive, Input};
use crate::{bound, dummy, tensor_fields, valid};

/// Expands `#[derive(ToDLPack)]` on `node`.
pub(crate) fn derive(node: &DeriveInput) -> syn::Result<TokenStream> {
    let input = valid::input(node, Derive::ToDLPack)?;
    Ok(expand(&input))
}

fn expand(input: &Input<'_>) -> TokenStream {
    let private = dummy::private();
    let ident = input.ident;
    let generics = bound::with_bounds(input, "ToDLPack", None);
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let exports = input
        .fields
        .iter()
        .filter(|field| !field.is_skipped())
        .map(|field| {
            let ty = field.ty;
            let member = &field.member;
            let prefix = field.prefix();
            match field.with() {
                Some(module) => quote_spanned! {module.span()=>
                    #module::to_dlpack_into(self.#member, #prefix, __batch)?;
                },
                None => quote_spanned! {ty.span()=>
                    <#ty as #private::ToDLPack>::to_dlpack_into(self.#member, #prefix, __batch)?;
                },
            }
        });
    let code = quote! {
        #[automatically_derived]
        #[allow(unused_qualifications)]
        impl #impl_generics #private::ToDLPack for #ident #ty_generics #where_clause {
            type Output = #private::TensorBatch;

            fn to_dlpack(self) -> #private::Result<#private::TensorBatch> {
                #private::batch_of(self)
            }

            fn to_dlpack_into(
                self,
                __prefix: &str,
                __batch: &mut #private::TensorBatch,
            ) -> #private::Result<()> {
                #(#exports)*
                #private::Ok(())
            }
        }
    };
    let fields = tensor_fields::expand(input);
    dummy::wrap_in_const(
        input.attrs.crate_path.as_ref(),
        quote! {
            #code
            #fields
        },
    )
}
