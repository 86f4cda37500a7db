//! Folding lookups. On a standalone server, the lookup's `MULTI` read (the documents and the
//! scan pages in one step, `read.rs`) folded here with [`fold_lookup::reference`]: inside
//! a script the same reads cost the server three to four times as much (11 `HGETALL`s:
//! 3.6 us in `MULTI`, 17 us returned from a script, 41 us folded in one, pinned), so the
//! fold costs the server nothing. On a cluster, where every read of a slot is a script
//! anyway, the read script's `fold` form (`lua/read.lua`) reads the main document and the
//! shards of one slot and answers the shards without their folded properties and one
//! value per property; one call per slot and one per scan page, concurrently, and the
//! partial folds combined here ([`fold_lookup::combine`]). What the script does not fold
//! exactly (decimal text, unions, a malformed value) it answers as not folded, and the
//! caller reads it whole.

use super::call::ScriptCall;
use super::{reply, RedisStore};
use crate::document::Versioned;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::fold_lookup::{self, FoldFound, FoldLookup, Folded};
use crate::store::Lookup;
use ::redis::cluster_routing::Slot;
use ::redis::Value;
use std::collections::HashMap;

/// One slot's share of a folding lookup: its keys (0: the main document, then shard `i` at
/// `i + 1`) and the script's reply.
type Part = (Vec<usize>, Value);

impl RedisStore {
    pub(super) async fn run_fold_lookup(&self, lookup: &FoldLookup) -> Result<FoldFound> {
        if !self.is_cluster() {
            let mut keys = Vec::with_capacity(1 + lookup.shards.len());
            keys.push(lookup.main.clone());
            keys.extend(lookup.shards.iter().cloned());
            let read = Lookup {
                keys,
                scans: lookup.scans.clone(),
                records: false,
                prefetch: lookup.prefetch.clone(),
            };
            let found = self.lookup_all(&read).await?;
            return match found.docs.split_first() {
                Some((main, shards)) => Ok(fold_lookup::reference(
                    lookup,
                    main.clone(),
                    shards,
                    found.pages,
                )),
                None => Err(self.backend("lookup", "no entry for the main document")),
            };
        }
        let keys: Vec<&Key> = std::iter::once(&lookup.main)
            .chain(&lookup.shards)
            .collect();
        let names: Vec<String> = keys.iter().map(|k| self.names.doc(k)).collect();
        let mut slots: HashMap<Slot, Vec<usize>> = HashMap::new();
        for (i, name) in names.iter().enumerate() {
            slots.entry(Slot::for_key(name)).or_default().push(i);
        }
        let mut batches: Vec<Vec<usize>> = slots.into_values().collect();
        batches.sort_unstable();
        let what = || format!("read of `{}`", names[0]);
        let calls = batches.into_iter().map(|positions| {
            let batch: Vec<&String> = positions.iter().map(|&i| &names[i]).collect();
            let mut call =
                ScriptCall::new(&self.scripts.read, &batch, 4 + 4 * lookup.properties.len());
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
            let mut conn = self.conns.get();
            async move {
                let reply: Value = call
                    .run(&mut conn)
                    .await
                    .map_err(|e| self.backend(what(), e))?;
                Ok::<Part, Error>((positions, reply))
            }
        });
        let pages =
            futures::future::try_join_all(lookup.scans.iter().map(|s| self.scan_page(s, false)));
        let (parts, pages) = futures::try_join!(futures::future::try_join_all(calls), pages)?;
        let mut found = self.combine_parts(lookup, &keys, &parts, &what)?;
        found.pages = pages;
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
            let [main, shards, folded] = reply::array(reply).ok_or_else(bad)? else {
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
