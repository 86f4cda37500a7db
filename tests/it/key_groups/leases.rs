//! What a key group's lease ends: a document held past its group's lease (by a plain write
//! and by a hold whose group document is gone), a join that lands late, a group abandoned
//! without being dissolved, and one whose state document sits where earlier releases put
//! it; each without waiting on this machine's speed (the leases are judged by the store's
//! clock, `faults::after`).

use super::faults::after;
use super::{INITIAL, group_of, load_all, memory_stores, open_accounts};

use async_trait::async_trait;
use autoshard::prelude::*;
use autoshard::store::{
    Commit, CommitReply, Document, DocumentStore, FoldFound, FoldLookup, Found, Lookup, Merge,
    Merged, Owner, Scan, ScanPage, Transaction, Version, Versioned,
};
use autoshard_test_support::entities::Account;
use autoshard_test_support::every_store::Backend;
use autoshard_test_support::store::TestStore;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A store that commits within one entity group only, and whose first join of `key` (a
/// commit stamping an owner on it) is answered with a lost reply while the request stays
/// on its way, to land once `release` is notified: G-Store's delayed join.
#[derive(Debug, Clone)]
struct LateJoin {
    inner: Arc<TestStore<MemoryStore>>,
    key: autoshard::Key,
    fired: Arc<std::sync::atomic::AtomicBool>,
    release: Arc<tokio::sync::Notify>,
    landed: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<Result<Commit>>>>>,
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl DocumentStore for LateJoin {
    async fn get(&self, key: &autoshard::Key) -> Result<Option<Versioned>> {
        self.inner.get(key).await
    }
    async fn get_many(&self, keys: &[autoshard::Key]) -> Result<Vec<Option<Versioned>>> {
        self.inner.get_many(keys).await
    }
    async fn insert(&self, key: &autoshard::Key, doc: Document) -> Result<Version> {
        self.inner.insert(key, doc).await
    }
    async fn put(&self, key: &autoshard::Key, doc: Document) -> Result<Version> {
        self.inner.put(key, doc).await
    }
    async fn delete(&self, key: &autoshard::Key) -> Result<bool> {
        self.inner.delete(key).await
    }
    async fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        self.inner.scan(scan).await
    }
    async fn lookup(&self, lookup: &Lookup) -> Result<Found> {
        self.inner.lookup(lookup).await
    }
    async fn fold_lookup(&self, lookup: &FoldLookup) -> Result<FoldFound> {
        self.inner.fold_lookup(lookup).await
    }
    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        Ok(self.commit_versioned(txn).await?.outcome)
    }
    async fn commit_versioned(&self, txn: &Transaction) -> Result<CommitReply> {
        let join = txn.writes().iter().any(|(key, write)| {
            *key == self.key
                && match write {
                    autoshard::store::Write::Put(doc) | autoshard::store::Write::Values(doc) => {
                        doc.contains_key(autoshard::store::OWNER)
                    }
                    autoshard::store::Write::Own(owner) => owner.is_some(),
                    autoshard::store::Write::Delete => false,
                }
        });
        if join && txn.owner().is_none() && !self.fired.swap(true, Ordering::SeqCst) {
            let (inner, txn, release) = (self.inner.clone(), txn.clone(), self.release.clone());
            let late = tokio::spawn(async move {
                release.notified().await;
                inner.commit(&txn).await
            });
            *self.landed.lock().unwrap() = Some(late);
            return Err(Error::backend(
                "join",
                "the reply was lost; the request is on its way",
            ));
        }
        self.inner.commit_versioned(txn).await
    }
    async fn merge(&self, merge: &Merge) -> Result<Merged> {
        self.inner.merge(merge).await
    }
    async fn now_ms(&self) -> Result<u64> {
        self.inner.now_ms().await
    }
    fn cross_group_transactions(&self) -> bool {
        false
    }
    fn snapshot_lookups(&self) -> bool {
        false
    }
    async fn make_durable(&self, keys: &[autoshard::Key]) -> Result<()> {
        self.inner.make_durable(keys).await
    }
}

/// Account 1's main document as a transaction `cut` of group `group` holds it (until
/// `until_ms`), with a next content that counts 99 transfers; written with `token` (the
/// group's, while it owns the document; without one once its lease has passed, however
/// slow the steps before were).
async fn hold_main<S: DocumentStore>(store: &S, group: &str, until_ms: u64, token: Option<&str>) {
    let main = autoshard::Key::new("Account", "1");
    let found = store.get(&main).await.unwrap().unwrap();
    let mut next = found.doc.clone();
    next.insert("transfers".to_owned(), 99.into());
    next.remove(autoshard::store::OWNER);
    let mut held = found.doc.clone();
    held.insert(
        autoshard::store::OWNER.to_owned(),
        serde_json::json!({"group": group, "until": until_ms, "txn": "cut"}),
    );
    held.insert(
        "~next".to_owned(),
        serde_json::Value::Object(next.into_iter().collect()),
    );
    let put = Transaction::new()
        .expect(main.clone(), Some(found.version))
        .put(main.clone(), held);
    let committed = match token {
        Some(token) => match store.commit(&put.clone().owned_by(token.to_owned())).await {
            Err(Error::GroupLost { .. }) => store.commit(&put).await,
            other => other,
        },
        None => store.commit(&put).await,
    };
    assert_eq!(committed.unwrap(), Commit::Committed);
}

/// A document held by a transaction of a group whose group document is gone (what a copy
/// of a one-shot commit's prepare leaves when it lands after its group was finished) is
/// dropped by the next one-shot transaction, group or plain write that meets it: its
/// change is not applied, and the account takes every write again.
#[tokio::test]
async fn a_hold_whose_group_is_gone_is_dropped() {
    for (meet, (_, shaped, label)) in ["once", "create", "update"]
        .into_iter()
        .flat_map(|meet| memory_stores().map(|shape| (meet, shape)))
    {
        let db = Mapper::new(shaped.clone());
        open_accounts(&db, 1..=2).await;
        hold_main(&shaped, "gone", 0, None).await;

        match meet {
            "create" => group_of(&db, &[1, 2])
                .create()
                .await
                .unwrap()
                .dissolve()
                .await
                .unwrap(),
            "once" => {
                let mut txn = group_of(&db, &[1, 2]).once().await.unwrap();
                let accounts = load_all(&mut txn, &[1, 2]).await.unwrap();
                assert_eq!(
                    accounts[0].transfers, 0,
                    "{label}: the dropped change was read"
                );
                txn.commit().await.unwrap();
            }
            _ => db
                .update(&1, |a: &mut Account| a.transfers += 1)
                .await
                .map(drop)
                .unwrap(),
        }
        db.apply(&1, |a: &mut Account| a.deposit(1)).await.unwrap();
        let one = db.load::<Account>(&1).await.unwrap();
        let transfers = u64::from(meet == "update");
        assert_eq!(
            (one.transfers, one.balance),
            (transfers, INITIAL + 1),
            "{label}, {meet}"
        );
    }
}

/// A plain write that meets a document a group's transaction holds past the group's
/// lease (its client stopped mid-commit) finishes that group, as `recover_key_groups`
/// would, and gets through: no one has to call recovery for a stopped client to stop
/// blocking writes once its lease has passed.
#[tokio::test]
async fn a_plain_write_finishes_a_hold_past_its_lease() {
    for (_, shaped, label) in memory_stores() {
        let db = Mapper::new(shaped.clone());
        open_accounts(&db, 1..=2).await;
        let group = group_of(&db, &[1])
            .lease(Duration::from_millis(100))
            .create()
            .await
            .unwrap();
        let (id, until) = (group.id().to_owned(), group.until_ms());
        hold_main(&shaped, &id, until, Some(&id)).await;
        drop(group);
        after(&shaped, until).await;

        db.update(&1, |a: &mut Account| a.transfers += 1)
            .await
            .unwrap();
        let one = db.load::<Account>(&1).await.unwrap();
        assert_eq!(one.transfers, 1, "{label}: the cut change was applied");
        assert_eq!(db.recover_key_groups().await.unwrap(), 0, "{label}");
    }
}

/// G-Store's ghost group (its Figure 5): a join whose reply is lost lands after the group
/// it was for gave up. The aborted create rewrote the document, so the late join finds
/// another version and changes nothing: no key is left owned by a group that is gone.
#[tokio::test]
async fn a_join_that_lands_late_leaves_no_ghost_group() {
    let (_, shaped, _) = memory_stores().into_iter().nth(1).unwrap();
    let main = autoshard::Key::new("Account", "1");
    let store = LateJoin {
        inner: shaped,
        key: main.clone(),
        fired: Arc::default(),
        release: Arc::new(tokio::sync::Notify::new()),
        landed: Arc::default(),
    };
    let db = Mapper::new(store.clone());
    open_accounts(&db, 1..=2).await;
    // The join of account 1's main document seems lost: the create gives up.
    let refused = group_of(&db, &[1, 2]).create().await;
    assert!(matches!(refused, Err(Error::Backend { .. })), "{refused:?}");
    store.release.notify_one();
    let late = store
        .landed
        .lock()
        .unwrap()
        .take()
        .expect("the join was held");
    assert!(
        matches!(late.await.unwrap(), Ok(Commit::Conflict { .. })),
        "the late join landed"
    );
    let doc = store.get(&main).await.unwrap().unwrap();
    assert_eq!(Owner::of(&doc.doc), None, "a ghost owner: {doc:?}");
    db.apply(&1, |a: &mut Account| a.deposit(1)).await.unwrap();
    db.apply(&2, |a: &mut Account| a.deposit(1)).await.unwrap();
    // Nothing else stayed owned either: a group over both forms at once.
    group_of(&db, &[1, 2])
        .create()
        .await
        .unwrap()
        .dissolve()
        .await
        .unwrap();
}

/// A group dropped without being dissolved owns its members until its lease passes (by
/// the store's clock); then they take writes again, and `recover_key_groups` tidies it
/// away, from any client.
async fn an_abandoned_group_ends_with_its_lease(backend: &Backend, label: &str) {
    let (store, _) = abandoned_group(backend, "keygroup_abandoned").await;
    // Another client.
    let other = Mapper::new(store.clone());
    other
        .apply(&1, |a: &mut Account| a.deposit(1))
        .await
        .unwrap();
    assert_eq!(other.recover_key_groups().await.unwrap(), 1, "{label}");
    assert_eq!(other.recover_key_groups().await.unwrap(), 0, "{label}");
    other
        .apply(&2, |a: &mut Account| a.deposit(1))
        .await
        .unwrap();
    let total: i64 = other
        .load_many::<Account>(&[1, 2])
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.unwrap().balance)
        .sum();
    assert_eq!(total, 2 * INITIAL + 2, "{label}");
}

mod abandoned {
    autoshard_test_support::every_store!(super::an_abandoned_group_ends_with_its_lease);
}

/// A store in namespace `name` with accounts 1 and 2 and a group of both dropped without
/// being dissolved, once its lease has passed (by the store's clock); and the group's id.
async fn abandoned_group(backend: &Backend, name: &str) -> (Arc<dyn DocumentStore>, String) {
    let store = backend.store(name).await;
    let db = Mapper::new(store.clone());
    open_accounts(&db, 1..=2).await;
    let lease = Duration::from_millis(300);
    let group = group_of(&db, &[1, 2]).lease(lease).create().await.unwrap();
    let (id, until) = (group.id().to_owned(), group.until_ms());
    drop(group);
    after(&store, until).await;
    (store, id)
}

/// The stored names of a key group's state document: a child of one of 16 roots
/// (`~keygroups`), picked by its id; a state document stored as a root document of kind
/// `~keygroup` (where earlier releases put it) is still found. A group abandoned under
/// that name is recovered once its lease has passed, like any other.
async fn a_group_stored_as_a_root_document_is_recovered(backend: &Backend, label: &str) {
    let (store, id) = abandoned_group(backend, "keygroup_root_state").await;
    let roots = (0..16).map(|bucket| Key::new("~keygroups", bucket.to_string()));
    let state_keys = roots.map(|root| root.child("~keygroup", id.as_str()));
    let mut found = Vec::new();
    for key in state_keys {
        if let Some(doc) = store.get(&key).await.unwrap() {
            found.push((key, doc));
        }
    }
    assert_eq!(
        found.len(),
        1,
        "{label}: one state document, under one root"
    );
    let (key, state) = found.pop().unwrap();
    let list_key = key.child("~members", "");
    let list = store
        .get(&list_key)
        .await
        .unwrap()
        .expect("its list document");
    // Moved to the root placement, as a build that wrote it there left it.
    let root_key = Key::new("~keygroup", id.as_str());
    store.put(&root_key, state.doc).await.unwrap();
    store
        .put(&root_key.child("~members", ""), list.doc)
        .await
        .unwrap();
    store.delete(&list_key).await.unwrap();
    store.delete(&key).await.unwrap();
    let other = Mapper::new(store.clone());
    assert_eq!(other.recover_key_groups().await.unwrap(), 1, "{label}");
    assert_eq!(other.recover_key_groups().await.unwrap(), 0, "{label}");
    assert!(store.get(&root_key).await.unwrap().is_none(), "{label}");
    let group = group_of(&other, &[1, 2]).create().await.unwrap();
    group.dissolve().await.unwrap();
}

mod root_state {
    autoshard_test_support::every_store!(super::a_group_stored_as_a_root_document_is_recovered);
}
