//! Responses to questions: the one place that writes and reads [`Response`]s.
//!
//! Today a response is an entity of its own that names its question, and the responses
//! of a question are found by scanning the kind. When entity groups land, a response
//! becomes a child of its question (in a sharded entity group) and only this module
//! changes: `respond` inserts a child, `count_per_question` reads each question's
//! children.

use crate::model::Response;
use autoshard::prelude::*;
use autoshard::Scan;
use std::collections::BTreeMap;

/// Stores `response`.
pub async fn respond<S: DocumentStore>(db: &Mapper<S>, response: &mut Response) -> Result<()> {
    db.insert(response).await
}

/// How many responses each question has (questions without any are absent).
pub async fn count_per_question<S: DocumentStore>(db: &Mapper<S>) -> Result<BTreeMap<u64, u64>> {
    let mut counts = BTreeMap::new();
    let mut scan = Scan::new(<Response as Entity>::KIND, None);
    loop {
        let page = db.store().scan(&scan).await?;
        for (key, stored) in &page.items {
            let response = Response::from_document(key.name().to_owned(), &stored.doc)
                .map_err(|e| Error::malformed(key, e))?;
            *counts.entry(response.question).or_insert(0) += 1;
        }
        match page.next {
            Some(next) => scan.cursor = Some(next),
            None => return Ok(counts),
        }
    }
}
