//! Connecting: the pool, TLS, the schema's migration, and what a connection error says.

use super::sql::Sql;
use super::{PostgresOptions, PostgresStore};
use crate::error::{Error, Result};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use std::str::FromStr;
use tokio_postgres::NoTls;

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
        let timeout = Some(options.response_timeout);
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(timeout)
            .create_timeout(timeout)
            .recycle_timeout(timeout)
            .build()
            .map_err(|e| Error::backend(format!("PostgreSQL pool for {target}"), e.to_string()))?;
        Self::from_pool_named(pool, options, target).await
    }

    /// A store on an existing `deadpool-postgres` pool (version 0.14), which may be
    /// shared with the rest of the application; [`PostgresOptions::pool_size`] does not
    /// apply, and [`PostgresOptions::response_timeout`] bounds each statement while the
    /// pool's own timeouts bound getting a connection. (A store that connects itself sets `plan_cache_mode = force_generic_plan`
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
            clock: std::sync::Arc::default(),
            response_timeout: options.response_timeout,
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
        let what = "creating the schema";
        let client = self.client().await?;
        self.bounded(what, client, async |client| {
            let txn = client
                .transaction()
                .await
                .map_err(|e| self.error(what, &e))?;
            txn.batch_execute(&self.sql.migrate).await.map_err(|e| {
                // The schema's check found an object of one of the store's names that
                // the store did not create (schema.sql).
                match e.as_db_error() {
                    Some(db) if db.code().code() == "AS001" => {
                        Error::Invalid(db.message().to_owned())
                    }
                    _ => self.error(what, &e),
                }
            })?;
            txn.commit().await.map_err(|e| self.error(what, &e))
        })
        .await
    }

    /// Runs `call` on `client`, a connection from the pool, for at most the response
    /// timeout ([`PostgresOptions::response_timeout`]). Past it the call fails with
    /// [`Error::Backend`] (its outcome unknown) and the connection is closed rather than
    /// handed out again: the server stopped answering on it, and what it sends next
    /// would answer this call.
    pub(super) async fn bounded<T>(
        &self,
        what: &str,
        mut client: deadpool_postgres::Object,
        call: impl AsyncFnOnce(&mut deadpool_postgres::Object) -> Result<T>,
    ) -> Result<T> {
        let Ok(answer) = tokio::time::timeout(self.response_timeout, call(&mut client)).await
        else {
            drop(deadpool_postgres::Object::take(client));
            return Err(Error::backend(
                format!("{what} on PostgreSQL at {}", self.target),
                format!(
                    "no answer within {:?} (the response timeout); the outcome is unknown",
                    self.response_timeout
                ),
            ));
        };
        answer
    }

    pub(super) async fn client(&self) -> Result<deadpool_postgres::Object> {
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

    pub(super) fn error(&self, what: &str, e: &tokio_postgres::Error) -> Error {
        // A string PostgreSQL's `jsonb` cannot hold (U+0000): the caller's document,
        // refused before anything was written.
        if e.as_db_error().is_some_and(|db| {
            *db.code() == tokio_postgres::error::SqlState::UNTRANSLATABLE_CHARACTER
        }) {
            return Error::Invalid(format!(
                "{what} on PostgreSQL at {}: a string of the document (a property's name or \
                 value) holds U+0000, which PostgreSQL's jsonb cannot store; nothing was \
                 written ({})",
                self.target,
                explain(e)
            ));
        }
        Error::backend(
            format!("{what} on PostgreSQL at {}", self.target),
            explain(e),
        )
    }
}

/// An error with its causes on one line: the driver's own message is often only "db
/// error", with what the server said in its source.
pub(super) fn explain(e: &(dyn std::error::Error + 'static)) -> String {
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

/// `host:port/dbname` of a connection config, for messages (never the password).
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
