//! Reads. On a standalone server documents are read with `HGETALL` inside `MULTI`/`EXEC`
//! (their record hashes too, with `HGETALL`, or `HGET` of the one writer's entry a lookup
//! names: [`Records`]), and a lookup lists its pages in the same step, answered from
//! there when it read every listed document (`docs/design/redis.md`, "Round trips");
//! scan pages and the rest of a lookup by the read script (`lua/read.lua`), which lists
//! and reads atomically. On a cluster the reads go to each master as one pipeline
//! (`cluster_read.rs`). The replies become documents in `decode.rs`.

use super::call::{KeyText, ScriptCall};
use super::{RedisStore, names, reply};
use crate::document::Versioned;
use crate::error::Result;
use crate::key::Key;
use crate::store::{Found, Lookup, Scan, ScanPage};
use ::redis::Value;

impl RedisStore {
    /// Reads documents with their write records, one writer's entry of them, or none
    /// ([`Records`]): on a standalone server in one `MULTI`; on a cluster, concurrently,
    /// one `MULTI` per slot (the documents' `HGETALL`s, with the record hashes' `HGETALL`
    /// or `HGET`), or for a slot of one key read without its record (a static shard, a
    /// root document) one `HGETALL`, which costs the server a fraction of the read
    /// script; those bound for one master go in one pipeline (`cluster_read.rs`).
    pub(super) async fn read(
        &self,
        keys: &[Key],
        records: Records<'_>,
    ) -> Result<Vec<Option<Versioned>>> {
        let names: Vec<String> = keys.iter().map(|k| self.names.doc(k)).collect();
        if !self.is_cluster() {
            let (docs, _) = self.read_hashes(keys, &names, &[], records).await?;
            return Ok(docs);
        }
        let (docs, _) = self.read_cluster(keys, &names, &[], &[], records).await?;
        Ok(docs)
    }

    /// Reads documents (`names`: their Redis names) and lists the first page of each
    /// scan on a standalone server, in one atomic step without a script: `HGETALL` per
    /// document and `ZRANGEBYLEX` per scan inside `MULTI`/`EXEC` (a single document: a
    /// lone `HGETALL`). A command inside a script costs the server several times what it
    /// costs on its own, and this is the read of every load. Answers the documents and
    /// the members of each page (the caller reads their documents).
    async fn read_hashes(
        &self,
        keys: &[Key],
        names: &[String],
        indexes: &[(&str, &Scan)],
        records: Records<'_>,
    ) -> Result<(Vec<Option<Versioned>>, Vec<Vec<String>>)> {
        let what = || match names.first() {
            Some(first) => format!("read of `{first}`"),
            None => "read".to_owned(),
        };
        // A document, and its record hash when the records are read (module docs).
        let per_document = if records.any() { 2 } else { 1 };
        let commands = per_document * names.len() + indexes.len();
        let mut pipe = ::redis::pipe();
        if commands > 1 {
            pipe.atomic();
        }
        pipe.ignore_errors();
        for name in names {
            pipe.cmd("HGETALL").arg(name);
            records.add_read(&mut pipe, name);
        }
        for (index, scan) in indexes {
            pipe.cmd("ZRANGEBYLEX")
                .arg(*index)
                .arg(cursor_min(scan))
                .arg("+")
                .arg("LIMIT")
                .arg(0)
                .arg(page_limit(scan));
        }
        let pipe = &pipe;
        let replies: Vec<Value> = self
            .conns
            .again_if_dropped(|mut conn| async move { pipe.query_async(&mut conn).await })
            .await
            .map_err(|e| self.backend(what(), e))?;
        if replies.len() != commands {
            return Err(self.backend(
                what(),
                format!("{} replies to {commands} commands", replies.len()),
            ));
        }
        let (hashes, pages) = replies.split_at(per_document * names.len());
        let mut docs = Vec::with_capacity(keys.len());
        for ((key, name), replies) in keys.iter().zip(names).zip(hashes.chunks(per_document)) {
            docs.push(match replies {
                [doc, record] => {
                    self.decode_with_record(key, name, doc, record, records)
                        .await?
                }
                _ => self.decode_hash(key, name, &replies[0], false).await?,
            });
        }
        let pages = pages
            .iter()
            .zip(indexes)
            .map(|(reply, (index, _))| {
                let bad = || {
                    self.backend(
                        format!("scan of `{index}`"),
                        reply::unexpected("ZRANGEBYLEX", reply),
                    )
                };
                reply::array(reply)
                    .ok_or_else(bad)?
                    .iter()
                    .map(|member| reply::text(member).map(str::to_owned).ok_or_else(bad))
                    .collect()
            })
            .collect::<Result<_>>()?;
        Ok((docs, pages))
    }

    /// One document read alone without its record (on a cluster, the only key of its slot
    /// in a read): one `HGETALL`, atomic by itself and a fraction of a script's cost.
    pub(super) async fn read_alone(&self, key: &Key, name: &str) -> Result<Option<Versioned>> {
        let mut command = ::redis::cmd("HGETALL");
        command.arg(name);
        let command = &command;
        let reply: ::redis::RedisResult<Value> = self
            .conns
            .again_if_dropped(|mut conn| async move { command.query_async(&mut conn).await })
            .await;
        match reply {
            Ok(reply) => self.decode_hash(key, name, &reply, false).await,
            Err(e) if e.code() == Some("WRONGTYPE") => Err(self.not_a_hash(key, name).await),
            Err(e) => Err(self.backend(format!("read of `{name}`"), e)),
        }
    }

    /// One scan page: one read script that lists the page and reads, atomically, the
    /// documents in the index's own entity group (module docs).
    pub(super) async fn scan_page(&self, scan: &Scan, records: Records<'_>) -> Result<ScanPage> {
        scan.cursor_key()?;
        let index = self.names.index(scan.parent.as_ref(), &scan.kind);
        let call = &self.scan_call(scan, &index, records.any());
        let reply: Value = self
            .conns
            .again_if_dropped(|mut conn| async move { call.run(&mut conn).await })
            .await
            .map_err(|e| self.backend(format!("scan of `{index}`"), e))?;
        self.decode_page(scan, &index, &reply, records).await
    }

    /// The read script's call for the first page of `scan`, whose index is `index`: it
    /// lists the page and reads its documents, atomic for the members in the index's own
    /// entity group (all of them on a standalone server).
    pub(super) fn scan_call(&self, scan: &Scan, index: &str, records: bool) -> ScriptCall<'_> {
        let mut call = ScriptCall::new(&self.scripts.read, &[index], 6);
        call.arg(flag(records))
            .arg("scan")
            .arg(self.names.prefix())
            .arg(cursor_min(scan))
            .arg(page_limit(scan))
            .arg(if self.is_cluster() { "0" } else { "1" });
        call
    }

    /// A lookup: on a standalone server one read script for all of it; on a cluster the
    /// documents and each scan page, concurrently (`cluster_read.rs`).
    pub(super) async fn lookup_all(&self, lookup: &Lookup) -> Result<Found> {
        for scan in &lookup.scans {
            scan.cursor_key()?;
        }
        if self.is_cluster() {
            return self.lookup_cluster(lookup).await;
        }
        // Without documents one scan is a lookup's one atomic read; several go through the
        // read script, which lists them in one step (`snapshot_lookups`).
        if lookup.scans.is_empty() || (lookup.keys.is_empty() && lookup.scans.len() == 1) {
            let pages = lookup
                .scans
                .iter()
                .map(|s| self.scan_page(s, Records::of(lookup)));
            let docs = async {
                if lookup.keys.is_empty() {
                    Ok(Vec::new())
                } else {
                    self.read(&lookup.keys, Records::of(lookup)).await
                }
            };
            let (docs, pages) = futures::try_join!(docs, futures::future::try_join_all(pages))?;
            return Ok(Found { docs, pages });
        }
        if let Some(found) = self.lookup_listed(lookup).await? {
            return Ok(found);
        }
        let what = match lookup.keys.first() {
            Some(first) => format!("lookup of `{first}`"),
            None => format!("lookup of {} scans", lookup.scans.len()),
        };
        let indexes: Vec<String> = lookup
            .scans
            .iter()
            .map(|scan| self.names.index(scan.parent.as_ref(), &scan.kind))
            .collect();
        let docs: Vec<_> = lookup
            .keys
            .iter()
            .map(|key| self.names.doc_name(key))
            .collect();
        let keys: Vec<KeyText> = docs
            .iter()
            .map(|name| name as KeyText)
            .chain(indexes.iter().map(|index| index as KeyText))
            .collect();
        let mut call = ScriptCall::new(&self.scripts.read, &keys, 4 + 2 * indexes.len());
        call.arg(flag(Records::of(lookup).any()))
            .arg("lookup")
            .arg(lookup.keys.len())
            .arg(self.names.prefix());
        for scan in &lookup.scans {
            call.arg(cursor_min(scan)).arg(page_limit(scan));
        }
        let call = &call;
        let reply: Value = self
            .conns
            .again_if_dropped(|mut conn| async move { call.run(&mut conn).await })
            .await
            .map_err(|e| self.backend(&what, e))?;
        let bad = || self.backend(&what, reply::unexpected("the read script", &reply));
        let parts = reply::array(&reply)
            .filter(|parts| parts.len() == 1 + lookup.scans.len())
            .ok_or_else(bad)?;
        let entries = reply::array(&parts[0])
            .filter(|entries| entries.len() == lookup.keys.len())
            .ok_or_else(bad)?;
        let docs = lookup
            .keys
            .iter()
            .zip(entries)
            .map(|(key, entry)| self.decode_entry(key, entry))
            .collect::<Result<_>>()?;
        let mut pages = Vec::with_capacity(lookup.scans.len());
        for ((scan, index), part) in lookup.scans.iter().zip(&indexes).zip(&parts[1..]) {
            pages.push(
                self.decode_page(scan, index, part, Records::of(lookup))
                    .await?,
            );
        }
        Ok(Found { docs, pages })
    }

    /// A lookup on a standalone server without a script: the documents, the prefetched
    /// ones and the listing of every page in one `MULTI`. Answered when every member of
    /// every page was read in that step (the page is then one snapshot, as the contract
    /// wants); `None` otherwise, and the read script reads it all again.
    async fn lookup_listed(&self, lookup: &Lookup) -> Result<Option<Found>> {
        let read: Vec<Key> = lookup
            .keys
            .iter()
            .chain(&lookup.prefetch)
            .cloned()
            .collect();
        let names: Vec<String> = read.iter().map(|k| self.names.doc(k)).collect();
        let indexes: Vec<String> = lookup
            .scans
            .iter()
            .map(|scan| self.names.index(scan.parent.as_ref(), &scan.kind))
            .collect();
        let listed: Vec<(&str, &Scan)> = indexes
            .iter()
            .map(String::as_str)
            .zip(&lookup.scans)
            .collect();
        let (mut docs, members) = self
            .read_hashes(&read, &names, &listed, Records::of(lookup))
            .await?;
        let mut pages = Vec::with_capacity(lookup.scans.len());
        for ((scan, index), members) in lookup.scans.iter().zip(&indexes).zip(members) {
            let Some(page) = listed_page(scan, index, &members, &read, &docs) else {
                return Ok(None);
            };
            pages.push(page);
        }
        docs.truncate(lookup.keys.len());
        Ok(Some(Found { docs, pages }))
    }

    /// A scan page from the read script's `{members, entries}`, reading the documents it
    /// left to the caller (in groups of their own, on a cluster).
    pub(super) async fn decode_page(
        &self,
        scan: &Scan,
        index: &str,
        reply: &Value,
        records: Records<'_>,
    ) -> Result<ScanPage> {
        let what = format!("scan of `{index}`");
        let limit = page_limit(scan);
        let bad = || self.backend(&what, reply::unexpected("the read script", reply));
        let (members, entries) = match reply::array(reply) {
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
            let Some(key) = listed_key(scan, index, member) else {
                continue;
            };
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
            for (&i, doc) in elsewhere.iter().zip(self.read(&keys, records).await?) {
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

/// The page of `scan` whose index `index` listed `members`, from documents read in the
/// same atomic step as the listing (`read`, and `docs` as read): `None` when a member
/// names a document that was not read there (the read script then reads the page, which
/// lists and reads in one step). A member that names no key, or a key of another kind
/// or parent, is skipped with a warning, as the read script skips it.
pub(super) fn listed_page(
    scan: &Scan,
    index: &str,
    members: &[String],
    read: &[Key],
    docs: &[Option<Versioned>],
) -> Option<ScanPage> {
    let next = (members.len() == page_limit(scan))
        .then(|| members.last().cloned())
        .flatten();
    let mut items = Vec::with_capacity(members.len());
    for member in members {
        let Some(key) = listed_key(scan, index, member) else {
            continue;
        };
        let at = read.iter().position(|k| *k == key)?;
        if let Some(doc) = &docs[at] {
            items.push((key, doc.clone()));
        }
    }
    Some(ScanPage { items, next })
}

/// The key a member of `scan`'s index `index` names, or `None` (with a warning) for a
/// member that names no key, or a key of another kind or parent: such an entry is
/// skipped, as the read script skips it.
fn listed_key(scan: &Scan, index: &str, member: &str) -> Option<Key> {
    let Ok(key) = Key::decode(member) else {
        tracing::warn!(%index, %member, "scan index entry that names no key; skipped");
        return None;
    };
    if key.kind() != scan.kind || key.parent() != scan.parent {
        tracing::warn!(%index, %member, "scan index entry of another kind or parent; skipped");
        return None;
    }
    Some(key)
}

/// The read script's flag for `records`.
fn flag(records: bool) -> &'static str {
    if records { "1" } else { "0" }
}

/// How many members a page of `scan` lists at most: its limit, at least 1 and at most
/// 2^53 - 1, which the read script holds exactly as a Lua number (a larger one, up to
/// `usize::MAX`, is a count `ZRANGEBYLEX` refuses or Lua rounds). No index holds that
/// many members, so a larger limit reads the same pages.
pub(super) fn page_limit(scan: &Scan) -> usize {
    scan.limit.clamp(1, (1 << 53) - 1)
}

/// The `ZRANGEBYLEX` start of `scan`: from the beginning, or after its cursor.
pub(super) fn cursor_min(scan: &Scan) -> String {
    scan.cursor
        .as_ref()
        .map_or_else(|| "-".to_owned(), |c| format!("({c}"))
}

/// What a read answers of each document's write record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Records<'a> {
    /// Nothing of it.
    Off,
    /// Every entry: the record hash's `HGETALL` (and the read script's records).
    All,
    /// One writer's entry (`Lookup::writer`): an `HGET` of its field of the record hash,
    /// whatever number of writers the record holds, where a document is read alone or in
    /// a `MULTI`; the read script, which answers every entry, elsewhere (a superset, as
    /// the contract allows).
    Writer(&'a str),
}

impl<'a> Records<'a> {
    /// What `lookup` asks of the records.
    pub(super) fn of(lookup: &'a Lookup) -> Self {
        match &lookup.writer {
            _ if lookup.records => Records::All,
            Some(writer) => Records::Writer(writer),
            None => Records::Off,
        }
    }

    /// Whether anything of the records is read.
    pub(super) fn any(self) -> bool {
        self != Records::Off
    }

    /// Adds to `pipe` the read of the record of the document `name`, if any.
    pub(super) fn add_read(self, pipe: &mut ::redis::Pipeline, name: &str) {
        match self {
            Records::Off => {}
            Records::All => {
                pipe.cmd("HGETALL").arg(names::record_of(name));
            }
            Records::Writer(writer) => {
                pipe.cmd("HGET")
                    .arg(names::record_of(name))
                    .arg(writer_field(writer));
            }
        }
    }

    /// The reply to the read [`Records::add_read`] added, as an `HGETALL` of the record
    /// hash answers it, when it is not one already: one writer's field and its entry, or
    /// nothing when the hash holds none (any other reply stays as it is, and is decoded
    /// as such).
    pub(super) fn as_entries(self, reply: &Value) -> Option<Value> {
        let Records::Writer(writer) = self else {
            return None;
        };
        match reply {
            Value::Nil => Some(Value::Array(Vec::new())),
            Value::BulkString(entry) => Some(Value::Array(vec![
                Value::BulkString(writer_field(writer).into_bytes()),
                Value::BulkString(entry.clone()),
            ])),
            _ => None,
        }
    }
}

/// The field of a record hash that holds `writer`'s entry.
fn writer_field(writer: &str) -> String {
    format!("w:{writer}")
}
