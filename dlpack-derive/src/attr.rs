//! `#[dlpack(...)]` attributes on the container and on fields.
//!
//! A bad attribute is reported with a spanned error and otherwise ignored, so that the
//! user sees the errors of all attributes at once: parsing goes on after an unknown key,
//! a repeated key or an invalid value.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::punctuated::Punctuated;
use syn::{Attribute, LitInt, LitStr, Path, Token, WherePredicate};

use crate::ctxt::Ctxt;

const DLPACK: &str = "dlpack";
const BOUND: &str = "bound";
const CRATE: &str = "crate";
const FLATTEN: &str = "flatten";
const RENAME: &str = "rename";
const SKIP: &str = "skip";
const SPLIT: &str = "split";
const WITH: &str = "with";

/// Container attributes: `#[dlpack(crate = "...", bound = "...")]` on the struct.
pub(crate) struct Container {
    /// `crate = "path"`: where `dlpack_core` is, if not at `::dlpack_core`.
    pub(crate) crate_path: Option<Path>,
    /// `bound = "T: Trait, ..."`: the where-predicates that replace inferred bounds.
    pub(crate) bound: Option<Vec<WherePredicate>>,
}

/// Field attributes: `#[dlpack(rename = "...", skip, flatten, with = "...", split = D)]`.
pub(crate) struct Field {
    pub(crate) rename: Option<Rename>,
    /// `with = "module"`: the module whose `to_dlpack_into` / `from_dlpack_in` exchange
    /// the field, for types that do not implement the traits.
    pub(crate) with: Option<With>,
    /// The `skip` key, for error spans.
    pub(crate) skip: Option<Path>,
    /// The `flatten` key, for error spans.
    pub(crate) flatten: Option<Path>,
    /// `split = D`: the dimension the field's tensors are split along between the
    /// ranks of a tensor-parallel group.
    pub(crate) split: Option<Split>,
}

/// `split = D`: the key (for error spans) and the dimension.
pub(crate) struct Split {
    pub(crate) path: Path,
    pub(crate) dim: usize,
}

/// `with = "module"`: the key (for error spans) and the module's path.
pub(crate) struct With {
    pub(crate) path: Path,
    pub(crate) module: Path,
}

/// `rename = "name"`: the key (for error spans) and the validated name.
pub(crate) struct Rename {
    pub(crate) path: Path,
    pub(crate) value: LitStr,
}

/// One attribute key, which may be given at most once.
struct Attr<T> {
    name: &'static str,
    value: Option<T>,
}

impl<T> Attr<T> {
    fn none(name: &'static str) -> Self {
        Self { name, value: None }
    }

    /// Sets the value, or reports a duplicate at `path` if it is set already.
    fn set(&mut self, cx: &mut Ctxt, path: &Path, value: T) {
        if self.value.is_some() {
            cx.error_spanned_by(
                path,
                format_args!("duplicate dlpack attribute `{}`", self.name),
            );
        } else {
            self.value = Some(value);
        }
    }

    /// The value, if the key was given with a valid value.
    fn get(self) -> Option<T> {
        self.value
    }
}

impl Container {
    pub(crate) fn from_attrs(cx: &mut Ctxt, attrs: &[Attribute]) -> Self {
        let mut crate_path = Attr::none(CRATE);
        let mut bound = Attr::none(BOUND);
        for attr in attrs.iter().filter(|attr| attr.path().is_ident(DLPACK)) {
            if let Err(err) = attr.parse_nested_meta(|meta| {
                if meta.path.is_ident(CRATE) {
                    // #[dlpack(crate = "path::to::dlpack_core")]
                    if let Some(lit) = parse_lit_str(cx, CRATE, &meta)? {
                        match lit.parse_with(Path::parse_mod_style) {
                            Ok(path) => crate_path.set(cx, &meta.path, path),
                            Err(_) => cx.error_spanned_by(
                                &lit,
                                format_args!(
                                    "invalid dlpack attribute `crate`: `{}` is not a path",
                                    lit.value()
                                ),
                            ),
                        }
                    }
                } else if meta.path.is_ident(BOUND) {
                    // #[dlpack(bound = "T: Trait, U: Other")]
                    if let Some(lit) = parse_lit_str(cx, BOUND, &meta)? {
                        match lit
                            .parse_with(Punctuated::<WherePredicate, Token![,]>::parse_terminated)
                        {
                            Ok(predicates) => {
                                bound.set(cx, &meta.path, predicates.into_iter().collect());
                            }
                            Err(err) => cx.error_spanned_by(
                                &lit,
                                format_args!("invalid dlpack attribute `bound`: {err}"),
                            ),
                        }
                    }
                } else {
                    cx.error_spanned_by(
                        &meta.path,
                        format_args!(
                            "unknown dlpack container attribute `{}` (expected `crate` or `bound`)",
                            path_to_string(&meta.path)
                        ),
                    );
                    skip_value(&meta)?;
                }
                Ok(())
            }) {
                cx.syn_error(err);
            }
        }
        Self {
            crate_path: crate_path.get(),
            bound: bound.get(),
        }
    }
}

impl Field {
    pub(crate) fn from_attrs(cx: &mut Ctxt, attrs: &[Attribute]) -> Self {
        let mut rename = Attr::none(RENAME);
        let mut skip = Attr::none(SKIP);
        let mut flatten = Attr::none(FLATTEN);
        let mut with = Attr::none(WITH);
        let mut split = Attr::none(SPLIT);
        for attr in attrs.iter().filter(|attr| attr.path().is_ident(DLPACK)) {
            if let Err(err) = attr.parse_nested_meta(|meta| {
                if meta.path.is_ident(RENAME) {
                    // #[dlpack(rename = "name")]
                    if let Some(lit) = parse_lit_str(cx, RENAME, &meta)? {
                        if check_name(cx, &lit) {
                            let path = meta.path.clone();
                            rename.set(cx, &meta.path, Rename { path, value: lit });
                        }
                    }
                } else if meta.path.is_ident(SKIP) {
                    // #[dlpack(skip)]
                    if parse_no_value(cx, SKIP, &meta)? {
                        skip.set(cx, &meta.path, meta.path.clone());
                    }
                } else if meta.path.is_ident(FLATTEN) {
                    // #[dlpack(flatten)]
                    if parse_no_value(cx, FLATTEN, &meta)? {
                        flatten.set(cx, &meta.path, meta.path.clone());
                    }
                } else if meta.path.is_ident(WITH) {
                    // #[dlpack(with = "path::to::module")]
                    if let Some(lit) = parse_lit_str(cx, WITH, &meta)? {
                        match lit.parse_with(Path::parse_mod_style) {
                            Ok(module) => {
                                let path = meta.path.clone();
                                with.set(cx, &meta.path, With { path, module });
                            }
                            Err(_) => cx.error_spanned_by(
                                &lit,
                                format_args!(
                                    "invalid dlpack attribute `with`: `{}` is not a path",
                                    lit.value()
                                ),
                            ),
                        }
                    }
                } else if meta.path.is_ident(SPLIT) {
                    // #[dlpack(split = 0)]
                    if let Some(dim) = parse_dim(cx, SPLIT, &meta)? {
                        let path = meta.path.clone();
                        split.set(cx, &meta.path, Split { path, dim });
                    }
                } else {
                    cx.error_spanned_by(
                        &meta.path,
                        format_args!(
                            "unknown dlpack field attribute `{}` (expected `rename`, `skip`, \
                             `flatten`, `with` or `split`)",
                            path_to_string(&meta.path)
                        ),
                    );
                    skip_value(&meta)?;
                }
                Ok(())
            }) {
                cx.syn_error(err);
            }
        }
        Self {
            rename: rename.get(),
            with: with.get(),
            skip: skip.get(),
            flatten: flatten.get(),
            split: split.get(),
        }
    }
}

/// Parses `= "..."` after `name`; reports anything else and returns `None`.
fn parse_lit_str(
    cx: &mut Ctxt,
    name: &str,
    meta: &ParseNestedMeta<'_>,
) -> syn::Result<Option<LitStr>> {
    if !meta.input.peek(Token![=]) {
        cx.error_spanned_by(
            &meta.path,
            format_args!("expected a value for dlpack attribute `{name}`: `{name} = \"...\"`"),
        );
        skip_value(meta)?;
        return Ok(None);
    }
    let value = meta.value()?;
    if value.peek(LitStr) {
        return value.parse().map(Some);
    }
    let found = skip_value(meta)?;
    cx.error_spanned_by(
        found,
        format_args!("expected a string literal for dlpack attribute `{name}`: `{name} = \"...\"`"),
    );
    Ok(None)
}

/// Parses `= D` after `name`, `D` a dimension (an unsuffixed or `usize` integer
/// literal); reports anything else and returns `None`.
fn parse_dim(cx: &mut Ctxt, name: &str, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<usize>> {
    let expected = format!("expected a dimension for dlpack attribute `{name}`: `{name} = 0`");
    if !meta.input.peek(Token![=]) {
        cx.error_spanned_by(&meta.path, &expected);
        skip_value(meta)?;
        return Ok(None);
    }
    let value = meta.value()?;
    if value.peek(LitInt) && (value.peek2(Token![,]) || value.peek2(syn::parse::End)) {
        let lit: LitInt = value.parse()?;
        if matches!(lit.suffix(), "" | "usize") {
            if let Ok(dim) = lit.base10_parse::<usize>() {
                return Ok(Some(dim));
            }
        }
        cx.error_spanned_by(&lit, &expected);
        return Ok(None);
    }
    let found = skip_value(meta)?;
    cx.error_spanned_by(found, &expected);
    Ok(None)
}

/// Checks that a key that takes no value has none; reports one and returns `false`.
fn parse_no_value(cx: &mut Ctxt, name: &str, meta: &ParseNestedMeta<'_>) -> syn::Result<bool> {
    if meta.input.is_empty() || meta.input.peek(Token![,]) {
        return Ok(true);
    }
    let found = skip_value(meta)?;
    cx.error_spanned_by(
        found,
        format_args!("dlpack attribute `{name}` takes no value"),
    );
    Ok(false)
}

/// Checks a `rename` value: a name segment is non-empty and free of `.`.
fn check_name(cx: &mut Ctxt, lit: &LitStr) -> bool {
    let name = lit.value();
    let problem = if name.is_empty() {
        "a tensor name must not be empty"
    } else if name.contains('.') {
        "a tensor name must not contain `.`, which separates nested names"
    } else {
        return true;
    };
    cx.error_spanned_by(
        lit,
        format_args!("invalid dlpack attribute `rename`: {problem}"),
    );
    false
}

/// Consumes whatever follows a key up to the next top-level `,`, so that parsing can go on
/// with the next key after a bad one; returns the tokens consumed, for error spans.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<TokenStream> {
    meta.input.step(|cursor| {
        let mut skipped = TokenStream::new();
        let mut rest = *cursor;
        while let Some((tree, next)) = rest.token_tree() {
            if matches!(&tree, TokenTree::Punct(punct) if punct.as_char() == ',') {
                break;
            }
            skipped.extend([tree]);
            rest = next;
        }
        Ok((skipped, rest))
    })
}

fn path_to_string(path: &Path) -> String {
    path.to_token_stream().to_string().replace(' ', "")
}
