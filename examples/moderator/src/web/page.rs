//! The HTML pages: the leaderboard with the form to ask (`/`) and one question with its
//! responses (`/questions/{id}`). Rendered on the server (maud escapes every value); the
//! forms post to the routes below and are redirected back, so the page works without
//! JavaScript. [`SCRIPT`] votes in place through the API and follows the live
//! leaderboard (`/api/events`).

use super::api::{ApiError, id_of};
use super::board::{self, MAX_AUTHOR, MAX_QUESTION, MAX_RESPONSE, Poll, QuestionView, Refused};
use super::{Web, visitor};
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::CookieJar;
use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde::Deserialize;

/// The page's style: one column, readable on a phone.
const STYLE: &str = "
body{font-family:system-ui,sans-serif;margin:0 auto;max-width:40rem;padding:1rem;line-height:1.4;color:#222}
h1{font-size:1.5rem;margin:.2rem 0 1rem}h1 a{color:inherit;text-decoration:none}
form.ask,form.respond{display:flex;flex-wrap:wrap;gap:.5rem;margin-bottom:1.5rem}
form.ask textarea,form.respond textarea{flex:1 1 100%;min-height:3rem;font:inherit;padding:.4rem}
input[type=text]{flex:1;font:inherit;padding:.4rem;min-width:8rem}
button{font:inherit;padding:.4rem .9rem;border-radius:.4rem;border:1px solid #36c;background:#36c;color:#fff;cursor:pointer}
button[disabled]{background:#999;border-color:#999;cursor:default}
ol.board{list-style:none;padding:0}ol.board li{display:flex;align-items:center;gap:.8rem;padding:.6rem 0;border-bottom:1px solid #ddd}
.count{min-width:3rem;text-align:center}.count b{display:block;font-size:1.3rem}
.count small,.by{color:#666;font-size:.85rem}
form.vote{margin:0}ul.responses{padding-left:1.2rem}.error{color:#b00}
";

/// Votes in place and follows the live leaderboard; without it the forms still work.
pub const SCRIPT: &str = r#"
document.addEventListener('submit', async (e) => {
  const form = e.target;
  if (!form.classList.contains('vote')) return;
  e.preventDefault();
  const button = form.querySelector('button');
  button.disabled = true;
  const r = await fetch('/api' + form.getAttribute('action'), {method: 'POST', credentials: 'same-origin'});
  if (!r.ok) { button.disabled = false; return; }
  const v = await r.json();
  document.querySelectorAll('[data-votes="' + v.id + '"]').forEach((n) => { n.textContent = v.votes; });
  button.textContent = v.counted ? 'Voted' : 'Voted already';
});
const board = document.getElementById('board');
if (board && window.EventSource) {
  const item = (q) => {
    const li = document.createElement('li');
    li.id = 'q-' + q.id;
    li.innerHTML = '<div class="count"><b data-votes></b><small>votes</small></div>' +
      '<form class="vote" method="post"><button type="submit">Vote</button></form>' +
      '<div><a></a><div class="by"></div></div>';
    li.querySelector('[data-votes]').dataset.votes = q.id;
    li.querySelector('form').setAttribute('action', '/questions/' + q.id + '/vote');
    li.querySelector('a').href = '/questions/' + q.id;
    li.querySelector('a').textContent = q.text;
    li.querySelector('.by').textContent = 'asked by ' + q.author;
    return li;
  };
  new EventSource('/api/events').addEventListener('leaderboard', (e) => {
    const questions = JSON.parse(e.data);
    const empty = document.getElementById('empty');
    if (empty && questions.length) empty.remove();
    for (const q of questions) {
      const li = document.getElementById('q-' + q.id) || item(q);
      li.querySelector('[data-votes]').textContent = q.votes;
      board.appendChild(li);
    }
  });
}
"#;

fn layout(title: &str, body: &Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · autoshard moderator" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { a href="/" { "Moderator" } }
                (body)
                script { (PreEscaped(SCRIPT)) }
            }
        }
    }
}

fn row(q: &QuestionView) -> Markup {
    html! {
        li id={ "q-" (q.id) } {
            div.count { b data-votes=(q.id) { (q.votes) } small { "votes" } }
            form.vote method="post" action={ "/questions/" (q.id) "/vote" } {
                button type="submit" { "Vote" }
            }
            div {
                a href={ "/questions/" (q.id) } { (q.text) }
                div.by { "asked by " (q.author) }
            }
        }
    }
}

/// A page that says what was refused, with the status code.
fn refused(status: StatusCode, message: &str) -> Response {
    let body = html! {
        p.error { (message) }
        p { a href="/" { "Back to the questions" } }
    };
    (status, layout("Not done", &body)).into_response()
}

fn error_page(e: &ApiError) -> Response {
    refused(e.status, &e.message)
}

/// `GET /`: the leaderboard and the form to ask.
pub async fn index<Q: Poll>(State(web): State<Web<Q>>, jar: CookieJar) -> Response {
    let (_, jar) = visitor(jar);
    let questions = match board::leaderboard::<Q, _>(web.db()).await {
        Ok(questions) => questions,
        Err(e) => return error_page(&e.into()),
    };
    let body = html! {
        form.ask method="post" action="/ask" {
            textarea name="text" id="ask-text" maxlength=(MAX_QUESTION) required
                placeholder="Ask a question" {}
            input type="text" name="author" maxlength=(MAX_AUTHOR) placeholder="Your name (optional)";
            button type="submit" id="ask" { "Ask" }
        }
        @if questions.is_empty() {
            p id="empty" {
                "No questions yet: ask the first one above, then vote on it here and from \
                 another browser, and watch the count move."
            }
        }
        ol.board id="board" {
            @for q in &questions { (row(q)) }
        }
    };
    (jar, layout("Questions", &body)).into_response()
}

/// `GET /questions/{id}`: one question, its responses and the form to respond.
pub async fn question<Q: Poll>(
    State(web): State<Web<Q>>,
    Path(id): Path<String>,
    jar: CookieJar,
) -> Response {
    let (_, jar) = visitor(jar);
    let n = match id_of(&id) {
        Ok(n) => n,
        Err(e) => return error_page(&e),
    };
    let found = board::question::<Q, _>(web.db(), n).await;
    let q = match found {
        Ok(Some(q)) => q,
        Ok(None) => return error_page(&Refused::NoQuestion.into()),
        Err(e) => return error_page(&e.into()),
    };
    let responses = match board::responses::<Q, _>(web.db(), n).await {
        Ok(responses) => responses,
        Err(e) => return error_page(&e.into()),
    };
    let body = html! {
        ol.board { (row(&q)) }
        h2 { "Responses" }
        ul.responses {
            @for r in &responses { li { (r.text) " " span.by { "— " (r.author) } } }
            @if responses.is_empty() { li.by { "None yet." } }
        }
        form.respond method="post" action={ "/questions/" (q.id) "/responses" } {
            textarea name="text" maxlength=(MAX_RESPONSE) required placeholder="Your response" {}
            input type="text" name="author" maxlength=(MAX_AUTHOR) placeholder="Your name (optional)";
            button type="submit" { "Respond" }
        }
    };
    (jar, layout(&q.text, &body)).into_response()
}

/// The fields of the forms to ask and to respond.
#[derive(Debug, Deserialize)]
pub struct TextForm {
    text: String,
    #[serde(default)]
    author: Option<String>,
}

fn form_fields(
    form: Result<Form<TextForm>, FormRejection>,
    max: usize,
) -> Result<(String, String), ApiError> {
    let Form(TextForm { text, author }) = form.map_err(|e| ApiError {
        status: StatusCode::BAD_REQUEST,
        message: e.body_text(),
    })?;
    let text = board::checked("text", &text, max)?;
    Ok((text, board::author(author.as_deref())?))
}

/// `POST /ask` (the form): asks, then back to the leaderboard.
pub async fn ask<Q: Poll>(
    State(web): State<Web<Q>>,
    form: Result<Form<TextForm>, FormRejection>,
) -> Response {
    let asked = match form_fields(form, MAX_QUESTION) {
        Ok((text, author)) => board::ask::<Q, _>(web.db(), text, author)
            .await
            .map_err(ApiError::from),
        Err(e) => Err(e),
    };
    match asked {
        Ok(_) => {
            web.wrote();
            Redirect::to("/").into_response()
        }
        Err(e) => error_page(&e),
    }
}

/// `POST /questions/{id}/vote` (the form): votes once per visitor, then back.
pub async fn vote<Q: Poll>(
    State(web): State<Web<Q>>,
    Path(id): Path<String>,
    jar: CookieJar,
) -> Response {
    let n = match id_of(&id) {
        Ok(n) => n,
        Err(e) => return error_page(&e),
    };
    let (visitor, jar) = visitor(jar);
    match board::vote::<Q, _>(web.db(), n, &visitor).await {
        Ok(Ok(_)) => {
            web.wrote();
            (jar, Redirect::to("/")).into_response()
        }
        Ok(Err(refused)) => error_page(&refused.into()),
        Err(e) => error_page(&e.into()),
    }
}

/// `POST /questions/{id}/responses` (the form): responds, then back to the question.
pub async fn respond<Q: Poll>(
    State(web): State<Web<Q>>,
    Path(id): Path<String>,
    form: Result<Form<TextForm>, FormRejection>,
) -> Response {
    let n = match id_of(&id) {
        Ok(n) => n,
        Err(e) => return error_page(&e),
    };
    let (text, author) = match form_fields(form, MAX_RESPONSE) {
        Ok(fields) => fields,
        Err(e) => return error_page(&e),
    };
    match board::respond::<Q, _>(web.db(), n, author, text).await {
        Ok(Ok(_)) => Redirect::to(&format!("/questions/{n}")).into_response(),
        Ok(Err(refused)) => error_page(&refused.into()),
        Err(e) => error_page(&e.into()),
    }
}
