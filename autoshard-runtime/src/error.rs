//! The one error type of the runtime.

use crate::key::Key;

/// A `Result` whose error is the runtime's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The field [`Error::Malformed`] names when the whole stored value is wrong (not a
/// document of this store's layout), not one property of it.
pub const WHOLE_DOCUMENT: &str = "(document)";

/// Everything that can go wrong talking to a store through autoshard.
///
/// Errors are cheap to clone (a backend's own error is shared behind an [`Arc`]): every
/// caller that shared a read or a coalesced write gets the same error as the one that
/// made the call, with the address, the operation and the server's words.
///
/// [`Arc`]: std::sync::Arc
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No document at `key`.
    #[error("no document at `{key}`")]
    NotFound {
        /// The key that was looked up.
        key: Key,
    },
    /// No child of this kind and id in any sub-group of the root `root` (a child lives in
    /// one of its root's sub-groups; see [`crate::group`]).
    #[error("no `{kind}` with id `{id}` under `{root}`")]
    ChildNotFound {
        /// The root the child was looked for under.
        root: Key,
        /// The child's kind.
        kind: String,
        /// The child's id, as key text.
        id: String,
    },
    /// `insert` found a document already stored at `key`.
    #[error("a document already exists at `{key}`")]
    AlreadyExists {
        /// The key that was taken.
        key: Key,
    },
    /// An optimistic transaction kept conflicting with concurrent writers until the retry
    /// policy gave up. Nothing of the failed attempts was applied; a sharded entity keeps
    /// its unsaved changes, so calling `save` again can still write them.
    #[error("write contention on `{key}`: gave up after {attempts} attempt(s)")]
    Contention {
        /// The key whose transaction conflicted last.
        key: Key,
        /// How many attempts were made.
        attempts: u32,
    },
    /// A stored document does not decode as what the entity expects: a foreign document
    /// at one of our keys, a missing property, a value of the wrong type.
    #[error("malformed document at `{key}`, property `{field}`: {reason}")]
    Malformed {
        /// The document's key.
        key: Key,
        /// The property that could not be read or written ([`WHOLE_DOCUMENT`] when the
        /// whole stored value is wrong).
        field: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A change this entity sent to `key` earlier, in a save whose outcome stayed unknown
    /// (an error or a dropped future), was first sent longer ago than the mapper's write
    /// window ([`crate::Mapper::with_write_window`]): the store may have forgotten that
    /// it applied it, so it is not sent again. The entity keeps it; reload the entity to
    /// see whether it was stored.
    #[error(
        "a change sent to `{key}` {age:?} ago has an unknown outcome, and the write window is over"
    )]
    Expired {
        /// The document the change was sent to.
        key: Key,
        /// How long ago it was first sent.
        age: std::time::Duration,
    },
    /// A built-in `sum` fold left the range of the property's type. Nothing was written;
    /// a sharded entity keeps the change that would overflow.
    #[error("overflow at `{key}`, property `{property}`: {reason}")]
    Overflow {
        /// The document the sum was folded into.
        key: Key,
        /// The property.
        property: String,
        /// The range it would have left.
        reason: String,
    },
    /// A key (an entity's id, with its kind and parent) is longer than the store takes;
    /// checked before anything is sent, so nothing was written. Each store's limits are
    /// in its module docs under "Limits" (PostgreSQL: keys of at most 1,024 bytes
    /// encoded).
    #[error("{what} is {size} bytes long, over the {limit} bytes {store} takes")]
    TooLarge {
        /// What was too large (the key's kind, never the key itself).
        what: String,
        /// Its size in bytes.
        size: usize,
        /// The store's limit in bytes.
        limit: usize,
        /// The store.
        store: &'static str,
    },
    /// The stored entity keeps `property` in shard documents, but the type it was read
    /// or written as (`kind`) does not shard that field: read as a plain field it would
    /// miss the shards' value, and a write of the main document would drop their record.
    /// Nothing was written. This is what removing `#[shardable]` from a field of stored
    /// entities gives; keep the annotation on the field (autoshard does not fold shards
    /// back into a plain field).
    #[error(
        "`{key}` keeps `{property}` in shards, but `{kind}` does not shard it: keep \
         `#[shardable]` on `{property}` (reading it as a plain field would lose the \
         shards' value)"
    )]
    StillSharded {
        /// The entity's main document.
        key: Key,
        /// The entity kind of the type that read it.
        kind: &'static str,
        /// The property the stored entity keeps in shards.
        property: String,
    },
    /// `key` belongs to a live key group (`Mapper::key_group`), which owns it until
    /// `until_ms` (milliseconds since the Unix epoch, by the store's clock): only the
    /// group's transactions change it meanwhile. Nothing was written; the write can be
    /// made again once the group is dissolved or its lease has passed. A key group, or a
    /// one-shot transaction, that does not wait is also refused for a member a waiting
    /// group queued for (`KeyGroupBuilder::wait`): then `key` is the member's intent
    /// document, `group` the waiter's ticket and `until_ms` the end of its intent.
    #[error("`{key}` belongs to key group `{group}` (leased until {until_ms} ms): nothing written")]
    Grouped {
        /// The document the write would have changed.
        key: Key,
        /// The id of the key group that owns it (or the ticket of the waiter queued for it).
        group: String,
        /// The end of the group's lease (or of the waiter's intent), in milliseconds since
        /// the Unix epoch.
        until_ms: u64,
    },
    /// The key group `group` no longer owns `key`: its lease passed, or it was dissolved.
    /// Nothing of the transaction was written.
    #[error(
        "key group `{group}` no longer owns `{key}` (lease passed or dissolved): nothing written"
    )]
    GroupLost {
        /// The document the group's transaction would have changed.
        key: Key,
        /// The key group's id.
        group: String,
    },
    /// A request that cannot be carried out as asked (for example a transaction spanning
    /// entity groups on a store that commits only within one group).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The store itself failed (connection refused, I/O error, server error...). From a
    /// write, the outcome is unknown: it may have been applied. The mapper keeps what it
    /// sent with its write id, so saving the same entity again applies it exactly once.
    ///
    /// Its text says what the runtime was doing and the backend's reason:
    /// `store error: connecting to Redis at 127.0.0.1:6999: Connection refused (os error
    /// 111)`. It never holds a password.
    #[error("store error: {context}: {source}")]
    Backend {
        /// What the runtime was doing, with the address or key involved.
        context: String,
        /// The backend's own error, shared by every caller that got this error.
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl Error {
    /// A [`Error::Backend`] from any error, with a sentence of context.
    pub fn backend(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error::Backend {
            context: context.into(),
            source: std::sync::Arc::from(source.into()),
        }
    }

    /// Attaches a document key to a [`FieldError`]: [`Error::Overflow`] for an overflow,
    /// [`Error::Malformed`] otherwise.
    #[must_use]
    pub fn malformed(key: &Key, field: FieldError) -> Self {
        if field.overflow {
            return Error::Overflow {
                key: key.clone(),
                property: field.field,
                reason: field.reason,
            };
        }
        Error::Malformed {
            key: key.clone(),
            field: field.field,
            reason: field.reason,
        }
    }

    /// Whether this is [`Error::Contention`].
    #[must_use]
    pub fn is_contention(&self) -> bool {
        matches!(self, Error::Contention { .. })
    }
}

/// A property that failed to convert between an entity and a document, before the key of
/// the document is known. The mapper turns it into [`Error::Malformed`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("property `{field}`: {reason}")]
pub struct FieldError {
    /// The property name as stored.
    pub field: String,
    /// What went wrong.
    pub reason: String,
    /// Whether a built-in fold overflowed (the value was fine, the result is not).
    pub overflow: bool,
}

impl FieldError {
    /// A field error with its reason.
    pub fn new(field: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        FieldError {
            field: field.into(),
            reason: reason.to_string(),
            overflow: false,
        }
    }

    /// A built-in fold of the property overflowed its type.
    pub fn overflow(field: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        FieldError {
            overflow: true,
            ..FieldError::new(field, reason)
        }
    }

    /// The property is absent from the document.
    pub fn missing(field: impl Into<String>) -> Self {
        FieldError::new(field, "missing")
    }
}
