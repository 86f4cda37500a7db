//! [`PostgresOptions`] and the longest key the store writes.

#[cfg(doc)]
use super::PostgresStore;
use crate::error::{Error, Result};
use crate::key::Key;

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
