//! The sharded hooks (the `ShardHooks` impl, and `PROPERTIES` in the `Entity` impl) of a
//! struct rewritten by `#[autoshard::sharded]`: one function per hook, each a `match` over the properties of
//! the checked model; the neutral functions, the fold fallback and the property markers
//! beside the impl; and the `ShardedFields` impl the `#[shard_method]` wrappers call.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use crate::internals::ast::{Entity, Property, Sharding};
use crate::internals::attr::BuiltinFold;
use crate::internals::names;

/// What a sharded entity adds to the derive's output.
#[derive(Default)]
pub struct Sharded {
    /// Items of the `Entity` impl (the `PROPERTIES` table).
    pub properties: TokenStream,
    /// Items of the `ShardHooks` impl.
    pub hooks: TokenStream,
    /// Items beside it inside the `const _` (neutral fns, markers, the fold fallback).
    pub helpers: TokenStream,
    /// The `ShardedFields` impl.
    pub fields_impl: TokenStream,
}

pub fn expand(entity: &Entity) -> Sharded {
    let props = &entity.properties;
    let hooks = [
        fold_stored(props),
        shadow_touched(props),
        shadow_value(props),
        fold_shadow_into(props),
        aggregate_value(props),
        neutral_value(props),
        fold_values(props),
        reset_shadow(props),
        state(),
    ];
    Sharded {
        properties: properties(props),
        hooks: quote!(#(#hooks)*),
        helpers: helpers(entity),
        fields_impl: fields_impl(entity),
    }
}

impl Property<'_> {
    /// `Self::__autoshard_fold_<field>(a, b)`, through a function pointer of the field's
    /// type: a missing fold is reported on the field's name, a fold of another type as one
    /// mismatch between `fn(T, T) -> T` and the fold's signature.
    ///
    /// A built-in fold (`fold = sum`) calls the property's built-in fold function
    /// ([`builtin_fold_fns`]), which reports an overflow as a `FieldError`.
    fn fold_call(&self, a: &TokenStream, b: &TokenStream) -> TokenStream {
        let fold = &self.fold_fn;
        let ty = self.ty;
        if self.builtin.is_some() {
            let function = names::builtin_fold_fn(self.ident);
            return quote!(Self::#function(#a, #b)?);
        }
        let path = quote_spanned!(self.ident.span()=> Self::#fold);
        let fn_ty = quote_spanned!(ty.span()=> fn(#ty, #ty) -> #ty);
        quote! {{
            let __autoshard_fold: #fn_ty = #path;
            __autoshard_fold(#a, #b)
        }}
    }

    /// Decodes `value` (a `&Value`) as the field's type, or returns a `FieldError` naming
    /// the property.
    fn decode(&self, value: &TokenStream) -> TokenStream {
        let ty = self.ty;
        let name = &self.name;
        let decode = quote_spanned! {ty.span()=>
            ::autoshard::__private::decode::<#ty>(#name, #value)
        };
        quote!(#decode?)
    }

    /// Encodes `value` (a `&T`) as a `Result<Value, FieldError>` naming the property.
    fn encode(&self, value: &TokenStream) -> TokenStream {
        let name = &self.name;
        quote_spanned! {self.ty.span()=>
            ::autoshard::__private::encode(#name, #value)
        }
    }

    /// `Self::__autoshard_neutral_<field>()`.
    fn neutral(&self) -> TokenStream {
        let neutral = &self.neutral_fn;
        quote!(Self::#neutral())
    }
}

/// One `match` arm per property, then `fallback`.
fn arms(
    props: &[Property],
    body: impl Fn(&Property) -> TokenStream,
    fallback: &TokenStream,
) -> TokenStream {
    let arms = props.iter().map(|p| {
        let index = p.index;
        let body = body(p);
        quote!(#index => { #body })
    });
    quote! {
        match __autoshard_property {
            #(#arms)*
            #fallback
        }
    }
}

/// The fallback arm of a hook that returns a `Result`: no such property.
fn no_such() -> TokenStream {
    quote! {
        _ => ::core::result::Result::Err(
            ::autoshard::__private::no_such_property::<Self>(__autoshard_property),
        ),
    }
}

fn properties(props: &[Property]) -> TokenStream {
    let items = props.iter().map(|p| {
        let (name, stored_as) = (&p.name, &p.stored_as);
        let sharding = match p.sharding {
            Sharding::Static { shards, min, max } => {
                let max = max.map_or_else(
                    || quote!(::autoshard::__private::default_max_shards(#shards)),
                    |max| quote!(#max),
                );
                quote!(::autoshard::__private::Sharding::Static {
                    shards: #shards,
                    min: #min,
                    max: #max,
                })
            }
            Sharding::Dynamic => quote!(::autoshard::__private::Sharding::Dynamic),
        };
        // The built-in folds pick the store-level fold by the field's type through the
        // probe, and have none for a type the store does not fold (`sum` needs an
        // integer type, which the bound of its fold function reports, once).
        let store_fold = if let Some(builtin) = p.builtin {
            let ty = p.ty;
            let method = format_ident!("{}_fold", builtin.name());
            quote! {
                || {
                    #[allow(unused_imports)]
                    use ::autoshard::__private::{IntegerProbe as _, OtherProbe as _, SetProbe as _};
                    (&::autoshard::__private::Probe::<#ty>::NEW).#method()
                }
            }
        } else {
            quote!(::autoshard::__private::no_store_fold)
        };
        quote! {
            ::autoshard::__private::ShardedProperty {
                name: #name,
                stored_as: #stored_as,
                sharding: #sharding,
                store_fold: #store_fold,
            }
        }
    });
    quote! {
        const PROPERTIES: &'static [::autoshard::__private::ShardedProperty] = &[
            #(#items,)*
        ];
    }
}

fn fold_stored(props: &[Property]) -> TokenStream {
    let body = arms(
        props,
        |p| {
            let f = p.ident;
            let neutral = p.neutral();
            let stored = p.decode(&quote!(__autoshard_stored));
            let call = p.fold_call(&quote!(__autoshard_aggregate), &quote!(__autoshard_stored));
            quote! {
                let __autoshard_stored = #stored;
                let __autoshard_aggregate = ::core::mem::replace(&mut self.#f, #neutral);
                self.#f = #call;
                ::core::result::Result::Ok(())
            }
        },
        &no_such(),
    );
    quote! {
        fn fold_stored(
            &mut self,
            __autoshard_property: usize,
            __autoshard_stored: &::autoshard::__private::Value,
        ) -> ::core::result::Result<(), ::autoshard::__private::FieldError> {
            #body
        }
    }
}

fn shadow_touched(props: &[Property]) -> TokenStream {
    let body = arms(
        props,
        |p| {
            let shadow = &p.shadow;
            quote!(self.#shadow.is_touched())
        },
        &quote!(_ => false,),
    );
    quote! {
        fn shadow_touched(&self, __autoshard_property: usize) -> bool {
            #body
        }
    }
}

fn shadow_value(props: &[Property]) -> TokenStream {
    let body = arms(
        props,
        |p| {
            let shadow = &p.shadow;
            let touched = p.encode(&quote!(__autoshard_value));
            let untouched = p.encode(&{
                let neutral = p.neutral();
                quote!(&#neutral)
            });
            quote! {
                match self.#shadow.get() {
                    ::core::option::Option::Some(__autoshard_value) => #touched,
                    ::core::option::Option::None => #untouched,
                }
            }
        },
        &no_such(),
    );
    quote! {
        fn shadow_value(
            &self,
            __autoshard_property: usize,
        ) -> ::core::result::Result<::autoshard::__private::Value, ::autoshard::__private::FieldError> {
            #body
        }
    }
}

fn fold_shadow_into(props: &[Property]) -> TokenStream {
    let body = arms(
        props,
        |p| {
            let shadow = &p.shadow;
            let neutral = p.neutral();
            let stored = p.decode(&quote!(__autoshard_stored));
            let call = p.fold_call(&quote!(__autoshard_stored), &quote!(__autoshard_shadow));
            let encode = p.encode(&quote!(&__autoshard_folded));
            quote! {
                let __autoshard_stored = match __autoshard_stored {
                    ::core::option::Option::Some(__autoshard_stored) => #stored,
                    ::core::option::Option::None => #neutral,
                };
                let __autoshard_shadow = match self.#shadow.get() {
                    ::core::option::Option::Some(__autoshard_shadow) => {
                        ::core::clone::Clone::clone(__autoshard_shadow)
                    }
                    ::core::option::Option::None => #neutral,
                };
                let __autoshard_folded = #call;
                #encode
            }
        },
        &no_such(),
    );
    quote! {
        fn fold_shadow_into(
            &self,
            __autoshard_property: usize,
            __autoshard_stored: ::core::option::Option<&::autoshard::__private::Value>,
        ) -> ::core::result::Result<::autoshard::__private::Value, ::autoshard::__private::FieldError> {
            #body
        }
    }
}

fn aggregate_value(props: &[Property]) -> TokenStream {
    let body = arms(
        props,
        |p| {
            let f = p.ident;
            p.encode(&quote!(&self.#f))
        },
        &no_such(),
    );
    quote! {
        fn aggregate_value(
            &self,
            __autoshard_property: usize,
        ) -> ::core::result::Result<::autoshard::__private::Value, ::autoshard::__private::FieldError> {
            #body
        }
    }
}

fn neutral_value(props: &[Property]) -> TokenStream {
    let body = arms(
        props,
        |p| {
            let neutral = p.neutral();
            p.encode(&quote!(&#neutral))
        },
        &no_such(),
    );
    quote! {
        fn neutral_value(
            __autoshard_property: usize,
        ) -> ::core::result::Result<::autoshard::__private::Value, ::autoshard::__private::FieldError> {
            #body
        }
    }
}

fn fold_values(props: &[Property]) -> TokenStream {
    let body = arms(
        props,
        |p| {
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
        },
        &no_such(),
    );
    quote! {
        fn fold_values(
            __autoshard_property: usize,
            __autoshard_a: &::autoshard::__private::Value,
            __autoshard_b: &::autoshard::__private::Value,
        ) -> ::core::result::Result<::autoshard::__private::Value, ::autoshard::__private::FieldError> {
            #body
        }
    }
}

fn reset_shadow(props: &[Property]) -> TokenStream {
    let body = arms(
        props,
        |p| {
            let shadow = &p.shadow;
            quote!(self.#shadow.reset())
        },
        &quote!(_ => {}),
    );
    quote! {
        fn reset_shadow(&mut self, __autoshard_property: usize) {
            #body
        }
    }
}

fn state() -> TokenStream {
    let state = crate::internals::names::state_field();
    quote! {
        fn state(&self) -> ::core::option::Option<&::autoshard::__private::EntityState> {
            ::core::option::Option::Some(&self.#state)
        }

        fn state_mut(
            &mut self,
        ) -> ::core::option::Option<&mut ::autoshard::__private::EntityState> {
            ::core::option::Option::Some(&mut self.#state)
        }
    }
}

/// Beside the impl: each property's neutral value (type-checked against the field's type
/// with the user's expression as the span of any mismatch), its `HasShardedProperty`
/// impl (which a `#[shard_fold]` requires), and a fold of every property that
/// exists only if no `#[shard_fold]` defined the inherent one (inherent functions win):
/// calling it reports `MissingShardFold`.
fn helpers(entity: &Entity) -> TokenStream {
    let ident = entity.ident;
    let neutral_fns = entity.properties.iter().map(|p| {
        let neutral = &p.neutral_fn;
        let ty = p.ty;
        // `check` requires `neutral` unless the fold's neutral value is the type's
        // default, so the last branch is never taken.
        let body = if let Some(expr) = &p.neutral {
            quote_spanned!(expr.span()=> #expr)
        } else if p.builtin.is_some_and(BuiltinFold::default_is_neutral) {
            quote_spanned!(ty.span()=> ::core::default::Default::default())
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
    // A property with a built-in fold takes no `#[shard_fold]`: it gets no marker, so a
    // fold written for it is refused on its name.
    let markers = entity
        .properties
        .iter()
        .filter(|p| p.builtin.is_none())
        .map(|p| {
            let hash = p.hash;
            quote! {
                impl ::autoshard::__private::HasShardedProperty<#hash> for #ident {}
            }
        });
    let fallback_folds = entity.properties.iter().map(|p| {
        let fold = &p.fold_fn;
        let ty = p.ty;
        quote! {
            fn #fold(_: #ty, _: #ty) -> #ty
            where
                Self: ::autoshard::__private::MissingShardFold,
            {
                <Self as ::autoshard::__private::MissingShardFold>::missing_shard_fold()
            }
        }
    });
    let builtin_folds = builtin_fold_fns(entity);
    quote! {
        #[automatically_derived]
        impl #ident {
            #(#neutral_fns)*
            #builtin_folds
        }

        #(#markers)*

        #[allow(dead_code)]
        trait __AutoshardFoldFallback {
            #(#fallback_folds)*
        }
        impl __AutoshardFoldFallback for #ident {}
    }
}

/// The built-in fold of each property with one, in the runtime's typed fold: a field type
/// the fold does not take is reported once, on the field's type, in the words of the
/// fold's trait (`IntegerFold`, `UnionFold`).
fn builtin_fold_fns(entity: &Entity) -> TokenStream {
    let fns = entity.properties.iter().filter_map(|p| {
        let builtin = p.builtin?;
        let (ty, name) = (p.ty, &p.name);
        let function = names::builtin_fold_fn(p.ident);
        let (a, b) = (quote!(__autoshard_a), quote!(__autoshard_b));
        let call = match builtin {
            BuiltinFold::Sum => quote_spanned! {ty.span()=>
                <#ty as ::autoshard::__private::IntegerFold>::fold_sum(#name, #a, #b)
            },
            BuiltinFold::Union => quote_spanned! {ty.span()=>
                <#ty as ::autoshard::__private::UnionFold>::fold_union(#name, #a, #b)
            },
            BuiltinFold::Max => quote_spanned! {ty.span()=>
                ::autoshard::__private::fold_max::<#ty>(#name, #a, #b)
            },
            BuiltinFold::Min => quote_spanned! {ty.span()=>
                ::autoshard::__private::fold_min::<#ty>(#name, #a, #b)
            },
        };
        Some(quote! {
            #[inline]
            fn #function(
                #a: #ty,
                #b: #ty,
            ) -> ::core::result::Result<#ty, ::autoshard::__private::FieldError> {
                #call
            }
        })
    });
    quote!(#(#fns)*)
}

/// The `ShardedFields` impl: swapping every sharded field with its shadow and back, for
/// the first run of a `#[shard_method]` body.
fn fields_impl(entity: &Entity) -> TokenStream {
    let ident = entity.ident;
    let enter = entity.properties.iter().map(|p| {
        let f = p.ident;
        let shadow = &p.shadow;
        let neutral = p.neutral();
        quote! {
            let __autoshard_value = match self.#shadow.take() {
                ::core::option::Option::Some(__autoshard_value) => __autoshard_value,
                ::core::option::Option::None => #neutral,
            };
            let __autoshard_aggregate = ::core::mem::replace(&mut self.#f, __autoshard_value);
            self.#shadow.set(__autoshard_aggregate);
        }
    });
    let leave = entity.properties.iter().map(|p| {
        let f = p.ident;
        let shadow = &p.shadow;
        quote! {
            if let ::core::option::Option::Some(__autoshard_aggregate) = self.#shadow.take() {
                let __autoshard_value = ::core::mem::replace(&mut self.#f, __autoshard_aggregate);
                self.#shadow.set(__autoshard_value);
            }
        }
    });
    quote! {
        #[automatically_derived]
        impl ::autoshard::__private::ShardedFields for #ident {
            fn enter_shadow(&mut self) {
                #(#enter)*
            }

            fn leave_shadow(&mut self) {
                #(#leave)*
            }
        }
    }
}
