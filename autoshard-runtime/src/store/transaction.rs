//! Transactions: what a [`DocumentStore::commit`](super::DocumentStore::commit) applies
//! ([`Transaction`], its [`Write`]s) and what it answers ([`Commit`], [`CommitReply`]).

use super::ownership::Owner;
use crate::document::{Document, Version};
use crate::key::Key;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A write inside a [`Transaction`].
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// Store this document at the key.
    Put(Document),
    /// Store this document's properties at the key, keeping the write record
    /// ([`merge::RECORD`](super::merge::RECORD)) the store holds for it and adding the
    /// entries this document's record carries (an entry replaces its writer's): what a
    /// transaction writes when it read the document without its record, as a merge
    /// leaves the record of the writers it does not name.
    Values(Document),
    /// Remove the document at the key (no error when absent).
    Delete,
    /// Set the document's [`OWNER`](super::OWNER) property to this owner (`None`: take it out), keeping
    /// every other property and its write record ([`merge::RECORD`](super::merge::RECORD)) as they are, with a
    /// new version; nothing when the document is absent. What a key group writes to own
    /// its members and to hand them back, without sending them whole.
    Own(Option<Owner>),
}

/// An optimistic transaction: the versions it read, and the writes to apply if none of
/// them changed.
///
/// ```
/// use autoshard::Key;
/// use autoshard::store::{Transaction, Version};
///
/// let counter = Key::new("Counter", "42");
/// let txn = Transaction::new()
///     .expect(counter.clone(), Some(Version(7)))
///     .put(counter, [("n".to_owned(), 8.into())].into());
/// assert_eq!(txn.reads().len(), 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transaction {
    reads: Vec<(Key, Option<Version>)>,
    writes: Vec<(Key, Write)>,
    owner: Option<Arc<str>>,
}

impl Transaction {
    /// An empty transaction.
    #[must_use]
    pub fn new() -> Self {
        Transaction::default()
    }

    /// Commit only if `key` still has `version` (`None`: only if it is still absent).
    #[must_use]
    pub fn expect(mut self, key: Key, version: Option<Version>) -> Self {
        self.reads.push((key, version));
        self
    }

    /// Store `doc` at `key` on commit.
    #[must_use]
    pub fn put(mut self, key: Key, doc: Document) -> Self {
        self.writes.push((key, Write::Put(doc)));
        self
    }

    /// Store `doc`'s properties at `key` on commit, keeping the write record the store
    /// holds for it and adding the entries `doc`'s record carries ([`Write::Values`]).
    ///
    /// ```
    /// use autoshard::Key;
    /// use autoshard::store::{Transaction, Version, Write};
    ///
    /// let shard = Key::new("Counter", "42").child("~shard", "n.0");
    /// let doc: autoshard::store::Document = [("n".to_owned(), 8.into())].into();
    /// let txn = Transaction::new()
    ///     .expect(shard.clone(), Some(Version(7)))
    ///     .put_values(shard, doc.clone());
    /// assert_eq!(txn.writes()[0].1, Write::Values(doc));
    /// ```
    #[must_use]
    pub fn put_values(mut self, key: Key, doc: Document) -> Self {
        self.writes.push((key, Write::Values(doc)));
        self
    }

    /// Delete `key` on commit.
    #[must_use]
    pub fn delete(mut self, key: Key) -> Self {
        self.writes.push((key, Write::Delete));
        self
    }

    /// Set the [`OWNER`](super::OWNER) of the document at `key` on commit (`None`: take it out), leaving
    /// the rest of it as it is ([`Write::Own`]).
    ///
    /// ```
    /// use autoshard::Key;
    /// use autoshard::store::{Owner, Transaction, Version, Write};
    ///
    /// let account = Key::new("Account", "1");
    /// let owner = Owner { group: "g1".to_owned(), until_ms: 1_000, txn: None };
    /// let txn = Transaction::new()
    ///     .expect(account.clone(), Some(Version(7)))
    ///     .own(account, Some(owner.clone()));
    /// assert_eq!(txn.writes()[0].1, Write::Own(Some(owner)));
    /// ```
    #[must_use]
    pub fn own(mut self, key: Key, owner: Option<Owner>) -> Self {
        self.writes.push((key, Write::Own(owner)));
        self
    }

    /// Commit as a transaction of the key group `group`: only documents the group owns
    /// (or absent ones) are touched, see [`ownership`](super::ownership).
    #[must_use]
    pub fn owned_by(mut self, group: impl Into<Arc<str>>) -> Self {
        self.owner = Some(group.into());
        self
    }

    /// The key group the transaction commits for, if any.
    #[must_use]
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The expected versions.
    #[must_use]
    pub fn reads(&self) -> &[(Key, Option<Version>)] {
        &self.reads
    }

    /// The writes, in order; a later write to the same key wins.
    #[must_use]
    pub fn writes(&self) -> &[(Key, Write)] {
        &self.writes
    }

    /// The writes, taken out of the transaction.
    /// Checks every document it writes: [`Error::Invalid`](crate::Error::Invalid) for a
    /// value nested deeper than [`MAX_NESTING`](crate::document::MAX_NESTING) (every
    /// store refuses the whole transaction, writing nothing).
    pub(crate) fn check_nesting(&self) -> crate::Result<()> {
        self.writes.iter().try_for_each(|(key, write)| match write {
            Write::Put(doc) | Write::Values(doc) => crate::document::check_nesting(key, doc),
            Write::Delete | Write::Own(_) => Ok(()),
        })
    }

    pub(crate) fn into_writes(self) -> Vec<(Key, Write)> {
        self.writes
    }

    /// This transaction split by entity group: one transaction per group, each with the
    /// same owner token and with its expectations and writes in this one's order (what a
    /// store without cross-group transactions commits one by one).
    pub(crate) fn by_group(self) -> Vec<Transaction> {
        let Transaction {
            reads,
            writes,
            owner,
        } = self;
        let mut parts: BTreeMap<Key, Transaction> = BTreeMap::new();
        let fresh = || Transaction {
            owner: owner.clone(),
            ..Transaction::default()
        };
        for (key, version) in reads {
            let part = parts.entry(key.group()).or_insert_with(fresh);
            part.reads.push((key, version));
        }
        for (key, write) in writes {
            let part = parts.entry(key.group()).or_insert_with(fresh);
            part.writes.push((key, write));
        }
        parts.into_values().collect()
    }

    /// Every key the transaction reads or writes.
    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.reads
            .iter()
            .map(|(k, _)| k)
            .chain(self.writes.iter().map(|(k, _)| k))
    }

    /// Whether all keys are in one entity group (required by stores without
    /// [`DocumentStore::cross_group_transactions`](super::DocumentStore::cross_group_transactions)).
    #[must_use]
    pub fn single_group(&self) -> bool {
        let mut keys = self.keys();
        match keys.next() {
            None => true,
            Some(first) => keys.all(|k| k.same_group(first)),
        }
    }
}

/// What [`DocumentStore::commit_versioned`](super::DocumentStore::commit_versioned) answers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct CommitReply {
    /// The outcome, as [`DocumentStore::commit`](super::DocumentStore::commit) answers it.
    pub outcome: Commit,
    /// For a committed transaction, where the store tells: the version each write gave its
    /// document, in the order of [`Transaction::writes`] (`None` for a delete, and for a
    /// write of the owner alone to an absent document, which writes nothing).
    pub versions: Option<Vec<Option<Version>>>,
}

impl CommitReply {
    /// `outcome`, without versions.
    pub fn untold(outcome: Commit) -> Self {
        CommitReply {
            outcome,
            versions: None,
        }
    }
}

/// The outcome of [`DocumentStore::commit`](super::DocumentStore::commit).
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Commit {
    /// Every write was applied.
    Committed,
    /// A read key had changed; nothing was applied.
    Conflict {
        /// One key whose version did not match.
        key: Key,
    },
}
