//! `#[shard_method]`: keeps the method's signature and runs its body twice, as in the
//! paper's Figure 4: first on the shadow values (every sharded field swapped with its
//! shadow), then on the aggregate, returning the second run's value. The body moves into
//! a hidden method beside the wrapper.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ImplItemFn, Pat, Type};

use crate::internals::attr;
use crate::internals::ctxt::Ctxt;
use crate::internals::names;

pub fn shard_method(args: TokenStream, input: &TokenStream) -> TokenStream {
    let cx = Ctxt::new();
    attr::shard_method_args(&cx, args);
    let Ok(item) = syn::parse2::<ImplItemFn>(input.clone()) else {
        cx.error_at(
            Span::call_site(),
            "`#[shard_method]` goes on a method `fn(&mut self, ...)` of the entity",
        );
        let errors = cx.into_compile_errors();
        return quote!(#errors #input);
    };
    check(&cx, &item);
    if let Err(error) = cx.check() {
        // The method stays as written, so the only errors are the ones above.
        let errors = error.into_compile_error();
        return quote!(#errors #item);
    }
    expand(&item)
}

fn check(cx: &Ctxt, item: &ImplItemFn) {
    let sig = &item.sig;
    match sig.receiver() {
        None => cx.error_spanned_by(
            &sig.ident,
            format_args!(
                "`#[shard_method]` needs a `&mut self` receiver: `{}` has none, so it cannot \
                 change the entity's sharded fields (a fold of two values is `#[shard_fold]`)",
                sig.ident
            ),
        ),
        Some(receiver) => match &*receiver.ty {
            Type::Reference(reference) if reference.mutability.is_some() => {}
            Type::Reference(_) => cx.error_spanned_by(
                receiver,
                "`#[shard_method]` needs `&mut self`, not `&self`: its body changes the \
                 sharded fields, once on the shadow values and once on the aggregate",
            ),
            _ => cx.error_spanned_by(
                receiver,
                "`#[shard_method]` needs `&mut self`, not `self` by value: the entity must \
                 stay in place to keep its unsaved shard values",
            ),
        },
    }
    let why = "its body runs twice in a row, on the shadow values and then on the aggregate";
    if let Some(token) = sig.asyncness {
        cx.error_spanned_by(
            token,
            format_args!("a `#[shard_method]` cannot be `async`: {why}"),
        );
    }
    if let Some(token) = sig.constness {
        cx.error_spanned_by(
            token,
            format_args!("a `#[shard_method]` cannot be `const`: {why}"),
        );
    }
    if let Some(token) = sig.unsafety {
        cx.error_spanned_by(
            token,
            "a `#[shard_method]` cannot be `unsafe`; call an `unsafe fn` from its body instead",
        );
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned_by(variadic, "a `#[shard_method]` cannot be variadic");
    }
}

fn expand(item: &ImplItemFn) -> TokenStream {
    let sig = &item.sig;
    let hidden = names::method_body(&sig.ident);

    // The wrapper's parameters: the user's names where they are plain identifiers.
    let mut wrapper_sig = sig.clone();
    let mut names_ = Vec::new();
    let mut clones = Vec::new();
    let mut clone_names = Vec::new();
    for (index, input) in wrapper_sig.inputs.iter_mut().enumerate() {
        let FnArg::Typed(typed) = input else {
            continue;
        };
        let (arg, clone) = names::method_arg(index);
        let name = match &*typed.pat {
            Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => pat.ident.clone(),
            _ => arg,
        };
        *typed.pat = syn::parse_quote!(#name);
        let ty = &typed.ty;
        clones.push(quote_spanned! {ty.span()=>
            let #clone = ::autoshard::__private::ShardMethodArg::clone_for_shadow_run(&#name);
        });
        clone_names.push(clone);
        names_.push(name);
    }

    let mut hidden_sig = sig.clone();
    hidden_sig.ident = hidden.clone();
    let attrs = &item.attrs;
    let passed_on = item.attrs.iter().filter(|a| {
        a.path().is_ident("cfg") || a.path().is_ident("allow") || a.path().is_ident("expect")
    });
    let vis = &item.vis;
    let defaultness = &item.defaultness;
    let body = &item.block;
    let enter = quote_spanned! {Span::call_site()=>
        ::autoshard::__private::ShadowRun::enter(self)
    };
    quote! {
        #(#attrs)*
        #vis #defaultness #wrapper_sig {
            #(#clones)*
            {
                let mut __autoshard_run = #enter;
                let _ = __autoshard_run.entity().#hidden(#(#clone_names),*);
            }
            self.#hidden(#(#names_),*)
        }

        #[doc(hidden)]
        #(#passed_on)*
        #[inline]
        #hidden_sig #body
    }
}
