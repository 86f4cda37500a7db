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
//! It also holds members' documents whole, as a committed state of the store: a one-shot
//! transaction's group notes its members as create read them and as its joins left them
//! ([`Memo::joined`]: a join writes the owner alone, expecting the version create read, so
//! each document is as read with the owner added, at the version the join got), and a
//! transaction notes the members it read as its commit left them
//! ([`Memo::transaction_committed`]: each document it wrote as written, or on a store
//! whose commits stay within one entity group as its settling wrote it, at the version
//! the store told; the others as read). The next transaction's first load takes them
//! from here ([`Memo::members_read`]) instead of reading the store. Where the store
//! commits across entity groups its commit expects every document read at the version
//! read (as for any read that does not come with the group document in one atomic
//! lookup); elsewhere its prepare expects every document it writes so, and its log the
//! group document: documents the memo holds that someone changed since (a lease that
//! passed, a commit whose reply was lost) make it conflict and write nothing. A commit of
//! the group takes out the members whose documents it writes ([`Memo::committed`]; a
//! transaction takes out the group document, those it loaded and the versions of what it
//! writes before it sends, [`Memo::sending`], and they come back once its commit is
//! told), so a load takes from here only what the group's commits left; and not while
//! the group document records a transaction the handle did not settle (`reads.rs`).
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
    /// Members' documents with their write records, by main document, as the group's
    /// last commit left them (`joined`, `transaction_committed`): what the group's next
    /// transaction reads in place of the store.
    pub members: BTreeMap<Key, Arc<Snapshot>>,
}

impl Memo {
    /// Notes the committed `txn` of the group whose document is `group`, as `reply` told
    /// it: each write's document at the version it got, or unknown where untold.
    /// The members whose documents it writes are taken out of the members' documents it
    /// holds, whatever the outcome (a transaction puts back what it wrote:
    /// [`Memo::transaction_committed`]).
    pub(super) fn committed(&mut self, group: &Key, txn: &Transaction, reply: &CommitReply) {
        // Every document a member's read returns lies under its main document's key (the
        // layout's placement: shards are its children, dynamic ones its grandchildren).
        self.members.retain(|main, _| {
            let mut written = txn.writes().iter();
            !written.any(|(key, _)| key.path().starts_with(main.path()))
        });
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

    /// The members at `mains` as the memo holds them, and the group document as the memo
    /// holds it; `None` when it does not hold them all.
    pub(super) fn members_read(&self, mains: &[Key]) -> Option<(Vec<Arc<Snapshot>>, Versioned)> {
        let state = self.state.clone()?;
        if mains.is_empty() {
            return None;
        }
        let found: Option<Vec<Arc<Snapshot>>> = mains
            .iter()
            .map(|main| self.members.get(main).cloned())
            .collect();
        Some((found?, state))
    }

    /// Takes out what a transaction's commit may change before it is sent: the group
    /// document, the members at `mains` and the versions of the documents it `writes`
    /// (each write that is told puts its version back, and the commit the members), so
    /// that a commit cut before its answer (a fault, a dropped future, a reply lost on
    /// the way) leaves the next transaction reading the store.
    pub(super) fn sending<'k>(
        &mut self,
        mains: impl IntoIterator<Item = &'k Key>,
        writes: impl IntoIterator<Item = &'k Key>,
    ) {
        self.state = None;
        for main in mains {
            self.members.remove(main);
        }
        for key in writes {
            self.versions.remove(key);
        }
    }

    /// Notes the members a committed transaction of the group read (`read`, by main
    /// document) as its `writes` left them: each document written as written, at the
    /// version the memo holds for it (the commit's told version, noted by
    /// [`Memo::committed`]), the others as read. Nothing is noted when the memo does not
    /// hold the group document, when a write's version was not told, or when a write is
    /// not among the documents read (a document the transaction created: a member's read
    /// would find it, the snapshot does not hold it), or when a member was read twice.
    /// The snapshots and writes are taken over, not copied.
    pub(super) fn transaction_committed(
        &mut self,
        read: Vec<(Key, Arc<Snapshot>)>,
        mut writes: BTreeMap<Key, Document>,
    ) {
        if self.state.is_none() {
            return;
        }
        let mains: BTreeSet<&Key> = read.iter().map(|(main, _)| main).collect();
        if mains.len() < read.len() {
            // A member loaded twice: which read would hold the write is not clear.
            return;
        }
        let wrote = writes.len();
        // A write's document at the version told (`None` inside: not told), taken out of
        // `writes`.
        let mut take = |key: &Key| -> Option<Option<Versioned>> {
            let doc = writes.remove(key)?;
            Some(
                self.versions
                    .get(key)
                    .map(|&version| Versioned { doc, version }),
            )
        };
        let mut placed = 0;
        let mut noted = Vec::with_capacity(read.len());
        for (main, found) in read {
            if !found.folded.is_empty() {
                return;
            }
            let mut snapshot = Arc::unwrap_or_clone(found);
            let Snapshot {
                keys,
                docs,
                scanned,
                ..
            } = &mut snapshot;
            for (key, doc) in keys.iter().zip(docs.iter_mut()) {
                if let Some(new) = take(key) {
                    let Some(new) = new else { return };
                    *doc = Some(new);
                    placed += 1;
                }
            }
            for (key, doc) in scanned.iter_mut() {
                if let Some(new) = take(key) {
                    let Some(new) = new else { return };
                    *doc = new;
                    placed += 1;
                }
            }
            noted.push((main, Arc::new(snapshot)));
        }
        if placed == wrote {
            self.members.extend(noted);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapper::layout;

    fn doc(n: i64) -> Document {
        [("n".to_owned(), n.into())].into()
    }

    /// A member's snapshot as a load of it returns: its main document and one static
    /// shard, each at version 1.
    fn member(main: &Key) -> (Key, Arc<Snapshot>) {
        let shard = layout::static_shard(main, "n", 0);
        let at = |doc| {
            Some(Versioned {
                doc,
                version: Version(1),
            })
        };
        let snapshot = Snapshot {
            keys: vec![main.clone(), shard],
            docs: vec![at(doc(0)), at(doc(5))],
            scanned: Vec::new(),
            folded: Vec::new(),
        };
        (main.clone(), Arc::new(snapshot))
    }

    fn memo_of(members: &[(Key, Arc<Snapshot>)]) -> Memo {
        Memo {
            state: Some(Versioned {
                doc: doc(0),
                version: Version(1),
            }),
            members: members.iter().cloned().collect(),
            ..Memo::default()
        }
    }

    #[test]
    fn a_commit_takes_out_the_members_whose_documents_it_writes_and_only_those() {
        let (a, b) = (Key::new("Account", "1"), Key::new("Account", "2"));
        let mut memo = memo_of(&[member(&a), member(&b)]);
        let group = layout::key_group("g");
        let shard = layout::static_shard(&a, "n", 0);
        let txn = Transaction::new().put(shard, doc(6));
        memo.committed(&group, &txn, &CommitReply::untold(Commit::Committed));
        assert!(!memo.members.contains_key(&a), "the member written is out");
        assert!(memo.members.contains_key(&b), "the other member stays");
        // A document created under a member (a dynamic shard) takes it out too: its
        // snapshot would not list it.
        let created = layout::dynamic_shard(&b, "w.1");
        let txn = Transaction::new().put(created, doc(1));
        memo.committed(
            &group,
            &txn,
            &CommitReply::untold(Commit::Conflict { key: group.clone() }),
        );
        assert!(memo.members.is_empty(), "whatever the outcome");
    }

    #[test]
    fn a_committed_transaction_leaves_its_writes_in_the_members_it_read() {
        let (a, b) = (Key::new("Account", "1"), Key::new("Account", "2"));
        let read = vec![member(&a), member(&b)];
        let mut memo = memo_of(&[]);
        let shard = layout::static_shard(&a, "n", 0);
        memo.versions.insert(shard.clone(), Version(7));
        let writes: BTreeMap<Key, Document> = [(shard.clone(), doc(4))].into();
        memo.transaction_committed(read.clone(), writes.clone());
        let noted = &memo.members[&a];
        let written = noted.docs[1].as_ref().expect("the shard");
        assert_eq!((&written.doc, written.version), (&doc(4), Version(7)));
        assert_eq!(noted.docs[0].as_ref().map(|d| &d.doc), Some(&doc(0)));
        assert!(
            memo.members.contains_key(&b),
            "a member read and not written, as read"
        );

        // A write whose version was not told, or a member read twice: nothing is noted.
        let mut untold = memo_of(&[]);
        untold.transaction_committed(read.clone(), writes.clone());
        assert!(untold.members.is_empty());
        let mut twice = memo_of(&[]);
        twice.versions.insert(shard, Version(7));
        twice.transaction_committed(vec![read[0].clone(), read[0].clone()], writes);
        assert!(twice.members.is_empty());
    }
}
