//! `#[pymodel]` on a `#[pymethods]` block: adds the methods of a Rust model shared with
//! Python (tensor attributes and setters, `state_dict`, `load_state_dict`, `shares`,
//! `__repr__`, `__dir__`), each a call of `dlpack_core::python::model`, except those the block
//! defines itself. The block is read as tokens: the methods go inside its braces, and
//! `#[pyo3::pymethods]` is added when the block has no `pymethods` attribute.

use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use quote::quote;
use syn::parse::Parser as _;
use syn::punctuated::Punctuated;
use syn::{Expr, Lit, Meta, Path, Token};

/// Expands `#[pymodel(args)]` on `item`.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let krate = crate_path(args)?;
    let mut tokens: Vec<TokenTree> = item.into_iter().collect();
    let Some(TokenTree::Group(body)) = tokens.last().cloned() else {
        return Err(not_an_impl(&tokens));
    };
    if body.delimiter() != Delimiter::Brace || !starts_impl(&tokens) {
        return Err(not_an_impl(&tokens));
    }
    check_expanded(body.stream())?;
    let defined = defined_fns(body.stream());
    let methods = methods(&krate)
        .into_iter()
        .filter(|(name, _)| !defined.iter().any(|d| d == name))
        .map(|(_, code)| code);
    let mut inner = body.stream();
    inner.extend(methods);
    let mut group = Group::new(Delimiter::Brace, inner);
    group.set_span(body.span());
    let last = tokens.len() - 1;
    tokens[last] = TokenTree::Group(group);
    let mut out = TokenStream::new();
    if !has_pymethods(&tokens) {
        out.extend(quote!(#[::pyo3::pymethods]));
    }
    out.extend(tokens);
    Ok(out)
}

/// `crate = "path"`, else `::dlpack_core`.
fn crate_path(args: TokenStream) -> syn::Result<Path> {
    let mut krate: Path = syn::parse_quote!(::dlpack_core);
    let metas = Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args)?;
    for meta in metas {
        match meta {
            Meta::NameValue(nv) if nv.path.is_ident("crate") => match &nv.value {
                Expr::Lit(lit) => match &lit.lit {
                    Lit::Str(s) => krate = s.parse()?,
                    other => return Err(syn::Error::new_spanned(other, "expected a string")),
                },
                other => return Err(syn::Error::new_spanned(other, "expected a string")),
            },
            other => {
                return Err(syn::Error::new_spanned(
                    other,
                    "unknown argument: `#[pymodel]` takes only `crate = \"path\"`",
                ));
            }
        }
    }
    Ok(krate)
}

fn not_an_impl(tokens: &[TokenTree]) -> syn::Error {
    let span = tokens
        .first()
        .map_or_else(proc_macro2::Span::call_site, TokenTree::span);
    syn::Error::new(
        span,
        "`#[pymodel]` goes on the `#[pymethods] impl` block of a `#[pyclass]` struct that \
         derives `ToDLPack` and `FromDLPack`",
    )
}

/// Whether the tokens, after their outer attributes and visibility, start with `impl`.
fn starts_impl(tokens: &[TokenTree]) -> bool {
    let mut i = 0;
    while let Some(TokenTree::Punct(p)) = tokens.get(i) {
        if p.as_char() != '#' {
            return false;
        }
        i += 2; // `#` and its `[...]`
    }
    matches!(tokens.get(i), Some(TokenTree::Ident(id)) if id == "impl")
}

/// Whether an outer attribute's path ends in `pymethods`.
fn has_pymethods(tokens: &[TokenTree]) -> bool {
    tokens.windows(2).any(|pair| match pair {
        [TokenTree::Punct(p), TokenTree::Group(g)]
            if p.as_char() == '#' && g.delimiter() == Delimiter::Bracket =>
        {
            let path: Vec<String> = g
                .stream()
                .into_iter()
                .take_while(|t| !matches!(t, TokenTree::Group(_)))
                .filter_map(|t| match t {
                    TokenTree::Ident(id) => Some(id.to_string()),
                    _ => None,
                })
                .collect();
            path.last().is_some_and(|last| last == "pymethods")
        }
        _ => false,
    })
}

/// PyO3's attributes that make a function without a receiver valid in `#[pymethods]`.
const METHOD_KINDS: [&str; 7] = [
    "new",
    "staticmethod",
    "classmethod",
    "classattr",
    "getter",
    "setter",
    "deleter",
];

/// Refuses a function of no arguments that carries none of [`METHOD_KINDS`]: PyO3
/// refuses it too ("static method needs #[staticmethod] attribute"), and the usual
/// cause is `#[pymethods]` above `#[pymodel]`, which expands the block first and takes
/// those attributes away. Valid code never has one, so the check refuses nothing that
/// would build.
fn check_expanded(body: TokenStream) -> syn::Result<()> {
    let tokens: Vec<TokenTree> = body.into_iter().collect();
    let mut marked = false;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            TokenTree::Group(group) if group.delimiter() == Delimiter::Bracket => {
                let last = group
                    .stream()
                    .into_iter()
                    .take_while(|t| !matches!(t, TokenTree::Group(_)))
                    .filter_map(|t| match t {
                        TokenTree::Ident(id) => Some(id.to_string()),
                        _ => None,
                    })
                    .last();
                if last.is_some_and(|l| METHOD_KINDS.contains(&l.as_str())) {
                    marked = true;
                }
            }
            TokenTree::Group(group) if group.delimiter() == Delimiter::Brace => marked = false,
            TokenTree::Punct(p) if p.as_char() == ';' => marked = false,
            TokenTree::Ident(f) if f == "fn" => {
                let Some(TokenTree::Ident(name)) = tokens.get(i + 1) else {
                    continue;
                };
                let no_arguments = tokens[i + 1..]
                    .iter()
                    .find_map(|t| match t {
                        TokenTree::Group(g) if g.delimiter() == Delimiter::Parenthesis => {
                            Some(g.stream().is_empty())
                        }
                        _ => None,
                    })
                    .unwrap_or(false);
                if no_arguments && !marked {
                    return Err(syn::Error::new(
                        name.span(),
                        format!(
                            "`fn {name}` has no receiver and none of `#[new]`, \
                             `#[staticmethod]`, `#[classmethod]` or `#[classattr]`: if \
                             `#[pymethods]` is above `#[pymodel]`, put `#[pymodel]` first \
                             (attributes expand in order, and `#[pymethods]` has already \
                             taken the block's own); else mark it `#[staticmethod]`"
                        ),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The Python names of the functions the block defines at its top level: the `name`
/// of a `#[pyo3(name = "...")]` before the `fn`, else the function's own name.
fn defined_fns(body: TokenStream) -> Vec<String> {
    let tokens: Vec<TokenTree> = body.into_iter().collect();
    let mut names = Vec::new();
    let mut renamed: Option<String> = None;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            TokenTree::Group(group) if group.delimiter() == Delimiter::Bracket => {
                if let Some(name) = pyo3_name(group.stream()) {
                    renamed = Some(name);
                }
            }
            // An item that is no function (`const X: T = ...;`) ends at its `;`: a
            // `name` before it was its own.
            TokenTree::Punct(p) if p.as_char() == ';' => renamed = None,
            TokenTree::Ident(f) if f == "fn" => {
                if let Some(TokenTree::Ident(name)) = tokens.get(i + 1) {
                    let own = name.to_string().trim_start_matches("r#").to_owned();
                    names.push(renamed.take().unwrap_or(own));
                }
            }
            _ => {}
        }
    }
    names
}

/// The `"..."` of `pyo3(..., name = "...", ...)`, the inside of an attribute.
fn pyo3_name(attribute: TokenStream) -> Option<String> {
    let tokens: Vec<TokenTree> = attribute.into_iter().collect();
    let [TokenTree::Ident(path), TokenTree::Group(args)] = tokens.as_slice() else {
        return None;
    };
    if path != "pyo3" {
        return None;
    }
    let args: Vec<TokenTree> = args.stream().into_iter().collect();
    args.windows(3).find_map(|w| match w {
        [
            TokenTree::Ident(key),
            TokenTree::Punct(eq),
            TokenTree::Literal(lit),
        ] if key == "name" && eq.as_char() == '=' => {
            syn::parse_str::<syn::LitStr>(&lit.to_string())
                .ok()
                .map(|s| s.value())
        }
        _ => None,
    })
}

/// Every method `#[pymodel]` adds, by name.
fn methods(krate: &Path) -> Vec<(&'static str, TokenStream)> {
    let model = quote!(#krate::python::model);
    vec![
        (
            "__getattr__",
            quote! {
                fn __getattr__(
                    slf: &::pyo3::Bound<'_, Self>,
                    name: &::pyo3::Bound<'_, ::pyo3::types::PyString>,
                ) -> ::pyo3::PyResult<::pyo3::Py<::pyo3::PyAny>> {
                    #model::getattr(slf, name)
                }
            },
        ),
        (
            "__setattr__",
            quote! {
                fn __setattr__(
                    slf: &::pyo3::Bound<'_, Self>,
                    name: &::pyo3::Bound<'_, ::pyo3::types::PyString>,
                    value: &::pyo3::Bound<'_, ::pyo3::PyAny>,
                ) -> ::pyo3::PyResult<()> {
                    #model::setattr(slf, name, value)
                }
            },
        ),
        (
            "__delattr__",
            quote! {
                fn __delattr__(
                    slf: &::pyo3::Bound<'_, Self>,
                    name: &::pyo3::Bound<'_, ::pyo3::types::PyString>,
                ) -> ::pyo3::PyResult<()> {
                    #model::delattr(slf, name)
                }
            },
        ),
        (
            "__dir__",
            quote! {
                fn __dir__(
                    slf: &::pyo3::Bound<'_, Self>,
                ) -> ::pyo3::PyResult<::std::vec::Vec<::std::string::String>> {
                    #model::dir(slf)
                }
            },
        ),
        (
            "__repr__",
            quote! {
                fn __repr__(slf: &::pyo3::Bound<'_, Self>) -> ::pyo3::PyResult<::std::string::String> {
                    #model::repr(slf)
                }
            },
        ),
        (
            "state_dict",
            quote! {
                /// Every tensor by its `state_dict` name, sharing the model's memory.
                #[pyo3(name = "state_dict", signature = (*, prefix = ::std::string::String::new()))]
                fn __dlpack_state_dict<'py>(
                    slf: &::pyo3::Bound<'py, Self>,
                    prefix: ::std::string::String,
                ) -> ::pyo3::PyResult<::pyo3::Bound<'py, ::pyo3::types::PyDict>> {
                    #model::state_dict(slf, &prefix)
                }
            },
        ),
        (
            "shares",
            quote! {
                /// Whether `tensor` still views the buffer of the model's tensor `name`.
                #[pyo3(name = "shares")]
                fn __dlpack_shares(
                    slf: &::pyo3::Bound<'_, Self>,
                    tensor: &::pyo3::Bound<'_, ::pyo3::PyAny>,
                    name: &str,
                ) -> ::pyo3::PyResult<bool> {
                    #model::shares(slf, tensor, name)
                }
            },
        ),
        (
            "load_state_dict",
            quote! {
                /// Loads a `state_dict` (any DLPack tensors) as PyTorch's
                /// `Module.load_state_dict` does.
                #[pyo3(name = "load_state_dict", signature = (state_dict, strict = true))]
                fn __dlpack_load_state_dict<'py>(
                    slf: &::pyo3::Bound<'py, Self>,
                    state_dict: &::pyo3::Bound<'py, ::pyo3::PyAny>,
                    strict: bool,
                ) -> ::pyo3::PyResult<::pyo3::Bound<'py, ::pyo3::PyAny>> {
                    #model::load_state_dict(slf, state_dict, strict)
                }
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::expand;

    #[test]
    fn a_block_that_pymethods_expanded_first_is_named() {
        // What `#[pymethods]` above `#[pymodel]` leaves: `#[new]` taken away.
        let err = expand(
            quote!(),
            quote!(impl Mlp {
                fn new() -> Self {
                    Mlp
                }
            }),
        )
        .err()
        .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "`fn new` has no receiver and none of `#[new]`, `#[staticmethod]`, \
                 `#[classmethod]` or `#[classattr]`: if `#[pymethods]` is above \
                 `#[pymodel]`, put `#[pymodel]` first (attributes expand in order, and \
                 `#[pymethods]` has already taken the block's own); else mark it \
                 `#[staticmethod]`"
            )
        );
    }

    #[test]
    fn marked_functions_without_arguments_pass() {
        for marked in [
            quote!(
                #[new]
                fn new() -> Self {
                    Mlp
                }
            ),
            quote!(
                #[staticmethod]
                fn make() -> Self {
                    Mlp
                }
            ),
            quote!(
                #[pyo3::pyo3(name = "x")]
                #[classattr]
                fn x() -> u8 {
                    1
                }
            ),
            quote!(
                fn f(&self) {}
                #[staticmethod]
                fn g() {}
            ),
        ] {
            let item = quote!(#[pymethods] impl Mlp { #marked });
            assert!(expand(quote!(), item).is_ok(), "{marked}");
        }
    }
}
