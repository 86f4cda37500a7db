//! `insert` and `delete`: writing and removing all documents of an entity.
//!
//! Order matters when a store fails halfway: shards are written before the main document
//! and deleted after it, so a half-done insert or delete leaves only orphan shards. Orphans
//! are invisible (`load` needs the main document) and the next `insert` of that id
//! overwrites them.
//!
//! On a store without cross-group transactions (a Redis Cluster) an insert writes each
//! shard document (and deletes each leftover) in a commit of its own, and only while the
//! main document is absent: it reads the document, *then* the main document, and commits
//! expecting the version it read. That keeps a racing insert of the same id, however
//! late, from touching an entity that exists: every write to an entity's shards (a vote,
//! a compaction) comes after its main document was written, so a shard read before such
//! a write fails the commit, and a shard read after it is followed by a read of the main
//! document, which finds it. Two inserts racing before either wrote its main document
//! may each write some shards; one main document wins, the other insert fails with
//! `AlreadyExists`, and the entity's start values are one or the other's (a shard
//! stamped with the loser's incarnation takes later votes by compare-and-set instead of
//! merges).

use crate::document::{Document, Value};
use crate::entity::Entity;
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::codec::malformed;
use crate::mapper::layout::{self, dynamic_properties, static_annotated, static_shard_keys};
use crate::store::{Commit, DocumentStore, Scan, Transaction};

impl<S: DocumentStore> Mapper<S> {
    /// Stores a new entity. A child of an entity group (`#[entity(parent = ...)]`) goes to
    /// a random sub-group of its root, which must exist, in an optimistic commit retried per
    /// the [`crate::RetryPolicy`] ([`Error::Contention`] when retries run out; see
    /// [`crate::group`]). Otherwise:
    ///
    /// Its main document (fails with [`Error::AlreadyExists`] when
    /// the id is taken) and every static shard document, shard 0 holding each sharded
    /// property's current value and the others its neutral value. Dynamic properties
    /// start in the compacted dynamic shard document, which holds their current values.
    ///
    /// Then every shadow is reset and the main document recorded, since the stored state
    /// now includes them: a vote made before `insert` is not saved a second time later.
    ///
    /// On a store with cross-group transactions all documents are written in one commit.
    /// Otherwise the shards are written first and the main document last, so a failure
    /// leaves no visible half entity; each shard only while the main document is absent
    /// (module docs), so an insert that loses a race never changes the entity that won,
    /// and fails with `AlreadyExists`. Of two inserts racing before either finished, the
    /// entity's start values are one or the other's.
    ///
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[autoshard::sharded]
    /// #[derive(Entity, Debug, Clone)]
    /// struct Question {
    ///     #[id]
    ///     id: u64,
    ///     text: String,
    ///     #[shardable(neutral = 0, shards = 10)]
    ///     votes: i64,
    /// }
    ///
    /// impl Question {
    ///     #[shard_method]
    ///     fn vote_up(&mut self) {
    ///         self.votes += 1;
    ///     }
    ///
    ///     #[shard_fold]
    ///     fn fold_votes(a: i64, b: i64) -> i64 {
    ///         a + b
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Question::new(1, "First?".into(), 0)).await?;
    /// let again = db.insert(&mut Question::new(1, "Again?".into(), 0)).await;
    /// assert!(matches!(again, Err(Error::AlreadyExists { .. })));
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(name = "autoshard.insert", level = "debug", skip_all, fields(kind = E::KIND, key = %entity.key(), attempts = tracing::field::Empty, outcome = tracing::field::Empty))]
    pub async fn insert<E: Entity>(&self, entity: &mut E) -> Result<()> {
        if let Some(root) = entity.parent_key() {
            // A child of an entity group: placed in a random sub-group of its root.
            return self.insert_child(entity, root).await;
        }
        let main = entity.key();
        let _invalidate = self.invalidating(&main);
        let main_doc = entity.to_document().map_err(malformed(&main))?;
        // A sharded entity gets a fresh incarnation (see `layout::INCARNATION`), recorded
        // in its main document and its static shards.
        let incarnation = entity
            .state()
            .is_some()
            .then(|| uuid::Uuid::new_v4().simple().to_string());
        let shards = shard_documents(entity, &main, incarnation.as_deref())?;
        tracing::debug!(key = %main, shards = shards.len(), "insert");
        let mut stored_main = main_doc.clone();
        if let Some(incarnation) = &incarnation {
            stored_main.insert(layout::INCARNATION.to_owned(), incarnation.clone().into());
        }
        // The shard layout the annotation gives, which from now on belongs to the entity.
        let counts = incarnation
            .is_some()
            .then(layout::initial_counts::<E>)
            .filter(|counts| !counts.is_empty());
        if let Some(counts) = &counts {
            stored_main.insert(layout::SHARDS.to_owned(), layout::counts_value(counts));
        }
        if incarnation.is_some() {
            let sharded = E::PROPERTIES.iter().map(|p| p.name.into()).collect();
            stored_main.insert(layout::SHARDED.to_owned(), Value::Array(sharded));
        }
        // Dynamic shard documents an interrupted delete left behind belong to no entity:
        // the insert deletes them, so the new entity does not count them.
        let leftovers = if E::PROPERTIES.is_empty() {
            Vec::new()
        } else {
            let compacted = layout::compacted(&main);
            let mut found = self.scan_all(layout::dynamic_shards_scan(&main)).await?;
            found.retain(|(key, _)| *key != compacted);
            found
        };

        if self.store.cross_group_transactions() {
            let mut txn = Transaction::new().expect(main.clone(), None);
            for (key, _) in leftovers {
                txn = txn.delete(key);
            }
            for (key, doc) in shards {
                txn = txn.put(key, doc);
            }
            txn = txn.put(main.clone(), stored_main);
            match self.store.commit(&txn).await? {
                Commit::Committed => {}
                Commit::Conflict { .. } => return Err(Error::AlreadyExists { key: main }),
            }
        } else {
            if self.store.get(&main).await?.is_some() {
                return Err(Error::AlreadyExists { key: main });
            }
            // Each document on its own (module docs), all at once.
            let writes = leftovers
                .into_iter()
                .map(|(key, _)| (key, None))
                .chain(shards.into_iter().map(|(key, doc)| (key, Some(doc))));
            let main = &main;
            futures::future::try_join_all(
                writes.map(
                    |(key, doc)| async move { self.write_while_absent(main, &key, doc).await },
                ),
            )
            .await?;
            self.store.insert(main, stored_main).await?;
        }

        for index in 0..E::PROPERTIES.len() {
            entity.reset_shadow(index);
        }
        if let Some(state) = entity.state_mut() {
            state.set_saved_main(main_doc);
            state.set_incarnation(incarnation);
            state.set_shard_counts(counts.map(std::sync::Arc::new));
        }
        Ok(())
    }

    /// Stores a new entity unless one with its id exists: [`Mapper::insert`], answering
    /// `true` when it stored `entity`, `false` (and stores nothing) when the id was taken,
    /// also by a concurrent call. Of concurrent calls for one id, exactly one answers
    /// `true`. A set-up step that runs again is safe with it.
    ///
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[autoshard::sharded]
    /// #[derive(Entity, Debug, Clone)]
    /// struct Question {
    ///     #[id]
    ///     id: u64,
    ///     text: String,
    ///     #[shardable(shards = 10, fold = sum)]
    ///     votes: i64,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// assert!(db.insert_if_absent(&mut Question::new(1, "First?".into(), 0)).await?);
    /// // A second run of the same set-up: the question is there already.
    /// assert!(!db.insert_if_absent(&mut Question::new(1, "First?".into(), 0)).await?);
    /// assert_eq!(db.load::<Question>(&1).await?.text, "First?");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn insert_if_absent<E: Entity>(&self, entity: &mut E) -> Result<bool> {
        // `insert` answers `AlreadyExists` only for the entity's own id.
        match self.insert(entity).await {
            Ok(()) => Ok(true),
            Err(Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Writes `doc` at `key` (deletes it for `None`) for an insert of the entity whose
    /// main document is `main`, on a store without cross-group transactions: reads the
    /// document, then the main document, and commits expecting the version read, only
    /// while the main document is absent (module docs); `AlreadyExists` once it is there.
    async fn write_while_absent(&self, main: &Key, key: &Key, doc: Option<Document>) -> Result<()> {
        let written = self
            .until_committed_uncounted("insert", || async {
                let seen = self.store.get(key).await?.map(|found| found.version);
                if self.store.get(main).await?.is_some() {
                    return Err(Error::AlreadyExists { key: main.clone() });
                }
                let txn = Transaction::new().expect(key.clone(), seen);
                let txn = match &doc {
                    Some(doc) => txn.put(key.clone(), doc.clone()),
                    None => txn.delete(key.clone()),
                };
                self.commit_attempt(&txn).await
            })
            .await;
        match written {
            // Racing inserts that kept taking the document: one of them may have finished.
            Err(Error::Contention { .. }) if self.store.get(main).await?.is_some() => {
                Err(Error::AlreadyExists { key: main.clone() })
            }
            written => written,
        }
    }

    /// Deletes the entity with this id: its main document, then its shard documents and
    /// the markers of its keyed operations ([`Mapper::update_once`]).
    /// Answers whether the main document was there. The children of an entity-group root
    /// stay; [`Mapper::delete_group`] deletes a root with its children.
    #[tracing::instrument(name = "autoshard.delete", level = "debug", skip_all, fields(kind = E::KIND, key = %E::key_for(&id.to_owned()), attempts = tracing::field::Empty, outcome = tracing::field::Empty))]
    pub async fn delete<E: Root>(
        &self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
    ) -> Result<bool> {
        let id = &id.to_owned();
        let main = E::key_for(id);
        let _invalidate = self.invalidating(&main);
        tracing::debug!(key = %main, "delete");
        let existed = self.store.delete(&main).await?;
        if !E::PROPERTIES.is_empty() {
            // The compacted document first: every dynamic save expects it, so none can
            // add a shard document after it is gone. Then the dynamic shards (also of a
            // property that was dynamic before a redeploy) and the keyed operations'
            // markers.
            self.store.delete(&layout::compacted(&main)).await?;
            self.delete_all(layout::dynamic_shards_scan(&main)).await?;
            self.delete_all(layout::op_markers_scan(&layout::dynamic_group(&main)))
                .await?;
        }
        // Every static shard of every layout the entity had: the annotation's, and what
        // a scan finds besides (a count recorded above it, an older annotation's).
        let mut shards = static_shard_keys::<E>(&main);
        if !E::PROPERTIES.is_empty() {
            for (key, _) in self.scan_all(layout::static_shards_scan(&main)).await? {
                if !shards.contains(&key) {
                    shards.push(key);
                }
            }
        }
        for key in shards {
            tracing::trace!(key = %key, "delete: shard");
            self.store.delete(&key).await?;
            self.delete_all(layout::op_markers_scan(&key)).await?;
        }
        Ok(existed)
    }

    /// Deletes every document `scan` lists.
    async fn delete_all(&self, scan: Scan) -> Result<()> {
        let mut pages = self.pages(scan);
        while let Some(page) = pages.next().await? {
            for (key, _) in page {
                self.store.delete(&key).await?;
            }
        }
        Ok(())
    }
}

/// The static shard documents of a new entity, and its compacted dynamic shard holding
/// the start value of each dynamic property. The compacted document is written for every
/// sharded entity, even when empty (a static-only entity), so that it overwrites one left
/// behind by an interrupted delete.
fn shard_documents<E: Entity>(
    entity: &E,
    main: &Key,
    incarnation: Option<&str>,
) -> Result<Vec<(Key, Document)>> {
    let mut docs = static_shard_documents(entity, main, incarnation)?;
    if !E::PROPERTIES.is_empty() {
        let key = layout::compacted(main);
        let mut doc = Document::new();
        for (index, p) in dynamic_properties::<E>() {
            let value = entity.aggregate_value(index).map_err(malformed(&key))?;
            if value != E::neutral_value(index).map_err(malformed(&key))? {
                doc.insert(p.stored_as.to_owned(), value);
            }
        }
        docs.push((key, doc));
    }
    Ok(docs)
}

fn static_shard_documents<E: Entity>(
    entity: &E,
    main: &Key,
    incarnation: Option<&str>,
) -> Result<Vec<(Key, Document)>> {
    let mut docs = Vec::new();
    for p in static_annotated::<E>() {
        for shard in 0..p.layout.shards {
            let key = layout::static_shard(main, p.property.name, shard);
            let value = if shard == 0 {
                entity.aggregate_value(p.index)
            } else {
                E::neutral_value(p.index)
            }
            .map_err(malformed(&key))?;
            let mut doc: Document = [(p.property.stored_as.to_owned(), value)].into();
            if let Some(incarnation) = incarnation {
                doc.insert(layout::INCARNATION.to_owned(), incarnation.into());
            }
            docs.push((key, doc));
        }
    }
    Ok(docs)
}
