//! Reads on a Redis Cluster. A slot of several documents in a read is read by one read
//! script (`lua/read.lua`), atomically; a slot of one document (a static shard, a root
//! document) by a plain `HGETALL`, atomic by itself and a fraction of a script's cost, or,
//! with its write record, by `MULTI`, `HGETALL` of the document and of its record hash (the
//! same slot) and `EXEC`, as a standalone server reads it; a scan's first page by the read
//! script on its index's slot. The reads of one document and the scans bound for one
//! master go to it as one pipeline (not a transaction: each is atomic alone, as it is when
//! sent alone), by the slot table (`slots.rs`): a load of an entity with ten static shards
//! and its dynamic-shard scan is three requests on a three-master cluster, and so is the
//! read of two such entities a key group forms over.
//!
//! The table is a hint. A node that does not serve a slot answers a command in it with an
//! error, never with data (inside a `MULTI`, the command is not queued and `EXEC` fails),
//! so a document or a scan answered with an error (or a pipeline
//! that failed short of a timeout: a node gone, a connection lost) is read again on its
//! own through redis-rs's routing and its retries, and the table is dropped (`slots.rs`). Pipelines carry reads only:
//! redis-rs sends a pipeline again whole when one of its replies is `MOVED` or `ASK`, which
//! a write must never be.

use super::RedisStore;
use super::call::ScriptCall;
use super::read::Records;
use super::reply;
use super::slots::SlotTable;
use crate::document::Versioned;
use crate::error::{Error, Result};
use crate::key::{FastMap, Key};
use crate::store::Scan;
use ::redis::Value;
use ::redis::cluster_routing::Slot;
use std::sync::Arc;

/// What a pipeline to one master reads: a document (its position in the read) or the
/// first page of a scan (its position among the scans).
#[derive(Clone, Copy)]
enum Item {
    Doc(usize),
    Scan(usize),
}

/// A scan's index name and the read script's reply for its first page, to decode.
pub(super) type Listed = (String, Value);

/// What one read reads: documents (`names`: their Redis names) and the first pages of
/// scans (`indexes`: their indexes' names).
struct Reading<'a> {
    keys: &'a [Key],
    names: &'a [String],
    scans: &'a [&'a Scan],
    indexes: &'a [String],
    records: Records<'a>,
}

impl Reading<'_> {
    /// How many replies an item's commands get in a pipeline: a document with its record
    /// is read by `MULTI`, two `HGETALL`s (the document and its record hash, one slot) and
    /// `EXEC`; anything else by one command.
    fn replies(&self, item: Item) -> usize {
        match item {
            Item::Doc(_) if self.records.any() => 4,
            _ => 1,
        }
    }

    /// The Redis name an item reads.
    fn name_of(&self, item: Item) -> &str {
        match item {
            Item::Doc(i) => &self.names[i],
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
        let mut by_node: FastMap<usize, Vec<Item>> = FastMap::default();
        let mut scripted = Vec::new();
        for (_, positions) in batches {
            let node = match positions.as_slice() {
                [only] => owner(&names[*only]),
                _ => None,
            };
            match node {
                Some(node) => by_node
                    .entry(node)
                    .or_default()
                    .push(Item::Doc(positions[0])),
                None => scripted.push(positions),
            }
        }
        let mut unplaced = Vec::new();
        for (j, index) in indexes.iter().enumerate() {
            match owner(index) {
                Some(node) => by_node.entry(node).or_default().push(Item::Scan(j)),
                None => unplaced.push(j),
            }
        }
        let reading = Reading {
            keys,
            names,
            scans,
            indexes: &indexes,
            records,
        };
        let (reading, table) = (&reading, table.as_ref());
        let on_nodes = by_node
            .into_values()
            .map(|items| async move { self.read_on_node(reading, &items, table).await });
        let calls = scripted
            .into_iter()
            .map(|positions| self.read_slot(keys, names, positions, records.any()));
        let lists = unplaced.into_iter().map(|j| async move {
            let item = Item::Scan(j);
            Ok::<_, Error>((item, self.read_alone_item(reading, item).await?))
        });
        let (on_nodes, calls, lists) = futures::try_join!(
            futures::future::try_join_all(on_nodes),
            futures::future::try_join_all(calls),
            futures::future::try_join_all(lists)
        )?;
        let mut docs = vec![None; keys.len()];
        let mut replies = vec![None; scans.len()];
        for (i, doc) in calls.into_iter().flatten() {
            docs[i] = doc;
        }
        for (item, read) in on_nodes.into_iter().flatten().chain(lists) {
            match (item, read) {
                (Item::Doc(i), Read::Doc(doc)) => docs[i] = doc,
                (Item::Scan(j), Read::Page(reply)) => replies[j] = Some(reply),
                _ => {}
            }
        }
        let listed = indexes
            .into_iter()
            .zip(replies)
            .map(|(index, reply)| {
                let reply = reply.ok_or_else(|| {
                    self.backend(format!("scan of `{index}`"), "no reply for the scan")
                })?;
                Ok((index, reply))
            })
            .collect::<Result<_>>()?;
        Ok((docs, listed))
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
    /// records, by one read script.
    async fn read_slot(
        &self,
        keys: &[Key],
        names: &[String],
        positions: Vec<usize>,
        records: bool,
    ) -> Result<Vec<(usize, Option<Versioned>)>> {
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
            .map(|(&i, entry)| Ok((i, self.decode_entry(&keys[i], entry)?)))
            .collect()
    }

    /// The `items` one master serves as `table` says, as one pipeline (no table: each sent
    /// alone; so is one item alone, but for a document read with its record, whose
    /// `MULTI` costs the server less than the read script and reads one writer's entry
    /// where the read names one). An item answered with an error is read again on its
    /// own, and so is every item when the pipeline fails short of a timeout; the table is
    /// then dropped (module docs).
    async fn read_on_node(
        &self,
        reading: &Reading<'_>,
        items: &[Item],
        table: Option<&Arc<SlotTable>>,
    ) -> Result<Vec<(Item, Read)>> {
        if let [item] = *items
            && !(matches!(item, Item::Doc(_)) && reading.records.any())
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
        for item in items {
            match *item {
                Item::Doc(i) if reading.records.any() => {
                    recorded_read(&mut pipe, &reading.names[i], reading.records);
                }
                Item::Doc(i) => {
                    pipe.cmd("HGETALL").arg(&reading.names[i]);
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
                    (Item::Doc(i), Some(reply)) if reading.records.any() => {
                        let (key, name) = (&reading.keys[i], &reading.names[i]);
                        match self
                            .decode_recorded(key, name, &reply, reading.records)
                            .await?
                        {
                            Some(doc) => Read::Doc(doc),
                            None => self.read_alone_item(reading, item).await?,
                        }
                    }
                    (Item::Doc(i), Some(reply))
                        if !reading.records.any() && (!is_error(&reply) || wrong_type(&reply)) =>
                    {
                        let (key, name) = (&reading.keys[i], &reading.names[i]);
                        Read::Doc(self.decode_hash(key, name, &reply, false).await?)
                    }
                    (Item::Scan(_), Some(reply)) if !is_error(&reply) => Read::Page(reply),
                    _ => self.read_alone_item(reading, item).await?,
                };
                Ok::<_, Error>((item, read))
            }
        });
        futures::future::try_join_all(reads).await
    }

    /// `item` read on its own, through redis-rs's routing (and its retries, `ASK`
    /// redirects of a slot being migrated included, which a `MULTI` would not follow): a
    /// document by an `HGETALL`, with its record by the read script.
    async fn read_alone_item(&self, reading: &Reading<'_>, item: Item) -> Result<Read> {
        Ok(match item {
            Item::Doc(i) if reading.records.any() => {
                let read = self
                    .read_slot(reading.keys, reading.names, vec![i], true)
                    .await?;
                Read::Doc(read.into_iter().next().and_then(|(_, doc)| doc))
            }
            Item::Doc(i) => Read::Doc(self.read_alone(&reading.keys[i], &reading.names[i]).await?),
            Item::Scan(j) => Read::Page(
                self.list_alone(reading.scans[j], &reading.indexes[j], reading.records.any())
                    .await?,
            ),
        })
    }

    /// The document `recorded_read` read, with its record, from the reply to its `EXEC`;
    /// `None` when `EXEC` did not run the reads (a command refused, as a node that does
    /// not serve the slot refuses it), or the document's read is another error than a
    /// value of another type (which is [`Error::Malformed`]).
    async fn decode_recorded(
        &self,
        key: &Key,
        name: &str,
        exec: &Value,
        records: Records<'_>,
    ) -> Result<Option<Option<Versioned>>> {
        let Value::Array(replies) = exec else {
            return Ok(None);
        };
        let [doc, record] = replies.as_slice() else {
            return Ok(None);
        };
        if is_error(doc) && !wrong_type(doc) {
            return Ok(None);
        }
        Ok(Some(
            self.decode_with_record(key, name, doc, record, records)
                .await?,
        ))
    }
}

/// Adds to `pipe` the read of the document `name` with its write record (every entry or
/// one writer's, `records`), in one `MULTI` (the document's hash and its record hash
/// share a slot), as a standalone server reads it: four replies, the last `EXEC`'s.
fn recorded_read(pipe: &mut ::redis::Pipeline, name: &str, records: Records<'_>) {
    pipe.cmd("MULTI").cmd("HGETALL").arg(name);
    records.add_read(pipe, name);
    pipe.cmd("EXEC");
}

/// What [`RedisStore::read_on_node`] read of an item.
enum Read {
    Doc(Option<Versioned>),
    /// The read script's reply.
    Page(Value),
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
