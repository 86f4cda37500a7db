//! `drain`: moving the values of the shards a shrink retired (see `reshard`) into live
//! ones: seal, move, retire, one document per step, each step continuing what is stored.
//! The protocol and the proofs: `docs/design/resharding.md`, "Resharding".

use crate::document::{Document, Value, Versioned};
use crate::entity::{Entity, ShardCount};
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::attempt::Attempt;
use crate::mapper::layout::{self, Seal};
use crate::store::ownership::system_now_ms;
use crate::store::{Commit, DocumentStore, Transaction};
use std::ops::ControlFlow;
use std::time::Duration;

impl<S: DocumentStore> Mapper<S> {
    /// Finishes the shrinks of the entity with this id: seals the shards they retired,
    /// moves their values into live shards, and deletes those sealed longer ago than the
    /// write window (module docs of `reshard`). Every [`Mapper::reshard`] runs it; run it
    /// again (a maintenance task does) after an error or once the window has passed.
    /// Returns how many retired shards are left, sealed and moved, waiting out the
    /// window.
    ///
    /// # Errors
    /// [`Error::NotFound`] when the entity is not stored; [`Error::Contention`] when
    /// concurrent saves outlast the retry policy; store errors. Nothing is lost: a later
    /// `drain` continues where this one stopped.
    ///
    /// # Example
    /// ```
    /// use autoshard::prelude::*;
    /// use std::time::Duration;
    ///
    /// #[autoshard::sharded]
    /// #[derive(Entity, Debug, Clone)]
    /// struct Question {
    ///     #[id]
    ///     id: u64,
    ///     #[shardable(shards = 1, fold = sum)]
    ///     votes: i64,
    /// }
    ///
    /// impl Question {
    ///     #[shard_method]
    ///     fn vote_up(&mut self) {
    ///         self.votes += 1;
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new()).with_write_window(Duration::from_millis(50));
    /// db.insert(&mut Question::new(1, 0)).await?;
    /// db.reshard::<Question>(&1, 8).await?;
    /// db.update(&1, Question::vote_up).await?;
    /// db.reshard::<Question>(&1, 1).await?; // 7 shards sealed, values moved
    /// tokio::time::sleep(Duration::from_millis(100)).await;
    /// assert_eq!(db.drain::<Question>(&1).await?, 0); // and now deleted
    /// assert_eq!(db.load::<Question>(&1).await?.votes, 1);
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(name = "autoshard.drain", level = "debug", skip_all, fields(kind = E::KIND, key = %E::key_for(&id.to_owned()), attempts = tracing::field::Empty, outcome = tracing::field::Empty))]
    pub async fn drain<E: Root>(
        &self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
    ) -> Result<usize> {
        let id = &id.to_owned();
        self.drain_at::<E>(&E::key_for(id)).await
    }

    /// [`Mapper::drain`] of the entity at `main`.
    pub(super) async fn drain_at<E: Entity>(&self, main: &Key) -> Result<usize> {
        let _invalidate = self.invalidating(main);
        let Some(stored) = self.store.get(main).await? else {
            return Err(Error::NotFound { key: main.clone() });
        };
        let Some(counts) = layout::recorded_counts(main, &stored.doc)? else {
            return Ok(0);
        };
        let incarnation = layout::incarnation(&stored.doc).filter(|i| !i.is_empty());
        let keep = self.write_window + self.write_window / 4;
        let mut retire: Vec<(String, u32)> = Vec::new();
        let mut waiting = 0;
        for (property, c) in &counts {
            let Some(index) = E::PROPERTIES.iter().position(|p| p.name == property) else {
                // A property the entity no longer has: its value cannot be folded here.
                waiting += c.retired().len();
                continue;
            };
            let mut through = c.from;
            for r in c.retired() {
                let shard = Shard {
                    main,
                    incarnation,
                    index,
                    name: property,
                    layout: c,
                };
                let sealed_at = self.drain_shard::<E>(&shard, r).await?;
                let expired = sealed_at.is_none_or(|at| elapsed_since(at) >= keep);
                if expired && through == r {
                    through = r + 1;
                } else {
                    waiting += 1;
                }
            }
            if through > c.from {
                retire.push((property.clone(), through));
            }
        }
        if !retire.is_empty() {
            self.retire(main, &retire).await?;
        }
        Ok(waiting)
    }

    /// Seals retired shard `r` and moves its value into a live shard (module docs, steps
    /// 1 and 2), each step only if not done yet; when it was sealed (`None`: it is gone).
    async fn drain_shard<E: Entity>(&self, shard: &Shard<'_>, r: u32) -> Result<Option<u64>> {
        let key = layout::static_shard(shard.main, shard.name, r);
        let mut retrying = self.retrying("drain shard");
        loop {
            let attempt = self.drain_attempt::<E>(shard, &key, r);
            if let ControlFlow::Break(sealed_at) = retrying.attempt(attempt).await? {
                return Ok(sealed_at);
            }
        }
    }

    /// One attempt of [`Mapper::drain_shard`]: each step that commits leads to the next;
    /// a conflict ends the attempt.
    async fn drain_attempt<E: Entity>(
        &self,
        shard: &Shard<'_>,
        key: &Key,
        r: u32,
    ) -> Result<Attempt<Option<u64>>> {
        loop {
            let Some(retired) = self.store.get(key).await? else {
                return Ok(Attempt::Committed(None));
            };
            let Some(seal) = layout::seal_of(&retired.doc) else {
                let seal = Seal {
                    into: shard.target(r),
                    at_ms: system_now_ms(),
                };
                tracing::debug!(key = %key, into = seal.into, "drain: seal");
                match self.reseal(key, retired, seal).await? {
                    Attempt::Committed(()) => continue,
                    Attempt::Conflict(key) => return Ok(Attempt::Conflict(key)),
                }
            };
            let target = layout::static_shard(shard.main, shard.name, seal.into);
            let found = self.store.get(&target).await?;
            if let Some(found) = &found
                && layout::moved_into(&found.doc).any(|(name, _)| name == key.name())
            {
                return Ok(Attempt::Committed(Some(seal.at_ms)));
            }
            let usable = match &found {
                Some(found) => layout::seal_of(&found.doc).is_none(),
                None => shard.layout.is_live(seal.into) || seal.into < shard.layout.base,
            };
            if !usable {
                let seal = Seal {
                    into: shard.target(r),
                    ..seal
                };
                match self.reseal(key, retired, seal).await? {
                    Attempt::Committed(()) => continue,
                    Attempt::Conflict(key) => return Ok(Attempt::Conflict(key)),
                }
            }
            let doc = self.moved_into_target::<E>(shard, &retired.doc, found, key, seal)?;
            tracing::debug!(key = %key, into = %target, "drain: move");
            let version = doc.1;
            let txn = Transaction::new()
                .expect(target.clone(), version)
                .put(target, doc.0);
            return Ok(self.commit_attempt(&txn).await?.map(|()| Some(seal.at_ms)));
        }
    }

    /// The move target `found` (at shard `seal.into`) with the value of the sealed shard
    /// `retired` at `key` folded in and `key` named as moved, and the version to expect.
    fn moved_into_target<E: Entity>(
        &self,
        shard: &Shard<'_>,
        retired: &Document,
        found: Option<Versioned>,
        key: &Key,
        seal: Seal,
    ) -> Result<(Document, Option<crate::Version>)> {
        let (mut doc, version) = if let Some(found) = found {
            (found.doc, Some(found.version))
        } else {
            let mut doc = Document::new();
            if let Some(incarnation) = shard.incarnation {
                doc.insert(layout::INCARNATION.to_owned(), incarnation.into());
            }
            (doc, None)
        };
        let p = &E::PROPERTIES[shard.index];
        if let Some(value) = retired.get(p.stored_as) {
            // A value that does not fold is reported with the retired shard's key.
            crate::mapper::codec::fold_value::<E>(key, &mut doc, shard.index, value)?;
        }
        self.name_moved(&mut doc, key.name(), seal.at_ms, shard.layout);
        Ok((doc, version))
    }

    /// Writes `seal` into the retired shard `retired` at `key`, expecting its version.
    async fn reseal(&self, key: &Key, retired: Versioned, seal: Seal) -> Result<Attempt<()>> {
        let mut doc = retired.doc;
        doc.insert(layout::SEALED.to_owned(), layout::seal_value(seal));
        doc.insert(
            layout::INCARNATION.to_owned(),
            layout::SEALED_INCARNATION.into(),
        );
        let txn = Transaction::new()
            .expect(key.clone(), Some(retired.version))
            .put(key.clone(), doc);
        self.commit_attempt(&txn).await
    }

    /// Names shard `name` (sealed at `sealed_at`) in the moved list of `doc`, dropping
    /// the names of shards deleted two write windows ago.
    fn name_moved(&self, doc: &mut Document, name: &str, sealed_at: u64, c: &ShardCount) {
        let forget = self.write_window * 2 + self.write_window / 4;
        let mut moved: serde_json::Map<String, Value> = layout::moved_into(doc)
            .filter(|&(other, at)| {
                let deleted = layout::shard_name_index(other).is_some_and(|i| !c.is_read(i));
                !(deleted && elapsed_since(at) >= forget)
            })
            .map(|(other, at)| (other.to_owned(), at.into()))
            .collect();
        moved.insert(name.to_owned(), sealed_at.into());
        doc.insert(layout::MOVED.to_owned(), Value::Object(moved));
    }

    /// Raises `from` of each property in `retire` to the index given (module docs, step
    /// 3), then deletes the sealed shards below it.
    async fn retire(&self, main: &Key, retire: &[(String, u32)]) -> Result<()> {
        let mut retrying = self.retrying("retire shards");
        loop {
            let attempt = async {
                let Some(stored) = self.store.get(main).await? else {
                    return Err(Error::NotFound { key: main.clone() });
                };
                let Some(mut counts) = layout::recorded_counts(main, &stored.doc)? else {
                    return Ok(Attempt::Committed(()));
                };
                for (property, through) in retire {
                    if let Some((_, c)) = counts.iter_mut().find(|(p, _)| p == property) {
                        c.from = c.from.max((*through).min(c.lo()));
                    }
                }
                let mut doc = stored.doc;
                doc.insert(layout::SHARDS.to_owned(), layout::counts_value(&counts));
                let txn = Transaction::new()
                    .expect(main.clone(), Some(stored.version))
                    .put(main.clone(), doc);
                self.commit_attempt(&txn).await
            };
            if let ControlFlow::Break(()) = retrying.attempt(attempt).await? {
                break;
            }
        }
        // Every shard no longer read (this pass's, and any an interrupted pass left).
        let Some(stored) = self.store.get(main).await? else {
            return Ok(());
        };
        let Some(counts) = layout::recorded_counts(main, &stored.doc)? else {
            return Ok(());
        };
        let mut gone: Vec<Key> = self
            .scan_all(layout::static_shards_scan(main))
            .await?
            .into_iter()
            .map(|(key, _)| key)
            .filter(|key| {
                layout::static_shard_of(key).is_some_and(|(property, index)| {
                    layout::count_of(&counts, property)
                        .is_some_and(|c| index >= c.base && index < c.from && index < c.next)
                })
            })
            .collect();
        gone.sort_by_key(|key| layout::static_shard_of(key).map(|(_, index)| index));
        for key in gone {
            tracing::debug!(key = %key, "drain: delete");
            match self.store.commit(&Transaction::new().delete(key)).await? {
                Commit::Committed | Commit::Conflict { .. } => {}
            }
        }
        Ok(())
    }
}

/// One property of one entity being drained.
struct Shard<'a> {
    main: &'a Key,
    incarnation: Option<&'a str>,
    /// The property's index in `E::PROPERTIES`.
    index: usize,
    name: &'a str,
    layout: &'a ShardCount,
}

impl Shard<'_> {
    /// The shard a retired shard `r` moves into: a base shard saves no longer use when
    /// there is one (no save conflicts with the move), else a live one.
    fn target(&self, r: u32) -> u32 {
        let c = self.layout;
        if c.shards < c.base {
            c.shards + r % (c.base - c.shards)
        } else {
            c.live_index(r % c.shards)
        }
    }
}

/// How long ago `at_ms` (milliseconds since the Unix epoch) was.
fn elapsed_since(at_ms: u64) -> Duration {
    Duration::from_millis(system_now_ms().saturating_sub(at_ms))
}
