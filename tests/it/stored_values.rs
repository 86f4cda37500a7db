//! What a load and a merge do with the values they find stored, on every store (memory,
//! standalone Redis, a 3-node Redis Cluster and PostgreSQL):
//! - a sum is checked against its type on the total over the shards, never on a partial
//!   sum (`[i64::MAX, -89_000, 203_000, -402_500]` loads);
//! - a merge never folds into a stored value the property's type cannot hold (a negative
//!   number in a `u64` shard, integers in a set of strings, a number of 30 digits): the
//!   mapper answers `Malformed` naming the shard and writes nothing, as the reference
//!   does, on every store;
//! - no stored value makes a store panic (PostgreSQL: `1e400`, a document that is not an
//!   object);
//! - a recorded layout that claims more shards than any layout can have is `Malformed`
//!   for loads and writes, never a read of billions of shard documents;
//! - the PostgreSQL store never touches the application's objects in a schema they share.

use autoshard::prelude::*;
use autoshard::store::postgres::{PostgresOptions, PostgresStore};
use autoshard::store::{Document, Fold, Version};
use autoshard::store::{Merge, Merged, WriteId};
use autoshard::{ReadCache, layout};
use autoshard_test_support::every_store::Backend;
use autoshard_test_support::postgres::Postgres;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;

#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(kind = "Totals")]
struct Totals {
    #[id]
    id: u64,
    #[shardable(shards = 4, fold = sum)]
    n: i64,
}

/// One shard per property, so that a merge lands in the shard the test spoils.
#[autoshard::sharded]
#[derive(Entity, Debug, Clone)]
#[entity(kind = "Typed")]
struct Typed {
    #[id]
    id: u64,
    #[shardable(neutral = 0, shards = 1, fold = max)]
    best: u64,
    #[shardable(shards = 1, fold = union)]
    tags: BTreeSet<String>,
    #[shardable(shards = 1, fold = sum)]
    count: i64,
}

impl Totals {
    #[shard_method]
    fn add(&mut self, by: i64) {
        self.n += by;
    }
}

impl Typed {
    #[shard_method]
    fn score(&mut self, score: u64) {
        self.best = self.best.max(score);
    }

    #[shard_method]
    fn tag(&mut self, tag: &str) {
        self.tags.insert(tag.to_owned());
    }

    #[shard_method]
    fn bump(&mut self) {
        self.count += 1;
    }
}

type Db = Mapper<Arc<dyn DocumentStore>>;

/// The name a property of `E` has in its shard documents.
fn stored_as<E: Entity>(field: &str) -> &'static str {
    E::PROPERTIES
        .iter()
        .find(|p| p.name == field)
        .map(|p| p.stored_as)
        .expect("a sharded property")
}

/// Sets property `field` of static shard `index` of `E` `id` to `value`: the shard
/// document rewritten as it is with that one value changed, or created as the mapper
/// creates one (carrying the entity's incarnation, so that loads fold it).
async fn spoil<E: Entity>(db: &Db, id: &E::Id, field: &str, index: u32, value: Value) {
    let main = E::key_for(id);
    let key = layout::static_shard(&main, field, index);
    let mut doc: Document = if let Some(found) = db.store().get(&key).await.unwrap() {
        found.doc
    } else {
        let main_doc = db.store().get(&main).await.unwrap().unwrap().doc;
        main_doc
            .get_key_value("~inc")
            .map(|(k, v)| (k.clone(), v.clone()))
            .into_iter()
            .collect()
    };
    doc.insert(stored_as::<E>(field).to_owned(), value);
    db.store().put(&key, doc).await.unwrap();
}

/// The version of static shard `index` of `E` `id`.
async fn shard_version<E: Entity>(db: &Db, id: &E::Id, field: &str, index: u32) -> Version {
    let key = layout::static_shard(&E::key_for(id), field, index);
    db.store().get(&key).await.unwrap().unwrap().version
}

/// Partial sums may leave the type's range; only the total is checked, by `load`,
/// `aggregate`, `load_many` and a cached load alike.
async fn sums_are_checked_on_the_total(db: &Db, label: &str) {
    db.insert(&mut Totals::new(1, 0)).await.unwrap();
    for (index, value) in [i64::MAX, -89_000, 203_000, -402_500]
        .into_iter()
        .enumerate()
    {
        spoil::<Totals>(db, &1, "n", u32::try_from(index).unwrap(), value.into()).await;
    }
    let total = i64::MAX - 288_500;
    assert_eq!(db.load::<Totals>(&1).await.unwrap().n, total, "{label}");
    let aggregate: i64 = db.aggregate::<Totals, _>(&1, "n").await.unwrap();
    assert_eq!(aggregate, total, "{label}");
    let many = db.load_many::<Totals>(&[1]).await.unwrap();
    assert_eq!(many[0].as_ref().map(|t| t.n), Some(total), "{label}");
    let cached = db
        .clone()
        .with_read_cache(ReadCache::new(std::time::Duration::from_mins(1)));
    assert_eq!(cached.load::<Totals>(&1).await.unwrap().n, total, "{label}");
    assert_eq!(cached.load::<Totals>(&1).await.unwrap().n, total, "{label}");

    // A total out of range is an overflow.
    spoil::<Totals>(db, &1, "n", 1, 1.into()).await;
    spoil::<Totals>(db, &1, "n", 2, 0.into()).await;
    spoil::<Totals>(db, &1, "n", 3, 0.into()).await;
    let over = db.load::<Totals>(&1).await;
    assert!(
        matches!(&over, Err(Error::Overflow { property, .. }) if property == "n"),
        "{label}: {over:?}"
    );
}

/// Expects `Malformed` naming the shard document of `field`.
fn assert_malformed<T: std::fmt::Debug>(got: &Result<T>, field: &str, what: &str) {
    match got {
        Err(Error::Malformed { key, .. }) => {
            assert!(key.name().starts_with(field), "{what}: names {key}");
        }
        other => panic!("{what}: expected Malformed, got {other:?}"),
    }
}

/// A write into a shard holding a value of another type answers `Malformed` and writes
/// nothing, whether the store merges (`apply`, `save`) or the mapper compares and sets.
async fn merges_never_fold_into_a_value_of_another_type(db: &Db, label: &str) {
    db.insert(&mut Typed::new(2, 0, BTreeSet::new(), 0))
        .await
        .unwrap();
    let huge: Value = serde_json::from_str("123456789012345678901234567890").unwrap();
    let cases: [(&str, Value); 3] = [
        ("best", (-5).into()),
        ("tags", serde_json::json!([1, 2])),
        ("count", huge),
    ];
    for (field, bad) in cases {
        let what = format!("{label}: {field} = {bad}");
        spoil::<Typed>(db, &2, field, 0, bad).await;
        let version = shard_version::<Typed>(db, &2, field, 0).await;
        let change = |t: &mut Typed| match field {
            "best" => t.score(3),
            "tags" => t.tag("rust"),
            _ => t.bump(),
        };
        assert_malformed(
            &db.apply(&2, change).await,
            field,
            &format!("{what}, apply"),
        );
        assert_malformed(
            &db.update(&2, change).await,
            field,
            &format!("{what}, update"),
        );
        assert_eq!(
            shard_version::<Typed>(db, &2, field, 0).await,
            version,
            "{what}: nothing written"
        );
        assert_malformed(&db.load::<Typed>(&2).await, field, &format!("{what}, load"));
        // Repaired, the property takes writes again.
        let neutral = match field {
            "tags" => serde_json::json!([]),
            _ => 0.into(),
        };
        spoil::<Typed>(db, &2, field, 0, neutral).await;
        db.apply(&2, change).await.unwrap();
    }
    let typed = db.load::<Typed>(&2).await.unwrap();
    assert_eq!(
        (typed.best, typed.tags.len(), typed.count),
        (3, 1, 1),
        "{label}"
    );
}

/// A main document whose recorded layout claims more shards than any layout can have
/// (as a stored value, not a reshard) is `Malformed` for every operation that reads the
/// layout: none of them reads or writes billions of shard documents.
async fn layouts_beyond_the_shard_limit_are_malformed(db: &Db, label: &str) {
    let main = Totals::key_for(&7);
    db.insert(&mut Totals::new(7, 1)).await.unwrap();
    let stored = db.store().get(&main).await.unwrap().unwrap().doc;
    let limit = u64::from(Mapper::<Arc<dyn DocumentStore>>::MAX_SHARDS);
    let huge: u64 = 4_000_000_000;
    // The first would read a few thousand shards; the others billions.
    for (shards, base, next, from) in [
        (limit + 1, 4, limit + 5, 5),
        (huge, huge, huge, huge),
        (4, 4, huge, 5),
    ] {
        let mut doc = stored.clone();
        doc.insert(
            "~shards".to_owned(),
            serde_json::json!({ "n": { "shards": shards, "base": base, "next": next, "from": from } }),
        );
        db.store().put(&main, doc).await.unwrap();
        let what = format!(
            "{label}: a layout of {shards} shards, {base} at insert, next {next}, from {from}"
        );
        let layout_malformed = |got: Result<()>, op: &str| match got {
            Err(Error::Malformed { key, field, .. }) if key == main && field == "~shards" => {}
            other => panic!("{what}: {op}: expected Malformed `~shards` of {main}, got {other:?}"),
        };
        layout_malformed(db.load::<Totals>(&7).await.map(drop), "load");
        layout_malformed(db.apply(&7, |t: &mut Totals| t.add(1)).await, "apply");
        layout_malformed(
            db.update(&7, |t: &mut Totals| t.add(1)).await.map(drop),
            "update",
        );
    }
    db.store().put(&main, stored).await.unwrap();
    assert_eq!(db.load::<Totals>(&7).await.unwrap().n, 1, "{label}");
}

async fn every_case(backend: &Backend, label: &str) {
    let db: Db = Mapper::new(backend.store("stored").await);
    sums_are_checked_on_the_total(&db, label).await;
    merges_never_fold_into_a_value_of_another_type(&db, label).await;
    layouts_beyond_the_shard_limit_are_malformed(&db, label).await;
}

autoshard_test_support::every_store!(every_case);

/// The key and field of a `Malformed` error (anything else as a contention error, which no
/// check here expects).
fn clone_malformed(e: &Error) -> Error {
    match e {
        Error::Malformed { key, field, reason } => Error::Malformed {
            key: key.clone(),
            field: field.clone(),
            reason: reason.clone(),
        },
        _ => Error::Invalid(e.to_string()),
    }
}

/// A client of the test server, for what the store never writes itself.
async fn sql(server: &Postgres) -> autoshard::store::postgres::tokio_postgres::Client {
    use autoshard::store::postgres::tokio_postgres;
    let (client, connection) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// Write `seq` of the writer `w`, sent at `at_ms`, keeping every record entry.
fn write_of_w(seq: u64, at_ms: u64) -> WriteId {
    WriteId {
        writer: "w".into(),
        seq,
        at_ms,
        horizon_ms: 0,
    }
}

/// A PostgreSQL server with a store in schema `t_<case>` holding `{"n": 1}` at `key`,
/// and a client for what the store never writes itself.
async fn postgres_with(
    key: &autoshard::Key,
    case: &str,
) -> (
    Postgres,
    Arc<dyn DocumentStore>,
    autoshard::store::postgres::tokio_postgres::Client,
) {
    let server = Postgres::start();
    let store = server.shared_store(case).await;
    let client = sql(&server).await;
    store
        .insert(key, [("n".to_owned(), Value::from(1))].into())
        .await
        .unwrap();
    (server, store, client)
}

/// A document holding a `~w` of its own that is not an object (no write of this store
/// leaves one; an earlier build or an operator's SQL may) reads with its writers' entries
/// in that place, as the reference's merge puts them there: a write read back is
/// recorded, so nothing that decides a resend from a read applies it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_records_take_the_place_of_a_record_property_that_is_not_a_map() {
    let key = autoshard::Key::new("Spoiled", "1");
    let (_server, store, client) = postgres_with(&key, "records").await;
    let write = write_of_w(3, 1_000);
    let merge = Merge::new(key.clone(), "n", Fold::SUM_I64, 1.into(), write);
    assert_eq!(store.merge(&merge).await.unwrap(), Merged::Applied);
    let updated = client
        .execute(
            "UPDATE t_records.autoshard_documents SET doc = doc || '{\"~w\": 7}' WHERE key = $1",
            &[&key.encode()],
        )
        .await
        .unwrap();
    assert_eq!(updated, 1);
    let found = store.get(&key).await.unwrap().unwrap();
    assert_eq!(found.doc["n"], 2);
    assert!(
        autoshard::store::merge::applied(Some(&found.doc), "w", 3),
        "read back: {:?}",
        found.doc
    );
    assert_eq!(store.merge(&merge).await.unwrap(), Merged::AlreadyApplied);
}

/// A row whose key names no key (an operator's SQL) is no document: scans and a
/// lookup's scans skip it, as the Redis store skips such an index entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_scans_skip_rows_whose_key_names_no_key() {
    use autoshard::store::Scan;
    use autoshard_test_support::store::assert_scan_lists;
    let live = autoshard::Key::new("Listed", "1");
    let (_server, store, client) = postgres_with(&live, "keys").await;
    for junk in ["junk", "{", "{Listed:"] {
        let inserted = client
            .execute(
                "INSERT INTO t_keys.autoshard_documents (key, parent, kind, version, doc) \
                 VALUES ($1, '', 'Listed', 1, '{}')",
                &[&junk],
            )
            .await
            .unwrap();
        assert_eq!(inserted, 1);
    }
    let scan = Scan::new("Listed", None).limit(10);
    assert_scan_lists(store.as_ref(), &scan, &[live]).await;
}

/// PostgreSQL's `jsonb` holds no U+0000 in a string: a document or an operand holding
/// one is `Invalid` (the caller's to fix, not a server failure to retry), and nothing is
/// written. Keys with U+0000 are stored (they are escaped), and a lookup that asks for the
/// record entry of a writer whose name holds one answers none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_refuses_strings_holding_nul_as_invalid() {
    use autoshard::store::Transaction;
    let server = Postgres::start();
    let store = server.shared_store("nul").await;
    let key = autoshard::Key::new("Nul", "a\u{0}b");
    let plain: Document = [("s".to_owned(), Value::from("plain"))].into();
    store.insert(&key, plain.clone()).await.unwrap();
    let invalid = |got: Result<()>, what: &str| match got {
        Err(Error::Invalid(message)) => assert!(message.contains("U+0000"), "{what}: {message}"),
        other => panic!("{what}: expected Invalid, got {other:?}"),
    };
    let value: Document = [("s".to_owned(), Value::from("a\u{0}b"))].into();
    let name: Document = [("a\u{0}b".to_owned(), Value::from(1))].into();
    invalid(
        store.put(&key, value.clone()).await.map(drop),
        "put of a value",
    );
    invalid(store.put(&key, name).await.map(drop), "put of a name");
    let version = store.get(&key).await.unwrap().unwrap().version;
    let txn = Transaction::new()
        .expect(key.clone(), Some(version))
        .put(key.clone(), value);
    invalid(store.commit(&txn).await.map(drop), "commit");
    let write = write_of_w(1, 1);
    let merge = Merge::new(
        key.clone(),
        "tags",
        Fold::UNION_STRINGS,
        serde_json::json!(["a\u{0}b"]),
        write,
    );
    invalid(store.merge(&merge).await.map(drop), "merge");
    // No record holds such a writer: a lookup naming one answers the document without.
    let lookup = autoshard::store::Lookup {
        keys: vec![key.clone()],
        writer: Some("a\u{0}b".into()),
        ..autoshard::store::Lookup::default()
    };
    let looked_up = store.lookup(&lookup).await.unwrap().docs;
    assert_eq!(looked_up, [Some(store.get(&key).await.unwrap().unwrap())]);
    let found = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (found.doc, found.version),
        (plain, version),
        "nothing written"
    );
}

/// Values `serde_json` cannot hold (`1e400`) and documents that are not objects are
/// `Malformed` naming the key, from every read and from a merge; nothing panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rows_that_are_not_documents_are_malformed_not_panics() {
    let server = Postgres::start();
    let store = server.shared_store("rows").await;
    let db: Db = Mapper::new(store.clone());
    let client = sql(&server).await;
    for (id, bad) in [(1_u64, "'1e400'::jsonb"), (2, "'[1, 2]'::jsonb")] {
        db.insert(&mut Totals::new(id, 0)).await.unwrap();
        spoil::<Totals>(&db, &id, "n", 0, 0.into()).await;
        let shard = layout::static_shard(&Totals::key_for(&id), "n", 0);
        let statement = if bad.contains("1e400") {
            format!(
                "UPDATE t_rows.autoshard_documents SET doc = jsonb_set(doc, '{{{}}}', {bad}) \
                 WHERE key = $1",
                stored_as::<Totals>("n")
            )
        } else {
            format!("UPDATE t_rows.autoshard_documents SET doc = {bad} WHERE key = $1")
        };
        let updated = client
            .execute(&statement, &[&shard.encode()])
            .await
            .unwrap();
        assert_eq!(updated, 1);
        let what = bad.to_string();
        let is_malformed =
            |got: &Result<_>| matches!(got, Err(Error::Malformed { key, .. }) if key == &shard);
        let got = store.get(&shard).await.map(|_| ());
        assert!(is_malformed(&got), "{what}, get: {got:?}");
        let got = store
            .get_many(std::slice::from_ref(&shard))
            .await
            .map(|_| ());
        assert!(is_malformed(&got), "{what}, get_many: {got:?}");
        let got = db.load::<Totals>(&id).await.map(|_| ());
        assert!(is_malformed(&got), "{what}, load: {got:?}");
        let got = db.update(&id, |t: &mut Totals| t.add(1)).await;
        assert!(is_malformed(&got), "{what}, update: {got:?}");
        let write = write_of_w(1, 1);
        let merge = Merge::new(
            shard.clone(),
            stored_as::<Totals>("n"),
            Fold::SUM_I64,
            1.into(),
            write,
        );
        let got = store.merge(&merge).await;
        assert!(
            is_malformed(&got.as_ref().map(|_| ()).map_err(clone_malformed))
                || matches!(got, Ok(Merged::Unsupported)),
            "{what}, merge: {got:?}"
        );
    }
}

/// In a schema the application also uses, the store's objects are its own: the
/// application's function and sequence of the names the store once used stay as they
/// are, and an object of one of the store's names that the store did not create is
/// refused with `Invalid`, not taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_never_touches_the_applications_objects() {
    let server = Postgres::start();
    let client = sql(&server).await;
    client
        .batch_execute(
            "CREATE SCHEMA shared_app;
             CREATE TABLE shared_app.documents (id int PRIMARY KEY);
             CREATE SEQUENCE shared_app.versions;
             CREATE FUNCTION shared_app.put_document(k text, p text, n text, d jsonb)
                 RETURNS bigint LANGUAGE sql AS $$ SELECT 42::bigint $$;
             SELECT nextval('shared_app.versions');",
        )
        .await
        .unwrap();
    let options = PostgresOptions::default().schema("shared_app");
    let store = PostgresStore::connect_with(&server.url(), options)
        .await
        .unwrap();
    let db = Mapper::new(store);
    db.insert(&mut Totals::new(1, 0)).await.unwrap();
    db.apply(&1, |t: &mut Totals| t.add(2)).await.unwrap();
    assert_eq!(db.load::<Totals>(&1).await.unwrap().n, 2);
    let row = client
        .query_one(
            "SELECT shared_app.put_document('a', '', 'b', '{}'), \
                    (SELECT last_value FROM shared_app.versions), \
                    (SELECT count(*) FROM shared_app.documents)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 42, "the application's function");
    assert_eq!(row.get::<_, i64>(1), 1, "the application's sequence");
    assert_eq!(row.get::<_, i64>(2), 0, "the application's table");

    client
        .batch_execute(
            "CREATE SCHEMA taken;
             CREATE FUNCTION taken.autoshard_write(k text, p text, n text, d jsonb,
                 overwrite boolean)
                 RETURNS bigint LANGUAGE sql AS $$ SELECT 7::bigint $$;",
        )
        .await
        .unwrap();
    let options = PostgresOptions::default().schema("taken");
    let refused = PostgresStore::connect_with(&server.url(), options).await;
    match refused {
        Err(Error::Invalid(message)) => {
            assert!(message.contains("autoshard_write"), "{message}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    let row = client
        .query_one(
            "SELECT taken.autoshard_write('a', '', 'b', '{}', true)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 7, "left as it was");
}

/// A key longer than PostgreSQL's index takes is refused with `TooLarge` before anything
/// is sent, from an insert through the mapper as from the store's own writes; a read of
/// it finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_refuses_keys_over_its_limit_before_sending() {
    #[derive(Entity, Debug, Clone)]
    #[entity(kind = "Page")]
    struct Page {
        #[id]
        url: String,
        visits: u64,
    }
    let server = Postgres::start();
    let store = server.shared_store("limits").await;
    let db: Db = Mapper::new(store.clone());
    let long = "x".repeat(1 << 20);
    let refused = db
        .insert(&mut Page {
            url: long.clone(),
            visits: 0,
        })
        .await;
    match refused {
        Err(Error::TooLarge {
            size, limit, what, ..
        }) => {
            assert!(size > 1 << 20 && limit < size, "{size} {limit}");
            assert!(what.contains("Page") && what.len() < 100, "{what}");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(db.load::<Page>(&long).await.is_err());
    let key = Page::key_for(&long);
    let put = store.put(&key, Document::new()).await;
    assert!(matches!(put, Err(Error::TooLarge { .. })), "{put:?}");
    assert!(store.get(&key).await.unwrap().is_none());
    let fits = "y".repeat(900);
    db.insert(&mut Page {
        url: fits.clone(),
        visits: 3,
    })
    .await
    .unwrap();
    assert_eq!(db.load::<Page>(&fits).await.unwrap().visits, 3);
}
