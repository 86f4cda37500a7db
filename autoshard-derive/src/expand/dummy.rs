//! Impls emitted beside a `compile_error!` so that one mistake in the annotations does not
//! cascade into "trait `Entity` is not implemented" errors at every use of the struct
//! (thiserror's `fallback.rs` does the same). They never run: the crate does not compile.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Data, DeriveInput};

use crate::internals::names;
use crate::internals::symbol::{ID, SHARDABLE};

/// A placeholder `Entity` impl (and `ShardedFields` for a rewritten struct), or nothing
/// when the item is not a plain struct it could be written for.
pub fn entity(input: &DeriveInput, sharded: bool) -> TokenStream {
    let Data::Struct(data) = &input.data else {
        return TokenStream::new();
    };
    if !input.generics.params.is_empty() {
        return TokenStream::new();
    }
    let ident = &input.ident;
    let id_ty = data
        .fields
        .iter()
        .find(|f| f.attrs.iter().any(|a| a.path() == ID))
        .map_or_else(
            || quote!(::std::string::String),
            |f| {
                let ty = &f.ty;
                quote!(#ty)
            },
        );
    // The `#[shardable]` fields' properties, so a `#[shard_fold]` of one of them does not
    // also report a missing property.
    let markers = data
        .fields
        .iter()
        .filter(|f| f.attrs.iter().any(|a| a.path() == SHARDABLE))
        .filter_map(|f| f.ident.as_ref())
        .map(|field| {
            let hash = names::property_hash(field);
            quote!(impl ::autoshard::__private::HasShardedProperty<#hash> for #ident {})
        });
    let fields_impl = sharded.then(|| {
        quote! {
            impl ::autoshard::__private::ShardedFields for #ident {
                fn enter_shadow(&mut self) {}
                fn leave_shadow(&mut self) {}
            }
        }
    });
    quote! {
        const _: () = {
            impl ::autoshard::__private::Entity for #ident {
                type Id = #id_ty;
                const KIND: &'static str = "";
                fn id(&self) -> &Self::Id {
                    ::core::unreachable!()
                }
                fn to_document(
                    &self,
                ) -> ::core::result::Result<
                    ::autoshard::__private::Document,
                    ::autoshard::__private::FieldError,
                > {
                    ::core::unreachable!()
                }
                fn from_document(
                    _: Self::Id,
                    _: &::autoshard::__private::Document,
                ) -> ::core::result::Result<Self, ::autoshard::__private::FieldError> {
                    ::core::unreachable!()
                }
            }
            impl ::autoshard::__private::ShardHooks for #ident {}
            impl ::autoshard::__private::Root for #ident {}
            #(#markers)*
            #fields_impl
        };
    }
}

/// A placeholder for the constructor `#[autoshard::sharded]` generates (`new`, taking
/// every field in order), for a struct that lacks the attribute; nothing for a struct
/// without named fields.
pub fn constructor(input: &DeriveInput) -> TokenStream {
    let Data::Struct(data) = &input.data else {
        return TokenStream::new();
    };
    if !input.generics.params.is_empty() {
        return TokenStream::new();
    }
    let (ident, vis) = (&input.ident, &input.vis);
    let params = data.fields.iter().filter_map(|f| {
        let (name, ty) = (f.ident.as_ref()?, &f.ty);
        Some(quote!(#name: #ty))
    });
    quote! {
        #[allow(dead_code, unused_variables, clippy::too_many_arguments, clippy::new_without_default)]
        impl #ident {
            #vis fn new(#(#params),*) -> Self {
                ::core::unreachable!()
            }
        }
    }
}
