//! Code generation, from the checked model only. One module per macro, plus the names
//! every macro must agree on (`names`) and the dummy impls emitted beside errors.

pub mod dummy;
pub mod entity;
pub mod shard_fold;
pub mod shard_method;
pub mod sharded;
#[cfg(test)]
mod snapshot;

/// The hidden names the macros use to find each other's items. An attribute on a method
/// cannot see the struct, so these names are the whole protocol between them.
pub mod names {
    use quote::format_ident;
    use syn::ext::IdentExt;
    use syn::Ident;

    use crate::ast::Field;

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
    pub fn neutral_fn(field: &Field) -> Ident {
        format_ident!("__autoshard_neutral_{}", plain(field.ident))
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

    /// The original body of `#[shard_method] fn vote_up`.
    pub fn method_body(method: &Ident) -> Ident {
        format_ident!(
            "__autoshard_shard_method_{}",
            plain(method),
            span = method.span()
        )
    }
}
