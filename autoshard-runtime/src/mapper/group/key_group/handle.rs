//! [`KeyGroup`]: the handle of a live group (its transactions, renewing its lease,
//! dissolving it), and recovering groups whose lease has passed.

use super::holder::Holder;
use super::memo::Memo;
use super::{GroupTransaction, listed, listed_in, millis, protocol, send_versioned};
use crate::document::Versioned;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::layout;
use crate::mapper::write::write_ids::Pool;
use crate::store::ownership::{OWNER, Owner};
use crate::store::{Commit, DocumentStore, Transaction};
use crate::sync::lock;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

/// A key group (G-Store; Das, Agrawal and El Abbadi, SoCC 2010): root entities of any
/// kinds and ids, owned together while the group lives, so that transactions over them
/// are serializable and atomic. Formed by [`Mapper::key_group`].
///
/// - [`KeyGroup::transaction`] runs a transaction: load members, change them (plain
///   fields and `#[shard_method]`s alike: a change to a sharded property folds into one
///   shard, which the group owns), save them, commit.
/// - While the group lives, every other write to a member fails with
///   [`Error::Grouped`] and writes nothing (reads go on); a key is in at most one group.
/// - [`KeyGroup::dissolve`] hands the members back. A group that is dropped without
///   being dissolved owns its members until its lease passes.
///
/// Prefer a key group when several entities must change together under an invariant (a
/// transfer between accounts, merging two questions). For a hot counter that each user
/// changes once, prefer `update_once`: a group makes every other writer of its members
/// wait for it, which a hot entity cannot afford.
pub struct KeyGroup<'m, S> {
    pub(super) mapper: &'m Mapper<S>,
    pub(super) id: std::sync::Arc<str>,
    pub(super) key: Key,
    pub(super) members: Vec<Key>,
    /// Every document the group owns (it owns the documents its transactions create too).
    pub(super) owned: Mutex<BTreeSet<Key>>,
    pub(super) until_ms: Mutex<u64>,
    /// Transactions through this handle take turns.
    pub(super) turn: tokio::sync::Mutex<()>,
    /// The writers of its transactions' write ids, one at a time as they take turns: the
    /// group document records one entry per writer (within the write window), which every
    /// transaction reads and rewrites, so the group keeps its own rather than drawing from
    /// the mapper's pool, shared by every concurrent save.
    pub(super) writers: Pool,
    /// What this handle knows from its own commits (`memo.rs`).
    pub(super) memo: Mutex<Memo>,
}

impl<S> fmt::Debug for KeyGroup<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyGroup")
            .field("id", &self.id)
            .field("members", &self.members)
            .field("until_ms", &*lock(&self.until_ms))
            .finish_non_exhaustive()
    }
}

impl<'m, S: DocumentStore> KeyGroup<'m, S> {
    /// The group's id (what [`Error::Grouped`] names).
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The main documents of its members.
    #[must_use]
    pub fn members(&self) -> &[Key] {
        &self.members
    }

    /// When its lease ends, in milliseconds since the Unix epoch by the store's clock.
    #[must_use]
    pub fn until_ms(&self) -> u64 {
        *lock(&self.until_ms)
    }

    /// Starts a transaction, once the one before it through this handle has ended (they
    /// take turns). Nothing is read yet: the first load also reads the group document,
    /// the transactions' commit log head.
    pub async fn transaction(&self) -> GroupTransaction<'_, 'm, S> {
        let turn = self.turn.lock().await;
        GroupTransaction::begin(Holder::Shared {
            group: self,
            _turn: turn,
        })
    }

    /// Extends the lease to `lease` from now (by the store's clock), in one commit of the
    /// group.
    ///
    /// # Errors
    /// [`Error::GroupLost`] when the lease has passed already; [`Error::Contention`],
    /// [`Error::Backend`].
    pub async fn renew(&self, lease: Duration) -> Result<()> {
        let _turn = self.turn.lock().await;
        let until = self
            .mapper
            .store
            .now_ms()
            .await?
            .saturating_add(millis(lease));
        let owner = Owner {
            group: self.id.to_string(),
            until_ms: until,
            txn: None,
        };
        self.rewrite(Some(&owner), true).await?;
        *lock(&self.until_ms) = until;
        Ok(())
    }

    /// Hands the members back: one commit that takes the group's owner out of every
    /// document it owns and deletes the group document. After a lease that passed, the
    /// documents are free already; this then only tidies them.
    ///
    /// # Errors
    /// [`Error::Contention`], [`Error::Backend`]: the members may still be owned, until
    /// the lease passes.
    pub async fn dissolve(self) -> Result<()> {
        let _turn = self.turn.lock().await;
        let dissolved = match self.rewrite(None, true).await {
            Err(Error::GroupLost { .. }) => self.rewrite(None, false).await,
            other => other,
        };
        // Waiters of this process look again (also after an error: the members may be free).
        self.mapper.released.notify_waiters();
        dissolved
    }

    /// Gives every document the group owns `owner` (`None`: no owner, and the group
    /// document deleted), a write of the owner alone (`Write::Own`), in one commit, with
    /// retries; `token`: as the group's transaction (else as a writer without a token, for
    /// documents whose lease passed).
    async fn rewrite(&self, owner: Option<&Owner>, token: bool) -> Result<()> {
        let mapper = self.mapper;
        if !mapper.store.cross_group_transactions() {
            return self.rewrite_in_steps(owner).await;
        }
        if owner.is_none() && token && self.release_known_at_once().await? {
            return Ok(());
        }
        let mut retrying = mapper.retrying("key group");
        loop {
            let attempt = async {
                let state = mapper.store.get(&self.key).await?;
                let Some(state) = state else {
                    return Err(Error::GroupLost {
                        key: self.key.clone(),
                        group: self.id.to_string(),
                    });
                };
                let listed = listed(mapper, &self.key).await?;
                let docs = mapper.get_values(&listed).await?;
                let mut txn = Transaction::new();
                if token {
                    txn = txn.owned_by(self.id.clone());
                }
                for (key, doc) in listed.iter().zip(docs) {
                    let Some(doc) = doc else { continue };
                    if Owner::of(&doc.doc).is_none_or(|o| *o.group != *self.id) {
                        continue;
                    }
                    txn = txn.expect(key.clone(), Some(doc.version));
                    txn = match owner {
                        // The list document goes with the group.
                        None if key.parent().as_ref() == Some(&self.key) => txn.delete(key.clone()),
                        owner => txn.own(key.clone(), owner.cloned()),
                    };
                }
                txn = txn.expect(self.key.clone(), Some(state.version));
                let gone = owner.is_none();
                txn = match owner {
                    Some(owner) => {
                        let mut doc = state.doc.clone();
                        doc.insert(OWNER.to_owned(), owner.to_value());
                        txn.put(self.key.clone(), doc)
                    }
                    None => txn.delete(self.key.clone()),
                };
                let until = owner.map(|o| o.until_ms);
                let landed = |doc: Option<&Versioned>| match doc {
                    None => gone,
                    Some(doc) => Owner::of(&doc.doc).map(|o| o.until_ms) == until,
                };
                Ok(self.send_noted(&txn, landed).await?.into())
            };
            if let std::ops::ControlFlow::Break(()) = retrying.attempt(attempt).await? {
                return Ok(());
            }
        }
    }
}

impl<S: DocumentStore> KeyGroup<'_, S> {
    /// Commits `txn`, one step of this group on a store that commits across entity groups
    /// ([`send_versioned`]), and notes in the memo what it wrote, at the versions told.
    pub(super) async fn send_noted(
        &self,
        txn: &Transaction,
        landed: impl Fn(Option<&Versioned>) -> bool,
    ) -> Result<Commit> {
        let reply = send_versioned(self.mapper, txn, &self.key, landed).await?;
        lock(&self.memo).committed(&self.key, txn, &reply);
        Ok(reply.outcome)
    }

    /// [`KeyGroup::rewrite`] on a store without cross-group commits (see `protocol`): the
    /// transaction left in flight settled, each entity group's documents, then the group
    /// document.
    async fn rewrite_in_steps(&self, owner: Option<&Owner>) -> Result<()> {
        let steps = self.steps();
        if owner.is_none() {
            let documents = lock(&self.owned).clone();
            if steps.release_known(&documents).await? {
                return Ok(());
            }
        } else {
            // The renewal rewrites the group document apart from the steps.
            lock(&self.memo).state = None;
        }
        let list_key = layout::key_group_members(&self.key);
        let found = steps.settled_state(std::slice::from_ref(&list_key)).await?;
        let (Some(Some(state)), Some(list)) = (found.first(), found.get(1)) else {
            return Err(Error::GroupLost {
                key: self.key.clone(),
                group: self.id.to_string(),
            });
        };
        let mut listed = listed_in(&list_key, list.as_ref())?;
        if owner.is_none() {
            // The list document goes with the group document, still owned.
            listed.retain(|key| key.parent().as_ref() != Some(&self.key));
        }
        steps.rewrite_owned(&listed, owner).await?;
        let Some(owner) = owner else {
            return steps.delete_group_document(Some(state.clone())).await;
        };
        let mut retrying = self.mapper.retrying("key group");
        loop {
            let attempt = async {
                let Some(state) = self.mapper.store.get(&self.key).await? else {
                    return Err(Error::GroupLost {
                        key: self.key.clone(),
                        group: self.id.to_string(),
                    });
                };
                let mut doc = state.doc;
                doc.insert(OWNER.to_owned(), owner.to_value());
                let txn = Transaction::new()
                    .owned_by(self.id.clone())
                    .expect(self.key.clone(), Some(state.version))
                    .put(self.key.clone(), doc);
                Ok(self.mapper.store.commit(&txn).await?.into())
            };
            if let std::ops::ControlFlow::Break(()) = retrying.attempt(attempt).await? {
                return Ok(());
            }
        }
    }
}

impl<S: DocumentStore> Mapper<S> {
    /// Finishes every key group whose lease has passed (by the store's clock), on any
    /// store: settles the transaction it left in flight (applied whole or not at all),
    /// takes its owner out of every document it owned, and deletes its group document. Any
    /// client may call it, at any time; a group whose lease still runs is left alone. How
    /// many groups it finished.
    ///
    /// A group whose client stopped without dissolving it leaves its members owned until
    /// the lease passes; a document a transaction of it held ([`Error::Grouped`] past the
    /// lease's end) stays owned until this runs, which any write that meets such a
    /// document does on its own before it goes again.
    ///
    /// ```
    /// # use autoshard::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// assert_eq!(db.recover_key_groups().await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::Backend`], [`Error::Contention`], [`Error::Malformed`] for a group document
    /// this crate did not write.
    pub async fn recover_key_groups(&self) -> Result<usize> {
        let now = self.store.now_ms().await?;
        let mut groups = Vec::new();
        for scan in layout::key_group_scans() {
            groups.extend(self.scan_all(scan).await?);
        }
        let mut recovered = 0;
        for (key, state) in groups {
            let Some(owner) = Owner::of(&state.doc) else {
                continue;
            };
            if owner.until_ms > now {
                continue;
            }
            let steps = protocol::Steps {
                mapper: self,
                id: owner.group.as_str().into(),
                key: &key,
                memo: None,
            };
            steps.settled_state(&[]).await?;
            let listed = listed(self, &key).await?;
            steps.rewrite_owned(&listed, None).await?;
            steps.delete_group_document(None).await?;
            tracing::info!(group = %owner.group, "recovered a key group whose lease passed");
            recovered += 1;
        }
        if recovered > 0 {
            self.released.notify_waiters();
        }
        Ok(recovered)
    }
}
