//! The one way the runtime takes a `std::sync::Mutex`.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, also after a panic while it was held. Every value the runtime keeps under a
/// mutex is changed in single steps that leave it valid (a map insert or remove, a swap
/// of one value), so a lock poisoned by a panic elsewhere holds nothing half-done.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
