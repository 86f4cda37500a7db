//! Merges, in the document's own slot: the common case (an integer sum, max or min with
//! an operand below 10^14 in magnitude, not a merge that prunes the record,
//! [`common_operand`]) as `lua/merge_common.lua`, four commands (six on a writer's first
//! merge into a document, which also keeps a record hash of many writers a hash table);
//! everything else, and whatever that script answers `slow` (it wrote nothing then), as
//! `lua/merge.lua`, which decides every case. Then the decoding of the reply.

use super::call::{KeyText, ScriptCall};
use super::{RedisStore, reply};
use crate::error::Result;
use crate::store::merge::PRUNE_EVERY;
use crate::store::{Merge, Merged};

impl RedisStore {
    pub(super) async fn run_merge(&self, merge: &Merge) -> Result<Merged> {
        merge.check()?;
        let what = || format!("merge into `{}`", merge.key);
        if let Some(operand) = common_operand(merge) {
            let (fold, min, max) = merge.fold.name_and_range();
            let narrow = (min, max) != (i128::from(i64::MIN), i128::from(i64::MAX));
            let keys: [KeyText; 2] = [
                &self.names.doc_name(&merge.key),
                &self.names.record_name(&merge.key),
            ];
            let mut call = ScriptCall::new(
                &self.scripts.merge_common,
                &keys,
                if narrow { 10 } else { 8 },
            );
            call.arg_with(|out| field(out, "p:", &merge.property))
                .arg(operand)
                .arg_with(|out| field(out, "w:", &merge.write.writer))
                .arg(merge.write.seq)
                .arg_with(|out| record_entry(out, merge.write.seq, merge.write.at_ms))
                .arg(fold);
            match &merge.guard {
                None => call.arg("").arg(""),
                Some((property, expected)) => {
                    call.arg_with(|out| field(out, "p:", property));
                    match expected {
                        Some(value) => call.arg_with(|out| json_string(out, value)),
                        None => call.arg(""),
                    }
                }
            };
            if narrow {
                call.arg_display(min).arg_display(max);
            }
            let reply = self.run_merge_write(&call, what).await?;
            match reply::text(&reply) {
                Some("applied") => return Ok(Merged::Applied),
                Some("slow") => {}
                _ => {
                    return Err(self.backend(
                        what(),
                        reply::unexpected("the merge script's common case", &reply),
                    ));
                }
            }
        }
        self.run_full_merge(merge, what).await
    }

    /// A merge through `lua/merge.lua`, which answers every case.
    async fn run_full_merge(
        &self,
        merge: &Merge,
        what: impl Fn() -> String + Send + Sync,
    ) -> Result<Merged> {
        let (fold, min, max) = merge.fold.name_and_range();
        let (guard, mode, expected) = match &merge.guard {
            None => ("", "-", None),
            Some((property, None)) => (property.as_str(), "-", None),
            Some((property, Some(value))) => (property.as_str(), "=", Some(value)),
        };
        let keys: [KeyText; 2] = [
            &self.names.doc_name(&merge.key),
            &self.names.counter_name(&merge.key),
        ];
        let mut call = ScriptCall::new(&self.scripts.merge, &keys, 12);
        call.arg(&merge.property)
            .arg(fold)
            .arg_display(&merge.operand)
            .arg_display(min)
            .arg_display(max)
            .arg(&*merge.write.writer)
            .arg(merge.write.seq)
            .arg(merge.write.at_ms)
            .arg(merge.write.horizon_ms)
            .arg(guard)
            .arg(mode);
        match expected {
            Some(value) => call.arg_display(serde_json::Value::from(value.clone())),
            None => call.arg(""),
        };
        let reply = self.run_merge_write(&call, &what).await?;
        let bad = || self.backend(what(), reply::unexpected("the merge script", &reply));
        let items = reply::array(&reply).ok_or_else(bad)?;
        match items.first().and_then(reply::text) {
            Some("applied") => Ok(Merged::Applied),
            Some("already") => Ok(Merged::AlreadyApplied),
            Some("missing") => Ok(Merged::Missing),
            Some("unsupported") => Ok(Merged::Unsupported),
            Some("overflow") => Err(crate::store::merge::overflow(merge)),
            Some("malformed") => Err(reply::not_ours(&merge.key, items)),
            Some("grouped") if items.len() == 3 => {
                let (Some(group), Some(until)) = (reply::text(&items[1]), reply::text(&items[2]))
                else {
                    return Err(bad());
                };
                Err(crate::Error::Grouped {
                    key: merge.key.clone(),
                    group: group.to_owned(),
                    until_ms: until.parse().map_err(|_| bad())?,
                })
            }
            _ => Err(bad()),
        }
    }
}

/// The hash field `<prefix><name>` (`p:` a property, `w:` a writer's record entry).
fn field(out: &mut String, prefix: &str, name: &str) {
    out.push_str(prefix);
    out.push_str(name);
}

/// A writer's record entry as the scripts store it: `[seq,at_ms]`.
fn record_entry(out: &mut String, seq: u64, at_ms: u64) {
    let mut digits = itoa::Buffer::new();
    out.push('[');
    out.push_str(digits.format(seq));
    out.push(',');
    out.push_str(digits.format(at_ms));
    out.push(']');
}

/// The JSON text of the string `value` (what a document stores for it).
fn json_string(out: &mut String, value: &str) {
    if !reply::plain_string(value.as_bytes()) {
        out.push_str(&serde_json::Value::from(value).to_string());
        return;
    }
    out.push('"');
    out.push_str(value);
    out.push('"');
}

/// The operand of a merge `lua/merge_common.lua` may take, or `None` when `lua/merge.lua`
/// decides it: an integer sum, max or min that does not prune the record, whose operand is
/// an integer below [`COMMON_LIMIT`] in magnitude (where Lua numbers are exact) and, for
/// max and min, within the property's type (the script checks the stored value and the
/// result).
fn common_operand(merge: &Merge) -> Option<i64> {
    let (fold, min, max) = merge.fold.name_and_range();
    if !matches!(fold, "sum" | "max" | "min") || merge.write.seq.is_multiple_of(PRUNE_EVERY) {
        return None;
    }
    merge.operand.as_i64().filter(|n| {
        n.unsigned_abs() < COMMON_LIMIT && (fold == "sum" || (min..=max).contains(&i128::from(*n)))
    })
}

/// The magnitude below which `lua/merge_common.lua` takes operands, stored values and
/// results: 10^14, where Lua's numbers (doubles) are exact.
const COMMON_LIMIT: u64 = 100_000_000_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_string_writes_what_serde_json_writes() {
        for value in [
            "",
            "3088b6be33084065a6754038491c1171",
            "quote \" inside",
            "back\\slash",
            "tab\tand\nnewline",
            "\u{1}\u{1f}",
            "del \u{7f} and é, 漢字, 🦀",
        ] {
            let mut out = String::new();
            json_string(&mut out, value);
            assert_eq!(out, serde_json::Value::from(value).to_string(), "{value:?}");
        }
    }

    #[test]
    fn record_entry_is_seq_and_time_in_brackets() {
        let mut out = String::new();
        record_entry(&mut out, 0, u64::MAX);
        assert_eq!(out, format!("[0,{}]", u64::MAX));
    }
}
