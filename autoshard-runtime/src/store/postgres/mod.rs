//! [`PostgresStore`]: documents as JSONB rows of one PostgreSQL table (feature
//! `postgres`), through `tokio-postgres` and a `deadpool-postgres` pool.
//!
//! - One table of documents, `<schema>.autoshard_documents` (schema `autoshard` unless
//!   [`PostgresOptions::schema`] says otherwise; key, parent, kind, version from one
//!   sequence, JSONB values) and one of write records, `autoshard_records` (a row per
//!   document and writer, so loads and merges never carry a hot shard's whole record),
//!   created on first use or by [`PostgresStore::migrate`]. Every
//!   object it creates is named `autoshard_*` and marked; one of those names taken by an
//!   object it did not create fails the migration with [`Error::Invalid`].
//! - Invariant: every write is one call of a PL/pgSQL function
//!   (`autoshard_commit_versioned`, `autoshard_write`, `autoshard_delete`,
//!   `autoshard_merge`) that takes the advisory locks
//!   of its keys (in id order) before it checks and writes, so a commit applies all or
//!   nothing against the latest versions, across any groups, and a merge folds on the
//!   server as [`merge::reference`] does, exactly (numbers as `numeric`), without conflicts.
//!   Under the same locks each of them checks the owner of every document it touches
//!   (`autoshard_owned`, the rule of [`crate::store::ownership`]): a refusal raises and
//!   rolls the whole call back, so nothing of a refused write is applied.
//! - Every step of a call waits at most [`PostgresOptions::response_timeout`] (30 s by
//!   default) for the server: a connection from the pool, connecting, each statement's
//!   answer. A call past it fails with [`Error::Backend`], its outcome unknown, and the
//!   connection it timed out on is closed, not handed out again.
//! - Limits: a key of at most [`MAX_KEY_BYTES`] bytes encoded ([`Error::TooLarge`] before
//!   sending); a document of at most 255 MiB; a stored number `serde_json` cannot hold is
//!   [`Error::Malformed`]; a string holding U+0000 (a property's name or value, or a
//!   merge's operand), which `jsonb` cannot store, is [`Error::Invalid`], nothing written.
//!
//! Files: `options` (options, key limit), `connection` (connecting, the pool, migration),
//! `sql` (the statements; the schema and functions in `schema.sql`), `call` (running a
//! statement or a write function, ownership refusals), `rows` (decoding rows); the trait
//! impl here. Why the driver, the columns, and why commits are atomic and optimistic:
//! the repository's `docs/design/postgres.md`.

mod call;
mod connection;
mod jsonb;
mod options;
mod rows;
mod sql;

pub use options::{DEFAULT_RESPONSE_TIMEOUT, MAX_KEY_BYTES, PostgresOptions};

/// The pool crate [`PostgresStore::from_pool`] takes a pool of, re-exported so that an
/// application names the same version.
pub use deadpool_postgres;
/// The driver, re-exported for its `Config` and TLS traits.
pub use tokio_postgres;

use crate::document::{Document, Version, Versioned};
use crate::error::{Error, Result, WHOLE_DOCUMENT};
use crate::key::Key;
use crate::store::clock::ServerClock;
use crate::store::merge::{self, Merge, Merged};
use crate::store::{
    Commit, CommitReply, DocumentStore, Found, Lookup, Scan, ScanPage, Transaction,
};
use async_trait::async_trait;
use deadpool_postgres::Pool;
use jsonb::Jsonb;
use rows::{column, keyed, versioned};
use sql::Sql;
use std::fmt;

/// A [`DocumentStore`] on PostgreSQL (module docs: layout, and why commits are atomic).
///
/// ```no_run
/// use autoshard::store::postgres::{PostgresOptions, PostgresStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> autoshard::Result<()> {
/// let options = PostgresOptions::default().schema("votes");
/// let store = PostgresStore::connect_with("postgres://app@127.0.0.1:5432/app", options).await?;
/// let db = autoshard::Mapper::new(store);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    sql: std::sync::Arc<Sql>,
    /// `host:port/dbname`, for messages (never the password).
    target: String,
    /// The server's clock, read at most once per half second (`store::clock`).
    clock: std::sync::Arc<ServerClock>,
    /// [`PostgresOptions::response_timeout`].
    response_timeout: std::time::Duration,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.target)
            .field("schema", &self.sql.schema)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl DocumentStore for PostgresStore {
    async fn get(&self, key: &Key) -> Result<Option<Versioned>> {
        let encoded = key.encode();
        let rows = self.query("get", &self.sql.get, &[&encoded]).await?;
        rows.first()
            .map(|row| versioned(row, 0, &encoded))
            .transpose()
    }

    async fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let encoded: Vec<String> = keys.iter().map(Key::encode).collect();
        let rows = self
            .query("get_many", &self.sql.get_many, &[&encoded])
            .await?;
        let found: std::collections::HashMap<String, Versioned> = rows
            .iter()
            .map(|row| keyed(row, 0))
            .collect::<Result<_>>()?;
        Ok(encoded.iter().map(|k| found.get(k).cloned()).collect())
    }

    async fn insert(&self, key: &Key, doc: Document) -> Result<Version> {
        self.write_one("insert", key, &doc, false)
            .await?
            .ok_or_else(|| Error::AlreadyExists { key: key.clone() })
    }

    async fn put(&self, key: &Key, doc: Document) -> Result<Version> {
        self.write_one("put", key, &doc, true)
            .await?
            .ok_or_else(|| {
                Error::backend(
                    format!("put on PostgreSQL at {}", self.target),
                    "the statement answered no version",
                )
            })
    }

    async fn delete(&self, key: &Key) -> Result<bool> {
        let encoded = key.encode();
        let row = self
            .query_one("delete", &self.sql.delete, &[&encoded])
            .await?;
        column(&row, 0, &encoded)
    }

    async fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        scan.cursor_key()?;
        let after = scan.cursor.clone().unwrap_or_default();
        let limit = i64::try_from(scan.limit.max(1)).unwrap_or(i64::MAX);
        let rows = match &scan.parent {
            Some(parent) => {
                self.query(
                    "scan",
                    &self.sql.scan,
                    &[&parent.encode(), &scan.kind, &after, &limit],
                )
                .await?
            }
            None => {
                self.query("scan", &self.sql.scan_roots, &[&scan.kind, &after, &limit])
                    .await?
            }
        };
        let page = rows
            .iter()
            .map(|row| keyed(row, 0))
            .collect::<Result<_>>()?;
        Ok(self.page(page, scan.limit))
    }

    /// One statement for the documents and the first page of every scan.
    async fn lookup(&self, lookup: &Lookup) -> Result<Found> {
        for scan in &lookup.scans {
            scan.cursor_key()?;
        }
        let keys: Vec<String> = lookup.keys.iter().map(Key::encode).collect();
        let (parents, kinds, after, limits) = scan_columns(&lookup.scans);
        // No record holds a writer whose name holds U+0000 (a text PostgreSQL refuses):
        // the answer for it is no entry.
        let writer = lookup.writer.as_deref().filter(|w| !w.contains('\0'));
        let rows = self
            .query(
                "lookup",
                &self.sql.lookup,
                &[
                    &lookup.records,
                    &keys,
                    &parents,
                    &kinds,
                    &after,
                    &limits,
                    &writer,
                ],
            )
            .await?;
        let mut found: std::collections::HashMap<String, Versioned> =
            std::collections::HashMap::new();
        let mut items: Vec<Vec<(String, Versioned)>> = vec![Vec::new(); lookup.scans.len()];
        for row in &rows {
            let part = usize::try_from(column::<i64>(row, 0, "(a lookup part)")?).unwrap_or(0);
            let entry = keyed(row, 1)?;
            match part.checked_sub(1).and_then(|i| items.get_mut(i)) {
                Some(page) => page.push(entry),
                None => {
                    found.insert(entry.0, entry.1);
                }
            }
        }
        let docs = keys.iter().map(|k| found.get(k).cloned()).collect();
        let pages = self.pages(items, &lookup.scans);
        Ok(Found { docs, pages })
    }

    /// A lookup is one statement: one snapshot of every row it reads.
    fn snapshot_lookups(&self) -> bool {
        true
    }

    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        Ok(self.commit_versioned(txn).await?.outcome)
    }

    async fn commit_versioned(&self, txn: &Transaction) -> Result<CommitReply> {
        if txn.reads().is_empty() && txn.writes().is_empty() {
            return Ok(CommitReply {
                outcome: Commit::Committed,
                versions: Some(Vec::new()),
            });
        }
        let reads: Vec<(&Key, Option<Version>)> =
            txn.reads().iter().map(|(key, v)| (key, *v)).collect();
        self.commit_documents("commit", &reads, txn.writes(), txn.owner())
            .await
    }

    /// The server's clock (`clock_timestamp()`), which leases are judged by, read at
    /// most once per half second and counted on in between, never ahead of it
    /// (`store::clock`).
    async fn now_ms(&self) -> Result<u64> {
        let read = async {
            let row = self.query_one("clock", &self.sql.now, &[]).await?;
            let ms = column::<i64>(&row, 0, "(the clock)")?;
            Ok(u64::try_from(ms).unwrap_or(0))
        };
        self.clock.now_ms(read).await
    }

    /// One statement that commits a record to the log and no data: the server answers it
    /// once its synchronous standbys (if it has any, `synchronous_standby_names`) hold
    /// the log up to it, so up to every commit a read could have seen (the log is
    /// ordered). A plain read commits nothing, so it waits for nothing: a commit whose
    /// own wait for the standbys was cancelled is visible before they hold it.
    async fn make_durable(&self, keys: &[Key]) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        self.query_one("making what was read durable", &self.sql.durable, &[])
            .await
            .map(drop)
    }

    /// One call of `autoshard_merge`, which folds on the server under the key's lock.
    async fn merge(&self, merge: &Merge) -> Result<Merged> {
        merge.check()?;
        let (fold, min, max) = merge.fold.script_arguments();
        let write = &merge.write;
        let writer: &str = &write.writer;
        let (seq, at_ms, horizon_ms) = (
            write.seq.to_string(),
            write.at_ms.to_string(),
            write.horizon_ms.to_string(),
        );
        let (guard_property, guard_value) = match &merge.guard {
            Some((property, value)) => (Some(property.as_str()), value.as_deref()),
            None => (None, None),
        };
        let row = self
            .query_one(
                "merge",
                &self.sql.merge,
                &[
                    &merge.key.encode(),
                    &merge.property,
                    &fold,
                    &Jsonb(&merge.operand),
                    &min,
                    &max,
                    &writer,
                    &seq,
                    &at_ms,
                    &horizon_ms,
                    &guard_property,
                    &guard_value,
                ],
            )
            .await?;
        match column::<&str>(&row, 0, &merge.key.encode())? {
            "applied" => Ok(Merged::Applied),
            "already" => Ok(Merged::AlreadyApplied),
            "missing" => Ok(Merged::Missing),
            "unsupported" => Ok(Merged::Unsupported),
            "overflow" => Err(merge::overflow(merge)),
            "malformed" => Err(Error::Malformed {
                key: merge.key.clone(),
                field: WHOLE_DOCUMENT.to_owned(),
                reason: "the stored document is not a JSON object".to_owned(),
            }),
            other => Err(Error::backend(
                format!("merge on PostgreSQL at {}", self.target),
                format!("unexpected answer `{other}` from autoshard_merge"),
            )),
        }
    }
}

/// The columns a statement takes for `scans`: parents (`''` for roots), kinds, cursors and
/// page sizes.
fn scan_columns(scans: &[Scan]) -> (Vec<String>, Vec<&str>, Vec<String>, Vec<i64>) {
    let parents = scans
        .iter()
        .map(|s| s.parent.as_ref().map(Key::encode).unwrap_or_default())
        .collect();
    let kinds = scans.iter().map(|s| s.kind.as_str()).collect();
    let after = scans
        .iter()
        .map(|s| s.cursor.clone().unwrap_or_default())
        .collect();
    let limits = scans
        .iter()
        .map(|s| i64::try_from(s.limit.max(1)).unwrap_or(i64::MAX))
        .collect();
    (parents, kinds, after, limits)
}
