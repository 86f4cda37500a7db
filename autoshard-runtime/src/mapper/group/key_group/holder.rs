//! How a [`GroupTransaction`](super::GroupTransaction) holds its group ([`Holder`]).

use super::{KeyGroup, KeyGroupBuilder};
use crate::key::Key;
use crate::mapper::Mapper;
use std::time::Duration;

/// How a transaction holds its group: its turn on a shared handle, the group a waiting
/// one-shot transaction formed, dissolved at its end, or no group (a one-shot
/// transaction: `one_shot.rs`, and `one_shot_steps.rs` for its commit on a store whose
/// commits stay within one entity group).
pub(super) enum Holder<'g, 'm, S> {
    Shared {
        group: &'g KeyGroup<'m, S>,
        _turn: tokio::sync::MutexGuard<'g, ()>,
    },
    Once(Box<KeyGroup<'m, S>>),
    Ungrouped {
        mapper: &'m Mapper<S>,
        members: Vec<Key>,
        /// How long the group a commit in steps writes owns what it read
        /// (`one_shot_steps.rs`).
        lease: Duration,
        /// With waiting on: the group to form, waiting its turn, when the first load is
        /// refused or keeps meeting changes.
        waiting: Option<KeyGroupBuilder<'m, S>>,
    },
}

impl<'m, S> Holder<'_, 'm, S> {
    pub(super) fn group(&self) -> Option<&KeyGroup<'m, S>> {
        match self {
            Holder::Shared { group, .. } => Some(group),
            Holder::Once(group) => Some(group),
            Holder::Ungrouped { .. } => None,
        }
    }

    pub(super) fn mapper(&self) -> &'m Mapper<S> {
        match self {
            Holder::Shared { group, .. } => group.mapper,
            Holder::Once(group) => group.mapper,
            Holder::Ungrouped { mapper, .. } => mapper,
        }
    }

    pub(super) fn members(&self) -> &[Key] {
        match self {
            Holder::Shared { group, .. } => &group.members,
            Holder::Once(group) => &group.members,
            Holder::Ungrouped { members, .. } => members,
        }
    }
}
