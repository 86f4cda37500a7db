//! Merges: one `lua/merge.lua` call per [`Merge`], in the document's own slot, and the
//! decoding of its reply.

use super::{reply, RedisStore};
use crate::error::{Error, Result};
use crate::store::{Merge, Merged};

impl RedisStore {
    pub(super) async fn run_merge(&self, merge: &Merge) -> Result<Merged> {
        let what = || format!("merge into `{}`", merge.key);
        let encode = |value: &serde_json::Value| {
            serde_json::to_string(value).map_err(|e| Error::Malformed {
                key: merge.key.clone(),
                field: merge.property.clone(),
                reason: format!("cannot be encoded as JSON: {e}"),
            })
        };
        let (fold, min, max) = merge.fold.script_arguments();
        let (guard, mode, expected) = match &merge.guard {
            None => (String::new(), "-", String::new()),
            Some((property, None)) => (property.clone(), "-", String::new()),
            Some((property, Some(value))) => {
                (property.clone(), "=", encode(&value.clone().into())?)
            }
        };
        let mut invocation = self.scripts.merge.prepare_invoke();
        invocation
            .key(self.layout.doc(&merge.key))
            .key(self.layout.counter(&merge.key))
            .arg(&merge.property)
            .arg(fold)
            .arg(encode(&merge.operand)?)
            .arg(min)
            .arg(max)
            .arg(&*merge.write.writer)
            .arg(merge.write.seq)
            .arg(merge.write.at_ms)
            .arg(merge.write.horizon_ms)
            .arg(guard)
            .arg(mode)
            .arg(expected);
        let reply = self.run_write(&invocation, what).await?;
        let bad = || self.backend(what(), reply::unexpected("the merge script", &reply));
        let items = reply::array(&reply).ok_or_else(bad)?;
        match items.first().and_then(reply::text) {
            Some("applied") => Ok(Merged::Applied),
            Some("already") => Ok(Merged::AlreadyApplied),
            Some("missing") => Ok(Merged::Missing),
            Some("unsupported") => Ok(Merged::Unsupported),
            Some("overflow") => Err(crate::store::merge::overflow(merge)),
            Some("malformed") => Err(reply::not_ours(&merge.key, items)),
            _ => Err(bad()),
        }
    }
}
