//! The web app's JSON API over HTTP, against the app served here: input checks (nothing
//! stored on bad input), error answers, one vote per visitor under concurrent and
//! repeated requests (sharded and naive, on the embedded store and on a Redis server
//! started here), the live leaderboard's first event, and the load generator's check.

use autoshard::prelude::*;
use autoshard_moderator::load::{self, LoadConfig};
use autoshard_moderator::model::{Question, SingleQuestion};
use autoshard_moderator::web::board::{Poll, QuestionView, VoteView};
use autoshard_moderator::web::{self, WebConfig};
use autoshard_test_support::redis::{Standalone, namespace};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Serves the app with questions of kind `Q` on `store`; answers its base URL.
async fn serve<Q: Poll>(store: Arc<dyn DocumentStore>) -> String {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let (addr, _) = web::spawn::<Q>(store, any, WebConfig::default(), std::future::pending())
        .await
        .unwrap();
    format!("http://{addr}")
}

async fn memory<Q: Poll>() -> String {
    serve::<Q>(Arc::new(MemoryStore::new())).await
}

/// The status and JSON body of an answer.
async fn answer(sent: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let r = sent.send().await.unwrap();
    let status = r.status();
    let body = r.json().await.unwrap_or(Value::Null);
    (status, body)
}

async fn ask(http: &reqwest::Client, url: &str, text: &str) -> QuestionView {
    let (status, body) = answer(
        http.post(format!("{url}/api/questions"))
            .json(&json!({ "text": text })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    serde_json::from_value(body).unwrap()
}

async fn vote(http: &reqwest::Client, url: &str, id: u64, visitor: &str) -> VoteView {
    let (status, body) = answer(
        http.post(format!("{url}/api/questions/{id}/vote"))
            .header("cookie", format!("visitor={visitor}")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_value(body).unwrap()
}

/// Every refused request answers its status code and `{"error", "status"}`, and stores
/// nothing: no question, no response, no vote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_with_their_status_and_store_nothing() {
    let url = memory::<Question>().await;
    let http = reqwest::Client::new();
    let questions = format!("{url}/api/questions");
    let long = "x".repeat(281);
    let cases: Vec<(reqwest::RequestBuilder, StatusCode)> = vec![
        (
            http.post(&questions).body("{\"text\": "),
            StatusCode::BAD_REQUEST,
        ),
        (
            http.post(&questions).body("not json"),
            StatusCode::BAD_REQUEST,
        ),
        (
            http.post(&questions).json(&json!({})),
            StatusCode::BAD_REQUEST,
        ),
        (
            http.post(&questions).json(&json!({ "text": 7 })),
            StatusCode::BAD_REQUEST,
        ),
        (
            http.post(&questions).json(&json!({ "text": "  " })),
            StatusCode::BAD_REQUEST,
        ),
        (
            http.post(&questions).json(&json!({ "text": long })),
            StatusCode::BAD_REQUEST,
        ),
        (
            http.post(&questions)
                .json(&json!({ "text": "ok?", "author": "a".repeat(41) })),
            StatusCode::BAD_REQUEST,
        ),
        (
            http.post(&questions)
                .body(format!("{{\"text\": \"{}\"}}", "y".repeat(20_000))),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (http.delete(&questions), StatusCode::METHOD_NOT_ALLOWED),
        (
            http.get(format!("{url}/api/questions/7")),
            StatusCode::NOT_FOUND,
        ),
        (
            http.get(format!("{url}/api/questions/seven")),
            StatusCode::NOT_FOUND,
        ),
        (
            http.post(format!("{url}/api/questions/7/vote")),
            StatusCode::NOT_FOUND,
        ),
        (
            http.post(format!("{url}/api/questions/-1/vote")),
            StatusCode::NOT_FOUND,
        ),
        (
            http.post(format!("{url}/api/questions/7/responses"))
                .json(&json!({ "text": "hi" })),
            StatusCode::NOT_FOUND,
        ),
        (
            http.get(format!("{url}/api/nothing")),
            StatusCode::NOT_FOUND,
        ),
    ];
    for (n, (request, want)) in cases.into_iter().enumerate() {
        let (status, body) = answer(request).await;
        assert_eq!(status, want, "case {n}: {body}");
        assert_eq!(body["status"], want.as_u16(), "case {n}: {body}");
        assert!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "case {n}: {body}"
        );
    }
    let (_, listed) = answer(http.get(&questions)).await;
    assert_eq!(listed, json!([]), "nothing stored");

    // On a question that exists: a bad response is refused and not stored.
    let q = ask(&http, &url, "What is your plan?").await;
    let responses = format!("{url}/api/questions/{}/responses", q.id);
    for bad in [
        json!({ "text": "" }),
        json!({ "text": "z".repeat(1001) }),
        json!([1]),
    ] {
        let (status, body) = answer(http.post(&responses).json(&bad)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let (status, body) = answer(http.post(&responses).json(&json!({ "text": "Trains." }))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, shown) = answer(http.get(format!("{url}/api/questions/{}", q.id))).await;
    assert_eq!(shown["question"]["votes"], 0);
    assert_eq!(
        shown["responses"].as_array().map(Vec::len),
        Some(1),
        "{shown}"
    );
    assert_eq!(shown["responses"][0]["text"], "Trains.");
    assert_eq!(shown["responses"][0]["author"], "anonymous");
}

/// 40 visitors each send their vote 4 times at once: the question counts 40, and each
/// visitor's requests answer `counted: true` exactly once.
async fn one_vote_per_visitor(url: &str) {
    let http = reqwest::Client::new();
    let q = ask(&http, url, "Should school lunches be free?").await;
    let mut sent = tokio::task::JoinSet::new();
    for visitor in 0..40 {
        for _ in 0..4 {
            let (http, url) = (http.clone(), url.to_owned());
            sent.spawn(async move {
                let v = vote(&http, &url, q.id, &format!("{visitor:08x}")).await;
                (visitor, v.counted)
            });
        }
    }
    let mut counted = [0_u32; 40];
    while let Some(done) = sent.join_next().await {
        let (visitor, yes) = done.unwrap();
        counted[visitor] += u32::from(yes);
    }
    assert!(counted.iter().all(|&c| c == 1), "{counted:?}");
    let (_, shown) = answer(http.get(format!("{url}/api/questions/{}", q.id))).await;
    assert_eq!(shown["question"]["votes"], 40, "{shown}");
    let (_, listed) = answer(http.get(format!("{url}/api/questions"))).await;
    assert_eq!(listed[0]["votes"], 40, "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_counts_once_per_visitor_under_concurrent_repeats() {
    one_vote_per_visitor(&memory::<Question>().await).await;
    one_vote_per_visitor(&memory::<SingleQuestion>().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_counts_once_per_visitor_on_redis() {
    let server = Standalone::start();
    let options = RedisOptions::default().namespace(namespace("web"));
    let store = RedisStore::connect_with(&server.url(), options)
        .await
        .unwrap();
    one_vote_per_visitor(&serve::<Question>(Arc::new(store)).await).await;
}

/// A request without a visitor cookie (or with one that is not a visitor id) gets a new
/// one; a vote through it counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visitors_without_an_id_get_one() {
    let url = memory::<Question>().await;
    let http = reqwest::Client::new();
    let q = ask(&http, &url, "Will you keep the night buses?").await;
    for cookie in [None, Some("visitor=not-hex!"), Some("visitor=")] {
        let mut request = http.post(format!("{url}/api/questions/{}/vote", q.id));
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let set = r
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(set.starts_with("visitor="), "{cookie:?}: {set}");
        assert!(set.contains("HttpOnly"), "{set}");
        let v: VoteView = r.json().await.unwrap();
        assert!(v.counted);
    }
    let (_, shown) = answer(http.get(format!("{url}/api/questions/{}", q.id))).await;
    assert_eq!(shown["question"]["votes"], 3);
}

/// The page is served with the questions on it, and the live leaderboard's first event
/// is the leaderboard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_the_live_leaderboard_show_the_questions() {
    let url = memory::<Question>().await;
    let http = reqwest::Client::new();
    let empty = http.get(format!("{url}/")).send().await.unwrap();
    let html = empty.text().await.unwrap();
    assert!(
        html.contains("No questions yet: ask the first one"),
        "{html}"
    );
    let q = ask(&http, &url, "What about <affordable> housing?").await;
    vote(&http, &url, q.id, "ab").await;
    let page = http.get(format!("{url}/")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("What about &lt;affordable&gt; housing?"),
        "escaped"
    );
    assert!(!html.contains("No questions yet"), "{html}");
    assert!(
        html.contains(&format!("data-votes=\"{}\">1<", q.id)),
        "{html}"
    );
    let (status, _) = answer(http.get(format!("{url}/questions/{}", q.id))).await;
    assert_eq!(status, StatusCode::OK);
    let missing = http
        .get(format!("{url}/questions/12"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);

    let mut events = http.get(format!("{url}/api/events")).send().await.unwrap();
    assert_eq!(
        events.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut text = String::new();
    while !text.contains("\n\n") {
        let chunk = events.chunk().await.unwrap().expect("an event");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let data = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("a data line");
    let board: Vec<QuestionView> = serde_json::from_str(data).unwrap();
    assert_eq!(board.len(), 1);
    assert!(text.starts_with("event: leaderboard"), "{text}");
}

/// The forms work without JavaScript: asking, voting and responding redirect back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forms_ask_vote_and_respond() {
    let url = memory::<Question>().await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let asked = http
        .post(format!("{url}/ask"))
        .form(&[("text", "Bike lanes?"), ("author", "Kim")])
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), StatusCode::SEE_OTHER);
    let (_, listed) = answer(http.get(format!("{url}/api/questions"))).await;
    let id = listed[0]["id"].as_u64().unwrap();
    assert_eq!(listed[0]["author"], "Kim");
    let voted = http
        .post(format!("{url}/questions/{id}/vote"))
        .header("cookie", "visitor=aa")
        .send()
        .await
        .unwrap();
    assert_eq!(voted.status(), StatusCode::SEE_OTHER);
    let responded = http
        .post(format!("{url}/questions/{id}/responses"))
        .form(&[("text", "Yes, on every main road.")])
        .send()
        .await
        .unwrap();
    assert_eq!(responded.status(), StatusCode::SEE_OTHER);
    let refused = http
        .post(format!("{url}/ask"))
        .form(&[("text", "")])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let (_, shown) = answer(http.get(format!("{url}/api/questions/{id}"))).await;
    assert_eq!(shown["question"]["votes"], 1);
    assert_eq!(shown["responses"].as_array().map(Vec::len), Some(1));
    let (_, listed) = answer(http.get(format!("{url}/api/questions"))).await;
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(1),
        "the refused one is not stored"
    );
}

/// The load generator's check holds against the app: the hot question counts every
/// answered visitor once, and no repeated vote counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_finds_the_counts_exact() {
    let config = LoadConfig {
        clients: 4,
        duration: Duration::from_millis(300),
    };
    for url in [memory::<Question>().await, memory::<SingleQuestion>().await] {
        let row = load::run("app", &url, &config).await.unwrap();
        assert!(row.is_exact(), "{row:?}");
        assert_eq!(row.double, 0);
    }
}

/// Merging a duplicate: the other question takes its votes and its text is marked, in one
/// key-group transaction, while visitors keep voting on both; no vote is lost or counted
/// twice, on the sharded and the naive question kinds.
async fn merging_moves_every_vote_once<Q: Poll>() {
    let url = memory::<Q>().await;
    let http = reqwest::Client::new();
    let dup = ask(&http, &url, "Is this a duplicate?").await;
    let kept = ask(&http, &url, "Is this the original?").await;
    for v in 0..5 {
        vote(&http, &url, dup.id, &format!("early-{v}")).await;
    }
    vote(&http, &url, kept.id, "early-0").await;
    // Voters on both questions while the merge runs.
    let voters: Vec<_> = (0..8)
        .map(|v| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
                vote(&http, &url, [dup.id, kept.id][v % 2], &format!("late-{v}")).await;
            })
        })
        .collect();
    let merge = |from: u64, into: u64| {
        http.post(format!("{url}/api/questions/{from}/merge"))
            .json(&json!({ "into": into }))
    };
    let (status, body) = answer(merge(dup.id, kept.id)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for voter in voters {
        voter.await.unwrap();
    }
    let get = |id: u64| http.get(format!("{url}/api/questions/{id}"));
    let (_, dup_now) = answer(get(dup.id)).await;
    let (_, kept_now) = answer(get(kept.id)).await;
    let (dup_now, kept_now): (QuestionView, QuestionView) = (
        serde_json::from_value(dup_now["question"].clone()).unwrap(),
        serde_json::from_value(kept_now["question"].clone()).unwrap(),
    );
    assert_eq!(
        dup_now.votes + kept_now.votes,
        5 + 1 + 8,
        "{dup_now:?} {kept_now:?}"
    );
    assert!(kept_now.votes >= 6, "{kept_now:?}");
    assert!(
        dup_now
            .text
            .starts_with(&format!("[duplicate of #{}]", kept.id)),
        "{dup_now:?}"
    );
    // The late votes on the duplicate that came after the merge stay with it; merged
    // again, they move too, and the mark is not repeated.
    let (status, body) = answer(merge(dup.id, kept.id)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let merged: QuestionView = serde_json::from_value(body).unwrap();
    assert_eq!(merged.votes, 14);
    let (_, dup_now) = answer(get(dup.id)).await;
    assert_eq!(dup_now["question"]["votes"], 0);
    assert_eq!(
        dup_now["question"]["text"],
        format!("[duplicate of #{}] Is this a duplicate?", kept.id)
    );
    let (status, _) = answer(merge(dup.id, dup.id)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = answer(merge(dup.id, 999_999)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merging_a_duplicate_moves_every_vote_once() {
    merging_moves_every_vote_once::<Question>().await;
    merging_moves_every_vote_once::<SingleQuestion>().await;
}
