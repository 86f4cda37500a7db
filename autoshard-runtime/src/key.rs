//! Document keys: a path of `(kind, name)` segments, and the entity group it belongs to.
//!
//! A key is a path of segments plus the length of its *entity group* prefix: the unit a
//! store may commit atomically (on Redis Cluster, the hash tag). A child key
//! ([`Key::child`]) stays in its parent's group; a child that starts a group of its own
//! ([`Key::child_group`]) does not. This module only builds, encodes and decodes keys; it
//! knows nothing about any store, and nothing about which documents an entity has (that
//! is the mapper's layout).
//!
//! # Encoding
//! [`Key::encode`] writes every segment as `kind:name`, joined by `/`, with the group
//! prefix wrapped in `{…}`: `{Question:42}`, `{Question:42/Part:3}` (a child group),
//! `{Question:42}/Response:7` (a child in its parent's group). Every `%`, `/`, `:`, `{`,
//! `}` and control character inside a kind or name is percent-escaped, so the encoding is
//! injective: no id can make its key equal another key, or move a Redis Cluster hash tag.

use std::fmt;
use std::sync::Arc;

/// One `(kind, name)` step of a key's path. Both texts are shared: cloning a segment (and
/// so building a child key) copies no text.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Segment {
    kind: Arc<str>,
    name: Arc<str>,
}

impl Segment {
    /// The kind of this segment (`"Question"`).
    #[must_use]
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The name (the id as text) of this segment.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The key of one document.
///
/// ```
/// use autoshard::Key;
///
/// let question = Key::new("Question", "42");
/// assert_eq!(question.encode(), "{Question:42}");
/// let response = question.child("Response", "7");
/// assert_eq!(response.encode(), "{Question:42}/Response:7");
/// assert!(response.same_group(&question));
/// let part = question.child_group("Part", "3");
/// assert_eq!(part.encode(), "{Question:42/Part:3}");
/// assert!(!part.same_group(&question));
///
/// // Ids that contain separators are escaped, so they cannot collide with another key.
/// let tricky = Key::new("Question", "42/Part:3");
/// assert_ne!(tricky.encode(), part.encode());
/// assert_eq!(Key::decode(&tricky.encode()).unwrap(), tricky);
/// ```
///
/// A key is immutable and shares its path: a clone allocates nothing, and a child key
/// allocates its path and its new segment's texts only.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    path: Arc<[Segment]>,
    /// How many leading segments form the entity group (>= 1).
    group_len: usize,
}

impl Key {
    /// The key of a root entity: its own entity group.
    pub fn new(kind: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        Key {
            path: Arc::new([Segment {
                kind: kind.into(),
                name: name.into(),
            }]),
            group_len: 1,
        }
    }

    /// The key of a child entity under `self`, in the same entity group as `self`.
    #[must_use]
    pub fn child(&self, kind: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        let last = Segment {
            kind: kind.into(),
            name: name.into(),
        };
        Key {
            path: self.path.iter().cloned().chain([last]).collect(),
            group_len: self.group_len,
        }
    }

    /// The key of a child of `self` that starts an entity group of its own: it shares
    /// `self`'s path, not its group, so a store may place it elsewhere (on Redis Cluster,
    /// in another slot), and its own children ([`Key::child`]) share its group.
    #[must_use]
    pub fn child_group(&self, kind: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        let mut key = self.child(kind, name);
        key.group_len = key.path.len();
        key
    }

    /// The segments of this key, root first.
    #[must_use]
    pub fn path(&self) -> &[Segment] {
        &self.path
    }

    /// The kind of the last segment.
    #[must_use]
    pub fn kind(&self) -> &str {
        &self.last().kind
    }

    /// The name (id text) of the last segment.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.last().name
    }

    fn last(&self) -> &Segment {
        // Invariant: every constructor makes a non-empty path.
        &self.path[self.path.len() - 1]
    }

    /// The parent key (the path without its last segment), if any.
    #[must_use]
    pub fn parent(&self) -> Option<Key> {
        if self.path.len() < 2 {
            return None;
        }
        let path: Arc<[Segment]> = self.path[..self.path.len() - 1].into();
        let group_len = self.group_len.min(path.len());
        Some(Key { path, group_len })
    }

    /// Whether `self` is a child of `parent` (of its group or of a group of its own).
    pub(crate) fn is_child_of(&self, parent: &Key) -> bool {
        self.path.len() == parent.path.len() + 1 && self.path.starts_with(&parent.path)
    }

    /// The key of this key's entity group (its group prefix).
    #[must_use]
    pub fn group(&self) -> Key {
        if self.group_len == self.path.len() {
            return self.clone();
        }
        Key {
            path: self.path[..self.group_len].into(),
            group_len: self.group_len,
        }
    }

    /// Whether `self` and `other` are in the same entity group.
    #[must_use]
    pub fn same_group(&self, other: &Key) -> bool {
        self.path[..self.group_len] == other.path[..other.group_len]
    }

    /// The canonical text form of this key; see the module docs.
    #[must_use]
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(16 * self.path.len());
        self.push_encoded(&mut out);
        out
    }

    /// Appends [`Key::encode`] to `out`, without the formatting machinery (a store's
    /// names are built on every call).
    pub(crate) fn push_encoded(&self, out: &mut String) {
        // Writing into a `String` cannot fail.
        let _ = self.write_encoded(self.path.len(), out);
    }

    /// Appends the encoding of this key's entity group (what [`Key::group`]`.encode()`
    /// answers) to `out`, without building the group's key.
    pub(crate) fn push_group_encoded(&self, out: &mut String) {
        // Writing into a `String` cannot fail.
        let _ = self.write_encoded(self.group_len, out);
    }

    /// Writes the encoding of the key made of the first `len` segments (`len` at least
    /// the group's length, or exactly it).
    fn write_encoded(&self, len: usize, out: &mut impl fmt::Write) -> fmt::Result {
        let group_len = self.group_len.min(len);
        out.write_char('{')?;
        for (i, segment) in self.path[..len].iter().enumerate() {
            if i == group_len {
                out.write_char('}')?;
            }
            if i > 0 {
                out.write_char('/')?;
            }
            escape_into(&segment.kind, out)?;
            out.write_char(':')?;
            escape_into(&segment.name, out)?;
        }
        if group_len == len {
            out.write_char('}')?;
        }
        Ok(())
    }

    /// The encoded form of this key's entity group, without braces: the text a Redis
    /// Cluster hashes for every key of the group.
    #[must_use]
    pub fn encoded_group(&self) -> String {
        let mut encoded = String::with_capacity(16 * self.group_len);
        self.push_group_encoded(&mut encoded);
        encoded[1..encoded.len() - 1].to_owned()
    }

    /// Parses the output of [`Key::encode`].
    pub fn decode(text: &str) -> Result<Key, KeyDecodeError> {
        let err = || KeyDecodeError {
            text: text.to_owned(),
        };
        let inner = text.strip_prefix('{').ok_or_else(err)?;
        let close = inner.find('}').ok_or_else(err)?;
        let (group, rest) = (&inner[..close], &inner[close + 1..]);
        let mut path = Vec::new();
        for part in group.split('/') {
            path.push(decode_segment(part).ok_or_else(err)?);
        }
        let group_len = path.len();
        if !rest.is_empty() {
            let rest = rest.strip_prefix('/').ok_or_else(err)?;
            for part in rest.split('/') {
                path.push(decode_segment(part).ok_or_else(err)?);
            }
        }
        Ok(Key {
            path: path.into(),
            group_len,
        })
    }
}

/// A hash map on a write's or a load's path (keyed by [`Key`]s, mostly): foldhash, randomly
/// seeded, where the standard library's hasher costs more than the rest of finding an
/// entry.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, FastHasher>;

/// The hasher of [`FastMap`], and of whatever else hashes keys on a write's path.
pub(crate) type FastHasher = foldhash::fast::RandomState;

/// The readable encoded form, as in errors and logs: `Key({Question:42}/Response:7)`.
impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", self.encode())
    }
}

/// The encoded form ([`Key::encode`]), written without an intermediate string.
impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_encoded(self.path.len(), f)
    }
}

/// A text that is not the encoding of any [`Key`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not an autoshard key")]
pub struct KeyDecodeError {
    text: String,
}

fn must_escape(c: char) -> bool {
    matches!(c, '%' | '/' | ':' | '{' | '}') || c.is_control()
}

/// Percent-escapes `raw` the way a key segment is escaped in [`Key::encode`], for other
/// names built beside keys (the Redis scan index of a kind).
#[cfg(feature = "redis")]
pub(crate) fn escape_segment(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    // Writing into a `String` cannot fail.
    let _ = escape_into(raw, &mut out);
    out
}

/// The bytes [`must_escape`] keeps as they are: printable ASCII but for `%/:{}` (a byte
/// of a multi-byte character, and a control character, takes the slow path).
const PLAIN: [bool; 256] = {
    let mut plain = [false; 256];
    let mut b = 0x20;
    while b < 0x7f {
        plain[b] = !matches!(b as u8, b'%' | b'/' | b':' | b'{' | b'}');
        b += 1;
    }
    plain
};

fn escape_into(raw: &str, out: &mut impl fmt::Write) -> fmt::Result {
    // The common case, nothing to escape, decided byte by byte by a table (a key is
    // encoded on every store call).
    if raw.bytes().all(|b| PLAIN[usize::from(b)]) {
        return out.write_str(raw);
    }
    let mut rest = raw;
    while let Some(at) = rest.find(must_escape) {
        out.write_str(&rest[..at])?;
        let c = rest[at..].chars().next().unwrap_or_default();
        let mut buf = [0u8; 4];
        for byte in c.encode_utf8(&mut buf).bytes() {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.write_char('%')?;
            out.write_char(char::from(HEX[usize::from(byte >> 4)]))?;
            out.write_char(char::from(HEX[usize::from(byte & 0x0F)]))?;
        }
        rest = &rest[at + c.len_utf8()..];
    }
    out.write_str(rest)
}

fn unescape(text: &str) -> Option<Arc<str>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok().map(Arc::from)
}

fn decode_segment(part: &str) -> Option<Segment> {
    let (kind, name) = part.split_once(':')?;
    let kind = unescape(kind)?;
    if kind.is_empty() {
        return None;
    }
    Some(Segment {
        kind,
        name: unescape(name)?,
    })
}

/// A type usable as an entity's `#[id]`: integers, `String` and `uuid::Uuid`.
pub trait EntityId: Clone + Send + Sync + fmt::Debug + 'static {
    /// The id as the name of a key segment.
    fn to_key_name(&self) -> String;
    /// Parses a key segment name back; `None` when it is not an id of this type.
    fn from_key_name(name: &str) -> Option<Self>;
}

macro_rules! integer_ids {
    ($($t:ty),*) => {$(
        impl EntityId for $t {
            fn to_key_name(&self) -> String { self.to_string() }
            fn from_key_name(name: &str) -> Option<Self> { name.parse().ok() }
        }
    )*};
}
integer_ids!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize
);

impl EntityId for String {
    fn to_key_name(&self) -> String {
        self.clone()
    }
    fn from_key_name(name: &str) -> Option<Self> {
        Some(name.to_owned())
    }
}

impl EntityId for uuid::Uuid {
    fn to_key_name(&self) -> String {
        self.hyphenated().to_string()
    }
    fn from_key_name(name: &str) -> Option<Self> {
        uuid::Uuid::parse_str(name).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_byte_table_keeps_exactly_what_must_not_be_escaped() {
        for b in 0..=u8::MAX {
            let c = char::from(b);
            assert_eq!(
                PLAIN[usize::from(b)],
                b.is_ascii() && !must_escape(c),
                "byte {b:#04x}"
            );
        }
    }

    #[test]
    fn round_trips_and_never_collides() {
        let ids = [
            "42",
            "42/Part:3",
            "{x}",
            "a:b",
            "%41",
            "",
            "ü/é",
            "\n",
            "}{",
        ];
        let mut seen = std::collections::HashSet::new();
        for id in ids {
            let root = Key::new("Question", id);
            let keys = [
                root.clone(),
                root.child_group("Part", "0"),
                root.child_group("Parts", "").child("Part", "u"),
                root.child_group("Group", "1").child("Response", id),
                root.child("Response", id),
            ];
            for key in keys {
                let text = key.encode();
                assert_eq!(Key::decode(&text).unwrap(), key, "{text}");
                assert!(seen.insert(text.clone()), "collision on {text}");
                // Exactly one hash tag: the first `{` … `}` holds the whole group.
                assert_eq!(text.matches('{').count(), 1, "{text}");
                assert_eq!(text.matches('}').count(), 1, "{text}");
            }
        }
    }

    #[test]
    fn groups() {
        let q = Key::new("Question", "1");
        let g2 = q.child_group("Group", "2");
        let r = g2.child("Response", "9");
        assert_eq!(r.group(), g2);
        assert!(r.same_group(&g2.child("Response", "10")));
        assert!(!r.same_group(&q.child_group("Group", "3").child("Response", "9")));
        assert!(
            !q.child_group("Part", "0")
                .same_group(&q.child_group("Part", "1"))
        );
        assert!(q.child("A", "a").same_group(&q.child("A", "b")));
        assert_eq!(r.parent(), Some(g2.clone()));
        assert!(r.is_child_of(&g2) && g2.is_child_of(&q));
        assert!(!r.is_child_of(&q) && !q.is_child_of(&q));
        assert_eq!(r.encoded_group(), "Question:1/Group:2");
        let group = |key: &Key| {
            let mut out = String::new();
            key.push_group_encoded(&mut out);
            out
        };
        assert_eq!(group(&r), g2.encode());
        assert_eq!(group(&q), q.encode());
        assert_eq!(r.to_string(), r.encode());
    }

    #[test]
    fn debug_shows_the_encoded_key() {
        let key = Key::new("Question", "4/2").child("Response", "7");
        assert_eq!(format!("{key:?}"), "Key({Question:4%2F2}/Response:7)");
    }

    #[test]
    fn escaping_replaces_exactly_the_reserved_and_control_characters() {
        use std::fmt::Write as _;
        let reference = |raw: &str| -> String {
            raw.chars()
                .map(|c| {
                    if !must_escape(c) {
                        return c.to_string();
                    }
                    let mut buf = [0u8; 4];
                    let mut escaped = String::new();
                    for b in c.encode_utf8(&mut buf).bytes() {
                        write!(escaped, "%{b:02X}").unwrap();
                    }
                    escaped
                })
                .collect()
        };
        let every: String = ('\0'..='\u{2FF}').collect();
        let texts = [
            "Question",
            "~shard:balance.0",
            every.as_str(),
            "plain\u{85}after",
            "é",
            "\u{7F}",
        ];
        for text in texts {
            assert_eq!(escape_segment(text), reference(text), "{text:?}");
        }
        let every: Vec<String> = every.chars().map(String::from).collect();
        for text in &every {
            assert_eq!(escape_segment(text), reference(text), "{text:?}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for text in ["", "Question:1", "{Question:1", "{:1}", "{Q:%zz}", "{Q:1}x"] {
            assert!(Key::decode(text).is_err(), "{text}");
        }
    }
}
