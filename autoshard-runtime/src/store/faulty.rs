//! [`FaultyStore`]: a decorator that makes chosen calls fail, before or after they reach
//! the store underneath, to test what a crash between two steps leaves behind.
//!
//! It only counts and fails calls; it never changes what the inner store does.

use crate::document::{Document, Version, Versioned};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::{
    Commit, CommitReply, DocumentStore, FoldFound, FoldLookup, Found, Lookup, Merge, Merged, Scan,
    ScanPage, Transaction,
};
use async_trait::async_trait;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// When an injected fault strikes, relative to the call it hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// The call fails without reaching the store (a crash just before it).
    Before,
    /// The call reaches the store and takes effect, then fails (a crash just after it,
    /// or a lost reply).
    After,
}

/// Wraps a store and fails its `n`-th call from now, once ([`FaultyStore::fail_call`]),
/// or calls at random ([`FaultyStore::fail_randomly`]), [`Fault::Before`] or
/// [`Fault::After`] the inner store ran it. Clones share the counter and the plan.
///
/// ```
/// use autoshard::store::faulty::{Fault, FaultyStore};
/// use autoshard::Key;
/// use autoshard::store::{DocumentStore, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = FaultyStore::new(MemoryStore::new());
/// let key = Key::new("Counter", "1");
/// store.fail_call(0, Fault::After); // the next call applies, then reports an error
/// assert!(store.put(&key, Default::default()).await.is_err());
/// assert!(store.get(&key).await.unwrap().is_some()); // it was applied all the same
/// assert_eq!((store.calls(), store.faults()), (2, 1));
/// # }
/// ```
#[derive(Clone)]
pub struct FaultyStore<S> {
    inner: S,
    state: Arc<State>,
}

struct State {
    calls: AtomicU64,
    /// The call number to fail (`u64::MAX`: none) and how.
    target: AtomicU64,
    after: std::sync::atomic::AtomicBool,
    faults: AtomicU64,
    /// Fail each call with probability 1 in this (0: never), as `random_after` says.
    one_in: AtomicU64,
    random_after: std::sync::atomic::AtomicBool,
}

impl<S> FaultyStore<S> {
    /// A decorator that injects no fault until told to.
    pub fn new(inner: S) -> Self {
        FaultyStore {
            inner,
            state: Arc::new(State {
                calls: AtomicU64::new(0),
                target: AtomicU64::new(u64::MAX),
                after: std::sync::atomic::AtomicBool::new(false),
                faults: AtomicU64::new(0),
                one_in: AtomicU64::new(0),
                random_after: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Fails the `n`-th call from now (0: the next one), once, as `fault` says. Replaces
    /// any fault planned before.
    pub fn fail_call(&self, n: u64, fault: Fault) {
        let at = self.state.calls.load(Ordering::SeqCst).saturating_add(n);
        self.state
            .after
            .store(fault == Fault::After, Ordering::SeqCst);
        self.state.target.store(at, Ordering::SeqCst);
    }

    /// Fails every call from now on with probability `1 / one_in`, as `fault` says, on
    /// top of any fault planned with [`FaultyStore::fail_call`]; `one_in = 0` stops it.
    ///
    /// ```
    /// use autoshard::store::faulty::{Fault, FaultyStore};
    /// use autoshard::Key;
    /// use autoshard::store::{DocumentStore, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let store = FaultyStore::new(MemoryStore::new());
    /// store.fail_randomly(1, Fault::After); // every call: applied, then an error
    /// assert!(store.put(&Key::new("Counter", "1"), Default::default()).await.is_err());
    /// store.fail_randomly(0, Fault::After);
    /// assert_eq!(store.inner().len(), 1);
    /// # }
    /// ```
    pub fn fail_randomly(&self, one_in: u64, fault: Fault) {
        self.state
            .random_after
            .store(fault == Fault::After, Ordering::SeqCst);
        self.state.one_in.store(one_in, Ordering::SeqCst);
    }

    /// Cancels a planned fault that has not struck yet, and random faults.
    pub fn clear(&self) {
        self.state.target.store(u64::MAX, Ordering::SeqCst);
        self.state.one_in.store(0, Ordering::SeqCst);
    }

    /// How many calls went through this decorator (failed ones included).
    #[must_use]
    pub fn calls(&self) -> u64 {
        self.state.calls.load(Ordering::SeqCst)
    }

    /// How many faults struck so far.
    #[must_use]
    pub fn faults(&self) -> u64 {
        self.state.faults.load(Ordering::SeqCst)
    }

    /// The store underneath.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Counts a call; `Some(fault)` when it is the one to fail.
    fn next_call(&self) -> Option<Fault> {
        let n = self.state.calls.fetch_add(1, Ordering::SeqCst);
        if self
            .state
            .target
            .compare_exchange(n, u64::MAX, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.state.faults.fetch_add(1, Ordering::SeqCst);
            Some(if self.state.after.load(Ordering::SeqCst) {
                Fault::After
            } else {
                Fault::Before
            })
        } else {
            let one_in = self.state.one_in.load(Ordering::SeqCst);
            if one_in == 0 || rand::random_range(0..one_in) != 0 {
                return None;
            }
            self.state.faults.fetch_add(1, Ordering::SeqCst);
            Some(if self.state.random_after.load(Ordering::SeqCst) {
                Fault::After
            } else {
                Fault::Before
            })
        }
    }
}

fn injected(what: &str, fault: Fault) -> Error {
    Error::backend(
        format!("{what} (FaultyStore)"),
        format!("injected fault {fault:?} the call"),
    )
}

impl<S: fmt::Debug> fmt::Debug for FaultyStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyStore")
            .field("inner", &self.inner)
            .field("calls", &self.calls())
            .field("faults", &self.faults())
            .finish_non_exhaustive()
    }
}

/// Runs one call of the inner store through the fault plan.
macro_rules! faulty {
    ($self:ident, $what:literal, $call:expr) => {{
        match $self.next_call() {
            Some(Fault::Before) => Err(injected($what, Fault::Before)),
            Some(Fault::After) => {
                let _ = $call.await;
                Err(injected($what, Fault::After))
            }
            None => $call.await,
        }
    }};
}

// A decorator forwards every method, or the inner store's own (one round trip `lookup`,
// say) would silently be replaced by the trait's default.
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<S: DocumentStore> DocumentStore for FaultyStore<S> {
    async fn get(&self, key: &Key) -> Result<Option<Versioned>> {
        faulty!(self, "get", self.inner.get(key))
    }
    async fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        faulty!(self, "get_many", self.inner.get_many(keys))
    }
    async fn insert(&self, key: &Key, doc: Document) -> Result<Version> {
        faulty!(self, "insert", self.inner.insert(key, doc))
    }
    async fn put(&self, key: &Key, doc: Document) -> Result<Version> {
        faulty!(self, "put", self.inner.put(key, doc))
    }
    async fn delete(&self, key: &Key) -> Result<bool> {
        faulty!(self, "delete", self.inner.delete(key))
    }
    async fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        faulty!(self, "scan", self.inner.scan(scan))
    }
    async fn lookup(&self, lookup: &Lookup) -> Result<Found> {
        faulty!(self, "lookup", self.inner.lookup(lookup))
    }
    async fn fold_lookup(&self, lookup: &FoldLookup) -> Result<FoldFound> {
        faulty!(self, "fold_lookup", self.inner.fold_lookup(lookup))
    }
    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        faulty!(self, "commit", self.inner.commit(txn))
    }
    async fn commit_versioned(&self, txn: &Transaction) -> Result<CommitReply> {
        faulty!(self, "commit", self.inner.commit_versioned(txn))
    }
    async fn merge(&self, merge: &Merge) -> Result<Merged> {
        faulty!(self, "merge", self.inner.merge(merge))
    }
    async fn make_durable(&self, keys: &[Key]) -> Result<()> {
        faulty!(self, "make_durable", self.inner.make_durable(keys))
    }
    fn cross_group_transactions(&self) -> bool {
        self.inner.cross_group_transactions()
    }
    fn snapshot_lookups(&self) -> bool {
        self.inner.snapshot_lookups()
    }
    async fn now_ms(&self) -> Result<u64> {
        faulty!(self, "now_ms", self.inner.now_ms())
    }
}
