//! `load`: the main document and every static shard in one `get_many`, each sharded
//! property folded over its shards (paper, section 4, "Loading"); concurrently, the
//! dynamic shards (see `dynamic`). Where the entity's recorded layout lists more shards
//! than the annotation (it was resharded, or the annotation changed), one more read
//! takes them (see `layout`).

use super::cache::Confirmed;
use super::codec::{fold_document, from_main, with_property};
use super::dynamic::extra_scans;
use super::layout::{self, static_shard_keys};
use super::shared_read::Found;
use super::Mapper;
use crate::document::{Document, Versioned};
use crate::entity::Entity;
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::store::{merge, DocumentStore, Lookup};
use std::sync::Arc;

impl<S: DocumentStore> Mapper<S> {
    /// Loads the entity with this id. Each sharded property is the fold of its shards
    /// (a missing shard document, or one without the property, counts as neutral); its
    /// shadow starts neutral, and the main document is remembered for dirty tracking.
    ///
    /// The static shards of the current annotation are read with the main document in
    /// one `get_many`; concurrently, the dynamic shards (and, for an entity with a
    /// dynamic property, static shards of an older, larger annotation) are scanned. A
    /// scan raced by compaction is checked and repeated, so a value is never counted
    /// twice or missed because compaction moved it.
    ///
    /// Errors: [`Error::NotFound`] when there is no main document; [`Error::Malformed`]
    /// naming the key and property when a stored document does not decode.
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
    /// use autoshard::{Error, Mapper, MemoryStore};
    ///
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Question::new(7, "Why?".into(), 3)).await?;
    /// assert_eq!(db.load::<Question>(&7).await?.votes, 3);
    /// assert!(matches!(db.load::<Question>(&8).await, Err(Error::NotFound { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn load<E: Root>(&self, id: &E::Id) -> Result<E> {
        let main = E::key_for(id);
        let Some(cache) = &self.cache else {
            let found = self.read_entity::<E>(&main).await?;
            return assemble(id, &main, &found, &[])?.ok_or(Error::NotFound { key: main });
        };
        let slot = (main.clone(), std::any::type_name::<E>());
        if let Some((entry, later)) = cache.get(&slot) {
            if let Some(entity) = assemble(id, &main, &entry.found, &later)? {
                cache.count(true);
                return Ok(entity);
            }
        }
        cache.count(false);
        // Taken before the read starts (module docs of `cache`).
        let ticket = cache.ticket();
        let found = self.read_entity::<E>(&main).await?;
        cache.fill(&slot, found.clone(), ticket);
        assemble(id, &main, &found, &[])?.ok_or(Error::NotFound { key: main })
    }

    /// The documents of the entity at `main` as `E` reads them, from a read that
    /// started after this call (shared with concurrent loads, see `shared_read`).
    pub(super) async fn read_entity<E: Root>(&self, main: &Key) -> Result<Found> {
        let mut lookup = first_read::<E>(main);
        // The write records tell a cached snapshot which confirmed writes it holds.
        lookup.records = self.cache.is_some();
        tracing::debug!(key = %main, documents = lookup.keys.len(), "load");
        let read = || async {
            let mut lookup = lookup.clone();
            let mut attempts = 0;
            let found = loop {
                let found = self.store.lookup(&lookup).await?;
                if found.docs.len() != lookup.keys.len() || found.pages.len() != lookup.scans.len()
                {
                    return Err(Error::backend(
                        format!("lookup of {} keys for `{main}`", lookup.keys.len()),
                        format!(
                            "the store answered {} entries and {} pages",
                            found.docs.len(),
                            found.pages.len()
                        ),
                    ));
                }
                // The recorded layout lists shards the annotation does not: read again,
                // all of them with the main document, so the read stays one snapshot
                // where the store reads one.
                // A retired shard deleted between reading the layout and reading it: its
                // value moved into a shard that may have been read before the move.
                let (unread, torn) = match found.docs.first() {
                    Some(Some(main_doc)) => (
                        unread_shards(main, &main_doc.doc, &lookup.keys)?,
                        torn(main, &main_doc.doc, &lookup.keys, &found.docs)?,
                    ),
                    _ => (Vec::new(), false),
                };
                if unread.is_empty() && !torn {
                    break found;
                }
                // Never a fold that leaves out shards the layout lists.
                attempts += 1;
                if attempts >= LAYOUT_READS {
                    return Err(Error::Contention {
                        key: main.clone(),
                        attempts,
                    });
                }
                lookup.keys.extend(unread);
            };
            let mut extra = self.extra_shards::<E>(main, found.pages).await?;
            // A scanned shard the layout listed was read by key: folded once, from there.
            extra.retain(|(key, _)| !lookup.keys.contains(key));
            if let Some(Some(main_doc)) = found.docs.first() {
                let more = self
                    .unrecorded_shards::<E>(main, &main_doc.doc, &lookup.keys, &extra)
                    .await?;
                extra.extend(more);
            }
            Ok(Arc::new((lookup.keys, found.docs, extra)))
        };
        match &self.reads {
            Some(reads) => {
                reads
                    .read(&(main.clone(), std::any::type_name::<E>()), read)
                    .await
            }
            None => read().await,
        }
    }
}

/// What a snapshot (the documents one read found) gives an entity: its main document,
/// the shard documents to fold, and the confirmed writes to fold besides, the ones the
/// snapshot does not hold.
pub(super) struct Folding<'f> {
    /// `None`: the entity is not stored.
    pub(super) main: Option<&'f Versioned>,
    pub(super) docs: Vec<(&'f Key, &'f Document)>,
    pub(super) later: Vec<&'f Confirmed>,
}

/// What to fold for the entity at `main` from the snapshot `found`, given the confirmed
/// writes `later` it may not hold; `Ok(None)` when it cannot tell whether it holds one
/// of them (see the module docs of `cache`).
pub(super) fn folding<'f>(
    main: &Key,
    found: &'f Found,
    later: &'f [Confirmed],
) -> Result<Option<Folding<'f>>> {
    let (keys, found, extra) = &**found;
    let mut found = found.iter();
    let Some(main_doc) = found.next().and_then(Option::as_ref) else {
        return Ok(Some(Folding {
            main: None,
            docs: Vec::new(),
            later: Vec::new(),
        }));
    };
    // Every sharded property found in any shard document is folded, whatever the
    // current annotation says, so switching static <-> dynamic loses nothing; but
    // never a static shard the layout does not read, or whose value a shard read
    // holds (see `reshard`).
    let counts = layout::recorded_counts(main, &main_doc.doc)?;
    let docs: Vec<(&Key, &Versioned)> = keys[1..]
        .iter()
        .zip(found)
        .filter_map(|(key, doc)| Some((key, doc.as_ref()?)))
        .chain(extra.iter().map(|(key, doc)| (key, doc)))
        .collect();
    let moved: Vec<&str> = docs
        .iter()
        .flat_map(|(_, doc)| layout::moved_into(&doc.doc).map(|(name, _)| name))
        .collect();
    let mut folded: Vec<(&Key, &Document)> = Vec::with_capacity(docs.len());
    for (key, doc) in docs {
        let skip = layout::static_shard_of(key).is_some_and(|(property, index)| {
            moved.contains(&key.name())
                || counts
                    .as_ref()
                    .and_then(|c| layout::count_of(c, property))
                    .is_some_and(|c| !c.is_read(index))
        });
        if !skip {
            folded.push((key, &doc.doc));
        } else if later.iter().any(|c| &c.shard == key) {
            return Ok(None);
        }
    }
    let mut missing = Vec::new();
    for c in later {
        let held = match folded.iter().find(|(key, _)| *key == &c.shard) {
            Some((_, doc)) => merge::applied(Some(doc), &c.writer, c.seq),
            // Absent from the snapshot: created after it, unless a reshard retired it.
            None if layout::is_retired(counts.as_ref(), &c.shard, None) => return Ok(None),
            None => false,
        };
        if !held {
            missing.push(c);
        }
    }
    Ok(Some(Folding {
        main: Some(main_doc),
        docs: folded,
        later: missing,
    }))
}

/// The entity with this id from the documents a read `found`, with the confirmed writes
/// `later` folded in that those documents do not hold; `Ok(None)` when the snapshot
/// cannot tell (see [`folding`]). [`Error::NotFound`] when the entity is not stored.
pub(super) fn assemble<E: Root>(
    id: &E::Id,
    main: &Key,
    found: &Found,
    later: &[Confirmed],
) -> Result<Option<E>> {
    let Some(folding) = folding(main, found, later)? else {
        return Ok(None);
    };
    let Some(main_doc) = folding.main else {
        return Err(Error::NotFound { key: main.clone() });
    };
    let mut entity: E = from_main(id, main, main_doc)?;
    for (key, doc) in folding.docs {
        fold_document(&mut entity, key, doc)?;
    }
    for c in folding.later {
        let Some(index) = E::PROPERTIES
            .iter()
            .position(|p| p.stored_as == c.stored_as)
        else {
            continue;
        };
        entity
            .fold_stored(index, &c.value)
            .map_err(|e| Error::malformed(&c.shard, with_property(e, E::PROPERTIES[index].name)))?;
    }
    Ok(Some(entity))
}

/// What a load of `E` at `main` reads first: the main document and the static shards
/// of the annotation, the first pages of [`extra_scans`], and as a prefetch the compacted
/// dynamic shard (all the dynamic-shard scan lists for most entities).
pub(super) fn first_read<E: Entity>(main: &Key) -> Lookup {
    let mut keys = vec![main.clone()];
    keys.extend(static_shard_keys::<E>(main));
    let scans = extra_scans::<E>(main);
    let prefetch = if scans.is_empty() {
        Vec::new()
    } else {
        vec![layout::compacted(main)]
    };
    Lookup {
        keys,
        scans,
        records: false,
        prefetch,
    }
}

/// How many times a load reads again because the recorded layout listed shards it did
/// not read (each reshard between two reads can add some).
const LAYOUT_READS: u32 = 4;

/// The static shard keys the layout recorded in the main document `doc` lists that
/// `read` does not.
pub(super) fn unread_shards(main: &Key, doc: &Document, read: &[Key]) -> Result<Vec<Key>> {
    let Some(counts) = layout::recorded_counts(main, doc)? else {
        return Ok(Vec::new());
    };
    Ok(layout::recorded_shard_keys(main, &counts)
        .into_iter()
        .filter(|key| !read.contains(key))
        .collect())
}

/// Whether a retired shard the layout recorded in the main document `doc` lists was
/// found missing in `docs` (read at `keys`): the read straddled its deletion.
pub(super) fn torn(
    main: &Key,
    doc: &Document,
    keys: &[Key],
    docs: &[Option<Versioned>],
) -> Result<bool> {
    let Some(counts) = layout::recorded_counts(main, doc)? else {
        return Ok(false);
    };
    Ok(keys.iter().zip(docs).any(|(key, found)| {
        found.is_none()
            && layout::static_shard_of(key).is_some_and(|(property, index)| {
                layout::count_of(&counts, property).is_some_and(|c| c.retired().contains(&index))
            })
    }))
}

impl<S: DocumentStore> Mapper<S> {
    /// When the layout recorded in the main document `doc` does not record every
    /// statically sharded property of `E` (an entity stored before layouts were recorded,
    /// or a property that was dynamic at insert): the static shards a scan finds beyond
    /// what the load read (`read`, `extra`), each at most once.
    async fn unrecorded_shards<E: Entity>(
        &self,
        main: &Key,
        doc: &Document,
        read: &[Key],
        extra: &[(Key, Versioned)],
    ) -> Result<Vec<(Key, Versioned)>> {
        let counts = layout::recorded_counts(main, doc)?;
        if layout::covers::<E>(counts.as_ref()) || layout::has_dynamic::<E>() {
            // (With a dynamic property the first read scanned every static shard.)
            return Ok(Vec::new());
        }
        let seen = |key: &Key| read.contains(key) || extra.iter().any(|(k, _)| k == key);
        Ok(self
            .scan_all(layout::static_shards_scan(main))
            .await?
            .into_iter()
            .filter(|(key, _)| !seen(key))
            .collect())
    }
}
