//! The `TensorFieldsOf<__DlpackMarker>` impl (hence `TensorFields`) that
//! `#[derive(ToDLPack)]` adds next to `ToDLPack`: a model's tensors by reference, for a
//! model shared with Python.

use proc_macro2::TokenStream;
use quote::quote;
use syn::parse_quote;

use crate::ast::{Field, Input};
use crate::dummy;

/// `TensorFieldsOf<__DlpackMarker>` (hence `TensorFields`) for the struct: its exchanged fields by reference, by name (a
/// model shared with Python). Generic over `__DlpackMarker` so that its bounds (every field type
/// implements it) are never trivially false: where they do not hold, the impl does not
/// apply, and the struct still compiles. Skipped fields and fields exchanged through a
/// `with` module are left out.
pub(crate) fn expand(input: &Input<'_>) -> TokenStream {
    let private = dummy::private();
    let ident = input.ident;
    let (_, ty_generics, _) = input.generics.split_for_impl();
    let mut generics = input.generics.clone();
    generics
        .params
        .push(parse_quote!(__DlpackMarker: ?::core::marker::Sized));
    let fields: Vec<_> = input
        .fields
        .iter()
        .filter(|field| !field.is_skipped() && field.with().is_none())
        .collect();
    {
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
        for field in &fields {
            let ty = field.ty;
            where_clause
                .predicates
                .push(parse_quote!(#ty: #private::TensorFieldsOf<__DlpackMarker>));
        }
    }
    let (impl_generics, _, where_clause) = generics.split_for_impl();
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
    let field_names: Vec<String> = fields
        .iter()
        .filter(|f| !f.is_flattened())
        .map(|f| f.name())
        .collect();
    let (named, flattened): (Vec<&Field<'_>>, Vec<&Field<'_>>) =
        fields.iter().copied().partition(|f| !f.is_flattened());
    let find_arms = named.iter().map(|field| {
        let ty = field.ty;
        let member = &field.member;
        let name = field.name();
        quote! {
            #name => return <#ty as #private::TensorFieldsOf<__DlpackMarker>>::find_tensor(&self.#member, __rest),
        }
    });
    let find_flat = flattened.iter().map(|field| {
        let ty = field.ty;
        let member = &field.member;
        quote! {
            match <#ty as #private::TensorFieldsOf<__DlpackMarker>>::find_tensor(&self.#member, __path) {
                #private::Found::Nothing => {}
                __found => return __found,
            }
        }
    });
    let find_mut_arms = named.iter().map(|field| {
        let ty = field.ty;
        let member = &field.member;
        let name = field.name();
        quote! {
            #name => return <#ty as #private::TensorFieldsOf<__DlpackMarker>>::find_tensor_mut(&mut self.#member, __rest),
        }
    });
    let find_mut_flat = flattened.iter().map(|field| {
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
    let (visit_args, find_args, find_mut_args) = if fields.is_empty() {
        (
            quote!(_: &mut #private::String, _: &mut dyn ::core::ops::FnMut(&str, &dyn #private::TensorField)),
            quote!(__path: &str),
            quote!(_: &str),
        )
    } else {
        (
            quote!(__name: &mut #private::String, __visit: &mut dyn ::core::ops::FnMut(&str, &dyn #private::TensorField)),
            quote!(__path: &str),
            quote!(__path: &str),
        )
    };
    let split = if named.is_empty() {
        quote!()
    } else {
        quote! {
            let (__head, __rest) = #private::split_path(__path);
            match __head {
                #(#find_arms)*
                _ => {}
            }
        }
    };
    let split_mut = if named.is_empty() {
        quote!()
    } else {
        quote! {
            let (__head, __rest) = #private::split_path(__path);
            match __head {
                #(#find_mut_arms)*
                _ => {}
            }
        }
    };
    quote! {
        #[automatically_derived]
        #[allow(unused_qualifications)]
        impl #impl_generics #private::TensorFieldsOf<__DlpackMarker> for #ident #ty_generics #where_clause {
            fn visit_tensors(&self, #visit_args) {
                #(#visits)*
            }

            fn find_tensor(&self, #find_args) -> #private::Found<'_> {
                if __path.is_empty() {
                    return #private::Found::Group;
                }
                #split
                #(#find_flat)*
                #private::Found::Nothing
            }

            fn field_names() -> &'static [&'static str] {
                &[#(#field_names),*]
            }

            fn find_tensor_mut(&mut self, #find_mut_args) -> #private::Option<&mut dyn #private::TensorField> {
                #split_mut
                #(#find_mut_flat)*
                #private::None
            }
        }
    }
}
