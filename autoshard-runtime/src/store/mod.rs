//! Where entities are stored: the backends, and the [`DocumentStore`] trait of raw
//! operations they provide (nothing typed: entities, folds and retries live in the
//! mapper, not in stores).
//!
//! | Store | For |
//! |---|---|
//! | [`MemoryStore`] | embedded, in process: tests, examples, single-process apps |
//! | [`redis::RedisStore`] (feature `redis`, on by default) | Redis standalone and Redis Cluster |
//! | [`postgres::PostgresStore`] (feature `postgres`) | PostgreSQL 12 or later |
//! | `Arc<dyn DocumentStore>` | any of them, chosen at run time |
//!
//! Decorators add behaviour to any store: [`LatencyStore`] (a modelled round trip, for
//! benchmarks) and [`FaultyStore`] (lost replies and failed commits, for tests).
//! Backends are modules named after what they talk to; a backend of your own passes
//! the conformance suite (`autoshard::conformance`, feature `conformance`).

use crate::error::Result;
use crate::key::Key;
use async_trait::async_trait;
use std::fmt;
use std::sync::Arc;

#[cfg(any(feature = "redis", feature = "postgres"))]
mod clock;
pub mod faulty;
pub mod fold_lookup;
pub mod latency;
pub mod memory;
pub mod merge;
pub mod ownership;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
mod transaction;

pub use crate::document::{Document, Value, Version, Versioned};
pub use faulty::{Fault, FaultyStore};
pub use fold_lookup::{FoldFound, FoldLookup, Folded};
pub use latency::LatencyStore;
pub use memory::MemoryStore;
pub use merge::{Elements, Fold, Merge, Merged, WriteId};
pub use ownership::{OWNER, Owner};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresStore};
#[cfg(feature = "redis")]
pub use redis::{RedisOptions, RedisStore};
pub use transaction::{Commit, CommitReply, Transaction, Write};

/// A document store with per-document versions and optimistic multi-document commits.
///
/// Object-safe: `Arc<dyn DocumentStore>` and `Box<dyn DocumentStore>` are stores too.
/// Every backend and every decorator passes the same conformance suite
/// (`autoshard::conformance`, feature `conformance`), which has a case for each
/// promise below.
///
/// # Contract
/// Keys belong to entity groups ([`Key::group`]): the unit a store reads and commits
/// atomically. The mapper relies on exactly these promises and on nothing else.
///
/// **Versions.** Every write of a document (`insert`, `put`, a committed `Put`) gives it
/// a new [`Version`], and a version is never handed out again for that key, also not
/// after a delete and re-insert: equal versions mean no write happened in between (no
/// ABA). Versions carry no order that callers may rely on.
///
/// **Reads.**
/// - `get` and `get_many` return the latest committed state; `get_many` answers one
///   entry per key, in the order asked (repeated keys repeated, `None` for missing ones).
/// - The entries of one `get_many` for keys of **one** group are one atomic read of that
///   group (a snapshot). Entries of different groups are not read atomically together.
///
/// **Scans.**
/// - A scan lists the documents of one kind whose parent ([`Key::parent`]) is the given
///   key (root documents for `None`), both those in the parent's group ([`Key::child`])
///   and those in groups of their own ([`Key::child_group`]); never other kinds, never
///   grandchildren.
/// - Over all its pages, a document that exists for the whole scan is listed exactly
///   once; one written or deleted meanwhile may or may not be.
/// - One page holds at most [`Scan::limit`] documents and may hold fewer; a store may
///   split a scan into pages as it likes.
/// - A page listing children that share their parent's group is one atomic read of that
///   group. Nothing is promised about several pages taken together.
/// - **No order is promised**, within a page or across pages.
///
/// **Writes.**
/// - A write of a document with a value nested deeper than
///   [`MAX_NESTING`](crate::document::MAX_NESTING) levels (`insert`, `put`, or any write
///   of a commit) is refused with [`Error::Invalid`](crate::Error::Invalid), and nothing
///   of it is written: every store reads back what it writes.
/// - `insert` fails with [`Error::AlreadyExists`](crate::Error::AlreadyExists) naming
///   the key when a document is there, and then changes nothing.
/// - `commit` applies all of a [`Transaction`]'s writes atomically if every expected
///   version still holds (`None`: the key is absent), and answers
///   [`Commit::Committed`]; otherwise it applies nothing and answers
///   [`Commit::Conflict`] naming one key whose expectation failed. A conflict is a
///   definite outcome: nothing was written. Of two transactions expecting the same
///   version of a key, at most one commits.
/// - A committed [`Write::Own`] changes only the document's [`OWNER`] property and its
///   version (the other properties and the write record stay as they were); of an absent
///   document it writes nothing.
/// - A committed [`Write::Values`] stores the document's properties as a `Put` does, but
///   keeps the write record the store held for the key and adds the entries the
///   written document's record carries (an entry replaces its writer's); a document
///   read without its record and written back so loses no writer's entry. A record that
///   is not a map carries no entry ([`merge::with_kept_record`]).
/// - A record entry counts only as [`merge::RECORD`] says (its first two elements
///   integers within `u64`): a store may keep or drop any other, and it records no
///   write for any reader, merge or values write.
/// - [`DocumentStore::commit_versioned`] commits as `commit` does and may tell, for a
///   committed transaction, the version each write gave its document ([`CommitReply`]);
///   a store that tells tells them right, and one that does not answers `None`.
/// - A transaction whose keys all share one group commits atomically on every store. One
///   that spans groups does so only where [`DocumentStore::cross_group_transactions`]
///   says so; elsewhere it is rejected with [`Error::Invalid`](crate::Error::Invalid)
///   and nothing is applied.
///
/// **Lookups.** [`DocumentStore::lookup`] answers, for its keys, what `get_many` would,
/// and for each of its scans the page `scan` would, with the same guarantees each (and
/// nothing more: the parts are not one snapshot together). A store may answer it all in
/// one round trip. With [`Lookup::records`] off, a document may come without its write
/// record ([`merge::RECORD`]): for reads that never write the document back, or write
/// it back as a [`Write::Values`]. [`Lookup::writer`] names a writer whose entry comes
/// all the same: exactly the entry a read with records would answer for that writer,
/// or none where that read would answer none.
/// [`Lookup::prefetch`] is a hint that never changes the answer.
///
/// **Snapshot lookups.** Where [`DocumentStore::snapshot_lookups`] says so, everything one
/// `lookup` answers (every document, of any group, and every page) is one atomic read: the
/// store as it was at one instant. A one-shot key-group transaction then reads its members
/// in one lookup instead of checking them with a commit
/// ([`KeyGroupBuilder::once`](crate::mapper::KeyGroupBuilder::once)).
///
/// **Folding lookups.** [`DocumentStore::fold_lookup`] answers what [`fold_lookup::reference`]
/// answers for the documents `get_many` would read (a snapshot per group, the folded values
/// included), except that it may answer [`Folded::Unsupported`] for any property.
///
/// **Merges.** [`DocumentStore::merge`] folds an operand into one property of one
/// document with a built-in [`Fold`], atomically, exactly as [`merge::reference`] specifies:
/// only when the document exists (and its guard holds), at most once per write id (the
/// document's [`merge::RECORD`] property records the highest sequence number applied per
/// writer, in the same step), and with a new version, so a concurrent commit expecting
/// the old one conflicts. A store may answer [`Merged::Unsupported`] for values it
/// cannot fold exactly, writing nothing; it never folds inexactly. A merge into the
/// store's own properties ([`merge::RECORD`], [`OWNER`]) is refused with
/// [`Error::Invalid`](crate::Error::Invalid).
///
/// **Ownership.** Every write (each key a `commit` expects or writes, and `merge`, `put`,
/// `delete`) follows [`ownership::check`] for the reserved property [`OWNER`], judged by
/// the store's clock ([`DocumentStore::now_ms`]) in the same atomic step as the write: a
/// document a live key group owns takes only that group's transactions
/// ([`Transaction::owned_by`]), and a transaction of a group takes only documents the group
/// owns (or absent ones). A refusal ([`Error::Grouped`](crate::Error::Grouped),
/// [`Error::GroupLost`](crate::Error::GroupLost)) writes nothing. A commit that both
/// conflicts and is refused may answer either.
///
/// **Durability of what a read showed.** A store may show a write before it is as
/// durable as the writes it acknowledges: a Redis master shows a write its replicas do
/// not hold yet, whose writer was answered with an error. An answer that acknowledges a
/// write on the strength of a read (a write id found recorded, a marker found present)
/// therefore first calls [`DocumentStore::make_durable`] on what it read; a `merge`
/// answering [`Merged::AlreadyApplied`] does the same itself. A store whose reads show
/// only what is as durable as its acknowledged writes keeps the default, which does
/// nothing.
///
/// **Errors.** [`Error::Backend`](crate::Error::Backend) from a read means nothing was
/// read. From a write (`insert`, `put`, `delete`, `commit`) it is **ambiguous**: the
/// request may have been applied in full or not at all, never in part (a commit is
/// atomic either way). A caller that must not apply a write twice cannot retry it blindly.
/// A write whose future is dropped after it was sent is just as ambiguous; reads may be
/// dropped at any time.
///
/// **Not promised:** any order of scan results; atomicity across groups (without
/// cross-group transactions) or across several calls; that a scan over several pages
/// is a snapshot; how long a version or key stays valid beyond what is written above.
///
/// # Wrappers
/// A decorator (a store that wraps another: [`faulty::FaultyStore`],
/// [`latency::LatencyStore`], `Arc<S>`, `Box<S>`) implements **every** method, the
/// provided ones included, and forwards what it does not change: a provided method it
/// leaves out runs the trait's default on top of the wrapper instead of the inner store's
/// own (a store's one-round-trip `lookup` would become a `get_many` and scans). Put
/// `#[deny(clippy::missing_trait_methods)]` on the impl so that a method added to the
/// trait cannot be forgotten.
#[async_trait]
pub trait DocumentStore: Send + Sync + fmt::Debug {
    /// Reads one document.
    async fn get(&self, key: &Key) -> Result<Option<Versioned>>;

    /// Reads many documents in one round trip per entity group at most; the answer has
    /// one entry per key, in order. The entries of keys in one group are one snapshot.
    async fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>>;

    /// Stores a new document; [`crate::Error::AlreadyExists`] when `key` is taken.
    async fn insert(&self, key: &Key, doc: Document) -> Result<Version>;

    /// Stores a document whatever was there.
    async fn put(&self, key: &Key, doc: Document) -> Result<Version>;

    /// Deletes a document; `true` when one was there.
    async fn delete(&self, key: &Key) -> Result<bool>;

    /// Lists documents of `scan.kind` whose parent is `scan.parent` (root documents when
    /// `None`), one page at a time, in no promised order (see the contract above: what
    /// a page and a whole scan guarantee).
    async fn scan(&self, scan: &Scan) -> Result<ScanPage>;

    /// Reads documents by key and the first page of scans, in one round trip where the
    /// store can (see the contract above). The default implementation runs `get_many`
    /// and the scans concurrently.
    async fn lookup(&self, lookup: &Lookup) -> Result<Found> {
        let pages = futures::future::try_join_all(lookup.scans.iter().map(|s| self.scan(s)));
        let (docs, pages) = futures::try_join!(self.get_many(&lookup.keys), pages)?;
        Ok(Found { docs, pages })
    }

    /// Reads an entity's main document and shard documents, folding the given properties
    /// of the shards on the store (see the contract above and [`fold_lookup`]): one value
    /// per property instead of one per shard.
    ///
    /// The default implementation reads the documents with `lookup` (without write
    /// records) and folds them with [`fold_lookup::reference`]
    /// ([`fold_lookup::by_lookup`]). A backend that can aggregate on its server more
    /// cheaply than it reads the shards overrides it.
    async fn fold_lookup(&self, lookup: &FoldLookup) -> Result<FoldFound> {
        fold_lookup::by_lookup(self, lookup).await
    }

    /// Applies `txn` atomically if every read it lists still has the version it expects;
    /// otherwise applies nothing and answers [`Commit::Conflict`].
    async fn commit(&self, txn: &Transaction) -> Result<Commit>;

    /// [`DocumentStore::commit`], telling also the version each write of a committed
    /// transaction gave its document, where the store knows them ([`CommitReply`]): a
    /// caller that writes those documents next can expect them instead of reading them
    /// again. The default commits with `commit` and tells none.
    ///
    /// ```
    /// use autoshard::Key;
    /// use autoshard::store::{Commit, DocumentStore, MemoryStore, Transaction};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> autoshard::Result<()> {
    /// let store = MemoryStore::new();
    /// let key = Key::new("Counter", "hits");
    /// let txn = Transaction::new()
    ///     .expect(key.clone(), None)
    ///     .put(key.clone(), [("n".to_owned(), 1.into())].into());
    /// let committed = store.commit_versioned(&txn).await?;
    /// assert_eq!(committed.outcome, Commit::Committed);
    /// let told = committed.versions.unwrap_or_default();
    /// assert_eq!(told, [store.get(&key).await?.map(|d| d.version)]);
    /// # Ok(())
    /// # }
    /// ```
    async fn commit_versioned(&self, txn: &Transaction) -> Result<CommitReply> {
        Ok(CommitReply::untold(self.commit(txn).await?))
    }

    /// Folds `merge.operand` into one property of one document with a built-in fold,
    /// atomically and at most once per write id (see the contract above and
    /// [`merge`]). Not a read-modify-write from the caller's side: no version to expect,
    /// so concurrent merges never conflict.
    ///
    /// The default implementation reads the document and commits [`merge::reference`]'s
    /// result expecting the version read, again after each conflict: correct on any
    /// store, but with the round trips and conflicts of a compare-and-set. Backends that
    /// can fold on the server override it.
    ///
    /// # Errors
    /// [`crate::Error::Overflow`] for a sum out of bounds (nothing written), and what
    /// `get` and `commit` return.
    async fn merge(&self, merge: &Merge) -> Result<Merged> {
        loop {
            let current = self.get(&merge.key).await?;
            let doc = match merge::reference(current.as_ref().map(|c| &c.doc), merge)? {
                merge::Step::Write(doc) => doc,
                merge::Step::Answer(Merged::AlreadyApplied) => {
                    // Answered from a read: the write it stands for may not be durable.
                    self.make_durable(std::slice::from_ref(&merge.key)).await?;
                    return Ok(Merged::AlreadyApplied);
                }
                merge::Step::Answer(answer) => return Ok(answer),
            };
            let txn = Transaction::new()
                .expect(merge.key.clone(), current.map(|c| c.version))
                .put(merge.key.clone(), doc);
            if self.commit(&txn).await? == Commit::Committed {
                return Ok(Merged::Applied);
            }
        }
    }

    /// Returns once what reads of `keys` have shown is as durable as a write this store
    /// acknowledges: a failover that keeps every acknowledged write keeps it too. Called
    /// before an answer that acknowledges a write on the strength of a read (see the
    /// contract above, "Durability of what a read showed"), never on the common path.
    ///
    /// The default does nothing: right for a store whose reads show only what is as
    /// durable as its acknowledged writes (a store in this process). Redis with
    /// `RedisOptions::wait_for_replicas` makes a write that changes nothing in each key's
    /// entity group and waits for the replicas on the same connection; a master's
    /// replication stream is ordered, so their acknowledgement covers everything the
    /// reads saw. PostgreSQL commits a transaction that writes to the log, which waits
    /// for synchronous standbys where the server has them.
    ///
    /// # Errors
    /// [`crate::Error::Backend`] when that durability could not be reached (fewer
    /// replicas acknowledged in time): the caller must not acknowledge the write.
    async fn make_durable(&self, keys: &[Key]) -> Result<()> {
        let _ = keys;
        Ok(())
    }

    /// Whether a transaction may touch several entity groups (a standalone server can; a
    /// Redis Cluster commits within one group, one slot, only).
    fn cross_group_transactions(&self) -> bool {
        true
    }

    /// Whether one [`lookup`](DocumentStore::lookup) is one atomic read of everything it
    /// answers, across entity groups and with its pages (see the contract above): one
    /// `MULTI` or script on a standalone Redis, one statement on PostgreSQL, one lock in
    /// memory. The default says no, which is always right.
    fn snapshot_lookups(&self) -> bool {
        false
    }

    /// The store's clock, in milliseconds since the Unix epoch: the clock key-group
    /// leases ([`ownership`]) are judged by. The default is the system clock of this
    /// process, right for a store in this process; a server answers its own, and may
    /// answer from a recent reading of it plus the time elapsed here, as long as the
    /// answer is never ahead of the server's clock (Redis and PostgreSQL read it at most
    /// once per half second): a lease this answer says has passed has passed on the
    /// server.
    async fn now_ms(&self) -> Result<u64> {
        Ok(ownership::system_now_ms())
    }
}

/// One page request of [`DocumentStore::scan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    /// The kind of the documents to list.
    pub kind: String,
    /// Their parent key; `None` lists root documents of the kind.
    pub parent: Option<Key>,
    /// Where to go on: `None` on the first call, then [`ScanPage::next`]. A cursor that
    /// names no key is refused with [`Error::Invalid`](crate::Error::Invalid).
    pub cursor: Option<String>,
    /// An upper bound on the page size (at least 1). Stores may return fewer.
    pub limit: usize,
}

impl Scan {
    /// The key its page starts after, from [`Scan::cursor`] (`None` for a first page).
    /// Every store refuses a cursor that names no key with
    /// [`Error::Invalid`](crate::Error::Invalid), before reading anything.
    pub(crate) fn cursor_key(&self) -> Result<Option<Key>> {
        self.cursor
            .as_deref()
            .map(|cursor| {
                Key::decode(cursor)
                    .map_err(|e| crate::Error::Invalid(format!("bad scan cursor: {e}")))
            })
            .transpose()
    }

    /// The first page of documents of `kind` under `parent`, up to 1,000 at a time.
    pub fn new(kind: impl Into<String>, parent: Option<Key>) -> Self {
        Scan {
            kind: kind.into(),
            parent,
            cursor: None,
            limit: 1000,
        }
    }

    /// The same scan with another page size.
    #[must_use]
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit.max(1);
        self
    }
}

/// Documents by key and first pages of scans, read together by
/// [`DocumentStore::lookup`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lookup {
    /// Documents to read, as `get_many` would.
    pub keys: Vec<Key>,
    /// Scans whose first page to read, as `scan` would.
    pub scans: Vec<Scan>,
    /// Whether documents must come with their write record ([`merge::RECORD`]); without
    /// it a store may leave the record out (cheaper where a document records many
    /// writers).
    pub records: bool,
    /// With `records` off, the one writer whose entry of each document's write record
    /// comes all the same (where the document records one): a caller that only needs to
    /// know whether its own write landed reads one entry, not every writer's. The record
    /// may come with other entries too; with `records` on, this changes nothing.
    pub writer: Option<std::sync::Arc<str>>,
    /// Documents the scans are likely to list (not answered as documents). A store that
    /// lists a page without reading its documents may read these in the same step and
    /// answer a page whose members are all among them (or among `keys`) from there,
    /// instead of reading the page again; the answer is the same with or without them.
    pub prefetch: Vec<Key>,
}

/// The answer to a [`Lookup`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Found {
    /// One entry per key, in order, as `get_many` answers.
    pub docs: Vec<Option<Versioned>>,
    /// One page per scan, in order.
    pub pages: Vec<ScanPage>,
}

/// One page of a scan.
#[derive(Clone, Debug, PartialEq)]
pub struct ScanPage {
    /// The documents of this page.
    pub items: Vec<(Key, Versioned)>,
    /// The cursor of the next page; `None` when the scan is complete.
    pub next: Option<String>,
}

macro_rules! forward_store {
    ($($wrapper:ty),*) => {$(
        #[deny(clippy::missing_trait_methods)]
        #[async_trait]
        impl<S: DocumentStore + ?Sized> DocumentStore for $wrapper {
            async fn get(&self, key: &Key) -> Result<Option<Versioned>> {
                (**self).get(key).await
            }
            async fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
                (**self).get_many(keys).await
            }
            async fn insert(&self, key: &Key, doc: Document) -> Result<Version> {
                (**self).insert(key, doc).await
            }
            async fn put(&self, key: &Key, doc: Document) -> Result<Version> {
                (**self).put(key, doc).await
            }
            async fn delete(&self, key: &Key) -> Result<bool> {
                (**self).delete(key).await
            }
            async fn scan(&self, scan: &Scan) -> Result<ScanPage> {
                (**self).scan(scan).await
            }
            async fn lookup(&self, lookup: &Lookup) -> Result<Found> {
                (**self).lookup(lookup).await
            }
            async fn fold_lookup(&self, lookup: &FoldLookup) -> Result<FoldFound> {
                (**self).fold_lookup(lookup).await
            }
            async fn commit(&self, txn: &Transaction) -> Result<Commit> {
                (**self).commit(txn).await
            }
            async fn commit_versioned(&self, txn: &Transaction) -> Result<CommitReply> {
                (**self).commit_versioned(txn).await
            }
            async fn merge(&self, merge: &Merge) -> Result<Merged> {
                (**self).merge(merge).await
            }
            async fn make_durable(&self, keys: &[Key]) -> Result<()> {
                (**self).make_durable(keys).await
            }
            fn cross_group_transactions(&self) -> bool {
                (**self).cross_group_transactions()
            }
            fn snapshot_lookups(&self) -> bool {
                (**self).snapshot_lookups()
            }
            async fn now_ms(&self) -> Result<u64> {
                (**self).now_ms().await
            }
        }
    )*};
}
forward_store!(Arc<S>, Box<S>);
