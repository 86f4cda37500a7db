//! `update_once`: a change the caller names (`"vote:17:42"`), applied at most once however
//! often, and from however many processes, it is run.
//!
//! Invariant: the commit that folds the change also creates a marker next to each document
//! it changes (`layout::op_marker`), expecting it absent, so every run meets the markers of
//! the runs before it. Markers stay for the entity's life and carry its incarnation. A
//! static shard is read without its write record and written back as values, so the
//! entries other writers recorded there (a save in doubt looks for its own) stay as they
//! were. The argument: `docs/design/exactly-once.md`, "Keyed operations".
//!
//! Across a failover: a run that finds all its markers answers `AlreadyApplied` only after
//! [`DocumentStore::make_durable`] of them (the run that left them may have failed its wait
//! for replicas); a run that writes is covered by its commit's own wait. The argument:
//! the same note, "Acknowledgements across a failover".

use crate::document::{Document, Value};
use crate::entity::{Entity, EntityState};
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::attempt::Attempt;
use crate::mapper::codec::{main_unchanged, malformed, with_property};
use crate::mapper::layout::{self, dynamic_properties, static_properties};
use crate::mapper::write::write_ids::check_same_entity;
use crate::mapper::write::write_ids::has_change;
use crate::store::ownership::system_now_ms;
use crate::store::{DocumentStore, Transaction};
use std::ops::ControlFlow;

/// The outcome of [`Mapper::update_once`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum KeyedOutcome<R> {
    /// This run stored the operation's changes; the closure's value.
    Applied(R),
    /// An earlier run stored them; this one wrote nothing.
    AlreadyApplied,
}

impl<R> KeyedOutcome<R> {
    /// Whether this run stored the changes.
    pub fn is_applied(&self) -> bool {
        matches!(self, KeyedOutcome::Applied(_))
    }
}

/// One document a keyed operation changes, with its marker.
struct Part {
    /// A static shard (fold `changes` into it) or a new dynamic shard (create it).
    target: Target,
    marker: Key,
}

enum Target {
    Static {
        key: Key,
        index: usize,
        change: Value,
    },
    Dynamic {
        key: Key,
        doc: Document,
    },
}

impl<S: DocumentStore> Mapper<S> {
    /// Loads the entity with this id, applies `change`, and stores what it changed in
    /// the sharded properties exactly once for the operation named `op`: a later run
    /// with the same `op`, from this process or any other, finds it applied and writes
    /// nothing ([`KeyedOutcome::AlreadyApplied`]). For votes that count once per user, name the
    /// operation after the user and the target (`"vote:user 17:question 42"`).
    ///
    /// `change` may change only sharded properties: a change to an unsharded field fails
    /// with [`Error::Invalid`] before anything is written (a plain `update` is
    /// last-writer-wins there, which is idempotent by itself). Conflicts retry per the
    /// [`crate::RetryPolicy`]; after an error or a dropped future, running the same
    /// operation again is always safe. See the module docs of `mapper/write/keyed.rs` for the
    /// markers it leaves (kept until the entity is deleted).
    ///
    /// ```
    /// use autoshard::prelude::*;
    /// use autoshard::KeyedOutcome;
    ///
    /// #[autoshard::sharded]
    /// #[derive(Entity, Debug, Clone)]
    /// struct Question {
    ///     #[id]
    ///     id: u64,
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
    /// db.insert(&mut Question::new(42, 0)).await?;
    /// let vote = |q: &mut Question| q.vote_up();
    /// assert_eq!(db.update_once(&42, "vote:17:42", vote).await?, KeyedOutcome::Applied(()));
    /// assert_eq!(db.update_once(&42, "vote:17:42", vote).await?, KeyedOutcome::AlreadyApplied);
    /// assert_eq!(db.load::<Question>(&42).await?.votes, 1);
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(name = "autoshard.update_once", level = "debug", skip_all, fields(kind = E::KIND, key = %E::key_for(&id.to_owned()), attempts = tracing::field::Empty, outcome = tracing::field::Empty))]
    pub async fn update_once<E, R, F>(
        &self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
        op: &str,
        change: F,
    ) -> Result<KeyedOutcome<R>>
    where
        E: Root,
        F: FnOnce(&mut E) -> R + Send,
        R: Send,
    {
        let id = &id.to_owned();
        let _invalidate = self.invalidating(&E::key_for(id));
        let mut entity: E = self.load(id).await?;
        let result = change(&mut entity);
        let main = entity.key();
        let unchanged = main_unchanged(&entity, &main)?;
        if !unchanged {
            entity.to_document().map_err(malformed(&main))?;
            return Err(Error::Invalid(format!(
                "`update_once` of `{main}` (operation `{op}`) changed an unsharded field; \
                 keyed operations change sharded properties only"
            )));
        }
        let parts = parts(&entity, &main, op)?;
        let commits: Vec<Vec<&Part>> = if self.store.cross_group_transactions() {
            vec![parts.iter().collect()]
        } else {
            parts.iter().map(|part| vec![part]).collect()
        };
        let mut applied = false;
        for group in commits.iter().filter(|group| !group.is_empty()) {
            let mut retrying = self.retrying("update once");
            loop {
                let attempt = self.apply_once(&entity, &main, group);
                if let ControlFlow::Break(now) = retrying.attempt(attempt).await? {
                    applied |= now;
                    break;
                }
            }
        }
        Ok(if applied || parts.is_empty() {
            KeyedOutcome::Applied(result)
        } else {
            KeyedOutcome::AlreadyApplied
        })
    }

    /// One attempt: read the main document and each part's document and marker; commit
    /// the parts whose marker is absent, with their markers, in one transaction.
    /// Committed `true` when something was written, `false` when every marker was there.
    async fn apply_once<E: Entity>(
        &self,
        entity: &E,
        main: &Key,
        parts: &[&Part],
    ) -> Result<Attempt<bool>> {
        let mut read = vec![main.clone()];
        for part in parts {
            read.push(part.target.key().clone());
            read.push(part.marker.clone());
        }
        // Without write records: the parts' shards are written back as values, which
        // keeps the records the store holds (keyed writes record no write id there).
        let mut found = self.get_for_write(&read, None, false).await?.into_iter();
        let main_version = check_same_entity(entity, main, found.next().flatten().as_ref())?;
        let mut txn = Transaction::new();
        if self.store.cross_group_transactions() {
            txn = txn.expect(main.clone(), Some(main_version));
        }
        let mut writes_any = false;
        for part in parts {
            let (current, marker) = (found.next().flatten(), found.next().flatten());
            if marker.is_some() {
                continue;
            }
            writes_any = true;
            let mark: Document = [("at".to_owned(), Value::from(system_now_ms()))].into();
            txn = txn
                .expect(part.marker.clone(), None)
                .put(part.marker.clone(), mark);
            match &part.target {
                Target::Static { key, index, change } => {
                    let p = &E::PROPERTIES[*index];
                    let (mut doc, version) = match current {
                        Some(c) => (c.doc, Some(c.version)),
                        None => (Document::new(), None),
                    };
                    let stored = match doc.get(p.stored_as) {
                        Some(stored) => stored.clone(),
                        None => E::neutral_value(*index).map_err(malformed(key))?,
                    };
                    let folded = E::fold_values(*index, &stored, change)
                        .map_err(|e| Error::malformed(key, with_property(e, p.name)))?;
                    doc.insert(p.stored_as.to_owned(), folded);
                    txn = Self::write_back(txn.expect(key.clone(), version), key, doc, false);
                }
                Target::Dynamic { key, doc } => {
                    txn = txn.expect(key.clone(), None).put(key.clone(), doc.clone());
                }
            }
        }
        if !writes_any {
            // Answered from the markers read: the run that left them may have failed
            // after writing (unknown outcome), so they need not be durable yet.
            let markers: Vec<Key> = parts.iter().map(|part| part.marker.clone()).collect();
            self.store.make_durable(&markers).await?;
            return Ok(Attempt::Committed(false));
        }
        Ok(self.commit_attempt(&txn).await?.map(|()| true))
    }
}

impl Target {
    fn key(&self) -> &Key {
        match self {
            Target::Static { key, .. } | Target::Dynamic { key, .. } => key,
        }
    }
}

/// The documents keyed operation `op` changes in `entity` (whose shadows hold its
/// changes), each with its marker.
fn parts<E: Entity>(entity: &E, main: &Key, op: &str) -> Result<Vec<Part>> {
    let change = |index: usize, name: &str| {
        entity
            .shadow_value(index)
            .map_err(|e| Error::malformed(main, with_property(e, name)))
    };
    let incarnation = entity.state().and_then(EntityState::incarnation);
    let mut parts = Vec::new();
    for p in static_properties(entity)
        .into_iter()
        .filter(|p| has_change(entity, p.index))
    {
        // By the count at insert, which never changes: running the operation again meets
        // the marker it left, however the entity was resharded since.
        let key = layout::static_shard(
            main,
            p.property.name,
            op_shard(op, p.property.name, p.layout.base),
        );
        parts.push(Part {
            marker: layout::op_marker(&key, incarnation, op),
            target: Target::Static {
                change: change(p.index, p.property.name)?,
                key,
                index: p.index,
            },
        });
    }
    let mut doc = Document::new();
    for (index, p) in dynamic_properties::<E>().filter(|(i, _)| has_change(entity, *i)) {
        doc.insert(p.stored_as.to_owned(), change(index, p.name)?);
    }
    if !doc.is_empty() {
        // A unique name that is no write id: the marker, not compaction's record of
        // write ids, keeps this change from being applied twice.
        let key = layout::dynamic_shard(main, &format!("op-{}", uuid::Uuid::new_v4().simple()));
        parts.push(Part {
            marker: layout::op_marker(&layout::dynamic_group(main), incarnation, op),
            target: Target::Dynamic { key, doc },
        });
    }
    Ok(parts)
}

/// The shard of property `property` (with `shards` static shards) that keyed operation
/// `op` folds into: fixed by the operation's name, so that running it again, in any
/// process, meets the marker it left. FNV-1a, stable across processes and builds.
fn op_shard(op: &str, property: &str, shards: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in op.bytes().chain([0xff]).chain(property.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    u32::try_from(hash % u64::from(shards.max(1))).unwrap_or(0)
}
