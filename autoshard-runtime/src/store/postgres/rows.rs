//! Decoding rows: versions, parents, and columns whose values may be malformed.

use super::connection::explain;
use crate::document::{Document, Version, Versioned};
use crate::error::{Error, Result, WHOLE_DOCUMENT};
use crate::key::Key;
use tokio_postgres::types::Json;

pub(super) fn version_of(v: i64) -> Version {
    Version(u64::try_from(v).unwrap_or(0))
}

pub(super) fn parent_of(key: &Key) -> String {
    key.parent().map(|p| p.encode()).unwrap_or_default()
}

/// Column `index` of `row`, read from the document whose encoded key is `key`: a value
/// the column's type cannot hold (a JSON document that is not an object, a number out of
/// `serde_json`'s range such as `1e400`) is [`Error::Malformed`] naming the key, never a
/// panic.
pub(super) fn column<'r, T: tokio_postgres::types::FromSql<'r>>(
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
pub(super) fn versioned(row: &tokio_postgres::Row, first: usize, key: &str) -> Result<Versioned> {
    let Json(doc): Json<Document> = column(row, first + 1, key)?;
    Ok(Versioned {
        doc,
        version: version_of(column(row, first, key)?),
    })
}

/// A row of `(key, version, doc)` from column `first` on.
pub(super) fn keyed(row: &tokio_postgres::Row, first: usize) -> Result<(String, Versioned)> {
    let key: String = column(row, first, "(a key)")?;
    let found = versioned(row, first + 1, &key)?;
    Ok((key, found))
}
