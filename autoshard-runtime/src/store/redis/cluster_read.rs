//! Reads on a Redis Cluster. The documents a read wants of one slot are read by `MULTI`,
//! an `HGETALL` per document (and, with their write records, the read of each record
//! hash, in the same slot: `HGETALL`, or `HGET` of the one writer's entry a lookup names)
//! and `EXEC`, atomically, as a standalone server reads them; a slot of one document
//! without its record (a static shard, a root document) by a plain `HGETALL`, atomic by
//! itself. A scan's first page (without records) for which the lookup prefetches
//! documents in its index's slot is listed by `ZRANGEBYLEX` in a `MULTI` that also reads
//! those documents, and answered from there when it lists no other document (a load's
//! dynamic-shard scan mostly lists just the compacted document, which it prefetches), as
//! `read.rs` answers a lookup on a standalone server; otherwise, and for every other
//! scan, the read script (`lua/read.lua`) on the index's slot lists and reads it in one
//! step. A `MULTI` costs the server a
//! fraction of the read script (the design doc of the Redis store, "Round trips"). The
//! reads bound for one master go to it as one pipeline (not a transaction: each item is
//! atomic alone, as it is when sent alone), by the slot table (`slots.rs`): a load of an
//! entity with ten static shards and its dynamic-shard scan is three requests on a
//! three-master cluster, and so is the read of two such entities a key group forms over.
//!
//! The table is a hint. A node that does not serve a slot answers a command in it with an
//! error, never with data (inside a `MULTI`, the command is not queued and `EXEC` fails),
//! so documents or a scan answered with an error (or a pipeline that failed short of a
//! timeout: a node gone, a connection lost) are read again on their own through
//! redis-rs's routing and its retries (a slot of several documents, one with its record,
//! or a scan by the read script, which follows `ASK` during a migration), and the table
//! is dropped (`slots.rs`). A slot or a scan the table does not place is read the
//! same way. Pipelines carry reads only: redis-rs sends a pipeline again whole when one
//! of its replies is `MOVED` or `ASK`, which a write must never be.

use super::RedisStore;
use super::call::ScriptCall;
use super::read::{Records, cursor_min, listed_page, page_limit};
use super::reply;
use super::slots::SlotTable;
use crate::document::Versioned;
use crate::error::{Error, Result};
use crate::key::{FastMap, Key};
use crate::store::{Found, Lookup, Scan, ScanPage};
use ::redis::Value;
use ::redis::cluster_routing::Slot;
use std::sync::Arc;

/// What a pipeline to one master reads: the documents of one slot (their positions in
/// the read, [`Reading::slots`]) or the first page of a scan (its position among the
/// scans).
#[derive(Clone, Copy)]
enum Item {
    Docs(usize),
    Scan(usize),
}

/// A scan's first page as read: the page, or its index name and the read script's reply
/// for it, to decode (`read.rs`, `decode_page`).
pub(super) enum Listed {
    Page(ScanPage),
    Script(String, Value),
}

/// What one read reads: documents (`names`: their Redis names) and the first pages of
/// scans (`indexes`: their indexes' names).
struct Reading<'a> {
    keys: &'a [Key],
    names: &'a [String],
    /// The documents' positions, by slot.
    slots: Vec<Vec<usize>>,
    scans: &'a [&'a Scan],
    indexes: &'a [String],
    /// Per scan, the documents the lookup asks to prefetch that live in its index's slot
    /// (their keys and Redis names).
    prefetch: Vec<Vec<(Key, String)>>,
    records: Records<'a>,
}

impl Reading<'_> {
    /// Whether an item is read by `MULTI`: the documents of a slot of several, or a
    /// document with its record (an `HGETALL` per document, and the read of its record
    /// hash with records), and a scan's page without records that the lookup prefetches
    /// documents for in its index's slot (those documents, and the listing). A lone
    /// document without its record is one `HGETALL`, and any other scan the read script
    /// (a `MULTI` that could not answer its page would cost a round trip more).
    fn in_multi(&self, item: Item) -> bool {
        match item {
            Item::Docs(b) => self.slots[b].len() > 1 || self.records.any(),
            Item::Scan(j) => !self.records.any() && !self.prefetch[j].is_empty(),
        }
    }

    /// How many replies an item's commands get in a pipeline: `OK`, a `QUEUED` per
    /// command and `EXEC`'s for a `MULTI`, else one.
    fn replies(&self, item: Item) -> usize {
        match item {
            Item::Docs(b) if self.in_multi(item) => {
                let per_document = if self.records.any() { 2 } else { 1 };
                2 + per_document * self.slots[b].len()
            }
            Item::Scan(j) if self.in_multi(item) => 3 + self.prefetch[j].len(),
            _ => 1,
        }
    }

    /// The Redis name an item reads (the first, for several documents).
    fn name_of(&self, item: Item) -> &str {
        match item {
            Item::Docs(b) => &self.names[self.slots[b][0]],
            Item::Scan(j) => &self.indexes[j],
        }
    }
}

impl RedisStore {
    /// Reads documents (`names`: their Redis names) with or without their write records,
    /// and the first page of each scan (answered as the read script's reply), on a
    /// cluster (module docs).
    pub(super) async fn read_cluster(
        &self,
        keys: &[Key],
        names: &[String],
        scans: &[&Scan],
        prefetch: &[Key],
        records: Records<'_>,
    ) -> Result<(Vec<Option<Versioned>>, Vec<Listed>)> {
        let mut batches: FastMap<Slot, Vec<usize>> = FastMap::default();
        for (i, name) in names.iter().enumerate() {
            batches.entry(Slot::for_key(name)).or_default().push(i);
        }
        let indexes: Vec<String> = scans
            .iter()
            .map(|scan| self.names.index(scan.parent.as_ref(), &scan.kind))
            .collect();
        let table = self.conns.slot_table();
        let owner = |name: &str| {
            let table = table.as_ref()?;
            table.owner(Slot::for_key(name)).map(|(node, _)| node)
        };
        let slots: Vec<Vec<usize>> = batches.into_values().collect();
        let mut by_node: FastMap<usize, Vec<Item>> = FastMap::default();
        let mut unplaced = Vec::new();
        for (b, positions) in slots.iter().enumerate() {
            match owner(&names[positions[0]]) {
                Some(node) => by_node.entry(node).or_default().push(Item::Docs(b)),
                None => unplaced.push(Item::Docs(b)),
            }
        }
        for (j, index) in indexes.iter().enumerate() {
            match owner(index) {
                Some(node) => by_node.entry(node).or_default().push(Item::Scan(j)),
                None => unplaced.push(Item::Scan(j)),
            }
        }
        let prefetch = indexes
            .iter()
            .map(|index| {
                let slot = Slot::for_key(index);
                prefetch
                    .iter()
                    .map(|key| (key.clone(), self.names.doc(key)))
                    .filter(|(_, name)| Slot::for_key(name) == slot)
                    .collect()
            })
            .collect();
        let reading = Reading {
            keys,
            names,
            slots,
            scans,
            indexes: &indexes,
            prefetch,
            records,
        };
        let (reading, table) = (&reading, table.as_ref());
        let on_nodes = by_node
            .into_values()
            .map(|items| async move { self.read_on_node(reading, &items, table).await });
        let alone = unplaced.into_iter().map(|item| async move {
            Ok::<_, Error>((item, self.read_alone_item(reading, item).await?))
        });
        let (on_nodes, alone) = futures::try_join!(
            futures::future::try_join_all(on_nodes),
            futures::future::try_join_all(alone)
        )?;
        let mut docs = vec![None; keys.len()];
        let mut replies: Vec<Option<Listed>> = scans.iter().map(|_| None).collect();
        for (item, read) in on_nodes.into_iter().flatten().chain(alone) {
            match (item, read) {
                (Item::Docs(b), Read::Docs(read)) => {
                    for (&i, doc) in reading.slots[b].iter().zip(read) {
                        docs[i] = doc;
                    }
                }
                (Item::Scan(j), Read::Page(page)) => replies[j] = Some(Listed::Page(page)),
                (Item::Scan(j), Read::Script(reply)) => {
                    replies[j] = Some(Listed::Script(reading.indexes[j].clone(), reply));
                }
                _ => {}
            }
        }
        let listed = indexes
            .iter()
            .zip(replies)
            .map(|(index, reply)| {
                reply.ok_or_else(|| {
                    self.backend(format!("scan of `{index}`"), "no reply for the scan")
                })
            })
            .collect::<Result<_>>()?;
        Ok((docs, listed))
    }

    /// A lookup on a cluster: its documents and the first page of each scan (module docs),
    /// the pages the read script answered decoded as `read.rs` decodes them.
    pub(super) async fn lookup_cluster(&self, lookup: &Lookup) -> Result<Found> {
        let names: Vec<String> = lookup.keys.iter().map(|k| self.names.doc(k)).collect();
        let scans: Vec<&Scan> = lookup.scans.iter().collect();
        let records = Records::of(lookup);
        let (docs, listed) = self
            .read_cluster(&lookup.keys, &names, &scans, &lookup.prefetch, records)
            .await?;
        let pages = scans.iter().zip(listed).map(|(scan, listed)| async move {
            match listed {
                Listed::Page(page) => Ok(page),
                Listed::Script(index, reply) => {
                    self.decode_page(scan, &index, &reply, records).await
                }
            }
        });
        let pages = futures::future::try_join_all(pages).await?;
        Ok(Found { docs, pages })
    }

    /// The read script's reply for the first page of `scan` (index `index`), sent on its
    /// own.
    async fn list_alone(&self, scan: &Scan, index: &str, records: bool) -> Result<Value> {
        self.scan_call(scan, index, records)
            .run(&mut self.conns.get())
            .await
            .map_err(|e| self.backend(format!("scan of `{index}`"), e))
    }

    /// The documents of one slot (`positions` into `keys`), with or without their
    /// records, by one read script, which follows redis-rs's routing.
    async fn read_slot(
        &self,
        keys: &[Key],
        names: &[String],
        positions: &[usize],
        records: bool,
    ) -> Result<Vec<Option<Versioned>>> {
        let batch: Vec<&String> = positions.iter().map(|&i| &names[i]).collect();
        let mut call = ScriptCall::new(&self.scripts.read, &batch, 1);
        call.arg(if records { "1" } else { "0" });
        let first = &names[positions[0]];
        let reply: Value = call
            .run(&mut self.conns.get())
            .await
            .map_err(|e| self.backend(format_args!("read of `{first}`"), e))?;
        let entries = reply::array(&reply)
            .filter(|entries| entries.len() == positions.len())
            .ok_or_else(|| self.backend("read", reply::unexpected("the read script", &reply)))?;
        positions
            .iter()
            .zip(entries)
            .map(|(&i, entry)| self.decode_entry(&keys[i], entry))
            .collect()
    }

    /// The `items` one master serves as `table` says, as one pipeline (no table: each sent
    /// alone; so is one item alone, but for one read by `MULTI`, which costs the server
    /// less than the read script and reads one writer's entry where the read names one).
    /// An item answered with an error is read again on its own, and so is every item when
    /// the pipeline fails short of a timeout; the table is then dropped (module docs).
    async fn read_on_node(
        &self,
        reading: &Reading<'_>,
        items: &[Item],
        table: Option<&Arc<SlotTable>>,
    ) -> Result<Vec<(Item, Read)>> {
        if let [item] = *items
            && !reading.in_multi(item)
        {
            return Ok(vec![(item, self.read_alone_item(reading, item).await?)]);
        }
        let Some(&first) = items.first() else {
            return Ok(Vec::new());
        };
        let node = table
            .and_then(|table| table.owner(Slot::for_key(reading.name_of(first))))
            .map(|(_, node)| node);
        let mut pipe = ::redis::pipe();
        for &item in items {
            match item {
                Item::Docs(b) if reading.in_multi(item) => {
                    pipe.cmd("MULTI");
                    for &i in &reading.slots[b] {
                        pipe.cmd("HGETALL").arg(&reading.names[i]);
                        reading.records.add_read(&mut pipe, &reading.names[i]);
                    }
                    pipe.cmd("EXEC");
                }
                Item::Docs(b) => {
                    pipe.cmd("HGETALL").arg(&reading.names[reading.slots[b][0]]);
                }
                Item::Scan(j) if reading.in_multi(item) => {
                    let (scan, index) = (reading.scans[j], &reading.indexes[j]);
                    pipe.cmd("MULTI");
                    for (_, name) in &reading.prefetch[j] {
                        pipe.cmd("HGETALL").arg(name);
                    }
                    pipe.cmd("ZRANGEBYLEX")
                        .arg(index)
                        .arg(cursor_min(scan))
                        .arg("+")
                        .arg("LIMIT")
                        .arg(0)
                        .arg(page_limit(scan));
                    pipe.cmd("EXEC");
                }
                Item::Scan(j) => {
                    let (scan, index) = (reading.scans[j], &reading.indexes[j]);
                    let call = self.scan_call(scan, index, reading.records.any());
                    pipe.add_command(call.cmd().clone());
                }
            }
        }
        let sent: usize = items.iter().map(|item| reading.replies(*item)).sum();
        let replies = match node {
            Some(node) => match self.conns.get().on_node(pipe, sent, node).await {
                Ok(replies) if replies.len() == sent => Some(replies),
                // Past the request's bound: reading each item again would wait as long.
                Err(e) if e.is_timeout() => {
                    let what = format!("read of `{}`", reading.name_of(first));
                    return Err(self.backend(what, e));
                }
                _ => None,
            },
            None => None,
        };
        let stale = replies
            .as_ref()
            .is_none_or(|replies| replies.iter().any(misrouted));
        if let Some(table) = table.filter(|_| stale) {
            self.conns.drop_slot_table(table);
        }
        let mut replies = replies.map(Vec::into_iter);
        let reads = items.iter().map(|&item| {
            // An item's reply: a `MULTI`'s is its `EXEC`'s (the replies before it say
            // `OK` and `QUEUED`, or why a command was not queued, which `EXEC` refuses).
            let reply = replies
                .as_mut()
                .and_then(|replies| replies.nth(reading.replies(item) - 1));
            async move {
                let read = match (item, reply) {
                    (Item::Docs(b), Some(reply)) if reading.in_multi(item) => {
                        match self.decode_exec(reading, b, &reply).await? {
                            Some(docs) => Read::Docs(docs),
                            None => self.read_alone_item(reading, item).await?,
                        }
                    }
                    (Item::Docs(b), Some(reply)) if !is_error(&reply) || wrong_type(&reply) => {
                        let i = reading.slots[b][0];
                        let (key, name) = (&reading.keys[i], &reading.names[i]);
                        Read::Docs(vec![self.decode_hash(key, name, &reply, false).await?])
                    }
                    (Item::Scan(j), Some(reply)) if reading.in_multi(item) => {
                        match self.page_from_exec(reading, j, &reply).await? {
                            Some(page) => Read::Page(page),
                            None => self.read_alone_item(reading, item).await?,
                        }
                    }
                    (Item::Scan(_), Some(reply)) if !is_error(&reply) => Read::Script(reply),
                    _ => self.read_alone_item(reading, item).await?,
                };
                Ok::<_, Error>((item, read))
            }
        });
        futures::future::try_join_all(reads).await
    }

    /// `item` read on its own, through redis-rs's routing (and its retries, `ASK`
    /// redirects of a slot being migrated included, which a `MULTI` would not follow): a
    /// lone document without its record by an `HGETALL`, other documents by the read
    /// script.
    async fn read_alone_item(&self, reading: &Reading<'_>, item: Item) -> Result<Read> {
        Ok(match item {
            Item::Docs(b) if reading.in_multi(item) => Read::Docs(
                self.read_slot(
                    reading.keys,
                    reading.names,
                    &reading.slots[b],
                    reading.records.any(),
                )
                .await?,
            ),
            Item::Docs(b) => {
                let i = reading.slots[b][0];
                let doc = self.read_alone(&reading.keys[i], &reading.names[i]).await?;
                Read::Docs(vec![doc])
            }
            Item::Scan(j) => Read::Script(
                self.list_alone(reading.scans[j], &reading.indexes[j], reading.records.any())
                    .await?,
            ),
        })
    }

    /// The documents of slot `b` of `reading`, from the reply to the `EXEC` that read
    /// them (each with its record when the reading wants it); `None` when `EXEC` did not
    /// run the reads (a command refused, as a node that does not serve the slot refuses
    /// it), or a document's read is another error than a value of another type (which is
    /// [`Error::Malformed`]).
    async fn decode_exec(
        &self,
        reading: &Reading<'_>,
        b: usize,
        exec: &Value,
    ) -> Result<Option<Vec<Option<Versioned>>>> {
        let positions = &reading.slots[b];
        let per_document = if reading.records.any() { 2 } else { 1 };
        let Value::Array(replies) = exec else {
            return Ok(None);
        };
        if replies.len() != per_document * positions.len()
            || replies
                .chunks(per_document)
                .any(|read| is_error(&read[0]) && !wrong_type(&read[0]))
        {
            return Ok(None);
        }
        let mut docs = Vec::with_capacity(positions.len());
        for (&i, read) in positions.iter().zip(replies.chunks(per_document)) {
            let (key, name) = (&reading.keys[i], &reading.names[i]);
            docs.push(match read {
                [doc, record] => {
                    self.decode_with_record(key, name, doc, record, reading.records)
                        .await?
                }
                _ => self.decode_hash(key, name, &read[0], false).await?,
            });
        }
        Ok(Some(docs))
    }

    /// The first page of scan `j` of `reading`, from the reply to the `EXEC` that read the
    /// documents prefetched in its index's slot and listed the page; `None` when `EXEC`
    /// did not run (a node that does not serve the slot), or the page lists a document
    /// that was not prefetched (the read script then reads the page, listing and reading
    /// in one step).
    async fn page_from_exec(
        &self,
        reading: &Reading<'_>,
        j: usize,
        exec: &Value,
    ) -> Result<Option<ScanPage>> {
        let prefetched = &reading.prefetch[j];
        let Value::Array(replies) = exec else {
            return Ok(None);
        };
        let Some((listing, hashes)) = replies.split_last() else {
            return Ok(None);
        };
        if hashes.len() != prefetched.len()
            || is_error(listing)
            || hashes.iter().any(|h| is_error(h) && !wrong_type(h))
        {
            return Ok(None);
        }
        let Some(members) = reply::array(listing).and_then(|members| {
            members
                .iter()
                .map(|m| reply::text(m).map(str::to_owned))
                .collect::<Option<Vec<String>>>()
        }) else {
            return Ok(None);
        };
        let index = &reading.indexes[j];
        let read: Vec<Key> = prefetched.iter().map(|(key, _)| key.clone()).collect();
        // Only the listed documents are decoded: a prefetched one the page does not list
        // is not part of the answer.
        let mut docs = Vec::with_capacity(read.len());
        for ((key, name), hash) in prefetched.iter().zip(hashes) {
            let member = members
                .iter()
                .any(|m| Key::decode(m).is_ok_and(|k| k == *key));
            docs.push(if member {
                self.decode_hash(key, name, hash, false).await?
            } else {
                None
            });
        }
        Ok(listed_page(reading.scans[j], index, &members, &read, &docs))
    }
}

/// What [`RedisStore::read_on_node`] read of an item.
enum Read {
    /// The documents of a slot, in the order of [`Reading::slots`].
    Docs(Vec<Option<Versioned>>),
    /// A scan's first page, listed with its documents in one `MULTI`.
    Page(ScanPage),
    /// A scan's first page as the read script answered it.
    Script(Value),
}

fn is_error(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(_))
}

fn wrong_type(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(e) if e.code() == "WRONGTYPE")
}

/// Whether a reply says the node does not serve the slot now (or not yet): what makes
/// the table stale. `WRONGTYPE` (a value of another type) and `NOSCRIPT` (a script the
/// node does not hold yet) are answers of the right node.
fn misrouted(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(e) if !matches!(e.code(), "WRONGTYPE" | "NOSCRIPT"))
}
