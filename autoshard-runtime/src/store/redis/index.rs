//! Scan-index upkeep on a cluster: the index of a document that starts an entity group
//! lives in another slot than the document, so the commit script cannot update it; these
//! steps run around the script, in the order the module docs give.

use super::RedisStore;
use crate::error::Result;

/// A scan-index update the script cannot make on a cluster (another slot).
pub(super) struct OutOfSlotIndex {
    pub(super) write: usize,
    pub(super) index: String,
    pub(super) member: String,
    pub(super) doc: String,
    pub(super) put: bool,
    pub(super) may_create: bool,
}

impl RedisStore {
    /// Adds the document's entry to its index.
    pub(super) async fn index_add(&self, o: &OutOfSlotIndex) -> Result<()> {
        let mut cmd = ::redis::cmd("ZADD");
        cmd.arg(&o.index).arg(0).arg(&o.member);
        self.query::<i64>(&cmd, &format!("index update of `{}`", o.index))
            .await?;
        Ok(())
    }

    /// Removes the document's entry, and adds it back if the document exists again.
    pub(super) async fn index_remove(&self, o: &OutOfSlotIndex) -> Result<()> {
        let mut cmd = ::redis::cmd("ZREM");
        cmd.arg(&o.index).arg(&o.member);
        let what = format!("index update of `{}`", o.index);
        self.query::<i64>(&cmd, &what).await?;
        let mut exists = ::redis::cmd("EXISTS");
        exists.arg(&o.doc);
        if self.query::<i64>(&exists, &what).await? > 0 {
            self.index_add(o).await?;
        }
        Ok(())
    }
}
