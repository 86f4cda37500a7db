//! `load`: the main document and every static shard in one `get_many`, each sharded
//! property folded over its shards (paper, section 4, "Loading"); concurrently, the
//! dynamic shards (see `dynamic`).

use super::codec::{fold_document, from_main};
use super::dynamic::extra_scans;
use super::layout::static_shard_keys;
use super::Mapper;
use crate::error::{Error, Result};
use crate::group::Root;
use crate::store::{DocumentStore, Lookup};
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
        let mut keys = vec![main.clone()];
        keys.extend(static_shard_keys::<E>(&main));
        tracing::debug!(key = %main, documents = keys.len(), "load");
        let lookup = Lookup {
            keys,
            scans: extra_scans::<E>(&main),
            records: false,
        };
        let read = || async {
            let found = self.store.lookup(&lookup).await?;
            if found.docs.len() != lookup.keys.len() || found.pages.len() != lookup.scans.len() {
                return Err(Error::backend(
                    format!("lookup of {} keys for `{main}`", lookup.keys.len()),
                    format!(
                        "the store answered {} entries and {} pages",
                        found.docs.len(),
                        found.pages.len()
                    ),
                ));
            }
            let extra = self.extra_shards::<E>(&main, found.pages).await?;
            Ok(Arc::new((found.docs, extra)))
        };
        let shared = match &self.reads {
            Some(reads) => {
                reads
                    .read(&(main.clone(), std::any::type_name::<E>()), read)
                    .await?
            }
            None => read().await?,
        };
        let (found, extra) = &*shared;
        let mut found = found.iter();
        let Some(main_doc) = found.next().and_then(Option::as_ref) else {
            return Err(Error::NotFound { key: main });
        };
        let mut entity: E = from_main(id, &main, main_doc)?;

        // Every sharded property found in any shard document is folded, whatever the
        // current annotation says, so switching static <-> dynamic loses nothing.
        for (key, doc) in lookup.keys[1..].iter().zip(found) {
            if let Some(doc) = doc {
                fold_document(&mut entity, key, &doc.doc)?;
            }
        }
        for (key, doc) in extra {
            fold_document(&mut entity, key, &doc.doc)?;
        }

        Ok(entity)
    }
}
