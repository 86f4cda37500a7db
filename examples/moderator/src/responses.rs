//! Responses to questions: the one place that writes and reads [`Response`]s.
//!
//! A response is a child in its question's entity group, which is spread over
//! [`RESPONSE_SUB_GROUPS`](crate::model::RESPONSE_SUB_GROUPS) sub-groups: an insert
//! commits in one random sub-group (so concurrent responders to one hot question rarely
//! contend), and reading a question's responses is the union of its sub-groups.

use crate::model::Response;
use autoshard::prelude::*;
use std::collections::BTreeMap;

/// Stores `response` in a random sub-group of its question's entity group (with the
/// mapper's retry policy; `Error::Contention` when retries run out).
pub async fn respond<S: DocumentStore>(db: &Mapper<S>, response: &mut Response) -> Result<()> {
    db.insert(response).await
}

/// How many responses each of `questions` has.
pub async fn count_per_question<S: DocumentStore>(
    db: &Mapper<S>,
    questions: impl IntoIterator<Item = u64>,
) -> Result<BTreeMap<u64, u64>> {
    let mut counts = BTreeMap::new();
    for question in questions {
        let responses: Vec<Response> = db.children(&question).await?;
        counts.insert(question, responses.len() as u64);
    }
    Ok(counts)
}
