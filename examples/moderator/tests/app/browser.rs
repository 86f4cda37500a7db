//! The voting app's page in a real browser: headless Chromium driven through
//! `chromedriver` (the W3C `WebDriver` protocol), against the app served here on the embedded store. It asks
//! a question, votes, sees the count change, reloads, and sees a vote from a second
//! browser (its own profile, so its own visitor cookie) move the first one's leaderboard
//! live. `./scripts/test` installs `chromium` and `chromium-driver` when they are missing.
//!
//! Set `AUTOSHARD_SCREENSHOT=path.png` to keep a screenshot of the page.

use autoshard::prelude::*;
use autoshard_moderator::model::Question;
use autoshard_moderator::web::{self, WebConfig};
use autoshard_test_support::redis::{TempDir, watchdog};
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// How long a condition on the page may take to hold before the test fails: far above
/// what a slow machine needs (a page load, a server-sent event), never a measurement.
const PATIENCE: Duration = Duration::from_mins(1);

/// A chromedriver process on a free loopback port, stopped on drop.
struct Driver {
    child: Child,
    watchdog: Child,
    port: u16,
    _profiles: TempDir,
    profiles: std::path::PathBuf,
}

impl Driver {
    fn start() -> Driver {
        let binary =
            std::env::var("AUTOSHARD_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".to_owned());
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind 127.0.0.1:0")
            .port();
        let child = Command::new(&binary)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {binary} ({e}): install chromium and chromium-driver \
                     (./scripts/test does), or set AUTOSHARD_CHROMEDRIVER"
                )
            });
        let watchdog = watchdog(child.id(), "-9");
        // Up to 600 tries of 100 ms: the driver listens within a second on any machine.
        let up = (0..600).any(|_| {
            let ok = TcpStream::connect(("127.0.0.1", port)).is_ok();
            if !ok {
                std::thread::sleep(Duration::from_millis(100));
            }
            ok
        });
        assert!(up, "{binary} did not listen on port {port}");
        let profiles = TempDir::new("chromium");
        let path = profiles.path().to_owned();
        Driver {
            child,
            watchdog,
            port,
            _profiles: profiles,
            profiles: path,
        }
    }

    /// A new browser with a profile (and so cookies) of its own, as wide as a phone.
    async fn browser(&self, name: &str) -> Client {
        let profile = self.profiles.join(name);
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            serde_json::json!({
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--window-size=412,915",
                    format!("--user-data-dir={}", profile.display()),
                ]
            }),
        );
        ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a WebDriver session of headless Chromium")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}

/// Waits until the element `css` on the page `browser` shows reads `want`, polling up to
/// [`PATIENCE`] (a bounded count of polls); fails saying what it showed.
async fn wait_for_text(browser: &Client, css: &str, want: &str) {
    let shown = browser
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css} on the page: {e}"));
    let mut last = String::new();
    for _ in 0..600 {
        last = shown.text().await.expect("the element's text");
        if last == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{css}: the page shows {last:?}, expected {want:?}");
}

/// Waits until the page shows `want` votes for question `id`.
async fn wait_for_count(browser: &Client, id: &str, want: &str) {
    wait_for_text(browser, &format!("b[data-votes='{id}']"), want).await;
}

async fn click(browser: &Client, css: &str) {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css} on the page: {e}"))
        .click()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_visitor_asks_votes_and_sees_another_visitors_vote_live() {
    let store: Arc<dyn DocumentStore> = Arc::new(MemoryStore::new());
    let (addr, server) = web::spawn::<Question>(
        store,
        SocketAddr::from(([127, 0, 0, 1], 0)),
        WebConfig::default(),
        std::future::pending(),
    )
    .await
    .unwrap();
    let url = format!("http://{addr}/");
    let driver = Driver::start();
    let first = driver.browser("first").await;

    // 1. Open the page, ask a question, vote.
    first.goto(&url).await.unwrap();
    let text = "Should the library open on Sundays?";
    first
        .find(Locator::Css("#ask-text"))
        .await
        .unwrap()
        .send_keys(text)
        .await
        .unwrap();
    click(&first, "#ask").await;
    let xpath = format!("//li[.//a[text()='{text}']]");
    let item = first
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::XPath(&xpath))
        .await
        .expect("the question asked, on the leaderboard");
    let id = item
        .attr("id")
        .await
        .unwrap()
        .and_then(|id| id.strip_prefix("q-").map(str::to_owned))
        .expect("the question's item has an id q-<id>");
    wait_for_count(&first, &id, "0").await;
    let vote = format!("#q-{id} form.vote button");
    click(&first, &vote).await;

    // 2. The count changes at once (the vote's answer, no reload).
    wait_for_count(&first, &id, "1").await;

    // 3. A reload shows the vote kept, rendered by the server.
    first.refresh().await.unwrap();
    wait_for_count(&first, &id, "1").await;

    // 4. A second browser votes; the first one's leaderboard moves live.
    let second = driver.browser("second").await;
    second.goto(&url).await.unwrap();
    wait_for_count(&second, &id, "1").await;
    click(&second, &vote).await;
    wait_for_count(&second, &id, "2").await;
    wait_for_count(&first, &id, "2").await;

    // The same visitor voting again does not count.
    click(&first, &vote).await;
    wait_for_text(&first, &vote, "Voted already").await;
    wait_for_count(&first, &id, "2").await;

    if let Ok(path) = std::env::var("AUTOSHARD_SCREENSHOT") {
        let png = first.screenshot().await.unwrap();
        std::fs::write(&path, png).unwrap();
    }
    first.close().await.unwrap();
    second.close().await.unwrap();
    server.abort();
}
