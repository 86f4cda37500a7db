//! [`KeyGroupBuilder`]: naming a group's members, and creating the group (or running one
//! transaction on a group formed for it).

use super::transaction::Holder;
use super::{
    group_documents, millis, protocol, read_member, send, GroupTransaction, KeyGroup, ReadMember,
    DEFAULT_LEASE,
};
use crate::document::Versioned;
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::attempt::Attempt;
use crate::mapper::layout::{self};
use crate::mapper::Mapper;
use crate::store::ownership::{self, Owner, OWNER};
use crate::store::{Commit, DocumentStore, Transaction};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

/// Forms a [`KeyGroup`] (see [`Mapper::key_group`]).
#[must_use = "a builder does nothing until `create` or `once`"]
pub struct KeyGroupBuilder<'m, S> {
    mapper: &'m Mapper<S>,
    members: Vec<(Key, ReadMember<S>)>,
    lease: Duration,
}

impl<S> fmt::Debug for KeyGroupBuilder<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyGroupBuilder")
            .field(
                "members",
                &self.members.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl<S: DocumentStore> Mapper<S> {
    /// Starts forming a key group (G-Store): name its members with
    /// [`KeyGroupBuilder::member`], then [`KeyGroupBuilder::create`] it and run
    /// transactions on it, or run one transaction with [`KeyGroupBuilder::once`]. While
    /// the group lives, only its transactions change its members (see [`KeyGroup`]).
    ///
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[autoshard::sharded]
    /// #[derive(Entity, Debug, Clone)]
    /// struct Account {
    ///     #[id]
    ///     id: u64,
    ///     #[shardable(neutral = 0, shards = 4)]
    ///     balance: i64,
    /// }
    ///
    /// impl Account {
    ///     #[shard_method]
    ///     fn deposit(&mut self, amount: i64) {
    ///         self.balance += amount;
    ///     }
    ///
    ///     #[shard_fold]
    ///     fn fold_balance(a: i64, b: i64) -> i64 {
    ///         a + b
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Account::new(1, 100)).await?;
    /// db.insert(&mut Account::new(2, 0)).await?;
    ///
    /// let group = db.key_group().member::<Account>(&1).member::<Account>(&2).create().await?;
    /// let mut txn = group.transaction().await;
    /// let mut from: Account = txn.load(&1).await?;
    /// let mut to: Account = txn.load(&2).await?;
    /// if from.balance >= 30 {
    ///     from.deposit(-30);
    ///     to.deposit(30);
    /// }
    /// txn.save(&mut from)?;
    /// txn.save(&mut to)?;
    /// txn.commit().await?;
    ///
    /// // Meanwhile a member takes no other write.
    /// let refused = db.apply(&2, |a: &mut Account| a.deposit(1)).await;
    /// assert!(matches!(refused, Err(Error::Grouped { .. })));
    /// group.dissolve().await?;
    ///
    /// assert_eq!(db.load::<Account>(&1).await?.balance, 70);
    /// assert_eq!(db.load::<Account>(&2).await?.balance, 30);
    /// # Ok(())
    /// # }
    /// ```
    pub fn key_group(&self) -> KeyGroupBuilder<'_, S> {
        KeyGroupBuilder {
            mapper: self,
            members: Vec::new(),
            lease: DEFAULT_LEASE,
        }
    }
}

impl<'m, S: DocumentStore> KeyGroupBuilder<'m, S> {
    /// Adds the root entity of kind `E` with this id (once, however often it is named).
    pub fn member<E: Root>(mut self, id: &(impl ToOwned<Owned = E::Id> + ?Sized)) -> Self {
        let main = E::key_for(&id.to_owned());
        if !self.members.iter().any(|(k, _)| *k == main) {
            self.members.push((main, read_member::<S, E>));
        }
        self
    }

    /// How long the group owns its members after it is created (default
    /// [`DEFAULT_LEASE`]): past it, by the store's clock, they are free again and the
    /// group's transactions fail with [`Error::GroupLost`]. [`KeyGroup::renew`] extends it.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Forms the group: one commit that makes it the owner of every document of every
    /// member, with retries when a member changes meanwhile.
    ///
    /// # Errors
    /// [`Error::NotFound`] for a member that is not stored; [`Error::Grouped`] for a member
    /// another live group owns; [`Error::Invalid`] for no member; [`Error::Contention`]
    /// when members keep changing. Nothing is owned after an error but
    /// [`Error::Backend`], whose outcome is unknown: the group then owns its members at
    /// most until its lease passes.
    pub async fn create(self) -> Result<KeyGroup<'m, S>> {
        let mapper = self.mapper;
        if self.members.is_empty() {
            return Err(Error::Invalid(
                "a key group needs at least one member".to_owned(),
            ));
        }
        let mut retrying = mapper.retrying("create key group");
        loop {
            // A fresh id per attempt: nothing an earlier attempt sent can join this one.
            let id = uuid::Uuid::new_v4().simple().to_string();
            let key = layout::key_group(&id);
            let attempt = self.try_create(&id, &key);
            if let std::ops::ControlFlow::Break(group) = retrying.attempt(attempt).await? {
                return Ok(group);
            }
        }
    }

    /// One attempt of [`KeyGroupBuilder::create`].
    async fn try_create(&self, id: &str, key: &Key) -> Result<Attempt<KeyGroup<'m, S>>> {
        let mapper = self.mapper;
        let now = mapper.store.now_ms().await?;
        let owner = Owner {
            group: id.to_owned(),
            until_ms: now.saturating_add(millis(self.lease)),
            txn: None,
        };
        let reads = self.members.iter().map(|(main, read)| read(mapper, main));
        let read = futures::future::try_join_all(reads).await?;
        let mut joins = Transaction::new();
        let mut claimed = BTreeSet::new();
        for ((main, _), member) in self.members.iter().zip(&read) {
            if member.found.main().is_none() {
                return Err(Error::NotFound { key: main.clone() });
            }
            for (doc_key, doc) in member.found.documents() {
                if let Err(refused) = ownership::check(doc_key, Some(&doc.doc), None, now) {
                    // A transaction of a group whose lease passed still holds it: finish
                    // that group, then try again.
                    if Owner::of(&doc.doc).is_some_and(|o| o.txn.is_some() && o.until_ms <= now) {
                        mapper.recover_key_groups().await?;
                        return Ok(Attempt::Conflict(doc_key.clone()));
                    }
                    return Err(refused);
                }
                let mut stamped = doc.doc.clone();
                stamped.insert(OWNER.to_owned(), owner.to_value());
                joins = joins
                    .expect(doc_key.clone(), Some(doc.version))
                    .put(doc_key.clone(), stamped);
                claimed.insert(doc_key.clone());
            }
            for (doc_key, doc) in &member.missing {
                let mut stamped = doc.clone();
                stamped.insert(OWNER.to_owned(), owner.to_value());
                joins = joins
                    .expect(doc_key.clone(), None)
                    .put(doc_key.clone(), stamped);
                claimed.insert(doc_key.clone());
            }
        }
        let members: Vec<Key> = self.members.iter().map(|(k, _)| k.clone()).collect();
        let (state, list) = group_documents(&members, &claimed, &owner);
        let list_key = layout::key_group_members(key);
        tracing::debug!(
            group = id,
            members = members.len(),
            documents = claimed.len(),
            "create key group"
        );
        let landed = |doc: Option<&Versioned>| doc.is_some();
        let created = if mapper.store.cross_group_transactions() {
            let txn = joins
                .expect(key.clone(), None)
                .put(key.clone(), state)
                .expect(list_key.clone(), None)
                .put(list_key, list);
            send(mapper, &txn, key, landed).await?
        } else {
            // The grouping protocol (`protocol`): the group document, then the joins.
            let insert = Transaction::new()
                .expect(key.clone(), None)
                .put(key.clone(), state)
                .expect(list_key.clone(), None)
                .put(list_key, list);
            if let Commit::Conflict { key } = send(mapper, &insert, key, landed).await? {
                return Ok(Attempt::Conflict(key));
            }
            let joined = protocol::commit_all(mapper, &protocol::split(&joins)).await;
            if !matches!(joined, Ok(Commit::Committed)) {
                let steps = protocol::Steps {
                    mapper,
                    id: id.into(),
                    key,
                };
                let tried: Vec<Key> = claimed.iter().cloned().collect();
                steps.abort_create(&tried).await?;
            }
            joined?
        };
        match created {
            Commit::Committed => Ok(Attempt::Committed(KeyGroup {
                mapper,
                id: id.into(),
                key: key.clone(),
                members,
                owned: Mutex::new(claimed),
                until_ms: Mutex::new(owner.until_ms),
                turn: tokio::sync::Mutex::new(()),
            })),
            Commit::Conflict { key } => Ok(Attempt::Conflict(key)),
        }
    }

    /// One transaction over the members: load, change and save members on it, then
    /// [`GroupTransaction::commit`] commits. A transaction dropped without a commit writes
    /// nothing.
    ///
    /// On a store that commits across entity groups (memory, standalone Redis,
    /// PostgreSQL) no group is formed: the commit expects every document the transaction
    /// read unchanged and owned by no live group, and writes its changes, in one commit of
    /// the store; the lease plays no part. On a Redis Cluster the group is formed, the
    /// transaction runs on it, and the commit dissolves it (also after an error); a
    /// transaction dropped without a commit leaves its group until its lease passes.
    ///
    /// # Errors
    /// [`Error::Invalid`] for no member. Without a group, [`Error::Grouped`] from a load
    /// or the commit when a live group owns a member, and [`Error::Contention`] from the
    /// commit when a document read changed meanwhile (nothing was written: run the
    /// transaction again); with one, as [`KeyGroupBuilder::create`].
    pub async fn once(self) -> Result<GroupTransaction<'m, 'm, S>> {
        if self.mapper.store.cross_group_transactions() {
            if self.members.is_empty() {
                return Err(Error::Invalid(
                    "a key group needs at least one member".to_owned(),
                ));
            }
            return Ok(GroupTransaction::begin(Holder::Ungrouped {
                mapper: self.mapper,
                members: self.members.into_iter().map(|(key, _)| key).collect(),
            }));
        }
        let group = self.create().await?;
        Ok(GroupTransaction::begin(Holder::Once(Box::new(group))))
    }
}
