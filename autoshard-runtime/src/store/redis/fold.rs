//! Folding lookups: the read script's `fold` form (`lua/read.lua`) reads the main document
//! and the shards of one slot, answering the shards without their folded properties and
//! one value per property. A standalone server answers it all, scan pages included, in one
//! call; a cluster one call per slot and one per scan page, concurrently, the partial
//! folds combined here ([`fold_lookup::combine`]). What the script does not fold exactly (decimal text,
//! unions, a malformed value) it answers as not folded, and the caller reads it whole.

use super::call::ScriptCall;
use super::read::cursor_min;
use super::{reply, RedisStore};
use crate::document::Versioned;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::fold_lookup::{self, FoldFound, FoldLookup, Folded};
use ::redis::cluster_routing::Slot;
use ::redis::Value;
use std::collections::HashMap;

/// One slot's share of a folding lookup: its keys (0: the main document, then shard `i` at
/// `i + 1`) and the script's reply.
type Part = (Vec<usize>, Value);

impl RedisStore {
    pub(super) async fn run_fold_lookup(&self, lookup: &FoldLookup) -> Result<FoldFound> {
        let keys: Vec<&Key> = std::iter::once(&lookup.main)
            .chain(&lookup.shards)
            .collect();
        let names: Vec<String> = keys.iter().map(|k| self.names.doc(k)).collect();
        let mut batches: Vec<Vec<usize>> = if self.is_cluster() {
            let mut slots: HashMap<Slot, Vec<usize>> = HashMap::new();
            for (i, name) in names.iter().enumerate() {
                slots.entry(Slot::for_key(name)).or_default().push(i);
            }
            slots.into_values().collect()
        } else {
            vec![(0..names.len()).collect()]
        };
        batches.sort_unstable();
        let what = || format!("read of `{}`", names[0]);
        // On a standalone server the one call lists the pages too.
        let (in_call, apart) = if self.is_cluster() {
            (&[][..], &lookup.scans[..])
        } else {
            (&lookup.scans[..], &[][..])
        };
        let indexes: Vec<String> = in_call
            .iter()
            .map(|scan| self.names.index(scan.parent.as_ref(), &scan.kind))
            .collect();
        let calls = batches.into_iter().map(|positions| {
            let batch: Vec<&String> = positions
                .iter()
                .map(|&i| &names[i])
                .chain(&indexes)
                .collect();
            let args = 6 + 4 * lookup.properties.len() + 2 * in_call.len();
            let mut call = ScriptCall::new(&self.scripts.read, &batch, args);
            let with_main = if positions.first() == Some(&0) {
                "1"
            } else {
                "0"
            };
            call.arg("0")
                .arg("fold")
                .arg(with_main)
                .arg(lookup.properties.len());
            for (property, fold) in &lookup.properties {
                let (name, min, max) = fold.name_and_range();
                call.arg_display(format_args!("p:{property}"))
                    .arg(name)
                    .arg(min.to_string())
                    .arg(max.to_string());
            }
            call.arg(in_call.len()).arg(self.names.prefix());
            for scan in in_call {
                call.arg(cursor_min(scan)).arg(scan.limit.max(1));
            }
            let mut conn = self.conns.get();
            async move {
                let reply: Value = call
                    .run(&mut conn)
                    .await
                    .map_err(|e| self.backend(what(), e))?;
                Ok::<Part, Error>((positions, reply))
            }
        });
        let pages_apart =
            futures::future::try_join_all(apart.iter().map(|s| self.scan_page(s, false)));
        let (parts, pages_apart) =
            futures::try_join!(futures::future::try_join_all(calls), pages_apart)?;
        let mut found = self.combine_parts(lookup, &keys, &parts, &what)?;
        if let Some((_, reply)) = parts.first().filter(|_| !in_call.is_empty()) {
            let bad = || self.backend(what(), reply::unexpected("the read script", reply));
            let listed = reply::array(reply)
                .and_then(|items| items.get(3..))
                .filter(|listed| listed.len() == in_call.len())
                .ok_or_else(bad)?;
            for ((scan, index), reply) in in_call.iter().zip(&indexes).zip(listed) {
                found
                    .pages
                    .push(self.decode_page(scan, index, reply, false).await?);
            }
        }
        found.pages.extend(pages_apart);
        Ok(found)
    }

    /// The answer from every slot's reply.
    fn combine_parts(
        &self,
        lookup: &FoldLookup,
        keys: &[&Key],
        parts: &[Part],
        what: &dyn Fn() -> String,
    ) -> Result<FoldFound> {
        let mut docs: Vec<Option<Versioned>> = vec![None; keys.len()];
        let mut values: Vec<Vec<Folded>> = vec![Vec::new(); lookup.properties.len()];
        for (positions, reply) in parts {
            let bad = || self.backend(what(), reply::unexpected("the read script", reply));
            let [main, shards, folded, ..] = reply::array(reply).ok_or_else(bad)? else {
                return Err(bad());
            };
            let shards = reply::array(shards).ok_or_else(bad)?;
            let folded = reply::array(folded)
                .filter(|f| f.len() == lookup.properties.len())
                .ok_or_else(bad)?;
            let (with_main, shard_positions) = match positions.split_first() {
                Some((0, rest)) => (true, rest),
                _ => (false, positions.as_slice()),
            };
            if shards.len() != shard_positions.len() {
                return Err(bad());
            }
            if with_main {
                docs[0] = self.decode_entry(keys[0], main)?;
            }
            for (&i, entry) in shard_positions.iter().zip(shards) {
                docs[i] = self.decode_entry(keys[i], entry)?;
            }
            for (value, into) in folded.iter().zip(&mut values) {
                into.push(decode_value(value).ok_or_else(bad)?);
            }
        }
        let main = docs.remove(0);
        let values = lookup
            .properties
            .iter()
            .zip(values)
            .map(|((_, fold), parts)| fold_lookup::combine(*fold, parts))
            .collect();
        Ok(FoldFound {
            main,
            shards: docs,
            values,
            pages: Vec::with_capacity(lookup.scans.len()),
        })
    }
}

/// One property's value in the script's reply: `{0}`, `{1, n}` or `{2}`.
fn decode_value(value: &Value) -> Option<Folded> {
    let items = reply::array(value)?;
    match (items.first().and_then(reply::int)?, items.get(1)) {
        (0, None) => Some(Folded::Absent),
        (2, None) => Some(Folded::Unsupported),
        (1, Some(Value::Int(n))) => Some(Folded::Value((*n).into())),
        (1, Some(text)) => serde_json::from_str(reply::text(text)?)
            .ok()
            .map(Folded::Value),
        _ => None,
    }
}
