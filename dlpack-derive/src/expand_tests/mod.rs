//! Expansion snapshots: each input is expanded, pretty-printed and compared with the
//! committed `tests/expand/<name>.expanded.rs`. Run with `DLPACK_BLESS=1` to write
//! the current output instead, then review the diff.

use std::path::PathBuf;

use proc_macro2::{TokenStream, TokenTree};
use quote::quote;

use crate::{from_dlpack, to_dlpack};

type Expand = fn(&syn::DeriveInput) -> syn::Result<TokenStream>;

/// Expands `input` with `expand` and checks it against the snapshot `name`.
fn check(expand: Expand, name: &str, input: TokenStream) {
    let input: syn::DeriveInput = syn::parse2(input).expect("test input is a valid item");
    let output = expand(&input).expect("test input derives without errors");
    assert!(
        !has_unsafe(output.clone()),
        "expansion of {name} contains `unsafe`:\n{output}"
    );
    let file: syn::File = syn::parse2(output).expect("expansion is a valid file");
    let actual = prettyplease::unparse(&file);
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "expand"]
        .iter()
        .collect::<PathBuf>()
        .join(format!("{name}.expanded.rs"));
    if std::env::var_os("DLPACK_BLESS").is_some() {
        std::fs::write(&path, &actual).expect("write snapshot");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "expansion of {name} differs from {}; rerun with DLPACK_BLESS=1 to update it\n\
         --- expected\n{expected}\n--- actual\n{actual}",
        path.display(),
    );
}

/// Whether the token `unsafe` occurs anywhere, groups included.
fn has_unsafe(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|tree| match tree {
        TokenTree::Ident(ident) => ident == "unsafe",
        TokenTree::Group(group) => has_unsafe(group.stream()),
        TokenTree::Punct(_) | TokenTree::Literal(_) => false,
    })
}

/// Named fields with every field attribute, generics, a lifetime and a where-clause.
fn model() -> TokenStream {
    quote! {
        struct Model<'a, T: Element, D = Ix2>
        where
            D: Dimension,
        {
            weight: Array<T, D>,
            #[dlpack(rename = "b")]
            bias: Option<Array1<T>>,
            #[dlpack(flatten)]
            head: Head,
            layers: Vec<Layer<T>>,
            #[dlpack(skip)]
            name: &'a str,
            #[dlpack(skip)]
            steps: Counter<T>,
        }
    }
}

/// A tuple struct with `crate = "..."` and `bound = "..."` (no inferred bounds).
fn pair() -> TokenStream {
    quote! {
        #[dlpack(crate = "my::reexport", bound = "T: Element")]
        struct Pair<T>(Array1<T>, #[dlpack(skip)] PhantomData<T>);
    }
}

#[test]
fn to_dlpack_model() {
    check(to_dlpack::derive, "to_dlpack_model", model());
}

#[test]
fn from_dlpack_model() {
    check(from_dlpack::derive, "from_dlpack_model", model());
}

#[test]
fn to_dlpack_pair() {
    check(to_dlpack::derive, "to_dlpack_pair", pair());
}

#[test]
fn from_dlpack_pair() {
    check(from_dlpack::derive, "from_dlpack_pair", pair());
}

/// Tensor-parallel fields: split along dimension 0 and 1, one split and renamed, one
/// split through a `with` module, one replicated.
#[test]
fn from_dlpack_split() {
    let input = quote! {
        struct Attention {
            #[dlpack(split = 0)]
            q_proj: Linear,
            #[dlpack(split = 1, rename = "out")]
            o_proj: Array2<f32>,
            #[dlpack(split = 0, with = "module")]
            rotary: Rotary,
            norm: Array1<f32>,
        }
    };
    check(from_dlpack::derive, "from_dlpack_split", input);
}

#[test]
fn unit_struct() {
    let input = quote!(
        struct Empty;
    );
    check(to_dlpack::derive, "to_dlpack_unit", input.clone());
    check(from_dlpack::derive, "from_dlpack_unit", input);
}

#[test]
fn crate_path_replaces_default() {
    let input: syn::DeriveInput = syn::parse2(pair()).expect("valid item");
    for expand in [to_dlpack::derive as Expand, from_dlpack::derive] {
        let output = expand(&input).expect("derives").to_string();
        assert!(!output.contains("dlpack_core"), "{output}");
    }
}

#[test]
fn errors_are_collected() {
    let input: syn::DeriveInput = syn::parse2(quote! {
        #[dlpack(crate = "not a path", unknown)]
        struct S {
            #[dlpack(renam = "x", skip, skip)]
            a: A,
            #[dlpack(rename = "a.b", flatten = true)]
            b: B,
            #[dlpack(rename = "")]
            c: C,
        }
    })
    .expect("valid item");
    let error = to_dlpack::derive(&input).expect_err("bad attributes");
    let messages: Vec<String> = error.into_iter().map(|e| e.to_string()).collect();
    assert_eq!(
        messages,
        [
            "invalid dlpack attribute `crate`: `not a path` is not a path",
            "unknown dlpack container attribute `unknown` (expected `crate` or `bound`)",
            "unknown dlpack field attribute `renam` (expected `rename`, `skip`, `flatten`, `with` \
             or `split`)",
            "duplicate dlpack attribute `skip`",
            "invalid dlpack attribute `rename`: a tensor name must not contain `.`, \
             which separates nested names",
            "dlpack attribute `flatten` takes no value",
            "invalid dlpack attribute `rename`: a tensor name must not be empty",
        ]
    );
}
