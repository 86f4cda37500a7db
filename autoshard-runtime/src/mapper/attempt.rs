//! One place for the mechanics every operation shares: one optimistic attempt
//! ([`Attempt`]) and the decisions of the loop that retries it ([`Retrying`]: whether to
//! try again per the [`RetryPolicy`], how long to wait, what to count and log); reads
//! that check the store's answer ([`Mapper::get_exactly`]); paging through a scan
//! ([`Mapper::scan_all`]). An operation whose attempt is one closure calls
//! [`Mapper::until_committed`] (or `until_committed_uncounted`), which is the whole
//! loop; one that must carry state between attempts or leave the loop with a value of
//! its own (a shard found retired, a value to send elsewhere) writes the `loop` and hands
//! each attempt to [`Retrying::attempt`], so no operation decides a retry, a backoff or a
//! metric itself. An attempt refused because a key group's transaction holds a document
//! past the group's lease (a client that stopped mid-commit) goes again once what holds
//! it is finished ([`Lapsed`]): the lease bounds how long a stopped client blocks a write.

use super::Mapper;
use crate::document::{Document, Versioned};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::metrics::Metrics;
use crate::retry::RetryPolicy;
use crate::store::{Commit, DocumentStore, Lookup, Scan, Transaction};
use futures::future::BoxFuture;
use std::future::Future;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The outcome of one optimistic attempt.
pub(super) enum Attempt<T> {
    Committed(T),
    Conflict(Key),
}

impl<T> Attempt<T> {
    /// The same outcome with `f` applied to a committed value.
    pub(super) fn map<U>(self, f: impl FnOnce(T) -> U) -> Attempt<U> {
        match self {
            Attempt::Committed(value) => Attempt::Committed(f(value)),
            Attempt::Conflict(key) => Attempt::Conflict(key),
        }
    }
}

impl From<Commit> for Attempt<()> {
    fn from(commit: Commit) -> Self {
        match commit {
            Commit::Committed => Attempt::Committed(()),
            Commit::Conflict { key } => Attempt::Conflict(key),
        }
    }
}

impl<S: DocumentStore> Mapper<S> {
    /// The retry loop of one optimistic operation (`what` names it in logs).
    pub(super) fn retrying(&self, what: &'static str) -> Retrying<'_> {
        Retrying {
            policy: &self.retry,
            metrics: &self.metrics,
            lapsed: self,
            what,
            started: Instant::now(),
            attempts: 0,
            finished_holds: 0,
            reported: true,
        }
    }

    /// Runs attempts made by `attempt` under the retry policy until one commits (the
    /// loop of [`Mapper::retrying`] for an operation whose attempts need nothing else
    /// between them); `what` names the operation in logs.
    pub(super) async fn until_committed<T, F, Fut>(
        &self,
        what: &'static str,
        attempt: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Attempt<T>>>,
    {
        until_committed(self.retrying(what), attempt).await
    }

    /// [`Mapper::until_committed`] for a step of an operation that is not an optimistic
    /// operation of its own (the per-document commits of an insert on a store without
    /// cross-group transactions): the policy's retries, left out of the mapper's
    /// [`Metrics`] and of the exported counters and span fields, as an insert's single
    /// commit on other stores is.
    pub(super) async fn until_committed_uncounted<T, F, Fut>(
        &self,
        what: &'static str,
        attempt: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Attempt<T>>>,
    {
        let uncounted = Metrics::new();
        let retrying = Retrying {
            metrics: &uncounted,
            reported: false,
            ..self.retrying(what)
        };
        until_committed(retrying, attempt).await
    }

    /// `get_many`, checking that the store answered one entry per key.
    pub(super) async fn get_exactly(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        one_per_key("get_many", keys, self.store.get_many(keys).await?)
    }

    /// Reads `keys` for a compare-and-set that writes documents back as values
    /// ([`Transaction::put_values`]: the store keeps the write records): without write
    /// records, but `writer`'s own entry where one is named ([`Lookup::writer`]), enough to
    /// tell whether one of its writes landed; with `whole`, with the whole records, for an
    /// attempt that writes the documents back whole ([`Transaction::put`]) to prune them.
    /// Checks that the store answered one entry per key.
    pub(super) async fn get_for_write(
        &self,
        keys: &[Key],
        writer: Option<&Arc<str>>,
        whole: bool,
    ) -> Result<Vec<Option<Versioned>>> {
        let lookup = Lookup {
            keys: keys.to_vec(),
            scans: Vec::new(),
            records: whole,
            writer: writer.filter(|_| !whole).cloned(),
            prefetch: Vec::new(),
        };
        one_per_key("lookup", keys, self.store.lookup(&lookup).await?.docs)
    }

    /// `txn` writing `doc` at `key` as [`Mapper::get_for_write`] read it: whole where
    /// it was read whole, else as values, which keep the write records the store holds.
    pub(super) fn write_back(
        txn: Transaction,
        key: &Key,
        doc: Document,
        whole: bool,
    ) -> Transaction {
        if whole {
            txn.put(key.clone(), doc)
        } else {
            txn.put_values(key.clone(), doc)
        }
    }

    /// Commits `txn` as one optimistic attempt.
    pub(super) async fn commit_attempt(&self, txn: &Transaction) -> Result<Attempt<()>> {
        Ok(self.store.commit(txn).await?.into())
    }

    /// Every document of `scan`, all pages.
    pub(super) async fn scan_all(&self, scan: Scan) -> Result<Vec<(Key, Versioned)>> {
        let mut pages = self.pages(scan);
        let mut items = Vec::new();
        while let Some(page) = pages.next().await? {
            items.extend(page);
        }
        Ok(items)
    }

    /// The pages of `scan`, one [`Pages::next`] at a time.
    pub(super) fn pages(&self, scan: Scan) -> Pages<'_, S> {
        Pages {
            store: &self.store,
            scan: Some(scan),
        }
    }
}

/// `found`, the answer of the read `what` of `keys`, when it has one entry per key.
fn one_per_key(
    what: &str,
    keys: &[Key],
    found: Vec<Option<Versioned>>,
) -> Result<Vec<Option<Versioned>>> {
    if found.len() == keys.len() {
        Ok(found)
    } else {
        Err(Error::backend(
            format!("{what} of {} keys", keys.len()),
            format!("the store answered {} entries", found.len()),
        ))
    }
}

/// Runs attempts made by `attempt` under `retrying` until one commits.
async fn until_committed<T, F, Fut>(mut retrying: Retrying<'_>, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Attempt<T>>>,
{
    loop {
        if let ControlFlow::Break(value) = retrying.attempt(attempt()).await? {
            return Ok(value);
        }
    }
}

/// The pages of one scan, read one at a time.
pub(super) struct Pages<'m, S> {
    store: &'m S,
    /// The request for the next page; `None` after the last one.
    scan: Option<Scan>,
}

impl<S: DocumentStore> Pages<'_, S> {
    /// The next page's documents; `None` after the last page.
    pub(super) async fn next(&mut self) -> Result<Option<Vec<(Key, Versioned)>>> {
        let Some(scan) = &mut self.scan else {
            return Ok(None);
        };
        let page = self.store.scan(scan).await?;
        match page.next {
            Some(cursor) => scan.cursor = Some(cursor),
            None => self.scan = None,
        }
        Ok(Some(page.items))
    }
}

/// How many times one operation goes again after finishing what held a document past its
/// group's lease ([`Lapsed`]): a write that meets such holds on a few documents in turn
/// gets through; one that keeps meeting them (the finishing fails to free the document)
/// fails with the refusal.
const FINISHED_HOLDS: u32 = 4;

/// What a retry loop asks its mapper about an attempt refused for a key group
/// ([`Error::Grouped`]).
pub(super) trait Lapsed: Sync {
    /// Whether `error` refuses a document that a key group's transaction holds past the
    /// group's lease (by the store's clock): when it does, what holds it has been finished
    /// (the group recovered, or a hold whose group is gone dropped), and the attempt,
    /// which wrote nothing, may go again. `false` for anything else.
    fn finish_lapsed<'a>(&'a self, error: &'a Error) -> BoxFuture<'a, Result<bool>>;
}

/// Counts the attempts of one optimistic operation and decides, per the policy, whether
/// to try again: [`Retrying::attempt`] runs one attempt and says whether to go on, until one commits, the policy gives up
/// ([`Error::Contention`]) or one fails.
pub(super) struct Retrying<'m> {
    policy: &'m RetryPolicy,
    metrics: &'m Metrics,
    /// Finishes what holds a document past its group's lease.
    lapsed: &'m dyn Lapsed,
    what: &'static str,
    started: Instant,
    attempts: u32,
    /// How many times an attempt went again after [`Lapsed::finish_lapsed`].
    finished_holds: u32,
    /// Whether the operation's end goes to the span and the exported counters.
    reported: bool,
}

impl Retrying<'_> {
    /// This loop, for an operation that handles refusals for key groups itself (forming a
    /// group, which finishes a lapsed hold it meets and answers any other refusal): a
    /// refusal ends it at once, with no look at the store's clock.
    pub(super) fn leaving_refusals(self) -> Self {
        Retrying {
            finished_holds: FINISHED_HOLDS,
            ..self
        }
    }

    /// Runs one attempt: `Break(value)` when it committed; `Continue` after sleeping
    /// when it conflicted and the policy allows another attempt; the error when the
    /// policy gives up ([`Error::Contention`] naming the conflicting key) or the attempt
    /// failed (never retried: a failed write may have been applied, see the store
    /// contract). Callers loop until `Break`:
    ///
    /// ```text
    /// let mut retrying = self.retrying("update");
    /// loop {
    ///     if let Break(value) = retrying.attempt(self.one_attempt()).await? {
    ///         return Ok(value);
    ///     }
    /// }
    /// ```
    pub(super) async fn attempt<T>(
        &mut self,
        attempt: impl Future<Output = Result<Attempt<T>>>,
    ) -> Result<ControlFlow<T>> {
        self.begin();
        let outcome = attempt.await;
        self.end(outcome).await
    }

    fn begin(&mut self) {
        self.metrics.attempt(self.attempts > 0);
        self.attempts += 1;
    }

    /// `Break(value)` when the attempt committed; `Continue` after sleeping when it
    /// conflicted and the policy allows another attempt; the error otherwise.
    async fn end<T>(&mut self, outcome: Result<Attempt<T>>) -> Result<ControlFlow<T>> {
        let (what, attempts) = (self.what, self.attempts);
        match outcome {
            Ok(Attempt::Committed(value)) => {
                self.metrics.commit();
                tracing::debug!(what, attempts, "committed");
                self.finish("committed");
                Ok(ControlFlow::Break(value))
            }
            Ok(Attempt::Conflict(key)) => {
                self.metrics.conflict();
                #[cfg(feature = "metrics")]
                if self.reported {
                    ::metrics::counter!("autoshard_conflicts_total", "operation" => what)
                        .increment(1);
                }
                if let Some(delay) = self
                    .policy
                    .delay_before_retry(attempts, self.started.elapsed())
                {
                    tracing::debug!(what, key = %key, attempts, ?delay, "conflict; retrying");
                    if delay > Duration::ZERO {
                        tokio::time::sleep(delay).await;
                    }
                    Ok(ControlFlow::Continue(()))
                } else {
                    self.metrics.failure();
                    tracing::debug!(what, key = %key, attempts, "conflict; giving up");
                    self.finish("contention");
                    Err(Error::Contention { key, attempts })
                }
            }
            // A failure to finish what holds the document leaves the refusal as it was.
            Err(e @ Error::Grouped { .. })
                if self.finished_holds < FINISHED_HOLDS
                    && self.lapsed.finish_lapsed(&e).await.unwrap_or(false) =>
            {
                // Nothing was written; what held the document is finished.
                self.finished_holds += 1;
                tracing::debug!(what, attempts, error = %e, "a lapsed hold finished; retrying");
                Ok(ControlFlow::Continue(()))
            }
            Err(e) => {
                self.metrics.failure();
                tracing::debug!(what, attempts, error = %e, "attempt failed");
                self.finish("error");
                Err(e)
            }
        }
    }

    /// Records how the operation ended: on the current span (the `Mapper` operation's,
    /// see the crate docs), and with the `metrics` feature as counters and a latency
    /// histogram labelled with the operation.
    fn finish(&self, outcome: &'static str) {
        if !self.reported {
            return;
        }
        let span = tracing::Span::current();
        span.record("attempts", self.attempts);
        span.record("outcome", outcome);
        #[cfg(feature = "metrics")]
        {
            let what = self.what;
            ::metrics::counter!("autoshard_operations_total", "operation" => what, "outcome" => outcome)
                .increment(1);
            ::metrics::counter!("autoshard_attempts_total", "operation" => what)
                .increment(u64::from(self.attempts));
            ::metrics::counter!("autoshard_retries_total", "operation" => what)
                .increment(u64::from(self.attempts.saturating_sub(1)));
            ::metrics::histogram!("autoshard_operation_seconds", "operation" => what)
                .record(self.started.elapsed().as_secs_f64());
        }
    }
}
