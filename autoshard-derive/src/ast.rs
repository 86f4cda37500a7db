//! The intermediate model of an entity struct that `#[derive(Entity)]` expands from,
//! keeping references to the user's tokens for spans. Built from a `syn::DeriveInput`
//! with the attributes parsed by `attr.rs`; rules across fields live in `check.rs`.

use syn::{
    Attribute, Data, DeriveInput, Expr, Fields, GenericArgument, Ident, PathArguments, Type,
};

use crate::attr::{self, EntityAttr, ShardableAttr, SHARDED_MARKER};
use crate::ctxt::Ctxt;

/// Prefix of every field `#[autoshard::sharded]` adds; no user field can be meant.
pub const HIDDEN_PREFIX: &str = "__autoshard_";

pub struct Entity<'a> {
    pub ident: &'a Ident,
    pub input: &'a DeriveInput,
    pub attrs: EntityAttr,
    /// `#[autoshard::sharded]` rewrote the struct (its marker is present).
    pub sharded: Option<&'a Attribute>,
    pub fields: Vec<Field<'a>>,
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

impl<'a> Entity<'a> {
    /// The model, or `None` when the input is not a struct with named fields (the error is
    /// in `cx`).
    pub fn from_ast(cx: &mut Ctxt, input: &'a DeriveInput) -> Option<Self> {
        let sharded = input
            .attrs
            .iter()
            .find(|attr| attr.path().is_ident(SHARDED_MARKER));
        let attrs = EntityAttr::from_attrs(cx, &input.attrs);
        let named = match &input.data {
            Data::Struct(data) => match &data.fields {
                Fields::Named(named) => named,
                Fields::Unnamed(fields) => {
                    cx.error_spanned_by(
                        fields,
                        "`#[derive(Entity)]` needs named fields (`struct Question { id: u64, .. }`), \
                         so each property has a name in the document",
                    );
                    return None;
                }
                Fields::Unit => {
                    cx.error_spanned_by(
                        &input.ident,
                        "`#[derive(Entity)]` needs a struct with named fields, \
                         one of them the `#[id]`",
                    );
                    return None;
                }
            },
            Data::Enum(data) => {
                cx.error_spanned_by(
                    data.enum_token,
                    "`#[derive(Entity)]` supports only structs with named fields, not enums",
                );
                return None;
            }
            Data::Union(data) => {
                cx.error_spanned_by(
                    data.union_token,
                    "`#[derive(Entity)]` supports only structs with named fields, not unions",
                );
                return None;
            }
        };
        let fields = named
            .named
            .iter()
            .filter_map(|field| {
                let ident = field.ident.as_ref()?;
                let hidden = sharded.is_some() && ident.to_string().starts_with(HIDDEN_PREFIX);
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
                Some(Field {
                    ident,
                    ty: &field.ty,
                    id: attr::id_attr(cx, &field.attrs),
                    shardable: ShardableAttr::from_attrs(cx, &field.attrs),
                    parent: crate::group::parent_attr(cx, &field.attrs),
                    hidden,
                })
            })
            .collect();
        Some(Entity {
            ident: &input.ident,
            input,
            attrs,
            sharded,
            fields,
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

    /// Properties of the main document: neither the id, nor sharded, nor hidden.
    pub fn plain_fields(&self) -> impl Iterator<Item = &Field<'a>> {
        self.fields
            .iter()
            .filter(|f| f.id.is_none() && f.shardable.is_none() && !f.hidden)
    }

    /// The `#[shardable]` fields, in declaration order (their index is the property index).
    pub fn sharded_fields(&self) -> impl Iterator<Item = (&Field<'a>, &ShardableAttr<'a>)> {
        self.fields
            .iter()
            .filter(|f| !f.hidden)
            .filter_map(|f| f.shardable.as_ref().map(|s| (f, s)))
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

    /// The neutral value expression of a sharded field.
    pub fn neutral(&self) -> Option<&Expr> {
        self.shardable.as_ref().and_then(|s| s.neutral.as_ref())
    }
}
