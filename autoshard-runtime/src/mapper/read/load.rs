//! `load`: the main document and every static shard in one read, each sharded property
//! folded over its shards (paper, section 4, "Loading"); concurrently, the dynamic shards
//! (below). Where the entity's recorded layout lists more shards than the annotation (it
//! was resharded, or the annotation changed), one more read takes them (see `layout`).
//! Concurrent loads of one entity through one mapper share one read that started after
//! each of them was called ([`SharedReads`], `Mapper::with_shared_reads`).
//!
//! The properties with a built-in fold the store folds itself where it can
//! ([`DocumentStore::fold_lookup`]): the read answers their folded values and the shard
//! documents without them. That stays exact because every shard it folded is one the
//! fold counts: the answer still carries each shard's version and its other properties
//! (the reshard and adoption markers that tell which documents count), and a read that
//! shows a folded shard the fold must leave out (`Snapshot::folds_uncounted`), a property
//! the store did not fold, or a lookup that wants write records reads the documents whole
//! instead.
//!
//! The dynamic-shard half of a load (paper, section 2.2): every dynamic shard document the
//! entity has, each value once, while compaction moves them (the writer is in
//! `write/dynamic.rs`). A load also folds shards of a former annotation (static shards of
//! a now dynamic property, dynamic shards of a now static one). Invariant: a scan in one
//! page is a snapshot of its group; a scan in several pages checks that the compacted
//! document's version did not change across it, else scans again (bounded; then
//! [`Error::Contention`]). The argument: `docs/design/resharding.md`, "Loads of dynamic
//! shards".

use crate::document::{Document, Value, Versioned};
use crate::entity::Entity;
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::layout::{self, has_dynamic, is_former_static_shard, static_shard_keys};
use crate::mapper::read::cache::from_hit;
use crate::mapper::read::snapshot::{Snapshot, assemble};
use crate::store::{DocumentStore, Fold, FoldLookup, Folded, Found, Lookup, Scan, ScanPage};
use crate::sync::shared::SharedReads;
use std::sync::Arc;

/// The loads in flight per entity and the loads waiting for the next read, shared by a
/// mapper's clones.
pub(in crate::mapper) type SharedLoads = SharedReads<Slot, Result<Arc<Snapshot>>>;

/// What loads share a read of: an entity, read as one entity type (two types declared
/// for one kind may read different documents), read one way ([`Reading`]: a cached load
/// needs the write records to tell which confirmed writes its snapshot holds, and a
/// writer needs every shard document, so neither shares a read made otherwise).
type Slot = (Key, &'static str, Reading);

/// How a read takes an entity's documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(in crate::mapper) enum Reading {
    /// Without write records, the store folding the built-in folds where it can: what a
    /// load needs to answer the entity.
    Folded,
    /// Every document whole but for its write record: for a writer that writes documents
    /// back as values ([`crate::store::Transaction::put_values`], the store keeps the
    /// records) and must see each shard it may write.
    Values,
    /// Every document whole, write records included: for a writer that writes documents
    /// back whole, and for a cached load.
    Whole,
}

impl<S: DocumentStore> Mapper<S> {
    /// Loads the entity with this id. Each sharded property is the fold of its shards
    /// (a missing shard document, or one without the property, counts as neutral); its
    /// shadow starts neutral, and the main document is remembered for dirty tracking.
    ///
    /// The static shards of the current annotation are read with the main document in
    /// one read, the store folding the properties with a built-in fold where it can (one
    /// value each instead of one per shard); concurrently, the dynamic shards (and, for an entity with a
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
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Question::new(7, "Why?".into(), 3)).await?;
    /// assert_eq!(db.load::<Question>(&7).await?.votes, 3);
    /// assert!(matches!(db.load::<Question>(&8).await, Err(Error::NotFound { .. })));
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(name = "autoshard.load", level = "debug", skip_all, fields(kind = E::KIND, key = %E::key_for(&id.to_owned()), attempts = tracing::field::Empty, outcome = tracing::field::Empty))]
    pub async fn load<E: Root>(&self, id: &(impl ToOwned<Owned = E::Id> + ?Sized)) -> Result<E> {
        let id = &id.to_owned();
        let main = E::key_for(id);
        let Some(cache) = &self.cache else {
            let found = self.read_entity::<E>(&main).await?;
            return assemble(id, &main, &found);
        };
        if let Some(hit) = cache.get::<E>(&main) {
            return from_hit(id, &main, &hit);
        }
        // Taken before the read starts (module docs of `cache`).
        let ticket = cache.ticket();
        let found = self.read_entity::<E>(&main).await?;
        cache.fill::<E>(&main, &found, ticket);
        assemble(id, &main, &found)
    }

    /// The documents of the entity at `main` as `E` reads them, from a read that
    /// started after this call (shared with concurrent loads, see [`SharedLoads`]).
    pub(in crate::mapper) async fn read_entity<E: Root>(
        &self,
        main: &Key,
    ) -> Result<Arc<Snapshot>> {
        // The write records tell a cached snapshot which confirmed writes it holds.
        let reading = match self.cache {
            Some(_) => Reading::Whole,
            None => Reading::Folded,
        };
        self.read_entity_with::<E>(main, reading).await
    }

    /// [`Mapper::read_entity`], the documents read as `reading` says.
    pub(in crate::mapper) async fn read_entity_with<E: Root>(
        &self,
        main: &Key,
        reading: Reading,
    ) -> Result<Arc<Snapshot>> {
        let mut lookup = first_read::<E>(main);
        lookup.records = reading == Reading::Whole;
        tracing::debug!(key = %main, documents = lookup.keys.len(), "load");
        let folds = store_folds::<E>();
        let read = || async {
            let mut attempts = 0;
            // Whether the store may fold: until a read shows a shard it must not count.
            let mut folding = reading == Reading::Folded;
            loop {
                let mut lookup = lookup.clone();
                let (found, folded) = loop {
                    let (found, folded) = if folding {
                        self.fold_lookup(&lookup, &folds).await?
                    } else {
                        (self.store.lookup(&lookup).await?, Vec::new())
                    };
                    answers(&lookup, &found, || {
                        format!("lookup of {} keys for `{main}`", lookup.keys.len())
                    })?;
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
                        break (found, folded);
                    }
                    // Never a fold that leaves out shards the layout lists.
                    read_again(main, &mut attempts)?;
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
                    // A read that straddled an adoption (see `adopt`) would count a value
                    // twice or miss it: read again.
                    let read = found.docs[1..].iter().flatten().map(|d| &d.doc);
                    let read = read.chain(extra.iter().map(|(_, d)| &d.doc));
                    if layout::adoption_torn(&main_doc.doc, read) {
                        read_again(main, &mut attempts)?;
                        continue;
                    }
                }
                let snapshot = Snapshot {
                    keys: lookup.keys,
                    docs: found.docs,
                    scanned: extra,
                    folded,
                };
                if snapshot.folds_uncounted(main)? {
                    folding = false;
                    continue;
                }
                return Ok(Arc::new(snapshot));
            }
        };
        match &self.reads {
            Some(reads) => {
                reads
                    .read(&(main.clone(), std::any::type_name::<E>(), reading), read)
                    .await
            }
            None => read().await,
        }
    }
}

impl<S: DocumentStore> Mapper<S> {
    /// `lookup` with the store folding `folds` over its static shards where it can (see
    /// [`DocumentStore::fold_lookup`]): the documents, the shards without the folded
    /// properties, the scans' pages, and the folded values. A plain lookup when there is
    /// nothing to fold, when the lookup wants write records, or when the store did not
    /// fold a property.
    async fn fold_lookup(
        &self,
        lookup: &Lookup,
        folds: &[(&'static str, Fold)],
    ) -> Result<(Found, Vec<(&'static str, Value)>)> {
        let Some((main, shards)) = lookup.keys.split_first() else {
            return Ok((self.store.lookup(lookup).await?, Vec::new()));
        };
        if folds.is_empty() || lookup.records {
            return Ok((self.store.lookup(lookup).await?, Vec::new()));
        }
        let request = FoldLookup {
            main: main.clone(),
            shards: shards.to_vec(),
            properties: folds
                .iter()
                .map(|(name, fold)| ((*name).to_owned(), *fold))
                .collect(),
            scans: lookup.scans.clone(),
            prefetch: lookup.prefetch.clone(),
        };
        let answer = self.store.fold_lookup(&request).await?;
        if answer.shards.len() != shards.len()
            || answer.values.len() != folds.len()
            || answer.pages.len() != lookup.scans.len()
        {
            return Err(Error::backend(
                format!("folding lookup of {} keys for `{main}`", lookup.keys.len()),
                format!(
                    "the store answered {} shards, {} values and {} pages",
                    answer.shards.len(),
                    answer.values.len(),
                    answer.pages.len()
                ),
            ));
        }
        let mut folded = Vec::with_capacity(folds.len());
        for ((name, _), value) in folds.iter().zip(answer.values) {
            match value {
                Folded::Absent => {}
                Folded::Value(value) => folded.push((*name, value)),
                Folded::Unsupported => return Ok((self.store.lookup(lookup).await?, Vec::new())),
            }
        }
        let mut docs = Vec::with_capacity(lookup.keys.len());
        docs.push(answer.main);
        docs.extend(answer.shards);
        Ok((
            Found {
                docs,
                pages: answer.pages,
            },
            folded,
        ))
    }
}

/// The statically sharded properties of `E` with a built-in fold, by the name their
/// shards store them as, with the fold: what a store may fold for a load.
fn store_folds<E: Entity>() -> Vec<(&'static str, Fold)> {
    E::PROPERTIES
        .iter()
        .filter_map(|p| Some((p.stored_as, (p.store_fold)()?)))
        .collect()
}

/// What a load of `E` at `main` reads first: the main document and the static shards
/// of the annotation, the first pages of [`extra_scans`], and as a prefetch the compacted
/// dynamic shard (all the dynamic-shard scan lists for most entities).
pub(in crate::mapper) fn first_read<E: Entity>(main: &Key) -> Lookup {
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
        writer: None,
        prefetch,
    }
}

/// How many times a load reads again because the recorded layout listed shards it did
/// not read (each reshard between two reads can add some).
const LAYOUT_READS: u32 = 4;

/// Counts one more read of the entity at `main`; [`Error::Contention`] once a load has
/// read it [`LAYOUT_READS`] times.
fn read_again(main: &Key, attempts: &mut u32) -> Result<()> {
    *attempts += 1;
    if *attempts >= LAYOUT_READS {
        return Err(Error::Contention {
            key: main.clone(),
            attempts: *attempts,
        });
    }
    Ok(())
}

/// The static shard keys the layout recorded in the main document `doc` lists that
/// `read` does not.
pub(in crate::mapper) fn unread_shards(
    main: &Key,
    doc: &Document,
    read: &[Key],
) -> Result<Vec<Key>> {
    let Some(counts) = layout::recorded_counts(main, doc)? else {
        return Ok(Vec::new());
    };
    // Compared by property and index, so that only the missing keys are built.
    let read: Vec<(&str, u32)> = read
        .iter()
        .filter(|key| key.is_child_of(main))
        .filter_map(layout::static_shard_of)
        .collect();
    Ok(counts
        .iter()
        .flat_map(|(property, c)| c.read_indexes().map(move |i| (property, i)))
        .filter(|&(property, i)| !read.contains(&(property.as_str(), i)))
        .map(|(property, i)| layout::static_shard(main, property, i))
        .collect())
}

/// Whether a retired shard the layout recorded in the main document `doc` lists was
/// found missing in `docs` (read at `keys`): the read straddled its deletion.
pub(in crate::mapper) fn torn(
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

/// [`Error::Backend`] (the read named by `what`) unless `found` has an entry for each key
/// of `lookup` and a page for each of its scans.
pub(in crate::mapper) fn answers(
    lookup: &Lookup,
    found: &Found,
    what: impl FnOnce() -> String,
) -> Result<()> {
    if found.docs.len() == lookup.keys.len() && found.pages.len() == lookup.scans.len() {
        return Ok(());
    }
    Err(Error::backend(
        what(),
        format!(
            "the store answered {} entries and {} pages",
            found.docs.len(),
            found.pages.len()
        ),
    ))
}

/// What a load of `E` at `main` reads when its first read (`lookup`, as [`first_read`]
/// makes it, without folding) is all it needs, from what the store answered (`found`):
/// the snapshot [`Mapper::read_entity_with`] returns after that same read. `None` when the
/// load needs more: shards the recorded layout lists beyond the annotation, a retired
/// shard found missing, a scan of more than one page, static shards the layout does not
/// record, or a read that straddled an adoption. So a snapshot from here comes from that
/// one read alone, which callers that read several entities in one atomic lookup rely on.
pub(in crate::mapper) fn one_read_snapshot<E: Entity>(
    main: &Key,
    lookup: Lookup,
    found: Found,
) -> Result<Option<Snapshot>> {
    let Found { docs, pages } = found;
    if docs.len() != lookup.keys.len()
        || pages.len() != lookup.scans.len()
        || pages.iter().any(|page| page.next.is_some())
    {
        return Ok(None);
    }
    // As `extra_shards` reads single pages: the dynamic shards, then former static ones.
    let mut pages = pages.into_iter();
    let mut extra = pages.next().map(|page| page.items).unwrap_or_default();
    warn_if_uncompacted(main, extra.len());
    if let Some(old_static) = pages.next() {
        let former = old_static.items.into_iter();
        extra.extend(former.filter(|(key, _)| is_former_static_shard::<E>(key)));
    }
    extra.retain(|(key, _)| !lookup.keys.contains(key));
    if let Some(Some(main_doc)) = docs.first() {
        let doc = &main_doc.doc;
        let counts = layout::recorded_counts(main, doc)?;
        let unrecorded = !layout::covers::<E>(counts.as_ref()) && !has_dynamic::<E>();
        let read = docs[1..].iter().flatten().map(|d| &d.doc);
        if unrecorded
            || !unread_shards(main, doc, &lookup.keys)?.is_empty()
            || torn(main, doc, &lookup.keys, &docs)?
            || layout::adoption_torn(doc, read.chain(extra.iter().map(|(_, d)| &d.doc)))
        {
            return Ok(None);
        }
    }
    Ok(Some(Snapshot {
        keys: lookup.keys,
        docs,
        scanned: extra,
        folded: Vec::new(),
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

/// How many times a load scans the dynamic shards again because compaction raced it.
const LOAD_SCAN_ATTEMPTS: u32 = 8;

/// The page size of the scans of a load: everything in one page, so that a store that
/// answers in one page (an atomic read, by the store contract) needs no version check
/// and a compaction racing the load never forces it to scan again.
const LOAD_PAGE: usize = 1 << 30;

/// How many dynamic shard documents of one entity a load reads before the mapper warns,
/// once per process, that nothing seems to compact them (see
/// [`Mapper::compact`](crate::Mapper::compact)).
pub const DYNAMIC_SHARDS_WARNING: usize = 1_000;

/// Warns, once per process, when a load of the entity at `main` read `shards` dynamic
/// shard documents, more than [`DYNAMIC_SHARDS_WARNING`].
fn warn_if_uncompacted(main: &Key, shards: usize) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if shards > DYNAMIC_SHARDS_WARNING && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            key = %main,
            shards,
            "a load read {shards} dynamic shards of one entity: run `Mapper::compact`, a \
             `Compactor` or a `Maintainer` to fold them back (warned once per process)"
        );
    }
}

impl<S: DocumentStore> Mapper<S> {
    /// The shard documents a load folds besides the current static shards, from the
    /// first pages of [`extra_scans`] (`pages`, in that order): every dynamic shard and,
    /// when `E` has a dynamic property, static shards beyond the current count (module
    /// docs). A scan that needs more pages is read again in full.
    pub(in crate::mapper) async fn extra_shards<E: Entity>(
        &self,
        main: &Key,
        pages: Vec<ScanPage>,
    ) -> Result<Vec<(Key, Versioned)>> {
        let mut pages = pages.into_iter();
        let (Some(dynamic), old_static) = (pages.next(), pages.next()) else {
            return Ok(Vec::new());
        };
        let dynamic = async {
            if dynamic.next.is_none() {
                // One page: one atomic read of the group.
                Ok(dynamic.items)
            } else {
                self.read_dynamic_shards(main).await
            }
        };
        let old_static = async {
            let all = match old_static {
                None => Vec::new(),
                Some(page) if page.next.is_none() => page.items,
                Some(_) => {
                    self.scan_all(layout::static_shards_scan(main).limit(LOAD_PAGE))
                        .await?
                }
            };
            Ok::<_, Error>(
                all.into_iter()
                    .filter(|(key, _)| is_former_static_shard::<E>(key)),
            )
        };
        let (mut dynamic, old_static) = futures::try_join!(dynamic, old_static)?;
        warn_if_uncompacted(main, dynamic.len());
        dynamic.extend(old_static);
        Ok(dynamic)
    }

    /// Every dynamic shard document of the entity at `main`, each value exactly once
    /// even while compaction runs (module docs).
    async fn read_dynamic_shards(&self, main: &Key) -> Result<Vec<(Key, Versioned)>> {
        let scan = layout::dynamic_shards_scan(main).limit(LOAD_PAGE);
        let first = self.store.scan(&scan).await?;
        if first.next.is_none() {
            // One page: one atomic read of the group.
            return Ok(first.items);
        }
        // Pages: the first one was read before any version, so it cannot be checked; the
        // whole scan is read again between two reads of the compacted document.
        let compacted = layout::compacted(main);
        for attempt in 1..=LOAD_SCAN_ATTEMPTS {
            let before = self.store.get(&compacted).await?.map(|doc| doc.version);
            let items = self.scan_all(scan.clone()).await?;
            let after = self.store.get(&compacted).await?.map(|doc| doc.version);
            if before == after {
                return Ok(items);
            }
            tracing::debug!(key = %compacted, attempt, "load: compaction raced the scan; again");
            tokio::time::sleep(std::time::Duration::from_millis(u64::from(attempt))).await;
        }
        Err(Error::Contention {
            key: compacted,
            attempts: LOAD_SCAN_ATTEMPTS,
        })
    }
}

/// The scans whose first pages a load of `E` at `main` reads with its documents (see
/// [`Mapper::extra_shards`]): none for an entity without sharded properties, the dynamic
/// shards, and for an entity with a dynamic property also every static shard.
pub(in crate::mapper) fn extra_scans<E: Entity>(main: &Key) -> Vec<Scan> {
    if E::PROPERTIES.is_empty() {
        return Vec::new();
    }
    let mut scans = vec![layout::dynamic_shards_scan(main).limit(LOAD_PAGE)];
    if has_dynamic::<E>() {
        scans.push(layout::static_shards_scan(main).limit(LOAD_PAGE));
    }
    scans
}
