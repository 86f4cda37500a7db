//! Test servers: a standalone `redis-server` or a 3-node Redis Cluster, started on free
//! loopback ports in a temporary directory and killed when the guard drops.
//!
//! Tests only ever talk to servers started here; they never use or flush any other one.
//! Each server also gets a watchdog shell process that kills it once the test binary is
//! gone, so no server outlives a test run even if the binary is killed before `Drop`.

#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::START_UP_BOUND;

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
    Command::new("sh")
        .arg("-c")
        .arg("while kill -0 \"$0\" 2>/dev/null; do sleep 1; done; kill \"$2\" \"$1\" 2>/dev/null")
        .arg(std::process::id().to_string())
        .arg(pid.to_string())
        .arg(signal)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn watchdog shell")
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
            if let (Some(written), Some(acked)) = (field("master_repl_offset:"), field("offset=")) {
                if acked >= written {
                    break;
                }
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

/// A Redis Cluster of 3 masters, with or without replicas.
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
    dir: TempDir,
}

impl Cluster {
    /// 3 masters, no replicas.
    pub fn start() -> Cluster {
        Self::start_with(0, 5000)
    }

    /// 3 masters with one replica each, and a node timeout of 2 s, so that a replica
    /// takes over a few seconds after its master died.
    pub fn start_with_replicas() -> Cluster {
        let cluster = Self::start_with(1, 2000);
        cluster.wait_for_replicas();
        cluster
    }

    /// A cluster-enabled server in `dir`, in no cluster yet.
    fn node(dir: &Path, node_timeout_ms: u32) -> RedisServer {
        let timeout = node_timeout_ms.to_string();
        // A replica takes over however long its link to the master was down (a test may
        // cut it on purpose, see `cut_replication`).
        RedisServer::start(
            dir,
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                &timeout,
                "--cluster-replica-validity-factor",
                "0",
            ],
            Some("cluster-port"),
        )
    }

    fn start_with(replicas: usize, node_timeout_ms: u32) -> Cluster {
        let dir = TempDir::new("redis-cluster");
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|i| Self::node(&dir.path().join(format!("node{i}")), node_timeout_ms))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("{MISSING} ({e})"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Cluster { nodes, dir };
        cluster.wait_until_ok(None);
        cluster
    }

    /// Adds an empty master (`redis-cli --cluster add-node`) and waits until every node
    /// knows it and reports `cluster_state:ok`; its index in `nodes`.
    pub fn add_master(&mut self) -> usize {
        let index = self.nodes.len();
        let node = Self::node(&self.dir.path().join(format!("node{index}")), 5000);
        let (new, existing) = (
            format!("127.0.0.1:{}", node.port),
            format!("127.0.0.1:{}", self.nodes[0].port),
        );
        self.nodes.push(node);
        redis_cli_cluster(&["add-node", &new, &existing]);
        let deadline = Instant::now() + START_UP_BOUND;
        while !self.nodes.iter().all(|n| {
            n.cli(&["cluster", "nodes"]).lines().count() == self.nodes.len()
                && n.cli(&["cluster", "info"]).contains("cluster_state:ok")
        }) {
            assert!(Instant::now() < deadline, "the new node did not join");
            std::thread::sleep(Duration::from_millis(50));
        }
        index
    }

    /// The cluster id of node `index`.
    pub fn node_id(&self, index: usize) -> String {
        self.nodes[index]
            .cli(&["cluster", "myid"])
            .trim()
            .to_owned()
    }

    /// Moves slots between the masters with `redis-cli --cluster rebalance` (5 keys per
    /// `MIGRATE`) until each holds its share: empty masters included, and node `drain`, if
    /// given, weighted 0 (all its slots move off it). Returns when every slot has moved.
    pub fn rebalance(&self, drain: Option<usize>) {
        let entry = format!("127.0.0.1:{}", self.nodes[0].port);
        let mut args = vec![
            "rebalance".to_owned(),
            entry,
            "--cluster-use-empty-masters".to_owned(),
            "--cluster-pipeline".to_owned(),
            "5".to_owned(),
            "--cluster-yes".to_owned(),
        ];
        if let Some(drain) = drain {
            args.push("--cluster-weight".to_owned());
            args.push(format!("{}=0", self.node_id(drain)));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        redis_cli_cluster(&args);
        self.wait_until_ok(None);
    }

    /// How many slots node `index` serves, as it sees itself.
    pub fn slots_of(&self, index: usize) -> usize {
        let me = self.nodes[index].cli(&["cluster", "nodes"]);
        me.lines()
            .find(|line| line.contains("myself"))
            .map_or(0, |line| {
                line.split_whitespace()
                    .skip(8)
                    .filter(|range| !range.starts_with('['))
                    .map(|range| match range.split_once('-') {
                        Some((lo, hi)) => {
                            hi.parse::<usize>().unwrap_or(0) + 1 - lo.parse::<usize>().unwrap_or(0)
                        }
                        None => 1,
                    })
                    .sum()
            })
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Waits until every node but `except` reports `cluster_state:ok`.
    pub fn wait_until_ok(&self, except: Option<usize>) {
        let deadline = Instant::now() + START_UP_BOUND;
        for (i, node) in self.nodes.iter().enumerate() {
            if Some(i) == except {
                continue;
            }
            while !node.cli(&["cluster", "info"]).contains("cluster_state:ok") {
                assert!(
                    Instant::now() < deadline,
                    "cluster did not reach cluster_state:ok"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Waits until every replica's link to its master is up.
    pub fn wait_for_replicas(&self) {
        let deadline = Instant::now() + START_UP_BOUND;
        for node in &self.nodes {
            loop {
                let info = node.cli(&["info", "replication"]);
                if info.contains("role:master") || info.contains("master_link_status:up") {
                    break;
                }
                assert!(Instant::now() < deadline, "a replica did not sync:\n{info}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The index in `nodes` of the master that serves the Redis key `key`.
    pub fn master_of(&self, key: &str) -> usize {
        self.serving(key, 0)
            .unwrap_or_else(|| panic!("no master serves `{key}`"))
    }

    /// The index of the live master that serves `key` as node `witness` sees it.
    fn serving(&self, key: &str, witness: usize) -> Option<usize> {
        let node = &self.nodes[witness];
        let slot: u16 = node.cli(&["cluster", "keyslot", key]).trim().parse().ok()?;
        node.cli(&["cluster", "nodes"]).lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let live_master =
                fields.len() > 8 && fields[2].contains("master") && !fields[2].contains("fail");
            let serves = live_master
                && fields[8..].iter().any(|range| {
                    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                    matches!(
                        (lo.parse::<u16>(), hi.parse::<u16>()),
                        (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot)
                    )
                });
            if !serves {
                return None;
            }
            let port: u16 = fields[1].split(['@', ':']).nth(1)?.parse().ok()?;
            self.nodes.iter().position(|n| n.port == port)
        })
    }

    /// The index of a replica of node `master`.
    pub fn replica_of(&self, master: usize) -> usize {
        let port = format!("master_port:{}", self.nodes[master].port);
        self.nodes
            .iter()
            .position(|node| {
                let info = node.cli(&["info", "replication"]);
                info.contains("role:slave") && info.lines().any(|l| l.trim() == port)
            })
            .unwrap_or_else(|| panic!("node {master} has no replica"))
    }

    /// Stops replication from node `master` to its replica `replica`, while both keep
    /// running: the replica's link is dropped and it cannot authenticate again (a wrong
    /// `masterauth`), so writes the master acknowledges from now on never reach it.
    pub fn cut_replication(&self, master: usize, replica: usize) {
        self.nodes[replica].cli(&["config", "set", "masterauth", "not-the-password"]);
        self.nodes[master].cli(&["client", "kill", "type", "replica"]);
        let deadline = Instant::now() + START_UP_BOUND;
        while !self.nodes[replica]
            .cli(&["info", "replication"])
            .contains("master_link_status:down")
        {
            assert!(Instant::now() < deadline, "the replica's link stayed up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Lets node `replica` authenticate to its master again (after `cut_replication`).
    pub fn restore_replication(&self, replica: usize) {
        self.nodes[replica].cli(&["config", "set", "masterauth", ""]);
    }

    /// Waits until a node other than `dead` (a master that was killed) serves `key`, and
    /// the other nodes report `cluster_state:ok`.
    pub fn wait_for_failover(&self, key: &str, dead: usize) {
        let witness = usize::from(dead == 0);
        let deadline = Instant::now() + START_UP_BOUND * 4;
        while self
            .serving(key, witness)
            .is_none_or(|serving| serving == dead)
        {
            assert!(
                Instant::now() < deadline,
                "no replica took over `{key}` from node {dead}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        self.wait_until_ok(Some(dead));
    }
}

/// Runs `redis-cli --cluster <args>`, failing the test when it fails.
fn redis_cli_cluster(args: &[&str]) {
    let out = Command::new("redis-cli")
        .arg("--cluster")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{MISSING} ({e})"));
    assert!(
        out.status.success(),
        "redis-cli --cluster {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A namespace no other case of the run uses.
pub fn namespace(case: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("t{}-{case}", NEXT.fetch_add(1, Ordering::Relaxed))
}
