//! The `TensorFieldsOf<__DlpackMarker>` impl (hence `TensorFields`) that
//! `#[derive(ToDLPack)]` adds next to `ToDLPack`: a model's tensors by reference, for a
//! model shared with Python. [`expand`] writes the impl; its where-clause comes from
//! [`generics`], and each method from the function of the same name.
//!
//! A field takes part by name (its tensors under `name.`), or flattened (its tensors
//! directly under the struct's). Skipped fields take no part.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Generics, parse_quote};

use crate::ast::{Field, Input};
use crate::dummy;

/// `TensorFieldsOf<__DlpackMarker>` (hence `TensorFields`) for the struct: its exchanged
/// fields by reference, by name (a model shared with Python). Generic over
/// `__DlpackMarker` so that its bounds (every field type implements it) are never
/// trivially false: where they do not hold, the impl does not apply, and the struct still
/// compiles. Skipped fields are left out; a field exchanged through a `with` module leaves
/// the struct without the impl (see [`generics`]).
pub(crate) fn expand(input: &Input<'_>) -> TokenStream {
    let private = dummy::private();
    let ident = input.ident;
    let (_, ty_generics, _) = input.generics.split_for_impl();
    // The fields the impl reaches: exchanged, and through their own type's impl.
    let fields: Vec<&Field<'_>> = input
        .fields
        .iter()
        .filter(|field| !field.is_skipped() && field.with().is_none())
        .collect();
    let generics = generics(input, &fields);
    let (impl_generics, _, where_clause) = generics.split_for_impl();
    let (named, flattened): (Vec<&Field<'_>>, Vec<&Field<'_>>) =
        fields.iter().copied().partition(|f| !f.is_flattened());
    let visit_tensors = visit_tensors(&fields);
    let find_tensor = find_tensor(&named, &flattened);
    let field_names = field_names(&named);
    let find_tensor_mut = find_tensor_mut(&named, &flattened);
    quote! {
        #[automatically_derived]
        #[allow(unused_qualifications)]
        impl #impl_generics #private::TensorFieldsOf<__DlpackMarker> for #ident #ty_generics #where_clause {
            #visit_tensors
            #find_tensor
            #field_names
            #find_tensor_mut
        }
    }
}

/// The struct's generics, with `__DlpackMarker: ?Sized` and a where-clause that holds
/// when every field of `fields` implements `TensorFieldsOf<__DlpackMarker>`. A field
/// exchanged through a `with` module adds `ExchangedWithModule<__DlpackMarker>:
/// TensorFieldsOf<__DlpackMarker>`, which never holds: such a struct has no
/// `TensorFields`.
fn generics(input: &Input<'_>, fields: &[&Field<'_>]) -> Generics {
    let private = dummy::private();
    let mut generics = input.generics.clone();
    generics
        .params
        .push(parse_quote!(__DlpackMarker: ?::core::marker::Sized));
    let where_clause = generics.make_where_clause();
    if input
        .fields
        .iter()
        .any(|f| !f.is_skipped() && f.with().is_some())
    {
        where_clause.predicates.push(parse_quote!(
            #private::ExchangedWithModule<__DlpackMarker>: #private::TensorFieldsOf<__DlpackMarker>
        ));
    }
    for field in fields {
        let ty = field.ty;
        where_clause
            .predicates
            .push(parse_quote!(#ty: #private::TensorFieldsOf<__DlpackMarker>));
    }
    generics
}

/// `visit_tensors`: each field's tensors, in declaration order, a named field's with its
/// name pushed onto `__name` (and taken off again).
fn visit_tensors(fields: &[&Field<'_>]) -> TokenStream {
    let private = dummy::private();
    let visits = fields.iter().map(|field| {
        let ty = field.ty;
        let member = &field.member;
        if field.is_flattened() {
            quote! {
                <#ty as #private::TensorFieldsOf<__DlpackMarker>>::visit_tensors(&self.#member, __name, __visit);
            }
        } else {
            let name = field.name();
            quote! {
                let __len = #private::push_segment(__name, #name);
                <#ty as #private::TensorFieldsOf<__DlpackMarker>>::visit_tensors(&self.#member, __name, __visit);
                __name.truncate(__len);
            }
        }
    });
    let args = if fields.is_empty() {
        quote!(_: &mut #private::String, _: &mut dyn ::core::ops::FnMut(&str, &dyn #private::TensorField))
    } else {
        quote!(__name: &mut #private::String, __visit: &mut dyn ::core::ops::FnMut(&str, &dyn #private::TensorField))
    };
    quote! {
        fn visit_tensors(&self, #args) {
            #(#visits)*
        }
    }
}

/// `find_tensor`: the empty path is the struct itself; else the named field of the path's
/// first segment answers for the rest, then each flattened field for the whole path, in
/// declaration order.
fn find_tensor(named: &[&Field<'_>], flattened: &[&Field<'_>]) -> TokenStream {
    let private = dummy::private();
    let split = match_first_segment(named, &quote!(find_tensor), &quote!(&self));
    let flat = flattened.iter().map(|field| {
        let ty = field.ty;
        let member = &field.member;
        quote! {
            match <#ty as #private::TensorFieldsOf<__DlpackMarker>>::find_tensor(&self.#member, __path) {
                #private::Found::Nothing => {}
                __found => return __found,
            }
        }
    });
    quote! {
        fn find_tensor(&self, __path: &str) -> #private::Found<'_> {
            if __path.is_empty() {
                return #private::Found::Group;
            }
            #split
            #(#flat)*
            #private::Found::Nothing
        }
    }
}

/// `field_names`: the names of the named fields (a flattened field has none of its own).
fn field_names(named: &[&Field<'_>]) -> TokenStream {
    let names = named.iter().map(|field| field.name());
    quote! {
        fn field_names() -> &'static [&'static str] {
            &[#(#names),*]
        }
    }
}

/// `find_tensor_mut`: the tensor at a path, looked up as in [`find_tensor`].
fn find_tensor_mut(named: &[&Field<'_>], flattened: &[&Field<'_>]) -> TokenStream {
    let private = dummy::private();
    let split = match_first_segment(named, &quote!(find_tensor_mut), &quote!(&mut self));
    let flat = flattened.iter().map(|field| {
        let ty = field.ty;
        let member = &field.member;
        quote! {
            if let #private::Some(__found) =
                <#ty as #private::TensorFieldsOf<__DlpackMarker>>::find_tensor_mut(&mut self.#member, __path)
            {
                return #private::Some(__found);
            }
        }
    });
    let path = if named.is_empty() && flattened.is_empty() {
        quote!(_: &str)
    } else {
        quote!(__path: &str)
    };
    quote! {
        fn find_tensor_mut(&mut self, #path) -> #private::Option<&mut dyn #private::TensorField> {
            #split
            #(#flat)*
            #private::None
        }
    }
}

/// `__path`'s first segment matched against the names of the named fields, one arm each,
/// whose field (reached as `#borrow.member`, `&self` or `&mut self`) answers `#method`
/// for the rest of the path; nothing when there are no named fields.
fn match_first_segment(
    named: &[&Field<'_>],
    method: &TokenStream,
    borrow: &TokenStream,
) -> TokenStream {
    if named.is_empty() {
        return quote!();
    }
    let private = dummy::private();
    let arms = named.iter().map(|field| {
        let ty = field.ty;
        let member = &field.member;
        let name = field.name();
        quote! {
            #name => return <#ty as #private::TensorFieldsOf<__DlpackMarker>>::#method(#borrow.#member, __rest),
        }
    });
    quote! {
        let (__head, __rest) = #private::split_path(__path);
        match __head {
            #(#arms)*
            _ => {}
        }
    }
}
