//! Where things live on the server: the Redis key of a document, of its entity group's
//! version counter and of a scan index (their cluster slots are redis-rs's
//! `cluster_routing::Slot::for_key`).
//!
//! Only names are computed here; nothing talks to a server.
//!
//! Every name is the namespace prefix followed by text built from [`Key::encode`], whose
//! `{…}` is exactly the key's entity group. Four shapes, none of which can equal another:
//! - document `ns{group}` or `ns{group}/rest`: after the `}` comes nothing or `/`;
//! - the record hash of a document (its write record, apart from its values)
//!   `<document>/~w`: its last segment, `~w`, holds no `:`, which every document's last
//!   segment (`Kind:name`, with `:` escaped in both) does, and it is in the document's
//!   slot;
//! - version counter of an entity group `ns{group}#v`: after the `}` comes `#`;
//! - scan index of the children of `parent` of one kind `ns<parent.encode()>#i:<kind>`
//!   (in the parent's entity group), and of root documents of one kind
//!   `ns{#root:<kind>}#i` (its own hash tag). The kind is escaped like key segments, so it
//!   holds no `:`; the last `:` therefore splits parent and kind, and the `#i:` / `}#i`
//!   endings keep indexes apart from counters and documents.

use crate::key::{Key, escape_segment};

/// Text that writes itself into a command: a key's name (below), an argument
/// (`call.rs`).
pub(super) trait Text: Sync {
    /// Appends the text to `out`.
    fn push_to(&self, out: &mut String);
}

impl Text for String {
    fn push_to(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl Text for str {
    fn push_to(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl<T: Text + ?Sized> Text for &T {
    fn push_to(&self, out: &mut String) {
        (**self).push_to(out);
    }
}

/// A name built from its parts: prefix, a key's encoding (or its entity group's), suffix.
/// Written with [`Text`], not `fmt`: names are built for every command, and the
/// formatting machinery costs several times the copying.
pub(super) struct Name<'a> {
    prefix: &'a str,
    key: &'a Key,
    group_only: bool,
    suffix: &'static str,
}

impl Text for Name<'_> {
    fn push_to(&self, out: &mut String) {
        out.push_str(self.prefix);
        if self.group_only {
            self.key.push_group_encoded(out);
        } else {
            self.key.push_encoded(out);
        }
        out.push_str(self.suffix);
    }
}

impl Name<'_> {
    fn to_text(&self) -> String {
        // Sized for a typical key at once rather than grown as it is written.
        let mut name = String::with_capacity(self.prefix.len() + 64);
        self.push_to(&mut name);
        name
    }
}

/// The key names of one store (one namespace).
#[derive(Clone, Debug)]
pub(super) struct Names {
    prefix: String,
}

impl Names {
    /// The names of a store whose names all start with `prefix`, which must not contain `{` or `}`
    /// (it would move every key's hash tag).
    pub(super) fn new(prefix: &str) -> Option<Self> {
        if prefix.contains(['{', '}']) {
            return None;
        }
        Some(Names {
            prefix: prefix.to_owned(),
        })
    }

    /// The namespace prefix.
    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key of a document.
    pub(super) fn doc(&self, key: &Key) -> String {
        self.doc_name(key).to_text()
    }

    /// [`Names::doc`], written where it is used.
    pub(super) fn doc_name<'a>(&'a self, key: &'a Key) -> Name<'a> {
        self.name(key, false, "")
    }

    /// The Redis key of a document's record hash ([`record_of`]), written where it is
    /// used.
    pub(super) fn record_name<'a>(&'a self, key: &'a Key) -> Name<'a> {
        self.name(key, false, RECORD_SUFFIX)
    }

    /// The Redis key of the version counter of `key`'s entity group.
    pub(super) fn counter(&self, key: &Key) -> String {
        self.counter_name(key).to_text()
    }

    /// [`Names::counter`], written where it is used.
    pub(super) fn counter_name<'a>(&'a self, key: &'a Key) -> Name<'a> {
        self.name(key, true, "#v")
    }

    fn name<'a>(&'a self, key: &'a Key, group_only: bool, suffix: &'static str) -> Name<'a> {
        Name {
            prefix: &self.prefix,
            key,
            group_only,
            suffix,
        }
    }

    /// The Redis key of the scan index of documents of `kind` under `parent`.
    pub(super) fn index(&self, parent: Option<&Key>, kind: &str) -> String {
        let kind = escape_segment(kind);
        match parent {
            Some(parent) => format!("{}{}#i:{kind}", self.prefix, parent.encode()),
            None => format!("{}{{#root:{kind}}}#i", self.prefix),
        }
    }

    /// The Redis key of the scan index that lists `key`, and whether it shares `key`'s
    /// entity group (hash tag), so a script may update both atomically on a cluster.
    pub(super) fn index_of(&self, key: &Key) -> (String, bool) {
        let parent = key.parent();
        let same_group = parent.as_ref().is_some_and(|p| p.same_group(key));
        (self.index(parent.as_ref(), key.kind()), same_group)
    }
}

/// The Redis key of the record hash of the document whose Redis key is `doc` (module
/// docs; the scripts append the same suffix).
pub(super) fn record_of(doc: &str) -> String {
    let mut name = String::with_capacity(doc.len() + RECORD_SUFFIX.len());
    name.push_str(doc);
    name.push_str(RECORD_SUFFIX);
    name
}

/// What follows a document's Redis key in the name of its record hash.
pub(super) const RECORD_SUFFIX: &str = "/~w";

#[cfg(test)]
mod tests {
    use super::*;
    use ::redis::cluster_routing::Slot;

    fn slot(redis_key: &str) -> Slot {
        Slot::for_key(redis_key)
    }

    #[test]
    fn slots_match_redis() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        // The CRC16-XMODEM check value.
        assert_eq!(Some(slot("123456789")), Slot::new(0x31C3));
        assert_eq!(Some(slot("foo")), Slot::new(12182));
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
    }

    #[test]
    fn groups_share_a_slot_and_shards_spread() {
        let names = Names::new("ns:").unwrap();
        let q = Key::new("Question", "4{2}");
        let child = q.child("Answer", "a/b");
        let slot_q = slot(&names.doc(&q));
        assert_eq!(slot(&names.doc(&child)), slot_q);
        assert_eq!(slot(&names.counter(&child)), slot_q);
        assert_eq!(slot(&record_of(&names.doc(&child))), slot_q);
        let (index, same) = names.index_of(&child);
        assert!(same);
        assert_eq!(slot(&index), slot_q);
        let (root_index, same) = names.index_of(&q);
        assert!(!same);
        assert_eq!(root_index, "ns:{#root:Question}#i");
        let group_slots: std::collections::HashSet<Slot> = (0..10)
            .map(|i| slot(&names.doc(&q.child_group("Part", i.to_string()))))
            .collect();
        assert!(group_slots.len() > 5, "{group_slots:?}");
        let in_group = q.child_group("Parts", "").child("Part", "u1");
        let (index, same) = names.index_of(&in_group);
        assert!(same);
        assert_eq!(slot(&index), slot(&names.doc(&in_group)));
    }

    #[test]
    fn names_are_the_stored_layout() {
        // What stores written before hold: a name never changes across versions.
        let names = Names::new("ns:").unwrap();
        let q = Key::new("Question", "1");
        let shard = q.child_group("~shard", "votes.0");
        let answer = q.child("Answer", "a/b:{c}");
        assert_eq!(names.doc(&q), "ns:{Question:1}");
        assert_eq!(names.doc(&shard), "ns:{Question:1/~shard:votes.0}");
        assert_eq!(names.doc(&answer), "ns:{Question:1}/Answer:a%2Fb%3A%7Bc%7D");
        assert_eq!(names.counter(&answer), "ns:{Question:1}#v");
        assert_eq!(names.counter(&shard), "ns:{Question:1/~shard:votes.0}#v");
        for key in [&q, &shard, &answer] {
            assert_eq!(names.doc(key), format!("ns:{}", key.encode()));
            let mut record = String::new();
            names.record_name(key).push_to(&mut record);
            assert_eq!(record, record_of(&names.doc(key)));
            assert_eq!(record, format!("ns:{}/~w", key.encode()));
        }
    }

    #[test]
    fn names_never_collide() {
        let names = Names::new("ns:").unwrap();
        let mut seen = std::collections::HashSet::new();
        for id in ["1", "1#v", "1}#v", "#root:Q", "x#i:Q", "a:b", "1/~w", "~w"] {
            for kind in ["Q", "Q#i", "#root", "a:b"] {
                let key = Key::new(kind, id);
                let child = key.child(kind, id);
                for name in [
                    names.doc(&key),
                    names.doc(&child),
                    record_of(&names.doc(&key)),
                    record_of(&names.doc(&child)),
                    names.counter(&key),
                    names.index(None, kind),
                    names.index(Some(&key), kind),
                ] {
                    seen.insert(name);
                }
            }
        }
        // 8 ids x 4 kinds: 2 documents, their 2 record hashes, 1 counter, 1 child index
        // each, plus 4 root indexes.
        assert_eq!(seen.len(), 8 * 4 * 6 + 4);
        assert!(Names::new("a{b").is_none());
    }
}
