//! The entity-group items of `#[derive(Entity)]`: on a root, `GROUP_SHARDS` and the `Root`
//! impl; on a child, the group consts and `parent_key` of the `Entity` impl, and the
//! `Child` impl, whose `#[parent]` field is type-checked against the parent's id.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use crate::internals::ast::Entity;

/// Items of the `Entity` impl and items beside it.
#[derive(Default)]
pub struct Expanded {
    pub impl_items: TokenStream,
    pub beside: TokenStream,
}

pub fn expand(entity: &Entity) -> Expanded {
    let ident = entity.ident;
    let (Some(parent), Some(field)) = (&entity.attrs.parent, entity.parent_field()) else {
        let impl_items = match &entity.attrs.group_shards {
            Some((_, Some(shards))) => quote!(const GROUP_SHARDS: u32 = #shards;),
            _ => TokenStream::new(),
        };
        return Expanded {
            impl_items,
            beside: quote! {
                #[automatically_derived]
                impl ::autoshard::__private::Root for #ident {}
            },
        };
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
    Expanded {
        impl_items: quote! {
            const GROUP_SHARDS: u32 = #parent_entity::GROUP_SHARDS;
            const PARENT_KIND: ::core::option::Option<&'static str> =
                ::core::option::Option::Some(#parent_entity::KIND);

            fn parent_key(&self) -> ::core::option::Option<::autoshard::__private::Key> {
                ::core::option::Option::Some(#parent_entity::key_for(
                    <Self as ::autoshard::__private::Child>::parent_id(self),
                ))
            }
        },
        beside: quote! {
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
        },
    }
}
