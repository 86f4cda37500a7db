//! Procedural macros of autoshard. Use them through the `autoshard` crate, which documents
//! them: `#[derive(Entity)]`, `#[autoshard::sharded]`, `#[shard_method]`, `#[shard_fold]`.
//!
//! Layout (after `serde_derive`): `internals/` parses the attributes (`attr`), builds the
//! model of an entity (`ast`) and checks the rules across fields (`check`), reading every
//! name from one table (`symbol`); `expand/` generates code from the checked model only.
//! Errors are collected in a `Ctxt` so a build reports every mistake at once.

mod expand;
mod internals;

use proc_macro::TokenStream;

/// Maps a struct with named fields to a document; see `autoshard::Entity`.
#[proc_macro_derive(Entity, attributes(id, parent, shardable, entity, __autoshard_sharded))]
pub fn derive_entity(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    expand::entity::derive(&input).into()
}

/// Rewrites an entity struct to carry the shadows of its `#[shardable]` fields; see
/// `autoshard::sharded`.
#[proc_macro_attribute]
pub fn sharded(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::sharded::sharded(args.into(), &input.into()).into()
}

/// Runs a `&mut self` method on the shadow values, then on the aggregate; see
/// `autoshard::shard_method`.
#[proc_macro_attribute]
pub fn shard_method(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::shard_method::shard_method(args.into(), &input.into()).into()
}

/// Declares the fold of a sharded property; see `autoshard::shard_fold`.
#[proc_macro_attribute]
pub fn shard_fold(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::shard_fold::shard_fold(args.into(), &input.into()).into()
}
