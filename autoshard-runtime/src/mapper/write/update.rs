//! `update`: read-modify-write in one call, with retries. For an unsharded entity this is
//! the plain optimistic transaction on the main document (the paper's naive baseline);
//! for a sharded one, load-modify-save.

use crate::entity::Entity;
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::attempt::Attempt;
use crate::mapper::codec::malformed;
use crate::mapper::layout;
use crate::store::{DocumentStore, Transaction};
use std::ops::ControlFlow;

impl<S: DocumentStore> Mapper<S> {
    /// Loads the entity with this id, applies `change`, and stores the result.
    ///
    /// - Without sharded properties: reads the main document with its version, applies
    ///   `change`, and commits expecting that version; a conflict re-reads and applies
    ///   `change` again (so it may run several times) per the [`crate::RetryPolicy`].
    /// - With sharded properties: `load`, `change`, `save`; `change` runs once, and the
    ///   shard transactions of `save` retry on their own. Concurrent changes to unsharded
    ///   properties are last-writer-wins, as with `save`.
    ///
    /// The entity lives inside the call: after an error or a dropped future its change
    /// may or may not be stored, and running `update` again may apply it twice. A
    /// change that must be applied once takes a name: [`Mapper::update_once`].
    ///
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[derive(Entity, Debug, Clone)]
    /// struct NaiveQuestion {
    ///     #[id]
    ///     id: u64,
    ///     text: String,
    ///     votes: i64,
    /// }
    ///
    /// impl NaiveQuestion {
    ///     fn vote_up(&mut self) {
    ///         self.votes += 1;
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut NaiveQuestion { id: 1, text: "Naive?".into(), votes: 0 }).await?;
    /// let votes = db.update(&1, |q: &mut NaiveQuestion| { q.vote_up(); q.votes }).await?;
    /// assert_eq!(votes, 1);
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(name = "autoshard.update", level = "debug", skip_all, fields(kind = E::KIND, key = %E::key_for(&id.to_owned()), attempts = tracing::field::Empty, outcome = tracing::field::Empty))]
    pub async fn update<E, R, F>(
        &self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
        mut change: F,
    ) -> Result<R>
    where
        E: Root,
        F: FnMut(&mut E) -> R + Send,
        R: Send,
    {
        let id = &id.to_owned();
        if !E::PROPERTIES.is_empty() {
            let mut entity: E = self.load(id).await?;
            let result = change(&mut entity);
            self.save(&mut entity).await?;
            return Ok(result);
        }
        let key = E::key_for(id);
        let _invalidate = self.invalidating(&key);
        let mut retrying = self.retrying("update");
        loop {
            let attempt = self.read_modify_write(id, &key, &mut change);
            if let ControlFlow::Break(result) = retrying.attempt(attempt).await? {
                return Ok(result);
            }
        }
    }

    /// One attempt of the naive optimistic read-modify-write on the main document.
    async fn read_modify_write<E, R, F>(
        &self,
        id: &E::Id,
        key: &Key,
        change: &mut F,
    ) -> Result<Attempt<R>>
    where
        E: Entity,
        F: FnMut(&mut E) -> R + Send,
        R: Send,
    {
        let Some(current) = self.store.get(key).await? else {
            return Err(Error::NotFound { key: key.clone() });
        };
        layout::check_sharded::<E>(key, &current.doc)?;
        let mut entity = E::from_document(id.clone(), &current.doc).map_err(malformed(key))?;
        let result = change(&mut entity);
        let doc = entity.to_document().map_err(malformed(key))?;
        let txn = Transaction::new()
            .expect(key.clone(), Some(current.version))
            .put(key.clone(), doc);
        Ok(self.commit_attempt(&txn).await?.map(|()| result))
    }
}
