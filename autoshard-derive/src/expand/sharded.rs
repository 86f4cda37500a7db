//! `#[autoshard::sharded]`: rewrites an entity struct to carry one shadow field per
//! `#[shardable]` property plus the mapper's bookkeeping, marks it for `#[derive(Entity)]`
//! (which generates the hooks), and adds a constructor. It does not validate the
//! `#[shardable]` options: the derive does, so each mistake is reported once.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::punctuated::Punctuated;
use syn::{Attribute, Data, DeriveInput, Fields, FieldsNamed, Path, Token};

use crate::internals::attr::{Constructor, ShardedArgs};
use crate::internals::check;
use crate::internals::ctxt::Ctxt;
use crate::internals::names;
use crate::internals::symbol::{SHARDABLE, SHARDED_MARKER, STRIPPED_WITHOUT_DERIVE};

pub fn sharded(args: TokenStream, input: &TokenStream) -> TokenStream {
    let cx = Ctxt::new();
    let args = ShardedArgs::parse(&cx, args);
    let Ok(mut item) = syn::parse2::<DeriveInput>(input.clone()) else {
        cx.error_at(
            Span::call_site(),
            "`#[autoshard::sharded]` goes on a struct with named fields that also has \
             `#[derive(Entity)]`",
        );
        let errors = cx.into_compile_errors();
        return quote!(#errors #input);
    };
    let derives = Derives::of(&item.attrs);
    check_shape(&cx, &item);
    if !derives.entity {
        cx.error_at(
            Span::call_site(),
            format_args!(
                "`#[autoshard::sharded]` needs `#[derive(Entity)]` below it on `{}`: \
                 write `#[autoshard::sharded]` first, then `#[derive(Entity)]`",
                item.ident
            ),
        );
    }
    let named = match &mut item.data {
        Data::Struct(data) => match &mut data.fields {
            Fields::Named(named) => Some(named),
            _ => None,
        },
        _ => None,
    };
    let rewritten = item
        .attrs
        .iter()
        .any(|a| a.path() == SHARDED_MARKER && a.parse_args::<syn::Ident>().is_err());
    if let Some(named) = named.as_ref().filter(|_| !rewritten) {
        // (A struct rewritten already has the hidden fields; `check_shape` said so.)
        for ident in named.named.iter().filter_map(|f| f.ident.as_ref()) {
            check::reserved_field_name(&cx, ident);
        }
    }
    if let Some(named) = &named
        && !named.named.iter().any(|f| is_shardable(&f.attrs))
    {
        cx.error_at(
            Span::call_site(),
            format_args!(
                "`{}` has no `#[shardable]` field: mark the hot field with \
                     `#[shardable(..)]` (a counter: `#[shardable(shards = 10, fold = sum)]`), \
                     or remove `#[autoshard::sharded]`",
                item.ident
            ),
        );
    }
    if let Err(error) = cx.check() {
        let errors = error.into_compile_error();
        if derives.entity {
            // Tell the derive to stay quiet; the error above says it all.
            let marker = format_ident!("{}", SHARDED_MARKER.0);
            item.attrs.push(syn::parse_quote!(#[#marker(failed)]));
        } else {
            strip_helper_attrs(&mut item);
        }
        return quote!(#errors #item);
    }
    let Some(named) = named else {
        return TokenStream::new(); // unreachable: `check_shape` reported it
    };
    let constructor = constructor(&args, &item.ident, &item.vis, named);
    // `Debug` of the fields the user wrote, not of the hidden ones added below.
    let debug = derives.debug.then(|| user_debug(&item.ident, named));
    add_hidden_fields(named, &item.vis, derives.serde);
    if derives.debug {
        remove_derive(&mut item.attrs, "Debug");
    }
    let marker = format_ident!("{}", SHARDED_MARKER.0);
    item.attrs.push(syn::parse_quote!(#[#marker]));
    quote! {
        #item
        #constructor
        #debug
    }
}

/// `impl Debug` printing the struct's own fields, as `#[derive(Debug)]` would before the
/// rewrite added the hidden shadow and state fields.
fn user_debug(name: &syn::Ident, fields: &syn::FieldsNamed) -> TokenStream {
    let idents: Vec<&syn::Ident> = fields
        .named
        .iter()
        .filter_map(|f| f.ident.as_ref())
        .collect();
    let names: Vec<String> = idents.iter().map(|i| unraw(i)).collect();
    let title = name.to_string();
    quote! {
        impl ::core::fmt::Debug for #name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.debug_struct(#title)
                    #(.field(#names, &self.#idents))*
                    .finish()
            }
        }
    }
}

/// A field name as `#[derive(Debug)]` prints it (without `r#`).
fn unraw(ident: &syn::Ident) -> String {
    let name = ident.to_string();
    name.strip_prefix("r#").map_or(name.clone(), str::to_owned)
}

/// Removes `name` from every `#[derive(...)]` list (and a list left empty).
fn remove_derive(attrs: &mut Vec<Attribute>, name: &str) {
    attrs.retain_mut(|attr| {
        if !attr.path().is_ident("derive") {
            return true;
        }
        let Ok(paths) = attr.parse_args_with(Punctuated::<Path, Token![,]>::parse_terminated)
        else {
            return true;
        };
        let kept: Punctuated<Path, Token![,]> = paths
            .into_iter()
            .filter(|p| p.segments.last().is_none_or(|s| s.ident != name))
            .collect();
        if kept.is_empty() {
            return false;
        }
        *attr = syn::parse_quote!(#[derive(#kept)]);
        true
    });
}

/// Rejects what the rewrite cannot handle, spanned on the offending tokens.
fn check_shape(cx: &Ctxt, item: &DeriveInput) {
    match &item.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(_) => {}
            Fields::Unnamed(fields) => cx.error_spanned_by(
                fields,
                "`#[autoshard::sharded]` needs a struct with named fields: \
                 shard values are stored under the field's name (`shard_<field>`)",
            ),
            Fields::Unit => cx.error_spanned_by(
                &item.ident,
                "`#[autoshard::sharded]` needs a struct with named fields, \
                 an `#[id]` and at least one `#[shardable]` field",
            ),
        },
        Data::Enum(data) => cx.error_spanned_by(
            data.enum_token,
            "`#[autoshard::sharded]` supports only structs with named fields, not enums",
        ),
        Data::Union(data) => cx.error_spanned_by(
            data.union_token,
            "`#[autoshard::sharded]` supports only structs with named fields, not unions",
        ),
    }
    check::generics(cx, &item.generics, "#[autoshard::sharded]");
    if item
        .attrs
        .iter()
        .any(|a| a.path() == SHARDED_MARKER && a.parse_args::<syn::Ident>().is_err())
    {
        cx.error_at(
            Span::call_site(),
            format_args!(
                "`#[autoshard::sharded]` is already on `{}`: write it once",
                item.ident
            ),
        );
    }
}

/// What the struct's `#[derive(...)]` lists hold that the rewrite cares about.
struct Derives {
    entity: bool,
    serde: bool,
    debug: bool,
}

impl Derives {
    fn of(attrs: &[Attribute]) -> Self {
        let mut out = Derives {
            entity: false,
            serde: false,
            debug: false,
        };
        for attr in attrs.iter().filter(|a| a.path().is_ident("derive")) {
            let Ok(paths) = attr.parse_args_with(Punctuated::<Path, Token![,]>::parse_terminated)
            else {
                continue;
            };
            for path in paths {
                let Some(last) = path.segments.last() else {
                    continue;
                };
                out.entity |= last.ident == "Entity";
                out.serde |= last.ident == "Serialize" || last.ident == "Deserialize";
                out.debug |= last.ident == "Debug";
            }
        }
        out
    }
}

fn is_shardable(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| a.path() == SHARDABLE)
}

/// Without `#[derive(Entity)]` nothing registers the field attributes; drop them so the
/// only error is the one saying to add the derive.
fn strip_helper_attrs(item: &mut DeriveInput) {
    let helper = |a: &Attribute| STRIPPED_WITHOUT_DERIVE.iter().any(|&name| a.path() == name);
    item.attrs.retain(|a| !helper(a));
    if let Data::Struct(data) = &mut item.data {
        for field in &mut data.fields {
            field.attrs.retain(|a| !helper(a));
        }
    }
}

fn add_hidden_fields(named: &mut FieldsNamed, vis: &syn::Visibility, serde: bool) {
    let skip = serde.then(|| quote!(#[serde(skip)]));
    let shadows: Vec<syn::Field> = named
        .named
        .iter()
        .filter(|f| is_shardable(&f.attrs))
        .filter_map(|f| {
            let ident = f.ident.as_ref()?;
            let shadow = names::shadow_field(ident);
            let ty = &f.ty;
            Some(syn::parse_quote! {
                #[doc(hidden)]
                #skip
                #vis #shadow: ::autoshard::__private::Shadow<#ty>
            })
        })
        .collect();
    named.named.extend(shadows);
    let state = names::state_field();
    named.named.push(syn::parse_quote! {
        #[doc(hidden)]
        #skip
        #vis #state: ::autoshard::__private::EntityState
    });
}

fn constructor(
    args: &ShardedArgs,
    ident: &syn::Ident,
    vis: &syn::Visibility,
    named: &FieldsNamed,
) -> TokenStream {
    let Constructor::Named(name) = &args.constructor else {
        return TokenStream::new();
    };
    let params = named.named.iter().filter_map(|f| {
        let ident = f.ident.as_ref()?;
        let ty = &f.ty;
        Some(quote!(#ident: #ty))
    });
    let fields = named.named.iter().filter_map(|f| f.ident.as_ref());
    let shadows = named
        .named
        .iter()
        .filter(|f| is_shardable(&f.attrs))
        .filter_map(|f| f.ident.as_ref().map(names::shadow_field));
    let state = names::state_field();
    let doc = format!(
        " Creates a `{ident}` from all its fields, in declaration order; no sharded \
         field has an unsaved change yet."
    );
    let doc2 = " Generated by `#[autoshard::sharded]`: rename it with \
                `#[autoshard::sharded(constructor = other_name)]`, or leave it out with \
                `constructor = false`.";
    quote! {
        impl #ident {
            #[doc = #doc]
            #[doc = ""]
            #[doc = #doc2]
            #[must_use]
            #[allow(clippy::too_many_arguments)]
            #vis fn #name(#(#params),*) -> Self {
                Self {
                    #(#fields,)*
                    #(#shadows: ::autoshard::__private::Shadow::new(),)*
                    #state: ::autoshard::__private::EntityState::new(),
                }
            }
        }
    }
}
