//! `apply`: a save of an entity built from its main document alone (a vote that needs no
//! count), from a small cache of main documents ([`MAIN_CACHE_CAPACITY`] entries for
//! [`MAIN_CACHE_TTL`]), through `save` (`save.rs`).
//!
//! Invariant: as `save`'s; every attempt checks that the entity exists, so a stale cached
//! main document changes nothing stored, and a change made on one whose entity was
//! deleted or replaced since goes to the entity stored now. The argument:
//! `docs/design/exactly-once.md`, "Applying".

use crate::document::Versioned;
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::{FastMap, Key};
use crate::mapper::Mapper;
use crate::mapper::codec::{MainState, from_main, from_main_reusing, main_unchanged, malformed};
use crate::store::DocumentStore;
use std::any::TypeId;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

/// How many main documents a mapper keeps for [`Mapper::apply`].
pub(in crate::mapper) const MAIN_CACHE_CAPACITY: u64 = 10_000;

/// How long a main document stays in that cache.
pub(in crate::mapper) const MAIN_CACHE_TTL: Duration = Duration::from_secs(1);

/// The main documents `apply` reuses, shared by a mapper's clones: each with the moment
/// it was read. A lookup is one hash lookup under a read lock (it runs on every `apply`);
/// a document older than [`MAIN_CACHE_TTL`] is not answered, and when an insert would
/// pass [`MAIN_CACHE_CAPACITY`] the expired ones go, or all of them if none has expired.
#[derive(Clone, Default)]
pub(in crate::mapper) struct MainCache {
    entries: Arc<RwLock<FastMap<Key, Fetched>>>,
}

/// A cached main document and when its read started.
type Fetched = (Instant, Arc<CachedMain>);

impl MainCache {
    fn get(&self, main: &Key) -> Option<Arc<CachedMain>> {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        let (read_at, stored) = entries.get(main)?;
        (read_at.elapsed() < MAIN_CACHE_TTL).then(|| stored.clone())
    }

    fn insert(&self, main: Key, stored: Arc<CachedMain>, read_at: Instant) {
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        let capacity = usize::try_from(MAIN_CACHE_CAPACITY).unwrap_or(usize::MAX);
        if entries.len() >= capacity && !entries.contains_key(&main) {
            entries.retain(|_, (at, _)| at.elapsed() < MAIN_CACHE_TTL);
            if entries.len() >= capacity {
                entries.clear();
            }
        }
        entries.insert(main, (read_at, stored));
    }

    pub(in crate::mapper) fn invalidate(&self, main: &Key) {
        self.entries
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(main);
    }
}

/// A cached main document, and what the first `apply` of it derived for its type.
pub(in crate::mapper) struct CachedMain {
    stored: Versioned,
    derived: OnceLock<(TypeId, MainState)>,
}

pub(in crate::mapper) fn main_cache() -> MainCache {
    MainCache::default()
}

impl<S: DocumentStore> Mapper<S> {
    /// Applies `change` to the sharded properties of the entity with this id without
    /// loading their values: `change` runs on the entity built from its main document,
    /// whose sharded fields hold their neutral values (so what it reads of them is not
    /// the aggregate) and whose other fields may be up to a second old (the mapper
    /// reuses main documents of entities it applied to recently; the entity's existence
    /// is still checked by the write), and the save writes only the changes of the
    /// shadows. With a
    /// built-in fold (`#[shardable(fold = sum)]`) that is one merge: one round trip, no
    /// read, no conflict, coalesced with concurrent saves of the property.
    ///
    /// The entity must exist: [`Error::NotFound`] when it does not (nothing written). A
    /// change to an unsharded field fails with [`Error::Invalid`] before anything is
    /// written. An error from the store leaves the outcome unknown, as for any write
    /// that fails ([`Error::Backend`]); to apply a change exactly once across retries,
    /// use [`Mapper::update_once`] with an operation key.
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
    /// impl Question {
    ///     #[shard_method]
    ///     fn vote_up(&mut self) {
    ///         self.votes += 1;
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Question::new(1, "Why?".into(), 41)).await?;
    /// db.apply(&1, Question::vote_up).await?; // one merge; the count is not read
    /// assert_eq!(db.load::<Question>(&1).await?.votes, 42);
    /// assert!(matches!(db.apply(&2, Question::vote_up).await, Err(Error::NotFound { .. })));
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(name = "autoshard.apply", level = "debug", skip_all, fields(kind = E::KIND, key = %E::key_for(&id.to_owned()), attempts = tracing::field::Empty, outcome = tracing::field::Empty))]
    pub async fn apply<E, F>(
        &self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
        change: F,
    ) -> Result<()>
    where
        E: Root,
        F: FnOnce(&mut E),
    {
        let id = &id.to_owned();
        let main = E::key_for(id);
        let cached = self.main_cache.get(&main);
        let from_cache = cached.is_some();
        let stored = match cached {
            Some(stored) => stored,
            None => self.fetch_main(&main).await?,
        };
        let mut entity = from_main_reusing::<E>(id, &main, &stored.stored, &stored.derived)?;
        change(&mut entity);
        let unchanged = main_unchanged(&entity, &main)?;
        if !unchanged {
            // A field that does not encode is reported as such, as `save` reports it.
            entity.to_document().map_err(malformed(&main))?;
            return Err(Error::Invalid(format!(
                "`apply` to `{main}` changed an unsharded field; it changes sharded \
                 properties only (use `update` for the others)"
            )));
        }
        match self.save_as(&mut entity, &main, None).await {
            Err(Error::NotFound { .. }) if from_cache => {
                // The cached document was of an entity deleted or replaced since, and
                // nothing was written: the change goes to the entity stored now.
                self.main_cache.invalidate(&main);
                let stored = self.fetch_main(&main).await?;
                let mut fresh = from_main::<E>(id, &main, &stored.stored)?;
                if let (Some(from), Some(to)) = (entity.state_mut(), fresh.state_mut()) {
                    to.take_pending_from(from);
                }
                self.save(&mut fresh).await
            }
            outcome => outcome,
        }
    }

    /// Reads the main document at `main` and caches it; [`Error::NotFound`] when absent.
    async fn fetch_main(&self, main: &Key) -> Result<Arc<CachedMain>> {
        // The document's age counts from before the read.
        let read_at = Instant::now();
        let Some(stored) = self.store.get(main).await? else {
            self.main_cache.invalidate(main);
            return Err(Error::NotFound { key: main.clone() });
        };
        let stored = Arc::new(CachedMain {
            stored,
            derived: OnceLock::new(),
        });
        self.main_cache
            .insert(main.clone(), stored.clone(), read_at);
        Ok(stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::{Document, Version};

    fn cached() -> Arc<CachedMain> {
        Arc::new(CachedMain {
            stored: Versioned {
                doc: Document::new(),
                version: Version(1),
            },
            derived: OnceLock::new(),
        })
    }

    fn key(i: u64) -> Key {
        Key::new("Question", i.to_string())
    }

    /// A moment a cached document read then has expired by now, on any machine.
    fn expired() -> Instant {
        Instant::now()
            .checked_sub(MAIN_CACHE_TTL * 2)
            .expect("an Instant two seconds back")
    }

    #[test]
    fn a_main_document_is_answered_until_it_expires_or_is_invalidated() {
        let cache = MainCache::default();
        cache.insert(key(1), cached(), Instant::now());
        cache.insert(key(2), cached(), expired());
        assert!(cache.get(&key(1)).is_some());
        assert!(cache.get(&key(2)).is_none());
        cache.invalidate(&key(1));
        assert!(cache.get(&key(1)).is_none());
    }

    #[test]
    fn a_full_cache_drops_the_expired_documents_first_and_else_all() {
        let capacity = usize::try_from(MAIN_CACHE_CAPACITY).unwrap();
        let cache = MainCache::default();
        for i in 0..capacity as u64 {
            let read_at = if i % 2 == 0 {
                expired()
            } else {
                Instant::now()
            };
            cache.insert(key(i), cached(), read_at);
        }
        let len = || cache.entries.read().unwrap().len();
        assert_eq!(len(), capacity);
        // One more: the expired half goes, the fresh half stays.
        cache.insert(key(u64::MAX), cached(), Instant::now());
        assert_eq!(len(), capacity / 2 + 1);
        assert!(cache.get(&key(1)).is_some());
        // Filled with fresh documents only: one more clears them.
        for i in capacity as u64..(capacity + capacity / 2 - 1) as u64 {
            cache.insert(key(i), cached(), Instant::now());
        }
        assert_eq!(len(), capacity);
        cache.insert(key(u64::MAX - 1), cached(), Instant::now());
        assert_eq!(len(), 1);
        assert!(cache.get(&key(u64::MAX - 1)).is_some());
    }
}
