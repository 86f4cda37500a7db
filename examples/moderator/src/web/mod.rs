//! The voting app as a web application (`moderator serve`): a server-rendered page and a
//! JSON API on axum, over one [`Mapper`] with a [`ReadCache`] behind the leaderboard.
//!
//! - [`board`]: what the app does with the store (ask, list, vote once per visitor,
//!   respond), apart from HTTP.
//! - [`api`]: the JSON API, its errors (a status code and `{"error": ...}`) and input
//!   checks.
//! - [`page`]: the HTML pages and their forms (they work without JavaScript; a few lines
//!   of script vote in place and follow the live leaderboard).
//! - The live leaderboard: one task reads it every [`TICK`] (and at once after a write
//!   of this server) and publishes it on a `watch` channel; `GET /api/events` reads it
//!   once when a viewer connects and then streams the published changes as server-sent
//!   events, so viewers cost the store one read per tick, not one per viewer and tick.
//!
//! A visitor is a random id in the `visitor` cookie, set on the first request that has
//! none; a vote is counted once per visitor and question ([`board::vote`]).

pub mod api;
pub mod board;
pub mod page;

use autoshard::ReadCache;
use autoshard::prelude::*;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use board::{Poll, QuestionView};
use std::future::Future;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// How often the live leaderboard is read.
pub const TICK: Duration = Duration::from_millis(250);

/// The most bytes of a request body.
pub const MAX_BODY: usize = 16 * 1024;

/// The name of the cookie that holds a visitor's id.
pub const VISITOR: &str = "visitor";

/// How the web app runs.
#[derive(Clone, Copy, Debug)]
pub struct WebConfig {
    /// How old a leaderboard read may be (the read cache's bound).
    pub staleness: Duration,
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            staleness: Duration::from_millis(100),
        }
    }
}

/// What every handler shares: the mapper, the live leaderboard and the question kind.
pub struct Web<Q> {
    db: Mapper<Arc<dyn DocumentStore>>,
    board: watch::Receiver<Arc<Vec<QuestionView>>>,
    changed: Arc<Notify>,
    kind: PhantomData<fn() -> Q>,
}

impl<Q> Clone for Web<Q> {
    fn clone(&self) -> Self {
        Web {
            db: self.db.clone(),
            board: self.board.clone(),
            changed: self.changed.clone(),
            kind: PhantomData,
        }
    }
}

impl<Q: Poll> Web<Q> {
    /// The app on `store`: creates the board if needed and starts the task that reads
    /// the live leaderboard (it stops when the last clone of the app is dropped).
    pub async fn start(store: Arc<dyn DocumentStore>, config: WebConfig) -> Result<Self> {
        let db = Mapper::new(store).with_read_cache(ReadCache::new(config.staleness));
        board::open::<Q, _>(&db).await?;
        let first = board::leaderboard::<Q, _>(&db).await?;
        let (publish, board) = watch::channel(Arc::new(first));
        let changed = Arc::new(Notify::new());
        tokio::spawn(follow::<Q>(db.clone(), publish, changed.clone()));
        Ok(Web {
            db,
            board,
            changed,
            kind: PhantomData,
        })
    }

    /// The mapper the app writes through.
    #[must_use]
    pub fn db(&self) -> &Mapper<Arc<dyn DocumentStore>> {
        &self.db
    }

    /// Tells the leaderboard task that this server wrote.
    fn wrote(&self) {
        self.changed.notify_one();
    }

    /// The routes of the page and the API.
    pub fn router(self) -> Router {
        Router::new()
            .route("/", get(page::index::<Q>))
            .route("/ask", post(page::ask::<Q>))
            .route("/questions/{id}", get(page::question::<Q>))
            .route("/questions/{id}/vote", post(page::vote::<Q>))
            .route("/questions/{id}/responses", post(page::respond::<Q>))
            .route("/api/questions", get(api::list::<Q>).post(api::ask::<Q>))
            .route("/api/questions/{id}", get(api::question::<Q>))
            .route("/api/questions/{id}/vote", post(api::vote::<Q>))
            .route("/api/questions/{id}/merge", post(api::merge::<Q>))
            .route("/api/questions/{id}/responses", post(api::respond::<Q>))
            .route("/api/events", get(api::events::<Q>))
            .fallback(api::not_found)
            .method_not_allowed_fallback(api::method_not_allowed)
            .layer(DefaultBodyLimit::max(MAX_BODY))
            .with_state(self)
    }
}

/// Reads the leaderboard every [`TICK`], or at once when this server wrote, and
/// publishes it when it changed. Ends when no handler holds the app any more.
async fn follow<Q: Poll>(
    db: Mapper<Arc<dyn DocumentStore>>,
    publish: watch::Sender<Arc<Vec<QuestionView>>>,
    changed: Arc<Notify>,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(TICK) => {}
            () = changed.notified() => {}
            () = publish.closed() => return,
        }
        match board::leaderboard::<Q, _>(&db).await {
            Ok(now) => {
                publish.send_if_modified(|shown| {
                    let differs = **shown != now;
                    if differs {
                        *shown = Arc::new(now);
                    }
                    differs
                });
            }
            Err(e) => tracing::warn!("reading the leaderboard failed: {e}"),
        }
    }
}

/// The visitor's id from the cookie jar, or a new one added to the jar.
fn visitor(jar: CookieJar) -> (String, CookieJar) {
    if let Some(id) = jar.get(VISITOR).map(Cookie::value)
        && !id.is_empty()
        && id.len() <= 64
        && id.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return (id.to_owned(), jar);
    }
    let id = format!("{:032x}", rand::random::<u128>());
    let cookie = Cookie::build((VISITOR, id.clone()))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .permanent()
        .build();
    (id, jar.add(cookie))
}

/// Binds `addr` (port 0: any free port), starts the app on `store` with questions of
/// kind `Q`, and serves it in a task until `shutdown` completes (then it finishes the
/// requests under way); answers the address it listens on and the task.
///
/// ```
/// use autoshard::prelude::*;
/// use autoshard_moderator::model::Question;
/// use autoshard_moderator::web::{self, WebConfig};
/// use std::sync::Arc;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store: Arc<dyn DocumentStore> = Arc::new(MemoryStore::new());
/// let any_port = ([127, 0, 0, 1], 0).into();
/// let forever = std::future::pending();
/// let (addr, _server) = web::spawn::<Question>(store, any_port, WebConfig::default(), forever).await?;
/// let http = reqwest::Client::new();
/// let asked: serde_json::Value = http
///     .post(format!("http://{addr}/api/questions"))
///     .json(&serde_json::json!({ "text": "Bike lanes?" }))
///     .send()
///     .await?
///     .json()
///     .await?;
/// let vote = format!("http://{addr}/api/questions/{}/vote", asked["id"]);
/// let voted: serde_json::Value = http.post(&vote).header("cookie", "visitor=17").send().await?.json().await?;
/// assert_eq!((voted["votes"].as_i64(), voted["counted"].as_bool()), (Some(1), Some(true)));
/// # Ok(())
/// # }
/// ```
pub async fn spawn<Q: Poll>(
    store: Arc<dyn DocumentStore>,
    addr: SocketAddr,
    config: WebConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let app = Web::<Q>::start(store, config).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Invalid(format!("cannot listen on {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::Invalid(format!("cannot listen on {addr}: {e}")))?;
    let served = axum::serve(listener, app.router()).with_graceful_shutdown(shutdown);
    let task = tokio::spawn(async move { served.await });
    Ok((local, task))
}
