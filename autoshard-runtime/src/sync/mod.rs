//! Concurrency primitives the runtime builds on: the one way it takes a
//! `std::sync::Mutex` ([`lock`]), the relay of a lead from one call to the next
//! (`relay`), and reads shared by concurrent calls (`shared`), on which the mapper's
//! write coalescing and shared loads stand.

pub(crate) mod relay;
pub(crate) mod shared;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, also after a panic while it was held. Every value the runtime keeps under a
/// mutex is changed in single steps that leave it valid (a map insert or remove, a swap
/// of one value), so a lock poisoned by a panic elsewhere holds nothing half-done.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
