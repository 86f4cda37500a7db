//! `#[shard_fold]`: keeps the user's fold function and adds a hidden associated function
//! named after the property (`__autoshard_fold_votes`), which the code generated for the
//! struct calls. An attribute on a method cannot see the struct, so the name is the link.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::{FnArg, ImplItemFn, ReturnType, Signature};

use crate::internals::attr;
use crate::internals::ctxt::Ctxt;
use crate::internals::names;

pub fn shard_fold(args: TokenStream, input: &TokenStream) -> TokenStream {
    let cx = Ctxt::new();
    let property = attr::shard_fold_args(&cx, args);
    let Ok(item) = syn::parse2::<ImplItemFn>(input.clone()) else {
        cx.error_at(
            Span::call_site(),
            "`#[shard_fold]` goes on an associated function of the entity, \
             `fn fold_votes(a: i64, b: i64) -> i64`",
        );
        let errors = cx.into_compile_errors();
        return quote!(#errors #input);
    };
    let sig = &item.sig;
    check(&cx, sig);
    let property = property.or_else(|| {
        let name = sig.ident.unraw().to_string();
        if let Some(field) = name.strip_prefix("fold_").filter(|f| !f.is_empty()) {
            Some(syn::Ident::new(field, sig.ident.span()))
        } else {
            cx.error_spanned_by(
                &sig.ident,
                format_args!(
                    "cannot tell which sharded field `{name}` folds: name it `fold_<field>` \
                     or write `#[shard_fold(<field>)]`"
                ),
            );
            None
        }
    });
    if let Err(error) = cx.check() {
        // Keep the fold's name defined, so the struct does not also report a missing fold.
        let placeholder = property.map(|property| {
            let hidden = names::fold_fn(&property);
            quote! {
                #[doc(hidden)]
                #[allow(dead_code)]
                pub(crate) fn #hidden<__AutoshardT>(a: __AutoshardT, _: __AutoshardT) -> __AutoshardT {
                    a
                }
            }
        });
        let errors = error.into_compile_error();
        return quote!(#errors #item #placeholder);
    }
    let Some(property) = property else {
        return quote!(#item);
    };
    let hidden = names::fold_fn(&property);
    let hash = names::property_hash(&property);
    let user = &sig.ident;
    let types = sig.inputs.iter().filter_map(|input| match input {
        FnArg::Typed(typed) => Some(&typed.ty),
        FnArg::Receiver(_) => None,
    });
    let params = types
        .zip(["__autoshard_a", "__autoshard_b"])
        .map(|(ty, name)| {
            let name = syn::Ident::new(name, Span::call_site());
            quote!(#name: #ty)
        });
    let output = &sig.output;
    // The derive implements `HasShardedProperty<hash>` for each sharded field: this fails
    // on the property's name when no sharded field has it.
    let exists = quote_spanned! {property.span()=>
        ::autoshard::__private::sharded_property::<Self, #hash>();
    };
    let hidden_fn = quote_spanned! {property.span()=>
        #[doc(hidden)]
        #[inline]
        pub(crate) fn #hidden(#(#params),*) #output {
            #exists
            Self::#user(__autoshard_a, __autoshard_b)
        }
    };
    quote! {
        #item
        #hidden_fn
    }
}

/// The shape of a fold: no receiver, two parameters, a return type, not async or generic.
fn check(cx: &Ctxt, sig: &Signature) {
    if let Some(receiver) = sig.receiver() {
        cx.error_spanned_by(
            receiver,
            format_args!(
                "a `#[shard_fold]` function takes no `self`: it combines two shard values, \
                 as in `fn {}(a: T, b: T) -> T`",
                sig.ident
            ),
        );
    } else if sig.inputs.len() != 2 {
        let message = format!(
            "a `#[shard_fold]` function takes exactly two values of the property's type, \
             `fn {}(a: T, b: T) -> T`; this one takes {}",
            sig.ident,
            sig.inputs.len()
        );
        if sig.inputs.is_empty() {
            cx.error_at(sig.paren_token.span.join(), message);
        } else {
            cx.error_spanned_by(&sig.inputs, message);
        }
    }
    if let ReturnType::Default = sig.output {
        cx.error_spanned_by(
            &sig.ident,
            "a `#[shard_fold]` function returns the folded value: add `-> T` (T is the \
             property's type)",
        );
    }
    if let Some(asyncness) = sig.asyncness {
        cx.error_spanned_by(asyncness, "a `#[shard_fold]` function cannot be `async`");
    }
    if !sig.generics.params.is_empty() {
        cx.error_spanned_by(
            &sig.generics,
            "a `#[shard_fold]` function cannot be generic: it folds one property's type",
        );
    }
}
