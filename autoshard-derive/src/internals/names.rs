//! The hidden names the macros use to find each other's items. An attribute on a method
//! cannot see the struct, and the derive cannot see the methods, so these names are the
//! whole protocol between the four macros. Every generated name starts with
//! [`HIDDEN_PREFIX`]; user fields may not.

use quote::format_ident;
use syn::Ident;
use syn::ext::IdentExt;

/// Prefix of every name the macros generate; no user field may start with it.
pub const HIDDEN_PREFIX: &str = "__autoshard_";

fn plain(ident: &Ident) -> String {
    ident.unraw().to_string()
}

/// The shadow of sharded field `votes`: `__autoshard_shard_votes`.
pub fn shadow_field(field: &Ident) -> Ident {
    format_ident!("__autoshard_shard_{}", plain(field), span = field.span())
}

/// The bookkeeping field of a sharded struct.
pub fn state_field() -> Ident {
    format_ident!("__autoshard_state")
}

/// The neutral value of `votes`: `Self::__autoshard_neutral_votes()`.
pub fn neutral_fn(field: &Ident) -> Ident {
    format_ident!("__autoshard_neutral_{}", plain(field))
}

/// The fold of property `votes`, defined by `#[shard_fold]`:
/// `Self::__autoshard_fold_votes(a, b)`.
pub fn fold_fn(property: &Ident) -> Ident {
    format_ident!(
        "__autoshard_fold_{}",
        plain(property),
        span = property.span()
    )
}

/// The built-in fold of property `votes` (`fold = sum`, ...), one function for every
/// hook, so that a field type the fold does not take is one error:
/// `Self::__autoshard_builtin_fold_votes(a, b)`.
pub fn builtin_fold_fn(property: &Ident) -> Ident {
    format_ident!("__autoshard_builtin_fold_{}", plain(property))
}

/// The hash of sharded field `votes` that links a `#[shard_fold]` to the property it
/// folds: the derive implements `HasShardedProperty<hash>` for each sharded field, the
/// fold requires it (FNV-1a, 64 bits, of the name without `r#`).
pub fn property_hash(property: &Ident) -> u64 {
    plain(property)
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// The body of `#[shard_method] fn vote_up` when it returns a borrow.
pub fn method_body(method: &Ident) -> Ident {
    format_ident!(
        "__autoshard_shard_method_{}",
        plain(method),
        span = method.span()
    )
}

/// The `i`-th argument of a `#[shard_method]` wrapper whose pattern is not a plain name,
/// and its clone for the shadow run.
pub fn method_arg(i: usize) -> (Ident, Ident) {
    (
        format_ident!("__autoshard_arg{}", i),
        format_ident!("__autoshard_clone{}", i),
    )
}
