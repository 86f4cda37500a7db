//! The intermediate model of an entity struct that `#[derive(Entity)]` expands from,
//! keeping references to the user's tokens for spans, and the checked-once model of each
//! sharded property ([`Property`]) that every generated hook reads. Built from a
//! `syn::DeriveInput` with the attributes parsed by `attr.rs`; rules across fields live in
//! `check.rs`.

use syn::{
    Attribute, Data, DeriveInput, Expr, Fields, GenericArgument, Ident, PathArguments, Type,
};

use super::attr::{BuiltinFold, EntityAttr, FieldAttrs, ShardableAttr};
use super::ctxt::Ctxt;
use super::names;
use super::symbol::{SHARDABLE, SHARDED_MARKER};

pub struct Entity<'a> {
    pub ident: &'a Ident,
    pub input: &'a DeriveInput,
    pub attrs: EntityAttr,
    /// `#[autoshard::sharded]` rewrote the struct (its marker is present).
    pub sharded: Option<&'a Attribute>,
    pub fields: Vec<Field<'a>>,
    /// The `#[shardable]` fields, in declaration order.
    pub properties: Vec<Property<'a>>,
}

pub struct Field<'a> {
    pub ident: &'a Ident,
    pub ty: &'a Type,
    /// The `#[id]` attribute, if any.
    pub id: Option<&'a Attribute>,
    /// The `#[shardable]` attribute, if any.
    pub shardable: Option<ShardableAttr<'a>>,
    /// The `#[parent]` attribute (the field holds the parent's id), if any.
    pub parent: Option<&'a Attribute>,
    /// Added by `#[autoshard::sharded]` (shadow or state); not a property.
    pub hidden: bool,
}

/// How a property is sharded.
#[derive(Clone, Copy)]
pub enum Sharding {
    /// `shards = N`: over `N` shard documents at insert; a reshard keeps the count within
    /// `min = ..` (1 when absent) and `max = ..` (the runtime's default when absent).
    Static {
        shards: u32,
        min: u32,
        max: Option<u32>,
    },
    /// No `shards`: a new shard document per save.
    Dynamic,
}

/// One sharded property: everything its hooks need, computed once.
pub struct Property<'a> {
    /// Its index in `Entity::PROPERTIES`.
    pub index: usize,
    pub ident: &'a Ident,
    pub ty: &'a Type,
    /// The property name (the field name without `r#`).
    pub name: String,
    /// The field that holds its shard value in a shard document: `shard_<name>`.
    pub stored_as: String,
    pub sharding: Sharding,
    /// `neutral = EXPR` (`check` reports it when missing and the fold has no default).
    pub neutral: Option<Expr>,
    /// `fold = ...`: a built-in fold instead of a `#[shard_fold]` function.
    pub builtin: Option<BuiltinFold>,
    /// The hidden shadow field, neutral function and fold.
    pub shadow: Ident,
    pub neutral_fn: Ident,
    pub fold_fn: Ident,
    /// The hash of the name that links a `#[shard_fold]` to it.
    pub hash: u64,
}

impl<'a> Entity<'a> {
    /// The model, or `None` when the input is not a struct with named fields (the error is
    /// in `cx`).
    pub fn from_ast(cx: &Ctxt, input: &'a DeriveInput) -> Option<Self> {
        let sharded = input
            .attrs
            .iter()
            .find(|attr| attr.path() == SHARDED_MARKER);
        let attrs = EntityAttr::from_attrs(cx, &input.attrs);
        let named = named_fields(cx, input)?;
        // The fields `#[autoshard::sharded]` added: one shadow per `#[shardable]` field and
        // the state. A user field that merely starts with the prefix is not one of them.
        let added: Vec<String> = if sharded.is_some() {
            named
                .named
                .iter()
                .filter(|f| f.attrs.iter().any(|a| a.path() == SHARDABLE))
                .filter_map(|f| f.ident.as_ref())
                .map(|i| names::shadow_field(i).to_string())
                .chain([names::state_field().to_string()])
                .collect()
        } else {
            Vec::new()
        };
        let fields: Vec<Field> = named
            .named
            .iter()
            .filter_map(|field| {
                let ident = field.ident.as_ref()?;
                let hidden = added.contains(&ident.to_string());
                if hidden {
                    return Some(Field {
                        ident,
                        ty: &field.ty,
                        id: None,
                        shardable: None,
                        parent: None,
                        hidden,
                    });
                }
                let attrs = FieldAttrs::from_attrs(cx, &field.attrs);
                Some(Field {
                    ident,
                    ty: &field.ty,
                    id: attrs.id,
                    shardable: attrs.shardable,
                    parent: attrs.parent,
                    hidden,
                })
            })
            .collect();
        let properties = fields
            .iter()
            .filter(|f| !f.hidden)
            .filter_map(|f| f.shardable.as_ref().map(|s| (f, s)))
            .enumerate()
            .map(|(index, (field, shardable))| Property {
                index,
                ident: field.ident,
                ty: field.ty,
                name: field.name(),
                stored_as: format!("shard_{}", field.name()),
                sharding: shardable
                    .shards
                    .as_ref()
                    .map_or(Sharding::Dynamic, |&(_, shards)| Sharding::Static {
                        shards,
                        min: shardable.min.as_ref().map_or(1, |(_, min)| *min),
                        max: shardable.max.as_ref().map(|(_, max)| *max),
                    }),
                neutral: shardable.neutral.clone(),
                builtin: shardable.fold.as_ref().map(|(_, fold)| *fold),
                shadow: names::shadow_field(field.ident),
                neutral_fn: names::neutral_fn(field.ident),
                fold_fn: names::fold_fn(field.ident),
                hash: names::property_hash(field.ident),
            })
            .collect();
        Some(Entity {
            ident: &input.ident,
            input,
            attrs,
            sharded,
            fields,
            properties,
        })
    }

    /// The document kind: `#[entity(kind = "...")]` or the struct's name.
    pub fn kind(&self) -> String {
        self.attrs
            .kind
            .as_ref()
            .map_or_else(|| self.ident.to_string(), syn::LitStr::value)
    }

    pub fn id_field(&self) -> Option<&Field<'a>> {
        self.fields.iter().find(|field| field.id.is_some())
    }

    /// The field holding a child's parent id (`#[parent]`), if any.
    pub fn parent_field(&self) -> Option<&Field<'a>> {
        self.fields.iter().find(|field| field.parent.is_some())
    }

    /// Properties of the main document: neither the id, nor sharded, nor hidden.
    pub fn plain_fields(&self) -> impl Iterator<Item = &Field<'a>> {
        self.fields
            .iter()
            .filter(|f| f.id.is_none() && f.shardable.is_none() && !f.hidden)
    }

    /// The `#[shardable]` fields with their attributes, in declaration order.
    pub fn sharded_fields(&self) -> impl Iterator<Item = (&Field<'a>, &ShardableAttr<'a>)> {
        self.fields
            .iter()
            .filter(|f| !f.hidden)
            .filter_map(|f| f.shardable.as_ref().map(|s| (f, s)))
    }
}

/// The named fields of a struct; `None` (with the error in `cx`) for any other item.
fn named_fields<'a>(cx: &Ctxt, input: &'a DeriveInput) -> Option<&'a syn::FieldsNamed> {
    match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(named) => Some(named),
            Fields::Unnamed(fields) => {
                cx.error_spanned_by(
                    fields,
                    "`#[derive(Entity)]` needs named fields (`struct Question { id: u64, .. }`), \
                     so each property has a name in the document",
                );
                None
            }
            Fields::Unit => {
                cx.error_spanned_by(
                    &input.ident,
                    "`#[derive(Entity)]` needs a struct with named fields, \
                     one of them the `#[id]`",
                );
                None
            }
        },
        Data::Enum(data) => {
            cx.error_spanned_by(
                data.enum_token,
                "`#[derive(Entity)]` supports only structs with named fields, not enums",
            );
            None
        }
        Data::Union(data) => {
            cx.error_spanned_by(
                data.union_token,
                "`#[derive(Entity)]` supports only structs with named fields, not unions",
            );
            None
        }
    }
}

impl Field<'_> {
    /// The property name: the field name without `r#`.
    pub fn name(&self) -> String {
        syn::ext::IdentExt::unraw(self.ident).to_string()
    }

    /// Whether the type is written `Option<_>`: such a field may be absent from a document.
    pub fn is_option(&self) -> bool {
        let Type::Path(path) = self.ty else {
            return false;
        };
        let Some(last) = path.path.segments.last() else {
            return false;
        };
        last.ident == "Option"
            && matches!(&last.arguments, PathArguments::AngleBracketed(args)
                if args.args.len() == 1 && matches!(args.args[0], GenericArgument::Type(_)))
    }
}
