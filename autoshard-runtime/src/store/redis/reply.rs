//! Decoding the replies of the store's Lua scripts. Replies come from the server, so
//! nothing here panics on an unexpected shape: it becomes an error.

use crate::error::Error;
use crate::error::WHOLE_DOCUMENT;
use crate::key::Key;
use ::redis::Value;

/// [`Error::Malformed`] for the document at `key`, which a script found is not one of
/// the store's: the script's reason (the reply item after its status), or "not ours".
pub(super) fn not_ours(key: &Key, items: &[Value]) -> Error {
    Error::Malformed {
        key: key.clone(),
        field: WHOLE_DOCUMENT.to_owned(),
        reason: items.get(1).and_then(text).unwrap_or("not ours").to_owned(),
    }
}

/// The text of a bulk or simple string reply.
pub(super) fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// An integer reply (or a string holding one).
pub(super) fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        other => text(other).and_then(|t| t.parse().ok()),
    }
}

/// A non-negative integer reply.
pub(super) fn uint(value: &Value) -> Option<u64> {
    int(value).and_then(|n| u64::try_from(n).ok())
}

/// Whether JSON writes `bytes` between its quotes as they are (no `"`, `\\` or control
/// character to escape). Counted without an early exit, so that the check runs many bytes
/// at a time: a load and a merge check every string they decode or send.
pub(super) fn plain_string(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .filter(|&&b| b < 0x20 || b == b'"' || b == b'\\')
        .count()
        == 0
}

/// The items of an array reply.
pub(super) fn array(value: &Value) -> Option<&[Value]> {
    match value {
        Value::Array(items) => Some(items),
        _ => None,
    }
}

/// A 1-based position into KEYS, as a 0-based index below `len`.
pub(super) fn position(value: &Value, len: usize) -> Option<usize> {
    let n = usize::try_from(int(value)?).ok()?;
    (1..=len).contains(&n).then(|| n - 1)
}

/// The error for a reply of an unexpected shape.
pub(super) fn unexpected(what: &str, value: &Value) -> String {
    format!("unexpected reply to {what}: {value:?}")
}
