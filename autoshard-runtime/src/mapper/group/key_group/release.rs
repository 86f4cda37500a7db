//! Dissolving a group from its handle's memo (`memo.rs`): on a store that commits across
//! entity groups, one commit ([`KeyGroup::release_known_at_once`]); on one whose commits
//! stay within one entity group (`protocol`), the steps below.
//!
//! The one commit, with the group's token, expects every document the group owns, the
//! group document and its list at the versions the memo holds, takes the owner out of the
//! first and deletes the other two. That is exact because each of those versions is the
//! one this handle's own last commit gave: any write it did not see (a commit of its own
//! whose reply was lost, a renewal or recovery by another handle) changed one, and the
//! commit then conflicts and writes nothing, leaving dissolve to read and release as
//! before; and the commit applies whole or not at all, so no document is released while
//! another stays owned by a group document that is gone. An outcome left unknown is
//! settled by the group document: gone means the commit landed (nothing else deletes it
//! while the lease holds), present means it did not, and it is sent again.
//!
//! [`Steps::release_known`] takes the owner out of every document and deletes the group
//! document concurrently, each expecting the version the memo holds, instead of reading
//! the group document, its list and every owned document first and deleting the group
//! document after the release. That is exact because:
//! - the group document is deleted only at the version the memo holds, whose content
//!   records no transaction, or one this handle decided and settled: no recorded
//!   transaction is left holding a document (one logged since changed that version);
//! - a document is released only at the version the memo holds, which is the one this
//!   handle's last write gave it: nothing the group holds or changed since is released. A
//!   prepare's versions are not noted, so a document a transaction cut before its log
//!   still holds is not released here, and once the group document is gone that log can
//!   never land;
//! - once the group document is gone, what the release missed is released as the full
//!   path releases it (read, then written expecting the version read, a held document
//!   without its next content), with the group's token while the lease runs; a client
//!   that stops in between leaves those documents owned until the lease passes, as one
//!   that stops before dissolving does.

use super::memo::Memo;
use super::protocol::{InFlight, Steps, commit_all};
use super::{KeyGroup, send};
use crate::document::Versioned;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::mapper::layout;
use crate::store::{Commit, DocumentStore, Transaction};
use crate::sync::lock;
use std::collections::BTreeSet;

impl<S: DocumentStore> Steps<'_, S> {
    /// Dissolves the group from the memo (module docs): the owner out of every document of
    /// `owned` and the group document deleted, concurrently. `false` when the memo does not
    /// know all of them, records a transaction this handle has not settled, or the group
    /// document changed since: nothing was deleted then (what was released stays
    /// released), and the full path dissolves the group.
    pub(super) async fn release_known(&self, owned: &BTreeSet<Key>) -> Result<bool> {
        let Some((state, release)) = self.known_release(owned)? else {
            return Ok(false);
        };
        let delete = self
            .token()
            .expect(self.key.clone(), Some(state.version))
            .delete(self.key.clone())
            .delete(layout::key_group_members(self.key));
        let parts = release.by_group();
        let (released, deleted) = futures::join!(
            commit_all(self.mapper, &parts),
            self.mapper.store.commit(&delete)
        );
        let deleted = match deleted {
            Ok(outcome) => outcome == Commit::Committed,
            // The lease passed: the full path releases without the token.
            Err(Error::GroupLost { .. }) => false,
            Err(Error::Backend { .. }) => self.mapper.store.get(self.key).await?.is_none(),
            Err(e) => return Err(e),
        };
        if !deleted {
            return Ok(false);
        }
        if let Some(memo) = self.memo {
            *lock(memo) = Memo::default();
        }
        if !matches!(released, Ok(Commit::Committed)) {
            let owned: Vec<Key> = owned.iter().cloned().collect();
            self.rewrite_owned(&owned, None).await?;
        }
        Ok(true)
    }

    /// The group document as the memo knows it and the release of `owned` at the versions
    /// it knows; `None` when it does not know them all, or the group document records a
    /// transaction this handle has not settled.
    fn known_release(&self, owned: &BTreeSet<Key>) -> Result<Option<(Versioned, Transaction)>> {
        let Some(memo) = self.memo else {
            return Ok(None);
        };
        let memo = lock(memo);
        let Some(state) = memo.state.clone() else {
            return Ok(None);
        };
        if let Some(in_flight) = InFlight::of(self.key, &state.doc)?
            && (in_flight.decided.is_none()
                || memo.settled.as_deref() != Some(in_flight.txn.as_str()))
        {
            return Ok(None);
        }
        Ok(memo
            .release(owned, self.token())
            .map(|release| (state, release)))
    }
}

impl<S: DocumentStore> KeyGroup<'_, S> {
    /// Dissolves the group from its memo on a store that commits across entity groups,
    /// in one commit with the group's token: the owner out of every document it owns and
    /// the group and list documents deleted, each expecting the version the memo holds.
    /// `false` when the memo does not know them all or the commit meets a change (nothing
    /// written then: the full path reads and dissolves). Why it is exact: module docs.
    pub(super) async fn release_known_at_once(&self) -> Result<bool> {
        let mapper = self.mapper;
        let list_key = layout::key_group_members(&self.key);
        let release = {
            let memo = lock(&self.memo);
            let (Some(state), Some(list)) = (&memo.state, memo.versions.get(&list_key)) else {
                return Ok(false);
            };
            let token = Transaction::new().owned_by(self.id.clone());
            let Some(release) = memo.release(&lock(&self.owned), token) else {
                return Ok(false);
            };
            release
                .expect(self.key.clone(), Some(state.version))
                .delete(self.key.clone())
                .expect(list_key.clone(), Some(*list))
                .delete(list_key)
        };
        let gone = |doc: Option<&Versioned>| doc.is_none();
        let released = send(mapper, &release, &self.key, gone).await? == Commit::Committed;
        if released {
            *lock(&self.memo) = Memo::default();
        }
        Ok(released)
    }
}
