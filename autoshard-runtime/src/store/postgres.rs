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
//! - Invariant: every write is one call of a PL/pgSQL function (`autoshard_commit`,
//!   `autoshard_write`, `autoshard_delete`, `autoshard_merge`) that takes the advisory locks
//!   of its keys (in id order) before it checks and writes, so a commit applies all or
//!   nothing against the latest versions, across any groups, and a merge folds on the
//!   server as [`merge::apply`] does, exactly (numbers as `numeric`), without conflicts.
//!   Under the same locks each of them checks the owner of every document it touches
//!   (`autoshard_owned`, the rule of [`crate::store::ownership`]): a refusal raises and
//!   rolls the whole call back, so nothing of a refused write is applied.
//! - Limits: a key of at most [`MAX_KEY_BYTES`] bytes encoded ([`Error::TooLarge`] before
//!   sending); a document of at most 255 MiB; a stored number `serde_json` cannot hold is
//!   [`Error::Malformed`].
//!
//! Why the driver, the columns, and why commits are atomic and optimistic: the repository's
//! `docs/design/postgres.md`.

use crate::document::{Document, Version, Versioned};
use crate::error::{Error, Result, WHOLE_DOCUMENT};
use crate::key::Key;
use crate::store::merge::{self, Merge, Merged};
use crate::store::{Commit, DocumentStore, Found, Lookup, Scan, ScanPage, Transaction, Write};
use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use std::fmt;
use std::str::FromStr;
use tokio_postgres::types::Json;
use tokio_postgres::NoTls;

/// The longest key, encoded ([`Key::encode`]), a [`PostgresStore`] writes (module docs,
/// "Limits").
pub const MAX_KEY_BYTES: usize = 1024;

/// [`Error::TooLarge`] for a key over [`MAX_KEY_BYTES`] once encoded.
fn check_key(key: &Key, encoded: &str) -> Result<()> {
    if encoded.len() <= MAX_KEY_BYTES {
        return Ok(());
    }
    Err(Error::TooLarge {
        what: format!("a key of kind `{}`", key.kind()),
        size: encoded.len(),
        limit: MAX_KEY_BYTES,
        store: "PostgreSQL",
    })
}

/// The pool crate [`PostgresStore::from_pool`] takes a pool of, re-exported so that an
/// application names the same version.
pub use deadpool_postgres;
/// The driver, re-exported for its `Config` and TLS traits.
pub use tokio_postgres;

/// Options of a [`PostgresStore`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresOptions {
    schema: String,
    pool_size: usize,
}

impl Default for PostgresOptions {
    /// Schema `autoshard`, a pool of 16 connections.
    fn default() -> Self {
        PostgresOptions {
            schema: "autoshard".to_owned(),
            pool_size: 16,
        }
    }
}

impl PostgresOptions {
    /// The schema that holds the table (created when missing). Letters, digits and `_`,
    /// not starting with a digit, at most 63 bytes (PostgreSQL's limit); anything else
    /// fails at connect with [`Error::Invalid`].
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The most connections the pool opens (at least 1).
    #[must_use]
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }
}

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
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.target)
            .field("schema", &self.sql.schema)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/dbname`)
    /// with the default options; see [`PostgresStore::connect_with`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects to the database at `url`, checks the connection, and creates the schema,
    /// table, index and sequence when missing ([`PostgresStore::migrate`]).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a URL that does not parse or a bad schema name;
    /// [`Error::Backend`] naming the server (never the password) when it cannot be
    /// reached or refuses the login.
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Self> {
        Self::connect_tls(url, options, NoTls).await
    }

    /// Like [`PostgresStore::connect_with`], over TLS: `tls` is the connector of the TLS
    /// crate the application uses (`postgres_native_tls::MakeTlsConnector`,
    /// `tokio_postgres_rustls::MakeRustlsConnect`, ...); the URL's `sslmode` says whether
    /// TLS is required (`sslmode=require`) or only preferred (the default).
    ///
    /// # Errors
    /// As [`PostgresStore::connect_with`].
    pub async fn connect_tls<T>(url: &str, options: PostgresOptions, tls: T) -> Result<Self>
    where
        T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>
            + Clone
            + Sync
            + Send
            + 'static,
        T::Stream: Sync + Send,
        T::TlsConnect: Sync + Send,
        <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
    {
        let mut config = tokio_postgres::Config::from_str(url).map_err(|_| {
            Error::Invalid("invalid PostgreSQL URL (not shown: it may hold a password)".into())
        })?;
        let target = target_of(&config);
        // The store's statements are few and keyed by primary or scan index: one plan
        // each, made once per connection, instead of planning every call anew.
        let server_options = match config.get_options() {
            Some(given) => format!("{given} -c plan_cache_mode=force_generic_plan"),
            None => "-c plan_cache_mode=force_generic_plan".to_owned(),
        };
        config.options(server_options);
        let manager = Manager::from_config(
            config,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .build()
            .map_err(|e| Error::backend(format!("PostgreSQL pool for {target}"), e.to_string()))?;
        Self::from_pool_named(pool, options, target).await
    }

    /// A store on an existing `deadpool-postgres` pool (version 0.14), which may be
    /// shared with the rest of the application; [`PostgresOptions::pool_size`] does not
    /// apply. (A store that connects itself sets `plan_cache_mode = force_generic_plan`
    /// on its connections, so that its statements are planned once per connection; a
    /// given pool keeps its own settings.) Creates the schema when missing, as [`PostgresStore::connect_with`] does.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad schema name; [`Error::Backend`] when the pool cannot
    /// hand out a working connection.
    pub async fn from_pool(pool: Pool, options: PostgresOptions) -> Result<Self> {
        Self::from_pool_named(pool, options, "(a given pool)".to_owned()).await
    }

    async fn from_pool_named(pool: Pool, options: PostgresOptions, target: String) -> Result<Self> {
        let schema = &options.schema;
        let valid = schema.len() <= 63
            && schema
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && schema
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(Error::Invalid(format!(
                "PostgreSQL schema `{schema}`: use at most 63 letters, digits and `_`, not starting with a digit"
            )));
        }
        let store = PostgresStore {
            pool,
            sql: std::sync::Arc::new(Sql::new(schema)),
            target,
        };
        store.migrate().await?;
        Ok(store)
    }

    /// Creates the schema, the table, its scan index, the version sequence and the
    /// write functions when missing (every connect does it; idempotent, and safe to run
    /// from several processes at once).
    ///
    /// # Errors
    /// [`Error::Invalid`] when an object of one of the store's names (`autoshard_*`, see
    /// the module docs) exists in the schema and was not created by the store: it is
    /// left as it is. [`Error::Backend`] when the server fails.
    pub async fn migrate(&self) -> Result<()> {
        let mut client = self.client().await?;
        let txn = client
            .transaction()
            .await
            .map_err(|e| self.error("creating the schema", &e))?;
        txn.batch_execute(&self.sql.migrate).await.map_err(|e| {
            // The schema's check found an object of one of the store's names that the
            // store did not create (schema.sql).
            match e.as_db_error() {
                Some(db) if db.code().code() == "AS001" => Error::Invalid(db.message().to_owned()),
                _ => self.error("creating the schema", &e),
            }
        })?;
        txn.commit()
            .await
            .map_err(|e| self.error("creating the schema", &e))
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(|e| {
            // The pool's own words ("error occurred while creating a new object") say
            // nothing to a user: the driver's error, and what to check, do.
            let reason = match &e {
                deadpool_postgres::PoolError::Backend(e) => {
                    let refused = std::error::Error::source(e)
                        .and_then(|s| s.downcast_ref::<std::io::Error>())
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
                    let hint = if refused {
                        " (nothing listens there: check that the server runs and takes TCP \
                         connections on that host and port, `listen_addresses` and `port`)"
                    } else {
                        ""
                    };
                    format!("{}{hint}", explain(e))
                }
                other => explain(other),
            };
            Error::backend(
                format!("connecting to PostgreSQL at {}", self.target),
                reason,
            )
        })
    }

    fn error(&self, what: &str, e: &tokio_postgres::Error) -> Error {
        Error::backend(
            format!("{what} on PostgreSQL at {}", self.target),
            explain(e),
        )
    }

    /// Runs one statement of [`Sql`] (prepared once per connection) and returns its rows.
    async fn query(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(sql)
            .await
            .map_err(|e| self.error(what, &e))?;
        client
            .query(&statement, params)
            .await
            .map_err(|e| refusal(&e).unwrap_or_else(|| self.error(what, &e)))
    }

    /// Runs a statement that answers one row.
    async fn query_one(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<tokio_postgres::Row> {
        self.query(what, sql, params).await?.pop().ok_or_else(|| {
            Error::backend(
                format!("{what} on PostgreSQL at {}", self.target),
                "the statement answered no row",
            )
        })
    }

    /// Calls `autoshard_write`: writes `doc` at `key`, over a present document when
    /// `overwrite`. The new version; `None` when the key was present and not overwritten.
    async fn write_one(
        &self,
        what: &str,
        key: &Key,
        doc: &Document,
        overwrite: bool,
    ) -> Result<Option<Version>> {
        let (encoded, parent) = (key.encode(), parent_of(key));
        check_key(key, &encoded)?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
            [&encoded, &parent, &key.kind(), &Json(doc), &overwrite];
        let row = self.query_one(what, &self.sql.write, &params).await?;
        Ok(column::<Option<i64>>(&row, 0, &encoded)?.map(version_of))
    }

    /// Calls `autoshard_commit` (module docs): `0` when it committed, else the 1-based
    /// index into `reads` of an expectation that failed.
    async fn commit_documents(
        &self,
        what: &str,
        reads: &[(&Key, Option<Version>)],
        writes: &[(&Key, Option<&Document>)],
        owner: Option<&str>,
    ) -> Result<usize> {
        let rk: Vec<String> = reads.iter().map(|(k, _)| k.encode()).collect();
        let rv: Vec<Option<i64>> = reads
            .iter()
            .map(|(_, v)| v.map(|v| i64::try_from(v.0).unwrap_or(i64::MAX)))
            .collect();
        let wk: Vec<String> = writes.iter().map(|(k, _)| k.encode()).collect();
        for ((key, _), encoded) in writes.iter().zip(&wk) {
            check_key(key, encoded)?;
        }
        let wp: Vec<String> = writes.iter().map(|(k, _)| parent_of(k)).collect();
        let wn: Vec<&str> = writes.iter().map(|(k, _)| k.kind()).collect();
        let wd: Vec<Option<Json<&Document>>> = writes.iter().map(|(_, d)| d.map(Json)).collect();
        let row = self
            .query_one(
                what,
                &self.sql.commit,
                &[&rk, &rv, &wk, &wp, &wn, &wd, &owner],
            )
            .await?;
        Ok(usize::try_from(column::<i32>(&row, 0, "(a commit)")?).unwrap_or(0))
    }

    /// A scan's page from its rows in key order (encoded key, document), `limit` the
    /// page size asked for: a full page has a next one (perhaps empty).
    fn page(&self, rows: Vec<(String, Versioned)>, limit: usize) -> Result<ScanPage> {
        let next = (rows.len() == limit.max(1))
            .then(|| rows.last().map(|(key, _)| key.clone()))
            .flatten();
        let items = rows
            .into_iter()
            .map(|(encoded, doc)| {
                let key = Key::decode(&encoded).map_err(|e| {
                    Error::backend(
                        format!("scan on PostgreSQL at {}", self.target),
                        format!("a stored key does not decode: {e}"),
                    )
                })?;
                Ok((key, doc))
            })
            .collect::<Result<_>>()?;
        Ok(ScanPage { items, next })
    }
}

/// The statements, for one schema.
struct Sql {
    schema: String,
    migrate: String,
    merge: String,
    get: String,
    get_many: String,
    write: String,
    delete: String,
    commit: String,
    lookup: String,
    scan: String,
    scan_roots: String,
    now: String,
    durable: String,
}

impl Sql {
    fn new(schema: &str) -> Self {
        let s = format!("\"{schema}\"");
        let t = format!("{s}.autoshard_documents");
        Sql {
            schema: schema.to_owned(),
            migrate: include_str!("postgres/schema.sql").replace("{schema}", schema),
            merge: format!(
                "SELECT {s}.autoshard_merge($1, $2, $3, $4, $5::text::numeric, $6::text::numeric, \
                 $7, $8::text::numeric, $9::text::numeric, $10::text::numeric, $11, $12)"
            ),
            get: format!(
                "SELECT version, {s}.autoshard_with_records(key, doc) FROM {t} WHERE key = $1"
            ),
            get_many: format!(
                "SELECT key, version, {s}.autoshard_with_records(key, doc) FROM {t} \
                 WHERE key = ANY($1)"
            ),
            write: format!("SELECT {s}.autoshard_write($1, $2, $3, $4, $5)"),
            delete: format!("SELECT {s}.autoshard_delete($1)"),
            now: "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint".to_owned(),
            // A transaction that writes a record to the log and changes no data: its
            // commit waits for the synchronous standbys (`make_durable`).
            durable: "SELECT pg_logical_emit_message(true, 'autoshard', 'durable')::text"
                .to_owned(),
            commit: format!("SELECT {s}.autoshard_commit($1, $2, $3, $4, $5, $6, $7)"),
            // Part 0: the documents by key; part i: the first page of scan i (its
            // parent '' for roots). `$1` says whether documents keep their write record.
            lookup: format!(
                "SELECT 0::bigint, key, version, \
                        CASE WHEN $1 THEN {s}.autoshard_with_records(key, doc) ELSE doc - '{record}' END \
                 FROM {t} WHERE key = ANY($2) \
                 UNION ALL \
                 SELECT s.i, d.key, d.version, \
                        CASE WHEN $1 THEN {s}.autoshard_with_records(d.key, d.doc) \
                             ELSE d.doc - '{record}' END \
                 FROM unnest($3::text[], $4::text[], $5::text[], $6::bigint[]) \
                      WITH ORDINALITY AS s(parent, kind, after, lim, i) \
                 CROSS JOIN LATERAL ( \
                     SELECT key, version, doc FROM {t} \
                     WHERE parent = s.parent AND kind = s.kind AND key > s.after \
                     ORDER BY key LIMIT s.lim \
                 ) AS d",
                record = merge::RECORD
            ),
            scan: format!(
                "SELECT key, version, {s}.autoshard_with_records(key, doc) FROM {t} \
                 WHERE parent = $1 AND kind = $2 AND key > $3 ORDER BY key LIMIT $4"
            ),
            scan_roots: format!(
                "SELECT key, version, {s}.autoshard_with_records(key, doc) FROM {t} \
                 WHERE parent = '' AND kind = $1 AND key > $2 ORDER BY key LIMIT $3"
            ),
        }
    }
}

/// An error with its causes on one line: the driver's own message is often only "db
/// error", with what the server said in its source.
fn explain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// `host:port/dbname` of a connection config.
/// The ownership refusal `autoshard_owned` raised (`AS002`, `AS003`), as the contract's
/// error; `None` for any other error.
fn refusal(e: &tokio_postgres::Error) -> Option<Error> {
    let db = e.as_db_error()?;
    let key = Key::decode(db.message()).ok()?;
    let detail = db.detail()?;
    match db.code().code() {
        "AS002" => {
            let owner: serde_json::Value = serde_json::from_str(detail).ok()?;
            Some(Error::Grouped {
                key,
                group: owner.get("group")?.as_str()?.to_owned(),
                until_ms: owner.get("until")?.as_u64()?,
            })
        }
        "AS003" => Some(Error::GroupLost {
            key,
            group: detail.to_owned(),
        }),
        _ => None,
    }
}

fn target_of(config: &tokio_postgres::Config) -> String {
    let host = config.get_hosts().first().map_or_else(
        || "localhost".to_owned(),
        |h| match h {
            tokio_postgres::config::Host::Tcp(host) => host.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        },
    );
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", config.get_dbname().unwrap_or(""))
}

fn version_of(v: i64) -> Version {
    Version(u64::try_from(v).unwrap_or(0))
}

fn parent_of(key: &Key) -> String {
    key.parent().map(|p| p.encode()).unwrap_or_default()
}

/// Column `index` of `row`, read from the document whose encoded key is `key`: a value
/// the column's type cannot hold (a JSON document that is not an object, a number out of
/// `serde_json`'s range such as `1e400`) is [`Error::Malformed`] naming the key, never a
/// panic.
fn column<'r, T: tokio_postgres::types::FromSql<'r>>(
    row: &'r tokio_postgres::Row,
    index: usize,
    key: &str,
) -> Result<T> {
    row.try_get(index).map_err(|e| {
        let reason = format!(
            "the stored row does not read as a document: {}",
            explain(&e)
        );
        match Key::decode(key) {
            Ok(key) => Error::Malformed {
                key,
                field: WHOLE_DOCUMENT.to_owned(),
                reason,
            },
            Err(_) => Error::backend(format!("reading the row of `{key}`"), reason),
        }
    })
}

/// The version and document in columns `first` and `first + 1` of a row of `key`.
fn versioned(row: &tokio_postgres::Row, first: usize, key: &str) -> Result<Versioned> {
    let Json(doc): Json<Document> = column(row, first + 1, key)?;
    Ok(Versioned {
        doc,
        version: version_of(column(row, first, key)?),
    })
}

/// A row of `(key, version, doc)` from column `first` on.
fn keyed(row: &tokio_postgres::Row, first: usize) -> Result<(String, Versioned)> {
    let key: String = column(row, first, "(a key)")?;
    let found = versioned(row, first + 1, &key)?;
    Ok((key, found))
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
        self.page(page, scan.limit)
    }

    /// One statement for the documents and the first page of every scan.
    async fn lookup(&self, lookup: &Lookup) -> Result<Found> {
        let keys: Vec<String> = lookup.keys.iter().map(Key::encode).collect();
        let parents: Vec<String> = lookup
            .scans
            .iter()
            .map(|s| s.parent.as_ref().map(Key::encode).unwrap_or_default())
            .collect();
        let kinds: Vec<&str> = lookup.scans.iter().map(|s| s.kind.as_str()).collect();
        let after: Vec<String> = lookup
            .scans
            .iter()
            .map(|s| s.cursor.clone().unwrap_or_default())
            .collect();
        let limits: Vec<i64> = lookup
            .scans
            .iter()
            .map(|s| i64::try_from(s.limit.max(1)).unwrap_or(i64::MAX))
            .collect();
        let rows = self
            .query(
                "lookup",
                &self.sql.lookup,
                &[&lookup.records, &keys, &parents, &kinds, &after, &limits],
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
        let pages = items
            .into_iter()
            .zip(&lookup.scans)
            .map(|(mut page, scan)| {
                page.sort_by(|a, b| a.0.cmp(&b.0));
                self.page(page, scan.limit)
            })
            .collect::<Result<_>>()?;
        Ok(Found { docs, pages })
    }

    async fn commit(&self, txn: &Transaction) -> Result<Commit> {
        if txn.reads().is_empty() && txn.writes().is_empty() {
            return Ok(Commit::Committed);
        }
        let reads: Vec<(&Key, Option<Version>)> =
            txn.reads().iter().map(|(key, v)| (key, *v)).collect();
        let writes: Vec<(&Key, Option<&Document>)> = txn
            .writes()
            .iter()
            .map(|(key, write)| match write {
                Write::Put(doc) => (key, Some(doc)),
                Write::Delete => (key, None),
            })
            .collect();
        match self
            .commit_documents("commit", &reads, &writes, txn.owner())
            .await?
        {
            0 => Ok(Commit::Committed),
            failed => Ok(Commit::Conflict {
                key: reads[failed.min(reads.len()) - 1].0.clone(),
            }),
        }
    }

    /// The server's clock (`clock_timestamp()`), which leases are judged by.
    async fn now_ms(&self) -> Result<u64> {
        let row = self.query_one("clock", &self.sql.now, &[]).await?;
        let ms = column::<i64>(&row, 0, "(the clock)")?;
        Ok(u64::try_from(ms).unwrap_or(0))
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
                    &Json(&merge.operand),
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
