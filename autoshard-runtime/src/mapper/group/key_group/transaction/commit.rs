//! [`GroupTransaction::commit`]: the commit of what a transaction saved, on each shape of
//! store and holder (a group's commit in one step or in the grouping protocol's steps, a
//! one-shot commit with or without a group), and what it leaves in the group's memo.

use super::super::holder::Holder;
use super::super::one_shot;
use super::super::one_shot_steps::{self, OneShot};
use super::super::{KeyGroup, group_documents, in_steps, reads};
use super::GroupTransaction;
use crate::document::{Version, Versioned};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::mapper::layout;
use crate::mapper::write::write_ids;
use crate::store::ownership::Owner;
use crate::store::{Commit, DocumentStore, Transaction, WriteId};
use crate::sync::lock;

impl<'m, S: DocumentStore> GroupTransaction<'_, 'm, S> {
    /// Commits every change saved in this transaction, if no document it read changed:
    /// atomically, exactly once (a commit whose reply is lost is checked and sent again
    /// under the same write id). A one-shot transaction
    /// ([`KeyGroupBuilder::once`](super::super::KeyGroupBuilder::once)) commits as that method
    /// says; one that formed a group (waiting) then dissolves it, also after an error. A later transaction of a group reads its members
    /// as the group's last commit left them, from the group's handle; if it saved nothing,
    /// its commit still checks that what it read is the store's state (one commit that
    /// writes nothing).
    ///
    /// # Errors
    /// [`Error::Contention`] when a document read changed (in a group, only a transaction
    /// of the same group through another handle, or a writer after the lease passed, can
    /// do that; in a one-shot transaction without a group, any writer): nothing was
    /// written; [`Error::GroupLost`] when the
    /// lease passed: nothing was written; [`Error::Grouped`] when a one-shot transaction
    /// without a group meets a member a live group owns: nothing was written;
    /// [`Error::Backend`] when the outcome stayed unknown after the resends.
    pub async fn commit(mut self) -> Result<()> {
        let outcome = self.commit_changes().await;
        if let Holder::Once(group) = self.holder {
            let dissolved = group.dissolve().await;
            outcome?;
            return dissolved;
        }
        // A one-shot transaction's group dissolves: nothing reads its memo.
        if let (Some(owner), Holder::Shared { .. }) = (outcome?, &self.holder) {
            self.note_committed(&owner);
        }
        Ok(())
    }

    /// `txn` expecting the documents this transaction read, at the versions read, for a
    /// commit of `group` whose group document was read as `stored`.
    ///
    /// A group document read in one atomic lookup with the first members stands for each
    /// document read that the group owned with a lease at least as long as its own: only
    /// the group's writes change it, each rewriting the group document, under a token
    /// refused once the lease has passed (renewed only before, by such a rewrite). The
    /// rest is expected as read (absent documents, ones stamped with a shorter lease by a
    /// handle that missed a renewal's answer, and all when the group document was read
    /// beside the members: a dropped commit may land between those reads), but the one
    /// no writer changes, left alone by the group (`Member::owned`) and so never expected.
    fn expect_reads(
        &self,
        mut txn: Transaction,
        group: &KeyGroup<'m, S>,
        stored: &Versioned,
    ) -> Transaction {
        let until = Owner::of(&stored.doc).map_or(u64::MAX, |o| o.until_ms);
        let ours = |key: &Key| {
            let doc = self.read.doc(key);
            doc.and_then(Owner::of).filter(|o| *o.group == *group.id)
        };
        let owned_read = |key: &Key| ours(key).is_some_and(|o| o.until_ms >= until);
        let claimed = lock(&group.owned);
        let left_alone = |key: &Key, version: &Option<Version>| {
            version.is_some() && !claimed.contains(key) && ours(key).is_none()
        };
        for (key, version) in self.read.versions() {
            if !(left_alone(key, version) || self.reads_follow_state && owned_read(key)) {
                txn = txn.expect(key.clone(), *version);
            }
        }
        txn
    }

    /// For a transaction that writes nothing and took its members from the group's memo:
    /// a commit that writes nothing and expects what it read (where the store commits
    /// across entity groups) and the group document, so that its reads were the store's
    /// state at one instant, as a read of the store would have been.
    async fn check_reads(&self) -> Result<()> {
        let (Some(group), Some(stored)) = (self.holder.group(), &self.state) else {
            return Ok(());
        };
        if !self.from_memo {
            return Ok(());
        }
        let txn = Transaction::new().owned_by(group.id.clone());
        // Where a commit stays within one entity group, the group document alone: under
        // the group's token, it commits only while the lease holds, when nothing but the
        // group's transactions (each rewriting that document) changes its members.
        let txn = if group.mapper.store.cross_group_transactions() {
            self.expect_reads(txn, group, stored)
        } else {
            txn
        };
        let txn = txn.expect(group.key.clone(), Some(stored.version));
        match group.mapper.store.commit(&txn).await? {
            Commit::Committed => Ok(()),
            Commit::Conflict { key } => Err(Error::Contention { key, attempts: 1 }),
        }
    }

    /// Notes in the group's memo the members this transaction read as its commit left
    /// them (`memo.rs`), handing over what it read and wrote; `owner`: the group as the
    /// commit's writes name it.
    fn note_committed(&mut self, owner: &Owner) {
        let found = std::mem::take(&mut self.found);
        let mut writes = std::mem::take(&mut self.writes);
        // The loads' snapshots are the memo's now (`found`), not copies.
        self.read.release_snapshots();
        let Some(group) = self.holder.group() else {
            return;
        };
        if !group.mapper.store.cross_group_transactions() {
            // Each document as its settling wrote it, at the version the settling got.
            for next in writes.values_mut() {
                *next = super::super::committed_content(std::mem::take(next), owner);
            }
        }
        lock(&group.memo).transaction_committed(found, writes);
    }

    /// The commit of a one-shot transaction without a group on a store whose commits
    /// stay within one entity group (`one_shot_steps.rs`). The members loaded leave the
    /// read cache; when a document read changed, they count as contended for a while
    /// (`one_shot::Contended`).
    async fn commit_in_steps(&self) -> Result<()> {
        let Holder::Ungrouped {
            mapper,
            members,
            lease,
            ..
        } = &self.holder
        else {
            return Err(Error::backend(
                "one-shot commit",
                "a transaction of a group",
            ));
        };
        let _invalidate: Vec<_> = self
            .loaded
            .keys()
            .map(|main| mapper.invalidating(main))
            .collect();
        let one_shot = OneShot {
            members,
            lease: *lease,
            read: &self.read,
            writes: &self.writes,
        };
        let answer = one_shot_steps::commit(mapper, one_shot).await;
        if matches!(answer, Err(Error::Contention { .. })) {
            for main in self.loaded.keys() {
                mapper.contended.insert(main.clone(), ());
            }
        }
        answer
    }

    /// Commits the changes; the group as the writes name it when the memo is to note them
    /// (`note_committed`).
    async fn commit_changes(&self) -> Result<Option<Owner>> {
        if self.writes.is_empty() {
            return self.check_reads().await.map(|()| None);
        }
        let Some(group) = self.holder.group() else {
            let mapper = self.holder.mapper();
            if !mapper.store.cross_group_transactions() {
                return self.commit_in_steps().await.map(|()| None);
            }
            return one_shot::commit(
                mapper,
                self.read.versions(),
                &self.writes,
                self.loaded.keys(),
            )
            .await
            .map(|()| None);
        };
        // The group document and the members it loaded (the only ones it writes) may
        // change now: the memo holds them again once the commit is told.
        lock(&group.memo).sending(self.loaded.keys(), self.writes.keys());
        let mapper = group.mapper;
        let stored = match &self.state {
            Some(state) => state.clone(),
            None => reads::group_document(group).await?,
        };
        let mut writer = group.writers.take();
        let write: WriteId = writer.begin(mapper.write_window);
        let mut state = stored.doc.clone();
        write_ids::record(&mut state, &write);
        let group_owner = Owner {
            group: group.id.to_string(),
            until_ms: group.until_ms(),
            txn: None,
        };
        // The documents the transaction creates: the group owns them once it commits, and
        // the list document is rewritten (only then) to name them.
        let (fresh, list) = {
            let owned = lock(&group.owned);
            let fresh: Vec<Key> = self
                .writes
                .keys()
                .filter(|k| !owned.contains(*k))
                .cloned()
                .collect();
            let list = (!fresh.is_empty()).then(|| {
                let all = owned.iter().chain(&fresh).cloned().collect();
                group_documents(&group.members, &all, &group_owner).1
            });
            (fresh, list)
        };
        let _invalidate: Vec<_> = self
            .loaded
            .keys()
            .map(|main| mapper.invalidating(main))
            .collect();
        let landed = |doc: Option<&Versioned>| write_ids::applied(doc.map(|d| &d.doc), &write);
        let answer = if mapper.store.cross_group_transactions() {
            let mut txn = self.expect_reads(
                Transaction::new().owned_by(group.id.clone()),
                group,
                &stored,
            );
            for (key, doc) in &self.writes {
                txn = txn.put(key.clone(), doc.clone());
            }
            txn = txn
                .expect(group.key.clone(), Some(stored.version))
                .put(group.key.clone(), state);
            if let Some(list) = list {
                txn = txn.put(layout::key_group_members(&group.key), list);
            }
            group.send_noted(&txn, landed).await
        } else {
            let current = self
                .writes
                .keys()
                .map(|key| (key, (self.read.version(key), self.read.doc(key))))
                .collect();
            let txn_id = write_ids::dynamic_name(&write);
            let changes = in_steps::Changes {
                owner: &group_owner,
                stored: &stored,
                state,
                writes: &self.writes,
                current: &current,
                txn_id: &txn_id,
                list,
            };
            in_steps::commit_in_steps(&group.steps(), changes, landed)
                .await
                .map(|()| Commit::Committed)
        };
        if !matches!(answer, Err(Error::Backend { .. })) {
            writer.settle();
        }
        match answer? {
            Commit::Committed => {
                lock(&group.owned).extend(fresh);
                Ok(Some(group_owner))
            }
            Commit::Conflict { key } => Err(Error::Contention { key, attempts: 1 }),
        }
    }
}
