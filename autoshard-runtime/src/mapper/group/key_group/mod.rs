//! Key groups (G-Store): transactions across entity groups. A group is formed at run
//! time over root entities of any kinds and ids; while it lives it *owns* every document
//! of its members that a writer could use (the reserved property [`OWNER`] with the
//! group's id and lease, see [`crate::store::ownership`]; not the empty compacted
//! document of an entity without dynamic properties, see [`Member`]), so that only its
//! transactions change them. On a store
//! that commits across entity groups (memory, standalone Redis, PostgreSQL) each step
//! (create, transaction, dissolve) is one atomic commit of the store; on one that does
//! not (a Redis Cluster) the steps follow G-Store's grouping protocol, in `protocol.rs`.
//! Why nothing is lost, counted twice or let through (isolation, serializability,
//! exactly once, one group per key, leases, recovery): the repository's
//! `docs/design/key-groups.md`.
//!
//! Files: `mod.rs`, what the steps share (reading a member, the group's documents,
//! sending a step whose outcome may be unknown); `builder.rs`, [`KeyGroupBuilder`] and
//! creating a group; `handle.rs`, [`KeyGroup`] (renew, dissolve, recovery);
//! `transaction.rs`, [`GroupTransaction`] (its commit in `transaction/commit.rs`), `holder.rs`, how it holds its group, and
//! `reads.rs`, its reads of the store;
//! `protocol.rs`, the steps on a store whose
//! commits stay within one entity group, `in_steps.rs`, a transaction's commit in those
//! steps, `memo.rs`, what a handle knows from its own commits (and the members its
//! transactions read from it), and `release.rs`, dissolving from it; `one_shot.rs`,
//! the one-shot transaction that needs no group, and `one_shot_steps.rs`, its commit on a
//! store whose commits stay within one entity group; `queue.rs`, waiting for members,
//! fairly.

mod builder;
mod handle;
mod holder;
mod in_steps;
mod memo;
pub(in crate::mapper) mod one_shot;
mod one_shot_steps;
mod protocol;
mod queue;
mod read_set;
mod reads;
mod release;
mod transaction;

pub use builder::KeyGroupBuilder;
pub use handle::KeyGroup;
pub use transaction::GroupTransaction;

use crate::document::{Document, Value, Versioned};
use crate::error::{Error, Result};
use crate::group::Root;
use crate::key::Key;
use crate::mapper::Mapper;
use crate::mapper::layout::{self};
use crate::mapper::read::load::{Reading, first_read, one_read_snapshot};
use crate::mapper::read::snapshot::Snapshot;
use crate::store::ownership::{OWNER, Owner};
use crate::store::{Commit, CommitReply, DocumentStore, Found, Lookup, Transaction};
use futures::future::BoxFuture;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// How long a key group owns its members unless told otherwise
/// ([`KeyGroupBuilder::lease`]).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How many times a step whose outcome the store left unknown is checked and sent again.
const RESENDS: u32 = 8;

/// A member as read: its documents (a group writes their owner alone, so their write
/// records need not be read), the documents of its layout that are missing, as a group
/// creates them so that it owns every document a writer could use, and the one document
/// found that no writer uses while the group lives, which the group leaves alone.
pub(super) struct Member {
    found: Arc<Snapshot>,
    missing: Vec<(Key, Document)>,
    unowned: Option<Key>,
}

impl Member {
    /// The documents found that the group owns: all but [`Member::unowned`].
    fn owned(&self) -> impl Iterator<Item = (&Key, &Versioned)> {
        self.found
            .documents()
            .filter(|(key, _)| self.unowned.as_ref() != Some(*key))
    }
}

/// What a document whose next content is `next` becomes when the transaction holding it
/// commits and settles (`protocol`): that content, owned by the group (`released`: held
/// by no transaction).
pub(super) fn committed_content(mut next: Document, released: &Owner) -> Document {
    next.insert(OWNER.to_owned(), released.to_value());
    next
}

/// Reads one member alone.
type ReadMember<S> = for<'a> fn(&'a Mapper<S>, &'a Key) -> BoxFuture<'a, Result<Member>>;

/// How a member of one kind is read: alone, or within one lookup of every member
/// ([`read_members`]).
pub(super) struct MemberKind<S> {
    /// Reads it alone.
    read: ReadMember<S>,
    /// What its first read looks up ([`read_members`] reads it without write records: a
    /// group writes the owner alone).
    first: fn(&Key) -> Lookup,
    /// The member as that lookup found it; `None` when it needs more than that read.
    from_first: fn(&Key, Lookup, Found) -> Result<Option<Member>>,
}

impl<S> Clone for MemberKind<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for MemberKind<S> {}

impl<S: DocumentStore> MemberKind<S> {
    /// How a root entity of kind `E` is read.
    pub(super) fn of<E: Root>() -> Self {
        MemberKind {
            read: read_member::<S, E>,
            first: first_read::<E>,
            from_first: |main, lookup, found| {
                let snapshot = one_read_snapshot::<E>(main, lookup, found)?;
                Ok(snapshot.map(|found| member_of::<E>(main, Arc::new(found))))
            },
        }
    }
}

/// Every member of `members` (each as [`MemberKind`] reads it alone) and the documents at
/// `extra`, in one lookup (with write records when `records`); a member that needs more
/// than its first read is then read alone. Not one snapshot unless the store reads one:
/// what a step writes expects the versions read.
pub(super) async fn read_members<S: DocumentStore>(
    mapper: &Mapper<S>,
    members: &[(Key, MemberKind<S>)],
    extra: &[Key],
    records: bool,
) -> Result<(Vec<Member>, Vec<Option<Versioned>>)> {
    let firsts: Vec<Lookup> = members
        .iter()
        .map(|(main, kind)| (kind.first)(main))
        .collect();
    let (parts, extra) = mapper.lookup_together(&firsts, extra, records).await?;
    let mut read = Vec::with_capacity(members.len());
    for (((main, kind), first), one) in members.iter().zip(firsts).zip(parts) {
        match (kind.from_first)(main, first, one)? {
            Some(member) => read.push(member),
            None => read.push((kind.read)(mapper, main).await?),
        }
    }
    Ok((read, extra))
}

/// Reads one member alone (with write records: a read without them may fold shards on
/// the store, and a group must see every shard document).
fn read_member<'a, S: DocumentStore, E: Root>(
    mapper: &'a Mapper<S>,
    main: &'a Key,
) -> BoxFuture<'a, Result<Member>> {
    Box::pin(async move {
        let found = mapper.read_entity_with::<E>(main, Reading::Whole).await?;
        Ok(member_of::<E>(main, found))
    })
}

/// The member of kind `E` at `main` as read (`found`, with records): with the documents
/// of its layout that are missing, and the one the group leaves alone.
fn member_of<E: Root>(main: &Key, found: Arc<Snapshot>) -> Member {
    let (mut missing, mut unowned) = (Vec::new(), None);
    let Snapshot {
        keys,
        docs,
        scanned: extra,
        .. // (read with records: nothing folded)
    } = &*found;
    if let Some(Some(main_doc)) = docs.first() {
        let mut shard = Document::new();
        if let Some(incarnation) = layout::incarnation(&main_doc.doc) {
            shard.insert(layout::INCARNATION.to_owned(), incarnation.into());
        }
        for (key, doc) in keys.iter().zip(docs).skip(1) {
            if doc.is_none() && layout::static_shard_of(key).is_some() {
                missing.push((key.clone(), shard.clone()));
            }
        }
        // The compacted document, which only compaction writes (and the fold of an
        // adoption into a dynamic property, which moves a value, never changes it):
        // owned for an entity with a dynamic property, or with dynamic shards of a
        // former annotation; else there is nothing to fold while the group lives (a
        // dynamic shard is inserted expecting the main document, which the group owns),
        // and `insert`'s empty one is left alone.
        let compacted = layout::compacted(main);
        let dynamic = layout::dynamic_group(main);
        let has_dynamic_shards = extra
            .iter()
            .any(|(k, _)| k.parent().as_ref() == Some(&dynamic) && *k != compacted);
        let found_compacted = extra.iter().any(|(k, _)| *k == compacted);
        if layout::has_dynamic::<E>() || has_dynamic_shards {
            if !found_compacted {
                missing.push((compacted, Document::new()));
            }
        } else if found_compacted {
            unowned = Some(compacted);
        }
    }
    Member {
        found,
        missing,
        unowned,
    }
}

/// The state document of a group (its lease; later its write records and the
/// transaction in flight) and its list document ([`layout::key_group_members`]: its
/// members and the documents it owns), both owned by the group.
fn group_documents(
    members: &[Key],
    claimed: &BTreeSet<Key>,
    owner: &Owner,
) -> (Document, Document) {
    let keys = |keys: &mut dyn Iterator<Item = &Key>| -> Value {
        keys.map(|k| Value::String(k.encode()))
            .collect::<Vec<_>>()
            .into()
    };
    let mut state = Document::new();
    state.insert(OWNER.to_owned(), owner.to_value());
    let mut list = Document::new();
    list.insert("members".to_owned(), keys(&mut members.iter()));
    list.insert("owned".to_owned(), keys(&mut claimed.iter()));
    list.insert(OWNER.to_owned(), owner.to_value());
    (state, list)
}

/// The documents the group whose state document is `key` owns (its list document
/// among them), as its list document says; none when it has none.
async fn listed<S: DocumentStore>(mapper: &Mapper<S>, key: &Key) -> Result<Vec<Key>> {
    let list_key = layout::key_group_members(key);
    let list = mapper.store.get(&list_key).await?;
    listed_in(&list_key, list.as_ref())
}

/// [`listed`] from the list document at `list_key` as read (`None`: absent).
fn listed_in(list_key: &Key, list: Option<&Versioned>) -> Result<Vec<Key>> {
    let mut owned = match list {
        Some(list) => owned_of(list_key, &list.doc)?,
        None => Vec::new(),
    };
    owned.push(list_key.clone());
    Ok(owned)
}

/// The documents a list document lists as owned.
fn owned_of(key: &Key, doc: &Document) -> Result<Vec<Key>> {
    let bad = || {
        Error::malformed(
            key,
            crate::error::FieldError::new("owned", "expected a list of document keys"),
        )
    };
    doc.get("owned")
        .and_then(Value::as_array)
        .ok_or_else(bad)?
        .iter()
        .map(|k| k.as_str().and_then(|k| Key::decode(k).ok()).ok_or_else(bad))
        .collect()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Commits `txn`, one step of a group whose outcome shows in the group document at
/// `key`: when the store leaves it unknown, reads that document and asks `landed`,
/// sending `txn` again while it did not (a resend expects the same versions, so at most
/// one copy applies). A conflict is checked the same way: a copy sent before may be what
/// changed the versions.
async fn send<S: DocumentStore>(
    mapper: &Mapper<S>,
    txn: &Transaction,
    key: &Key,
    landed: impl Fn(Option<&Versioned>) -> bool,
) -> Result<Commit> {
    Ok(send_versioned(mapper, txn, key, landed).await?.outcome)
}

/// [`send`], with the versions its writes gave where the store tells them (none for a copy
/// found landed by a read).
async fn send_versioned<S: DocumentStore>(
    mapper: &Mapper<S>,
    txn: &Transaction,
    key: &Key,
    landed: impl Fn(Option<&Versioned>) -> bool,
) -> Result<CommitReply> {
    let found = |docs: &[Option<Versioned>]| landed(docs.first().and_then(Option::as_ref));
    resend(mapper, txn, std::slice::from_ref(key), found).await
}

/// Commits `txn`, one step whose outcome shows in the documents at `keys`: when the store
/// leaves it unknown, or a resend conflicts, reads them and asks `landed`, sending `txn`
/// again while it did not (a resend expects the same versions, so at most one copy
/// applies). A copy found landed is answered once that read is durable: the copy was
/// answered with an error, so nothing made it durable (`DocumentStore::make_durable`).
async fn resend<S: DocumentStore>(
    mapper: &Mapper<S>,
    txn: &Transaction,
    keys: &[Key],
    landed: impl Fn(&[Option<Versioned>]) -> bool,
) -> Result<CommitReply> {
    let found_landed = || async {
        if !landed(&mapper.get_exactly(keys).await?) {
            return Ok(false);
        }
        mapper.store.make_durable(keys).await?;
        Ok::<_, Error>(true)
    };
    let landing = || CommitReply::untold(Commit::Committed);
    let mut unknown = None;
    for _ in 0..RESENDS {
        match mapper.store.commit_versioned(txn).await {
            Ok(committed) if committed.outcome == Commit::Committed => return Ok(committed),
            Ok(conflict) if unknown.is_none() => return Ok(conflict),
            // An earlier copy may have landed: its documents say.
            Ok(conflict) => {
                return Ok(if found_landed().await? {
                    landing()
                } else {
                    conflict
                });
            }
            Err(e @ Error::Backend { .. }) => {
                tracing::debug!(keys = ?keys, error = %e, "key group step: outcome unknown");
                if found_landed().await.unwrap_or(false) {
                    return Ok(landing());
                }
                unknown = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(unknown.unwrap_or_else(|| Error::backend("key group step", "no answer")))
}
