//! [`KeyGroupBuilder`]: naming a group's members, and creating the group (or running one
//! transaction on a group formed for it).

use super::holder::Holder;
use super::memo::Memo;
use super::queue::{Intent, MAX_BACKOFF, Ticket, intent_in};
use super::{
    DEFAULT_LEASE, GroupTransaction, KeyGroup, Member, MemberKind, group_documents, millis,
    protocol, read_members, send_versioned,
};
use crate::document::Versioned;
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::A_CENTURY;
use crate::mapper::Mapper;
use crate::mapper::attempt::Attempt;
use crate::mapper::layout::{self};
use crate::mapper::write::write_ids::Pool;
use crate::store::ownership::{self, OWNER, Owner};
use crate::store::{Commit, DocumentStore, Transaction};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

/// Forms a [`KeyGroup`] (see [`Mapper::key_group`]).
#[must_use = "a builder does nothing until `create` or `once`"]
pub struct KeyGroupBuilder<'m, S> {
    mapper: &'m Mapper<S>,
    members: Vec<(Key, MemberKind<S>)>,
    lease: Duration,
    /// How long `create` waits for members other groups own (`None`: it does not).
    wait: Option<Duration>,
    /// Whether create reads the members with their write records and keeps them, as the
    /// joins left them, for the group's first transaction (a one-shot transaction's
    /// group on a store whose commits stay within one entity group: `memo.rs`).
    first_reads: bool,
}

impl<S> fmt::Debug for KeyGroupBuilder<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyGroupBuilder")
            .field(
                "members",
                &self.members.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("lease", &self.lease)
            .field("wait", &self.wait)
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
            wait: None,
            first_reads: false,
        }
    }
}

impl<'m, S: DocumentStore> KeyGroupBuilder<'m, S> {
    /// Adds the root entity of kind `E` with this id (once, however often it is named).
    pub fn member<E: Root>(mut self, id: &(impl ToOwned<Owned = E::Id> + ?Sized)) -> Self {
        let main = E::key_for(&id.to_owned());
        if !self.members.iter().any(|(k, _)| *k == main) {
            self.members.push((main, MemberKind::of::<E>()));
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

    /// Makes [`KeyGroupBuilder::create`] and [`KeyGroupBuilder::once`] wait up to
    /// `up_to` for members that other groups own, instead of failing at once with
    /// [`Error::Grouped`] (the default). Waiters queue fairly: each takes a ticket when it
    /// starts, and a group forms only when no older waiter wants any of its members, so a
    /// large group is passed by at most the groups that owned its members when it
    /// queued, however many small ones keep coming; groups that do not wait are held off
    /// by a waiter's members meanwhile. A waiter wakes when a group of this mapper (or a
    /// clone) is dissolved, and otherwise looks again after a short backoff (at most 50
    /// ms). A one-shot transaction that waits ([`KeyGroupBuilder::once`]) still needs no
    /// group where the store commits across entity groups; when its first load is refused
    /// or keeps meeting changes, or a one-shot commit over one of its members met a
    /// change within the last second (through this mapper or a clone), it forms its
    /// group, waiting its turn, and runs on it. The argument:
    /// `docs/design/key-groups.md`, "Waiting, fairly".
    ///
    /// ```
    /// use autoshard::prelude::*;
    /// use std::time::Duration;
    ///
    /// #[autoshard::sharded]
    /// #[derive(Entity, Debug, Clone)]
    /// struct Account {
    ///     #[id]
    ///     id: u64,
    ///     #[shardable(shards = 4, fold = sum)]
    ///     balance: i64,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Account::new(1, 100)).await?;
    /// let first = db.key_group().member::<Account>(&1).create().await?;
    /// let waiting = db
    ///     .key_group()
    ///     .member::<Account>(&1)
    ///     .wait(Duration::from_secs(5))
    ///     .create();
    /// // The waiter gets account 1 once the first group is dissolved.
    /// let (second, dissolved) = tokio::join!(waiting, first.dissolve());
    /// dissolved?;
    /// second?.dissolve().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait(mut self, up_to: Duration) -> Self {
        self.wait = Some(up_to);
        self
    }

    /// Forms the group: one commit that makes it the owner of every document of every
    /// member that a writer could use, with retries when a member changes meanwhile; with
    /// [`KeyGroupBuilder::wait`], after waiting its turn for members other groups own.
    ///
    /// # Errors
    /// [`Error::NotFound`] for a member that is not stored; [`Error::Grouped`] for a member
    /// another live group owns, or one a waiting group queued for (after the wait, when
    /// waiting); [`Error::Invalid`] for no member; [`Error::Contention`] when members keep
    /// changing. Nothing is owned after an error but [`Error::Backend`], whose outcome is
    /// unknown: the group then owns its members at most until its lease passes.
    pub async fn create(self) -> Result<KeyGroup<'m, S>> {
        if self.members.is_empty() {
            return Err(Error::Invalid(
                "a key group needs at least one member".to_owned(),
            ));
        }
        match self.wait {
            Some(up_to) => self.create_waiting(up_to).await,
            None => self.create_with(None).await,
        }
    }

    /// [`KeyGroupBuilder::create`] that waits, up to `up_to`, holding `ticket` (see
    /// `queue.rs`).
    async fn create_waiting(&self, up_to: Duration) -> Result<KeyGroup<'m, S>> {
        let mapper = self.mapper;
        let deadline = tokio::time::Instant::now() + up_to.min(A_CENTURY);
        let ticket = Ticket {
            ms: mapper.store.now_ms().await?,
            id: uuid::Uuid::new_v4().simple().to_string(),
        };
        let mut backoff = Duration::from_millis(1);
        loop {
            // Listening from before the look, so a release during it is not missed.
            let released = mapper.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            match self.create_with(Some(&ticket)).await {
                Err(Error::Grouped { .. }) if tokio::time::Instant::now() < deadline => {
                    let nap = backoff.min(deadline - tokio::time::Instant::now());
                    tokio::select! {
                        () = &mut released => {}
                        () = tokio::time::sleep(nap) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Ok(group) => return Ok(group),
                Err(e) => {
                    // Best effort: intents left behind expire with the lease anyway.
                    let _ = self.withdraw(&ticket).await;
                    return Err(e);
                }
            }
        }
    }

    /// The attempts of [`KeyGroupBuilder::create`], as the waiter holding `ticket` when
    /// there is one.
    async fn create_with(&self, ticket: Option<&Ticket>) -> Result<KeyGroup<'m, S>> {
        let mut retrying = self.mapper.retrying("create key group").leaving_refusals();
        loop {
            // A fresh id per attempt: nothing an earlier attempt sent can join this one.
            let id = uuid::Uuid::new_v4().simple().to_string();
            let key = layout::key_group(&id);
            let attempt = self.try_create(&id, &key, ticket);
            if let std::ops::ControlFlow::Break(group) = retrying.attempt(attempt).await? {
                return Ok(group);
            }
        }
    }

    /// The intent documents of the members, in order.
    fn intent_keys(&self) -> Vec<Key> {
        self.members
            .iter()
            .map(|(main, _)| layout::group_intent(main))
            .collect()
    }

    /// One attempt of [`KeyGroupBuilder::create`]: refused when a member is owned or held
    /// by an older waiter's intent (the waiter holding `ticket` then queues for every
    /// member first).
    async fn try_create(
        &self,
        id: &str,
        key: &Key,
        ticket: Option<&Ticket>,
    ) -> Result<Attempt<KeyGroup<'m, S>>> {
        let mapper = self.mapper;
        let intent_keys = self.intent_keys();
        let (now, (read, intents)) = futures::try_join!(
            mapper.store.now_ms(),
            read_members(mapper, &self.members, &intent_keys, self.first_reads)
        )?;
        let owner = Owner {
            group: id.to_owned(),
            until_ms: now.saturating_add(millis(self.lease)),
            txn: None,
        };
        let mut refused = None;
        for ((main, _), member) in self.members.iter().zip(&read) {
            if member.found.main().is_none() {
                return Err(Error::NotFound { key: main.clone() });
            }
            for (doc_key, doc) in member.found.documents() {
                if let Err(owned) = ownership::check(doc_key, Some(&doc.doc), None, now) {
                    // A transaction of a group whose lease passed still holds it: finish
                    // that group, then try again.
                    let held = Owner::of(&doc.doc).filter(|o| o.txn.is_some() && o.until_ms <= now);
                    if let Some(owner) = held {
                        mapper
                            .recover_stuck(&[(doc_key.clone(), owner.group)])
                            .await?;
                        return Ok(Attempt::Conflict(doc_key.clone()));
                    }
                    refused.get_or_insert(owned);
                }
            }
        }
        for (intent_key, found) in intent_keys.iter().zip(&intents) {
            if let Some(intent) = intent_in(found.as_ref()).filter(|i| i.holds_off(ticket, now)) {
                refused.get_or_insert(intent.refusal(intent_key));
            }
        }
        if let Some(refused) = refused {
            if let Some(ticket) = ticket {
                self.queue(ticket, now, &intent_keys, &intents).await?;
            }
            return Err(refused);
        }
        let (joins, claimed) = joins(&read, &intent_keys, &intents, ticket, &owner);
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
        let (created, memo) = if mapper.store.cross_group_transactions() {
            let txn = joins
                .expect(key.clone(), None)
                .put(key.clone(), state)
                .expect(list_key.clone(), None)
                .put(list_key, list);
            let reply = send_versioned(mapper, &txn, key, landed).await?;
            let mut memo = Memo::default();
            memo.committed(key, &txn, &reply);
            (reply.outcome, memo)
        } else {
            let insert = Transaction::new()
                .expect(key.clone(), None)
                .put(key.clone(), state)
                .expect(list_key.clone(), None)
                .put(list_key, list);
            let (created, mut memo) =
                create_in_steps(mapper, id, key, &insert, &joins, &claimed).await?;
            if self.first_reads {
                memo.joined(&members, &read, &owner);
            }
            (created, memo)
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
                writers: Pool::default(),
                memo: Mutex::new(memo),
            })),
            Commit::Conflict { key } => Ok(Attempt::Conflict(key)),
        }
    }

    /// Queues the waiter holding `ticket` for every member (module docs of `queue`): its
    /// intent, holding for a lease from `now_ms`, goes into each intent document (`keys`,
    /// read as `found`) that holds no live intent of an older ticket, nor one of its own
    /// that holds for more than half a lease still. A document another writer changed
    /// meanwhile is left for the next look.
    async fn queue(
        &self,
        ticket: &Ticket,
        now_ms: u64,
        keys: &[Key],
        found: &[Option<Versioned>],
    ) -> Result<()> {
        let lease = millis(self.lease);
        let intent = Intent {
            ticket: ticket.clone(),
            until_ms: now_ms.saturating_add(lease),
        };
        let mut txn = Transaction::new();
        for (key, doc) in keys.iter().zip(found) {
            let kept = intent_in(doc.as_ref()).is_some_and(|current| {
                current.holds_off(Some(ticket), now_ms)
                    || (current.ticket == *ticket
                        && current.until_ms > now_ms.saturating_add(lease / 2))
            });
            if !kept {
                txn = txn
                    .expect(key.clone(), doc.as_ref().map(|d| d.version))
                    .put(key.clone(), intent.to_document());
            }
        }
        self.commit_intents(&txn).await
    }

    /// Takes the intents of `ticket` out of the members' intent documents (a waiter that
    /// gives up).
    async fn withdraw(&self, ticket: &Ticket) -> Result<()> {
        let keys = self.intent_keys();
        let found = self.mapper.get_exactly(&keys).await?;
        let mut txn = Transaction::new();
        for (key, doc) in keys.iter().zip(&found) {
            if intent_in(doc.as_ref()).is_some_and(|i| i.ticket == *ticket) {
                let version = doc.as_ref().map(|d| d.version);
                txn = txn.expect(key.clone(), version).delete(key.clone());
            }
        }
        self.commit_intents(&txn).await
    }

    /// Commits writes of intent documents: in one commit where the store commits across
    /// entity groups, else one per entity group. A conflict is left alone (the next look
    /// reads again).
    async fn commit_intents(&self, txn: &Transaction) -> Result<()> {
        if txn.writes().is_empty() {
            return Ok(());
        }
        let store = &self.mapper.store;
        let answer = if store.cross_group_transactions() {
            store.commit(txn).await?
        } else {
            protocol::commit_all(self.mapper, &txn.clone().by_group()).await?
        };
        match answer {
            Commit::Committed | Commit::Conflict { .. } => Ok(()),
        }
    }

    /// One transaction over the members: load, change and save members on it, then
    /// [`GroupTransaction::commit`] commits. A transaction dropped without a commit writes
    /// nothing.
    ///
    /// No group is formed while the transaction runs: a load reads its members as one
    /// snapshot (one lookup where the store reads a lookup atomically,
    /// [`DocumentStore::snapshot_lookups`]; on a Redis Cluster, a read and a second read
    /// of the versions), and the commit expects every document the transaction read
    /// unchanged and owned by no live group, and writes its changes: in one commit where
    /// the store commits across entity groups (memory, standalone Redis, PostgreSQL); on a
    /// Redis Cluster in a two-phase commit of the documents it writes, which holds them
    /// for at most the lease when the client stops midway (until
    /// [`Mapper::recover_key_groups`]). A transaction dropped before its commit leaves
    /// nothing behind. With [`KeyGroupBuilder::wait`], a first load that is refused (a
    /// member owned or queued for) or keeps meeting changes, or over a member whose
    /// one-shot commit lately met a change, forms the group instead, waiting its turn,
    /// and the transaction runs on it; its commit then dissolves it (also after an
    /// error).
    ///
    /// # Errors
    /// [`Error::Invalid`] for no member. Without a group, [`Error::Grouped`] from a load
    /// or the commit when a live group owns a member (or a waiting group queued for one),
    /// and [`Error::Contention`] from a load when a member an earlier load returned
    /// changed, or from the commit when a document read changed meanwhile (nothing was
    /// written: run the transaction again); on a Redis Cluster, [`Error::GroupLost`]
    /// from a commit that outlasted the lease (nothing written); with a group, as
    /// [`KeyGroupBuilder::create`].
    #[allow(clippy::unused_async)] // public API: async, so a store may begin with a round trip
    pub async fn once(self) -> Result<GroupTransaction<'m, 'm, S>> {
        if self.members.is_empty() {
            return Err(Error::Invalid(
                "a key group needs at least one member".to_owned(),
            ));
        }
        Ok(GroupTransaction::begin(Holder::Ungrouped {
            mapper: self.mapper,
            members: self.members.iter().map(|(key, _)| key.clone()).collect(),
            lease: self.lease,
            waiting: self.wait.is_some().then_some(self),
        }))
    }

    /// This builder, for a group formed for one transaction: on a store whose commits stay
    /// within one entity group, create reads the members with their write records and
    /// keeps them for that transaction's first load (`memo.rs`).
    pub(super) fn for_one_transaction(self) -> Self {
        let first_reads = !self.mapper.store.cross_group_transactions();
        KeyGroupBuilder {
            first_reads,
            ..self
        }
    }
}

/// What forming a group with `owner` writes, as one transaction, and the documents it
/// then owns: every document of every member (`read`) but the one it leaves alone
/// ([`Member::owned`]) given the owner (the owner alone,
/// [`Write::Own`](crate::store::Write::Own)), and the missing ones created with it, each
/// expected as read; the members' intent documents
/// (`intent_keys`, read as `intents`) expected as read, so that an intent written after
/// the read makes the commit conflict, and those of the waiter holding `ticket` deleted.
fn joins(
    read: &[Member],
    intent_keys: &[Key],
    intents: &[Option<Versioned>],
    ticket: Option<&Ticket>,
    owner: &Owner,
) -> (Transaction, BTreeSet<Key>) {
    let mut joins = Transaction::new();
    for (intent_key, found) in intent_keys.iter().zip(intents) {
        joins = joins.expect(intent_key.clone(), found.as_ref().map(|d| d.version));
        if intent_in(found.as_ref()).is_some_and(|i| Some(&i.ticket) == ticket) {
            joins = joins.delete(intent_key.clone());
        }
    }
    let mut claimed = BTreeSet::new();
    for member in read {
        for (doc_key, doc) in member.owned() {
            joins = joins
                .expect(doc_key.clone(), Some(doc.version))
                .own(doc_key.clone(), Some(owner.clone()));
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
    (joins, claimed)
}

/// Forms a group on a store whose commits stay within one entity group (`protocol`): the
/// group document inserted (`insert`) while the members join (`joins`, which claim the
/// documents `claimed`), concurrently; when either does not commit, what joined is released ([`protocol::Steps::abort_create`]) and
/// the insert's error or conflict answered, else the joins'. With what the group's memo
/// learns from both.
async fn create_in_steps<S: DocumentStore>(
    mapper: &Mapper<S>,
    id: &str,
    key: &Key,
    insert: &Transaction,
    joins: &Transaction,
    claimed: &BTreeSet<Key>,
) -> Result<(Commit, Memo)> {
    let landed = |doc: Option<&Versioned>| doc.is_some();
    let split = joins.clone().by_group();
    let (inserted, joined) = futures::join!(
        send_versioned(mapper, insert, key, landed),
        protocol::commit_all_versioned(mapper, &split)
    );
    if let (Ok(told), Ok((Commit::Committed, versions))) = (&inserted, &joined)
        && told.outcome == Commit::Committed
    {
        let mut memo = Memo::default();
        memo.committed(key, insert, told);
        memo.versions(versions);
        return Ok((Commit::Committed, memo));
    }
    let steps = protocol::Steps {
        mapper,
        id: id.into(),
        key,
        memo: None,
    };
    let tried: Vec<Key> = claimed.iter().cloned().collect();
    steps.abort_create(&tried).await?;
    let outcome = match inserted?.outcome {
        Commit::Committed => joined?.0,
        conflict @ Commit::Conflict { .. } => conflict,
    };
    Ok((outcome, Memo::default()))
}
