//! A test PostgreSQL server: a fresh cluster in a temporary directory, run by `postgres`
//! on a free loopback port, shut down (and its directory removed) when the guard drops.
//! Tests never use any other server. The cluster is a copy of one `initdb` made once per
//! test binary (a copy costs half the processor time of an `initdb`), removed when the
//! binary exits.
//!
//! PostgreSQL refuses to run as root: when the tests run as root, `initdb` and the
//! server run as the `postgres` user (which the Debian package creates). The binaries
//! are found in `$AUTOSHARD_PG_BIN`, else with `pg_config --bindir`, else in the newest
//! `/usr/lib/postgresql/<version>/bin`, else on `PATH`; `./scripts/test` installs
//! PostgreSQL when none is there. A watchdog shell shuts the server down once the test
//! binary is gone, so no server outlives a test run.

#![allow(dead_code)] // Each test binary uses a different part of this module.

use crate::redis::{TempDir, once_gone, watchdog};
use autoshard::store::DocumentStore;
use autoshard::store::postgres::{PostgresOptions, PostgresStore};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MISSING: &str = "PostgreSQL's initdb/postgres not found: the PostgreSQL store tests start \
     their own server. Run the tests with `./scripts/test`, which installs it (Debian/Ubuntu), \
     install `postgresql` yourself, or point AUTOSHARD_PG_BIN at its bin directory";

/// The directory of `initdb` and `postgres`.
fn bin_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let found = DIR.get_or_init(|| {
        let has = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
        if let Some(dir) = std::env::var_os("AUTOSHARD_PG_BIN").map(PathBuf::from) {
            return has(&dir).then_some(dir);
        }
        let from_pg_config = Command::new("pg_config")
            .arg("--bindir")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
        if let Some(dir) = from_pg_config.filter(|d| has(d)) {
            return Some(dir);
        }
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let version = e.file_name().to_str()?.parse().ok()?;
                Some((version, e.path().join("bin")))
            })
            .filter(|(_, dir)| has(dir))
            .collect();
        versions.sort();
        if let Some((_, dir)) = versions.pop() {
            return Some(dir);
        }
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .find(|d| has(d))
    });
    found.clone().expect(MISSING)
}

/// The uid and gid to run PostgreSQL as: the `postgres` user when this process is root.
fn run_as() -> Option<(u32, u32)> {
    let id = |args: &[&str]| -> Option<u32> {
        let out = Command::new("id").args(args).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id(&["-u"])? != 0 {
        return None;
    }
    let uid = id(&["-u", "postgres"])
        .expect("running as root, and no `postgres` user to run PostgreSQL as");
    let gid = id(&["-g", "postgres"]).expect("the `postgres` user's group");
    Some((uid, gid))
}

fn command(program: &Path, user: Option<(u32, u32)>) -> Command {
    let mut command = Command::new(program);
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    command
}

/// Copies a fresh cluster into `data` (which must not exist), from the template this test
/// binary made with `initdb` on its first call.
fn copy_template(bin: &Path, user: Option<(u32, u32)>, data: &Path) {
    static TEMPLATE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let template = TEMPLATE.get_or_init(|| {
        // Not a `TempDir`: a static is never dropped. A shell removes it once this
        // binary is gone, as the watchdogs stop servers.
        let dir = std::env::temp_dir().join(format!(
            "autoshard-postgres-template-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the template's directory");
        #[expect(
            clippy::zombie_processes,
            reason = "the shell outlives this binary, whose exit it waits for"
        )]
        let _cleanup = once_gone("rm -rf \"$1\"", [dir.as_os_str()]);
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown test dir");
        }
        let template = dir.join("data");
        let mut initdb = command(&bin.join("initdb"), user);
        initdb.args([
            "--auth=trust",
            "--username=postgres",
            "--encoding=UTF8",
            "--no-sync",
            "-D",
        ]);
        run(initdb.arg(&template), "initdb");
        template
    });
    // As the server's user, so that the copy is its own (`-a` keeps the modes PostgreSQL
    // checks).
    let mut cp = command(Path::new("cp"), user);
    run(
        cp.arg("-a").arg(template).arg(data),
        "cp (the template cluster)",
    );
}

/// Starts `postgres` on the cluster in `dir` (its `data`), logging to `dir`'s
/// `server.log`, with a watchdog that shuts it down once this binary is gone.
fn spawn(
    bin: &Path,
    user: Option<(u32, u32)>,
    dir: &TempDir,
    port: u16,
    settings: &[&str],
) -> (Child, Child) {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("server.log"))
        .expect("log file");
    let child = command(&bin.join("postgres"), user)
        .arg("-D")
        .arg(dir.path().join("data"))
        .args(["-p", &port.to_string(), "-k"])
        .arg(dir.path())
        .args(settings.iter().flat_map(|setting| ["-c", setting]))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log file"))
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("spawn postgres");
    let watchdog = watchdog(child.id(), "-QUIT");
    (child, watchdog)
}

/// Runs `command` to its end; panics with its error output if it fails.
fn run(command: &mut Command, what: &str) {
    let out = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A running test server.
pub struct Postgres {
    port: u16,
    child: Child,
    watchdog: Child,
    /// The server's `-c` settings, for a restart.
    settings: Vec<&'static str>,
    /// Removed after `Drop::drop` stopped the server.
    dir: TempDir,
}

impl Postgres {
    /// Makes a fresh cluster (a copy of this binary's `initdb`) and starts it on a free
    /// port.
    pub fn start() -> Postgres {
        Self::start_with(None)
    }

    /// Like [`Postgres::start`], but the server takes TCP connections over TLS only
    /// (`hostssl` in `pg_hba.conf`, plain TCP rejected), with this certificate and key
    /// (PEM).
    pub fn start_tls_only(cert_pem: &str, key_pem: &str) -> Postgres {
        Self::start_with(Some((cert_pem, key_pem)))
    }

    fn start_with(tls: Option<(&str, &str)>) -> Postgres {
        let bin = bin_dir();
        let user = run_as();
        let dir = TempDir::new("postgres");
        let data = dir.path().join("data");
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).expect("chown test dir");
        }
        copy_template(&bin, user, &data);
        let mut settings = vec![
            "listen_addresses=127.0.0.1",
            "fsync=off",
            "max_connections=200",
        ];
        if let Some((cert, key)) = tls {
            use std::os::unix::fs::PermissionsExt;
            for (name, pem) in [("server.crt", cert), ("server.key", key)] {
                let path = data.join(name);
                std::fs::write(&path, pem).expect("write the TLS files");
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .expect("chmod the TLS files");
                if let Some((uid, gid)) = user {
                    std::os::unix::fs::chown(&path, Some(uid), Some(gid)).expect("chown");
                }
            }
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\n\
                 hostssl all all 127.0.0.1/32 trust\n\
                 hostnossl all all 127.0.0.1/32 reject\n",
            )
            .expect("write pg_hba.conf");
            settings.push("ssl=on");
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind 127.0.0.1:0")
            .port();
        let (child, watchdog) = spawn(&bin, user, &dir, port, &settings);
        let mut server = Postgres {
            port,
            child,
            watchdog,
            settings,
            dir,
        };
        if !server.ready(&bin) {
            let log = std::fs::read_to_string(server.dir.path().join("server.log"));
            panic!("postgres did not start; log:\n{}", log.unwrap_or_default());
        }
        server
    }

    /// Kills the server as a crash would (an immediate shutdown: every backend stops at
    /// once, without a checkpoint, and connections break mid-call), leaving its data for
    /// [`Postgres::restart`].
    pub fn kill(&mut self) {
        self.shutdown();
    }

    /// Starts the killed server again on the same port and data, which it recovers as
    /// after a crash.
    pub fn restart(&mut self) {
        let bin = bin_dir();
        let (child, watchdog) = spawn(&bin, run_as(), &self.dir, self.port, &self.settings);
        self.child = child;
        self.watchdog = watchdog;
        if !self.ready(&bin) {
            let log = std::fs::read_to_string(self.dir.path().join("server.log"));
            panic!(
                "postgres did not restart; log:\n{}",
                log.unwrap_or_default()
            );
        }
    }

    /// Waits until the server accepts connections; `false` if it exited.
    fn ready(&mut self, bin: &Path) -> bool {
        let deadline = Instant::now() + crate::START_UP_BOUND;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            let ok = Command::new(bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of its `postgres` database as the `postgres` superuser (trust auth).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// A store on this server whose documents live in a schema of their own, named
    /// after `case` (letters, digits and `_`; anything else becomes `_`).
    pub async fn store(&self, case: &str) -> PostgresStore {
        let schema: String = case
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let options = PostgresOptions::default().schema(format!("t_{schema}"));
        PostgresStore::connect_with(&self.url(), options)
            .await
            .expect("connect to the test PostgreSQL server")
    }

    /// [`Postgres::store`] behind `Arc<dyn DocumentStore>`, as the suites that run on
    /// every store take it.
    pub async fn shared_store(&self, case: &str) -> Arc<dyn DocumentStore> {
        Arc::new(self.store(case).await)
    }

    /// Shuts the server down (immediate shutdown) and waits for it.
    fn shutdown(&mut self) {
        let _ = Command::new("kill")
            .args(["-QUIT", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.shutdown();
    }
}
