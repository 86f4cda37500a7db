//! Reads of many entities of one kind (`load_many`), and of one sharded property alone
//! (`aggregate`, `aggregates`): the documents of every entity not in the read cache in
//! one `get_many` (one round trip per slot on a cluster), each entity checked as a
//! `load` checks its first read; an entity whose read needs more (dynamic shards, a
//! layout the annotation does not cover, a reshard in progress) is read as `load` reads
//! it.

use crate::document::Versioned;
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::read::cache::Hit;
use crate::mapper::read::cache::from_hit;
use crate::mapper::read::load::{answers, first_read, one_read_snapshot};
use crate::mapper::read::snapshot::{Snapshot, assemble};
use crate::store::{DocumentStore, Found, Lookup};
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// One entity as `load_many` and `aggregates` find it.
enum Loaded {
    /// From the read cache.
    Cached(Hit),
    /// Read now.
    Read(Arc<Snapshot>),
}

impl<S: DocumentStore> Mapper<S> {
    /// Loads the entities with these ids, in order: `None` for an id with no entity.
    /// Entities in the read cache ([`Mapper::with_read_cache`]) come from there; the
    /// others are read together, their documents in one `get_many` where their kind
    /// has static shards only (one round trip per entity group the store needs: one on a
    /// standalone server, one per slot on a cluster). Each entity is what
    /// [`Mapper::load`] would return for it; the entities are not one snapshot together.
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
    /// db.insert(&mut Question::new(1, "One?".into(), 3)).await?;
    /// db.insert(&mut Question::new(2, "Two?".into(), 5)).await?;
    /// let questions = db.load_many::<Question>(&[2, 7, 1]).await?;
    /// let votes: Vec<Option<i64>> = questions.iter().map(|q| q.as_ref().map(|q| q.votes)).collect();
    /// assert_eq!(votes, [Some(5), None, Some(3)]);
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(name = "autoshard.load_many", level = "debug", skip_all, fields(kind = E::KIND, entities = ids.len(), attempts = tracing::field::Empty, outcome = tracing::field::Empty))]
    pub async fn load_many<E: Root>(&self, ids: &[E::Id]) -> Result<Vec<Option<E>>> {
        let mains: Vec<Key> = ids.iter().map(E::key_for).collect();
        let snapshots = self.snapshots::<E>(&mains).await?;
        let mut entities = Vec::with_capacity(ids.len());
        for ((id, main), snapshot) in ids.iter().zip(&mains).zip(snapshots) {
            let entity = match snapshot {
                Loaded::Cached(hit) => from_hit::<E>(id, main, &hit),
                Loaded::Read(found) => assemble::<E>(id, main, &found),
            };
            match entity {
                Ok(entity) => entities.push(Some(entity)),
                Err(Error::NotFound { .. }) => entities.push(None),
                Err(e) => return Err(e),
            }
        }
        Ok(entities)
    }

    /// The value of the sharded property `property` (its Rust field name) of the entity
    /// with this id: the fold of its shards, decoded as `T`, without decoding the rest of
    /// the entity. The same value [`Mapper::load`] gives the field, from the same
    /// reads (and the read cache, when the mapper has one).
    ///
    /// Errors: [`Error::Invalid`] when `E` has no sharded property `property`;
    /// [`Error::NotFound`] when there is no such entity; [`Error::Malformed`] when a
    /// shard does not decode as `T`.
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
    /// db.insert(&mut Question::new(1, "Votes?".into(), 41)).await?;
    /// let votes: i64 = db.aggregate::<Question, _>(&1, "votes").await?;
    /// assert_eq!(votes, 41);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn aggregate<E: Root, T: DeserializeOwned>(
        &self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
        property: &str,
    ) -> Result<T> {
        let id = &id.to_owned();
        let mut values = self
            .aggregates::<E, T>(std::slice::from_ref(id), property)
            .await?;
        values.pop().flatten().ok_or_else(|| Error::NotFound {
            key: E::key_for(id),
        })
    }

    /// [`Mapper::aggregate`] for many entities of one kind, read as
    /// [`Mapper::load_many`] reads them: in order, `None` for an id with no entity.
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
    /// for id in 1..=3 {
    ///     db.insert(&mut Question::new(id, "Votes?".into(), id as i64 * 10)).await?;
    /// }
    /// let board: Vec<Option<i64>> = db.aggregates::<Question, _>(&[3, 1, 2, 4], "votes").await?;
    /// assert_eq!(board, [Some(30), Some(10), Some(20), None]);
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(name = "autoshard.aggregates", level = "debug", skip_all, fields(kind = E::KIND, entities = ids.len(), attempts = tracing::field::Empty, outcome = tracing::field::Empty))]
    pub async fn aggregates<E: Root, T: DeserializeOwned>(
        &self,
        ids: &[E::Id],
        property: &str,
    ) -> Result<Vec<Option<T>>> {
        let Some(index) = E::PROPERTIES.iter().position(|p| p.name == property) else {
            return Err(Error::Invalid(format!(
                "`{}` has no sharded property `{property}`",
                E::KIND
            )));
        };
        let mains: Vec<Key> = ids.iter().map(E::key_for).collect();
        let snapshots = self.snapshots::<E>(&mains).await?;
        let mut values = Vec::with_capacity(ids.len());
        for (main, snapshot) in mains.iter().zip(snapshots) {
            let value = match snapshot {
                Loaded::Cached(mut hit) => match hit.main() {
                    Some(_) => Some(hit.values.swap_remove(index)),
                    None => None,
                },
                Loaded::Read(found) => {
                    let folding = found.folding(main, &[])?.ok_or_else(|| {
                        Error::backend("aggregates", "a snapshot tells all it holds")
                    })?;
                    match folding.main {
                        Some(_) => Some(folding.values::<E>(main)?.swap_remove(index)),
                        None => None,
                    }
                }
            };
            let Some(value) = value else {
                values.push(None);
                continue;
            };
            let name = E::PROPERTIES[index].name;
            let decoded = T::deserialize(&value)
                .map_err(|e| Error::malformed(main, crate::FieldError::new(name, e)))?;
            values.push(Some(decoded));
        }
        Ok(values)
    }

    /// A snapshot of each entity at `mains`, from the read cache where it has one that
    /// tells which confirmed writes it holds, else read now (offered to the cache).
    async fn snapshots<E: Root>(&self, mains: &[Key]) -> Result<Vec<Loaded>> {
        let mut snapshots: Vec<Option<Loaded>> = mains
            .iter()
            .map(|main| {
                let hit = self.cache.as_ref()?.get::<E>(main)?;
                Some(Loaded::Cached(hit))
            })
            .collect();
        let unread: Vec<usize> = (0..mains.len())
            .filter(|&i| snapshots[i].is_none())
            .collect();
        if !unread.is_empty() {
            // Taken before the read starts (module docs of `cache`).
            let ticket = self
                .cache
                .as_ref()
                .map(crate::mapper::read::cache::ReadCache::ticket);
            let wanted: Vec<Key> = unread.iter().map(|&i| mains[i].clone()).collect();
            let read = self.read_many::<E>(&wanted).await?;
            for (i, found) in unread.into_iter().zip(read) {
                if let (Some(cache), Some(ticket)) = (&self.cache, ticket) {
                    cache.fill::<E>(&mains[i], &found, ticket);
                }
                snapshots[i] = Some(Loaded::Read(found));
            }
        }
        Ok(snapshots.into_iter().flatten().collect())
    }

    /// The entities of kind `E` at `mains` (each as a load first reads it, with write
    /// records or without, as `records` says) and the documents at `extra`, in one
    /// lookup, where the store reads a lookup atomically
    /// ([`DocumentStore::snapshot_lookups`]): all of it as the store held it at one
    /// instant. Answers each entity's snapshot, as [`Mapper::read_entity_with`] would take
    /// it, and the documents at `extra` in order; `None` when the store does not read
    /// atomically or an entity needs more than its first read ([`one_read_snapshot`]),
    /// and nothing is answered then. Without records, a caller that writes these
    /// documents back must keep the stored records ([`crate::store::Write::Values`]).
    pub(in crate::mapper) async fn read_at_once<E: Root>(
        &self,
        mains: &[Key],
        extra: &[Key],
        records: bool,
    ) -> Result<Option<(Vec<Arc<Snapshot>>, Vec<Option<Versioned>>)>> {
        if !self.store.snapshot_lookups() {
            return Ok(None);
        }
        let firsts: Vec<Lookup> = mains.iter().map(first_read::<E>).collect();
        let (parts, extra) = self.lookup_together(&firsts, extra, records).await?;
        let mut snapshots = Vec::with_capacity(mains.len());
        for ((main, first), entity) in mains.iter().zip(firsts).zip(parts) {
            match one_read_snapshot::<E>(main, first, entity)? {
                Some(snapshot) => snapshots.push(Arc::new(snapshot)),
                None => return Ok(None),
            }
        }
        Ok(Some((snapshots, extra)))
    }

    /// The documents at `keys`, one entry per key as `get_many` answers them, but
    /// possibly without their write records: for writes that do not send them back whole
    /// ([`crate::store::Write::Own`]), and for reads that compare versions.
    pub(in crate::mapper) async fn get_values(
        &self,
        keys: &[Key],
    ) -> Result<Vec<Option<Versioned>>> {
        Ok(self.lookup_together(&[], keys, false).await?.1)
    }

    /// The first reads `firsts` (each as [`first_read`] takes it) and the documents at
    /// `extra` in one lookup (with write records or without, as `records` says): each
    /// read's part of the answer, in order, and the documents at `extra`.
    pub(in crate::mapper) async fn lookup_together(
        &self,
        firsts: &[Lookup],
        extra: &[Key],
        records: bool,
    ) -> Result<(Vec<Found>, Vec<Option<Versioned>>)> {
        let mut lookup = Lookup {
            keys: Vec::new(),
            scans: Vec::new(),
            records,
            writer: None,
            prefetch: Vec::new(),
        };
        for first in firsts {
            lookup.keys.extend(first.keys.iter().cloned());
            lookup.scans.extend(first.scans.iter().cloned());
            lookup.prefetch.extend(first.prefetch.iter().cloned());
        }
        lookup.keys.extend(extra.iter().cloned());
        let found = self.store.lookup(&lookup).await?;
        answers(&lookup, &found, || {
            format!("lookup of {} keys", lookup.keys.len())
        })?;
        let (mut docs, mut pages) = (found.docs.into_iter(), found.pages.into_iter());
        let parts = firsts
            .iter()
            .map(|first| Found {
                docs: docs.by_ref().take(first.keys.len()).collect(),
                pages: pages.by_ref().take(first.scans.len()).collect(),
            })
            .collect();
        Ok((parts, docs.collect()))
    }

    /// The documents of each entity at `mains`, as [`Mapper::read_entity`] reads them:
    /// all of them in one lookup (values only, no write records) where that first read
    /// is all a load needs.
    async fn read_many<E: Root>(&self, mains: &[Key]) -> Result<Vec<Arc<Snapshot>>> {
        let lookups: Vec<_> = mains.iter().map(first_read::<E>).collect();
        if lookups.iter().any(|l| !l.scans.is_empty()) {
            let reads = mains.iter().map(|main| self.read_entity::<E>(main));
            return futures::future::try_join_all(reads).await;
        }
        let lookup = Lookup {
            keys: lookups
                .iter()
                .flat_map(|l| l.keys.iter().cloned())
                .collect(),
            scans: Vec::new(),
            records: false,
            writer: None,
            prefetch: Vec::new(),
        };
        let mut docs = self.store.lookup(&lookup).await?.docs;
        if docs.len() != lookup.keys.len() {
            return Err(Error::backend(
                format!("lookup of {} keys", lookup.keys.len()),
                format!("the store answered {} entries", docs.len()),
            ));
        }
        let mut found = Vec::with_capacity(mains.len());
        let mut rest = docs.drain(..);
        for (main, lookup) in mains.iter().zip(lookups) {
            let docs: Vec<_> = rest.by_ref().take(lookup.keys.len()).collect();
            let pages = Vec::new();
            match one_read_snapshot::<E>(main, lookup, Found { docs, pages })? {
                Some(snapshot) => found.push(Arc::new(snapshot)),
                None => found.push(self.read_entity::<E>(main).await?),
            }
        }
        Ok(found)
    }
}
