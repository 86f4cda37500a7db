//! A transaction of a key group on a store whose commits stay within one entity group (a
//! Redis Cluster), in the grouping protocol's steps (`protocol`): prepare, then log and
//! decision in one, then settle.
//!
//! 1. *Prepare*: each document the transaction writes is held by it (`~own.txn`) with its
//!    new content beside the old (`NEXT`), expecting the version read, one commit per
//!    entity group, concurrently. A document the transaction creates is first added to the
//!    group's list document (which recovery and dissolve release from), in a commit that
//!    expects the group document as the transaction read it.
//! 2. *Log and decision*: once every prepare committed, one compare-and-set of the group
//!    document records the transaction as committed (its id, the documents it writes and
//!    its write id), expecting the version the transaction began with. That commit is the
//!    transaction's commit point: before it nothing is visible, after it the transaction
//!    applies whole, whoever settles it.
//! 3. *Settle*: each held document takes its new content and is held no more.
//!
//! A prepare that does not commit, or a log that conflicts, drops what was prepared (the
//! held documents settled as an abort settles them): the log expects a version the group
//! document no longer has, so the transaction can never be recorded. A transaction cut
//! between its prepare and its log leaves documents held by a transaction the group
//! document does not record. Whoever meets them next handles them before anything else:
//! the group's next transaction rewrites the group document first (so that the cut log,
//! expecting an older version, can never land) and then drops them ([`drop_unlogged`]);
//! dissolve, renew and recovery drop them while they release the documents, before the
//! group document is deleted or rewritten (`Steps::rewrite_owned`), and a cut log that
//! lands in between only records a transaction none of whose documents it still holds.
//!
//! The settling writes documents this transaction wrote just before, at their prepare.
//! Where the store tells the version a write gave ([`DocumentStore::commit_versioned`]),
//! the first try takes the document as written at that version instead of reading it:
//! the same content and version a read would answer, since a version is never handed out
//! again. The commit expects that version, so a document someone changed meanwhile (a
//! recoverer, once the lease has passed) makes it conflict, and the step reads it and
//! tries again as it does after any conflict. The documents as settled, at the versions
//! the settling's commits told, are what the group's handle keeps for the next
//! transaction's first load (`memo.rs`): its prepare expects those versions, and its log
//! the group document as this log left it.

use super::protocol::{IN_FLIGHT, InFlight, NEXT, Steps, gathered};
use super::{resend, send, send_versioned};
use crate::document::{Document, Value, Versioned};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::mapper::layout;
use crate::mapper::read::snapshot::Snapshot;
use crate::store::ownership::{OWNER, Owner};
use crate::store::{Commit, CommitReply, DocumentStore, Transaction, Write};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How many times [`drop_unlogged`] reads the group document again when it changed under
/// the rewrite.
const REWRITES: u32 = 4;

/// What a transaction of a group commits.
pub(super) struct Changes<'a> {
    /// The group as owner (its lease).
    pub owner: &'a Owner,
    /// The group document as the transaction read it.
    pub stored: &'a Versioned,
    /// The group document's next state (with the transaction's write id).
    pub state: Document,
    /// Every document written, as it will be.
    pub writes: &'a BTreeMap<Key, Document>,
    /// Every document written, as read: its version and content (`None`: absent).
    pub current: &'a BTreeMap<&'a Key, (Option<crate::document::Version>, Option<&'a Document>)>,
    /// The transaction's id.
    pub txn_id: &'a str,
    /// The group's list document, when the transaction creates documents.
    pub list: Option<Document>,
}

/// The transaction of a group on a store without cross-group commits: prepare, log and
/// decision, settle (module docs). `landed` tells from the group document whether the log
/// committed (for a reply that was lost).
pub(super) async fn commit_in_steps<S: DocumentStore>(
    steps: &Steps<'_, S>,
    changes: Changes<'_>,
    landed: impl Fn(Option<&Versioned>) -> bool,
) -> Result<()> {
    let Changes {
        owner,
        stored,
        state,
        writes,
        current,
        txn_id,
        list,
    } = changes;
    if let Some(list) = list {
        let list_key = layout::key_group_members(steps.key);
        let listing = steps
            .token()
            .expect(steps.key.clone(), Some(stored.version))
            .put(list_key.clone(), list.clone());
        let listed = |doc: Option<&Versioned>| doc.is_some_and(|d| d.doc == list);
        if let Commit::Conflict { key } = send(steps.mapper, &listing, &list_key, listed).await? {
            return Err(Error::Contention { key, attempts: 1 });
        }
    }
    let mut prepare = steps.token();
    for (key, next) in writes {
        let (version, doc) = current.get(key).copied().unwrap_or_default();
        prepare = prepare
            .expect(key.clone(), version)
            .put(key.clone(), prepared(doc, owner, txn_id, next.clone()));
    }
    let parts = prepare.by_group();
    let (prepared, at) = match prepare_all(steps, &parts, txn_id).await {
        Ok((outcome, at)) => (Ok(outcome), at),
        Err(e) => (Err(e), BTreeMap::new()),
    };
    // What the prepare wrote, where the store told the version it gave.
    let mut written = BTreeMap::new();
    for part in parts {
        for (key, write) in part.into_writes() {
            if let (Write::Put(doc), Some(&version)) = (write, at.get(&key)) {
                written.insert(key, Versioned { doc, version });
            }
        }
    }
    let in_flight = InFlight {
        txn: txn_id.to_owned(),
        keys: writes.keys().cloned().collect(),
        decided: Some(true),
    };
    let aborted = InFlight {
        decided: Some(false),
        ..in_flight.clone()
    };
    match prepared {
        Ok(Commit::Committed) => {}
        Ok(Commit::Conflict { key }) => {
            steps.settle_documents(&aborted, &written).await?;
            return Err(Error::Contention { key, attempts: 1 });
        }
        Err(e) => {
            steps.settle_documents(&aborted, &written).await?;
            return Err(e);
        }
    }
    let mut logged = state;
    logged.insert(IN_FLIGHT.to_owned(), in_flight.to_value());
    let log = steps
        .token()
        .expect(steps.key.clone(), Some(stored.version))
        .put(steps.key.clone(), logged);
    // An error here leaves the outcome unknown: the group document says, to whoever reads
    // it next (module docs).
    let logged_at = send_versioned(steps.mapper, &log, steps.key, landed).await?;
    if let Commit::Conflict { key } = logged_at.outcome {
        steps.settle_documents(&aborted, &written).await?;
        return Err(Error::Contention { key, attempts: 1 });
    }
    steps.remember(&log, &logged_at);
    steps.settle_documents(&in_flight, &written).await?;
    Ok(())
}

/// Commits every part of the prepare of transaction `txn` concurrently: `Committed` when
/// all did (with the version each put gave, where told), else the first conflict or error.
pub(super) async fn prepare_all<S: DocumentStore>(
    steps: &Steps<'_, S>,
    parts: &[Transaction],
    txn: &str,
) -> Result<(Commit, BTreeMap<Key, crate::document::Version>)> {
    let answers = parts.iter().map(|part| prepare_part(steps, part, txn));
    gathered(parts, futures::future::join_all(answers).await)
}

/// Commits `part` of the prepare of transaction `txn`, resent while its outcome is unknown
/// ([`resend`]): all its documents held by `txn` means a copy landed, as nothing else
/// writes that hold.
async fn prepare_part<S: DocumentStore>(
    steps: &Steps<'_, S>,
    part: &Transaction,
    txn: &str,
) -> Result<CommitReply> {
    let keys: Vec<Key> = part.writes().iter().map(|(key, _)| key.clone()).collect();
    let held = |docs: &[Option<Versioned>]| {
        docs.iter().all(|doc| {
            doc.as_ref()
                .and_then(|d| Owner::of(&d.doc))
                .is_some_and(|o| o.txn.as_deref() == Some(txn))
        })
    };
    resend(steps.mapper, part, &keys, held).await
}

/// The document `doc` prepared for transaction `txn` of the group `owner` names: as it is,
/// held by the transaction, with `next` beside it.
pub(super) fn prepared(
    current: Option<&Document>,
    owner: &Owner,
    txn: &str,
    next: Document,
) -> Document {
    let mut doc = current.cloned().unwrap_or_default();
    let held = Owner {
        txn: Some(txn.to_owned()),
        ..owner.clone()
    };
    doc.insert(OWNER.to_owned(), held.to_value());
    doc.insert(NEXT.to_owned(), Value::Object(next.into_iter().collect()));
    doc
}

/// The documents among `found` (members as read) that a transaction holds, by
/// transaction.
pub(super) fn held(found: &[Arc<Snapshot>]) -> BTreeMap<String, Vec<Key>> {
    let mut held: BTreeMap<String, Vec<Key>> = BTreeMap::new();
    for snapshot in found {
        for (key, doc) in snapshot.documents() {
            if let Some(txn) = Owner::of(&doc.doc).and_then(|o| o.txn) {
                held.entry(txn).or_default().push(key.clone());
            }
        }
    }
    held
}

/// Drops what transactions the group document does not record hold (`held`, by
/// transaction: a transaction cut between its prepare and its log, module docs): the
/// group document is rewritten first, unchanged but for its version, so that no such log
/// can land afterwards, then each document is settled as an abort settles it. A
/// transaction the group document records by then (its log landed before the rewrite) is
/// settled as recorded instead.
pub(super) async fn drop_unlogged<S: DocumentStore>(
    steps: &Steps<'_, S>,
    held: &BTreeMap<String, Vec<Key>>,
) -> Result<()> {
    let mut rewritten = false;
    for _ in 0..REWRITES {
        let Some(state) = steps.mapper.store.get(steps.key).await? else {
            return Ok(());
        };
        if let Some(recorded) = InFlight::of(steps.key, &state.doc)?
            && held.contains_key(&recorded.txn)
        {
            steps.settle(&recorded).await?;
            return Ok(());
        }
        let rewrite = steps
            .token()
            .expect(steps.key.clone(), Some(state.version))
            .put(steps.key.clone(), state.doc);
        let reply = steps.mapper.store.commit_versioned(&rewrite).await?;
        steps.remember(&rewrite, &reply);
        if reply.outcome == Commit::Committed {
            rewritten = true;
            break;
        }
    }
    if !rewritten {
        return Err(Error::Contention {
            key: steps.key.clone(),
            attempts: REWRITES,
        });
    }
    for (txn, keys) in held {
        steps
            .settle_held(keys, txn, false, &BTreeMap::new())
            .await?;
    }
    Ok(())
}
