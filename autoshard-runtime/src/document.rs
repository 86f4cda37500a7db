//! Documents as stores hold them: a map of property names to JSON values, and a version.
//!
//! Entities convert to and from [`Document`]s through serde (generated code does it);
//! stores treat documents as opaque maps and never look inside them.

use serde::{Deserialize, Serialize};
pub use serde_json::Value;
use std::collections::BTreeMap;

/// A document: property name → value.
pub type Document = BTreeMap<String, Value>;

/// How deep a property's value may nest arrays and objects (`1` has depth 0, `[1]` and
/// `{"a": 1}` depth 1). Every store refuses a write of a deeper one with
/// [`Error::Invalid`](crate::Error::Invalid), writing nothing: the stores that keep
/// documents as JSON text read it back with `serde_json`, whose reader stops at 128
/// levels, so a deeper value would be stored but never read again.
pub const MAX_NESTING: usize = 100;

/// Checks the writes of a document to `key`: [`Error::Invalid`](crate::Error::Invalid)
/// naming the key and the property whose value nests deeper than [`MAX_NESTING`].
///
/// # Errors
/// As above.
pub fn check_nesting(key: &crate::Key, doc: &Document) -> crate::Result<()> {
    // Depth-first without recursion: a value built in memory may nest deeper than the
    // stack allows. A property holding a scalar costs nothing.
    let mut pending: Vec<(&Value, usize)> = Vec::new();
    for (property, value) in doc {
        pending.push((value, 0));
        while let Some((value, depth)) = pending.pop() {
            let (Value::Array(_) | Value::Object(_)) = value else {
                continue;
            };
            if depth == MAX_NESTING {
                return Err(crate::Error::Invalid(format!(
                    "property `{property}` of `{key}` nests arrays and objects deeper than \
                     {MAX_NESTING} levels, which the stores cannot read back"
                )));
            }
            match value {
                Value::Array(items) => pending.extend(items.iter().map(|v| (v, depth + 1))),
                Value::Object(fields) => pending.extend(fields.values().map(|v| (v, depth + 1))),
                _ => {}
            }
        }
    }
    Ok(())
}

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
