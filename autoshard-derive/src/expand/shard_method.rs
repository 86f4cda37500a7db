//! `#[shard_method]`: keeps the method's signature and runs its body twice, as in the
//! paper's Figure 4: first on the shadow values (every sharded field swapped with its
//! shadow, with clones of the arguments), then on the aggregate, returning the second
//! run's value. Both runs are the body itself, written twice inside the method (the first
//! in a closure, so that a `return` ends only that run, and a panic in it swaps the
//! aggregates back before it goes on): nothing is generated beside the method, so a
//! `#[shard_method]` may also implement a trait's method. A method that returns a borrow
//! keeps its body in a hidden method beside it (a closure cannot return a borrow of what
//! it captured).

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ImplItemFn, Pat, ReturnType, Type};

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

/// The wrapper's parameters and what each run binds.
struct Params {
    /// The method's signature with a name for every argument: the user's where it is a
    /// plain identifier.
    sig: syn::Signature,
    /// `let __autoshard_cloneN = clone_for_shadow_run(&name);` per argument.
    clones: Vec<TokenStream>,
    /// The argument names, and the names of their clones.
    names: Vec<syn::Ident>,
    clone_names: Vec<syn::Ident>,
    /// The user's patterns bound to the clones (the shadow run) and to the arguments
    /// (the run on the aggregate, where a plain name needs no binding but `mut x`).
    shadow_bindings: Vec<TokenStream>,
    bindings: Vec<TokenStream>,
}

impl Params {
    fn of(sig: &syn::Signature) -> Params {
        let mut params = Params {
            sig: sig.clone(),
            clones: Vec::new(),
            names: Vec::new(),
            clone_names: Vec::new(),
            shadow_bindings: Vec::new(),
            bindings: Vec::new(),
        };
        for (index, input) in params.sig.inputs.iter_mut().enumerate() {
            let FnArg::Typed(typed) = input else {
                continue;
            };
            let (arg, clone) = names::method_arg(index);
            let pat = &*typed.pat;
            params.shadow_bindings.push(quote!(let #pat = #clone;));
            let name = match pat {
                Pat::Ident(ident) if ident.by_ref.is_none() && ident.subpat.is_none() => {
                    let plain = &ident.ident;
                    if ident.mutability.is_some() {
                        params.bindings.push(quote!(let #pat = #plain;));
                    }
                    plain.clone()
                }
                _ => {
                    params.bindings.push(quote!(let #pat = #arg;));
                    arg
                }
            };
            *typed.pat = syn::parse_quote!(#name);
            let ty = &typed.ty;
            params.clones.push(quote_spanned! {ty.span()=>
                let #clone = ::autoshard::__private::ShardMethodArg::clone_for_shadow_run(&#name);
            });
            params.names.push(name);
            params.clone_names.push(clone);
        }
        params
    }
}

fn expand(item: &ImplItemFn) -> TokenStream {
    let params = Params::of(&item.sig);
    if returns_borrow(&item.sig.output) {
        beside(item, &params)
    } else {
        within(item, &params)
    }
}

/// Both runs inside the method: the shadow run in a closure, so that a `return` ends
/// only that run and a panic in it swaps the aggregates back before it goes on.
fn within(item: &ImplItemFn, params: &Params) -> TokenStream {
    // The closure says what it returns when the method names it (a body with `?` needs
    // it), unless it is an `impl Trait`, which a closure cannot name.
    let returns = match &item.sig.output {
        ReturnType::Type(arrow, ty)
            if !mentions(ty, |t| matches!(t, TokenTree::Ident(i) if i == "impl")) =>
        {
            quote!(#arrow #ty)
        }
        _ => quote!(),
    };
    let Params {
        sig,
        clones,
        shadow_bindings,
        bindings,
        ..
    } = params;
    let body = &item.block;
    let shadow_run = shadow_run(&quote!(#returns {
        #(#shadow_bindings)*
        #body
    }));
    let (attrs, vis, defaultness) = (&item.attrs, &item.vis, &item.defaultness);
    quote! {
        #(#attrs)*
        #vis #defaultness #sig {
            #(#clones)*
            #shadow_run
            #(#bindings)*
            #body
        }
    }
}

/// A method that returns a borrow: a closure cannot hand out a borrow of the `self` it
/// captured, so the body moves into a hidden method beside the wrapper, which both runs
/// call (such a method cannot implement a trait's method).
fn beside(item: &ImplItemFn, params: &Params) -> TokenStream {
    let hidden = names::method_body(&item.sig.ident);
    let mut hidden_sig = item.sig.clone();
    hidden_sig.ident = hidden.clone();
    let passed_on = item.attrs.iter().filter(|a| {
        a.path().is_ident("cfg") || a.path().is_ident("allow") || a.path().is_ident("expect")
    });
    let Params {
        sig,
        clones,
        names,
        clone_names,
        ..
    } = params;
    let shadow_run = shadow_run(&quote!({
        let _ = self.#hidden(#(#clone_names),*);
    }));
    let (attrs, vis, defaultness, body) = (&item.attrs, &item.vis, &item.defaultness, &item.block);
    quote! {
        #(#attrs)*
        #vis #defaultness #sig {
            #(#clones)*
            #shadow_run
            self.#hidden(#(#names),*)
        }

        #[doc(hidden)]
        #(#passed_on)*
        #[inline]
        #hidden_sig #body
    }
}

/// The shadow run: the shadows swapped in, the closure `|| #closure_body` run under
/// `catch_unwind`, the aggregates swapped back, then a panic of the run goes on.
fn shadow_run(closure_body: &TokenStream) -> TokenStream {
    let private = quote_spanned!(Span::call_site()=> ::autoshard::__private);
    quote! {
        let __autoshard_entered = #private::ShadowRun::enter(self);
        let __autoshard_shadow_run = ::std::panic::catch_unwind(
            ::std::panic::AssertUnwindSafe(|| #closure_body),
        );
        #private::ShadowRun::leave(__autoshard_entered, self);
        if let ::core::result::Result::Err(__autoshard_panic) = __autoshard_shadow_run {
            ::std::panic::resume_unwind(__autoshard_panic);
        }
    }
}

/// Whether the method's value may borrow from its arguments or `self` (a reference or a
/// lifetime anywhere in the type).
fn returns_borrow(output: &ReturnType) -> bool {
    match output {
        ReturnType::Default => false,
        ReturnType::Type(_, ty) => mentions(ty, |t| match t {
            TokenTree::Punct(p) => p.as_char() == '&' || p.as_char() == '\'',
            _ => false,
        }),
    }
}

/// Whether any token of `ty`, inside groups too, is one `is` picks.
fn mentions(ty: &Type, is: impl Fn(&TokenTree) -> bool + Copy) -> bool {
    fn walk(tokens: TokenStream, is: impl Fn(&TokenTree) -> bool + Copy) -> bool {
        tokens.into_iter().any(|token| match &token {
            TokenTree::Group(group) => walk(group.stream(), is),
            other => is(other),
        })
    }
    walk(quote!(#ty), is)
}
