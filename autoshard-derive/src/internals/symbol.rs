//! One table of every attribute, option and marker name the macros read (`serde_derive`'s
//! `symbol.rs`). Parsing, registering and stripping helper attributes all read this list;
//! `#[proc_macro_derive(.., attributes(..))]` in `lib.rs` must be a literal, so a test
//! checks that it lists exactly [`DERIVE_HELPERS`].

use std::fmt;
use syn::{Ident, Path};

/// A name the macros recognise.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Symbol(pub &'static str);

/// `#[entity(...)]` on the struct.
pub const ENTITY: Symbol = Symbol("entity");
/// `#[id]` on the field that identifies an entity.
pub const ID: Symbol = Symbol("id");
/// `#[parent]` on a child's field holding its root's id.
pub const PARENT: Symbol = Symbol("parent");
/// `#[shardable(...)]` on a sharded field.
pub const SHARDABLE: Symbol = Symbol("shardable");
/// The marker `#[autoshard::sharded]` leaves on a struct it rewrote, for the derive
/// (`#[__autoshard_sharded]`, or `#[__autoshard_sharded(failed)]` after an error).
pub const SHARDED_MARKER: Symbol = Symbol("__autoshard_sharded");
/// The argument of [`SHARDED_MARKER`] on a struct the rewrite could not handle.
pub const FAILED: Symbol = Symbol("failed");

/// `#[entity(kind = "...")]`.
pub const KIND: Symbol = Symbol("kind");
/// `#[entity(group_shards = K)]` on a root.
pub const GROUP_SHARDS: Symbol = Symbol("group_shards");
/// `#[shardable(neutral = EXPR)]`.
pub const NEUTRAL: Symbol = Symbol("neutral");
/// `#[shardable(shards = N)]`.
pub const SHARDS: Symbol = Symbol("shards");
/// `#[shardable(min = N)]`: the fewest shards a reshard leaves.
pub const MIN: Symbol = Symbol("min");
/// `#[shardable(max = N)]`: the most shards a reshard gives.
pub const MAX: Symbol = Symbol("max");
/// `#[shardable(fold = sum)]`: a built-in fold the store applies itself.
pub const FOLD: Symbol = Symbol("fold");
/// `#[autoshard::sharded(constructor = name | false)]`.
pub const CONSTRUCTOR: Symbol = Symbol("constructor");
/// The attribute macro's own name, to recognise `#[autoshard::sharded]` below the derive.
pub const SHARDED: Symbol = Symbol("sharded");
/// The facade crate's name, as written in `#[autoshard::sharded]`.
pub const AUTOSHARD: Symbol = Symbol("autoshard");

/// The helper attributes `#[derive(Entity)]` registers (read by the test below: the
/// registration itself must be a literal).
#[cfg_attr(not(test), allow(dead_code))]
pub const DERIVE_HELPERS: &[Symbol] = &[ID, PARENT, SHARDABLE, ENTITY, SHARDED_MARKER];
/// The helper attributes on fields and on the struct that only the derive makes valid:
/// `#[autoshard::sharded]` without the derive strips them, so its own error is the only one.
pub const STRIPPED_WITHOUT_DERIVE: &[Symbol] = &[ID, PARENT, SHARDABLE, ENTITY];

impl PartialEq<Symbol> for Ident {
    fn eq(&self, word: &Symbol) -> bool {
        self == word.0
    }
}

impl PartialEq<Symbol> for &Ident {
    fn eq(&self, word: &Symbol) -> bool {
        *self == word.0
    }
}

impl PartialEq<Symbol> for Path {
    fn eq(&self, word: &Symbol) -> bool {
        self.is_ident(word.0)
    }
}

impl PartialEq<Symbol> for &Path {
    fn eq(&self, word: &Symbol) -> bool {
        self.is_ident(word.0)
    }
}

impl fmt::Display for Symbol {
    fn fmt(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::DERIVE_HELPERS;

    #[test]
    fn the_derive_registers_exactly_the_helpers_of_the_table() {
        let lib = include_str!("../lib.rs");
        let start = lib
            .find("attributes(")
            .expect("the derive's attributes(...)")
            + 11;
        let end = start + lib[start..].find(')').expect("closing paren");
        let registered: Vec<&str> = lib[start..end].split(',').map(str::trim).collect();
        let table: Vec<&str> = DERIVE_HELPERS.iter().map(|s| s.0).collect();
        assert_eq!(registered, table);
    }
}
