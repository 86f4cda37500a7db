//! What a key-group transaction read ([`ReadSet`]): each document's version, which its
//! commit expects, and the document itself, held where the load that read it returned it
//! (the load's snapshot, shared with the caller and later with the group's memo) instead
//! of copied.

use super::one_shot::documents_read;
use crate::document::{Document, Version, Versioned};
use crate::key::Key;
use crate::mapper::read::snapshot::Snapshot;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The documents a transaction read: the first read of a key is the one its commit
/// expects.
#[derive(Default)]
pub(super) struct ReadSet {
    /// Every document read, and the version it had (`None`: absent).
    versions: BTreeMap<Key, Option<Version>>,
    /// Every document as read: where it is held.
    docs: BTreeMap<Key, Read>,
    /// What each load returned, in order: the documents read are held there.
    snapshots: Vec<Arc<Snapshot>>,
}

/// Where a [`ReadSet`] holds a document.
enum Read {
    /// The document was absent.
    Absent,
    /// Document `at` of what load `snapshot` returned, in the order of
    /// [`documents_read`].
    Found { snapshot: usize, at: usize },
    /// Read on its own (an intent document).
    Alone(Document),
}

impl ReadSet {
    /// Whether nothing was read yet.
    pub(super) fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    /// Every document read, with the version read (`None`: absent).
    pub(super) fn versions(&self) -> &BTreeMap<Key, Option<Version>> {
        &self.versions
    }

    /// The version `key` was read at (`None`: absent, or not read).
    pub(super) fn version(&self, key: &Key) -> Option<Version> {
        self.versions.get(key).copied().flatten()
    }

    /// The document at `key` as read (`None`: absent, or not read).
    pub(super) fn doc(&self, key: &Key) -> Option<&Document> {
        match self.docs.get(key)? {
            Read::Absent => None,
            Read::Alone(doc) => Some(doc),
            Read::Found { snapshot, at } => documents_read(&self.snapshots[*snapshot])
                .nth(*at)
                .and_then(|(_, doc)| doc)
                .map(|d| &d.doc),
        }
    }

    /// Notes every document a load returned (`found`), keeping the snapshot.
    pub(super) fn note_snapshot(&mut self, found: &Arc<Snapshot>) {
        let snapshot = self.snapshots.len();
        self.snapshots.push(found.clone());
        for (at, (key, doc)) in documents_read(found).enumerate() {
            let read = || match doc {
                Some(_) => Read::Found { snapshot, at },
                None => Read::Absent,
            };
            self.note(key, doc.map(|d| d.version), read);
        }
    }

    /// Notes a document read on its own (`None`: absent).
    pub(super) fn note_alone(&mut self, key: &Key, doc: Option<Versioned>) {
        let version = doc.as_ref().map(|d| d.version);
        self.note(key, version, || {
            doc.map_or(Read::Absent, |d| Read::Alone(d.doc))
        });
    }

    /// For a document the transaction writes: unless it was read, the commit expects it
    /// absent.
    pub(super) fn expect_absent_unless_read(&mut self, key: &Key) {
        self.versions.entry(key.clone()).or_insert(None);
    }

    /// Lets go of the loads' snapshots (once they are handed to the group's memo); the
    /// documents read are no longer held.
    pub(super) fn release_snapshots(&mut self) {
        self.snapshots.clear();
        self.docs.clear();
    }

    fn note(&mut self, key: &Key, version: Option<Version>, read: impl FnOnce() -> Read) {
        if !self.versions.contains_key(key) {
            self.versions.insert(key.clone(), version);
            self.docs.insert(key.clone(), read());
        }
    }
}
