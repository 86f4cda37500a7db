//! A transaction of a key group on a store whose commits stay within one entity group (a
//! Redis Cluster), in the grouping protocol's steps (`protocol`): log, prepare, decide,
//! settle.
//!
//! The decision and the settling each write documents this transaction wrote just before
//! (the group document at its log, the held documents at their prepare). Where the store
//! tells the version a write gave ([`DocumentStore::commit_versioned`]), the step's first
//! try takes the document as written at that version instead of reading it: the same
//! content and version a read would answer, since a version is never handed out again.
//! The step's commit expects that version, so a document someone changed meanwhile (a
//! recoverer, once the lease has passed) makes it conflict, and the step reads it and
//! tries again as it does after any conflict.

use super::protocol::{IN_FLIGHT, InFlight, Steps, commit_all_versioned, prepared, split};
use super::send_versioned;
use crate::document::{Document, Versioned};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::ownership::Owner;
use crate::store::{Commit, DocumentStore, Write};
use std::collections::BTreeMap;

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
    pub current: &'a BTreeMap<Key, (Option<crate::document::Version>, Option<Document>)>,
    /// The transaction's id.
    pub txn_id: &'a str,
    /// The group's list document, when the transaction creates documents.
    pub list: Option<Document>,
}

/// The transaction of a group on a store without cross-group commits: log, prepare,
/// decide, settle (module docs). `landed` tells from the group document whether the log
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
    let in_flight = InFlight {
        txn: txn_id.to_owned(),
        keys: writes.keys().cloned().collect(),
        decided: None,
    };
    let mut logged = state;
    logged.insert(IN_FLIGHT.to_owned(), in_flight.to_value());
    let mut log = steps
        .token()
        .expect(steps.key.clone(), Some(stored.version))
        .put(steps.key.clone(), logged.clone());
    if let Some(list) = list {
        log = log.put(crate::mapper::layout::key_group_members(steps.key), list);
    }
    let logged_at = send_versioned(steps.mapper, &log, steps.key, landed).await?;
    if let Commit::Conflict { key } = logged_at.outcome {
        return Err(Error::Contention { key, attempts: 1 });
    }
    steps.remember(&log, &logged_at);
    // The log's first write is the group document's.
    let logged_at = logged_at
        .versions
        .and_then(|v| v.first().copied().flatten());
    let mut prepare = steps.token();
    for (key, next) in writes {
        let (version, doc) = current.get(key).cloned().unwrap_or_default();
        prepare = prepare.expect(key.clone(), version).put(
            key.clone(),
            prepared(doc.as_ref(), owner, txn_id, next.clone()),
        );
    }
    let (prepared, at) = match commit_all_versioned(steps.mapper, &split(&prepare)).await {
        Ok((outcome, at)) => {
            steps.remember_versions(&at);
            (Ok(outcome), at)
        }
        Err(e) => (Err(e), BTreeMap::new()),
    };
    let commit = matches!(prepared, Ok(Commit::Committed));
    let logged = logged_at.map(|version| Versioned {
        doc: logged,
        version,
    });
    let decided = steps.decide(&in_flight, commit, logged).await?;
    // What the prepare wrote, where the store told the version it gave.
    let written = prepare
        .writes()
        .iter()
        .filter_map(|(key, write)| match write {
            Write::Put(doc) => at.get(key).map(|&version| {
                let doc = doc.clone();
                (key.clone(), Versioned { doc, version })
            }),
            _ => None,
        });
    let written: BTreeMap<Key, Versioned> = written.collect();
    let settled = steps
        .settle_documents(
            &InFlight {
                decided,
                ..in_flight
            },
            &written,
        )
        .await?;
    match (settled.or(decided), prepared) {
        (Some(true), _) => Ok(()),
        (_, Err(e)) => Err(e),
        (_, Ok(Commit::Conflict { key })) => Err(Error::Contention { key, attempts: 1 }),
        (_, Ok(Commit::Committed)) => Err(Error::Contention {
            key: steps.key.clone(),
            attempts: 1,
        }),
    }
}
