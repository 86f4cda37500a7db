//! Key-group ownership of documents: the reserved property [`OWNER`] a key group
//! (`Mapper::key_group`) writes into every document of its members, and the one rule every
//! store applies to it on every write ([`check`] is the reference; a store's answer must
//! equal it).
//!
//! A document whose [`OWNER`] property is `{"group": "<id>", "until": <ms>}` with `until`
//! later than the store's clock ([`DocumentStore::now_ms`](crate::store::DocumentStore::now_ms))
//! is *owned* by that group; so is one whose [`OWNER`] also names a transaction
//! (`"txn": "<id>"`, a change of the group prepared but not yet settled), whatever its
//! `until`: such a document stays the group's until the transaction is settled, by the
//! group or by whoever recovers it. A key is owned by its group's leader in G-Store (Das,
//! Agrawal and El Abbadi, "G-Store: A Scalable Data Store for Transactional Multi key
//! Access in the Cloud", SoCC 2010). The rule, for each document a write touches (each key
//! a `commit` expects or writes, the document of a `merge`, `put` or `delete`):
//! - a write that does not carry the owning group's token
//!   ([`Transaction::owned_by`](crate::store::Transaction::owned_by); merges, puts and
//!   deletes never carry one) is refused with [`Error::Grouped`] when the document is
//!   owned;
//! - a write with the token of group `g` to a document no live group owns is refused
//!   with [`Error::GroupLost`] (`g`'s lease passed, or the group was dissolved);
//! - an absent document passes either way (a group's transaction may create documents).
//!
//! A refusal is a definite outcome: nothing of the write is applied. Once a lease has
//! passed, the document is free again for writes without a token, whatever its
//! [`OWNER`] property still says. An [`OWNER`] property that is not of the form above
//! owns nothing.

use crate::document::{Document, Value};
use crate::error::{Error, Result};
use crate::key::Key;

/// The reserved property of a document that names the key group owning it, and until when
/// (module docs). Property names are Rust field names, so none collides with it.
pub const OWNER: &str = "~own";

/// The owner a document's [`OWNER`] property names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The key group's id.
    pub group: String,
    /// The end of its lease, in milliseconds since the Unix epoch by the store's clock.
    pub until_ms: u64,
    /// The group's transaction that holds the document past the lease until it is
    /// settled (module docs).
    pub txn: Option<String>,
}

impl Owner {
    /// The owner `doc` names, live or not; `None` for a document without a well-formed
    /// [`OWNER`] property.
    #[must_use]
    pub fn of(doc: &Document) -> Option<Owner> {
        let owner = doc.get(OWNER)?;
        let txn = match owner.get("txn") {
            None => None,
            Some(txn) => Some(txn.as_str()?.to_owned()),
        };
        Some(Owner {
            group: owner.get("group")?.as_str()?.to_owned(),
            until_ms: owner.get("until")?.as_u64()?,
            txn,
        })
    }

    /// The value of the [`OWNER`] property that names this owner.
    #[must_use]
    pub fn to_value(&self) -> Value {
        match &self.txn {
            None => serde_json::json!({ "group": self.group, "until": self.until_ms }),
            Some(txn) => {
                serde_json::json!({ "group": self.group, "until": self.until_ms, "txn": txn })
            }
        }
    }

    /// Whether it owns the document at `now_ms`: its lease still holds, or a transaction
    /// holds the document.
    #[must_use]
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.until_ms > now_ms || self.txn.is_some()
    }
}

/// Whether a write carrying `token` (the owner token of a key group's transaction, `None`
/// for every other write) may change the document at `key`, currently `doc`, at `now_ms`
/// by the store's clock (module docs): the reference every store follows.
///
/// # Errors
/// [`Error::Grouped`] for a write without the owner's token to an owned document,
/// [`Error::GroupLost`] for a write with a token to a document no live group owns.
pub fn check(key: &Key, doc: Option<&Document>, token: Option<&str>, now_ms: u64) -> Result<()> {
    let Some(doc) = doc else {
        return Ok(());
    };
    let live = Owner::of(doc).filter(|o| o.is_live(now_ms));
    match (live, token) {
        (None, None) => Ok(()),
        (Some(owner), Some(token)) if owner.group == token => Ok(()),
        (Some(owner), _) => Err(Error::Grouped {
            key: key.clone(),
            group: owner.group,
            until_ms: owner.until_ms,
        }),
        (None, Some(token)) => Err(Error::GroupLost {
            key: key.clone(),
            group: token.to_owned(),
        }),
    }
}

/// The system clock in milliseconds since the Unix epoch: the clock of a store that has
/// none of its own.
#[must_use]
pub fn system_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_document_stays_owned_past_the_lease() {
        let key = Key::new("A", "1");
        let doc: Document = [(
            OWNER.to_owned(),
            serde_json::json!({"group": "g", "until": 100, "txn": "t"}),
        )]
        .into();
        assert!(matches!(
            check(&key, Some(&doc), None, 1000),
            Err(Error::Grouped { .. })
        ));
        assert!(check(&key, Some(&doc), Some("g"), 1000).is_ok());
        let bad: Document = [(
            OWNER.to_owned(),
            serde_json::json!({"group": "g", "until": 100, "txn": 7}),
        )]
        .into();
        assert!(check(&key, Some(&bad), None, 1000).is_ok());
    }

    fn owned(group: &str, until: u64) -> Document {
        [(
            OWNER.to_owned(),
            serde_json::json!({"group": group, "until": until}),
        )]
        .into()
    }

    #[test]
    fn an_owned_document_takes_writes_of_its_group_only() {
        let key = Key::new("A", "1");
        let doc = owned("g", 100);
        assert!(check(&key, Some(&doc), Some("g"), 99).is_ok());
        assert!(matches!(
            check(&key, Some(&doc), None, 99),
            Err(Error::Grouped { until_ms: 100, .. })
        ));
        assert!(matches!(
            check(&key, Some(&doc), Some("h"), 99),
            Err(Error::Grouped { .. })
        ));
    }

    #[test]
    fn a_passed_lease_frees_the_document_and_ends_the_group() {
        let key = Key::new("A", "1");
        let doc = owned("g", 100);
        assert!(check(&key, Some(&doc), None, 100).is_ok());
        assert!(matches!(
            check(&key, Some(&doc), Some("g"), 100),
            Err(Error::GroupLost { .. })
        ));
    }

    #[test]
    fn absent_and_malformed_owners_own_nothing() {
        let key = Key::new("A", "1");
        assert!(check(&key, None, Some("g"), 0).is_ok());
        assert!(check(&key, None, None, 0).is_ok());
        for bad in [
            serde_json::json!("g"),
            serde_json::json!({"group": 1, "until": 100}),
            serde_json::json!({"group": "g", "until": -1}),
            serde_json::json!({"group": "g", "until": 1.5}),
            serde_json::json!({"group": "g"}),
        ] {
            let doc: Document = [(OWNER.to_owned(), bad)].into();
            assert!(check(&key, Some(&doc), None, 0).is_ok());
            assert!(check(&key, Some(&doc), Some("g"), 0).is_err());
        }
    }
}
