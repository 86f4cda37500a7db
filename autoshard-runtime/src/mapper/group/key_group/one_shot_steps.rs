//! The commit of a one-shot transaction without a group on a store whose commits stay
//! within one entity group (a Redis Cluster): the loads read the members as one snapshot
//! (`one_shot::read`), and the commit is a two-phase commit whose coordinator is a group
//! document written for it alone, in the grouping protocol's documents (`protocol`), so
//! that recovery finishes it as it finishes a group's transaction. Only the documents it
//! writes are held; those it only read are checked once the others are held, as Silo
//! validates its reads after locking its writes (Tu, Zheng, Kohler, Liskov and Madden,
//! "Speedy Transactions in Multicore In-Memory Databases", SOSP 2013).
//!
//! 1. *Insert*: the group document, with its lease and the transaction recorded in
//!    flight, undecided, and its list document naming the documents the transaction
//!    writes.
//! 2. *Prepare*: once the insert committed, one commit per entity group the transaction
//!    writes, concurrently: it expects every document of that entity group the
//!    transaction read at the version read, and holds each it writes (`~own.txn`, the new
//!    content beside it, as `in_steps` prepares). It carries no token, so the store
//!    refuses it when a live group owns one of them.
//! 3. *Validation*: once every prepare committed, the documents read in the other entity
//!    groups are read again; each must have the version read (a version is never handed
//!    out again, so it was not written since).
//! 4. *Log and decision*: one compare-and-set of the group document, with the group's
//!    token (refused once the lease has passed), records the transaction as committed:
//!    its commit point.
//! 5. *Settle*: one commit per entity group written, concurrently, writes each held
//!    document's new content, owned by no one, expecting the version the prepare gave;
//!    where one does not commit, the grouping protocol's steps settle and release.
//! 6. The group document and its list are deleted.
//!
//! The loads read the members without write records, so the prepare and the settling
//! write values ([`crate::store::Write::Values`]): the store keeps each document's record,
//! and a merge whose entry was there is still known as applied afterwards. The grouping
//! protocol's settle (recovery's) writes a next content without a record as values too.
//!
//! Serializable: at the validation's instant, every document the transaction read was as
//! read (those in written entity groups held since their prepare, the others unchanged
//! from the read to the validation), and no one could read or write what it writes: a
//! held document refuses every other write and every other transaction's read. Of two
//! transactions that each read what the other writes, one finds the other's hold, or the
//! version it changed, whichever prepares first. A writer that changes a document read
//! only after the validation comes after the transaction.
//!
//! Nothing lost or applied twice, wherever a client stops: until the decision, the group
//! document records the transaction undecided, so whoever recovers the group once its
//! lease has passed decides it aborted and drops what was held; after it, recovery settles
//! it as committed. A prepare is sent only once the insert has committed, so a document
//! held by a transaction whose group document is gone was prepared after the group was
//! finished: a copy of a prepare that landed late, whose transaction can never be decided
//! (its log expects a version of the group document no document will have again). Whoever
//! meets such a document past its lease (a one-shot load, a create, a plain write through
//! the retry loop's `Lapsed`) drops the hold ([`Mapper::drop_orphaned_holds`]). The
//! argument in full: `docs/design/key-groups.md`, "A one-shot transaction on a Redis
//! Cluster".

use super::in_steps::{prepare_all, prepared};
use super::protocol::{IN_FLIGHT, InFlight, Steps, commit_all};
use super::read_set::ReadSet;
use super::{group_documents, millis, send_versioned};
use crate::document::{Document, Version, Versioned};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::layout;
use crate::store::ownership::Owner;
use crate::store::{Commit, CommitReply, DocumentStore, Transaction};
use futures::future::BoxFuture;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// What a one-shot transaction commits.
pub(super) struct OneShot<'a> {
    /// The members named (the group document lists them).
    pub members: &'a [Key],
    /// How long the group written for the commit holds what it writes, undecided.
    pub lease: Duration,
    /// Everything the transaction read.
    pub read: &'a ReadSet,
    /// Every document written, as it will be (without an owner).
    pub writes: &'a BTreeMap<Key, Document>,
}

/// Commits `one_shot` in the steps of the module docs. [`Error::Contention`] when a
/// document read changed, [`Error::Grouped`] when a live group owns one, and
/// [`Error::GroupLost`] when the lease passed before the decision: nothing written.
pub(super) async fn commit<S: DocumentStore>(
    mapper: &Mapper<S>,
    one_shot: OneShot<'_>,
) -> Result<()> {
    if one_shot.writes.is_empty() {
        // The loads read one snapshot (`one_shot::read`): nothing to check.
        return Ok(());
    }
    let now = mapper.store.now_ms().await?;
    let id: Arc<str> = uuid::Uuid::new_v4().simple().to_string().into();
    let key = layout::key_group(&id);
    let coordinator = Coordinator {
        steps: Steps {
            mapper,
            id: id.clone(),
            key: &key,
            memo: None,
        },
        owner: Owner {
            group: id.to_string(),
            until_ms: now.saturating_add(millis(one_shot.lease)),
            txn: None,
        },
        in_flight: InFlight {
            txn: uuid::Uuid::new_v4().simple().to_string(),
            keys: one_shot.writes.keys().cloned().collect(),
            decided: None,
        },
        one_shot,
    };
    coordinator.run().await
}

/// A one-shot commit under way: its group document's steps, the group as owner, and the
/// transaction as the group document records it (undecided).
struct Coordinator<'a, S> {
    steps: Steps<'a, S>,
    owner: Owner,
    in_flight: InFlight,
    one_shot: OneShot<'a>,
}

impl<S: DocumentStore> Coordinator<'_, S> {
    /// The steps, in order; a step that does not commit before the decision undoes the
    /// commit ([`Coordinator::abort`]).
    async fn run(&self) -> Result<()> {
        let stored = self.insert().await?;
        let prepared = match self.prepare().await {
            Ok((Commit::Committed, at)) => at,
            Ok((Commit::Conflict { key }, _)) => return self.abort(contention(key)).await,
            Err(e) => return self.abort(e).await,
        };
        match self.changed_reads().await {
            Ok(None) => {}
            Ok(Some(key)) => return self.abort(contention(key)).await,
            Err(e) => return self.abort(e).await,
        }
        let (decided, logged) = self.log(stored).await?;
        self.settle(&decided, &prepared).await?;
        self.steps.delete_group_document(logged).await
    }

    /// Step 1: the group document and its list inserted; the group document as inserted.
    async fn insert(&self) -> Result<Versioned> {
        let OneShot {
            members, writes, ..
        } = self.one_shot;
        let key = self.steps.key;
        let written: BTreeSet<Key> = writes.keys().cloned().collect();
        let (mut state, list) = group_documents(members, &written, &self.owner);
        state.insert(IN_FLIGHT.to_owned(), self.in_flight.to_value());
        let list_key = layout::key_group_members(key);
        let insert = Transaction::new()
            .expect(key.clone(), None)
            .put(key.clone(), state.clone())
            .expect(list_key.clone(), None)
            .put(list_key, list);
        let mapper = self.steps.mapper;
        let inserted = send_versioned(mapper, &insert, key, |doc| doc.is_some()).await?;
        if let Commit::Conflict { key } = inserted.outcome {
            return Err(contention(key));
        }
        match told(&inserted) {
            Some(version) => Ok(Versioned {
                doc: state,
                version,
            }),
            None => mapper
                .store
                .get(key)
                .await?
                .ok_or_else(|| Error::backend("one-shot commit", "its group document is gone")),
        }
    }

    /// Step 2: the prepare, one commit per entity group written: whether all committed, with
    /// the version each gave the documents it holds.
    async fn prepare(&self) -> Result<(Commit, BTreeMap<Key, Version>)> {
        let OneShot { read, writes, .. } = self.one_shot;
        let mut prepare = Transaction::new();
        for (key, version) in read.versions() {
            if self.written_group(key) {
                prepare = prepare.expect(key.clone(), *version);
            }
        }
        for (key, next) in writes {
            let held = prepared(
                read.doc(key),
                &self.owner,
                &self.in_flight.txn,
                next.clone(),
            );
            prepare = prepare.put_values(key.clone(), held);
        }
        prepare_all(&self.steps, &prepare.by_group(), &self.in_flight.txn).await
    }

    /// Whether the transaction writes a document of `key`'s entity group.
    fn written_group(&self, key: &Key) -> bool {
        let group = key.group();
        self.one_shot.writes.keys().any(|k| k.group() == group)
    }

    /// Step 3, the validation: the first document read outside the entity groups written
    /// that no longer has the version read, if any.
    async fn changed_reads(&self) -> Result<Option<Key>> {
        let checked: Vec<(&Key, &Option<Version>)> = self
            .one_shot
            .read
            .versions()
            .iter()
            .filter(|(key, _)| !self.written_group(key))
            .collect();
        let keys: Vec<Key> = checked.iter().map(|(key, _)| (*key).clone()).collect();
        let again = self.steps.mapper.get_values(&keys).await?;
        Ok(checked
            .into_iter()
            .zip(again)
            .find(|((_, version), doc)| doc.as_ref().map(|d| d.version) != **version)
            .map(|((key, _), _)| key.clone()))
    }

    /// Step 4: the decision, recorded with the group's token: the transaction as decided, and
    /// the group document as the log left it (where the store told its version). A log
    /// that conflicts or meets a passed lease undoes the commit.
    async fn log(&self, stored: Versioned) -> Result<(InFlight, Option<Versioned>)> {
        let key = self.steps.key;
        let decided = InFlight {
            decided: Some(true),
            ..self.in_flight.clone()
        };
        let mut logged = stored.doc;
        logged.insert(IN_FLIGHT.to_owned(), decided.to_value());
        let log = self
            .steps
            .token()
            .expect(key.clone(), Some(stored.version))
            .put(key.clone(), logged.clone());
        let landed = |doc: Option<&Versioned>| {
            doc.and_then(|d| InFlight::of(key, &d.doc).ok().flatten())
                .is_some_and(|recorded| recorded == decided)
        };
        // An error here leaves the outcome unknown: the group document says, to whoever
        // recovers the group.
        match send_versioned(self.steps.mapper, &log, key, landed).await {
            Ok(reply) => match reply.outcome {
                Commit::Committed => {
                    let logged = told(&reply).map(|version| Versioned {
                        doc: logged,
                        version,
                    });
                    Ok((decided, logged))
                }
                Commit::Conflict { key } => self.abort(contention(key)).await,
            },
            Err(refused @ Error::GroupLost { .. }) => self.abort(refused).await,
            Err(e) => Err(e),
        }
    }

    /// Step 5: each held document takes its new content, owned by no one, expecting the
    /// version its prepare gave (`prepared`), one commit per entity group; where that
    /// does not all commit, the grouping protocol settles and releases them.
    async fn settle(&self, decided: &InFlight, prepared: &BTreeMap<Key, Version>) -> Result<()> {
        let mut settle = Some(self.steps.token());
        for (key, next) in self.one_shot.writes {
            settle = match (settle, prepared.get(key)) {
                (Some(txn), Some(version)) => Some(
                    txn.expect(key.clone(), Some(*version))
                        .put_values(key.clone(), next.clone()),
                ),
                _ => None,
            };
        }
        if let Some(settle) = settle
            && let Ok(Commit::Committed) = commit_all(self.steps.mapper, &settle.by_group()).await
        {
            return Ok(());
        }
        self.steps
            .settle_documents(decided, &BTreeMap::new())
            .await?;
        self.release().await
    }

    /// Undoes a commit that is not decided committed (its prepare, its validation or its
    /// log did not commit, so it never will be), then answers `error`: what it holds is
    /// dropped and owned by no one, then the group document deleted. A copy of a prepare
    /// that lands after that holds documents of a group that is gone (module docs).
    async fn abort<T>(&self, error: Error) -> Result<T> {
        self.release().await?;
        self.steps.delete_group_document(None).await?;
        Err(error)
    }

    /// Takes the owner out of every document the transaction writes that the group still
    /// owns (one a transaction the group document no longer records holds is dropped).
    async fn release(&self) -> Result<()> {
        let keys: Vec<Key> = self.one_shot.writes.keys().cloned().collect();
        self.steps.rewrite_owned(&keys, None).await
    }
}

/// A conflict on `key`, as the caller is told it.
fn contention(key: Key) -> Error {
    Error::Contention { key, attempts: 1 }
}

/// The version the first write of a committed reply gave, where told.
fn told(reply: &CommitReply) -> Option<Version> {
    reply.versions.as_ref()?.first().copied().flatten()
}

impl<S: DocumentStore> crate::mapper::attempt::Lapsed for Mapper<S> {
    fn finish_lapsed<'a>(&'a self, error: &'a Error) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let Error::Grouped {
                key,
                group,
                until_ms,
            } = error
            else {
                return Ok(false);
            };
            // Past the lease only a transaction's hold refuses a write.
            if *until_ms > self.store.now_ms().await? {
                return Ok(false);
            }
            self.recover_stuck(&[(key.clone(), group.clone())]).await?;
            Ok(true)
        })
    }
}

impl<S: DocumentStore> Mapper<S> {
    /// Finishes what holds `stuck` (documents a transaction holds past its group's
    /// lease, each with the id of the group that holds it): the groups whose lease
    /// passed ([`Mapper::recover_key_groups`]), and holds whose group is gone
    /// ([`Mapper::drop_orphaned_holds`]).
    pub(in crate::mapper) async fn recover_stuck(&self, stuck: &[(Key, String)]) -> Result<()> {
        self.recover_key_groups().await?;
        self.drop_orphaned_holds(stuck).await?;
        Ok(())
    }

    /// Drops the holds of `held` (documents a transaction holds, each with the id of the
    /// group that holds it) whose group document is gone (from both its placements): such
    /// a hold was prepared after its group was finished, by a copy of a prepare that
    /// landed late, and its transaction can never be decided (module docs). A document
    /// no longer held by that group is left as it is. Whether any group was gone.
    async fn drop_orphaned_holds(&self, held: &[(Key, String)]) -> Result<bool> {
        let mut by_group: BTreeMap<&str, Vec<Key>> = BTreeMap::new();
        for (key, group) in held {
            by_group.entry(group).or_default().push(key.clone());
        }
        let placements: Vec<Key> = by_group
            .keys()
            .flat_map(|id| layout::key_group_placements(id))
            .collect();
        let found = self.get_exactly(&placements).await?;
        let mut dropped = false;
        for ((id, keys), (key, found)) in by_group
            .iter()
            .zip(placements.chunks(2).zip(found.chunks(2)))
        {
            if found.iter().any(Option::is_some) {
                continue;
            }
            let steps = Steps {
                mapper: self,
                id: (*id).into(),
                key: &key[0],
                memo: None,
            };
            tracing::info!(group = %id, "dropping holds whose group is gone");
            steps.rewrite_owned(keys, None).await?;
            dropped = true;
        }
        Ok(dropped)
    }
}
