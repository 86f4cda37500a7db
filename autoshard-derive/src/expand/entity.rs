//! `#[derive(Entity)]`: the `Entity` impl (id, kind, document mapping), the entity-group
//! items (`group`), the `ShardHooks` impl (empty unless the struct was rewritten by
//! `#[autoshard::sharded]`: then the sharded hooks of `hooks`) and the `ShardedFields`
//! impl the `#[shard_method]` wrappers call.
//! Expands from the checked model only.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::DeriveInput;
use syn::spanned::Spanned;

use crate::expand::{dummy, group, hooks};
use crate::internals::ast::{Entity, Field};
use crate::internals::check;
use crate::internals::ctxt::Ctxt;
use crate::internals::symbol::{AUTOSHARD, FAILED, SHARDED, SHARDED_MARKER};

pub fn derive(input: &DeriveInput) -> TokenStream {
    if sharded_failed(input) {
        // `#[autoshard::sharded]` already reported what is wrong with this item.
        return dummy::entity(input, true);
    }
    if sharded_below(input) {
        // `#[autoshard::sharded]` runs after this derive and reports the order.
        return dummy::entity(input, true);
    }
    let cx = Ctxt::new();
    let Some(entity) = Entity::from_ast(&cx, input) else {
        return cx.into_compile_errors();
    };
    check::check(&cx, &entity);
    if let Err(error) = cx.check() {
        let errors = error.into_compile_error();
        // `#[shardable]` fields without `#[autoshard::sharded]`: stand in for what the
        // attribute would have added (the `ShardedFields` impl, the constructor), so
        // that the one error above is the only one.
        let unsharded = entity.sharded.is_none() && entity.sharded_fields().next().is_some();
        let dummy = dummy::entity(input, entity.sharded.is_some() || unsharded);
        let constructor = unsharded.then(|| dummy::constructor(input));
        return quote!(#errors #dummy #constructor);
    }
    expand(&entity)
}

/// `#[autoshard::sharded]` marks an item it could not rewrite with
/// `#[__autoshard_sharded(failed)]`.
fn sharded_failed(input: &DeriveInput) -> bool {
    input.attrs.iter().any(|attr| {
        attr.path() == SHARDED_MARKER
            && attr
                .parse_args::<syn::Ident>()
                .is_ok_and(|arg| arg == FAILED)
    })
}

/// `#[autoshard::sharded]` written below `#[derive(Entity)]` reaches the derive as a
/// plain attribute; it expands later, finds no derive, and says to swap the two.
fn sharded_below(input: &DeriveInput) -> bool {
    input.attrs.iter().any(|attr| {
        let path = attr.path();
        path.segments.last().is_some_and(|s| s.ident == SHARDED)
            && (path.segments.len() == 1 || path.segments[0].ident == AUTOSHARD)
    })
}

fn expand(entity: &Entity) -> TokenStream {
    let ident = entity.ident;
    let kind = entity.kind();
    let Some(id) = entity.id_field() else {
        return TokenStream::new(); // unreachable after `check`
    };
    let id_ident = id.ident;
    let id_ty = id.ty;
    let to_document = to_document(entity);
    let encodes_as = encodes_as(entity);
    let from_document = from_document(entity, id);
    let sharded = if entity.sharded.is_some() {
        hooks::expand(entity)
    } else {
        hooks::Sharded::default()
    };
    let hooks::Sharded {
        properties,
        hooks,
        helpers,
        fields_impl,
    } = sharded;
    let group::Expanded {
        impl_items: group_items,
        beside: group_beside,
    } = group::expand(entity);
    quote! {
        #[doc(hidden)]
        #[allow(non_upper_case_globals, unused_qualifications, clippy::used_underscore_binding)]
        const _: () = {
            #helpers

            #[automatically_derived]
            impl ::autoshard::__private::Entity for #ident {
                type Id = #id_ty;
                const KIND: &'static str = #kind;

                fn id(&self) -> &Self::Id {
                    &self.#id_ident
                }

                #properties
                #group_items
                #to_document
                #encodes_as
                #from_document
            }

            #[automatically_derived]
            impl ::autoshard::__private::ShardHooks for #ident {
                #hooks
            }

            #fields_impl
            #group_beside
        };
    }
}

/// The call both `to_document` and `encodes_as` make for `field`, the same tokens with the
/// same spans: a type that is not `Serialize` is one error, reported once.
fn plain_field(field: &Field) -> TokenStream {
    let ident = field.ident;
    let name = field.name();
    quote_spanned! {field.ty.span()=>
        ::autoshard::__private::plain_field(#name, &self.#ident)
    }
}

fn to_document(entity: &Entity) -> TokenStream {
    let inserts = entity.plain_fields().map(|field| {
        let name = field.name();
        let plain = plain_field(field);
        quote! {
            __autoshard_doc.insert(
                <::std::string::String as ::core::convert::From<&str>>::from(#name),
                #plain.encode()?,
            );
        }
    });
    quote! {
        fn to_document(
            &self,
        ) -> ::core::result::Result<
            ::autoshard::__private::Document,
            ::autoshard::__private::FieldError,
        > {
            let mut __autoshard_doc = ::autoshard::__private::Document::new();
            #(#inserts)*
            ::core::result::Result::Ok(__autoshard_doc)
        }
    }
}

/// `Entity::encodes_as`: `to_document` compared with the saved document field by field,
/// without building it (the names are distinct, so equal counts and equal fields are an
/// equal document).
fn encodes_as(entity: &Entity) -> TokenStream {
    let count = entity.plain_fields().count();
    let checks = entity.plain_fields().map(|field| {
        let name = field.name();
        let plain = plain_field(field);
        quote! {
            if !#plain.encodes_as(__autoshard_saved.get(#name))? {
                return ::core::result::Result::Ok(false);
            }
        }
    });
    quote! {
        fn encodes_as(
            &self,
            __autoshard_saved: &::autoshard::__private::Document,
        ) -> ::core::result::Result<bool, ::autoshard::__private::FieldError> {
            if __autoshard_saved.len() != #count {
                return ::core::result::Result::Ok(false);
            }
            #(#checks)*
            ::core::result::Result::Ok(true)
        }
    }
}

fn from_document(entity: &Entity, id: &Field) -> TokenStream {
    let id_ident = id.ident;
    let plain = entity.plain_fields().map(|field| {
        let ident = field.ident;
        let name = field.name();
        let missing = if field.is_option() {
            quote!(::core::option::Option::None)
        } else {
            quote! {
                return ::core::result::Result::Err(
                    ::autoshard::__private::FieldError::missing(#name),
                )
            }
        };
        let decode = quote_spanned! {field.ty.span()=>
            ::autoshard::__private::decode_field(__autoshard_doc, #name)
        };
        quote! {
            #ident: match #decode? {
                ::core::option::Option::Some(__autoshard_value) => __autoshard_value,
                ::core::option::Option::None => #missing,
            },
        }
    });
    let sharded = entity.properties.iter().map(|p| {
        let ident = p.ident;
        let neutral = &p.neutral_fn;
        quote!(#ident: Self::#neutral(),)
    });
    let hidden = entity.fields.iter().filter(|f| f.hidden).map(|field| {
        let ident = field.ident;
        quote!(#ident: ::core::default::Default::default(),)
    });
    quote! {
        fn from_document(
            __autoshard_id: Self::Id,
            __autoshard_doc: &::autoshard::__private::Document,
        ) -> ::core::result::Result<Self, ::autoshard::__private::FieldError> {
            ::core::result::Result::Ok(Self {
                #id_ident: __autoshard_id,
                #(#plain)*
                #(#sharded)*
                #(#hidden)*
            })
        }
    }
}
