//! The JSON API (documented in the README):
//!
//! | request | answer |
//! |---|---|
//! | `GET /api/questions` | `200`, the questions, most votes first |
//! | `POST /api/questions` `{"text", "author"?}` | `201`, the question |
//! | `GET /api/questions/{id}` | `200`, `{"question", "responses"}` |
//! | `POST /api/questions/{id}/vote` | `200`, `{"id", "votes", "counted"}` |
//! | `POST /api/questions/{id}/responses` `{"text", "author"?}` | `201`, the response |
//! | `GET /api/events` | server-sent events `leaderboard`, the questions |
//!
//! Errors are a status code and `{"error": "<what>", "status": <code>}`: `400` for a body
//! that is not the JSON asked for or a text out of its limits, `404` for an unknown id or
//! path, `405` for a wrong method, `413` for a body over [`MAX_BODY`](super::MAX_BODY)
//! bytes, `503` when a write kept conflicting, `500` for a store error. Nothing is stored
//! on a refused request.

use super::board::{self, MAX_QUESTION, MAX_RESPONSE, Poll, Refused};
use super::{Web, visitor};
use autoshard::Error;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum_extra::extract::cookie::CookieJar;
use futures::Stream;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::convert::Infallible;
use std::sync::Arc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::WatchStream;

/// An error answer: a status code and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// The status code.
    pub status: StatusCode,
    /// What went wrong, for the client.
    pub message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    fn no_question(id: &str) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, format!("no question {id}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message, "status": self.status.as_u16() });
        (self.status, Json(body)).into_response()
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        match e {
            Error::Contention { .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy: try again")
            }
            e => {
                tracing::error!("store error: {e}");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "store error")
            }
        }
    }
}

impl From<Refused> for ApiError {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::Length { field, max } => ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("`{field}` must hold 1 to {max} characters"),
            ),
            Refused::NoQuestion => ApiError::new(StatusCode::NOT_FOUND, "no such question"),
            Refused::SameQuestion => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "a question cannot be merged into itself",
            ),
        }
    }
}

/// A body of JSON of type `T`, whatever its content type says.
fn json<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let body = body.map_err(|e| ApiError::new(e.status(), e.body_text()))?;
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("malformed JSON: {e}")))
}

/// A question id from the path: one that is not a number names no question.
pub(crate) fn id_of(id: &str) -> Result<u64, ApiError> {
    id.parse().map_err(|_| ApiError::no_question(id))
}

/// The body of `POST /api/questions` and of `POST /api/questions/{id}/responses`.
#[derive(Debug, Deserialize)]
pub struct Text {
    /// The question or the answer.
    pub text: String,
    /// Who writes it (`anonymous` when absent or empty).
    #[serde(default)]
    pub author: Option<String>,
}

/// `GET /api/questions`.
pub async fn list<Q: Poll>(
    State(web): State<Web<Q>>,
) -> Result<Json<Vec<board::QuestionView>>, ApiError> {
    Ok(Json(board::leaderboard::<Q, _>(web.db()).await?))
}

/// `POST /api/questions`.
pub async fn ask<Q: Poll>(
    State(web): State<Web<Q>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<board::QuestionView>), ApiError> {
    let Text { text, author } = json(body)?;
    let text = board::checked("text", &text, MAX_QUESTION)?;
    let author = board::author(author.as_deref())?;
    let asked = board::ask::<Q, _>(web.db(), text, author).await?;
    web.wrote();
    Ok((StatusCode::CREATED, Json(asked)))
}

/// `GET /api/questions/{id}`.
pub async fn question<Q: Poll>(
    State(web): State<Web<Q>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let n = id_of(&id)?;
    let question = board::question::<Q, _>(web.db(), n)
        .await?
        .ok_or_else(|| ApiError::no_question(&id))?;
    let responses = board::responses::<Q, _>(web.db(), n).await?;
    Ok(Json(
        serde_json::json!({ "question": question, "responses": responses }),
    ))
}

/// `POST /api/questions/{id}/vote`: counted once per visitor (the `visitor` cookie, set
/// when absent).
pub async fn vote<Q: Poll>(
    State(web): State<Web<Q>>,
    Path(id): Path<String>,
    jar: CookieJar,
) -> Result<(CookieJar, Json<board::VoteView>), ApiError> {
    let n = id_of(&id)?;
    let (visitor, jar) = visitor(jar);
    let voted = board::vote::<Q, _>(web.db(), n, &visitor).await??;
    web.wrote();
    Ok((jar, Json(voted)))
}

/// The body of `POST /api/questions/{id}/merge`.
#[derive(Debug, Deserialize)]
pub struct MergeInto {
    /// The question that takes the votes of question `{id}`.
    pub into: u64,
}

/// `POST /api/questions/{id}/merge`: question `{id}` is a duplicate of `into`, which
/// takes its votes (one transaction over both).
pub async fn merge<Q: Poll>(
    State(web): State<Web<Q>>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<board::QuestionView>, ApiError> {
    let n = id_of(&id)?;
    let MergeInto { into } = json(body)?;
    let merged = board::merge::<Q, _>(web.db(), n, into).await??;
    web.wrote();
    Ok(Json(merged))
}

/// `POST /api/questions/{id}/responses`.
pub async fn respond<Q: Poll>(
    State(web): State<Web<Q>>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<board::ResponseView>), ApiError> {
    let n = id_of(&id)?;
    let Text { text, author } = json(body)?;
    let text = board::checked("text", &text, MAX_RESPONSE)?;
    let author = board::author(author.as_deref())?;
    let response = board::respond::<Q, _>(web.db(), n, author, text).await??;
    Ok((StatusCode::CREATED, Json(response)))
}

/// `GET /api/events`: the leaderboard now, then each time it changes.
///
/// The first event is read when the viewer connects, so it holds every write this server
/// answered before (the live task may not have read since); the changes the live task
/// publishes from then on follow it.
pub async fn events<Q: Poll>(
    State(web): State<Web<Q>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut changes = web.board.clone();
    changes.mark_unchanged();
    let now = match board::leaderboard::<Q, _>(web.db()).await {
        Ok(now) => Arc::new(now),
        Err(e) => {
            tracing::warn!("reading the leaderboard failed: {e}");
            changes.borrow().clone()
        }
    };
    let stream = tokio_stream::once(now)
        .chain(WatchStream::from_changes(changes))
        .map(|board| {
            Ok(Event::default()
                .event("leaderboard")
                .json_data(&*board)
                .unwrap_or_else(|_| Event::default().comment("unencodable leaderboard")))
        });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// Any other path.
pub async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such page")
}

/// A known path with another method.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here")
}
