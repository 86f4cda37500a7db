//! Pending changes and write ids: why a change that is sent again is applied at most
//! once.
//!
//! A save takes each change out of its shadow into the entity's pending state
//! ([`crate::EntityState`]) and sends it under a *write id* `(writer, seq)`. Just before
//! the commit is sent, the pending change records the write id and the document it goes
//! to; the record is cleared only when the store answers. So after an error
//! (`Error::Backend`: a lost reply, a dead server) or a dropped future, the entity still
//! knows what it sent, where, and under which id, and the next save sends exactly that
//! again, to that document, before anything new.
//!
//! The store applies a write id at most once because the record of applied ids lives in
//! the document the change folds into, written in the same commit as the fold:
//! - a **static shard** keeps, in its reserved property `~w`, the highest sequence number
//!   it applied from each writer (with the time it did), so a resend first reads the
//!   shard: if it records `seq` or later for the writer, the change is already in, and
//!   nothing is written; otherwise it folds the change and records it, in one commit
//!   that expects the version read;
//! - a **dynamic shard** is named after its write id (`<writer>.<seq>`), and compaction
//!   folds the highest sequence number of each writer it folded into the compacted
//!   document's `~w`; a resend finds the change applied when the named document exists
//!   or the compacted record covers it. Every dynamic insert also expects the compacted
//!   document's version, so an old request that reaches the store after its change was
//!   resent and compacted conflicts instead of adding it again.
//!
//! "Highest sequence number" stands for "every write of this writer up to it" because
//! of two rules of [`Writer`]:
//! 1. a writer is used by one save at a time (a shard lane's writer while the lane is
//!    held, or a writer taken out of the mapper's [`Pool`]), and its sequence numbers
//!    grow, so its writes to any one document are sent one after the other;
//! 2. a writer whose last commit has an unknown outcome is *in doubt* and never sends
//!    again: its next write takes a fresh writer id. So no later write of that writer can
//!    land in a document after a write that is still unresolved.
//!
//! Optimistic commits do the rest: every write expects the versions it read, so a late
//! request with an old version conflicts and applies nothing.
//!
//! # The window
//! Records are kept for [`DEFAULT_WRITE_WINDOW`] (10 minutes, like `DynamoDB`'s client
//! tokens; [`Mapper::with_write_window`](crate::mapper::Mapper::with_write_window) changes it):
//! every write to a document drops the entries of writers that have not written to it
//! for longer. A pending change first sent longer ago than the window is not sent again
//! blindly: the save fails with [`Error::Expired`](crate::Error::Expired) and keeps it.
//! Clocks of the processes sharing a store are assumed to agree to well within the window.
//!
//! Space: one entry per writer that wrote to a document within the window. With shard
//! lanes, one process writes a given shard under one writer (the lane's), so a shard
//! holds about one entry per process, plus one per unresolved failure.

use crate::document::Document;
use crate::entity::{Entity, EntityState, Pending};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::mapper::codec::with_property;
use crate::mapper::layout::{self, has_change};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The reserved property of a shard document that records the write ids it applied.
/// Property names of shard documents are `shard_<field>`, so it collides with none.
pub(in crate::mapper) use crate::store::merge::RECORD;

/// How long a shard document remembers a writer's last write by default.
pub const DEFAULT_WRITE_WINDOW: Duration = Duration::from_mins(10);

/// One sender of writes (module docs, rules 1 and 2).
#[derive(Debug)]
pub(in crate::mapper) struct Writer {
    id: Arc<str>,
    last_seq: u64,
    in_doubt: bool,
}

impl Writer {
    pub(in crate::mapper) fn new() -> Self {
        Writer {
            id: uuid::Uuid::new_v4().simple().to_string().into(),
            last_seq: 0,
            in_doubt: false,
        }
    }

    /// The write id of a commit about to be sent. The writer is in doubt until
    /// [`Writer::settle`]; a writer still in doubt takes a fresh id first.
    pub(in crate::mapper) fn begin(&mut self) -> (Arc<str>, u64) {
        if self.in_doubt {
            *self = Writer::new();
        }
        self.last_seq += 1;
        self.in_doubt = true;
        (self.id.clone(), self.last_seq)
    }

    /// The store answered the commit begun last (committed or conflict).
    pub(in crate::mapper) fn settle(&mut self) {
        self.in_doubt = false;
    }
}

/// Writers for saves that hold no shard lane (dynamic saves, mappers without lanes):
/// each save takes one out and puts it back when done, so the pool grows to the number
/// of concurrent saves and no further.
#[derive(Debug, Default)]
pub(in crate::mapper) struct Pool {
    free: Mutex<Vec<Writer>>,
}

impl Pool {
    pub(in crate::mapper) fn take(&self) -> Pooled<'_> {
        let writer = self
            .free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
            .unwrap_or_else(Writer::new);
        Pooled {
            pool: self,
            writer: Some(writer),
        }
    }
}

/// A writer taken from a [`Pool`]; back in the pool on drop (also when the save's future
/// is dropped, in doubt then).
pub(in crate::mapper) struct Pooled<'p> {
    pool: &'p Pool,
    writer: Option<Writer>,
}

impl Deref for Pooled<'_> {
    type Target = Writer;
    fn deref(&self) -> &Writer {
        self.writer
            .as_ref()
            .expect("a pooled writer is present until drop")
    }
}

impl DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Writer {
        self.writer
            .as_mut()
            .expect("a pooled writer is present until drop")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(writer) = self.writer.take() {
            self.pool
                .free
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(writer);
        }
    }
}

/// Now, in milliseconds since the Unix epoch.
pub(in crate::mapper) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(in crate::mapper) use crate::store::merge::applied;

/// The oldest time (ms) a record written at `now` keeps for a window of `window`.
pub(in crate::mapper) fn horizon(now: u64, window: Duration) -> u64 {
    now.saturating_sub(u64::try_from(window.as_millis()).unwrap_or(u64::MAX))
}

/// Records `(writer, seq)` in `doc` (keeping the higher sequence number if one is there)
/// and drops the entries older than `window`.
pub(in crate::mapper) fn record(
    doc: &mut Document,
    writer: &str,
    seq: u64,
    now: u64,
    window: Duration,
) {
    crate::store::merge::record(doc, writer, seq, now, horizon(now, window));
}

/// The name of the dynamic shard document written under `(writer, seq)`.
pub(in crate::mapper) fn dynamic_name(writer: &str, seq: u64) -> String {
    format!("{writer}.{seq}")
}

/// The write id of a dynamic shard document named by [`dynamic_name`].
pub(in crate::mapper) fn parse_dynamic_name(name: &str) -> Option<(&str, u64)> {
    let (writer, seq) = name.rsplit_once('.')?;
    Some((writer, seq.parse().ok()?))
}

/// Moves the change of every touched shadow of `entity` into its pending state, folded
/// into the change pending already, and resets the shadow. A shadow holding the neutral
/// value is reset without staging anything: it would fold into nothing.
pub(in crate::mapper) fn stage<E: Entity>(entity: &mut E, main: &Key) -> Result<()> {
    for (index, p) in E::PROPERTIES.iter().enumerate() {
        if !has_change(entity, index) {
            entity.reset_shadow(index);
            continue;
        }
        let shadow = entity
            .shadow_value(index)
            .map_err(|e| Error::malformed(main, with_property(e, p.name)))?;
        let pending = state_of(entity, main)?.pending_mut(index);
        let staged = match &pending.value {
            Some(before) => E::fold_values(index, before, &shadow)
                .map_err(|e| Error::malformed(main, with_property(e, p.name)))?,
            None => shadow,
        };
        pending.value = Some(staged);
        entity.reset_shadow(index);
    }
    Ok(())
}

/// The pending change of property `index` of `entity` (empty for an entity without
/// state).
pub(in crate::mapper) fn pending<E: Entity>(entity: &E, index: usize) -> Pending {
    entity
        .state()
        .map(|state| state.pending(index))
        .unwrap_or_default()
}

/// The version of `found`, the main document just read at `main`; [`Error::NotFound`]
/// when it is absent, or when `entity` was loaded from or inserted as another
/// incarnation (the entity was deleted, and a new one inserted under the same id since).
/// An entity built in code and never loaded or inserted knows no incarnation and writes
/// into whichever entity is stored.
pub(in crate::mapper) fn check_same_entity<E: Entity>(
    entity: &E,
    main: &Key,
    found: Option<&crate::document::Versioned>,
) -> Result<crate::document::Version> {
    if let Some(found) = found {
        layout::check_sharded::<E>(main, &found.doc)?;
    }
    check_incarnation(
        entity.state().and_then(EntityState::incarnation),
        main,
        found,
    )
}

/// [`check_same_entity`] for an entity of incarnation `expected` (`None`: any).
pub(in crate::mapper) fn check_incarnation(
    expected: Option<&str>,
    main: &Key,
    found: Option<&crate::document::Versioned>,
) -> Result<crate::document::Version> {
    match found {
        Some(found)
            if expected.is_none_or(|e| layout::incarnation(&found.doc).unwrap_or("") == e) =>
        {
            Ok(found.version)
        }
        _ => Err(Error::NotFound { key: main.clone() }),
    }
}

/// The state of a sharded entity; [`Error::Invalid`] for an entity that keeps none
/// (generated code always does for an entity with sharded properties).
pub(in crate::mapper) fn state_of<'e, E: Entity>(
    entity: &'e mut E,
    main: &Key,
) -> Result<&'e mut EntityState> {
    entity.state_mut().ok_or_else(|| {
        Error::Invalid(format!(
            "`{main}` has sharded properties but keeps no state: derive it with `#[autoshard::sharded]`"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_in_doubt_takes_a_fresh_id() {
        let mut writer = Writer::new();
        let (first, one) = writer.begin();
        writer.settle();
        let (same, two) = writer.begin();
        assert_eq!((first.clone(), one, two), (same, 1, 2));
        let (fresh, seq) = writer.begin();
        assert_ne!(fresh, first);
        assert_eq!(seq, 1);
    }

    #[test]
    fn dynamic_names_carry_their_write_id() {
        let name = dynamic_name("0af3", 17);
        assert_eq!(parse_dynamic_name(&name), Some(("0af3", 17)));
        assert_eq!(parse_dynamic_name("not-a-write-id"), None);
    }
}
