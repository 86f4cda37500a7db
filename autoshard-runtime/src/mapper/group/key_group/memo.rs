//! What a group's handle knows from its own commits on a store whose commits stay within
//! one entity group (`protocol`): the last transaction whose documents it settled, the
//! group document as it last wrote it, and the version each document it owns got from
//! its last write there, where the store told it
//! ([`DocumentStore::commit_versioned`](crate::store::DocumentStore::commit_versioned)).
//!
//! The memo saves reads; it never decides an outcome. A step takes a document as the memo
//! knows it only in a commit that expects the version the memo holds, and a version is
//! never handed out again: a memo that is stale (someone wrote the document since, or a
//! commit whose reply was lost landed) makes that commit conflict, and the step reads the
//! store instead, as it does after any conflict.
//!
//! Dissolving from the memo: `release.rs`.

use crate::document::{Version, Versioned};
use crate::key::Key;
use crate::store::{Commit, CommitReply, Transaction, Write};
use std::collections::BTreeMap;

/// What a group's handle knows from its own commits (module docs).
#[derive(Debug, Default)]
pub(super) struct Memo {
    /// The last transaction whose documents the handle settled (the group document may
    /// still record it, decided).
    pub settled: Option<String>,
    /// The group document as the handle last wrote it, at the version the store told.
    pub state: Option<Versioned>,
    /// The version each other document got from the handle's last write of it.
    pub versions: BTreeMap<Key, Version>,
}

impl Memo {
    /// Notes the committed `txn` of the group whose document is `group`, as `reply` told
    /// it: each write's document at the version it got, or unknown where untold.
    pub(super) fn committed(&mut self, group: &Key, txn: &Transaction, reply: &CommitReply) {
        if reply.outcome != Commit::Committed {
            return;
        }
        let told = reply.versions.as_deref().unwrap_or_default();
        for (at, (key, write)) in txn.writes().iter().enumerate() {
            let version = told.get(at).copied().flatten();
            self.wrote(group, key, write, version);
        }
    }

    /// Notes documents written at the versions `versions` tells (a commit of several
    /// parts: what its committed parts gave).
    pub(super) fn versions(&mut self, versions: &BTreeMap<Key, Version>) {
        self.versions.extend(
            versions
                .iter()
                .map(|(key, version)| (key.clone(), *version)),
        );
    }

    fn wrote(&mut self, group: &Key, key: &Key, write: &Write, version: Option<Version>) {
        if key == group {
            self.state = match (write, version) {
                (Write::Put(doc), Some(version)) => Some(Versioned {
                    doc: doc.clone(),
                    version,
                }),
                _ => None,
            };
            return;
        }
        match (write, version) {
            (Write::Delete, _) | (_, None) => {
                self.versions.remove(key);
            }
            (_, Some(version)) => {
                self.versions.insert(key.clone(), version);
            }
        }
    }
}
