//! An error collector, so one build reports every mistake in the annotations instead of
//! stopping at the first (`serde_derive`'s `Ctxt`). It only gathers errors; it never
//! decides what to emit. Dropping it without [`Ctxt::check`] is a bug in the macro, and
//! panics (outside of an unwinding panic), so no error is ever lost.

use std::cell::RefCell;
use std::fmt::Display;
use std::thread;

use quote::ToTokens;

/// Gathers `syn::Error`s while parsing and checking one macro input.
pub struct Ctxt {
    /// `None` once [`Ctxt::check`] took the errors.
    errors: RefCell<Option<Vec<syn::Error>>>,
}

impl Ctxt {
    pub fn new() -> Self {
        Ctxt {
            errors: RefCell::new(Some(Vec::new())),
        }
    }

    /// Records an error spanned on `tokens`.
    pub fn error_spanned_by<T: ToTokens, M: Display>(&self, tokens: T, message: M) {
        self.push(syn::Error::new_spanned(tokens.into_token_stream(), message));
    }

    /// Records an error at `span` (`Span::call_site()` is the macro's own attribute).
    pub fn error_at<M: Display>(&self, span: proc_macro2::Span, message: M) {
        self.push(syn::Error::new(span, message));
    }

    /// Records an error from a syn parser.
    pub fn syn_error(&self, error: syn::Error) {
        self.push(error);
    }

    fn push(&self, error: syn::Error) {
        self.errors
            .borrow_mut()
            .as_mut()
            .expect("Ctxt used after check")
            .push(error);
    }

    /// All errors combined into one, or `Ok` when there were none. Consumes the context.
    pub fn check(self) -> Result<(), syn::Error> {
        let errors = self.errors.borrow_mut().take().unwrap_or_default();
        let mut errors = errors.into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for error in errors {
            combined.combine(error);
        }
        Err(combined)
    }

    /// The errors as `compile_error!` invocations (nothing when there were none).
    pub fn into_compile_errors(self) -> proc_macro2::TokenStream {
        match self.check() {
            Ok(()) => proc_macro2::TokenStream::new(),
            Err(error) => error.into_compile_error(),
        }
    }
}

impl Drop for Ctxt {
    fn drop(&mut self) {
        assert!(
            thread::panicking() || self.errors.borrow().is_none(),
            "forgot to check for errors"
        );
    }
}
