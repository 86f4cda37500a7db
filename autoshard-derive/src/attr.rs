//! Parsing of the macros' own attributes into plain structs: `#[entity(...)]`, `#[id]`,
//! `#[shardable(...)]`, the arguments of `#[autoshard::sharded(...)]` and
//! `#[shard_fold(...)]`. Errors go to the [`Ctxt`], spanned on the offending token; no
//! cross-field rule is checked here (that is `check.rs`).

use syn::meta::ParseNestedMeta;
use syn::{Attribute, Expr, Ident, Lit, LitStr, Meta};

use crate::ctxt::Ctxt;

/// The helper attribute `#[autoshard::sharded]` leaves on the struct for
/// `#[derive(Entity)]`, which registers it, so the derive knows the shadow fields exist.
pub const SHARDED_MARKER: &str = "__autoshard_sharded";

/// Options of `#[entity(...)]` on the struct. New options (entity groups) go here.
#[derive(Default)]
pub struct EntityAttr {
    /// `kind = "..."`: overrides the document kind.
    pub kind: Option<LitStr>,
    /// `parent = Root`, `group_shards = K`: entity groups (`group.rs`).
    pub group: crate::group::GroupAttr,
}

impl EntityAttr {
    pub fn from_attrs(cx: &mut Ctxt, attrs: &[Attribute]) -> Self {
        let mut out = EntityAttr::default();
        for attr in attrs.iter().filter(|attr| attr.path().is_ident("entity")) {
            let result = attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("kind") {
                    let kind: LitStr = meta.value()?.parse()?;
                    if kind.value().is_empty() {
                        cx.error_spanned_by(&kind, "`kind` must not be empty");
                    }
                    if out.kind.is_some() {
                        cx.error_spanned_by(&meta.path, "duplicate `entity` option `kind`");
                    }
                    out.kind = Some(kind);
                    Ok(())
                } else if let Some(result) =
                    crate::group::parse_entity_option(cx, &meta, &mut out.group)
                {
                    result
                } else {
                    Err(unknown(
                        &meta,
                        "entity",
                        "expected `kind`, `parent` or `group_shards`",
                    ))
                }
            });
            if let Err(error) = result {
                cx.syn_error(error);
            }
        }
        out
    }
}

/// Whether the field carries `#[id]`; an `#[id]` with arguments is an error.
pub fn id_attr<'a>(cx: &mut Ctxt, attrs: &'a [Attribute]) -> Option<&'a Attribute> {
    let attr = attrs.iter().find(|attr| attr.path().is_ident("id"))?;
    if !matches!(attr.meta, Meta::Path(_)) {
        cx.error_spanned_by(&attr.meta, "`#[id]` takes no arguments; write `#[id]`");
    }
    Some(attr)
}

/// Options of `#[shardable(neutral = EXPR, shards = N)]` on a field.
pub struct ShardableAttr<'a> {
    /// The attribute itself, for spans.
    pub attr: &'a Attribute,
    /// `neutral = EXPR`: the identity of the property's fold.
    pub neutral: Option<Expr>,
    /// `shards = N`: static sharding over `N >= 1` shards; `None` is dynamic sharding.
    pub shards: Option<u32>,
}

impl<'a> ShardableAttr<'a> {
    /// The field's `#[shardable]` attribute, parsed; `None` when the field has none.
    pub fn from_attrs(cx: &mut Ctxt, attrs: &'a [Attribute]) -> Option<Self> {
        let mut found = attrs
            .iter()
            .filter(|attr| attr.path().is_ident("shardable"));
        let attr = found.next()?;
        for extra in found {
            cx.error_spanned_by(extra, "duplicate `#[shardable]` attribute on one field");
        }
        let mut out = ShardableAttr {
            attr,
            neutral: None,
            shards: None,
        };
        if matches!(attr.meta, Meta::Path(_)) {
            // `#[shardable]` alone: the missing `neutral` is reported by `check`.
            return Some(out);
        }
        let mut shards_seen = false;
        let result = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("neutral") {
                let neutral: Expr = meta.value()?.parse()?;
                if out.neutral.is_some() {
                    cx.error_spanned_by(&meta.path, "duplicate `shardable` option `neutral`");
                }
                out.neutral = Some(neutral);
                Ok(())
            } else if meta.path.is_ident("shards") {
                let value: Expr = meta.value()?.parse()?;
                if shards_seen {
                    cx.error_spanned_by(&meta.path, "duplicate `shardable` option `shards`");
                }
                shards_seen = true;
                out.shards = parse_shards(cx, &value);
                Ok(())
            } else {
                Err(unknown(
                    &meta,
                    "shardable",
                    "expected `neutral` or `shards`",
                ))
            }
        });
        if let Err(error) = result {
            cx.syn_error(error);
        }
        Some(out)
    }
}

fn parse_shards(cx: &mut Ctxt, value: &Expr) -> Option<u32> {
    parse_positive_count(
        cx,
        value,
        "shards",
        "`shards` must be an integer literal such as `shards = 10`; \
         leave `shards` out to shard dynamically",
        "`shards` must be at least 1; leave `shards` out to shard dynamically",
    )
}

/// Parses the value of a count option (`shards`, `group_shards`): an integer literal from
/// 1 to `u32::MAX`. Reports `not_literal` on the expression, `zero` on a `0` literal.
pub fn parse_positive_count(
    cx: &mut Ctxt,
    value: &Expr,
    option: &str,
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
    pub fn parse(cx: &mut Ctxt, args: proc_macro2::TokenStream) -> Self {
        let mut out = ShardedArgs {
            constructor: Constructor::Named(Ident::new("new", proc_macro2::Span::call_site())),
        };
        let mut seen = false;
        let parser = syn::meta::parser(|meta| {
            if meta.path.is_ident("constructor") {
                let value: Expr = meta.value()?.parse()?;
                if seen {
                    cx.error_spanned_by(&meta.path, "duplicate `sharded` option `constructor`");
                }
                seen = true;
                match value {
                    Expr::Lit(syn::ExprLit {
                        lit: Lit::Bool(b), ..
                    }) if !b.value => out.constructor = Constructor::Skip,
                    Expr::Path(path) if path.path.get_ident().is_some() => {
                        if let Some(ident) = path.path.get_ident() {
                            out.constructor = Constructor::Named(ident.clone());
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
                Err(unknown(&meta, "sharded", "expected `constructor`"))
            }
        });
        if let Err(error) = syn::parse::Parser::parse2(parser, args) {
            cx.syn_error(error);
        }
        out
    }
}

/// Arguments of `#[shard_fold(...)]`: the property it folds, when not given by its name.
pub fn shard_fold_args(cx: &mut Ctxt, args: proc_macro2::TokenStream) -> Option<Ident> {
    if args.is_empty() {
        return None;
    }
    if let Ok(ident) = syn::parse2::<Ident>(args.clone()) {
        Some(ident)
    } else {
        cx.error_spanned_by(
            args,
            "`#[shard_fold(...)]` takes the name of the sharded field it folds, \
             e.g. `#[shard_fold(votes)]`",
        );
        None
    }
}

/// Whether `#[shard_method]` got arguments (it takes none).
pub fn shard_method_args(cx: &mut Ctxt, args: proc_macro2::TokenStream) {
    if !args.is_empty() {
        cx.error_spanned_by(args, "`#[shard_method]` takes no arguments");
    }
}

fn unknown(meta: &ParseNestedMeta, attr: &str, expected: &str) -> syn::Error {
    let path = &meta.path;
    let name = quote::quote!(#path).to_string().replace(' ', "");
    meta.error(format_args!("unknown `{attr}` option `{name}`; {expected}"))
}
