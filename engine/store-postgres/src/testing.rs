//! A throwaway PostgreSQL cluster for tests (feature `testing`).
//!
//! ```no_run
//! # async fn demo() {
//! use subs_store_postgres::testing::TestCluster;
//! use subs_store_postgres::{PgOptions, PgStore};
//!
//! // None (after one line on stderr) where PostgreSQL is not installed.
//! let Some(cluster) = TestCluster::shared() else { return };
//! let store = PgStore::open(&cluster.fresh_database(), PgOptions::default()).await.unwrap();
//! # }
//! ```
//!
//! [`TestCluster::start`] makes a cluster in a new temporary directory
//! (`initdb -A trust`: no passwords, on 127.0.0.1 only), on a free port,
//! with its Unix socket in that directory and `fsync` on, as production
//! would have it. A process running as root runs PostgreSQL (which
//! refuses root) as the `postgres` user and gives it the directory.
//! [`TestCluster::fresh_database`] makes a database of its own for each
//! test, so tests running in parallel never meet.
//!
//! # Absent PostgreSQL
//!
//! Where no PostgreSQL server binaries are found (`$SUBS_PG_BINDIR`, then
//! `pg_config --bindir`, then the newest `/usr/lib/postgresql/*/bin`),
//! `start` prints one line on stderr saying the tests are skipped and how
//! to run them, and returns `None`; with `SUBS_REQUIRE_POSTGRES=1` (CI
//! sets it) it panics with that line instead. PostgreSQL found but failing
//! to start is always a panic, with the server's log.
//!
//! # Stopping, however the test process ends
//!
//! A test binary's statics are never dropped, so the shared cluster
//! ([`TestCluster::shared`]) could outlive its tests. Each cluster has a
//! watchdog: a small `sh` process, in a process group of its own (Ctrl-C
//! of the tests does not reach it), blocked reading a pipe whose only
//! writer is the test process. When the test process ends — returning,
//! panicking, killed by a signal, `kill -9` — the kernel closes that pipe,
//! and the watchdog stops the cluster (`pg_ctl stop -m immediate`) and
//! removes its directory. Dropping a `TestCluster` closes the pipe itself
//! and waits for the watchdog.

use std::io::Write as _;
use std::net::TcpListener;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

/// Set to `1` to make tests fail, rather than skip, where PostgreSQL is
/// not installed.
pub const REQUIRE_ENV: &str = "SUBS_REQUIRE_POSTGRES";

/// Set to a directory holding `initdb`, `pg_ctl` and `createdb` to use
/// those.
pub const BINDIR_ENV: &str = "SUBS_PG_BINDIR";

/// A PostgreSQL cluster that lives as long as this value (or, for
/// [`shared`](Self::shared), as the process); see the [module docs](self).
#[derive(Debug)]
pub struct TestCluster {
    dir: PathBuf,
    bindir: PathBuf,
    port: u16,
    /// The watchdog and the pipe it waits on.
    watchdog: Mutex<Option<(Child, ChildStdin)>>,
    databases: AtomicU64,
    /// Who runs the server's programs.
    run_as: Option<RunAs>,
}

/// The user PostgreSQL runs as, when this process is root.
#[derive(Debug, Clone, Copy)]
struct RunAs {
    uid: u32,
    gid: u32,
}

impl TestCluster {
    /// The cluster every test of this process shares, started by the
    /// first call; `None` where PostgreSQL is not installed (see the
    /// [module docs](self)).
    pub fn shared() -> Option<&'static TestCluster> {
        static SHARED: OnceLock<Option<TestCluster>> = OnceLock::new();
        SHARED.get_or_init(TestCluster::start).as_ref()
    }

    /// Starts a new cluster; `None` where PostgreSQL is not installed.
    ///
    /// # Panics
    /// Where PostgreSQL is not installed and `SUBS_REQUIRE_POSTGRES=1`,
    /// or where it is but the cluster does not start.
    pub fn start() -> Option<TestCluster> {
        let bindir = match find_bindir() {
            Some(bindir) => bindir,
            None => return skip("no PostgreSQL server binaries (initdb, pg_ctl) were found"),
        };
        let run_as = if is_root() {
            match postgres_user() {
                Some(user) => Some(user),
                None => return skip("this process runs as root and there is no `postgres` user to run PostgreSQL as"),
            }
        } else {
            None
        };
        Some(Self::start_in(bindir, run_as))
    }

    fn start_in(bindir: PathBuf, run_as: Option<RunAs>) -> TestCluster {
        static CLUSTERS: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "subs-pg-{}-{}",
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        if let Some(user) = run_as {
            std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid))
                .unwrap_or_else(|e| panic!("cannot give {} to the postgres user: {e}", dir.display()));
        }
        let data = dir.join("data");
        let pg_ctl = bindir.join("pg_ctl");

        // The watchdog first, so whatever happens next, the directory goes.
        let mut watchdog = Command::new("sh");
        watchdog
            .args(["-c", r#"read line; "$0" -D "$1" stop -m immediate -w >/dev/null 2>&1; rm -rf "$2""#])
            .arg(&pg_ctl)
            .arg(&data)
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let mut watchdog = as_user(watchdog, run_as, &dir).spawn().expect("the watchdog starts (sh)");
        let pipe = watchdog.stdin.take().expect("the watchdog's stdin");
        let mut cluster = TestCluster {
            dir: dir.clone(),
            bindir: bindir.clone(),
            port: 0,
            watchdog: Mutex::new(Some((watchdog, pipe))),
            databases: AtomicU64::new(0),
            run_as,
        };

        let mut initdb = Command::new(bindir.join("initdb"));
        initdb.arg("-D").arg(&data).args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-locale", "-N"]);
        let out = as_user(initdb, run_as, &dir).output().expect("initdb runs");
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );

        let log = dir.join("postgresql.log");
        for attempt in 0..5 {
            let port = free_port();
            let settings = format!(
                "\n# subs-store-postgres testing, attempt {attempt}\nlisten_addresses = '127.0.0.1'\nport = {port}\n\
                 unix_socket_directories = '{}'\nmax_connections = 500\nfsync = on\nsynchronous_commit = on\n",
                dir.display()
            );
            std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("postgresql.conf"))
                .and_then(|mut conf| conf.write_all(settings.as_bytes()))
                .expect("the cluster's postgresql.conf takes settings");
            let mut start = Command::new(&pg_ctl);
            start.arg("-D").arg(&data).arg("-l").arg(&log).args(["-w", "-t", "60", "start"]);
            let out = as_user(start, run_as, &dir).stdout(Stdio::null()).stderr(Stdio::null()).status();
            if out.is_ok_and(|status| status.success()) {
                cluster.port = port;
                return cluster;
            }
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if !text.contains("could not bind") && !text.contains("in use") {
                panic!("PostgreSQL did not start ({}):\n{text}", data.display());
            }
        }
        panic!("PostgreSQL did not start: no free port in 5 tries; see {}", log.display());
    }

    /// The port the cluster listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id (its postmaster), from its data directory;
    /// `None` if it cannot be read.
    pub fn postmaster_pid(&self) -> Option<u32> {
        let pid = std::fs::read_to_string(self.dir.join("data").join("postmaster.pid")).ok()?;
        pid.lines().next()?.trim().parse().ok()
    }

    /// Stops the server, as `pg_ctl stop -m <mode>` does (`fast`: clients
    /// are disconnected, the server shuts down cleanly; `immediate`: it
    /// stops at once, as in a crash, and recovers from its WAL at the
    /// next start). Waits until it has stopped.
    ///
    /// # Panics
    /// If `pg_ctl` fails.
    pub fn stop(&self, mode: StopMode) {
        self.pg_ctl(&["-w", "-t", "60", "stop", "-m", mode.name()]);
    }

    /// Starts the server again after [`stop`](Self::stop), on the same
    /// port and data; waits until it takes connections.
    ///
    /// # Panics
    /// If `pg_ctl` fails.
    pub fn start_again(&self) {
        let log = self.dir.join("postgresql.log");
        let log = log.to_str().expect("a UTF-8 path").to_owned();
        self.pg_ctl(&["-l", &log, "-w", "-t", "60", "start"]);
    }

    /// [`stop`](Self::stop) then [`start_again`](Self::start_again), as an
    /// operator's restart.
    pub fn restart(&self, mode: StopMode) {
        self.stop(mode);
        self.start_again();
    }

    fn pg_ctl(&self, args: &[&str]) {
        let mut command = Command::new(self.bindir.join("pg_ctl"));
        command.arg("-D").arg(self.dir.join("data")).args(args);
        let out = as_user(command, self.run_as, &self.dir).stdin(Stdio::null()).output().expect("pg_ctl runs");
        assert!(
            out.status.success(),
            "pg_ctl {args:?} failed: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.join("postgresql.log")).unwrap_or_default()
        );
    }

    /// The URL of the cluster's `postgres` database, as its superuser.
    pub fn url(&self) -> String {
        self.database_url("postgres")
    }

    /// Creates a new, empty database and returns its URL.
    ///
    /// # Panics
    /// If `createdb` fails.
    pub fn fresh_database(&self) -> String {
        let name = format!("subs_test_{}", self.databases.fetch_add(1, Ordering::Relaxed));
        let out = Command::new(self.bindir.join("createdb"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres", &name])
            .current_dir(&self.dir)
            .output()
            .expect("createdb runs");
        assert!(out.status.success(), "createdb {name} failed: {}", String::from_utf8_lossy(&out.stderr));
        self.database_url(&name)
    }

    fn database_url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }
}

/// How [`TestCluster::stop`] stops the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Disconnects every client, then shuts down cleanly.
    Fast,
    /// Stops at once, as a crash of the server would; the next start
    /// recovers from the WAL.
    Immediate,
}

impl StopMode {
    fn name(self) -> &'static str {
        match self {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        }
    }
}

/// Runs `sql` (one or more statements) on a connection of its own to
/// `url`, and returns the rows the statements return, each value as text
/// (`None` for NULL): for tests that look under the store, or break it
/// (terminate backends, add triggers, change roles). Casting non-text
/// columns to `text` in the query keeps the values readable.
///
/// # Errors
/// What PostgreSQL answered, as text.
pub async fn sql(url: &str, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    use sqlx::{Connection as _, Executor as _, Row as _};
    let mut conn = sqlx::PgConnection::connect(url).await.map_err(|e| e.to_string())?;
    let rows = conn.fetch_all(sqlx::raw_sql(sql)).await.map_err(|e| e.to_string())?;
    let _ = conn.close().await;
    rows.iter()
        .map(|row| {
            (0..row.len()).map(|at| row.try_get_unchecked::<Option<String>, _>(at).map_err(|e| e.to_string())).collect()
        })
        .collect()
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let watchdog = self.watchdog.get_mut().unwrap_or_else(PoisonError::into_inner).take();
        if let Some((mut watchdog, pipe)) = watchdog {
            // Its end of file: the watchdog stops the cluster and removes
            // the directory.
            drop(pipe);
            let _ = watchdog.wait();
        }
    }
}

/// Returns `None` after saying, once, why the PostgreSQL tests are
/// skipped; panics instead when they are required.
fn skip(why: &str) -> Option<TestCluster> {
    if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
        panic!(
            "the PostgreSQL tests must run ({REQUIRE_ENV}=1) but cannot: {why}. Install PostgreSQL 15 \
             (`apt-get install postgresql`)."
        );
    }
    let line = format!(
        "PostgreSQL tests skipped: {why}. Install PostgreSQL 15 (`apt-get install postgresql`) to run them; \
         {REQUIRE_ENV}=1 makes this a failure."
    );
    // Straight to stderr, past the test harness's capture, so it shows.
    let _ = writeln!(std::io::stderr(), "{line}");
    None
}

/// `command` run as `user` (when root) from `dir`: PostgreSQL may not be
/// able to read the directory the tests run in.
fn as_user(mut command: Command, user: Option<RunAs>, dir: &Path) -> Command {
    command.current_dir(dir);
    if let Some(user) = user {
        command.uid(user.uid).gid(user.gid);
    }
    command
}

fn has_server(dir: &Path) -> bool {
    ["initdb", "pg_ctl", "createdb"].iter().all(|tool| dir.join(tool).is_file())
}

fn find_bindir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(BINDIR_ENV) {
        return Some(PathBuf::from(dir)).filter(|dir| has_server(dir));
    }
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    if let Some(dir) = from_pg_config.filter(|dir| has_server(dir)) {
        return Some(dir);
    }
    let versions = std::fs::read_dir("/usr/lib/postgresql").ok()?;
    versions
        .flatten()
        .filter_map(|entry| Some((entry.file_name().to_str()?.parse::<u32>().ok()?, entry.path().join("bin"))))
        .filter(|(_, dir)| has_server(dir))
        .max_by_key(|(version, _)| *version)
        .map(|(_, dir)| dir)
}

fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(uid) = status.lines().find_map(|line| line.strip_prefix("Uid:")) {
        return uid.split_whitespace().next() == Some("0");
    }
    Command::new("id").arg("-u").output().is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// The `postgres` user's ids, from `/etc/passwd`.
fn postgres_user() -> Option<RunAs> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != "postgres" {
            return None;
        }
        let mut ids = fields.skip(1);
        Some(RunAs { uid: ids.next()?.parse().ok()?, gid: ids.next()?.parse().ok()? })
    })
}

/// A port free a moment ago (another process may take it before the
/// cluster does; starting then retries with another).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|listener| listener.local_addr()).map(|addr| addr.port()).unwrap_or(0)
}
