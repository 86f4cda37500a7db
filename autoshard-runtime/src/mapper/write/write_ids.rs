//! Pending changes and write ids: why a change sent again is applied at most once.
//!
//! A save moves each change from its shadow into the entity's pending state and sends it
//! under one [`WriteId`] fixed just before the first send ([`Writer::begin`]); the pending
//! change keeps that id and the document it went to until the store answers. A document
//! records the ids it applied in the same commit as the fold (`~w` of a static shard or the
//! compacted document; a dynamic shard is named after its id), so a resend finds its change
//! applied or applies it.
//!
//! Invariants (the rules of [`Writer`]): one save at a time uses a writer, its sequence
//! numbers grow, and a writer in doubt never sends again. Records are kept for the write
//! window ([`DEFAULT_WRITE_WINDOW`]); a change first sent longer ago fails with
//! [`crate::Error::Expired`]. The argument, the window and the space it
//! takes: `docs/design/exactly-once.md`, "Pending changes and write ids".

//!
//! Shard lanes (which shard a write goes to, and the writer it is sent under): in one
//! process, at most one read-fold-commit at a time per shard document. Tasks of one
//! [`Mapper`] (and its clones) that fold into the same shard would otherwise read the same
//! version and all but one conflict; a lane makes them queue instead, and a writer first
//! looks for a shard whose lane is free, so concurrent writers of one process spread over
//! the shards. Writers in other processes still meet through the store's optimistic
//! commit, which alone keeps counts exact: lanes only cut conflicts. Each lane owns the
//! [`Writer`] its holder sends under, so one process writes a given shard under one writer
//! id and the shard's record of applied writes stays about one entry per process. Lanes
//! are a fixed set of striped locks (a shard document maps to one by the hash of its key),
//! so memory stays bounded whatever the number of entities; two shards that share a stripe
//! merely queue behind each other.
use crate::document::Document;
use crate::entity::{Entity, EntityState, Pending, Sent};
use crate::error::{Error, Result};
use crate::key::{FastHasher, Key};
use crate::mapper::Mapper;
use crate::mapper::codec::with_property;
use crate::mapper::layout;
use crate::store::WriteId;
use crate::store::ownership::system_now_ms;
use crate::sync::lock;
use rand::RngExt;
use std::hash::BuildHasher;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Mutex as LaneLock, MutexGuard as LaneGuard};

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

    /// The write id of a commit about to be sent now, whose record documents keep for
    /// `window`. The writer is in doubt until [`Writer::settle`]; a writer still in doubt
    /// takes a fresh id first.
    pub(in crate::mapper) fn begin(&mut self, window: Duration) -> WriteId {
        if self.in_doubt {
            *self = Writer::new();
        }
        self.last_seq += 1;
        self.in_doubt = true;
        // Write ids are stamped by the writer's clock, not the store's.
        let at_ms = system_now_ms();
        WriteId {
            writer: self.id.clone(),
            seq: self.last_seq,
            at_ms,
            horizon_ms: horizon(at_ms, window),
        }
    }

    /// The sequence number of the write id [`Writer::begin`] gives next.
    pub(in crate::mapper) fn next_seq(&self) -> u64 {
        if self.in_doubt { 1 } else { self.last_seq + 1 }
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
        let writer = lock(&self.free).pop().unwrap_or_else(Writer::new);
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
            lock(&self.pool.free).push(writer);
        }
    }
}

/// Whether `doc` records `write` (or a later write of its writer) as applied.
pub(in crate::mapper) fn applied(doc: Option<&Document>, write: &WriteId) -> bool {
    crate::store::merge::applied(doc, &write.writer, write.seq)
}

/// The oldest time (ms) a record written at `now` keeps for a window of `window`.
pub(in crate::mapper) fn horizon(now: u64, window: Duration) -> u64 {
    now.saturating_sub(u64::try_from(window.as_millis()).unwrap_or(u64::MAX))
}

/// Records `write` in `doc` (keeping the higher sequence number if one is there) and
/// drops the entries older than its horizon.
pub(in crate::mapper) fn record(doc: &mut Document, write: &WriteId) {
    crate::store::merge::record(doc, &write.writer, write.seq, write.at_ms, write.horizon_ms);
}

/// The name of the dynamic shard document written under `write`.
pub(in crate::mapper) fn dynamic_name(write: &WriteId) -> String {
    format!("{}.{}", write.writer, write.seq)
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

impl<S> Mapper<S> {
    /// Records in the read cache, if any, that the write `sent` of property `stored_as`
    /// of the entity at `main` was confirmed (its value is the change it carried).
    pub(in crate::mapper) fn confirmed(&self, main: &Key, stored_as: &'static str, sent: &Sent) {
        if let Some(cache) = &self.cache {
            cache.confirm(main, stored_as, sent, self.write_window);
        }
    }

    /// [`Error::Expired`] when `sent` was first sent longer ago than the write window.
    pub(in crate::mapper) fn check_window(&self, sent: &Sent) -> Result<()> {
        let age = Duration::from_millis(system_now_ms().saturating_sub(sent.write.at_ms));
        if age > self.write_window {
            return Err(Error::Expired {
                key: sent.shard.clone(),
                age,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_in_doubt_takes_a_fresh_id() {
        let window = DEFAULT_WRITE_WINDOW;
        let mut writer = Writer::new();
        let first = writer.begin(window);
        writer.settle();
        let same = writer.begin(window);
        assert_eq!((&first.writer, first.seq, same.seq), (&same.writer, 1, 2));
        let fresh = writer.begin(window);
        assert_ne!(fresh.writer, first.writer);
        assert_eq!(fresh.seq, 1);
    }

    #[test]
    fn dynamic_names_carry_their_write_id() {
        let write = WriteId {
            writer: "0af3".into(),
            seq: 17,
            at_ms: 0,
            horizon_ms: 0,
        };
        let name = dynamic_name(&write);
        assert_eq!(parse_dynamic_name(&name), Some(("0af3", 17)));
        assert_eq!(parse_dynamic_name("not-a-write-id"), None);
    }
}

/// Whether the shadow of property `index` holds a change worth writing: touched, and not
/// the neutral value. A shard method marks every shadow of the entity touched, and folding
/// the neutral value into a shard changes nothing, so such a shadow costs no write. When a
/// value cannot be encoded the shadow counts as changed, so the save reports the error.
pub(in crate::mapper) fn has_change<E: Entity>(entity: &E, index: usize) -> bool {
    entity.shadow_touched(index)
        && match (entity.shadow_value(index), E::neutral_value(index)) {
            (Ok(shadow), Ok(neutral)) => shadow != neutral,
            _ => true,
        }
}

/// Stripes of the lanes of one mapper.
const STRIPES: usize = 1024;

/// How many random shards a writer tries for a free lane before it waits on one.
const FREE_LANE_TRIES: usize = 4;

/// Picks one shard for each entry of `shard_counts` (see [`Lanes::hold`]); without
/// lanes, uniformly at random, holding only a writer from `pool`.
pub(in crate::mapper) async fn hold<'l>(
    lanes: Option<&'l Lanes>,
    pool: &'l Pool,
    shard_counts: &[u32],
    key: impl Fn(usize, u32) -> Key,
) -> (Vec<Key>, Held<'l>) {
    let (keys, guards) = if let Some(lanes) = lanes {
        lanes.hold(shard_counts, key).await
    } else {
        let mut rng = rand::rng();
        let keys = shard_counts
            .iter()
            .enumerate()
            .map(|(i, &shards)| key(i, rng.random_range(0..shards.max(1))))
            .collect();
        (keys, Vec::new())
    };
    let held = Held {
        guards,
        pool,
        pooled: None,
    };
    (keys, held)
}

/// The lanes: each stripe's lock holds the writer its holders send under, drawn at the
/// stripe's first use (a writer id is a random UUID, one draw from the operating system),
/// so that a new `Mapper` does not draw one per stripe.
#[derive(Debug)]
pub(in crate::mapper) struct Lanes {
    stripes: Vec<LaneLock<Option<Writer>>>,
    hasher: FastHasher,
}

/// The lanes one attempt holds, released on drop (also when its future is dropped), and
/// the writer it sends under: the first held lane's, or a pooled one when it holds none.
pub(in crate::mapper) struct Held<'l> {
    guards: Vec<LaneGuard<'l, Option<Writer>>>,
    pool: &'l Pool,
    pooled: Option<Pooled<'l>>,
}

impl Held<'_> {
    /// The writer of this attempt, used by no other attempt while held.
    pub(in crate::mapper) fn writer(&mut self) -> &mut Writer {
        match self.guards.first_mut() {
            Some(guard) => guard.get_or_insert_with(Writer::new),
            None => self.pooled.get_or_insert_with(|| self.pool.take()),
        }
    }
}

impl Lanes {
    pub(in crate::mapper) fn new() -> Self {
        Lanes {
            stripes: (0..STRIPES).map(|_| LaneLock::new(None)).collect(),
            hasher: FastHasher::default(),
        }
    }

    fn stripe(&self, key: &Key) -> usize {
        (self.hasher.hash_one(key) % STRIPES as u64) as usize
    }

    /// Picks one shard index in `0..shards` for each entry of `shard_counts` and holds
    /// the lanes of the chosen shard documents (`key(i, shard)` names them). A shard
    /// whose lane is free is preferred (a few random tries per property); otherwise the
    /// lanes are awaited in stripe order, so writers never deadlock.
    pub(in crate::mapper) async fn hold(
        &self,
        shard_counts: &[u32],
        key: impl Fn(usize, u32) -> Key,
    ) -> (Vec<Key>, Vec<LaneGuard<'_, Option<Writer>>>) {
        let (keys, guards, all_free) = self.try_hold(shard_counts, &key);
        if all_free {
            return (keys, guards);
        }
        // Some lane is busy: release what is held and wait for all in stripe order.
        drop(guards);
        let mut stripes: Vec<usize> = keys.iter().map(|k| self.stripe(k)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for stripe in stripes {
            guards.push(self.stripes[stripe].lock().await);
        }
        (keys, guards)
    }

    /// The choice of [`Lanes::hold`] without waiting: the keys chosen, the lanes taken,
    /// and whether every chosen lane was taken.
    fn try_hold(
        &self,
        shard_counts: &[u32],
        key: &impl Fn(usize, u32) -> Key,
    ) -> (Vec<Key>, Vec<LaneGuard<'_, Option<Writer>>>, bool) {
        let mut rng = rand::rng();
        let mut keys = Vec::with_capacity(shard_counts.len());
        let mut guards = Vec::with_capacity(shard_counts.len());
        let mut held_stripes = Vec::new();
        let mut all_free = true;
        for (i, &shards) in shard_counts.iter().enumerate() {
            let mut chosen = None;
            for _ in 0..FREE_LANE_TRIES {
                let shard = rng.random_range(0..shards.max(1));
                let k = key(i, shard);
                let stripe = self.stripe(&k);
                if held_stripes.contains(&stripe) {
                    chosen = Some(k);
                    break;
                }
                if let Ok(guard) = self.stripes[stripe].try_lock() {
                    guards.push(guard);
                    held_stripes.push(stripe);
                    chosen = Some(k);
                    break;
                }
            }
            if let Some(k) = chosen {
                keys.push(k);
            } else {
                all_free = false;
                keys.push(key(i, rng.random_range(0..shards.max(1))));
            }
        }
        (keys, guards, all_free)
    }
}
