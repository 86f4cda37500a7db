//! Running one statement or one write function, and the ownership refusals a write
//! function raises.

use super::PostgresStore;
use super::jsonb::Jsonb;
use super::options::check_key;
use super::rows::{column, parent_of, version_of};
use crate::document::{Document, Version, Versioned, check_nesting};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::store::{Commit, CommitReply, OWNER, Scan, ScanPage, Write};

impl PostgresStore {
    /// Runs one statement of [`Sql`] (prepared once per connection) and returns its rows.
    pub(super) async fn query(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>> {
        let client = self.client().await?;
        self.bounded(what, client, async |client| {
            let statement = client
                .prepare_cached(sql)
                .await
                .map_err(|e| self.error(what, &e))?;
            client
                .query(&statement, params)
                .await
                .map_err(|e| refusal(&e).unwrap_or_else(|| self.error(what, &e)))
        })
        .await
    }

    /// Runs a statement that answers one row.
    pub(super) async fn query_one(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<tokio_postgres::Row> {
        self.query(what, sql, params).await?.pop().ok_or_else(|| {
            Error::backend(
                format!("{what} on PostgreSQL at {}", self.target),
                "the statement answered no row",
            )
        })
    }

    /// Calls `autoshard_write`: writes `doc` at `key`, over a present document when
    /// `overwrite`. The new version; `None` when the key was present and not overwritten.
    pub(super) async fn write_one(
        &self,
        what: &str,
        key: &Key,
        doc: &Document,
        overwrite: bool,
    ) -> Result<Option<Version>> {
        let (encoded, parent) = (key.encode(), parent_of(key));
        check_key(key, &encoded)?;
        check_nesting(key, doc)?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
            [&encoded, &parent, &key.kind(), &Jsonb(doc), &overwrite];
        let row = self.query_one(what, &self.sql.write, &params).await?;
        Ok(column::<Option<i64>>(&row, 0, &encoded)?.map(version_of))
    }

    /// Calls `autoshard_commit_versioned` (module docs): committed with the version each
    /// write gave its document (`None`: no document after it), or a conflict on the key
    /// of the expectation in `reads` that failed.
    pub(super) async fn commit_documents(
        &self,
        what: &str,
        reads: &[(&Key, Option<Version>)],
        writes: &[(Key, Write)],
        owner: Option<&str>,
    ) -> Result<CommitReply> {
        let rk: Vec<String> = reads.iter().map(|(k, _)| k.encode()).collect();
        let rv: Vec<Option<i64>> = reads
            .iter()
            .map(|(_, v)| v.map(|v| i64::try_from(v.0).unwrap_or(i64::MAX)))
            .collect();
        let wk: Vec<String> = writes.iter().map(|(k, _)| k.encode()).collect();
        for ((key, write), encoded) in writes.iter().zip(&wk) {
            check_key(key, encoded)?;
            if let Write::Put(doc) | Write::Values(doc) = write {
                check_nesting(key, doc)?;
            }
        }
        let wp: Vec<String> = writes.iter().map(|(k, _)| parent_of(k)).collect();
        let wn: Vec<&str> = writes.iter().map(|(k, _)| k.kind()).collect();
        // A write of the owner alone sends `{OWNER: owner}` (or `{}`) to merge into the
        // document, flagged in `wo`; a values write its document, flagged in `wv`.
        let owners: Vec<Option<Document>> = writes
            .iter()
            .map(|(_, write)| match write {
                Write::Own(owner) => Some(
                    owner
                        .iter()
                        .map(|o| (OWNER.to_owned(), o.to_value()))
                        .collect(),
                ),
                Write::Put(_) | Write::Values(_) | Write::Delete => None,
            })
            .collect();
        let wd: Vec<Option<Jsonb<&Document>>> = writes
            .iter()
            .zip(&owners)
            .map(|((_, write), owner)| match write {
                Write::Put(doc) | Write::Values(doc) => Some(Jsonb(doc)),
                Write::Delete => None,
                Write::Own(_) => owner.as_ref().map(Jsonb),
            })
            .collect();
        let wo: Vec<bool> = owners.iter().map(Option::is_some).collect();
        let wv: Vec<bool> = writes
            .iter()
            .map(|(_, write)| matches!(write, Write::Values(_)))
            .collect();
        let row = self
            .query_one(
                what,
                &self.sql.commit,
                &[&rk, &rv, &wk, &wp, &wn, &wd, &wo, &wv, &owner],
            )
            .await?;
        // `[0, version per write]` when committed, else `[index of the failed expectation]`.
        let answer = column::<Vec<i64>>(&row, 0, "(a commit)")?;
        match answer.split_first() {
            Some((0, versions)) if versions.len() == writes.len() => Ok(CommitReply {
                outcome: Commit::Committed,
                versions: Some(
                    versions
                        .iter()
                        .map(|&v| (v > 0).then(|| version_of(v)))
                        .collect(),
                ),
            }),
            Some((0, _)) => Ok(CommitReply::untold(Commit::Committed)),
            failed => {
                let failed = failed.map_or(0, |(&index, _)| index);
                let expectation = usize::try_from(failed).ok().and_then(|i| i.checked_sub(1));
                match expectation.and_then(|i| reads.get(i)) {
                    Some((key, _)) => Ok(CommitReply::untold(Commit::Conflict {
                        key: (*key).clone(),
                    })),
                    None => Err(Error::backend(
                        what,
                        format!("the server named expectation {failed} of {}", reads.len()),
                    )),
                }
            }
        }
    }

    /// The page of each scan from its rows, in any order (a statement's part per scan).
    pub(super) fn pages(
        &self,
        parts: Vec<Vec<(String, Versioned)>>,
        scans: &[Scan],
    ) -> Vec<ScanPage> {
        parts
            .into_iter()
            .zip(scans)
            .map(|(mut page, scan)| {
                page.sort_by(|a, b| a.0.cmp(&b.0));
                self.page(page, scan.limit)
            })
            .collect()
    }

    /// A scan's page from its rows in key order (encoded key, document), `limit` the
    /// page size asked for: a full page has a next one (perhaps empty). A row whose key
    /// names no key (written by hand) is no document of the store's: skipped, with a
    /// warning.
    pub(super) fn page(&self, rows: Vec<(String, Versioned)>, limit: usize) -> ScanPage {
        let next = (rows.len() == limit.max(1))
            .then(|| rows.last().map(|(key, _)| key.clone()))
            .flatten();
        let items = rows
            .into_iter()
            .filter_map(|(encoded, doc)| {
                let key = Key::decode(&encoded).ok();
                if key.is_none() {
                    tracing::warn!(key = %encoded, target = %self.target, "row whose key names no key; skipped by the scan");
                }
                key.map(|key| (key, doc))
            })
            .collect();
        ScanPage { items, next }
    }
}

/// The ownership refusal `autoshard_owned` raised (`AS002`, `AS003`), as the contract's
/// error; `None` for any other error.
pub(super) fn refusal(e: &tokio_postgres::Error) -> Option<Error> {
    let db = e.as_db_error()?;
    let key = Key::decode(db.message()).ok()?;
    let detail = db.detail()?;
    match db.code().code() {
        "AS002" => {
            let owner: serde_json::Value = serde_json::from_str(detail).ok()?;
            Some(Error::Grouped {
                key,
                group: owner.get("group")?.as_str()?.to_owned(),
                until_ms: owner.get("until")?.as_u64()?,
            })
        }
        "AS003" => Some(Error::GroupLost {
            key,
            group: detail.to_owned(),
        }),
        _ => None,
    }
}
