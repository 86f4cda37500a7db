//! [`Entities`]: the mapper's operations on one kind, so that closures and results need
//! no type annotation. Each method is the [`Mapper`] method of the same name with the
//! entity type fixed; they share everything (store, retries, caches, metrics) with it.

use super::Mapper;
use crate::error::Result;
use crate::group::Root;
use crate::store::DocumentStore;
use std::fmt;
use std::marker::PhantomData;

/// The operations of a [`Mapper`] on entities of kind `E`, from [`Mapper::entities`].
///
/// `db.update(&1, |q| ...)` cannot tell which entity `q` is (many kinds have `u64` ids);
/// a handle fixes the kind once, and every closure after it infers:
///
/// ```
/// use autoshard::prelude::*;
///
/// #[derive(Entity)]
/// struct Page {
///     #[id]
///     url: String,
///     visits: u64,
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> autoshard::Result<()> {
/// let db = Mapper::new(MemoryStore::new());
/// let pages = db.entities::<Page>();
/// pages.insert(&mut Page { url: "/".into(), visits: 0 }).await?;
/// let visits = pages.update("/", |p| { p.visits += 1; p.visits }).await?;
/// assert_eq!(visits, 1);
/// assert_eq!(pages.load("/").await?.visits, 1);
/// # Ok(())
/// # }
/// ```
pub struct Entities<'m, S, E> {
    mapper: &'m Mapper<S>,
    kind: PhantomData<fn() -> E>,
}

impl<S: DocumentStore> Mapper<S> {
    /// The operations of this mapper on entities of kind `E`: the same methods with the
    /// entity type fixed, so that `update` and `apply` closures infer their argument.
    #[must_use]
    pub fn entities<E: Root>(&self) -> Entities<'_, S, E> {
        Entities {
            mapper: self,
            kind: PhantomData,
        }
    }
}

impl<S: DocumentStore, E: Root> Entities<'_, S, E> {
    /// [`Mapper::insert`].
    pub async fn insert(&self, entity: &mut E) -> Result<()> {
        self.mapper.insert(entity).await
    }

    /// [`Mapper::insert_if_absent`].
    pub async fn insert_if_absent(&self, entity: &mut E) -> Result<bool> {
        self.mapper.insert_if_absent(entity).await
    }

    /// [`Mapper::load`].
    pub async fn load(&self, id: &(impl ToOwned<Owned = E::Id> + ?Sized)) -> Result<E> {
        self.mapper.load::<E>(id).await
    }

    /// [`Mapper::load_many`].
    pub async fn load_many(&self, ids: &[E::Id]) -> Result<Vec<Option<E>>> {
        self.mapper.load_many::<E>(ids).await
    }

    /// [`Mapper::save`].
    pub async fn save(&self, entity: &mut E) -> Result<()> {
        self.mapper.save(entity).await
    }

    /// [`Mapper::update`].
    pub async fn update<R: Send>(
        &self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
        change: impl FnMut(&mut E) -> R + Send,
    ) -> Result<R> {
        self.mapper.update::<E, R, _>(id, change).await
    }

    /// [`Mapper::apply`].
    pub async fn apply(
        &self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
        change: impl FnOnce(&mut E),
    ) -> Result<()> {
        self.mapper.apply::<E, _>(id, change).await
    }

    /// [`Mapper::update_once`].
    pub async fn update_once<R: Send>(
        &self,
        id: &(impl ToOwned<Owned = E::Id> + ?Sized),
        op: &str,
        change: impl FnOnce(&mut E) -> R + Send,
    ) -> Result<super::KeyedOutcome<R>> {
        self.mapper.update_once::<E, R, _>(id, op, change).await
    }

    /// [`Mapper::delete`].
    pub async fn delete(&self, id: &(impl ToOwned<Owned = E::Id> + ?Sized)) -> Result<bool> {
        self.mapper.delete::<E>(id).await
    }
}

impl<S, E> Clone for Entities<'_, S, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S, E> Copy for Entities<'_, S, E> {}

impl<S, E: Root> fmt::Debug for Entities<'_, S, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entities").field("kind", &E::KIND).finish()
    }
}
