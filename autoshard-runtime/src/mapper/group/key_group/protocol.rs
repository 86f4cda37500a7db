//! The grouping protocol, for a store whose commits stay within one entity group (a Redis
//! Cluster: members live in different slots and no script spans them): join (create),
//! a transaction's prepare, log (its decision) and settling (`in_steps.rs`), release, and
//! recovery. Each step
//! is one or more commits of one entity group each; the group document (in an entity
//! group apart from the members', `layout::key_group`) orders them and records what is in flight, so that any client can
//! finish a step a crashed one left (see [`NEXT`] for a prepared document's new content).
//! Each step and why a crash at any point leaves a transaction applied whole or not at
//! all: the repository's `docs/design/key-groups.md`.

use super::KeyGroup;
use super::memo::Memo;
use crate::document::{Document, Value, Version, Versioned};
use crate::error::{Error, FieldError, Result};
use crate::key::Key;
use crate::mapper::Mapper;
use crate::store::merge::RECORD;
use crate::store::ownership::{OWNER, Owner};
use crate::store::{Commit, CommitReply, DocumentStore, Transaction, Write};
use crate::sync::lock;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The property of the group document that records the transaction in flight.
pub(super) const IN_FLIGHT: &str = "pending";

/// The reserved property of a document a transaction holds: its content once the
/// transaction commits.
pub(super) const NEXT: &str = "~next";

/// How many times a step rereads documents that changed under it before giving up.
const REREADS: u32 = 16;

/// The transaction a group document records as in flight.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct InFlight {
    /// Its id (also the `txn` of the documents it holds).
    pub txn: String,
    /// The documents it writes.
    pub keys: Vec<Key>,
    /// `Some(true)`: committed; `Some(false)`: aborted; `None`: not decided yet.
    pub decided: Option<bool>,
}

impl InFlight {
    /// The transaction the group document `doc` at `key` records, if any.
    pub(super) fn of(key: &Key, doc: &Document) -> Result<Option<InFlight>> {
        let Some(in_flight) = doc.get(IN_FLIGHT) else {
            return Ok(None);
        };
        let bad = || {
            Error::malformed(
                key,
                FieldError::new(IN_FLIGHT, "expected `{txn, keys, decided}`"),
            )
        };
        let txn = in_flight
            .get("txn")
            .and_then(Value::as_str)
            .ok_or_else(bad)?;
        let keys = in_flight
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(bad)?
            .iter()
            .map(|k| k.as_str().and_then(|k| Key::decode(k).ok()).ok_or_else(bad))
            .collect::<Result<_>>()?;
        let decided = match in_flight.get("decided") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => return Err(bad()),
        };
        Ok(Some(InFlight {
            txn: txn.to_owned(),
            keys,
            decided,
        }))
    }

    pub(super) fn to_value(&self) -> Value {
        serde_json::json!({
            "txn": self.txn,
            "keys": self.keys.iter().map(Key::encode).collect::<Vec<_>>(),
            "decided": self.decided,
        })
    }
}

/// Commits every part concurrently; `Committed` when all did, else the first conflict
/// (the other parts may have committed) or the first error.
pub(super) async fn commit_all<S: DocumentStore>(
    mapper: &Mapper<S>,
    parts: &[Transaction],
) -> Result<Commit> {
    Ok(commit_all_versioned(mapper, parts).await?.0)
}

/// [`commit_all`], with the version each put of a committed part gave its document,
/// where the store tells ([`DocumentStore::commit_versioned`]).
pub(super) async fn commit_all_versioned<S: DocumentStore>(
    mapper: &Mapper<S>,
    parts: &[Transaction],
) -> Result<(Commit, BTreeMap<Key, Version>)> {
    let answers = parts.iter().map(|t| mapper.store.commit_versioned(t));
    gathered(parts, futures::future::join_all(answers).await)
}

/// The outcome of `parts` committed concurrently, from their `answers` (in order):
/// `Committed` when all did, with the version each put of a part gave its document where
/// told, else the first conflict or error.
pub(super) fn gathered(
    parts: &[Transaction],
    answers: Vec<Result<CommitReply>>,
) -> Result<(Commit, BTreeMap<Key, Version>)> {
    let mut outcome = Ok(Commit::Committed);
    let mut versions = BTreeMap::new();
    for (part, answer) in parts.iter().zip(answers) {
        match (answer, &outcome) {
            (Err(e), Ok(_)) => outcome = Err(e),
            (Ok(committed), _) if committed.outcome == Commit::Committed => {
                let told = committed.versions.unwrap_or_default();
                for ((key, _), version) in part.writes().iter().zip(told) {
                    if let Some(version) = version {
                        versions.insert(key.clone(), version);
                    }
                }
            }
            (Ok(conflict), Ok(Commit::Committed)) => outcome = Ok(conflict.outcome),
            _ => {}
        }
    }
    Ok((outcome?, versions))
}

/// Commits `txn` with its owner token, or without one when the token is refused because
/// the lease has passed (documents a passed lease left free take writes without it),
/// telling the versions its writes gave where the store tells them.
pub(super) async fn commit_either_versioned<S: DocumentStore>(
    mapper: &Mapper<S>,
    txn: &Transaction,
) -> Result<CommitReply> {
    match mapper.store.commit_versioned(txn).await {
        Err(Error::GroupLost { .. }) if txn.owner().is_some() => {
            mapper.store.commit_versioned(&without_owner(txn)).await
        }
        other => other,
    }
}

/// The same transaction without an owner token.
fn without_owner(txn: &Transaction) -> Transaction {
    let mut plain = Transaction::new();
    for (key, version) in txn.reads() {
        plain = plain.expect(key.clone(), *version);
    }
    for (key, write) in txn.writes() {
        plain = with_write(plain, key.clone(), write.clone());
    }
    plain
}

/// `txn` with `write` of `key` added.
fn with_write(txn: Transaction, key: Key, write: Write) -> Transaction {
    match write {
        Write::Put(doc) => txn.put(key, doc),
        Write::Values(doc) => txn.put_values(key, doc),
        Write::Delete => txn.delete(key),
        Write::Own(owner) => txn.own(key, owner),
    }
}

/// What the document `doc` at `key`, held by a transaction, becomes once it is settled:
/// its next content when the transaction committed, else itself; owned by the group, held
/// no more.
fn settled(key: &Key, doc: &Document, owner: &Owner, commit: bool) -> Result<Document> {
    let released = Owner {
        txn: None,
        ..owner.clone()
    };
    if !commit {
        return Ok(dropped(doc, Some(&released)));
    }
    match doc.get(NEXT) {
        Some(Value::Object(next)) => Ok(super::committed_content(
            next.clone().into_iter().collect(),
            &released,
        )),
        _ => Err(Error::malformed(
            key,
            FieldError::new(NEXT, "a held document without its next content"),
        )),
    }
}

/// The held document `doc` as it is without the transaction's change: its next content
/// dropped, `owner` its owner (`None`: no owner).
fn dropped(doc: &Document, owner: Option<&Owner>) -> Document {
    let mut doc = doc.clone();
    doc.remove(NEXT);
    match owner {
        Some(owner) => doc.insert(OWNER.to_owned(), owner.to_value()),
        None => doc.remove(OWNER),
    };
    doc
}

/// `keys` by entity group.
fn by_group(keys: &[Key]) -> BTreeMap<Key, Vec<Key>> {
    let mut groups: BTreeMap<Key, Vec<Key>> = BTreeMap::new();
    for key in keys {
        groups.entry(key.group()).or_default().push(key.clone());
    }
    groups
}

/// What one run of a step found to do ([`Steps::until_committed`]).
enum Next<T> {
    /// Nothing (left) to write: the step's answer.
    Done(T),
    /// Commit this, and answer that once it commits.
    Commit(Transaction, T),
}

impl Next<()> {
    /// Commit `write`, or nothing when it writes nothing.
    fn commit_unless_empty(write: Transaction) -> Self {
        if write.writes().is_empty() {
            Next::Done(())
        } else {
            Next::Commit(write, ())
        }
    }
}

/// What a group's steps need: the mapper, the group's id and document.
pub(super) struct Steps<'a, S> {
    pub mapper: &'a Mapper<S>,
    pub id: Arc<str>,
    pub key: &'a Key,
    /// What the group's handle knows from its own commits (`memo.rs`): among it, the
    /// last transaction it settled (its documents, not the group document's record of
    /// it); `None` for a step that runs without the handle.
    pub memo: Option<&'a Mutex<Memo>>,
}

impl<S: DocumentStore> Steps<'_, S> {
    pub(super) fn token(&self) -> Transaction {
        Transaction::new().owned_by(self.id.clone())
    }

    /// Notes a committed `txn` in the handle's memo, if the step has one.
    pub(super) fn remember(&self, txn: &Transaction, reply: &CommitReply) {
        if let Some(memo) = self.memo {
            lock(memo).committed(self.key, txn, reply);
        }
    }

    /// Runs `step` until the commit it asks for commits: each run reads what it needs and
    /// answers [`Next`]; after a conflict or an unknown outcome it runs again (so a commit
    /// that landed shows up as nothing left to do), at most [`REREADS`] times. `either`:
    /// commit as [`commit_either_versioned`] does (for documents a passed lease may have freed).
    async fn until_committed<T, F, Fut>(&self, key: &Key, either: bool, mut step: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Next<T>>>,
    {
        for _ in 0..REREADS {
            let (txn, value) = match step().await? {
                Next::Done(value) => return Ok(value),
                Next::Commit(txn, value) => (txn, value),
            };
            let answer = if either {
                commit_either_versioned(self.mapper, &txn).await
            } else {
                self.mapper.store.commit_versioned(&txn).await
            };
            match answer {
                Ok(reply) if reply.outcome == Commit::Committed => {
                    self.remember(&txn, &reply);
                    return Ok(value);
                }
                Ok(_) | Err(Error::Backend { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Err(Error::Contention {
            key: key.clone(),
            attempts: REREADS,
        })
    }

    /// The group document: `known` (as this step's caller wrote or read it) at a step's
    /// first try, else as the store has it now.
    async fn group_document(&self, known: Option<Versioned>) -> Result<Option<Versioned>> {
        match known {
            Some(state) => Ok(Some(state)),
            None => self.mapper.store.get(self.key).await,
        }
    }

    /// The decision on transaction `in_flight`, made `commit` unless it was made already:
    /// `None` when the group document no longer records it (it was settled).
    /// `logged`: the group document as the transaction's log wrote it, when known, read in
    /// place of the store's at the first try.
    pub(super) async fn decide(
        &self,
        in_flight: &InFlight,
        commit: bool,
        logged: Option<Versioned>,
    ) -> Result<Option<bool>> {
        let mut logged = logged;
        self.until_committed(self.key, true, || {
            let known = logged.take();
            async move {
                let Some(state) = self.group_document(known).await? else {
                    return Ok(Next::Done(None));
                };
                let recorded = InFlight::of(self.key, &state.doc)?;
                let Some(recorded) = recorded.filter(|p| p.txn == in_flight.txn) else {
                    return Ok(Next::Done(None));
                };
                if let Some(decided) = recorded.decided {
                    // Another run's decision, which may have been answered with an error.
                    let read = std::slice::from_ref(self.key);
                    self.mapper.store.make_durable(read).await?;
                    return Ok(Next::Done(Some(decided)));
                }
                let mut doc = state.doc;
                let decided = InFlight {
                    decided: Some(commit),
                    ..recorded
                };
                doc.insert(IN_FLIGHT.to_owned(), decided.to_value());
                let txn = self
                    .token()
                    .expect(self.key.clone(), Some(state.version))
                    .put(self.key.clone(), doc);
                Ok(Next::Commit(txn, Some(commit)))
            }
        })
        .await
    }

    /// Settles transaction `in_flight` (decided abort first when undecided): every document
    /// it holds takes its next content or drops it, then the group document forgets it.
    /// Whether it committed (`None`: someone settled it meanwhile).
    pub(super) async fn settle(&self, in_flight: &InFlight) -> Result<Option<bool>> {
        let decided = self.settle_documents(in_flight, &BTreeMap::new()).await?;
        if decided.is_some() {
            self.forget(&in_flight.txn).await?;
        }
        Ok(decided)
    }

    /// [`Steps::settle`] without the group document's last step: it goes on recording the
    /// transaction, decided, whose documents are settled (settling it again writes nothing
    /// to them, and the next transaction's log replaces it). `prepared`: documents as the
    /// transaction's prepare wrote them, where known, read in place of the store's at the
    /// first try.
    pub(super) async fn settle_documents(
        &self,
        in_flight: &InFlight,
        prepared: &BTreeMap<Key, Versioned>,
    ) -> Result<Option<bool>> {
        let decided = match in_flight.decided {
            Some(decided) => Some(decided),
            None => self.decide(in_flight, false, None).await?,
        };
        let Some(commit) = decided else {
            return Ok(None);
        };
        self.settle_held(&in_flight.keys, &in_flight.txn, commit, prepared)
            .await?;
        if let Some(memo) = self.memo {
            lock(memo).settled = Some(in_flight.txn.clone());
        }
        Ok(Some(commit))
    }

    /// Settles the documents of `keys` that transaction `txn` holds, each entity group's
    /// in one commit, concurrently ([`Steps::settle_part`]).
    pub(super) async fn settle_held(
        &self,
        keys: &[Key],
        txn: &str,
        commit: bool,
        prepared: &BTreeMap<Key, Versioned>,
    ) -> Result<()> {
        let parts = by_group(keys);
        let parts = parts
            .values()
            .map(|keys| self.settle_part(keys, txn, commit, prepared));
        futures::future::try_join_all(parts).await?;
        Ok(())
    }

    /// Settles the documents `keys` of one entity group that transaction `txn` holds.
    /// Those in `prepared` (all of them) are taken as written there at the first try.
    async fn settle_part(
        &self,
        keys: &[Key],
        txn: &str,
        commit: bool,
        prepared: &BTreeMap<Key, Versioned>,
    ) -> Result<()> {
        let mut known: Option<Vec<Option<Cow<'_, Versioned>>>> = keys
            .iter()
            .map(|k| prepared.get(k).map(|doc| Some(Cow::Borrowed(doc))))
            .collect();
        self.until_committed(&keys[0], false, || {
            let known = known.take();
            async move {
                let docs = if let Some(docs) = known {
                    docs
                } else {
                    let read = self.mapper.get_exactly(keys).await?;
                    read.into_iter().map(|doc| doc.map(Cow::Owned)).collect()
                };
                let mut write = self.token();
                for (key, doc) in keys.iter().zip(docs) {
                    let Some(doc) = doc else { continue };
                    let Some(owner) = Owner::of(&doc.doc) else {
                        continue;
                    };
                    if owner.txn.as_deref() != Some(txn) || *owner.group != *self.id {
                        continue;
                    }
                    let settled = settled(key, &doc.doc, &owner, commit)?;
                    write = write.expect(key.clone(), Some(doc.version));
                    // A next content without a write record (a one-shot transaction's,
                    // which read without them) leaves the stored record as it is.
                    write = if settled.contains_key(RECORD) {
                        write.put(key.clone(), settled)
                    } else {
                        write.put_values(key.clone(), settled)
                    };
                }
                Ok(Next::commit_unless_empty(write))
            }
        })
        .await
    }

    /// Takes transaction `txn` out of the group document.
    async fn forget(&self, txn: &str) -> Result<()> {
        self.until_committed(self.key, true, || async {
            let Some(state) = self.mapper.store.get(self.key).await? else {
                return Ok(Next::Done(()));
            };
            if InFlight::of(self.key, &state.doc)?.is_none_or(|p| p.txn != txn) {
                return Ok(Next::Done(()));
            }
            let mut doc = state.doc;
            doc.remove(IN_FLIGHT);
            let write = self
                .token()
                .expect(self.key.clone(), Some(state.version))
                .put(self.key.clone(), doc);
            Ok(Next::Commit(write, ()))
        })
        .await
    }

    /// The group document and the documents `also` (one read when the group document
    /// records no transaction left in flight), after settling the transaction it records,
    /// if any: what every step does before it reads members. A transaction this handle
    /// settled itself (its memo, [`Steps::memo`]) is not settled again.
    pub(super) async fn settled_state(&self, also: &[Key]) -> Result<Vec<Option<Versioned>>> {
        let mut keys = vec![self.key.clone()];
        keys.extend_from_slice(also);
        let found = self.mapper.get_exactly(&keys).await?;
        let Some(Some(state)) = found.first() else {
            return Ok(found);
        };
        let Some(in_flight) = InFlight::of(self.key, &state.doc)? else {
            return Ok(found);
        };
        let settled = self.memo.and_then(|memo| lock(memo).settled.clone());
        if settled.as_deref() == Some(in_flight.txn.as_str()) {
            return Ok(found);
        }
        tracing::debug!(group = %self.id, txn = %in_flight.txn, "settling a transaction left in flight");
        self.settle(&in_flight).await?;
        self.mapper.get_exactly(&keys).await
    }

    /// The group document, after settling the transaction it records ([`Steps::settled_state`]).
    pub(super) async fn settled_group_document(&self) -> Result<Option<Versioned>> {
        Ok(self.settled_state(&[]).await?.into_iter().next().flatten())
    }

    /// Gives each document of `keys` the group owns `owner` (`None`: no owner), a write of
    /// the owner alone (`Write::Own`), one entity group at a time, rereading those that
    /// changed meanwhile. A document a transaction still holds (one whose log never
    /// landed: the caller settled the one the group document records) is written whole
    /// without that transaction's change.
    pub(super) async fn rewrite_owned(&self, keys: &[Key], owner: Option<&Owner>) -> Result<()> {
        let groups = by_group(keys);
        let parts = groups.values().map(|keys| {
            self.until_committed(&keys[0], true, move || async move {
                let mut docs = self.mapper.get_values(keys).await?;
                let ours = |doc: &Versioned| Owner::of(&doc.doc).filter(|o| *o.group == *self.id);
                if docs
                    .iter()
                    .flatten()
                    .any(|d| ours(d).is_some_and(|o| o.txn.is_some()))
                {
                    // A held document is written whole, write records included.
                    docs = self.mapper.get_exactly(keys).await?;
                }
                let mut write = self.token();
                for (key, doc) in keys.iter().zip(docs) {
                    let Some(doc) = doc else { continue };
                    let Some(current) = ours(&doc) else { continue };
                    write = write.expect(key.clone(), Some(doc.version));
                    write = if current.txn.is_some() {
                        // Held by a transaction the group document does not record (every
                        // step settles the one it records first): one whose log never
                        // landed, its change dropped as an abort drops it.
                        write.put(key.clone(), dropped(&doc.doc, owner))
                    } else {
                        write.own(key.clone(), owner.cloned())
                    };
                }
                Ok(Next::commit_unless_empty(write))
            })
        });
        futures::future::try_join_all(parts).await?;
        Ok(())
    }

    /// Undoes a create whose joins did not all commit: releases what joined and rewrites
    /// the rest unchanged (module docs: no ghost), then deletes the group document.
    pub(super) async fn abort_create(&self, tried: &[Key]) -> Result<()> {
        self.rewrite_owned(tried, None).await?;
        let docs = self.mapper.get_values(tried).await?;
        let mut fences = Transaction::new();
        for (key, doc) in tried.iter().zip(docs) {
            if let Some(doc) = doc
                && Owner::of(&doc.doc).is_none()
            {
                fences = fences
                    .expect(key.clone(), Some(doc.version))
                    .own(key.clone(), None);
            }
        }
        // A fence that conflicts or meets another group's owner has done its job: the
        // version it expected is gone.
        let _ = commit_all(self.mapper, &fences.by_group()).await;
        self.delete_group_document(None).await
    }

    /// Deletes the group document and its list document (one entity group), expecting the
    /// group document as `read` (as the caller read it) before reading it.
    pub(super) async fn delete_group_document(&self, read: Option<Versioned>) -> Result<()> {
        let mut read = read;
        self.until_committed(self.key, true, || {
            let known = read.take();
            async move {
                let Some(state) = self.group_document(known).await? else {
                    return Ok(Next::Done(()));
                };
                let write = self
                    .token()
                    .expect(self.key.clone(), Some(state.version))
                    .delete(self.key.clone())
                    .delete(crate::mapper::layout::key_group_members(self.key));
                Ok(Next::Commit(write, ()))
            }
        })
        .await
    }
}

impl<S: DocumentStore> KeyGroup<'_, S> {
    pub(super) fn steps(&self) -> Steps<'_, S> {
        Steps {
            mapper: self.mapper,
            id: self.id.clone(),
            key: &self.key,
            memo: Some(&self.memo),
        }
    }
}
