//! Reads: `get_many` as one read script per slot, and scan pages as one read script that
//! lists and reads atomically (`lua/read.lua`); decoding what the script answers.

use super::{reply, RedisStore, WHOLE_DOCUMENT};
use crate::document::{Document, Version, Versioned};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::{Scan, ScanPage};
use ::redis::Value;
use std::collections::BTreeMap;

impl RedisStore {
    /// Reads documents with one read script per slot (one in all on a standalone server).
    pub(super) async fn read(&self, keys: &[Key]) -> Result<Vec<Option<Versioned>>> {
        let names: Vec<String> = keys.iter().map(|k| self.layout.doc(k)).collect();
        let mut batches: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, name) in names.iter().enumerate() {
            let slot = if self.is_cluster() {
                super::layout::slot(name)
            } else {
                0
            };
            batches.entry(slot).or_default().push(i);
        }
        let calls = batches.into_values().map(|positions| {
            let mut invocation = self.read_script.prepare_invoke();
            for &i in &positions {
                invocation.key(&names[i]);
            }
            let mut conn = self.conns.get();
            let first = &names[positions[0]];
            async move {
                let reply: Value = invocation
                    .invoke_async(&mut conn)
                    .await
                    .map_err(|e| self.backend(format_args!("read of `{first}`"), e))?;
                Ok::<_, Error>((positions, reply))
            }
        });
        let mut out = vec![None; keys.len()];
        for (positions, reply) in futures::future::try_join_all(calls).await? {
            let entries = reply::array(&reply)
                .filter(|entries| entries.len() == positions.len())
                .ok_or_else(|| {
                    self.backend("read", reply::unexpected("the read script", &reply))
                })?;
            for (&i, entry) in positions.iter().zip(entries) {
                out[i] = self.decode_entry(&keys[i], entry)?;
            }
        }
        Ok(out)
    }

    fn decode_entry(&self, key: &Key, entry: &Value) -> Result<Option<Versioned>> {
        let bad = || self.backend("read", reply::unexpected("the read script", entry));
        let items = reply::array(entry).ok_or_else(bad)?;
        match items.first().and_then(reply::int) {
            Some(0) => Ok(None),
            Some(1) if items.len() % 2 == 0 => {
                let version = reply::uint(&items[1]).ok_or_else(bad)?;
                let mut doc = Document::new();
                for pair in items[2..].chunks_exact(2) {
                    let name = reply::text(&pair[0]).ok_or_else(bad)?;
                    let json = match &pair[1] {
                        Value::BulkString(bytes) => bytes.as_slice(),
                        _ => return Err(bad()),
                    };
                    let value = serde_json::from_slice(json).map_err(|e| Error::Malformed {
                        key: key.clone(),
                        field: name.to_owned(),
                        reason: format!("field `p:{name}` does not hold JSON: {e}"),
                    })?;
                    doc.insert(name.to_owned(), value);
                }
                Ok(Some(Versioned {
                    doc,
                    version: Version(version),
                }))
            }
            Some(2) => Err(Error::Malformed {
                key: key.clone(),
                field: WHOLE_DOCUMENT.to_owned(),
                reason: items
                    .get(1)
                    .and_then(reply::text)
                    .unwrap_or("not ours")
                    .to_owned(),
            }),
            _ => Err(bad()),
        }
    }

    /// One scan page: one read script that lists the page and reads, atomically, the
    /// documents in the index's own entity group (module docs).
    pub(super) async fn scan_page(&self, scan: &Scan) -> Result<ScanPage> {
        let index = self.layout.index(scan.parent.as_ref(), &scan.kind);
        let limit = scan.limit.max(1);
        let min = scan
            .cursor
            .as_ref()
            .map_or_else(|| "-".to_owned(), |c| format!("({c}"));
        let what = format!("scan of `{index}`");
        // One script lists the page and reads its documents: atomic for the members in
        // the index's own entity group (all of them on a standalone server).
        let mut invocation = self.read_script.prepare_invoke();
        invocation
            .key(&index)
            .arg("scan")
            .arg(self.layout.prefix())
            .arg(min)
            .arg(limit)
            .arg(if self.is_cluster() { "0" } else { "1" });
        let mut conn = self.conns.get();
        let reply: Value = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.backend(&what, e))?;
        let bad = || self.backend(&what, reply::unexpected("the read script", &reply));
        let (members, entries) = match reply::array(&reply) {
            Some([members, entries]) => (
                reply::array(members).ok_or_else(bad)?,
                reply::array(entries).ok_or_else(bad)?,
            ),
            _ => return Err(bad()),
        };
        if members.len() != entries.len() {
            return Err(bad());
        }
        let next = if members.len() == limit {
            members.last().and_then(reply::text).map(str::to_owned)
        } else {
            None
        };
        let mut found = Vec::with_capacity(members.len());
        let mut elsewhere = Vec::new();
        for (member, entry) in members.iter().zip(entries) {
            let member = reply::text(member).ok_or_else(bad)?;
            let key = Key::decode(member).map_err(|e| self.backend(&what, e))?;
            if key.kind() != scan.kind || key.parent() != scan.parent {
                tracing::warn!(%index, %member, "scan index entry of another kind or parent; skipped");
                continue;
            }
            let not_read = reply::array(entry)
                .is_some_and(|items| items.first().and_then(reply::int) == Some(3));
            if not_read {
                elsewhere.push(found.len());
                found.push((key, None));
            } else {
                let doc = self.decode_entry(&key, entry)?;
                found.push((key, doc));
            }
        }
        if !elsewhere.is_empty() {
            // Documents in groups of their own (cluster only): read after the listing.
            let keys: Vec<Key> = elsewhere.iter().map(|&i| found[i].0.clone()).collect();
            for (&i, doc) in elsewhere.iter().zip(self.read(&keys).await?) {
                found[i].1 = doc;
            }
        }
        let items = found
            .into_iter()
            .filter_map(|(key, doc)| doc.map(|doc| (key, doc)))
            .collect();
        Ok(ScanPage { items, next })
    }
}
