//! Following concurrent writers by counts, never by time: [`Tally`] counts their
//! acknowledged and failed calls as they happen, and [`wait_until`] waits for a count.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The acknowledged and failed calls of concurrent writers, counted as they happen.
#[derive(Default)]
pub struct Tally {
    acked: AtomicU64,
    failed: AtomicU64,
}

impl Tally {
    /// Counts one acknowledged call.
    pub fn ack(&self) {
        self.acked.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts one failed call.
    pub fn fail(&self) {
        self.failed.fetch_add(1, Ordering::SeqCst);
    }

    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::SeqCst)
    }

    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::SeqCst)
    }
}

/// How long [`wait_until`] waits before it fails the test: a bound for a broken run, far
/// above what any run needs (the waits are for events, not for time to pass).
pub const WAIT_BOUND: Duration = Duration::from_mins(3);

/// Waits until `done` holds, checking every few milliseconds; fails the test saying
/// `what` after [`WAIT_BOUND`].
pub async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT_BOUND;
    while !done() {
        assert!(Instant::now() < deadline, "waited too long for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Saves `entity` until a save succeeds, counting each failure in `tally` (and the
/// success once), with a short pause after each; every failure must be one a server
/// that dies explains (`Error::Backend`, `Error::Contention`). Returns how many saves
/// failed.
pub async fn save_until_stored<S, E>(
    db: &autoshard::Mapper<S>,
    entity: &mut E,
    tally: &Tally,
) -> u64
where
    S: autoshard::store::DocumentStore,
    E: autoshard::group::Root,
{
    let mut failures = 0;
    while let Err(err) = db.save(entity).await {
        assert!(
            matches!(
                err,
                autoshard::Error::Backend { .. } | autoshard::Error::Contention { .. }
            ),
            "{err:?}"
        );
        failures += 1;
        tally.fail();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tally.ack();
    failures
}
