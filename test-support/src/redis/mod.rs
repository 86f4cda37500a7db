//! Test servers: a standalone `redis-server` or a 3-node Redis Cluster, started on free
//! loopback ports in a temporary directory and killed when the guard drops.
//!
//! Tests only ever talk to servers started here; they never use or flush any other one.
//! Each server also gets a watchdog shell process that kills it once the test binary is
//! gone, so no server outlives a test run even if the binary is killed before `Drop`.

#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::START_UP_BOUND;

mod cluster;
pub use cluster::Cluster;

const MISSING: &str = "redis-server/redis-cli not found: the Redis store tests start their own \
     servers and need them installed. Run the tests with `./scripts/test`, which installs them \
     (Debian/Ubuntu), or install them yourself (`apt-get install redis-server redis-tools`)";

/// Fails the calling test when `redis-server` or `redis-cli` is missing: with the whole
/// explanation the first time in this test binary, with a one-line pointer to it after.
fn require_tools() {
    static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    static EXPLAINED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let found = *FOUND.get_or_init(|| {
        ["redis-server", "redis-cli"].iter().all(|tool| {
            Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    });
    assert!(
        found || !EXPLAINED.swap(true, Ordering::SeqCst),
        "redis-server/redis-cli not installed (see the first failing test)"
    );
    assert!(found, "{MISSING}");
}

/// A temporary directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("autoshard-{label}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A shell that sends `signal` (`-9`, `-QUIT`) to process `pid` once this test binary
/// is gone, so that no server outlives a test run; kill it when the server stops.
pub fn watchdog(pid: u32, signal: &str) -> Child {
    once_gone(
        "kill \"$2\" \"$1\" 2>/dev/null",
        [pid.to_string().as_ref(), signal.as_ref()],
    )
}

/// A shell that runs `action` (a shell command, whose arguments `args` are `$1`, `$2`...)
/// once this test binary is gone.
pub fn once_gone<'a>(action: &str, args: impl IntoIterator<Item = &'a OsStr>) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while kill -0 \"$0\" 2>/dev/null; do sleep 1; done; {action}"
        ))
        .arg(std::process::id().to_string())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn a shell that waits for this binary's exit")
}

/// A free loopback port (the OS picks one; a race with another process is handled by
/// retrying the server start on a new port).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// Sends one inline command and reads the first reply line (test plumbing, not a client).
fn ask(port: u16, command: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(format!("{command}\r\n").as_bytes()).ok()?;
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// One `redis-server` process.
pub struct RedisServer {
    pub port: u16,
    /// The second port asked for with `extra_port` (the TLS port of `Standalone::start_tls`).
    pub extra_port: Option<u16>,
    dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    watchdog: Option<Child>,
}

impl RedisServer {
    /// Starts a server in `dir` with `extra` arguments, on a free port (retrying on a
    /// port race). `extra_port` asks for a second free port passed as `--<extra_port> N`.
    fn start(dir: &Path, extra: &[&str], extra_port: Option<&str>) -> RedisServer {
        require_tools();
        fs::create_dir_all(dir).expect("create server dir");
        let mut last_log = String::new();
        for _ in 0..10 {
            let port = free_port();
            let mut extra_port_number = None;
            let mut args = vec![
                "--port".to_owned(),
                port.to_string(),
                "--bind".to_owned(),
                "127.0.0.1".to_owned(),
                "--dir".to_owned(),
                dir.display().to_string(),
                "--logfile".to_owned(),
                "redis.log".to_owned(),
                "--save".to_owned(),
                String::new(),
            ];
            if let Some(flag) = extra_port {
                let mut second = free_port();
                while second == port {
                    second = free_port();
                }
                args.push(format!("--{flag}"));
                args.push(second.to_string());
                extra_port_number = Some(second);
            }
            args.extend(extra.iter().map(|s| (*s).to_owned()));
            if !args.iter().any(|a| a == "--appendonly") {
                args.extend(["--appendonly".to_owned(), "no".to_owned()]);
            }
            let mut server = RedisServer {
                port,
                extra_port: extra_port_number,
                dir: dir.to_owned(),
                args,
                child: None,
                watchdog: None,
            };
            if server.spawn() {
                return server;
            }
            last_log = fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
        }
        panic!("redis-server did not start in 10 attempts; last log:\n{last_log}");
    }

    /// Spawns the process and waits until it answers PING; `false` if it exited.
    fn spawn(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(&self.args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => panic!("{MISSING}"),
            Err(err) => panic!("cannot run redis-server: {err}"),
        };
        let watchdog = watchdog(child.id(), "-9");
        let deadline = Instant::now() + START_UP_BOUND;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                let mut watchdog = watchdog;
                let _ = watchdog.kill();
                let _ = watchdog.wait();
                return false;
            }
            // A server with a password answers too, asking for it.
            if ask(self.port, "PING")
                .is_some_and(|r| r.starts_with("+PONG") || r.starts_with("-NOAUTH"))
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = Some(child);
        self.watchdog = Some(watchdog);
        true
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }

    /// Starts the server again with the same port, directory and arguments.
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "redis-server did not restart on port {}",
            self.port
        );
    }

    /// Stops the process (SIGSTOP) without ending it: its connections stay open and it
    /// answers nothing, as a server that lags far behind would.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a process stopped by [`RedisServer::pause`] go on (SIGCONT). (A stopped
    /// process still ends on drop: `kill` sends SIGKILL.)
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("a running server");
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} failed");
    }

    /// Sends a command with `redis-cli` and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-c", "-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{MISSING} ({e})"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A standalone server with persistence off.
pub struct Standalone {
    pub server: RedisServer,
    _dir: TempDir,
}

impl Standalone {
    pub fn start() -> Standalone {
        Self::start_with(&[])
    }

    /// A server that persists every write (`appendfsync always`), to survive a kill.
    pub fn start_persistent() -> Standalone {
        Self::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
    }

    /// A server started with `extra` arguments (`["--requirepass", "s3cret"]`).
    pub fn start_with(extra: &[&str]) -> Standalone {
        let dir = TempDir::new("redis");
        let server = RedisServer::start(dir.path(), extra, None);
        Standalone { server, _dir: dir }
    }

    /// A server that also takes TLS connections, with the certificate and key given as
    /// PEM (clients need not present one); `tls_url` is its `rediss://` address. The plain
    /// port stays open for the readiness check.
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Standalone {
        let dir = TempDir::new("redis-tls");
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        fs::write(&cert, cert_pem).expect("write the certificate");
        fs::write(&key, key_pem).expect("write the key");
        let (cert, key) = (cert.display().to_string(), key.display().to_string());
        let extra = [
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &cert,
            "--tls-auth-clients",
            "no",
        ];
        let server = RedisServer::start(dir.path(), &extra, Some("tls-port"));
        Standalone { server, _dir: dir }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The `rediss://` address of a server from `start_tls`.
    pub fn tls_url(&self) -> String {
        let port = self.server.extra_port.expect("a server from start_tls");
        format!("rediss://127.0.0.1:{port}/")
    }
}

/// A standalone master with one replica that follows it.
pub struct Replicated {
    pub master: Standalone,
    pub replica: Standalone,
}

impl Replicated {
    /// Starts both, and waits until the replica's link is up.
    pub fn start() -> Replicated {
        let pair = Replicated {
            master: Standalone::start(),
            replica: Standalone::start(),
        };
        let port = pair.master.server.port.to_string();
        pair.replica.server.cli(&["replicaof", "127.0.0.1", &port]);
        let deadline = Instant::now() + START_UP_BOUND;
        while !pair
            .replica
            .server
            .cli(&["info", "replication"])
            .contains("master_link_status:up")
        {
            assert!(Instant::now() < deadline, "the replica did not sync");
            std::thread::sleep(Duration::from_millis(20));
        }
        pair
    }

    /// Waits until the replica has acknowledged everything the master wrote so far, then
    /// stops it ([`RedisServer::pause`]): the master still counts it as a connected
    /// replica, whose acknowledgements stay where they are.
    pub fn pause_replica(&self) {
        let deadline = Instant::now() + START_UP_BOUND;
        loop {
            let info = self.master.server.cli(&["info", "replication"]);
            let field = |name: &str| -> Option<u64> {
                info.split(['\n', ','])
                    .find_map(|part| part.trim().strip_prefix(name))
                    .and_then(|v| v.trim().parse().ok())
            };
            if let (Some(written), Some(acked)) = (field("master_repl_offset:"), field("offset="))
                && acked >= written
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the replica did not catch up:\n{info}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.replica.server.pause();
    }

    /// Lets the replica go on after [`Replicated::pause_replica`].
    pub fn resume_replica(&self) {
        self.replica.server.resume();
    }
}

/// A namespace no other case of the run uses.
pub fn namespace(case: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("t{}-{case}", NEXT.fetch_add(1, Ordering::Relaxed))
}
