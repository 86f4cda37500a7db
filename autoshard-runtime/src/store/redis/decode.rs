//! From replies to documents: the fields of a hash (an `HGETALL` reply, or an entry of
//! the read script's) become a [`Versioned`], and the entries of its record hash its write
//! record. Nothing here panics on an unexpected reply: it becomes an error, a hash that is
//! not one of the store's [`Error::Malformed`].
//!
//! A field holds JSON; the two shapes documents mostly hold (a canonical integer, a string
//! without escapes) are read without the JSON parser ([`plain_json`]): a load decodes
//! every field of every shard.

use super::read::Records;
use super::{RedisStore, names, reply};
use crate::document::{Document, Version, Versioned};
use crate::error::{Error, Result, WHOLE_DOCUMENT};
use crate::key::Key;
use crate::store::merge::RECORD;
use ::redis::Value;

/// The largest version a Redis document has: the scripts count versions on Lua numbers,
/// which are exact below 2^53, and count past a version only while the next one stays at
/// or below this (`lua/digits.lua`). A larger one, which no store of ours writes, makes
/// the document [`Error::Malformed`], on reads as on writes.
pub(super) const MAX_VERSION: u64 = (1 << 53) - 1;

impl RedisStore {
    /// The document in one entry of a read script's reply (`lua/read.lua`): `[0]` when
    /// absent, `[1, fields]`, or `[2, reason]` for a value that is not one of the store's
    /// documents.
    pub(super) fn decode_entry(&self, key: &Key, entry: &Value) -> Result<Option<Versioned>> {
        let bad = || self.backend("read", reply::unexpected("the read script", entry));
        let items = reply::array(entry).ok_or_else(bad)?;
        match items.first().and_then(reply::int) {
            Some(0) => Ok(None),
            Some(1) if items.len() == 2 => {
                let fields = reply::array(&items[1]).ok_or_else(bad)?;
                self.decode_fields(key, fields, true).map(Some)
            }
            Some(2) => Err(reply::not_ours(key, items)),
            _ => Err(bad()),
        }
    }

    /// A document from the fields of its hash (`HGETALL`: field, value, ...), with its
    /// write record when `records` is on.
    fn decode_fields(&self, key: &Key, fields: &[Value], records: bool) -> Result<Versioned> {
        let bad =
            |value: &Value| self.backend("read", reply::unexpected("a document's field", value));
        let foreign = || Error::Malformed {
            key: key.clone(),
            field: WHOLE_DOCUMENT.to_owned(),
            reason: "a Redis hash that is not an autoshard document (a version `v`, \
                     `p:` and `w:` fields)"
                .to_owned(),
        };
        let mut version = None;
        let mut doc = Document::new();
        let mut record = serde_json::Map::new();
        for pair in fields.chunks_exact(2) {
            let field = reply::text(&pair[0]).ok_or_else(foreign)?;
            let bytes = match &pair[1] {
                Value::BulkString(bytes) => bytes.as_slice(),
                other => return Err(bad(other)),
            };
            let json = |field: &str| {
                if let Some(value) = plain_json(bytes) {
                    return Ok(value);
                }
                serde_json::from_slice(bytes).map_err(|e| Error::Malformed {
                    key: key.clone(),
                    field: field.to_owned(),
                    reason: format!("field `{field}` does not hold JSON: {e}"),
                })
            };
            match field.split_at_checked(2) {
                Some(("p:", name)) => {
                    doc.insert(name.to_owned(), json(field)?);
                }
                Some(("w:", writer)) => {
                    if records {
                        record.insert(writer.to_owned(), json(field)?);
                    }
                }
                _ if field == "v" => {
                    version = std::str::from_utf8(bytes)
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok());
                }
                _ => return Err(foreign()),
            }
        }
        let version = version.ok_or_else(foreign)?;
        if version > MAX_VERSION {
            return Err(Error::Malformed {
                key: key.clone(),
                field: WHOLE_DOCUMENT.to_owned(),
                reason: format!(
                    "version {version}: the store's versions stay at or below 2^53 - 1, \
                     where its scripts count exactly"
                ),
            });
        }
        if !record.is_empty() {
            doc.insert(RECORD.to_owned(), serde_json::Value::Object(record));
        }
        Ok(Versioned {
            doc,
            version: Version(version),
        })
    }

    /// The document in an `HGETALL` reply: absent for no fields, [`Error::Malformed`]
    /// for a value of another type (asking the server which, for the message).
    pub(super) async fn decode_hash(
        &self,
        key: &Key,
        name: &str,
        reply: &Value,
        records: bool,
    ) -> Result<Option<Versioned>> {
        match reply {
            Value::Array(fields) if fields.is_empty() => Ok(None),
            Value::Array(fields) => self.decode_fields(key, fields, records).map(Some),
            Value::Map(pairs) if pairs.is_empty() => Ok(None),
            Value::Map(pairs) => {
                let fields: Vec<Value> = pairs
                    .iter()
                    .flat_map(|(field, value)| [field.clone(), value.clone()])
                    .collect();
                self.decode_fields(key, &fields, records).map(Some)
            }
            Value::ServerError(e) if e.code() == "WRONGTYPE" => {
                Err(self.not_a_hash(key, name).await)
            }
            other => Err(self.backend(
                format!("read of `{name}`"),
                reply::unexpected("HGETALL", other),
            )),
        }
    }

    /// [`Error::Malformed`] for the value at `name` (of `key`), which is not a hash (asking
    /// the server its type, for the message).
    pub(super) async fn not_a_hash(&self, key: &Key, name: &str) -> Error {
        let kind: String = ::redis::cmd("TYPE")
            .arg(name)
            .query_async(&mut self.conns.get())
            .await
            .unwrap_or_else(|_| "other".to_owned());
        Error::Malformed {
            key: key.clone(),
            field: WHOLE_DOCUMENT.to_owned(),
            reason: format!("a Redis {kind} value, not an autoshard document"),
        }
    }

    /// The document a read of its hash and of its record hash at one instant found
    /// (`doc`: its `HGETALL` reply; `record`: the reply to the read of its record that
    /// `records` added, inside one `MULTI`).
    pub(super) async fn decode_with_record(
        &self,
        key: &Key,
        name: &str,
        doc: &Value,
        record: &Value,
        records: Records<'_>,
    ) -> Result<Option<Versioned>> {
        let entries = records.as_entries(record);
        let record = entries.as_ref().unwrap_or(record);
        match self.decode_hash(key, name, doc, true).await? {
            Some(doc) => Ok(Some(self.with_record(key, name, doc, record)?)),
            None => Ok(None),
        }
    }

    /// `doc` with the entries of its record hash (`entries`: its `HGETALL` reply) in its
    /// write record.
    pub(super) fn with_record(
        &self,
        key: &Key,
        name: &str,
        mut doc: Versioned,
        entries: &Value,
    ) -> Result<Versioned> {
        let fields: Vec<Value> = match entries {
            Value::Array(fields) => fields.clone(),
            Value::Map(pairs) => pairs
                .iter()
                .flat_map(|(field, value)| [field.clone(), value.clone()])
                .collect(),
            Value::ServerError(e) if e.code() == "WRONGTYPE" => {
                return Err(Error::Malformed {
                    key: key.clone(),
                    field: RECORD.to_owned(),
                    reason: "a write record that is not a Redis hash".to_owned(),
                });
            }
            other => {
                return Err(self.backend(
                    format!("read of `{}`", names::record_of(name)),
                    reply::unexpected("HGETALL", other),
                ));
            }
        };
        if fields.is_empty() {
            return Ok(doc);
        }
        // The record hash holds `w:` fields only: decoded as the entries of a document.
        let mut all = vec![
            Value::BulkString(b"v".to_vec()),
            Value::BulkString(b"0".to_vec()),
        ];
        all.extend(fields);
        let entries = self.decode_fields(key, &all, true)?;
        if let Some(serde_json::Value::Object(found)) = entries.doc.get(RECORD) {
            let record = doc
                .doc
                .entry(RECORD.to_owned())
                .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
            // A `~w` property that is not a map (a put stored it) records nothing: the
            // entries merges wrote since take its place, as the reference's merge puts
            // them there.
            if !record.is_object() {
                *record = serde_json::Value::Object(serde_json::Map::new());
            }
            if let serde_json::Value::Object(record) = record {
                for (writer, entry) in found {
                    record.insert(writer.clone(), entry.clone());
                }
            }
        }
        if let Some(extra) = entries.doc.keys().find(|name| *name != RECORD) {
            return Err(Error::Malformed {
                key: key.clone(),
                field: RECORD.to_owned(),
                reason: format!("the write record holds a value `{extra}`"),
            });
        }
        Ok(doc)
    }
}

/// The JSON value of a field in the two shapes documents mostly hold, decoded without
/// the JSON parser (a load decodes every field of every shard): a canonical integer of at
/// most 18 digits, and a string without escapes. `None` for anything else, which the
/// parser decodes; either way the value is the one `serde_json` reads.
fn plain_json(bytes: &[u8]) -> Option<serde_json::Value> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    let canonical = match digits {
        [b'0'] => !negative,
        [b'1'..=b'9', rest @ ..] => rest.len() < 18 && rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if canonical {
        let magnitude = digits
            .iter()
            .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
        return Some(serde_json::Value::from(if negative {
            -magnitude
        } else {
            magnitude
        }));
    }
    match bytes {
        [b'"', inner @ .., b'"'] if reply::plain_string(inner) => {
            std::str::from_utf8(inner).ok().map(serde_json::Value::from)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::plain_json;

    #[test]
    fn plain_json_reads_what_serde_json_reads_or_leaves_it_to_it() {
        let texts = [
            "0",
            "-0",
            "7",
            "-7",
            "00",
            "01",
            "-01",
            "+1",
            "1e3",
            "1.5",
            " 1",
            "1 ",
            "999999999999999999",
            "-999999999999999999",
            "1000000000000000000",
            "9223372036854775807",
            "-9223372036854775808",
            "9999999999999999999",
            "18446744073709551615",
            "\"\"",
            "\"abc\"",
            "\"a\\\"b\"",
            "\"\\u00e9\"",
            "\"é🦀\"",
            "\"tab\t\"",
            "\"",
            "\"a",
            "a\"",
            "true",
            "null",
            "[1]",
            "{}",
            "",
        ];
        for text in texts {
            let expected: Option<serde_json::Value> = serde_json::from_str(text).ok();
            match plain_json(text.as_bytes()) {
                Some(value) => assert_eq!(Some(value), expected, "{text:?}"),
                None => assert!(
                    !matches!(
                        text,
                        "0" | "7" | "-7" | "\"abc\"" | "\"é🦀\"" | "999999999999999999"
                    ),
                    "{text:?} should take the quick path"
                ),
            }
        }
    }
}
