//! Where-clauses of the generated impls.
//!
//! As in thiserror, a bound `FieldTy: Trait` is inferred only for fields whose type
//! mentions one of the struct's type parameters; other field types are concrete and need
//! no bound (a missing impl is then reported at the field). `#[dlpack(bound = "...")]`
//! replaces the inferred bounds, as in serde. The struct's own where-clause is kept.

use std::collections::BTreeSet;

use quote::ToTokens as _;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{
    GenericArgument, Generics, Ident, PathArguments, PredicateType, ReturnType, TraitBound,
    TraitBoundModifiers, Type, TypeParamBound, WherePredicate,
};

use crate::ast::{Field, Input};
use crate::dummy;

/// `input`'s generics with the bounds the impl needs: the `bound = "..."` predicates if
/// given, else `FieldTy: <field_trait>` for each exchanged field and `FieldTy: <skip_trait>`
/// for each skipped one (when given), for field types that mention a type parameter. The
/// traits are items of the private module of `dlpack_core`.
pub(crate) fn with_bounds(
    input: &Input<'_>,
    field_trait: &str,
    skip_trait: Option<&str>,
) -> Generics {
    let predicates = match &input.attrs.bound {
        Some(bound) => bound.clone(),
        None => inferred(input, field_trait, skip_trait),
    };
    let mut generics = input.generics.clone();
    if !predicates.is_empty() {
        generics.make_where_clause().predicates.extend(predicates);
    }
    generics
}

fn inferred(input: &Input<'_>, field_trait: &str, skip_trait: Option<&str>) -> Vec<WherePredicate> {
    let params = ParamsInScope::new(input.generics);
    let mut seen = BTreeSet::new();
    let mut predicates = Vec::new();
    for field in &input.fields {
        if field.with().is_some() {
            // Exchanged by its module, not by the trait.
            continue;
        }
        let bound = match (field.is_skipped(), skip_trait) {
            (false, _) => field_trait,
            (true, Some(skip_trait)) => skip_trait,
            (true, None) => continue,
        };
        if !params.intersects(field.ty) {
            continue;
        }
        let predicate = predicate(field, bound);
        if seen.insert(predicate.to_token_stream().to_string()) {
            predicates.push(predicate);
        }
    }
    predicates
}

/// `FieldTy: _dlpack::__private::<bound>`, spanned at the field's type.
fn predicate(field: &Field<'_>, bound: &str) -> WherePredicate {
    let span = field.ty.span();
    let bound = TypeParamBound::Trait(TraitBound {
        paren_token: None,
        lifetimes: None,
        modifiers: TraitBoundModifiers::default(),
        maybe: None,
        path: dummy::private_path(bound, span),
    });
    WherePredicate::Type(PredicateType {
        attrs: Vec::new(),
        lifetimes: None,
        bounded_ty: field.ty.clone(),
        colon_token: syn::Token![:](span),
        bounds: Punctuated::from_iter([bound]),
    })
}

/// The type parameters of the struct, to find field types that mention them.
struct ParamsInScope<'a> {
    names: BTreeSet<&'a Ident>,
}

impl<'a> ParamsInScope<'a> {
    fn new(generics: &'a Generics) -> Self {
        Self {
            names: generics.type_params().map(|param| &param.ident).collect(),
        }
    }

    /// Whether `ty` mentions a type parameter anywhere (`T`, `Vec<T>`, `T::Assoc`,
    /// `&'a [T]`, ...). Types whose inside cannot be seen (macros) count as mentioning one.
    fn intersects(&self, ty: &Type) -> bool {
        !self.names.is_empty() && self.crawl(ty)
    }

    fn crawl(&self, ty: &Type) -> bool {
        match ty {
            Type::Array(ty) => self.crawl(&ty.elem),
            Type::FnPtr(ty) => {
                ty.inputs.iter().any(|arg| self.crawl(&arg.ty)) || self.crawl_return(&ty.output)
            }
            Type::Group(ty) => self.crawl(&ty.elem),
            Type::ImplTrait(ty) => ty.bounds.iter().any(|bound| self.crawl_bound(bound)),
            Type::Infer(_) | Type::Never(_) => false,
            Type::Paren(ty) => self.crawl(&ty.elem),
            Type::Path(ty) => {
                if let Some(qself) = &ty.qself {
                    if self.crawl(&qself.ty) {
                        return true;
                    }
                } else if ty.path.leading_colon.is_none() {
                    if let Some(first) = ty.path.segments.first() {
                        if self.names.contains(&first.ident) {
                            return true;
                        }
                    }
                }
                ty.path
                    .segments
                    .iter()
                    .any(|segment| self.crawl_arguments(&segment.arguments))
            }
            Type::Ptr(ty) => self.crawl(&ty.elem),
            Type::Reference(ty) => self.crawl(&ty.elem),
            Type::Slice(ty) => self.crawl(&ty.elem),
            Type::TraitObject(ty) => ty.bounds.iter().any(|bound| self.crawl_bound(bound)),
            Type::Tuple(ty) => ty.elems.iter().any(|elem| self.crawl(elem)),
            // `Type::Macro`, `Type::Verbatim` and future variants: assume the worst.
            _ => true,
        }
    }

    fn crawl_arguments(&self, arguments: &PathArguments) -> bool {
        match arguments {
            PathArguments::None => false,
            PathArguments::AngleBracketed(arguments) => {
                arguments.args.iter().any(|arg| match arg {
                    GenericArgument::Type(ty) => self.crawl(ty),
                    GenericArgument::AssocType(assoc) => self.crawl(&assoc.ty),
                    GenericArgument::Constraint(constraint) => constraint
                        .bounds
                        .iter()
                        .any(|bound| self.crawl_bound(bound)),
                    _ => false,
                })
            }
            PathArguments::Parenthesized(arguments) => {
                arguments.inputs.iter().any(|arg| self.crawl(&arg.ty))
                    || self.crawl_return(&arguments.output)
            }
        }
    }

    fn crawl_return(&self, output: &ReturnType) -> bool {
        match output {
            ReturnType::Default => false,
            ReturnType::Type(_, ty) => self.crawl(ty),
        }
    }

    fn crawl_bound(&self, bound: &TypeParamBound) -> bool {
        match bound {
            TypeParamBound::Trait(bound) => bound
                .path
                .segments
                .iter()
                .any(|segment| self.crawl_arguments(&segment.arguments)),
            _ => false,
        }
    }
}
