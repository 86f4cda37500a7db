//! Every rule across fields and attributes, checked on the model before expansion: the
//! item's shape, exactly one `#[id]`, `#[shardable]` only under `#[autoshard::sharded]`, a
//! neutral value for every sharded field, a built-in fold only on a type it can take (as
//! far as names tell), the kind, reserved names, and the entity-group rules. Nothing is
//! generated here.

use quote::quote;
use syn::{Generics, Type};

use super::ast::Entity;
use super::attr::{BuiltinFold, ShardableAttr};
use super::ctxt::Ctxt;
use super::names::HIDDEN_PREFIX;

pub fn check(cx: &Ctxt, entity: &Entity) {
    generics(cx, &entity.input.generics, "#[derive(Entity)]");
    kind(cx, entity);
    reserved_field_names(cx, entity);
    id(cx, entity);
    sharded(cx, entity);
    group(cx, entity);
}

/// Entities have no generic parameters (both the derive and the rewrite say so).
pub fn generics(cx: &Ctxt, generics: &Generics, what: &str) {
    if !generics.params.is_empty() || generics.where_clause.is_some() {
        cx.error_spanned_by(
            generics,
            format_args!(
                "`{what}` does not support generic structs; give the entity concrete field types"
            ),
        );
    }
}

fn kind(cx: &Ctxt, entity: &Entity) {
    let Some(kind) = &entity.attrs.kind else {
        return;
    };
    let value = kind.value();
    if value.is_empty() {
        cx.error_spanned_by(kind, "`kind` must not be empty");
    } else if value.starts_with('~') {
        cx.error_spanned_by(
            kind,
            "a `kind` must not start with `~`: such kinds name autoshard's own documents \
             (shards, sub-groups)",
        );
    }
}

fn reserved_field_names(cx: &Ctxt, entity: &Entity) {
    for field in entity.fields.iter().filter(|f| !f.hidden) {
        reserved_field_name(cx, field.ident);
    }
}

/// Reports a user field whose name the macros keep for the fields they generate (the
/// derive for any entity, `#[autoshard::sharded]` before it adds its own, so that a
/// clash is one error on the user's field, not a duplicate generated field).
pub fn reserved_field_name(cx: &Ctxt, ident: &syn::Ident) {
    if ident.to_string().starts_with(HIDDEN_PREFIX) {
        cx.error_spanned_by(
            ident,
            format_args!(
                "field names starting with `{HIDDEN_PREFIX}` are reserved for the fields \
                 the autoshard macros generate; rename `{ident}`"
            ),
        );
    }
}

fn id(cx: &Ctxt, entity: &Entity) {
    let mut ids = entity.fields.iter().filter(|f| f.id.is_some());
    let Some(first) = ids.next() else {
        cx.error_spanned_by(
            entity.ident,
            format_args!(
                "`{}` has no `#[id]` field; mark the field that identifies an entity with `#[id]` \
                 (an integer, `String` or `uuid::Uuid`)",
                entity.ident
            ),
        );
        return;
    };
    for extra in ids {
        cx.error_spanned_by(
            extra.id,
            format_args!(
                "duplicate `#[id]`: `{}` is already the id of `{}`; an entity has exactly one \
                 `#[id]` field",
                first.ident, entity.ident
            ),
        );
    }
    for field in &entity.fields {
        if let (Some(_), Some(shardable)) = (field.id, &field.shardable) {
            cx.error_spanned_by(
                shardable.attr,
                "the `#[id]` field cannot be `#[shardable]`: shards are found by the id",
            );
        }
    }
}

fn sharded(cx: &Ctxt, entity: &Entity) {
    if entity.sharded.is_none() {
        if let Some((_, shardable)) = entity.sharded_fields().next() {
            cx.error_spanned_by(
                shardable.attr,
                format_args!(
                    "`#[shardable]` fields need `#[autoshard::sharded]` on the struct: \
                     add `#[autoshard::sharded]` above `#[derive(Entity)]` on `{}`, \
                     it adds the fields that hold each property's unsaved shard value",
                    entity.ident
                ),
            );
        }
        return;
    }
    for (field, shardable) in entity.sharded_fields() {
        shard_bounds(cx, shardable);
        if let Some((_, fold)) = &shardable.fold {
            builtin_fold_type(cx, field.ty, *fold);
        }
    }
    for (field, shardable) in entity.sharded_fields() {
        let default_neutral = shardable
            .fold
            .as_ref()
            .is_some_and(|(_, fold)| fold.default_is_neutral());
        if shardable.neutral.is_none() && !default_neutral && !shardable.unknown_fold {
            cx.error_spanned_by(
                shardable.attr,
                format_args!(
                    "`#[shardable]` needs `neutral = ...`: the value of `{}` that its fold \
                     leaves unchanged, e.g. `neutral = 0` for a sum{}",
                    field.ident,
                    match &shardable.fold {
                        Some((_, fold)) => format!(
                            " (`fold = {}` has no neutral value for every type)",
                            fold.name()
                        ),
                        None => String::new(),
                    }
                ),
            );
        }
    }
}

/// The integer types `fold = sum` takes (the runtime's `IntegerFold` impls).
const INTEGERS: [&str; 10] = [
    "i8", "i16", "i32", "i64", "isize", "u8", "u16", "u32", "u64", "usize",
];

/// The set types `fold = union` takes (the runtime's `UnionFold` impls).
const SETS: [&str; 2] = ["BTreeSet", "HashSet"];

/// Standard types that are neither integers `fold = sum` takes nor sets.
const OTHER_STD_TYPES: [&str; 19] = [
    "String", "str", "f32", "f64", "bool", "char", "i128", "u128", "Vec", "VecDeque", "HashMap",
    "BTreeMap", "Option", "Box", "Rc", "Arc", "Cow", "Duration", "Value",
];

/// `fold = sum` on a type that is plainly not an integer of at most 64 bits, or
/// `fold = union` on one that is plainly not a set: one error on the type. A type the
/// name does not tell (an alias, a type of the user's) is left to the compiler, which
/// reports it through the fold's trait (`IntegerFold`, `UnionFold`) on the same tokens.
fn builtin_fold_type(cx: &Ctxt, ty: &Type, fold: BuiltinFold) {
    let name = match ty {
        Type::Path(path) if path.qself.is_none() => path
            .path
            .segments
            .last()
            .map(|segment| segment.ident.to_string()),
        Type::Group(_) | Type::Paren(_) | Type::Macro(_) | Type::Verbatim(_) => return,
        // References, tuples, arrays, slices, pointers, functions, trait objects.
        _ => None,
    };
    let known = |list: &[&str]| name.as_deref().is_some_and(|n| list.contains(&n));
    let shown = quote!(#ty)
        .to_string()
        .replace(" < ", "<")
        .replace("< ", "<")
        .replace(" >", ">")
        .replace(" ,", ",")
        .replace("& ", "&")
        .replace(" :: ", "::");
    match fold {
        BuiltinFold::Sum if name.is_none() || known(&OTHER_STD_TYPES) || known(&SETS) => {
            cx.error_spanned_by(
                ty,
                format_args!(
                    "`fold = sum` needs an integer field of at most 64 bits (`i8` to `i64`, \
                     `u8` to `u64`, `isize`, `usize`); `{shown}` is not one: for another \
                     fold leave `fold` out and write a `#[shard_fold]` function"
                ),
            );
        }
        BuiltinFold::Union if name.is_none() || known(&OTHER_STD_TYPES) || known(&INTEGERS) => {
            cx.error_spanned_by(
                ty,
                format_args!(
                    "`fold = union` needs a set field (`BTreeSet<T>` or `HashSet<T>`); \
                     `{shown}` is not one: for another fold leave `fold` out and write a \
                     `#[shard_fold]` function"
                ),
            );
        }
        _ => {}
    }
}

/// The most shards one property may have: the runtime's `Mapper::MAX_SHARDS`
/// (`tests/ui` pins both sides of it).
const MAX_SHARDS: u32 = 4096;

/// Rules of `shards`, `min` and `max`: bounds only with `shards`, and
/// `min <= shards <= max <= MAX_SHARDS`.
fn shard_bounds(cx: &Ctxt, shardable: &ShardableAttr) {
    let Some((shards_tokens, shards)) = &shardable.shards else {
        for (tokens, _) in shardable.min.iter().chain(&shardable.max) {
            cx.error_spanned_by(
                tokens,
                "`min` and `max` bound a static shard count: add `shards = N` (the count at \
                 insert), or leave them out for dynamic sharding",
            );
        }
        return;
    };
    for (tokens, count) in [
        Some((shards_tokens, *shards)),
        shardable.max.as_ref().map(|(t, c)| (t, *c)),
    ]
    .into_iter()
    .flatten()
    {
        if count > MAX_SHARDS {
            cx.error_spanned_by(
                tokens,
                format_args!("at most {MAX_SHARDS} shards per property (`Mapper::MAX_SHARDS`)"),
            );
        }
    }
    if let Some((tokens, min)) = &shardable.min
        && min > shards
    {
        cx.error_spanned_by(
            tokens,
            format_args!("`min = {min}` is above `shards = {shards}`, the count at insert"),
        );
    }
    if let Some((tokens, max)) = &shardable.max
        && max < shards
    {
        cx.error_spanned_by(
            tokens,
            format_args!("`max = {max}` is below `shards = {shards}`, the count at insert"),
        );
    }
}

/// Rules of entity groups: the `#[entity(parent = ..)]` / `group_shards` options and the
/// `#[parent]` fields.
fn group(cx: &Ctxt, entity: &Entity) {
    let attrs = &entity.attrs;
    let mut parents = entity.fields.iter().filter(|f| f.parent.is_some());
    let first = parents.next();
    for extra in parents {
        if let Some(first) = first {
            cx.error_spanned_by(
                extra.parent,
                format_args!(
                    "duplicate `#[parent]`: `{}` already holds the parent's id; a child has \
                     exactly one `#[parent]` field",
                    first.ident
                ),
            );
        }
    }
    match (&attrs.parent, first) {
        (Some(parent), None) => cx.error_spanned_by(
            parent,
            format_args!(
                "`{}` names a parent kind but no field holds the parent's id; mark that \
                 field `#[parent]` (its type is the `#[id]` type of `{}`)",
                entity.ident,
                quote!(#parent).to_string().replace(' ', "")
            ),
        ),
        (None, Some(field)) => cx.error_spanned_by(
            field.parent,
            format_args!(
                "`#[parent]` needs the parent kind on the struct: add \
                 `#[entity(parent = Question)]` (the root entity type) to `{}`",
                entity.ident
            ),
        ),
        _ => {}
    }
    if let Some(field) = first {
        if let Some(id) = field.id {
            cx.error_spanned_by(
                id,
                "the `#[id]` field cannot also be the `#[parent]`: a child has an id of its \
                 own besides its parent's id",
            );
        }
        if let Some(shardable) = &field.shardable {
            cx.error_spanned_by(
                shardable.attr,
                "the `#[parent]` field cannot be `#[shardable]`",
            );
        }
    }
    if let (Some(_), Some((shards, _))) = (&attrs.parent, &attrs.group_shards) {
        cx.error_spanned_by(
            shards,
            "`group_shards` belongs on the root entity, not on a child: the child's group is \
             its root's, spread over the root's `group_shards` sub-groups",
        );
    }
    if attrs.parent.is_some()
        && let Some((_, shardable)) = entity.sharded_fields().next()
    {
        cx.error_spanned_by(
            shardable.attr,
            "a child entity (`#[entity(parent = ...)]`) cannot have `#[shardable]` \
                 fields; shard the group instead with `group_shards` on the root",
        );
    }
}
