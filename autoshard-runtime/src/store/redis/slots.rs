//! Which master serves each cluster slot, as `CLUSTER SLOTS` last said: a read sends the
//! single-key reads bound for one node as one pipeline instead of one request each (a
//! load of an entity with ten static shards: three requests on a three-master cluster,
//! not eleven).
//!
//! The table is a hint and never decides what a read answers. A node that no longer
//! serves a key's slot answers a read of the key with an error (`MOVED`, `ASK`), never
//! with another node's data, and each `HGETALL` is atomic on its own, so a read that
//! meets an error reads that key again through redis-rs's routing; the table is then
//! dropped and fetched anew in the background, at most once per [`REFRESH_EVERY`], while
//! reads go key by key.

use crate::key::{FastHasher, FastMap};
use ::redis::Value;
use ::redis::cluster_routing::Slot;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// The slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// How often the table may be fetched again after a read found it stale.
pub(super) const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// A master, as `CLUSTER SLOTS` names it (the address redis-rs's cluster connection
/// knows it by).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Node {
    pub(super) host: String,
    pub(super) port: u16,
}

/// The master of each slot.
#[derive(Debug, Default)]
pub(super) struct SlotTable {
    nodes: Vec<Node>,
    owners: FastMap<Slot, u16>,
}

impl SlotTable {
    /// The table a `CLUSTER SLOTS` reply describes; `None` for a reply of another shape.
    /// A range whose master has no usable address (an empty or unknown endpoint) is left
    /// out: its keys are read through redis-rs's routing.
    pub(super) fn parse(reply: &Value) -> Option<SlotTable> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut table = SlotTable {
            nodes: Vec::new(),
            owners: FastMap::with_capacity_and_hasher(usize::from(SLOTS), FastHasher::default()),
        };
        let mut index: HashMap<Node, u16> = HashMap::new();
        for range in ranges {
            let Value::Array(items) = range else {
                return None;
            };
            let [Value::Int(start), Value::Int(end), Value::Array(master), ..] = items.as_slice()
            else {
                return None;
            };
            let (Ok(start), Ok(end)) = (u16::try_from(*start), u16::try_from(*end)) else {
                return None;
            };
            if start > end || end >= SLOTS {
                return None;
            }
            let Some(node) = node(master) else {
                continue;
            };
            let next = u16::try_from(table.nodes.len()).ok()?;
            let at = *index.entry(node.clone()).or_insert_with(|| {
                table.nodes.push(node);
                next
            });
            for slot in start..=end {
                table.owners.insert(Slot::new(slot)?, at);
            }
        }
        Some(table)
    }

    /// The master serving `slot`, if the table knows it.
    pub(super) fn owner(&self, slot: Slot) -> Option<(usize, &Node)> {
        let at = usize::from(*self.owners.get(&slot)?);
        Some((at, &self.nodes[at]))
    }
}

/// A master's address from its `[host, port, id, ...]` entry.
fn node(items: &[Value]) -> Option<Node> {
    let [host, Value::Int(port), ..] = items else {
        return None;
    };
    let host = match host {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?,
        Value::SimpleString(text) => text.as_str(),
        _ => return None,
    };
    if host.is_empty() || host == "?" {
        return None;
    }
    Some(Node {
        host: host.to_owned(),
        port: u16::try_from(*port).ok()?,
    })
}

/// The table in use, and when it was last fetched.
#[derive(Debug, Default)]
pub(super) struct Slots {
    table: RwLock<Option<Arc<SlotTable>>>,
    fetching: AtomicBool,
    fetched: Mutex<Option<Instant>>,
}

impl Slots {
    /// The table, if one is in use.
    pub(super) fn table(&self) -> Option<Arc<SlotTable>> {
        self.table
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether a fetch may start now (none in flight, none within [`REFRESH_EVERY`]);
    /// when it may, the caller fetches and calls [`Slots::fetched`].
    pub(super) fn may_fetch(&self) -> bool {
        let recent = self
            .fetched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < REFRESH_EVERY);
        !recent && !self.fetching.swap(true, Ordering::SeqCst)
    }

    /// Puts the table a fetch read in place (`None`: the fetch failed; reads go key by
    /// key until the next).
    pub(super) fn fetched(&self, table: Option<SlotTable>) {
        *self
            .fetched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        *self
            .table
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = table.map(Arc::new);
        self.fetching.store(false, Ordering::SeqCst);
    }

    /// Drops `stale` (a read met an error through it), unless a fetch has replaced it.
    pub(super) fn drop_stale(&self, stale: &Arc<SlotTable>) {
        let mut table = self
            .table
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if table.as_ref().is_some_and(|t| Arc::ptr_eq(t, stale)) {
            *table = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn range(start: i64, end: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(start),
            Value::Int(end),
            Value::Array(vec![bulk(host), Value::Int(port), bulk("id")]),
            Value::Array(vec![bulk("10.0.0.9"), Value::Int(1), bulk("replica")]),
        ])
    }

    #[test]
    fn a_slots_reply_maps_each_slot_to_its_master() {
        let reply = Value::Array(vec![
            range(0, 5460, "127.0.0.1", 7001),
            range(5461, 10922, "127.0.0.1", 7002),
            range(10923, 16383, "127.0.0.1", 7001),
        ]);
        let table = SlotTable::parse(&reply).unwrap();
        let at = |slot| {
            table
                .owner(Slot::new(slot).unwrap())
                .map(|(i, n)| (i, n.port))
        };
        assert_eq!(at(0), Some((0, 7001)));
        assert_eq!(at(5461), Some((1, 7002)));
        assert_eq!(at(16383), Some((0, 7001)));
    }

    #[test]
    fn masters_without_an_address_and_replies_of_another_shape_leave_slots_unknown() {
        let unknown = Value::Array(vec![range(0, 99, "", 7001), range(100, 199, "?", 7002)]);
        let table = SlotTable::parse(&unknown).unwrap();
        assert!(table.owner(Slot::new(5).unwrap()).is_none());
        assert!(table.owner(Slot::new(150).unwrap()).is_none());
        assert!(table.owner(Slot::new(300).unwrap()).is_none());
        for bad in [
            Value::Nil,
            Value::Array(vec![Value::Int(3)]),
            Value::Array(vec![range(10, 5, "h", 1)]),
            Value::Array(vec![range(0, 16384, "h", 1)]),
            Value::Array(vec![range(-1, 5, "h", 1)]),
            Value::Array(vec![range(0, 5, "h", 70_000)]),
        ] {
            let parsed = SlotTable::parse(&bad);
            assert!(
                parsed.is_none_or(|t| t.owner(Slot::new(0).unwrap()).is_none()),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_stale_table_is_dropped_unless_a_fetch_replaced_it() {
        let slots = Slots::default();
        assert!(slots.may_fetch());
        assert!(!slots.may_fetch(), "one fetch at a time");
        slots.fetched(Some(SlotTable::default()));
        let first = slots.table().unwrap();
        assert!(!slots.may_fetch(), "not again within REFRESH_EVERY");
        let long_ago = Instant::now().checked_sub(2 * REFRESH_EVERY);
        *slots.fetched.lock().unwrap() = long_ago;
        assert!(slots.may_fetch());
        slots.fetched(Some(SlotTable::default()));
        slots.drop_stale(&first);
        assert!(slots.table().is_some(), "a newer table stays");
        let second = slots.table().unwrap();
        slots.drop_stale(&second);
        assert!(slots.table().is_none());
    }
}
