//! Documents as stores hold them: a map of property names to JSON values, and a version.
//!
//! Entities convert to and from [`Document`]s through serde (generated code does it);
//! stores treat documents as opaque maps and never look inside them.

use serde::{Deserialize, Serialize};
pub use serde_json::Value;
use std::collections::BTreeMap;

/// A document: property name → value.
pub type Document = BTreeMap<String, Value>;

/// An opaque version a store attaches to a stored document. It changes on every write,
/// and a store never hands out the same version twice for one key, even across a delete
/// and re-insert, so an optimistic commit that read version `v` cannot be fooled by ABA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Version(pub u64);

/// A stored document with its version.
#[derive(Clone, Debug, PartialEq)]
pub struct Versioned {
    /// The document's properties.
    pub doc: Document,
    /// Its version at the time it was read.
    pub version: Version,
}
