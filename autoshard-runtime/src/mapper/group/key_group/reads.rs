//! How a group's transaction reads: from the group's handle where it holds the members
//! (`memo.rs`), else the group document, and the members in one atomic lookup with it or
//! beside it (settling, on a store whose commits stay within one entity group, what a
//! transaction left in flight).

use super::protocol::InFlight;
use super::{KeyGroup, in_steps};
use crate::document::Versioned;
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::read::snapshot::Snapshot;
use crate::store::DocumentStore;
use crate::store::ownership::Owner;
use crate::sync::lock;
use std::future::Future;
use std::sync::Arc;

/// The members at `mains` as the group's handle holds them (`memo.rs`), with the group
/// document as it holds it; `None` when it does not hold them all, or when that document
/// records a transaction the handle did not settle: one cut after its log (decided)
/// still holds documents, and a later log would replace its record, after which they
/// would be dropped as unlogged; a read of the store settles it first ([`members`]).
pub(super) fn from_handle<S>(
    group: &KeyGroup<'_, S>,
    mains: &[Key],
) -> Option<(Vec<Arc<Snapshot>>, Versioned)> {
    let memo = lock(&group.memo);
    let (found, state) = memo.members_read(mains)?;
    match InFlight::of(&group.key, &state.doc) {
        Ok(None) => Some((found, state)),
        Ok(Some(recorded)) if memo.settled.as_deref() == Some(recorded.txn.as_str()) => {
            Some((found, state))
        }
        // Unsettled, or a record that does not decode (the store's read answers it).
        Ok(Some(_)) | Err(_) => None,
    }
}

/// Reads the group document (once per transaction); [`Error::GroupLost`] when gone.
pub(super) async fn group_document<S: DocumentStore>(group: &KeyGroup<'_, S>) -> Result<Versioned> {
    let state = if group.mapper.store.cross_group_transactions() {
        group.mapper.store.get(&group.key).await?
    } else {
        group.steps().settled_group_document().await?
    };
    state_of(group, state)
}

/// The transaction's first read of a group's members (of kind `E`, at `mains`) and of
/// its group document in one atomic lookup, where the store commits across entity
/// groups and reads a lookup atomically (`Mapper::read_at_once`); `None` elsewhere,
/// or when a member needs more than that read. [`Error::GroupLost`] when the group
/// is gone.
pub(super) async fn at_once<S: DocumentStore, E: Root>(
    group: &KeyGroup<'_, S>,
    mains: &[Key],
) -> Result<Option<(Vec<Arc<Snapshot>>, Versioned)>> {
    let mapper = group.mapper;
    if !mapper.store.cross_group_transactions() {
        return Ok(None);
    }
    // With records: a group's transaction writes its documents back whole.
    let read = mapper.read_at_once::<E>(mains, std::slice::from_ref(&group.key), true);
    let Some((found, mut state)) = read.await? else {
        return Ok(None);
    };
    Ok(Some((found, state_of(group, state.pop().flatten())?)))
}

/// The group document as read (`state`), or [`Error::GroupLost`] when it is gone or
/// names another owner.
fn state_of<S>(group: &KeyGroup<'_, S>, state: Option<Versioned>) -> Result<Versioned> {
    state
        .filter(|state| Owner::of(&state.doc).is_some_and(|o| *o.group == *group.id))
        .ok_or_else(|| Error::GroupLost {
            key: group.key.clone(),
            group: group.id.to_string(),
        })
}

/// Reads members (`reads`), and concurrently the group document when `with_state` (the
/// first read). Reading that settles a transaction left in flight (`protocol`): members
/// read meanwhile are read again when they show a document it held; what is held
/// after that, a transaction whose log never landed holds, and it is dropped first
/// (`in_steps`).
pub(super) async fn members<S: DocumentStore, I, F>(
    group: &KeyGroup<'_, S>,
    with_state: bool,
    reads: impl Fn() -> I,
) -> Result<(Vec<Arc<Snapshot>>, Option<Versioned>)>
where
    I: Iterator<Item = F>,
    F: Future<Output = Result<Arc<Snapshot>>>,
{
    let read_members = || futures::future::try_join_all(reads());
    if !with_state {
        return Ok((read_members().await?, None));
    }
    let both = || async { futures::try_join!(read_members(), group_document(group)) };
    let (mut found, mut state) = both().await?;
    if !group.mapper.store.cross_group_transactions() && !in_steps::held(&found).is_empty() {
        found = read_members().await?;
        let unlogged = in_steps::held(&found);
        if !unlogged.is_empty() {
            in_steps::drop_unlogged(&group.steps(), &unlogged).await?;
            (found, state) = both().await?;
        }
    }
    Ok((found, Some(state)))
}
