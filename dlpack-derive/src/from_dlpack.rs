//! `#[derive(FromDLPack)]`: the struct imports from a `TensorBatch`, strictly at the top
//! level; each exchanged field takes its tensors from under `prefix.name` (from under
//! `prefix` itself when flattened), through its `with` module when it has one, and each
//! skipped field is `Default::default()`. Every field is imported (or loaded in place)
//! before the problems of all of them are returned together.
//!
//! [`expand`] writes the impl, each method from the function of the same name. The shape
//! of the input decides the rest: the struct's style (named, tuple or unit) only how
//! `Self` is built ([`construct`]); a field's attributes what it generates in each method
//! ([`import`], [`select`], [`load`]: through its type's `FromDLPack`, or through its
//! `with` module), a skipped field only a `Default` in [`construct`]. A flattened or
//! renamed field differs only in its prefix (`Field::prefix`).

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::{DeriveInput, Ident};

use crate::ast::{Derive, Field, Input, Style};
use crate::{bound, dummy, valid};

/// Expands `#[derive(FromDLPack)]` on `node`.
pub(crate) fn derive(node: &DeriveInput) -> syn::Result<TokenStream> {
    let input = valid::input(node, Derive::FromDLPack)?;
    Ok(expand(&input))
}

fn expand(input: &Input<'_>) -> TokenStream {
    let private = dummy::private();
    let ident = input.ident;
    let generics = bound::with_bounds(input, "FromDLPack", Some("Default"));
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let exchanged: Vec<&Field<'_>> = input
        .fields
        .iter()
        .filter(|field| !field.is_skipped())
        .collect();
    let from_dlpack_in = from_dlpack_in(input, &exchanged);
    let select_in = select_in(&exchanged);
    let load_dlpack_in = load_dlpack_in(&exchanged);
    let code = quote! {
        #[automatically_derived]
        #[allow(unused_qualifications)]
        impl #impl_generics #private::FromDLPack for #ident #ty_generics #where_clause {
            type Input = #private::TensorBatch;

            fn from_dlpack(__input: #private::TensorBatch) -> #private::Result<Self> {
                #private::strict_from(__input)
            }

            #from_dlpack_in
            #select_in
            #load_dlpack_in
        }
    };
    dummy::wrap_in_const(input.attrs.crate_path.as_ref(), code)
}

/// `from_dlpack_in`: every exchanged field is imported, in declaration order, before any
/// error is returned, so that the error names every missing and mismatched tensor; then
/// `Self` is built from the imported values.
fn from_dlpack_in(input: &Input<'_>, exchanged: &[&Field<'_>]) -> TokenStream {
    let private = dummy::private();
    // `__field0`, `__field1`, ...: the imported value of each exchanged field.
    let bindings: Vec<Ident> = (0..exchanged.len())
        .map(|i| format_ident!("__field{}", i))
        .collect();
    let imports = exchanged.iter().zip(&bindings).map(|(field, binding)| {
        let import = import(field);
        quote!(let #binding = __problems.field(#import);)
    });
    let unwrap = if bindings.is_empty() {
        quote!()
    } else {
        quote! {
            let (#(#private::Some(#bindings),)*) = (#(#bindings,)*) else {
                return #private::Err(__problems.into_error());
            };
        }
    };
    let problems = problems(exchanged);
    let value = construct(input, &bindings);
    quote! {
        fn from_dlpack_in(
            __prefix: &str,
            __batch: &mut #private::TensorBatch,
        ) -> #private::Result<Self> {
            #problems
            #(#imports)*
            #unwrap
            let _ = __problems;
            #private::Ok(#value)
        }
    }
}

/// `select_in`: what `from_dlpack_in` would take, over the names alone.
fn select_in(exchanged: &[&Field<'_>]) -> TokenStream {
    let private = dummy::private();
    let selects = exchanged.iter().map(|field| select(field));
    let selection = if exchanged.is_empty() {
        quote!(_: &mut #private::Selection<'_>)
    } else {
        quote!(__selection: &mut #private::Selection<'_>)
    };
    quote! {
        fn select_in(__prefix: &str, #selection) {
            #(#selects)*
        }
    }
}

/// `load_dlpack_in`: loads in place, field by field; skipped fields are left as they are.
fn load_dlpack_in(exchanged: &[&Field<'_>]) -> TokenStream {
    let private = dummy::private();
    let loads = exchanged.iter().map(|field| load(field));
    let problems = problems(exchanged);
    quote! {
        fn load_dlpack_in(
            &mut self,
            __prefix: &str,
            __batch: &mut #private::TensorBatch,
            __report: &mut #private::LoadReport,
        ) -> #private::Result<()> {
            #problems
            #(#loads)*
            __problems.finish()
        }
    }
}

/// `let mut __problems = ...;`, the collector of the fields' problems (not `mut` when no
/// field is exchanged).
fn problems(exchanged: &[&Field<'_>]) -> TokenStream {
    let private = dummy::private();
    if exchanged.is_empty() {
        quote!(let __problems = #private::Problems::new();)
    } else {
        quote!(let mut __problems = #private::Problems::new();)
    }
}

/// `Self`, by the struct's style, from the imported values of the exchanged fields
/// (`bindings`, in order) and `Default::default()` for each skipped field.
fn construct(input: &Input<'_>, bindings: &[Ident]) -> TokenStream {
    let private = dummy::private();
    let mut next = bindings.iter();
    let values = input.fields.iter().map(|field| {
        if field.is_skipped() {
            let ty = field.ty;
            return quote_spanned! {ty.span()=>
                <#ty as #private::Default>::default()
            };
        }
        let binding = next.next();
        quote!(#binding)
    });
    match input.style {
        Style::Named => {
            let members = input.fields.iter().map(|field| &field.member);
            quote!(Self { #(#members: #values),* })
        }
        Style::Tuple => quote!(Self(#(#values),*)),
        Style::Unit => quote!(Self),
    }
}

/// The field's import in `from_dlpack_in`, an expression of `Result<FieldTy>`.
fn import(field: &Field<'_>) -> TokenStream {
    let private = dummy::private();
    let prefix = field.prefix();
    match field.with() {
        Some(module) => quote_spanned! {module.span()=>
            #module::from_dlpack_in(#prefix, __batch)
        },
        None => {
            let ty = field.ty;
            quote_spanned! {ty.span()=>
                <#ty as #private::FromDLPack>::from_dlpack_in(#prefix, __batch)
            }
        }
    }
}

/// The field's statement in `select_in`: a `with` module's field takes everything under
/// its name (a module says no more than that); a `split = D` field selects inside
/// `Selection::split_along(D, ...)`, so that what it takes is split along `D`.
fn select(field: &Field<'_>) -> TokenStream {
    let select = select_whole(field);
    match &field.attrs.split {
        Some(split) => {
            let dim = split.dim;
            quote_spanned! {split.path.span()=>
                __selection.split_along(#dim, |__selection| {
                    #select
                });
            }
        }
        None => select,
    }
}

/// The field's statement in `select_in`, split or not.
fn select_whole(field: &Field<'_>) -> TokenStream {
    let private = dummy::private();
    let prefix = field.prefix();
    match field.with() {
        Some(module) => quote_spanned! {module.span()=>
            __selection.take_under(#prefix);
        },
        None => {
            let ty = field.ty;
            quote_spanned! {ty.span()=>
                <#ty as #private::FromDLPack>::select_in(#prefix, __selection);
            }
        }
    }
}

/// The field's statement in `load_dlpack_in`.
fn load(field: &Field<'_>) -> TokenStream {
    let private = dummy::private();
    let prefix = field.prefix();
    let member = &field.member;
    match field.with() {
        // A module exchanges whole values: the field is replaced when the batch has
        // tensors for it.
        Some(module) => quote_spanned! {module.span()=>
            __problems.check(#private::load_with_module(
                &mut self.#member,
                #prefix,
                __batch,
                __report,
                #module::from_dlpack_in,
            ));
        },
        None => {
            let ty = field.ty;
            quote_spanned! {ty.span()=>
                __problems.check(<#ty as #private::FromDLPack>::load_dlpack_in(
                    &mut self.#member,
                    #prefix,
                    __batch,
                    __report,
                ));
            }
        }
    }
}
