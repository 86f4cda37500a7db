//! A TCP proxy on a free loopback port in front of a test server, that loses replies on
//! demand, so that a test makes by construction the fault a crash or a partition makes
//! by chance: a write the server carried out whose reply never came.
//!
//! [`Proxy::hold_replies`] keeps what the server sends (its clients' requests still reach
//! it); [`Proxy::take_held`] takes what was held so far, [`Proxy::release`] passes it on,
//! [`Proxy::resume`] passes on everything again (late), [`Proxy::stall`] holds the
//! replies of the connections open now for good, and [`Proxy::cut`] closes every
//! connection, dropping what it held. A test that waits
//! for a write takes the held replies, then checks (on a connection of its own) whether
//! the write landed: if not, none of those replies is the write's (a server answers a
//! write after carrying it out), so it releases them (the reads the write waits for)
//! and looks again; once it landed, it cuts ([`Proxy::lose_reply`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// A running proxy; stops, closing its connections, when dropped.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    accept: AbortHandle,
}

struct Shared {
    target: SocketAddr,
    hold: AtomicBool,
    conns: Mutex<Vec<Conn>>,
}

/// One proxied connection.
struct Conn {
    /// Whether its replies are held whatever [`Shared::hold`] says ([`Proxy::stall`]).
    stalled: Arc<AtomicBool>,
    /// What the server sent while replies were held.
    held: Arc<Mutex<Vec<u8>>>,
    /// Bytes to write to the client.
    to_client: mpsc::UnboundedSender<Vec<u8>>,
    /// Its tasks: requests, replies read, replies written.
    tasks: [AbortHandle; 3],
}

/// Replies taken from the connections by [`Proxy::take_held`].
pub struct Held(Vec<(mpsc::UnboundedSender<Vec<u8>>, Vec<u8>)>);

impl Proxy {
    /// Starts a proxy to the server at `target` (`127.0.0.1:port`).
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("the proxy's address").port();
        let shared = Arc::new(Shared {
            target,
            hold: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
        });
        let accepting = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if let Ok(server) = TcpStream::connect(accepting.target).await {
                    accepting.pump(client, server);
                }
            }
        })
        .abort_handle();
        Proxy {
            port,
            shared,
            accept,
        }
    }

    /// The proxy's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// From now on, what the server sends is held until [`Proxy::release`]d or
    /// [`Proxy::cut`].
    pub fn hold_replies(&self) {
        self.shared.hold.store(true, Ordering::SeqCst);
    }

    /// Holds the replies of the connections open now, for good, while connections made
    /// after it get theirs: as a network does that stops carrying a connection without
    /// closing it (a partition, a firewall or load balancer that dropped its state).
    pub fn stall(&self) {
        for conn in self.shared.conns.lock().expect("connections").iter() {
            conn.stalled.store(true, Ordering::SeqCst);
        }
    }

    /// Takes what every connection held so far (each connection's bytes in order).
    pub fn take_held(&self) -> Held {
        let conns = self.shared.conns.lock().expect("connections");
        Held(
            conns
                .iter()
                .map(|c| {
                    let bytes = std::mem::take(&mut *c.held.lock().expect("held"));
                    (c.to_client.clone(), bytes)
                })
                .filter(|(_, bytes)| !bytes.is_empty())
                .collect(),
        )
    }

    /// Passes `held` on to the clients (ahead of anything held after it was taken).
    pub fn release(&self, held: Held) {
        for (to_client, bytes) in held.0 {
            let _ = to_client.send(bytes);
        }
    }

    /// Passes on what was held, and every reply from now on, in the order the server
    /// sent them.
    pub fn resume(&self) {
        let conns = self.shared.conns.lock().expect("connections");
        // Every connection's held bytes locked while holding stops: a reply read after
        // that goes behind them.
        let mut held: Vec<_> = conns
            .iter()
            .map(|c| (&c.to_client, c.held.lock().expect("held")))
            .collect();
        self.shared.hold.store(false, Ordering::SeqCst);
        for (to_client, bytes) in &mut held {
            if !bytes.is_empty() {
                let _ = to_client.send(std::mem::take(&mut **bytes));
            }
        }
    }

    /// Closes every open connection, dropping the replies held, and passes replies on
    /// again for the connections made after it.
    pub fn cut(&self) {
        for conn in self.shared.conns.lock().expect("connections").drain(..) {
            for task in conn.tasks {
                task.abort();
            }
        }
        self.shared.hold.store(false, Ordering::SeqCst);
    }

    /// Runs `write` with the server's replies held, passing on those that came before
    /// `landed` (a read on a connection of the test's own) says the server carried the
    /// write out, and cutting the connections once it did: the write's reply is lost.
    /// Returns what `write` answered.
    ///
    /// # Panics
    /// When the write does not land within [`crate::START_UP_BOUND`] (a request of the
    /// write that never reached the server).
    pub async fn lose_reply<T>(
        &self,
        write: impl Future<Output = T>,
        landed: impl AsyncFn() -> bool,
    ) -> T {
        self.hold_replies();
        let cut = async {
            let deadline = Instant::now() + crate::START_UP_BOUND;
            loop {
                let held = self.take_held();
                if landed().await {
                    self.cut();
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "the write never reached the server"
                );
                self.release(held);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        let (answer, ()) = tokio::join!(write, cut);
        answer
    }
}

impl Shared {
    /// Copies bytes both ways between `client` and `server`, holding the server's while
    /// `hold` is set.
    fn pump(self: &Arc<Self>, client: TcpStream, server: TcpStream) {
        let (mut client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        let requests = tokio::spawn(async move {
            let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        });
        let (to_client, mut bytes) = mpsc::unbounded_channel::<Vec<u8>>();
        let writes = tokio::spawn(async move {
            while let Some(chunk) = bytes.recv().await {
                if client_write.write_all(&chunk).await.is_err() {
                    return;
                }
            }
        });
        let held = Arc::new(Mutex::new(Vec::new()));
        let stalled = Arc::new(AtomicBool::new(false));
        let (shared, holding, sending) = (self.clone(), held.clone(), to_client.clone());
        let stalling = stalled.clone();
        let replies = tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match server_read.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                // Under the lock, so that a take sees every byte read before it.
                let mut held = holding.lock().expect("held");
                if shared.hold.load(Ordering::SeqCst) || stalling.load(Ordering::SeqCst) {
                    held.extend_from_slice(&buf[..n]);
                } else if sending.send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
        });
        self.conns.lock().expect("connections").push(Conn {
            stalled,
            held,
            to_client,
            tasks: [
                requests.abort_handle(),
                replies.abort_handle(),
                writes.abort_handle(),
            ],
        });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
