//! `#[derive(Entity)]`: the `Entity` impl (id, kind, document mapping) and, on a struct
//! rewritten by `#[autoshard::sharded]`, the sharded hooks and the `ShardedFields` impl
//! the `#[shard_method]` wrappers call. Expands from the checked model only.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::DeriveInput;

use crate::ast::{Entity, Field};
use crate::attr::SHARDED_MARKER;
use crate::check;
use crate::ctxt::Ctxt;
use crate::expand::{dummy, names};

pub fn derive(input: &DeriveInput) -> TokenStream {
    if sharded_failed(input) {
        // `#[autoshard::sharded]` already reported what is wrong with this item.
        return dummy::entity(input, true);
    }
    if sharded_below(input) {
        // `#[autoshard::sharded]` runs after this derive and reports the order.
        return dummy::entity(input, true);
    }
    let mut cx = Ctxt::new();
    let Some(entity) = Entity::from_ast(&mut cx, input) else {
        return cx.into_compile_errors();
    };
    check::check(&mut cx, &entity);
    if cx.has_errors() {
        let errors = cx.into_compile_errors();
        let dummy = dummy::entity(input, entity.sharded.is_some());
        return quote!(#errors #dummy);
    }
    expand(&entity)
}

/// `#[autoshard::sharded]` marks an item it could not rewrite with
/// `#[__autoshard_sharded(failed)]`.
fn sharded_failed(input: &DeriveInput) -> bool {
    input.attrs.iter().any(|attr| {
        attr.path().is_ident(SHARDED_MARKER)
            && attr
                .parse_args::<syn::Ident>()
                .is_ok_and(|arg| arg == "failed")
    })
}

/// `#[autoshard::sharded]` written below `#[derive(Entity)]` reaches the derive as a
/// plain attribute; it expands later, finds no derive, and says to swap the two.
fn sharded_below(input: &DeriveInput) -> bool {
    input.attrs.iter().any(|attr| {
        let path = attr.path();
        path.segments.last().is_some_and(|s| s.ident == "sharded")
            && (path.segments.len() == 1 || path.segments[0].ident == "autoshard")
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
    let from_document = from_document(entity, id);
    let sharded = if entity.sharded.is_some() {
        sharded_hooks(entity)
    } else {
        Sharded::default()
    };
    let Sharded {
        hooks,
        helpers,
        fields_impl,
    } = sharded;
    let group = crate::group::expand(entity);
    let (group_items, group_beside) = (group.impl_items, group.beside);
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

                #group_items
                #to_document
                #from_document
                #hooks
            }

            #fields_impl
            #group_beside
        };
    }
}

fn to_document(entity: &Entity) -> TokenStream {
    let inserts = entity.plain_fields().map(|field| {
        let ident = field.ident;
        let name = field.name();
        let encode = quote_spanned! {field.ty.span()=>
            ::autoshard::__private::encode(#name, &self.#ident)
        };
        quote! {
            __autoshard_doc.insert(
                <::std::string::String as ::core::convert::From<&str>>::from(#name),
                #encode?,
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
    let sharded = entity.sharded_fields().map(|(field, _)| {
        let ident = field.ident;
        let neutral = names::neutral_fn(field);
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

#[derive(Default)]
struct Sharded {
    /// Items of the `Entity` impl.
    hooks: TokenStream,
    /// Items beside it inside the `const _` (neutral fns, the fold fallback).
    helpers: TokenStream,
    /// The `ShardedFields` impl.
    fields_impl: TokenStream,
}

/// One sharded property, with the tokens every hook needs.
struct Prop<'a> {
    index: usize,
    field: &'a Field<'a>,
    stored_as: String,
    shadow: syn::Ident,
    neutral: syn::Ident,
    fold: syn::Ident,
}

impl Prop<'_> {
    /// `Self::__autoshard_fold_<field>(a, b)`, through a function pointer of the field's
    /// type: a missing fold is reported on the field's name, a fold of another type as one
    /// mismatch between `fn(T, T) -> T` and the fold's signature.
    fn fold_call(&self, a: &TokenStream, b: &TokenStream) -> TokenStream {
        let fold = &self.fold;
        let ty = self.field.ty;
        let path = quote_spanned!(self.field.ident.span()=> Self::#fold);
        let fn_ty = quote_spanned!(ty.span()=> fn(#ty, #ty) -> #ty);
        quote! {{
            let __autoshard_fold: #fn_ty = #path;
            __autoshard_fold(#a, #b)
        }}
    }

    /// Decodes `value` (a `&Value`) as the field's type, or returns a `FieldError` naming
    /// the property.
    fn decode(&self, value: &TokenStream) -> TokenStream {
        let ty = self.field.ty;
        let name = self.field.name();
        let decode = quote_spanned! {ty.span()=>
            ::autoshard::__private::decode::<#ty>(#name, #value)
        };
        quote!(#decode?)
    }

    /// Encodes `value` (a `&T`) as a `Result<Value, FieldError>` naming the property.
    fn encode(&self, value: &TokenStream) -> TokenStream {
        let name = self.field.name();
        quote_spanned! {self.field.ty.span()=>
            ::autoshard::__private::encode(#name, #value)
        }
    }
}

#[allow(clippy::too_many_lines)] // one quote per hook reads better than a helper per hook
fn sharded_hooks(entity: &Entity) -> Sharded {
    let ident = entity.ident;
    let props: Vec<Prop> = entity
        .fields
        .iter()
        .filter(|f| !f.hidden && f.shardable.is_some())
        .enumerate()
        .map(|(index, field)| Prop {
            index,
            field,
            stored_as: format!("shard_{}", field.name()),
            shadow: names::shadow_field(field.ident),
            neutral: names::neutral_fn(field),
            fold: names::fold_fn(field.ident),
        })
        .collect();

    let properties = props.iter().map(|p| {
        let name = p.field.name();
        let stored_as = &p.stored_as;
        let sharding = if let Some(shards) = p.field.shardable.as_ref().and_then(|s| s.shards) {
            quote!(::autoshard::__private::Sharding::Static { shards: #shards })
        } else {
            quote!(::autoshard::__private::Sharding::Dynamic)
        };
        quote! {
            ::autoshard::__private::ShardedProperty {
                name: #name,
                stored_as: #stored_as,
                sharding: #sharding,
            }
        }
    });

    let arms = |body: &dyn Fn(&Prop) -> TokenStream| -> Vec<TokenStream> {
        props
            .iter()
            .map(|p| {
                let index = p.index;
                let body = body(p);
                quote!(#index => { #body })
            })
            .collect()
    };
    let no_such = quote! {
        _ => ::core::result::Result::Err(
            ::autoshard::__private::no_such_property::<Self>(__autoshard_property),
        ),
    };

    let fold_stored = arms(&|p| {
        let f = p.field.ident;
        let neutral = &p.neutral;
        let stored = p.decode(&quote!(__autoshard_stored));
        let call = p.fold_call(&quote!(__autoshard_aggregate), &quote!(__autoshard_stored));
        quote! {
            let __autoshard_stored = #stored;
            let __autoshard_aggregate = ::core::mem::replace(&mut self.#f, Self::#neutral());
            self.#f = #call;
            ::core::result::Result::Ok(())
        }
    });
    let shadow_touched = arms(&|p| {
        let shadow = &p.shadow;
        quote!(self.#shadow.is_touched())
    });
    let shadow_value = arms(&|p| {
        let shadow = &p.shadow;
        let neutral = &p.neutral;
        let touched = p.encode(&quote!(__autoshard_value));
        let untouched = p.encode(&quote!(&Self::#neutral()));
        quote! {
            match self.#shadow.get() {
                ::core::option::Option::Some(__autoshard_value) => #touched,
                ::core::option::Option::None => #untouched,
            }
        }
    });
    let fold_shadow_into = arms(&|p| {
        let shadow = &p.shadow;
        let neutral = &p.neutral;
        let stored = p.decode(&quote!(__autoshard_stored));
        let call = p.fold_call(&quote!(__autoshard_stored), &quote!(__autoshard_shadow));
        let encode = p.encode(&quote!(&__autoshard_folded));
        quote! {
            let __autoshard_stored = match __autoshard_stored {
                ::core::option::Option::Some(__autoshard_stored) => #stored,
                ::core::option::Option::None => Self::#neutral(),
            };
            let __autoshard_shadow = match self.#shadow.get() {
                ::core::option::Option::Some(__autoshard_shadow) => {
                    ::core::clone::Clone::clone(__autoshard_shadow)
                }
                ::core::option::Option::None => Self::#neutral(),
            };
            let __autoshard_folded = #call;
            #encode
        }
    });
    let aggregate_value = arms(&|p| {
        let f = p.field.ident;
        p.encode(&quote!(&self.#f))
    });
    let neutral_value = arms(&|p| {
        let neutral = &p.neutral;
        p.encode(&quote!(&Self::#neutral()))
    });
    let fold_values = arms(&|p| {
        let a = p.decode(&quote!(__autoshard_a));
        let b = p.decode(&quote!(__autoshard_b));
        let call = p.fold_call(&quote!(__autoshard_a), &quote!(__autoshard_b));
        let encode = p.encode(&quote!(&__autoshard_folded));
        quote! {
            let __autoshard_a = #a;
            let __autoshard_b = #b;
            let __autoshard_folded = #call;
            #encode
        }
    });
    let reset_shadow = props.iter().map(|p| {
        let index = p.index;
        let shadow = &p.shadow;
        quote!(#index => self.#shadow.reset(),)
    });

    let hooks = quote! {
        const PROPERTIES: &'static [::autoshard::__private::ShardedProperty] = &[
            #(#properties,)*
        ];

        fn fold_stored(
            &mut self,
            __autoshard_property: usize,
            __autoshard_stored: &::autoshard::__private::Value,
        ) -> ::core::result::Result<(), ::autoshard::__private::FieldError> {
            match __autoshard_property {
                #(#fold_stored)*
                #no_such
            }
        }

        fn shadow_touched(&self, __autoshard_property: usize) -> bool {
            match __autoshard_property {
                #(#shadow_touched)*
                _ => false,
            }
        }

        fn shadow_value(
            &self,
            __autoshard_property: usize,
        ) -> ::core::result::Result<::autoshard::__private::Value, ::autoshard::__private::FieldError> {
            match __autoshard_property {
                #(#shadow_value)*
                #no_such
            }
        }

        fn fold_shadow_into(
            &self,
            __autoshard_property: usize,
            __autoshard_stored: ::core::option::Option<&::autoshard::__private::Value>,
        ) -> ::core::result::Result<::autoshard::__private::Value, ::autoshard::__private::FieldError> {
            match __autoshard_property {
                #(#fold_shadow_into)*
                #no_such
            }
        }

        fn aggregate_value(
            &self,
            __autoshard_property: usize,
        ) -> ::core::result::Result<::autoshard::__private::Value, ::autoshard::__private::FieldError> {
            match __autoshard_property {
                #(#aggregate_value)*
                #no_such
            }
        }

        fn neutral_value(
            __autoshard_property: usize,
        ) -> ::core::result::Result<::autoshard::__private::Value, ::autoshard::__private::FieldError> {
            match __autoshard_property {
                #(#neutral_value)*
                #no_such
            }
        }

        fn fold_values(
            __autoshard_property: usize,
            __autoshard_a: &::autoshard::__private::Value,
            __autoshard_b: &::autoshard::__private::Value,
        ) -> ::core::result::Result<::autoshard::__private::Value, ::autoshard::__private::FieldError> {
            match __autoshard_property {
                #(#fold_values)*
                #no_such
            }
        }

        fn reset_shadow(&mut self, __autoshard_property: usize) {
            match __autoshard_property {
                #(#reset_shadow)*
                _ => {}
            }
        }

        fn state(&self) -> ::core::option::Option<&::autoshard::__private::EntityState> {
            ::core::option::Option::Some(&self.__autoshard_state)
        }

        fn state_mut(
            &mut self,
        ) -> ::core::option::Option<&mut ::autoshard::__private::EntityState> {
            ::core::option::Option::Some(&mut self.__autoshard_state)
        }
    };

    // The neutral value of each property, type-checked against the field's type with the
    // user's expression as the span of any mismatch.
    let neutral_fns = props.iter().map(|p| {
        let neutral = &p.neutral;
        let ty = p.field.ty;
        // `check` requires `neutral`, so the `else` is never taken.
        let body = if let Some(expr) = p.field.neutral() {
            quote_spanned!(expr.span()=> #expr)
        } else {
            quote!(::core::unreachable!())
        };
        quote! {
            #[inline]
            fn #neutral() -> #ty {
                #body
            }
        }
    });
    // A fold of every property that exists only if no `#[shard_fold]` defined the
    // inherent one (inherent functions win): calling it reports `MissingShardFold`.
    let fallback_folds = props.iter().map(|p| {
        let fold = &p.fold;
        let ty = p.field.ty;
        quote! {
            fn #fold(_: #ty, _: #ty) -> #ty
            where
                Self: ::autoshard::__private::MissingShardFold,
            {
                <Self as ::autoshard::__private::MissingShardFold>::missing_shard_fold()
            }
        }
    });
    let helpers = quote! {
        #[automatically_derived]
        impl #ident {
            #(#neutral_fns)*
        }

        #[allow(dead_code)]
        trait __AutoshardFoldFallback {
            #(#fallback_folds)*
        }
        impl __AutoshardFoldFallback for #ident {}
    };

    let enter = props.iter().map(|p| {
        let f = p.field.ident;
        let shadow = &p.shadow;
        let neutral = &p.neutral;
        quote! {
            let __autoshard_value = match self.#shadow.take() {
                ::core::option::Option::Some(__autoshard_value) => __autoshard_value,
                ::core::option::Option::None => Self::#neutral(),
            };
            let __autoshard_aggregate = ::core::mem::replace(&mut self.#f, __autoshard_value);
            self.#shadow.set(__autoshard_aggregate);
        }
    });
    let leave = props.iter().map(|p| {
        let f = p.field.ident;
        let shadow = &p.shadow;
        quote! {
            if let ::core::option::Option::Some(__autoshard_aggregate) = self.#shadow.take() {
                let __autoshard_value = ::core::mem::replace(&mut self.#f, __autoshard_aggregate);
                self.#shadow.set(__autoshard_value);
            }
        }
    });
    let fields_impl = quote! {
        #[automatically_derived]
        impl ::autoshard::__private::ShardedFields for #ident {
            fn enter_shadow(&mut self) {
                #(#enter)*
            }

            fn leave_shadow(&mut self) {
                #(#leave)*
            }
        }
    };
    Sharded {
        hooks,
        helpers,
        fields_impl,
    }
}
