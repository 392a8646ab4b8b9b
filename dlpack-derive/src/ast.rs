//! The derive input as the expanders see it: a struct, its container attributes and its
//! fields with their tensor names, all borrowed from the `DeriveInput`.

use core::fmt;

use proc_macro2::TokenStream;
use quote::quote;
use syn::ext::IdentExt as _;
use syn::{Data, DeriveInput, Fields, Generics, Ident, Index, Member, Type};

use crate::attr;
use crate::ctxt::Ctxt;

/// Which derive is running, for error messages.
#[derive(Clone, Copy)]
pub(crate) enum Derive {
    ToDLPack,
    FromDLPack,
}

impl fmt::Display for Derive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ToDLPack => "ToDLPack",
            Self::FromDLPack => "FromDLPack",
        })
    }
}

/// A struct deriving `ToDLPack` or `FromDLPack`.
pub(crate) struct Input<'a> {
    pub(crate) ident: &'a Ident,
    pub(crate) generics: &'a Generics,
    pub(crate) attrs: attr::Container,
    pub(crate) style: Style,
    pub(crate) fields: Vec<Field<'a>>,
}

/// How the struct's fields are written, which decides how `Self` is built.
#[derive(Clone, Copy)]
pub(crate) enum Style {
    /// `struct S { a: A }`
    Named,
    /// `struct S(A);`
    Tuple,
    /// `struct S;`
    Unit,
}

/// One field of the struct.
pub(crate) struct Field<'a> {
    /// `self.<member>`: the identifier, or the index of a tuple field.
    pub(crate) member: Member,
    pub(crate) ty: &'a Type,
    pub(crate) attrs: attr::Field,
    /// The field as written, for error spans.
    pub(crate) original: &'a syn::Field,
}

impl Field<'_> {
    /// The name segment of this field's tensors: `rename`, else the field's name (without
    /// `r#`), else its index.
    pub(crate) fn name(&self) -> String {
        if let Some(rename) = &self.attrs.rename {
            return rename.value.value();
        }
        match &self.member {
            Member::Named(ident) => ident.unraw().to_string(),
            Member::Unnamed(index) => index.index.to_string(),
        }
    }

    /// Whether the field takes no part in the exchange.
    pub(crate) fn is_skipped(&self) -> bool {
        self.attrs.skip.is_some()
    }

    /// The module of `#[dlpack(with = "...")]`, if given.
    pub(crate) fn with(&self) -> Option<&syn::Path> {
        self.attrs.with.as_ref().map(|with| &with.module)
    }

    /// Whether the field's tensors sit directly under the struct's prefix.
    pub(crate) fn is_flattened(&self) -> bool {
        self.attrs.flatten.is_some()
    }

    /// The prefix of the field's tensors in generated code: `__prefix` itself when
    /// flattened, else `&_dlpack::__private::join_name(__prefix, "name")`.
    pub(crate) fn prefix(&self) -> proc_macro2::TokenStream {
        if self.is_flattened() {
            return quote::quote!(__prefix);
        }
        let private = crate::dummy::private();
        let name = self.name();
        quote::quote!(&#private::join_name(__prefix, #name))
    }
}

impl<'a> Input<'a> {
    /// Reads `node`, reporting what it gets wrong to `cx` (`valid::input` also checks
    /// the fields against each other).
    pub(crate) fn from_syn(cx: &mut Ctxt, node: &'a DeriveInput, derive: Derive) -> Self {
        let attrs = attr::Container::from_attrs(cx, &node.attrs);
        let (style, fields) = match &node.data {
            Data::Struct(data) => {
                let style = match &data.fields {
                    Fields::Named(_) => Style::Named,
                    Fields::Unnamed(_) => Style::Tuple,
                    Fields::Unit => Style::Unit,
                };
                (style, fields_from_syn(cx, &data.fields))
            }
            Data::Enum(syn::DataEnum { enum_token, .. }) => {
                let ident = &node.ident;
                not_a_struct(cx, derive, quote!(#enum_token #ident));
                (Style::Unit, Vec::new())
            }
            Data::Union(syn::DataUnion { union_token, .. }) => {
                let ident = &node.ident;
                not_a_struct(cx, derive, quote!(#union_token #ident));
                (Style::Unit, Vec::new())
            }
        };
        Input {
            ident: &node.ident,
            generics: &node.generics,
            attrs,
            style,
            fields,
        }
    }
}

/// Reports an enum or a union, spanned at `enum Name` / `union Name`.
fn not_a_struct(cx: &mut Ctxt, derive: Derive, what: TokenStream) {
    cx.error_spanned_by(
        what,
        format_args!("#[derive({derive})] only supports structs"),
    );
}

fn fields_from_syn<'a>(cx: &mut Ctxt, fields: &'a Fields) -> Vec<Field<'a>> {
    fields
        .iter()
        .enumerate()
        .map(|(i, field)| Field {
            member: match &field.ident {
                Some(ident) => Member::Named(ident.clone()),
                None => Member::Unnamed(Index {
                    index: u32::try_from(i).unwrap_or(u32::MAX),
                    span: syn::spanned::Spanned::span(&field.ty),
                }),
            },
            ty: &field.ty,
            attrs: attr::Field::from_attrs(cx, &field.attrs),
            original: field,
        })
        .collect()
}
