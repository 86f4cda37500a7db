//! Child entities of an entity group, spread over the `K` sub-groups of their root
//! (entity-group sharding; the model and its consistency are documented in
//! [`crate::group`]). Inserting places a child in a random sub-group; reading the group is
//! the union of one scan per sub-group; an entity-group transaction stays inside one sub-group.
//!
//! Every write to a sub-group commits together with a rewrite of the sub-group's anchor,
//! expecting the anchor version it read: the sub-group's one commit log. This module never
//! touches property shards; children have none.
//!
//! - `mod.rs`: the operations (`insert_child`, `children`, `update_children`, ...).
//! - `lookup`: which of the `K` sub-groups holds a child with a given id.

pub(in crate::mapper) mod key_group;
mod lookup;

use super::Mapper;
use super::attempt::Attempt;
use super::codec::malformed;
use super::layout;
use crate::document::{Document, Versioned};
use crate::entity::Entity;
use crate::error::{Error, FieldError, Result};
use crate::group::{Child, Root};
use crate::key::{EntityId, Key};
use crate::store::{DocumentStore, Transaction};
use lookup::{decode_child, duplicate, group_shards, not_found};
use rand::RngExt;
use std::collections::HashMap;
use std::ops::ControlFlow;

/// The id type of the root of child kind `C`.
type ParentId<C> = <<C as Child>::Parent as Entity>::Id;

impl<S: DocumentStore> Mapper<S> {
    /// `insert` of a child: the child and its sub-group's anchor in one optimistic commit,
    /// in a sub-group chosen uniformly at random (afresh on every attempt).
    pub(super) async fn insert_child<E: Entity>(&self, entity: &E, root: Key) -> Result<()> {
        let shards = group_shards::<E>()?;
        if !E::PROPERTIES.is_empty() {
            return Err(Error::Invalid(format!(
                "child entities cannot have sharded properties (`{}`)",
                E::KIND
            )));
        }
        let name = entity.id().to_key_name();
        let mut retrying = self.retrying("insert child");
        loop {
            let sub_group = rand::rng().random_range(0..shards);
            let attempt = self.try_insert_child(entity, &root, &name, shards, sub_group);
            if let ControlFlow::Break(()) = retrying.attempt(attempt).await? {
                return Ok(());
            }
        }
    }

    /// One attempt of [`Mapper::insert_child`] into sub-group `sub_group`.
    async fn try_insert_child<E: Entity>(
        &self,
        entity: &E,
        root: &Key,
        name: &str,
        shards: u32,
        sub_group: u32,
    ) -> Result<Attempt<()>> {
        let anchor = layout::sub_group(root, sub_group);
        let key = anchor.child(E::KIND, name);
        let doc = entity.to_document().map_err(malformed(&key))?;
        let mut keys = vec![root.clone(), anchor.clone()];
        keys.extend(layout::child_candidates(root, E::KIND, name, shards));
        let found = self.get_exactly(&keys).await?;
        if found[0].is_none() {
            return Err(Error::NotFound { key: root.clone() });
        }
        if let Some((taken, _)) = keys[2..].iter().zip(&found[2..]).find(|(_, f)| f.is_some()) {
            return Err(Error::AlreadyExists { key: taken.clone() });
        }
        let txn = Transaction::new()
            .expect(anchor.clone(), found[1].as_ref().map(|a| a.version))
            .expect(key.clone(), None)
            .put(anchor, Document::new())
            .put(key.clone(), doc);
        tracing::debug!(key = %key, "insert child");
        self.commit_attempt(&txn).await
    }

    /// Loads the child of kind `C` with id `id` under the root with id `parent`, from
    /// whichever sub-group holds it (the `K` candidate keys are read in one `get_many`).
    ///
    /// Errors: [`Error::NotFound`] when no sub-group holds it; [`Error::Invalid`] when two
    /// do (see [`crate::group`] on unique child ids); [`Error::Malformed`] when the stored
    /// document does not decode or names another parent.
    ///
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[derive(Entity, Debug, Clone)]
    /// #[entity(group_shards = 8)]
    /// struct Topic {
    ///     #[id]
    ///     id: u64,
    ///     title: String,
    /// }
    ///
    /// #[derive(Entity, Debug, Clone)]
    /// #[entity(parent = Topic)]
    /// struct Reply {
    ///     #[id]
    ///     id: u64,
    ///     #[parent]
    ///     topic: u64,
    ///     text: String,
    ///     likes: i64,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Topic { id: 42, title: "Heated?".into() }).await?; // 8 sub-groups
    /// db.insert(&mut Reply { id: 7, topic: 42, text: "Yes".into(), likes: 0 }).await?;
    /// let reply: Reply = db.load_child(&42, &7).await?;
    /// assert_eq!(reply.text, "Yes");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn load_child<C: Child>(
        &self,
        parent: &(impl ToOwned<Owned = ParentId<C>> + ?Sized),
        id: &(impl ToOwned<Owned = C::Id> + ?Sized),
    ) -> Result<C> {
        let id = &id.to_owned();
        let parent = &parent.to_owned();
        let root = C::Parent::key_for(parent);
        let (key, found) = self.locate::<C>(&root, id).await?;
        decode_child::<C>(&root, &key, id.clone(), &found.doc)
    }

    /// The key of the child of kind `C` with id `id` under the root `parent`: which
    /// sub-group holds it (its [`Key::group`]). Two children can be changed together by
    /// [`Mapper::update_children`] exactly when their keys are in the same group
    /// ([`Key::same_group`]). Errors as [`Mapper::load_child`].
    ///
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[derive(Entity, Debug, Clone)]
    /// #[entity(group_shards = 8)]
    /// struct Topic {
    ///     #[id]
    ///     id: u64,
    ///     title: String,
    /// }
    ///
    /// #[derive(Entity, Debug, Clone)]
    /// #[entity(parent = Topic)]
    /// struct Reply {
    ///     #[id]
    ///     id: u64,
    ///     #[parent]
    ///     topic: u64,
    ///     text: String,
    ///     likes: i64,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Topic { id: 3, title: "Where?".into() }).await?;
    /// db.insert(&mut Reply { id: 1, topic: 3, text: "Here".into(), likes: 0 }).await?;
    /// let key = db.child_key::<Reply>(&3, &1).await?;
    /// assert_eq!(key.parent().and_then(|g| g.parent()), Some(Key::new("Topic", "3")));
    /// assert_eq!(key.name(), "1");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn child_key<C: Child>(
        &self,
        parent: &(impl ToOwned<Owned = ParentId<C>> + ?Sized),
        id: &(impl ToOwned<Owned = C::Id> + ?Sized),
    ) -> Result<Key> {
        let id = &id.to_owned();
        let parent = &parent.to_owned();
        let root = C::Parent::key_for(parent);
        Ok(self.locate::<C>(&root, id).await?.0)
    }

    /// Every child of kind `C` of the root with id `parent`: the union of one scan per
    /// sub-group, the scans issued concurrently. Each child stored for the whole call is
    /// returned exactly once; the union is not a snapshot (see [`crate::group`]). The order
    /// is sub-group by sub-group, otherwise unspecified.
    ///
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[derive(Entity, Debug, Clone)]
    /// #[entity(group_shards = 8)]
    /// struct Topic {
    ///     #[id]
    ///     id: u64,
    ///     title: String,
    /// }
    ///
    /// #[derive(Entity, Debug, Clone)]
    /// #[entity(parent = Topic)]
    /// struct Reply {
    ///     #[id]
    ///     id: u64,
    ///     #[parent]
    ///     topic: u64,
    ///     text: String,
    ///     likes: i64,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Topic { id: 1, title: "Hot".into() }).await?;
    /// for id in 0..20 {
    ///     db.insert(&mut Reply { id, topic: 1, text: format!("reply {id}"), likes: 0 }).await?;
    /// }
    /// let mut ids: Vec<u64> = db.children::<Reply>(&1).await?.iter().map(|r| r.id).collect();
    /// ids.sort_unstable();
    /// assert_eq!(ids, (0..20).collect::<Vec<_>>());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn children<C: Child>(
        &self,
        parent: &(impl ToOwned<Owned = ParentId<C>> + ?Sized),
    ) -> Result<Vec<C>> {
        let parent = &parent.to_owned();
        let shards = group_shards::<C>()?;
        let root = C::Parent::key_for(parent);
        let scans = (0..shards).map(|k| self.scan_children::<C>(&root, k));
        let pages = futures::future::try_join_all(scans).await?;
        let mut seen: HashMap<String, Key> = HashMap::new();
        let mut out = Vec::new();
        for (key, versioned) in pages.into_iter().flatten() {
            if let Some(first) = seen.insert(key.name().to_owned(), key.clone()) {
                return Err(duplicate(&first, &key));
            }
            let id = C::Id::from_key_name(key.name()).ok_or_else(|| {
                Error::malformed(
                    &key,
                    FieldError::new("(id)", format!("not an id of `{}`", C::KIND)),
                )
            })?;
            out.push(decode_child::<C>(&root, &key, id, &versioned.doc)?);
        }
        tracing::debug!(root = %root, kind = C::KIND, children = out.len(), "children");
        Ok(out)
    }

    /// The children of kind `C` stored in sub-group `k` of `root`, every page.
    async fn scan_children<C: Child>(&self, root: &Key, k: u32) -> Result<Vec<(Key, Versioned)>> {
        self.scan_all(layout::children_scan(root, C::KIND, k)).await
    }

    /// An entity-group transaction: reads the children `ids` of the root `parent`, which must all
    /// be in **one** sub-group, applies `change` to them (in the order of `ids`), and
    /// commits them together, expecting the versions read and the sub-group's anchor
    /// version. A conflict re-reads and runs `change` again (so it may run several times)
    /// per the [`crate::RetryPolicy`]; when retries run out the error is
    /// [`Error::Contention`] and nothing was written.
    ///
    /// Errors: [`Error::NotFound`] when a child does not exist; [`Error::Invalid`] when the
    /// children are in different sub-groups (with `K > 1` that is the atomicity given up,
    /// see [`crate::group`]), when `ids` repeats an id, or when `change` alters an id or a
    /// parent id.
    ///
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[derive(Entity, Debug, Clone)]
    /// struct Thread {
    ///     #[id]
    ///     id: u64,
    /// }
    ///
    /// #[derive(Entity, Debug, Clone)]
    /// #[entity(parent = Thread)]
    /// struct Post {
    ///     #[id]
    ///     id: u64,
    ///     #[parent]
    ///     thread: u64,
    ///     points: i64,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Thread { id: 1 }).await?; // one group (K = 1)
    /// db.insert(&mut Post { id: 1, thread: 1, points: 10 }).await?;
    /// db.insert(&mut Post { id: 2, thread: 1, points: 0 }).await?;
    /// // Move 3 points from post 1 to post 2, atomically.
    /// db.update_children(&1, &[1, 2], |posts: &mut [Post]| {
    ///     posts[0].points -= 3;
    ///     posts[1].points += 3;
    /// })
    /// .await?;
    /// assert_eq!(db.load_child::<Post>(&1, &2).await?.points, 3);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn update_children<C, R, F>(
        &self,
        parent: &(impl ToOwned<Owned = ParentId<C>> + ?Sized),
        ids: &[C::Id],
        mut change: F,
    ) -> Result<R>
    where
        C: Child,
        F: FnMut(&mut [C]) -> R + Send,
        R: Send,
    {
        let parent = &parent.to_owned();
        let root = C::Parent::key_for(parent);
        let keys = self.locate_in_one_sub_group::<C>(&root, ids).await?;
        let Some(anchor) = keys.first().and_then(Key::parent) else {
            return Ok(change(&mut []));
        };
        let mut retrying = self.retrying("update children");
        loop {
            let attempt = self.try_update_children(&root, &anchor, &keys, ids, &mut change);
            if let ControlFlow::Break(result) = retrying.attempt(attempt).await? {
                return Ok(result);
            }
        }
    }

    /// [`Mapper::update_children`] for one child.
    ///
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[derive(Entity, Debug, Clone)]
    /// #[entity(group_shards = 8)]
    /// struct Topic {
    ///     #[id]
    ///     id: u64,
    ///     title: String,
    /// }
    ///
    /// #[derive(Entity, Debug, Clone)]
    /// #[entity(parent = Topic)]
    /// struct Reply {
    ///     #[id]
    ///     id: u64,
    ///     #[parent]
    ///     topic: u64,
    ///     text: String,
    ///     likes: i64,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Topic { id: 5, title: "Likes".into() }).await?;
    /// db.insert(&mut Reply { id: 1, topic: 5, text: "+1".into(), likes: 0 }).await?;
    /// let likes = db.update_child(&5, &1, |r: &mut Reply| { r.likes += 1; r.likes }).await?;
    /// assert_eq!(likes, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn update_child<C, R, F>(
        &self,
        parent: &(impl ToOwned<Owned = ParentId<C>> + ?Sized),
        id: &(impl ToOwned<Owned = C::Id> + ?Sized),
        mut change: F,
    ) -> Result<R>
    where
        C: Child,
        F: FnMut(&mut C) -> R + Send,
        R: Send,
    {
        let id = &id.to_owned();
        let parent = &parent.to_owned();
        let ids = std::slice::from_ref(id);
        // `update_children` hands `change` exactly one child per id, so `first_mut` is
        // always `Some`.
        self.update_children(parent, ids, |children: &mut [C]| {
            children.first_mut().map(&mut change)
        })
        .await?
        .ok_or_else(|| not_found::<C>(&C::Parent::key_for(parent), &id.to_key_name()))
    }

    /// One attempt of [`Mapper::update_children`] on the located `keys`.
    async fn try_update_children<C, R, F>(
        &self,
        root: &Key,
        anchor: &Key,
        keys: &[Key],
        ids: &[C::Id],
        change: &mut F,
    ) -> Result<Attempt<R>>
    where
        C: Child,
        F: FnMut(&mut [C]) -> R + Send,
        R: Send,
    {
        let mut all = vec![anchor.clone()];
        all.extend(keys.iter().cloned());
        let found = self.get_exactly(&all).await?;
        let mut txn =
            Transaction::new().expect(anchor.clone(), found[0].as_ref().map(|a| a.version));
        let mut children = Vec::with_capacity(keys.len());
        for ((key, id), versioned) in keys.iter().zip(ids).zip(&found[1..]) {
            let Some(versioned) = versioned else {
                return Err(Error::NotFound { key: key.clone() });
            };
            txn = txn.expect(key.clone(), Some(versioned.version));
            children.push(decode_child::<C>(root, key, id.clone(), &versioned.doc)?);
        }
        let result = change(&mut children);
        for (key, child) in keys.iter().zip(&children) {
            if key.name() != child.id().to_key_name() || child.parent_key().as_ref() != Some(root) {
                return Err(Error::Invalid(format!(
                    "an entity-group transaction changed the id or parent of `{key}`; \
                     insert a new child instead"
                )));
            }
            let doc = child.to_document().map_err(malformed(key))?;
            txn = txn.put(key.clone(), doc);
        }
        txn = txn.put(anchor.clone(), Document::new());
        Ok(self.commit_attempt(&txn).await?.map(|()| result))
    }

    /// Deletes the child of kind `C` with id `id` under the root `parent` (with a rewrite
    /// of its sub-group's anchor, retried on conflict). Answers whether it was there.
    pub async fn delete_child<C: Child>(
        &self,
        parent: &(impl ToOwned<Owned = ParentId<C>> + ?Sized),
        id: &(impl ToOwned<Owned = C::Id> + ?Sized),
    ) -> Result<bool> {
        let id = &id.to_owned();
        let parent = &parent.to_owned();
        let root = C::Parent::key_for(parent);
        let key = match self.locate::<C>(&root, id).await {
            Ok((key, _)) => key,
            Err(Error::ChildNotFound { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        let Some(anchor) = key.parent() else {
            return Ok(false);
        };
        let mut retrying = self.retrying("delete child");
        loop {
            let attempt = async {
                let found = self.get_exactly(&[anchor.clone(), key.clone()]).await?;
                let Some(child) = &found[1] else {
                    return Ok(Attempt::Committed(false));
                };
                let txn = Transaction::new()
                    .expect(anchor.clone(), found[0].as_ref().map(|a| a.version))
                    .expect(key.clone(), Some(child.version))
                    .put(anchor.clone(), Document::new())
                    .delete(key.clone());
                Ok(self.commit_attempt(&txn).await?.map(|()| true))
            };
            if let ControlFlow::Break(existed) = retrying.attempt(attempt).await? {
                return Ok(existed);
            }
        }
    }

    /// Deletes the root `parent` of child kind `C` (with its property shards, as
    /// [`Mapper::delete`]), then every child of kind `C` and the anchor of every
    /// sub-group, one commit per sub-group and scan page. Answers whether the root was
    /// there.
    ///
    /// Not atomic across sub-groups: a failure midway leaves some children without their
    /// root (inserting new children under a deleted root fails with
    /// [`Error::NotFound`]); running it again finishes the job. A root with several child
    /// kinds needs one call per kind (the first one deletes the root).
    ///
    /// ```
    /// use autoshard::prelude::*;
    ///
    /// #[derive(Entity, Debug, Clone)]
    /// #[entity(group_shards = 8)]
    /// struct Topic {
    ///     #[id]
    ///     id: u64,
    ///     title: String,
    /// }
    ///
    /// #[derive(Entity, Debug, Clone)]
    /// #[entity(parent = Topic)]
    /// struct Reply {
    ///     #[id]
    ///     id: u64,
    ///     #[parent]
    ///     topic: u64,
    ///     text: String,
    ///     likes: i64,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let db = Mapper::new(MemoryStore::new());
    /// db.insert(&mut Topic { id: 9, title: "Gone soon".into() }).await?;
    /// db.insert(&mut Reply { id: 1, topic: 9, text: "bye".into(), likes: 0 }).await?;
    /// assert!(db.delete_group::<Reply>(&9).await?);
    /// assert!(db.children::<Reply>(&9).await?.is_empty());
    /// assert!(!db.delete_group::<Reply>(&9).await?); // safe to run again
    /// # Ok(())
    /// # }
    /// ```
    pub async fn delete_group<C>(
        &self,
        parent: &(impl ToOwned<Owned = ParentId<C>> + ?Sized),
    ) -> Result<bool>
    where
        C: Child,
        C::Parent: Root,
    {
        let parent = &parent.to_owned();
        let shards = group_shards::<C>()?;
        let root = C::Parent::key_for(parent);
        tracing::debug!(root = %root, kind = C::KIND, "delete group");
        let existed = self.delete::<C::Parent>(parent).await?;
        for k in 0..shards {
            let anchor = layout::sub_group(&root, k);
            let mut pages = self.pages(layout::children_scan(&root, C::KIND, k));
            while let Some(page) = pages.next().await? {
                if !page.is_empty() {
                    let txn = page
                        .into_iter()
                        .fold(Transaction::new(), |txn, (key, _)| txn.delete(key));
                    // No expectations: a delete cannot conflict.
                    let _ = self.store.commit(&txn).await?;
                }
            }
            self.store.delete(&anchor).await?;
        }
        Ok(existed)
    }
}
