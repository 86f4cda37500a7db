//! A one-shot transaction without a group: what
//! [`KeyGroupBuilder::once`](super::KeyGroupBuilder::once) is, for the
//! [`GroupTransaction`](super::GroupTransaction) that holds no group. Below, on a store that
//! commits across entity groups (memory, standalone Redis, PostgreSQL); on one whose
//! commits stay within one entity group (a Redis Cluster) a load reads its members and
//! then their versions again ([`read`]), and the commit is `one_shot_steps.rs`'s.
//!
//! Each load reads its members as one snapshot of the store. Where the store reads a
//! lookup atomically across groups, that is one lookup ([`read_at_once`]): the members'
//! documents, those earlier loads returned (unchanged when their versions are), and the
//! members' intent documents. Elsewhere, and where that lookup is not all the loads need,
//! each member is read as `load` reads it (without write records, and never folded by
//! the store: a shard it writes goes back with its change), and a commit that writes nothing checks that
//! every document the transaction has read is still as read ([`read`]). The one commit
//! of the changes expects every document read at the version read and writes the
//! changes as values ([`crate::store::Write::Values`]): each document keeps the write
//! record the store holds, which the one lookup leaves there, and which cannot have
//! changed since the read (a merge that adds an entry counts the version up, and the
//! commit expects the version read). The store refuses a commit when a live group owns any document it expects or
//! writes ([`crate::store::ownership`]: a write without a group's token), and it
//! conflicts when any of them changed since the read, so the transaction commits only on
//! what a group formed for it would have seen: the same isolation and atomicity, for one
//! lookup per load (or a read and a check commit) and one commit for the changes, where a
//! group adds three commits (create, the group document's, dissolve) and a read of every
//! member to stamp it. The write id of the changes is recorded in one document the commit
//! writes, so a commit whose reply is lost is checked there and sent again at most once
//! (the resend expects the same versions). Waiting groups' intents (`queue.rs`) hold it
//! off as they hold off a group that does not wait. The argument:
//! `docs/design/key-groups.md`, "A one-shot transaction without a group".

use super::queue::intent_in;
use super::send;
use crate::document::{Document, Version, Versioned};
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::layout;
use crate::mapper::read::snapshot::Snapshot;
use crate::mapper::write::write_ids;
use crate::store::ownership::{self, Owner};
use crate::store::{Commit, DocumentStore, Transaction, WriteId};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// How long a member whose one-shot commit met a change counts as contended: a waiting
/// one-shot transaction over it forms its group, taking its turn in the queue, instead of
/// reading optimistically ([`Contended`]).
const CONTENDED_FOR: Duration = Duration::from_secs(1);

/// The members whose one-shot commit through this mapper (or a clone) met a change within
/// [`CONTENDED_FOR`]. Waiting is for a caller that would rather queue than be refused: a
/// one-shot transaction reads its members in one lookup and meets a concurrent change only
/// at its commit ([`Error::Contention`]), which waiting cannot undo, so a waiting
/// transaction over a member that lately met one queues up front, as one whose loads keep
/// meeting changes does.
pub(in crate::mapper) type Contended = moka::sync::Cache<Key, ()>;

/// An empty [`Contended`] set.
pub(in crate::mapper) fn contended() -> Contended {
    moka::sync::Cache::builder()
        .max_capacity(10_000)
        .time_to_live(CONTENDED_FOR)
        .build()
}

/// How many times the loads read again after recovering a group whose lease passed with a
/// transaction in flight.
const RECOVERIES: u32 = 3;

/// How many times a load reads its members before it gives up finding them unchanged
/// ([`Error::Contention`]).
const SNAPSHOT_READS: u32 = 4;

/// Every document a member's read found, with its key (`None`: absent).
pub(super) fn documents_read(found: &Snapshot) -> impl Iterator<Item = (&Key, Option<&Versioned>)> {
    let Snapshot {
        keys,
        docs,
        scanned: extra,
        .. // (read with records: nothing folded)
    } = found;
    let listed = keys.iter().zip(docs).map(|(key, doc)| (key, doc.as_ref()));
    listed.chain(extra.iter().map(|(key, doc)| (key, Some(doc))))
}

/// Reads members (`reads`), and checks that they and everything the transaction read
/// before (`earlier`, each key with the version read) are one snapshot: a commit that
/// writes nothing expects every document read at the version read, so when it passes,
/// all of them were as read at that instant. A conflict on a document of this read reads
/// again (a few times, then [`Error::Contention`]); one on a document an earlier load
/// returned is [`Error::Contention`] at once, since the caller holds what that load
/// returned.
///
/// The check also expects the members' intent documents (`intent_keys`, see `queue.rs`)
/// absent, as they are but while a group waits for a member: only when it conflicts on
/// one is that document read, and a live intent refuses the transaction as a waiting
/// group holds off one that does not wait; another is expected as read. Answers the
/// documents read, and the intent documents as the check expected them. Where no commit
/// spans the members' entity groups, a second read checks instead ([`read_again`]).
///
/// [`Error::Grouped`] when a live group owns one of the members' documents, or a waiting
/// group queued for a member, as forming a group would answer. A group whose lease passed
/// with a transaction in flight still holds its documents: it is recovered (or the hold
/// dropped, where its group is gone: `one_shot_steps.rs`), and the members read again.
pub(super) async fn read<S, I, F>(
    mapper: &Mapper<S>,
    reads: impl Fn() -> I,
    intent_keys: &[Key],
    earlier: &BTreeMap<Key, Option<Version>>,
) -> Result<(Vec<Arc<Snapshot>>, Vec<Option<Versioned>>)>
where
    S: DocumentStore,
    I: Iterator<Item = F>,
    F: Future<Output = Result<Arc<Snapshot>>>,
{
    let mut intents: Vec<Option<Versioned>> = vec![None; intent_keys.len()];
    let mut attempts = 0;
    loop {
        attempts += 1;
        let found = read_unowned(mapper, &reads).await?;
        if !mapper.store.cross_group_transactions() {
            match read_again(mapper, &found, intent_keys, earlier).await? {
                Ok(intents) => return Ok((found, intents)),
                Err(key) if attempts == SNAPSHOT_READS => {
                    return Err(Error::Contention { key, attempts });
                }
                Err(_) => continue,
            }
        }
        let mut check = Transaction::new();
        for (key, version) in earlier {
            check = check.expect(key.clone(), *version);
        }
        let intents_read = intent_keys.iter().zip(intents.iter().map(Option::as_ref));
        let read = found.iter().flat_map(|f| documents_read(f));
        for (key, doc) in read.chain(intents_read) {
            if !earlier.contains_key(key) {
                check = check.expect(key.clone(), doc.map(|d| d.version));
            }
        }
        let key = match mapper.store.commit(&check).await? {
            Commit::Committed => return Ok((found, intents)),
            Commit::Conflict { key } => key,
        };
        if earlier.contains_key(&key) || attempts == SNAPSHOT_READS {
            return Err(Error::Contention { key, attempts });
        }
        if let Some(at) = intent_keys.iter().position(|k| *k == key) {
            let doc = mapper.store.get(&key).await?;
            let now = mapper.store.now_ms().await?;
            if let Some(intent) = intent_in(doc.as_ref()).filter(|i| i.holds_off(None, now)) {
                return Err(intent.refusal(&key));
            }
            intents[at] = doc;
        }
    }
}

/// The check of [`read`] where no commit spans the members' entity groups: every document
/// `found` holds and every one an earlier load returned (`earlier`) read again, with the
/// members' intent documents (`intent_keys`). A document at the same version both times
/// was not written in between (a version is never handed out again), and every first
/// read came before every second one, so when all match, all were as read at the instant
/// of the first second read: one snapshot, as the check commit makes it elsewhere.
/// Answers the intent documents as read (a live one refuses the transaction, as in
/// [`read`]), or the key of a document of `found` that changed (read again);
/// [`Error::Contention`] when one an earlier load returned changed.
async fn read_again<S: DocumentStore>(
    mapper: &Mapper<S>,
    found: &[Arc<Snapshot>],
    intent_keys: &[Key],
    earlier: &BTreeMap<Key, Option<Version>>,
) -> Result<std::result::Result<Vec<Option<Versioned>>, Key>> {
    let read: Vec<(&Key, Option<Version>)> = found
        .iter()
        .flat_map(|f| documents_read(f))
        .map(|(key, doc)| (key, doc.map(|d| d.version)))
        .collect();
    let keys: Vec<Key> = read
        .iter()
        .map(|(key, _)| (*key).clone())
        .chain(earlier.keys().cloned())
        .chain(intent_keys.iter().cloned())
        .collect();
    let mut again = mapper.get_values(&keys).await?.into_iter();
    for ((key, version), doc) in read.iter().zip(again.by_ref()) {
        if doc.map(|d| d.version) != *version {
            return Ok(Err((*key).clone()));
        }
    }
    earlier_unchanged(earlier, again.by_ref())?;
    let intents: Vec<Option<Versioned>> = again.collect();
    let now = if intents.iter().any(Option::is_some) {
        mapper.store.now_ms().await?
    } else {
        0
    };
    for (key, doc) in intent_keys.iter().zip(&intents) {
        if let Some(intent) = intent_in(doc.as_ref()).filter(|i| i.holds_off(None, now)) {
            return Err(intent.refusal(key));
        }
    }
    Ok(Ok(intents))
}

/// Checks the documents earlier loads returned (`earlier`, each key with the version
/// read) against the same documents read again (`again`, in order, taking one per key):
/// [`Error::Contention`] on the first that changed, since the caller holds what that
/// load returned.
fn earlier_unchanged(
    earlier: &BTreeMap<Key, Option<Version>>,
    again: impl Iterator<Item = Option<Versioned>>,
) -> Result<()> {
    for ((key, version), doc) in earlier.iter().zip(again) {
        if doc.map(|d| d.version) != *version {
            return Err(Error::Contention {
                key: key.clone(),
                attempts: 1,
            });
        }
    }
    Ok(())
}

/// [`read`] in one lookup where the store reads it atomically
/// ([`DocumentStore::snapshot_lookups`]): the members of kind `E` at `mains` (each as a
/// load reads it first, without write records: the commit keeps them), the documents
/// earlier loads returned
/// (`earlier`, with the versions read) and the members' intent documents (`intent_keys`),
/// all as they were at one instant, so no commit has to check that they are one snapshot.
/// Answers what [`read`] answers, or `None` when that read is not enough and [`read`] must
/// answer: the store does not read atomically, a member needs more than its first read
/// (`Mapper::read_at_once`), a document names an owner (live or left behind), or an intent
/// document exists (a group waits, or waited, for a member). [`Error::Contention`] when a
/// document an earlier load returned has changed since, as [`read`] answers.
pub(super) async fn read_at_once<S: DocumentStore, E: Root>(
    mapper: &Mapper<S>,
    mains: &[Key],
    intent_keys: &[Key],
    earlier: &BTreeMap<Key, Option<Version>>,
) -> Result<Option<(Vec<Arc<Snapshot>>, Vec<Option<Versioned>>)>> {
    let extra: Vec<Key> = earlier.keys().chain(intent_keys).cloned().collect();
    // Without records: the commit writes values and keeps the stored records.
    let Some((snapshots, extra)) = mapper.read_at_once::<E>(mains, &extra, false).await? else {
        return Ok(None);
    };
    let mut extra = extra.into_iter();
    earlier_unchanged(earlier, extra.by_ref())?;
    let intents: Vec<Option<Versioned>> = extra.collect();
    let named = |doc: &Versioned| Owner::of(&doc.doc).is_some();
    if intents.iter().any(Option::is_some)
        || snapshots
            .iter()
            .flat_map(|s| s.documents())
            .any(|(_, d)| named(d))
    {
        return Ok(None);
    }
    Ok(Some((snapshots, intents)))
}

/// Reads members (`reads`), and refuses documents a live group owns (see [`read`]).
async fn read_unowned<S, I, F>(
    mapper: &Mapper<S>,
    reads: &impl Fn() -> I,
) -> Result<Vec<Arc<Snapshot>>>
where
    S: DocumentStore,
    I: Iterator<Item = F>,
    F: Future<Output = Result<Arc<Snapshot>>>,
{
    let mut recoveries = 0;
    loop {
        let found = futures::future::try_join_all(reads()).await?;
        let named = |doc: &Versioned| Owner::of(&doc.doc).is_some();
        if !found
            .iter()
            .flat_map(|f| f.documents())
            .any(|(_, d)| named(d))
        {
            return Ok(found);
        }
        // A document names an owner, live or left behind by a group whose lease passed.
        let now = mapper.store.now_ms().await?;
        let mut stuck = Vec::new();
        for (key, doc) in found.iter().flat_map(|f| f.documents()) {
            if let Err(refused) = ownership::check(key, Some(&doc.doc), None, now) {
                let held = Owner::of(&doc.doc).filter(|o| o.txn.is_some() && o.until_ms <= now);
                let Some(owner) = held.filter(|_| recoveries < RECOVERIES) else {
                    return Err(refused);
                };
                stuck.push((key.clone(), owner.group));
            }
        }
        if stuck.is_empty() {
            return Ok(found);
        }
        mapper.recover_stuck(&stuck).await?;
        recoveries += 1;
    }
}

/// The commit of the changes (module docs): every document read (`reads`) expected at
/// its version, the documents of `writes` written as values (each keeps its stored
/// write record), and the write id recorded in one of them, where a commit whose reply
/// is lost is checked. The members loaded (`loaded`)
/// leave the read cache. [`Error::Contention`] when a document read changed; the members
/// loaded then count as contended for a while ([`Contended`]).
pub(super) async fn commit<'k, S: DocumentStore>(
    mapper: &Mapper<S>,
    reads: &BTreeMap<Key, Option<Version>>,
    writes: &BTreeMap<Key, Document>,
    loaded: impl Iterator<Item = &'k Key>,
) -> Result<()> {
    let mut writes = writes.clone();
    // A static shard already carries write records; else any document written.
    let Some(marker) = writes
        .keys()
        .find(|key| layout::static_shard_of(key).is_some())
        .or_else(|| writes.keys().next())
        .cloned()
    else {
        return Ok(());
    };
    let mut sender = mapper.writers.take();
    let write: WriteId = sender.begin(mapper.write_window);
    if let Some(doc) = writes.get_mut(&marker) {
        write_ids::record(doc, &write);
    }
    let mut txn = Transaction::new();
    for (key, version) in reads {
        txn = txn.expect(key.clone(), *version);
    }
    for (key, doc) in writes {
        txn = txn.put_values(key, doc);
    }
    let loaded: Vec<&Key> = loaded.collect();
    let _invalidate: Vec<_> = loaded
        .iter()
        .map(|main| mapper.invalidating(main))
        .collect();
    let landed = |doc: Option<&Versioned>| write_ids::applied(doc.map(|d| &d.doc), &write);
    let answer = send(mapper, &txn, &marker, landed).await;
    if !matches!(answer, Err(Error::Backend { .. })) {
        sender.settle();
    }
    match answer? {
        Commit::Committed => Ok(()),
        Commit::Conflict { key } => {
            for main in loaded {
                mapper.contended.insert(main.clone(), ());
            }
            Err(Error::Contention { key, attempts: 1 })
        }
    }
}
