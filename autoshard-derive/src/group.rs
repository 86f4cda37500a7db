//! Entity groups in `#[derive(Entity)]`, all three phases for this one feature so the rest
//! of the derive only calls in: parsing `#[entity(parent = Root)]`,
//! `#[entity(group_shards = K)]` and the `#[parent]` field attribute; the rules across
//! them; and the generated items (the group consts and `parent_key` of the `Entity` impl,
//! the `Child` impl).

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, Meta, Path};

use crate::ast::Entity;
use crate::ctxt::Ctxt;

/// The group options of `#[entity(...)]`.
#[derive(Default)]
pub struct GroupAttr {
    /// `parent = Root`: this kind is a child of `Root`'s entity group.
    pub parent: Option<Path>,
    /// `group_shards = K`: the value's tokens (for spans) and `K`, the root's group
    /// spread over `K >= 1` sub-groups (`None` when the value was rejected).
    pub group_shards: Option<(TokenStream, Option<u32>)>,
}

/// Parses `meta` if it is a group option of `#[entity(...)]`; `None` when it is not one.
pub fn parse_entity_option(
    cx: &mut Ctxt,
    meta: &ParseNestedMeta,
    out: &mut GroupAttr,
) -> Option<syn::Result<()>> {
    if meta.path.is_ident("parent") {
        Some(
            meta.value()
                .and_then(syn::parse::ParseBuffer::parse::<Path>)
                .map(|parent| {
                    if out.parent.is_some() {
                        cx.error_spanned_by(&meta.path, "duplicate `entity` option `parent`");
                    }
                    out.parent = Some(parent);
                }),
        )
    } else if meta.path.is_ident("group_shards") {
        Some(
            meta.value()
                .and_then(syn::parse::ParseBuffer::parse::<Expr>)
                .map(|value| {
                    if out.group_shards.is_some() {
                        cx.error_spanned_by(&meta.path, "duplicate `entity` option `group_shards`");
                    }
                    let shards = parse_group_shards(cx, &value);
                    out.group_shards = Some((quote!(#value), shards));
                }),
        )
    } else {
        None
    }
}

fn parse_group_shards(cx: &mut Ctxt, value: &Expr) -> Option<u32> {
    crate::attr::parse_positive_count(
        cx,
        value,
        "group_shards",
        "`group_shards` must be an integer literal such as `group_shards = 8`: \
         the number of sub-groups the entity group is spread over",
        "`group_shards` must be at least 1; `group_shards = 1` (the default) is a \
         plain entity group",
    )
}

/// The field's `#[parent]` attribute, if any; arguments and repeats are errors.
pub fn parent_attr<'a>(cx: &mut Ctxt, attrs: &'a [Attribute]) -> Option<&'a Attribute> {
    let mut found = attrs.iter().filter(|attr| attr.path().is_ident("parent"));
    let attr = found.next()?;
    for extra in found {
        cx.error_spanned_by(extra, "duplicate `#[parent]` attribute on one field");
    }
    if !matches!(attr.meta, Meta::Path(_)) {
        cx.error_spanned_by(
            &attr.meta,
            "`#[parent]` takes no arguments; name the parent kind on the struct with \
             `#[entity(parent = Question)]`",
        );
    }
    Some(attr)
}

/// Rules across the group options and the `#[parent]` fields.
pub fn check(cx: &mut Ctxt, entity: &Entity) {
    let group = &entity.attrs.group;
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
    match (&group.parent, first) {
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
    if let (Some(_), Some((shards, _))) = (&group.parent, &group.group_shards) {
        cx.error_spanned_by(
            shards,
            "`group_shards` belongs on the root entity, not on a child: the child's group is \
             its root's, spread over the root's `group_shards` sub-groups",
        );
    }
    if group.parent.is_some() {
        if let Some((_, shardable)) = entity.sharded_fields().next() {
            cx.error_spanned_by(
                shardable.attr,
                "a child entity (`#[entity(parent = ...)]`) cannot have `#[shardable]` \
                 fields; shard the group instead with `group_shards` on the root",
            );
        }
    }
}

/// Items of the `Entity` impl and items beside it.
#[derive(Default)]
pub struct Expanded {
    pub impl_items: TokenStream,
    pub beside: TokenStream,
}

pub fn expand(entity: &Entity) -> Expanded {
    let group = &entity.attrs.group;
    let mut out = Expanded::default();
    if let Some((_, Some(shards))) = &group.group_shards {
        out.impl_items = quote!(const GROUP_SHARDS: u32 = #shards;);
    }
    let ident = entity.ident;
    let (Some(parent), Some(field)) = (
        &group.parent,
        entity.fields.iter().find(|f| f.parent.is_some()),
    ) else {
        out.beside = quote! {
            #[automatically_derived]
            impl ::autoshard::__private::Root for #ident {}
        };
        return out;
    };
    let kind = entity.kind();
    let parent_name = quote!(#parent).to_string().replace(' ', "");
    let field_ident = field.ident;
    let field_ty = field.ty;
    // Everything but `type Parent` names the parent through `<Self as Child>::Parent`, so
    // a parent that is not an entity is reported once, on the `parent = ...` path.
    let parent_entity = quote! {
        <<#ident as ::autoshard::__private::Child>::Parent as ::autoshard::__private::Entity>
    };
    // The field's type is checked against the parent's id type through a trait whose
    // `on_unimplemented` message says what to fix, spanned on the field's type.
    let parent_id = quote_spanned! {field_ty.span()=>
        <#field_ty as ::autoshard::__private::ParentId<
            <Self::Parent as ::autoshard::__private::Entity>::Id,
        >>::as_parent_id(&self.#field_ident)
    };
    let nested = format!(
        "`{kind}` names `{parent_name}` as its parent, but `{parent_name}` is itself a child; \
         entity groups have one level: the parent must be a root entity"
    );
    let nested_check = quote_spanned! {parent.span()=>
        const _: () = ::core::assert!(#parent_entity::PARENT_KIND.is_none(), #nested);
    };
    out.impl_items = quote! {
        const GROUP_SHARDS: u32 = #parent_entity::GROUP_SHARDS;
        const PARENT_KIND: ::core::option::Option<&'static str> =
            ::core::option::Option::Some(#parent_entity::KIND);

        fn parent_key(&self) -> ::core::option::Option<::autoshard::__private::Key> {
            ::core::option::Option::Some(#parent_entity::key_for(
                <Self as ::autoshard::__private::Child>::parent_id(self),
            ))
        }
    };
    out.beside = quote! {
        #[automatically_derived]
        impl ::autoshard::__private::Child for #ident {
            type Parent = #parent;

            fn parent_id(
                &self,
            ) -> &<Self::Parent as ::autoshard::__private::Entity>::Id {
                #parent_id
            }
        }

        #nested_check
    };
    out
}
