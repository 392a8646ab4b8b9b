//! Checks across attributes and fields: conflicting keys on one field, and tensor names
//! that two fields of the struct would both use.

use std::collections::BTreeSet;

use syn::DeriveInput;

use crate::ast::{Derive, Field, Input};
use crate::ctxt::Ctxt;

/// Reads and checks `node`; every problem found is in the one error returned.
pub(crate) fn input(node: &DeriveInput, derive: Derive) -> syn::Result<Input<'_>> {
    let mut cx = Ctxt::new();
    let input = Input::from_syn(&mut cx, node, derive);
    check(&mut cx, &input);
    cx.check()?;
    Ok(input)
}

/// Reports every problem of `input` to `cx`.
fn check(cx: &mut Ctxt, input: &Input<'_>) {
    for field in &input.fields {
        check_field(cx, field);
    }
    check_duplicate_names(cx, &input.fields);
}

/// `skip` excludes `rename`, `flatten`, `with` and `split`; `flatten` excludes `rename` (a
/// flattened field has no name segment of its own).
fn check_field(cx: &mut Ctxt, field: &Field<'_>) {
    let attrs = &field.attrs;
    if attrs.skip.is_some() {
        if let Some(rename) = &attrs.rename {
            cx.error_spanned_by(
                &rename.path,
                "dlpack attribute `rename` cannot be combined with `skip`",
            );
        }
        if let Some(flatten) = &attrs.flatten {
            cx.error_spanned_by(
                flatten,
                "dlpack attribute `flatten` cannot be combined with `skip`",
            );
        }
        if let Some(with) = &attrs.with {
            cx.error_spanned_by(
                &with.path,
                "dlpack attribute `with` cannot be combined with `skip`",
            );
        }
        if let Some(split) = &attrs.split {
            cx.error_spanned_by(
                &split.path,
                "dlpack attribute `split` cannot be combined with `skip`",
            );
        }
    } else if let (Some(_), Some(rename)) = (&attrs.flatten, &attrs.rename) {
        cx.error_spanned_by(
            &rename.path,
            "dlpack attribute `rename` cannot be combined with `flatten`",
        );
    }
}

/// Two exported, non-flattened fields with the same name would insert the same tensor
/// names; report it at the second. Collisions through `flatten` depend on the flattened
/// type and are caught at run time by `TensorBatch::insert`.
fn check_duplicate_names(cx: &mut Ctxt, fields: &[Field<'_>]) {
    let mut seen = BTreeSet::new();
    for field in fields {
        if field.is_skipped() || field.is_flattened() {
            continue;
        }
        let name = field.name();
        if seen.contains(&name) {
            let message = format!("duplicate tensor name `{name}`");
            match &field.attrs.rename {
                Some(rename) => cx.error_spanned_by(&rename.value, message),
                None => match &field.original.ident {
                    Some(ident) => cx.error_spanned_by(ident, message),
                    None => cx.error_spanned_by(&field.original.ty, message),
                },
            }
        } else {
            seen.insert(name);
        }
    }
}
