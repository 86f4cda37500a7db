//! Key groups (G-Store): transactions across entity groups. A group is formed at run
//! time over root entities of any kinds and ids; while it lives it *owns* every document
//! of its members (the reserved property [`OWNER`] with the group's id and lease, see
//! [`crate::store::ownership`]), so that only its transactions change them. On a store
//! that commits across entity groups (memory, standalone Redis, PostgreSQL) each step is
//! one atomic commit of the store (below); on one that does not (a Redis Cluster) the
//! steps follow G-Store's grouping protocol, in `protocol.rs`:
//!
//! 1. **create**: read every member (main document, static and dynamic shards), and in one
//!    commit expecting the versions read, stamp each document with the owner and insert
//!    the group's state document ([`layout::key_group`]: members, owned documents, lease);
//! 2. **transaction**: read members, change them, and commit every document written, the
//!    group document (the group's commit log head) and the versions read, under the
//!    group's owner token and a write id the group document records in the same commit;
//! 3. **dissolve**: in one commit, take the owner out of every document and delete the
//!    group document.
//!
//! Why nothing is lost, counted twice or let through:
//! - *Isolation.* While the lease runs, the store refuses every write to an owned document
//!   that does not carry the group's token ([`Error::Grouped`]), checked in the same
//!   atomic step as the write: `save`, `apply`, `update`, `delete`, compaction and
//!   resharding of a member fail with that typed error and write nothing (the choice is
//!   *fail*, not wait: the caller knows the group and the lease's end from the error).
//!   Documents a member did not have at create (a shard created later) are written only
//!   by the group's transactions, which stamp the owner on every document they write;
//!   other writers that would create one also expect the member's main document, which
//!   the group owns.
//! - *Serializability.* A transaction expects the version of every document it read and
//!   of the group document, and rewrites the group document: two transactions of one
//!   group are ordered by it, and one that read a stale document conflicts. Transactions
//!   through one [`KeyGroup`] handle take turns, so they do not conflict with each other.
//! - *Exactly once.* A commit whose reply is lost is checked against the group document:
//!   the write id it recorded there says whether it landed, and a resend expects the same
//!   versions, so at most one copy applies. A copy found landed, or a decision found
//!   recorded, is answered only after `DocumentStore::make_durable` of the group document:
//!   the copy that landed may have failed its wait for replicas.
//! - *One group per key.* Create expects every document unowned (or owned by a group whose
//!   lease passed) in the commit that stamps it, so of two groups racing for a key one
//!   commits and the other gets [`Error::Grouped`] or a conflict.
//! - *Leases.* A client that stops without dissolving leaves its members owned until the
//!   lease passes (by the store's clock), then free: nothing waits for it. A transaction
//!   after the lease gets [`Error::GroupLost`] and writes nothing.
//!
//! - *Recovery.* [`Mapper::recover_key_groups`] finishes, from any client, every group
//!   whose lease has passed: what a crashed client left in flight is settled, and its
//!   members are released.
//!
//! Files: `mod.rs`, the API and the one-commit steps; `protocol.rs`, the steps on a store
//! whose commits stay within one entity group (joins with yield ids, a transaction's log,
//! prepare, decision and settling, recovery).

mod protocol;

use super::super::attempt::Attempt;
use super::super::codec::malformed;
use super::super::layout::{self, static_properties};
use super::super::read::load::assemble;
use super::super::read::shared::Found;
use super::super::write::dynamic::pending_dynamic;
use super::super::write::static_shard::fold_into_shard;
use super::super::write::write_ids::{self, stage};
use super::super::Mapper;
use crate::document::{Document, Value, Version, Versioned};
use crate::entity::{EntityState, Pending};
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::codec::Folds;
use crate::store::ownership::{self, Owner, OWNER};
use crate::store::{Commit, DocumentStore, Transaction, Write, WriteId};
use crate::sync::lock;
use futures::future::BoxFuture;
use rand::RngExt;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

/// How long a key group owns its members unless told otherwise
/// ([`KeyGroupBuilder::lease`]).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How many times a step whose outcome the store left unknown is checked and sent again.
const RESENDS: u32 = 8;

/// A member as read: its documents (with their write records: they are written back
/// whole), and the documents of its layout that are missing, as a group creates them so
/// that it owns every document a writer could use.
struct Member {
    found: Found,
    missing: Vec<(Key, Document)>,
}

/// Reads one member.
type ReadMember<S> = for<'a> fn(&'a Mapper<S>, &'a Key) -> BoxFuture<'a, Result<Member>>;

fn read_member<'a, S: DocumentStore, E: Root>(
    mapper: &'a Mapper<S>,
    main: &'a Key,
) -> BoxFuture<'a, Result<Member>> {
    Box::pin(async move {
        let found = mapper.read_entity_with::<E>(main, true).await?;
        let mut missing = Vec::new();
        let (keys, docs, extra) = &*found;
        if let Some(Some(main_doc)) = docs.first() {
            let mut shard = Document::new();
            if let Some(incarnation) = layout::incarnation(&main_doc.doc) {
                shard.insert(layout::INCARNATION.to_owned(), incarnation.into());
            }
            for (key, doc) in keys.iter().zip(docs).skip(1) {
                if doc.is_none() && layout::static_shard_of(key).is_some() {
                    missing.push((key.clone(), shard.clone()));
                }
            }
            let compacted = layout::compacted(main);
            if !E::PROPERTIES.is_empty() && !extra.iter().any(|(k, _)| *k == compacted) {
                missing.push((compacted, Document::new()));
            }
        }
        Ok(Member { found, missing })
    })
}

/// Every document a read of one member found, with its key.
fn documents(found: &Found) -> impl Iterator<Item = (&Key, &Versioned)> {
    let (keys, docs, extra) = &**found;
    keys.iter()
        .zip(docs)
        .filter_map(|(key, doc)| doc.as_ref().map(|doc| (key, doc)))
        .chain(extra.iter().map(|(key, doc)| (key, doc)))
}

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
            if member.found.1.first().is_none_or(Option::is_none) {
                return Err(Error::NotFound { key: main.clone() });
            }
            for (doc_key, doc) in documents(&member.found) {
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

    /// Forms the group, runs one transaction on it and dissolves it: the one-shot form.
    /// Load, change and save members on the transaction, then
    /// [`GroupTransaction::commit`] commits and dissolves the group. A transaction dropped
    /// without a commit writes nothing, and its group ends when its lease passes.
    ///
    /// # Errors
    /// As [`KeyGroupBuilder::create`].
    pub async fn once(self) -> Result<GroupTransaction<'m, 'm, S>> {
        let group = self.create().await?;
        Ok(GroupTransaction::begin(Holder::Once(Box::new(group))))
    }
}

/// The state document of a group (its lease; later its write records and the
/// transaction in flight) and its list document ([`layout::key_group_members`]: its
/// members and the documents it owns), both owned by the group.
fn group_documents(
    members: &[Key],
    claimed: &BTreeSet<Key>,
    owner: &Owner,
) -> (Document, Document) {
    let keys = |keys: &mut dyn Iterator<Item = &Key>| -> Value {
        keys.map(|k| Value::String(k.encode()))
            .collect::<Vec<_>>()
            .into()
    };
    let mut state = Document::new();
    state.insert(OWNER.to_owned(), owner.to_value());
    let mut list = Document::new();
    list.insert("members".to_owned(), keys(&mut members.iter()));
    list.insert("owned".to_owned(), keys(&mut claimed.iter()));
    list.insert(OWNER.to_owned(), owner.to_value());
    (state, list)
}

/// The documents the group whose state document is `key` owns (its list document
/// among them), as its list document says; none when it has none.
async fn listed<S: DocumentStore>(mapper: &Mapper<S>, key: &Key) -> Result<Vec<Key>> {
    let list_key = layout::key_group_members(key);
    let mut owned = match mapper.store.get(&list_key).await? {
        Some(list) => owned_of(&list_key, &list.doc)?,
        None => Vec::new(),
    };
    owned.push(list_key);
    Ok(owned)
}

/// The documents a list document lists as owned.
fn owned_of(key: &Key, doc: &Document) -> Result<Vec<Key>> {
    let bad = || {
        Error::malformed(
            key,
            crate::error::FieldError::new("owned", "expected a list of document keys"),
        )
    };
    doc.get("owned")
        .and_then(Value::as_array)
        .ok_or_else(bad)?
        .iter()
        .map(|k| k.as_str().and_then(|k| Key::decode(k).ok()).ok_or_else(bad))
        .collect()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Commits `txn`, one step of a group whose outcome shows in the group document at
/// `key`: when the store leaves it unknown, reads that document and asks `landed`,
/// sending `txn` again while it did not (a resend expects the same versions, so at most
/// one copy applies). A conflict is checked the same way: a copy sent before may be what
/// changed the versions.
async fn send<S: DocumentStore>(
    mapper: &Mapper<S>,
    txn: &Transaction,
    key: &Key,
    landed: impl Fn(Option<&Versioned>) -> bool,
) -> Result<Commit> {
    let mut unknown = None;
    for _ in 0..RESENDS {
        match mapper.store.commit(txn).await {
            Ok(Commit::Committed) => return Ok(Commit::Committed),
            Ok(conflict) if unknown.is_none() => return Ok(conflict),
            Ok(conflict) => {
                // An earlier copy may have landed: the group document says.
                return match mapper.store.get(key).await {
                    Ok(doc) if landed(doc.as_ref()) => durable_landing(mapper, key).await,
                    Ok(_) => Ok(conflict),
                    Err(e) => Err(e),
                };
            }
            Err(e @ Error::Backend { .. }) => {
                tracing::debug!(key = %key, error = %e, "key group step: outcome unknown");
                if let Ok(doc) = mapper.store.get(key).await {
                    if landed(doc.as_ref()) {
                        return durable_landing(mapper, key).await;
                    }
                }
                unknown = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(unknown.unwrap_or_else(|| Error::backend("key group step", "no answer")))
}

/// `Committed` for a copy of a step that a read of the group document at `key` found
/// landed, once that read is durable: the copy that landed was answered with an error,
/// so nothing made it durable (`DocumentStore::make_durable`).
async fn durable_landing<S: DocumentStore>(mapper: &Mapper<S>, key: &Key) -> Result<Commit> {
    mapper.store.make_durable(std::slice::from_ref(key)).await?;
    Ok(Commit::Committed)
}

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
    mapper: &'m Mapper<S>,
    id: std::sync::Arc<str>,
    key: Key,
    members: Vec<Key>,
    /// Every document the group owns (it owns the documents its transactions create too).
    owned: Mutex<BTreeSet<Key>>,
    until_ms: Mutex<u64>,
    /// Transactions through this handle take turns.
    turn: tokio::sync::Mutex<()>,
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
        match self.rewrite(None, true).await {
            Err(Error::GroupLost { .. }) => self.rewrite(None, false).await,
            other => other,
        }
    }

    /// Rewrites every document the group owns with `owner` (`None`: without one, and the
    /// group document deleted), in one commit, with retries; `token`: as the group's
    /// transaction (else as a writer without a token, for documents whose lease passed).
    async fn rewrite(&self, owner: Option<&Owner>, token: bool) -> Result<()> {
        let mapper = self.mapper;
        if !mapper.store.cross_group_transactions() {
            return self.rewrite_in_steps(owner).await;
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
                let docs = mapper.get_exactly(&listed).await?;
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
                    let mut doc_new = doc.doc;
                    txn = match owner {
                        Some(owner) => {
                            doc_new.insert(OWNER.to_owned(), owner.to_value());
                            txn.put(key.clone(), doc_new)
                        }
                        // The list document goes with the group.
                        None if key.parent().as_ref() == Some(&self.key) => txn.delete(key.clone()),
                        None => {
                            doc_new.remove(OWNER);
                            txn.put(key.clone(), doc_new)
                        }
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
                Ok(send(mapper, &txn, &self.key, landed).await?.into())
            };
            if let std::ops::ControlFlow::Break(()) = retrying.attempt(attempt).await? {
                return Ok(());
            }
        }
    }
}

impl<S: DocumentStore> KeyGroup<'_, S> {
    /// [`KeyGroup::rewrite`] on a store without cross-group commits (see `protocol`): the
    /// transaction left in flight settled, each entity group's documents, then the group
    /// document.
    async fn rewrite_in_steps(&self, owner: Option<&Owner>) -> Result<()> {
        let steps = self.steps();
        steps.settle_recorded().await?;
        if self.mapper.store.get(&self.key).await?.is_none() {
            return Err(Error::GroupLost {
                key: self.key.clone(),
                group: self.id.to_string(),
            });
        }
        let mut listed = listed(self.mapper, &self.key).await?;
        if owner.is_none() {
            // The list document goes with the group document, still owned.
            listed.retain(|key| key.parent().as_ref() != Some(&self.key));
        }
        steps.rewrite_owned(&listed, owner).await?;
        let Some(owner) = owner else {
            return steps.delete_group_document().await;
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

/// How a transaction holds its group: its turn on a shared handle, or the group of a
/// one-shot transaction, dissolved at its end.
enum Holder<'g, 'm, S> {
    Shared {
        group: &'g KeyGroup<'m, S>,
        _turn: tokio::sync::MutexGuard<'g, ()>,
    },
    Once(Box<KeyGroup<'m, S>>),
}

impl<'m, S> Holder<'_, 'm, S> {
    fn group(&self) -> &KeyGroup<'m, S> {
        match self {
            Holder::Shared { group, .. } => group,
            Holder::Once(group) => group,
        }
    }
}

/// One transaction of a [`KeyGroup`]: [`load`](GroupTransaction::load) members, change
/// them, [`save`](GroupTransaction::save) them, [`commit`](GroupTransaction::commit).
/// Nothing is written before the commit; dropping the transaction writes nothing.
pub struct GroupTransaction<'g, 'm, S> {
    holder: Holder<'g, 'm, S>,
    /// The group document, read with the first members (the commit expects it unchanged).
    state: Option<Versioned>,
    /// Every document read, and the version it had (`None`: absent).
    reads: BTreeMap<Key, Option<Version>>,
    /// Every document as read.
    docs: BTreeMap<Key, Option<Document>>,
    /// The documents to write.
    writes: BTreeMap<Key, Document>,
    /// The members loaded, with the incarnation they were loaded as.
    loaded: BTreeMap<Key, Option<String>>,
}

impl<S> fmt::Debug for GroupTransaction<'_, '_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupTransaction")
            .field("group", &self.holder.group().id)
            .field("loaded", &self.loaded.keys().collect::<Vec<_>>())
            .field("writes", &self.writes.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<'g, 'm, S: DocumentStore> GroupTransaction<'g, 'm, S> {
    fn begin(holder: Holder<'g, 'm, S>) -> Self {
        GroupTransaction {
            holder,
            state: None,
            reads: BTreeMap::new(),
            docs: BTreeMap::new(),
            writes: BTreeMap::new(),
            loaded: BTreeMap::new(),
        }
    }

    fn group(&self) -> &KeyGroup<'m, S> {
        self.holder.group()
    }

    /// Reads the group document (once per transaction): [`Error::GroupLost`] when the
    /// group is gone.
    async fn read_state(group: &KeyGroup<'m, S>) -> Result<Versioned> {
        let lost = || Error::GroupLost {
            key: group.key.clone(),
            group: group.id.to_string(),
        };
        if !group.mapper.store.cross_group_transactions() {
            // A transaction of the group left in flight is settled before anything is read.
            group.steps().settle_recorded().await?;
        }
        let state = group.mapper.store.get(&group.key).await?.ok_or_else(lost)?;
        if Owner::of(&state.doc).is_none_or(|o| *o.group != *group.id) {
            return Err(lost());
        }
        Ok(state)
    }

    /// Loads the member of kind `E` with this id, as [`Mapper::load`] does; the commit
    /// expects every document read unchanged.
    ///
    /// # Errors
    /// [`Error::Invalid`] when it is not a member of the group; [`Error::GroupLost`] when
    /// the group is gone; as [`Mapper::load`].
    pub async fn load<E: Root>(
        &mut self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
    ) -> Result<E> {
        let mut loaded = self
            .load_many::<E>(std::slice::from_ref(&id.to_owned()))
            .await?;
        loaded
            .pop()
            .ok_or_else(|| Error::backend("load", "a member read answered nothing"))
    }

    /// Loads the members of kind `E` with these ids, all read concurrently (in one round
    /// trip where the store pipelines), in order; see [`GroupTransaction::load`].
    ///
    /// # Errors
    /// As [`GroupTransaction::load`].
    pub async fn load_many<E: Root>(&mut self, ids: &[E::Id]) -> Result<Vec<E>> {
        let group = self.holder.group();
        let mains: Vec<Key> = ids.iter().map(E::key_for).collect();
        if let Some(main) = mains.iter().find(|main| !group.members.contains(main)) {
            return Err(Error::Invalid(format!(
                "`{main}` is not a member of key group `{}`",
                group.id
            )));
        }
        let reads = mains
            .iter()
            .map(|main| group.mapper.read_entity_with::<E>(main, true));
        let found = if self.state.is_some() {
            futures::future::try_join_all(reads).await?
        } else if group.mapper.store.cross_group_transactions() {
            // Members and the group document in one round trip.
            let (found, state) = futures::try_join!(
                futures::future::try_join_all(reads),
                Self::read_state(group)
            )?;
            self.state = Some(state);
            found
        } else {
            // The group document first: it settles a transaction left in flight.
            self.state = Some(Self::read_state(group).await?);
            futures::future::try_join_all(reads).await?
        };
        let mut entities = Vec::with_capacity(ids.len());
        for ((id, main), found) in ids.iter().zip(mains).zip(found) {
            let (keys, docs, extra) = &*found;
            for (key, doc) in keys.iter().zip(docs) {
                self.note_read(key, doc.as_ref());
            }
            for (key, doc) in extra {
                self.note_read(key, Some(doc));
            }
            let entity: E = assemble(id, &main, &found)?;
            let incarnation = entity
                .state()
                .and_then(EntityState::incarnation)
                .map(str::to_owned);
            self.loaded.insert(main, incarnation);
            entities.push(entity);
        }
        Ok(entities)
    }

    /// Records a document read (the first read of a key is the one the commit expects).
    fn note_read(&mut self, key: &Key, doc: Option<&Versioned>) {
        if !self.reads.contains_key(key) {
            self.reads.insert(key.clone(), doc.map(|d| d.version));
            self.docs.insert(key.clone(), doc.map(|d| d.doc.clone()));
        }
    }

    /// The document at `key` as this transaction has it: as staged, else as read.
    fn current(&self, key: &Key) -> Option<Document> {
        match self.writes.get(key) {
            Some(doc) => Some(doc.clone()),
            None => self.docs.get(key).cloned().flatten(),
        }
    }

    /// The owner every document the transaction writes carries.
    fn owner(&self) -> Owner {
        let group = self.group();
        Owner {
            group: group.id.to_string(),
            until_ms: group.until_ms(),
            txn: None,
        }
    }

    /// Stages `doc` to be written at `key` (stamped with the group as owner).
    fn stage_write(&mut self, key: Key, mut doc: Document) {
        doc.insert(OWNER.to_owned(), self.owner().to_value());
        self.reads.entry(key.clone()).or_insert(None);
        self.writes.insert(key, doc);
    }

    /// Stages the changes of `entity`, a member loaded in this transaction: its plain
    /// fields into the main document, the change of each sharded property folded into one
    /// of its shards (a dynamic property: into a new shard document). Nothing is written
    /// before [`GroupTransaction::commit`]; the entity's changes count as saved.
    ///
    /// # Errors
    /// [`Error::Invalid`] when `entity` was not loaded in this transaction;
    /// [`Error::Malformed`] for a value that does not encode.
    pub fn save<E: Root>(&mut self, entity: &mut E) -> Result<()> {
        let main = entity.key();
        let Some(incarnation) = self.loaded.get(&main).cloned() else {
            return Err(Error::Invalid(format!(
                "`{main}` was not loaded in this transaction: load members with \
                 `GroupTransaction::load` before saving them"
            )));
        };
        let doc = entity.to_document().map_err(malformed(&main))?;
        let dirty = entity
            .state()
            .is_none_or(|state| state.saved_main() != Some(&doc));
        if dirty {
            let mut stored_doc = doc.clone();
            if let Some(incarnation) = incarnation.as_deref().filter(|i| !i.is_empty()) {
                stored_doc.insert(layout::INCARNATION.to_owned(), incarnation.into());
            }
            if let Some(stored) = self.current(&main) {
                layout::carry_over::<E>(&stored, &mut stored_doc);
            }
            self.stage_write(main.clone(), stored_doc);
            if let Some(state) = entity.state_mut() {
                state.set_saved_main(doc);
            }
        }
        stage(entity, &main)?;
        let folds = Folds::of::<E>();
        for p in static_properties(entity) {
            let Some(value) = write_ids::pending(entity, p.index).value else {
                continue;
            };
            let slot = rand::rng().random_range(0..p.layout.shards.max(1));
            let key = p.live_shard(&main, slot);
            let current = self.current(&key);
            let version = self.reads.get(&key).copied().flatten();
            let current = current.map(|doc| Versioned {
                doc,
                version: version.unwrap_or(Version(0)),
            });
            let (doc, _) = fold_into_shard(
                &folds,
                &key,
                current,
                p.index,
                &value,
                incarnation.as_deref(),
            )?;
            self.stage_write(key, doc);
            if let Some(state) = entity.state_mut() {
                *state.pending_mut(p.index) = Pending::default();
            }
        }
        let (doc, props) = pending_dynamic(entity, |_| true);
        if !doc.is_empty() {
            let write = self
                .group()
                .mapper
                .writers
                .take()
                .begin(self.group().mapper.write_window);
            let key = layout::dynamic_shard(&main, &write_ids::dynamic_name(&write));
            self.stage_write(key, doc);
            if let Some(state) = entity.state_mut() {
                for index in props {
                    *state.pending_mut(index) = Pending::default();
                }
            }
        }
        Ok(())
    }

    /// Commits every change saved in this transaction, if no document it read changed:
    /// atomically, exactly once (a commit whose reply is lost is checked and sent again
    /// under the same write id). A one-shot transaction ([`KeyGroupBuilder::once`]) then
    /// dissolves its group, also after an error.
    ///
    /// # Errors
    /// [`Error::Contention`] when a document read changed (only a transaction of the same
    /// group, through another handle, can do that): nothing was written;
    /// [`Error::GroupLost`] when the lease passed: nothing was written;
    /// [`Error::Backend`] when the outcome stayed unknown after the resends.
    pub async fn commit(self) -> Result<()> {
        let outcome = self.commit_changes().await;
        if let Holder::Once(group) = self.holder {
            let dissolved = group.dissolve().await;
            outcome?;
            return dissolved;
        }
        outcome
    }

    async fn commit_changes(&self) -> Result<()> {
        let group = self.group();
        let mapper = group.mapper;
        if self.writes.is_empty() {
            return Ok(());
        }
        let stored = match &self.state {
            Some(state) => state.clone(),
            None => Self::read_state(group).await?,
        };
        let mut writer = mapper.writers.take();
        let write: WriteId = writer.begin(mapper.write_window);
        let mut state = stored.doc.clone();
        write_ids::record(&mut state, &write);
        let mut owned = lock(&group.owned).clone();
        let fresh: Vec<Key> = self
            .writes
            .keys()
            .filter(|k| !owned.contains(*k))
            .cloned()
            .collect();
        // The list document is rewritten only when the transaction creates documents.
        let list = (!fresh.is_empty()).then(|| {
            owned.extend(fresh);
            group_documents(&group.members, &owned, &self.owner()).1
        });
        // Every document read is expected, not only the group document: the group document
        // was read with the members, not before them, and a commit of an earlier
        // transaction whose future was dropped may land between those reads.
        let mut txn = Transaction::new().owned_by(group.id.clone());
        for (key, version) in &self.reads {
            txn = txn.expect(key.clone(), *version);
        }
        for (key, doc) in &self.writes {
            txn = txn.put(key.clone(), doc.clone());
        }
        txn = txn
            .expect(group.key.clone(), Some(stored.version))
            .put(group.key.clone(), state);
        if let Some(list) = &list {
            txn = txn.put(layout::key_group_members(&group.key), list.clone());
        }
        let _invalidate: Vec<_> = self
            .loaded
            .keys()
            .map(|main| mapper.invalidating(main))
            .collect();
        let landed = |doc: Option<&Versioned>| write_ids::applied(doc.map(|d| &d.doc), &write);
        let answer = if mapper.store.cross_group_transactions() {
            send(mapper, &txn, &group.key, landed).await
        } else {
            let current = self
                .writes
                .keys()
                .map(|key| {
                    let version = self.reads.get(key).copied().flatten();
                    let doc = self.docs.get(key).cloned().flatten();
                    (key.clone(), (version, doc))
                })
                .collect();
            let txn_id = write_ids::dynamic_name(&write);
            let state = txn
                .writes()
                .iter()
                .find_map(|(key, write)| match write {
                    Write::Put(state) if *key == group.key => Some(state.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            let changes = protocol::Changes {
                owner: &self.owner(),
                stored: &stored,
                state,
                writes: &self.writes,
                current: &current,
                txn_id: &txn_id,
                list,
            };
            protocol::commit_in_steps(&group.steps(), changes, landed)
                .await
                .map(|()| Commit::Committed)
        };
        if !matches!(answer, Err(Error::Backend { .. })) {
            writer.settle();
        }
        match answer? {
            Commit::Committed => {
                *lock(&group.owned) = owned;
                Ok(())
            }
            Commit::Conflict { key } => Err(Error::Contention { key, attempts: 1 }),
        }
    }
}
