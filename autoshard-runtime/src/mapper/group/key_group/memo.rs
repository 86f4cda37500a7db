//! What a group's handle knows from its own commits: the group document as it last wrote
//! it, and the version each document it owns got from its last write there, where the
//! store told it
//! ([`DocumentStore::commit_versioned`](crate::store::DocumentStore::commit_versioned));
//! on a store whose commits stay within one entity group (`protocol`), also the last
//! transaction whose documents it settled.
//!
//! The memo saves reads; it never decides an outcome. A step takes a document as the memo
//! knows it only in a commit that expects the version the memo holds, and a version is
//! never handed out again: a memo that is stale (someone wrote the document since, or a
//! commit whose reply was lost landed) makes that commit conflict, and the step reads the
//! store instead, as it does after any conflict.
//!
//! A one-shot transaction's group also notes its members as create read them and as its
//! joins left them ([`Memo::joined`]): a join writes the owner alone, expecting the
//! version create read, so each document is as read with the owner added, at the version
//! the join got; from then on only the group's transactions change them, and the first
//! one takes them from here ([`Memo::first_read`]) instead of reading them again.
//!
//! Dissolving from the memo: `release.rs`.

use super::Member;
use crate::document::{Document, Version, Versioned};
use crate::key::Key;
use crate::mapper::read::snapshot::Snapshot;
use crate::store::ownership::{OWNER, Owner};
use crate::store::{Commit, CommitReply, Transaction, Write};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// What a group's handle knows from its own commits (module docs).
#[derive(Debug, Default)]
pub(super) struct Memo {
    /// The last transaction whose documents the handle settled (the group document may
    /// still record it, decided).
    pub settled: Option<String>,
    /// The group document as the handle last wrote it, at the version the store told.
    pub state: Option<Versioned>,
    /// The version each other document got from the handle's last write of it.
    pub versions: HashMap<Key, Version>,
    /// The members as create read them, with their write records, as its joins left them
    /// (stamped with the owner, at the versions the joins got), by main document: what
    /// the group's first transaction reads in place of the store (`joined`).
    pub members: BTreeMap<Key, Arc<Snapshot>>,
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

    /// Notes the members `read` (at `mains`, with their write records) as the joins that
    /// stamped them with `owner` left them, at the versions the memo holds: each document
    /// read with the owner added, each missing one as created, and the one the group
    /// leaves alone as read. A member with a stamped document whose version the memo does
    /// not hold is left out (its first transaction reads it from the store).
    pub(super) fn joined(&mut self, mains: &[Key], read: &[Member], owner: &Owner) {
        let stamp = |doc: &Document| {
            let mut doc = doc.clone();
            doc.insert(OWNER.to_owned(), owner.to_value());
            doc
        };
        let at = |key: &Key, doc: &Document| {
            let version = *self.versions.get(key)?;
            Some(Versioned {
                doc: stamp(doc),
                version,
            })
        };
        for (main, member) in mains.iter().zip(read) {
            let found = &member.found;
            let created = |key: &Key| member.missing.iter().find(|(k, _)| k == key);
            let joined = |key: &Key, doc: &Versioned| match member.unowned.as_ref() {
                Some(unowned) if unowned == key => Some(doc.clone()),
                _ => at(key, &doc.doc),
            };
            let docs: Option<Vec<Option<Versioned>>> = found
                .keys
                .iter()
                .zip(&found.docs)
                .map(|(key, doc)| match (doc, created(key)) {
                    (Some(doc), _) => joined(key, doc).map(Some),
                    (None, Some((_, new))) => at(key, new).map(Some),
                    (None, None) => Some(None),
                })
                .collect();
            let scanned: Option<Vec<(Key, Versioned)>> = found
                .scanned
                .iter()
                .map(|(key, doc)| Some((key.clone(), joined(key, doc)?)))
                .collect();
            if let (Some(docs), Some(scanned)) = (docs, scanned) {
                let snapshot = Snapshot {
                    keys: found.keys.clone(),
                    docs,
                    scanned,
                    folded: found.folded.clone(),
                };
                self.members.insert(main.clone(), Arc::new(snapshot));
            }
        }
    }

    /// The members at `mains` as [`Memo::joined`] noted them, and the group document as
    /// the memo holds it, taken out of the memo (a first transaction's read); `None` when
    /// it does not hold them all.
    pub(super) fn first_read(&mut self, mains: &[Key]) -> Option<(Vec<Arc<Snapshot>>, Versioned)> {
        let state = self.state.clone()?;
        if mains.is_empty() || !mains.iter().all(|main| self.members.contains_key(main)) {
            return None;
        }
        let found = mains.iter().filter_map(|main| self.members.remove(main));
        Some((found.collect(), state))
    }

    /// `release` with the owner taken out of every document of `owned`, each expected at
    /// the version the memo holds; `None` when it does not hold them all.
    pub(super) fn release(
        &self,
        owned: &BTreeSet<Key>,
        mut release: Transaction,
    ) -> Option<Transaction> {
        for key in owned {
            let version = self.versions.get(key)?;
            release = release
                .expect(key.clone(), Some(*version))
                .own(key.clone(), None);
        }
        Some(release)
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
