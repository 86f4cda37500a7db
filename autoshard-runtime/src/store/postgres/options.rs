//! [`PostgresOptions`] and the longest key the store writes.

#[cfg(doc)]
use super::PostgresStore;
use crate::error::{Error, Result};
use crate::key::Key;
use std::time::Duration;

/// The longest key, encoded ([`Key::encode`]), a [`PostgresStore`] writes (module docs,
/// "Limits").
pub const MAX_KEY_BYTES: usize = 1024;

/// [`Error::TooLarge`] for a key over [`MAX_KEY_BYTES`] once encoded.
pub(super) fn check_key(key: &Key, encoded: &str) -> Result<()> {
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

/// Options of a [`PostgresStore`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresOptions {
    pub(super) schema: String,
    pub(super) pool_size: usize,
    pub(super) response_timeout: Duration,
}

/// [`PostgresOptions::response_timeout`] unless set.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

impl Default for PostgresOptions {
    /// Schema `autoshard`, a pool of 16 connections, a response timeout of
    /// [`DEFAULT_RESPONSE_TIMEOUT`].
    fn default() -> Self {
        PostgresOptions {
            schema: "autoshard".to_owned(),
            pool_size: 16,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
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

    /// How long each step of a call waits for the server (default
    /// [`DEFAULT_RESPONSE_TIMEOUT`]; at least a millisecond; `Duration::MAX` waits for ever): a
    /// connection from the pool, connecting anew, and the answer to each statement. Past
    /// it the call fails with [`Error::Backend`]: for a write, an outcome unknown, which
    /// the mapper resolves under the write's id when the write is sent again. The
    /// connection a statement timed out on is closed, not handed out again. So a server
    /// that stops answering (a partition, a host that hangs) fails calls in bounded time
    /// instead of holding them until the operating system gives up on the connection.
    ///
    /// ```
    /// use autoshard::store::postgres::PostgresOptions;
    /// use std::time::Duration;
    ///
    /// let options = PostgresOptions::default().response_timeout(Duration::from_secs(5));
    /// ```
    #[must_use]
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout.max(Duration::from_millis(1));
        self
    }
}
