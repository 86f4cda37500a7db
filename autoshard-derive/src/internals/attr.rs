//! Parsing of the macros' own attributes into plain structs: `#[entity(...)]`, `#[id]`,
//! `#[parent]`, `#[shardable(...)]`, the arguments of `#[autoshard::sharded(...)]`,
//! `#[shard_method]` and `#[shard_fold(...)]`. Every value goes through an [`Attr`]
//! slot, the one place that reports a duplicate, at the second token. Errors go to the
//! [`Ctxt`], spanned on the offending token; no cross-field rule is checked here (that
//! is `check.rs`).

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::{Attribute, Expr, Ident, Lit, LitStr, Meta, Path};

use super::ctxt::Ctxt;
use super::symbol::{
    CONSTRUCTOR, ENTITY, FOLD, GROUP_SHARDS, ID, KIND, MAX, MIN, NEUTRAL, PARENT, SHARDABLE,
    SHARDED, SHARDS, Symbol,
};

/// One value of an attribute or option; a second `set` reports a duplicate.
pub struct Attr<'c, T> {
    cx: &'c Ctxt,
    duplicate: String,
    value: Option<T>,
}

impl<'c, T> Attr<'c, T> {
    /// The slot of option `name` of attribute `attr`: "duplicate `attr` option `name`".
    fn option(cx: &'c Ctxt, attr: Symbol, name: Symbol) -> Self {
        Attr {
            cx,
            duplicate: format!("duplicate `{attr}` option `{name}`"),
            value: None,
        }
    }

    /// The slot of a field attribute: "duplicate `#[name]` attribute on one field".
    fn field_attribute(cx: &'c Ctxt, name: Symbol) -> Self {
        Attr {
            cx,
            duplicate: format!("duplicate `#[{name}]` attribute on one field"),
            value: None,
        }
    }

    /// Stores `value`, or reports a duplicate on `tokens` and keeps the first value.
    fn set<A: ToTokens>(&mut self, tokens: A, value: T) {
        if self.value.is_some() {
            self.cx.error_spanned_by(tokens, &self.duplicate);
        } else {
            self.value = Some(value);
        }
    }

    /// Marks the slot as given without a usable value: a later one is still a duplicate.
    fn set_seen<A: ToTokens>(&mut self, tokens: A)
    where
        T: Default,
    {
        self.set(tokens, T::default());
    }

    fn get(self) -> Option<T> {
        self.value
    }
}

/// Options of `#[entity(...)]` on the struct.
#[derive(Default)]
pub struct EntityAttr {
    /// `kind = "..."`: overrides the document kind.
    pub kind: Option<LitStr>,
    /// `parent = Root`: this kind is a child of `Root`'s entity group.
    pub parent: Option<Path>,
    /// `group_shards = K`: the value's tokens (for spans) and `K`, the root's group spread
    /// over `K >= 1` sub-groups (`None` when the value was rejected).
    pub group_shards: Option<(TokenStream, Option<u32>)>,
}

impl EntityAttr {
    pub fn from_attrs(cx: &Ctxt, attrs: &[Attribute]) -> Self {
        let mut kind = Attr::option(cx, ENTITY, KIND);
        let mut parent = Attr::option(cx, ENTITY, PARENT);
        let mut group_shards = Attr::option(cx, ENTITY, GROUP_SHARDS);
        for attr in attrs.iter().filter(|attr| attr.path() == ENTITY) {
            let result = attr.parse_nested_meta(|meta| {
                if meta.path == KIND {
                    let value: Expr = meta.value()?.parse()?;
                    match value {
                        Expr::Lit(syn::ExprLit {
                            lit: Lit::Str(lit), ..
                        }) => kind.set(&meta.path, lit),
                        other => cx.error_spanned_by(
                            other,
                            "`kind` takes a string literal: `#[entity(kind = \"Question\")]`",
                        ),
                    }
                } else if meta.path == PARENT {
                    parent.set(&meta.path, meta.value()?.parse::<Path>()?);
                } else if meta.path == GROUP_SHARDS {
                    let value: Expr = meta.value()?.parse()?;
                    let shards = parse_positive_count(
                        cx,
                        &value,
                        GROUP_SHARDS,
                        "`group_shards` must be an integer literal such as `group_shards = 8`: \
                         the number of sub-groups the entity group is spread over",
                        "`group_shards` must be at least 1; `group_shards = 1` (the default) \
                         is a plain entity group",
                    );
                    group_shards.set(&meta.path, (value.into_token_stream(), shards));
                } else {
                    return Err(unknown(
                        &meta,
                        ENTITY,
                        "expected `kind`, `parent` or `group_shards`",
                    ));
                }
                Ok(())
            });
            if let Err(error) = result {
                cx.syn_error(error);
            }
        }
        EntityAttr {
            kind: kind.get(),
            parent: parent.get(),
            group_shards: group_shards.get(),
        }
    }
}

/// The helper attributes of one field.
pub struct FieldAttrs<'a> {
    /// `#[id]`.
    pub id: Option<&'a Attribute>,
    /// `#[parent]`: the field holds the parent's id.
    pub parent: Option<&'a Attribute>,
    /// `#[shardable(...)]`.
    pub shardable: Option<ShardableAttr<'a>>,
}

impl<'a> FieldAttrs<'a> {
    pub fn from_attrs(cx: &Ctxt, attrs: &'a [Attribute]) -> Self {
        let mut id = Attr::field_attribute(cx, ID);
        let mut parent = Attr::field_attribute(cx, PARENT);
        let mut shardable = Attr::field_attribute(cx, SHARDABLE);
        for attr in attrs {
            let path = attr.path();
            if path == ID {
                if !matches!(attr.meta, Meta::Path(_)) {
                    cx.error_spanned_by(&attr.meta, "`#[id]` takes no arguments; write `#[id]`");
                }
                id.set(attr, attr);
            } else if path == PARENT {
                if !matches!(attr.meta, Meta::Path(_)) {
                    cx.error_spanned_by(
                        &attr.meta,
                        "`#[parent]` takes no arguments; name the parent kind on the struct \
                         with `#[entity(parent = Question)]`",
                    );
                }
                parent.set(attr, attr);
            } else if path == SHARDABLE {
                if shardable.value.is_some() {
                    shardable.set(attr, ShardableAttr::empty(attr));
                } else {
                    shardable.set(attr, ShardableAttr::parse(cx, attr));
                }
            }
        }
        FieldAttrs {
            id: id.get(),
            parent: parent.get(),
            shardable: shardable.get(),
        }
    }
}

/// A fold named by `#[shardable(fold = ...)]`, which the store applies itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuiltinFold {
    Sum,
    Max,
    Min,
    Union,
}

impl BuiltinFold {
    /// The folds by the name the annotation uses.
    const ALL: [(&'static str, BuiltinFold); 4] = [
        ("sum", BuiltinFold::Sum),
        ("max", BuiltinFold::Max),
        ("min", BuiltinFold::Min),
        ("union", BuiltinFold::Union),
    ];

    /// Whether the fold has a neutral element every type it takes agrees on (`0`, the
    /// empty set: the type's `Default`), so `neutral` may be left out.
    pub fn default_is_neutral(self) -> bool {
        matches!(self, BuiltinFold::Sum | BuiltinFold::Union)
    }

    /// The fold's name in the annotation.
    pub fn name(self) -> &'static str {
        BuiltinFold::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map_or("sum", |(name, _)| name)
    }
}

/// Options of `#[shardable(neutral = EXPR, shards = N, fold = F)]` on a field.
pub struct ShardableAttr<'a> {
    /// The attribute itself, for spans.
    pub attr: &'a Attribute,
    /// `neutral = EXPR`: the identity of the property's fold.
    pub neutral: Option<Expr>,
    /// `shards = N`: static sharding over `N >= 1` shards; `None` is dynamic sharding
    /// (or a rejected value). With the literal, for spans.
    pub shards: Option<(Expr, u32)>,
    /// `min = N`: the fewest shards a reshard leaves, with its literal.
    pub min: Option<(Expr, u32)>,
    /// `max = N`: the most shards a reshard gives, with its literal.
    pub max: Option<(Expr, u32)>,
    /// `fold = sum | max | min | union`: a built-in fold, and the tokens naming it.
    pub fold: Option<(syn::Path, BuiltinFold)>,
    /// Whether a `fold` was written that names no built-in fold (already reported).
    pub unknown_fold: bool,
}

impl<'a> ShardableAttr<'a> {
    fn empty(attr: &'a Attribute) -> Self {
        ShardableAttr {
            attr,
            neutral: None,
            shards: None,
            min: None,
            max: None,
            fold: None,
            unknown_fold: false,
        }
    }

    fn parse(cx: &Ctxt, attr: &'a Attribute) -> Self {
        if matches!(attr.meta, Meta::Path(_)) {
            // `#[shardable]` alone: the missing `neutral` is reported by `check`.
            return ShardableAttr::empty(attr);
        }
        let mut neutral = Attr::option(cx, SHARDABLE, NEUTRAL);
        let mut shards: Attr<Option<(Expr, u32)>> = Attr::option(cx, SHARDABLE, SHARDS);
        let mut min: Attr<Option<(Expr, u32)>> = Attr::option(cx, SHARDABLE, MIN);
        let mut max: Attr<Option<(Expr, u32)>> = Attr::option(cx, SHARDABLE, MAX);
        let mut fold: Attr<Option<(syn::Path, BuiltinFold)>> = Attr::option(cx, SHARDABLE, FOLD);
        let result = attr.parse_nested_meta(|meta| {
            if meta.path == NEUTRAL {
                neutral.set(&meta.path, meta.value()?.parse::<Expr>()?);
            } else if meta.path == SHARDS {
                let value: Expr = meta.value()?.parse()?;
                let count = parse_positive_count(
                    cx,
                    &value,
                    SHARDS,
                    "`shards` must be an integer literal such as `shards = 10`; \
                     leave `shards` out to shard dynamically",
                    "`shards` must be at least 1; leave `shards` out to shard dynamically",
                );
                match count {
                    Some(count) => shards.set(&meta.path, Some((value, count))),
                    None => shards.set_seen(&meta.path),
                }
            } else if meta.path == MIN || meta.path == MAX {
                let (bound, option, example) = if meta.path == MIN {
                    (&mut min, MIN, "min = 1")
                } else {
                    (&mut max, MAX, "max = 64")
                };
                let value: Expr = meta.value()?.parse()?;
                let count = parse_positive_count(
                    cx,
                    &value,
                    option,
                    &format!("`{option}` must be an integer literal such as `{example}`"),
                    &format!("`{option}` must be at least 1: an entity has at least one shard"),
                );
                match count {
                    Some(count) => bound.set(&meta.path, Some((value, count))),
                    None => bound.set_seen(&meta.path),
                }
            } else if meta.path == FOLD {
                let name: syn::Path = meta.value()?.parse()?;
                let known = BuiltinFold::ALL
                    .iter()
                    .find(|(text, _)| name.is_ident(text));
                if let Some(&(_, builtin)) = known {
                    fold.set(&meta.path, Some((name, builtin)));
                } else {
                    cx.error_spanned_by(
                        &name,
                        "expected `fold = sum`, `max`, `min` or `union` (folds the store \
                         applies itself); for another fold leave `fold` out and write a \
                         `#[shard_fold]` function",
                    );
                    fold.set_seen(&meta.path);
                }
            } else {
                return Err(unknown(
                    &meta,
                    SHARDABLE,
                    "expected `neutral`, `shards`, `min`, `max` or `fold`",
                ));
            }
            Ok(())
        });
        if let Err(error) = result {
            cx.syn_error(error);
        }
        ShardableAttr {
            attr,
            neutral: neutral.get(),
            shards: shards.get().flatten(),
            min: min.get().flatten(),
            max: max.get().flatten(),
            unknown_fold: fold.value.as_ref().is_some_and(Option::is_none),
            fold: fold.get().flatten(),
        }
    }
}

/// Parses the value of a count option (`shards`, `group_shards`): an integer literal from
/// 1 to `u32::MAX`. Reports `not_literal` on the expression, `zero` on a `0` literal.
fn parse_positive_count(
    cx: &Ctxt,
    value: &Expr,
    option: Symbol,
    not_literal: &str,
    zero: &str,
) -> Option<u32> {
    let Expr::Lit(syn::ExprLit {
        lit: Lit::Int(lit), ..
    }) = value
    else {
        cx.error_spanned_by(value, not_literal);
        return None;
    };
    match lit.base10_parse::<u32>() {
        Ok(0) => {
            cx.error_spanned_by(lit, zero);
            None
        }
        Ok(count) => Some(count),
        Err(_) => {
            cx.error_spanned_by(lit, format!("`{option}` must fit in a `u32`"));
            None
        }
    }
}

/// What `constructor = ...` asks of `#[autoshard::sharded]`.
pub enum Constructor {
    /// Generate `fn <name>(<every field>) -> Self`.
    Named(Ident),
    /// `constructor = false`: generate none.
    Skip,
}

/// Arguments of `#[autoshard::sharded(...)]`.
pub struct ShardedArgs {
    pub constructor: Constructor,
}

impl ShardedArgs {
    pub fn parse(cx: &Ctxt, args: TokenStream) -> Self {
        let mut constructor = Attr::option(cx, SHARDED, CONSTRUCTOR);
        let parser = syn::meta::parser(|meta| {
            if meta.path == CONSTRUCTOR {
                let value: Expr = meta.value()?.parse()?;
                match value {
                    Expr::Lit(syn::ExprLit {
                        lit: Lit::Bool(b), ..
                    }) if !b.value => constructor.set(&meta.path, Constructor::Skip),
                    Expr::Path(path) if path.path.get_ident().is_some() => {
                        if let Some(ident) = path.path.get_ident() {
                            constructor.set(&meta.path, Constructor::Named(ident.clone()));
                        }
                    }
                    other => cx.error_spanned_by(
                        other,
                        "`constructor` takes a function name (`constructor = with_fields`) \
                         or `false` (no constructor)",
                    ),
                }
                Ok(())
            } else {
                Err(unknown(&meta, SHARDED, "expected `constructor`"))
            }
        });
        if let Err(error) = syn::parse::Parser::parse2(parser, args) {
            cx.syn_error(error);
        }
        ShardedArgs {
            constructor: constructor.get().unwrap_or_else(|| {
                Constructor::Named(Ident::new("new", proc_macro2::Span::call_site()))
            }),
        }
    }
}

/// Arguments of `#[shard_fold(...)]`: the property it folds, when not given by its name.
/// With several names, the first is taken after reporting the error, so the fold still
/// counts for it.
pub fn shard_fold_args(cx: &Ctxt, args: TokenStream) -> Option<Ident> {
    if args.is_empty() {
        return None;
    }
    if let Ok(ident) = syn::parse2::<Ident>(args.clone()) {
        return Some(ident);
    }
    let names = syn::parse::Parser::parse2(
        syn::punctuated::Punctuated::<Ident, syn::Token![,]>::parse_terminated,
        args.clone(),
    );
    match names {
        Ok(names) if names.len() > 1 => {
            cx.error_spanned_by(
                &args,
                "`#[shard_fold(...)]` folds one sharded field; write one `#[shard_fold]` \
                 function per field",
            );
            names.into_iter().next()
        }
        _ => {
            cx.error_spanned_by(
                args,
                "`#[shard_fold(...)]` takes the name of the sharded field it folds, \
                 e.g. `#[shard_fold(votes)]`",
            );
            None
        }
    }
}

/// Whether `#[shard_method]` got arguments (it takes none).
pub fn shard_method_args(cx: &Ctxt, args: TokenStream) {
    if !args.is_empty() {
        cx.error_spanned_by(args, "`#[shard_method]` takes no arguments");
    }
}

fn unknown(meta: &ParseNestedMeta, attr: Symbol, expected: &str) -> syn::Error {
    let path = &meta.path;
    let name = quote::quote!(#path).to_string().replace(' ', "");
    meta.error(format_args!("unknown `{attr}` option `{name}`; {expected}"))
}
