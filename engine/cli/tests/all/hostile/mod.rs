//! Attacks on a real `subs serve` by strangers without a key and by
//! tenants with one, each run beside a neighbour tenant whose tool turns
//! and `/healthz` must stay answered, while the server's resident memory
//! is watched (and the server killed, failing the test, past a ceiling).
//!
//! [`Arena`] starts the server with three tenants of its config file
//! (`hostile`, `hostile2`, `neighbour`) and an operator key, uploads the
//! neighbour's `tools` agent, and [`Arena::neighbour`] runs its turns in
//! a loop from `127.0.0.1`. Attackers connect from other loopback
//! addresses ([`connect_from`]), so that bounds per client address tell
//! them apart from the neighbour, as they would tell two hosts apart.
//! Each attack is a module of its own.

mod disk;
mod edge;
mod fanout;
mod history;
mod labels;
mod money;
mod reads;
mod replay;
mod tokens;
mod versions;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::{TcpSocket, TcpStream};

use crate::{ADD, Server, TOOLS, http};

/// The hostile tenant and its key.
pub const HOSTILE: (&str, &str) = ("hostile", "subs_hostile_key_0123456789abcdef");
/// A second hostile tenant, for attacks that need more than one.
pub const HOSTILE2: (&str, &str) = ("hostile2", "subs_hostile2_key_0123456789abcde");
/// The neighbour, whose turns must go on.
pub const NEIGHBOUR: (&str, &str) = ("neighbour", "subs_neighbour_key_0123456789abcd");
/// The operator key (the admin API is on).
pub const OPERATOR: &str = "subs_admin_hostile_tests_0123456789";

/// Resident memory past which the watchdog kills the server: an attack
/// that got through must fail its test, not take the machine.
const CEILING: u64 = 3 << 30;

/// A running server, its data directory and its watchdog.
pub struct Arena {
    /// The server.
    pub server: Server,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// The server's address.
    pub addr: SocketAddr,
    /// The data directory.
    pub data: PathBuf,
    /// The config file the server was started with.
    pub config: PathBuf,
    _dir: tempfile::TempDir,
    watching: Arc<AtomicBool>,
}

impl Arena {
    /// `subs serve` with the three tenants' keys, the operator key and
    /// `extra` (TOML, appended to the config file), with the neighbour's
    /// `tools` agent uploaded.
    pub async fn start(extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("subs.toml");
        let mut text = format!("[admin]\nkey = \"{OPERATOR}\"\n");
        for (tenant, key) in [HOSTILE, HOSTILE2, NEIGHBOUR] {
            text.push_str(&format!("[[keys]]\ntenant = \"{tenant}\"\nkey = \"{key}\"\n"));
        }
        text.push_str(extra);
        std::fs::write(&config, text).expect("the config file is written");
        let data = dir.path().join("data");
        let server = Server::start_with(
            &["--config", config.to_str().unwrap(), "--data", data.to_str().unwrap()],
            "127.0.0.1:0",
        );
        let url = server.url.clone();
        let addr = server.addr.parse().expect("a socket address");
        let watching = Arc::new(AtomicBool::new(true));
        watchdog(server.process.child.id(), watching.clone());
        let arena = Self { server, url, addr, data, config, _dir: dir, watching };
        let tools = std::fs::read(TOOLS).expect("the tools component is built");
        let (status, body) = arena.upload(NEIGHBOUR.1, "tools", tools).await;
        assert_eq!(status, 201, "the neighbour's agent: {body}");
        arena
    }

    /// Kills the server at once (SIGKILL, as a crash would), and starts it
    /// again on the same config file and data directory, with a watchdog
    /// of its own, off the runtime (which may serve the test's workers
    /// meanwhile). `url` and `addr` change (start the neighbour after).
    pub async fn kill_and_restart(&mut self) {
        self.watching.store(false, Ordering::SeqCst);
        let _ = self.server.process.child.kill();
        let _ = self.server.process.child.wait();
        let (config, data) = (self.config.clone(), self.data.clone());
        self.server = tokio::task::spawn_blocking(move || {
            let args = ["--config", config.to_str().unwrap(), "--data", data.to_str().unwrap()];
            Server::start_with(&args, "127.0.0.1:0")
        })
        .await
        .expect("the server starts again");
        self.url = self.server.url.clone();
        self.addr = self.server.addr.parse().expect("a socket address");
        self.watching = Arc::new(AtomicBool::new(true));
        watchdog(self.pid(), self.watching.clone());
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.server.process.child.id()
    }

    /// Stops the server (SIGTERM, as a service manager does) and starts it
    /// again on the same config file and data directory, watched as
    /// before; `url` and `addr` change to the new server's.
    pub fn restart(&mut self) {
        self.watching.store(false, Ordering::SeqCst);
        self.server.process.terminate();
        self.server.process.wait(crate::PATIENCE);
        let (config, data) = (self.config.to_str().expect("UTF-8"), self.data.to_str().expect("UTF-8"));
        self.server = Server::start_with(&["--config", config, "--data", data], "127.0.0.1:0");
        self.url = self.server.url.clone();
        self.addr = self.server.addr.parse().expect("a socket address");
        self.watching = Arc::new(AtomicBool::new(true));
        watchdog(self.pid(), self.watching.clone());
    }

    /// Stops the server (SIGTERM), runs `work` on its data directory
    /// (whose store is free then: seed it, look into it), and starts the
    /// server again as [`restart`](Self::restart) does.
    pub fn while_stopped<T>(&mut self, work: impl FnOnce(&std::path::Path) -> T) -> T {
        self.watching.store(false, Ordering::SeqCst);
        self.server.process.terminate();
        self.server.process.wait(crate::PATIENCE);
        let out = work(&self.data);
        let (config, data) = (self.config.to_str().expect("UTF-8"), self.data.to_str().expect("UTF-8"));
        self.server = Server::start_with(&["--config", config, "--data", data], "127.0.0.1:0");
        self.url = self.server.url.clone();
        self.addr = self.server.addr.parse().expect("a socket address");
        self.watching = Arc::new(AtomicBool::new(true));
        watchdog(self.pid(), self.watching.clone());
        out
    }

    /// The server's CPU time so far (user and system).
    pub fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).expect("the server's stat");
        // After the command's `(name)`: state is field 3, utime 14, stime 15.
        let fields: Vec<&str> = stat.rsplit_once(')').expect("a stat line").1.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
        // Linux counts in USER_HZ, 100 a second everywhere it runs.
        Duration::from_millis(ticks * 10)
    }

    /// The server's highest resident memory so far, in bytes.
    pub fn peak_rss(&self) -> u64 {
        status_kib(self.pid(), "VmHWM:") << 10
    }

    /// The server's resident memory now, in bytes.
    pub fn rss(&self) -> u64 {
        status_kib(self.pid(), "VmRSS:") << 10
    }

    /// Panics, naming the figure, when the server's peak resident memory
    /// passed `limit` bytes (or the watchdog killed it).
    pub fn assert_peak_below(&self, limit: u64) {
        let peak = self.peak_rss();
        assert!(peak < limit, "the server peaked at {} MiB, more than {} MiB", peak >> 20, limit >> 20);
    }

    /// Starts the neighbour's tool turns and `/healthz` probes.
    pub fn neighbour(&self) -> Neighbour {
        Neighbour::start(&self.url)
    }

    /// `method path` with `key` (none: no `Authorization`) and a JSON body.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = http().request(method, format!("{}{path}", self.url));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_string());
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// Uploads `bytes` as `key`'s agent `agent`.
    pub async fn upload(&self, key: &str, agent: &str, bytes: Vec<u8>) -> (u16, Value) {
        let response = http()
            .put(format!("{}/v1/agents/{agent}", self.url))
            .bearer_auth(key)
            .header("content-type", "application/wasm")
            .body(bytes)
            .send()
            .await
            .expect("the server answers");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// Registers the HTTP worker at `url` as `key`'s agent `agent`.
    pub async fn put_worker(&self, key: &str, agent: &str, url: &str) -> (u16, Value) {
        self.call(reqwest::Method::PUT, &format!("/v1/agents/{agent}"), Some(key), Some(json!({"url": url}))).await
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        self.watching.store(false, Ordering::SeqCst);
    }
}

/// Kills `pid` when its resident memory passes [`CEILING`]; stops when
/// `watching` turns false or the process is gone.
fn watchdog(pid: u32, watching: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        while watching.load(Ordering::SeqCst) {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return };
            if kib_of(&status, "VmRSS:").is_some_and(|kib| kib << 10 > CEILING) {
                eprintln!("the server passed {} MiB: killed", CEILING >> 20);
                let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
                return;
            }
            // Sampling /proc: no event tells of a process's memory
            // growing.
            subs_tests::wait::pace_blocking(Duration::from_millis(20));
        }
    });
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("the server is gone (killed by the watchdog?): {e}"));
    kib_of(&status, field).unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

fn kib_of(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Serves an HTTP worker on a free loopback port that answers each
/// decision request (JSON) with `decide(request)` (a JSON decision); its
/// URL, to register with [`Arena::put_worker`]. A hostile agent of any
/// shape, without a component to build.
pub async fn json_worker<F, Fut>(decide: F) -> String
where
    F: Fn(Value) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Value> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let addr = listener.local_addr().expect("a bound address");
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::post(move |axum::Json(request): axum::Json<Value>| {
                let decide = decide.clone();
                async move { axum::Json(decide(request).await) }
            }),
        )
        // Requests as large as the engine sends (axum takes 2 MiB unless
        // told).
        .layer(axum::extract::DefaultBodyLimit::max(256 << 20));
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/")
}

/// Sends `text` as `key`'s user message to session `session` of agent
/// `agent`, streamed, and reads the turn to its end: the answer's status,
/// the last event's name and its data.
pub async fn streamed_turn(url: &str, key: &str, session: &str, agent: &str, text: &str) -> (u16, String, Value) {
    let body = json!({"type": "client.message", "agent_id": agent, "stream": true,
        "message": {"role": "user", "content": text}});
    let response = http()
        .post(format!("{url}/v1/sessions/{session}/input"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    let (mut event, mut data) = (String::new(), Value::Null);
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("event: ") {
            event = name.to_owned();
        } else if let Some(json) = line.strip_prefix("data: ") {
            data = serde_json::from_str(json).unwrap_or(Value::Null);
        }
    }
    if status != 200 {
        data = serde_json::from_str(&text).unwrap_or(Value::String(text));
    }
    (status, event, data)
}

/// A TCP connection to `server` from the loopback address `from`
/// (`127.0.0.2`, …), which an attacker uses to look like another host.
pub async fn connect_from(server: SocketAddr, from: Ipv4Addr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::V4(SocketAddrV4::new(from, 0)))?;
    socket.connect(server).await
}

/// The neighbour's tool turns, one after another on fresh sessions, and
/// a `/healthz` probe on a new connection every 200 ms, until stopped.
pub struct Neighbour {
    stop: Arc<AtomicBool>,
    turns: tokio::task::JoinHandle<Vec<Result<Duration, String>>>,
    probes: tokio::task::JoinHandle<Vec<Result<Duration, String>>>,
}

/// How long the neighbour waits for a turn or a probe before it counts
/// it as failed.
const GIVE_UP: Duration = Duration::from_secs(30);

impl Neighbour {
    fn start(url: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let turns = tokio::spawn({
            let (url, stop) = (url.to_owned(), stop.clone());
            async move {
                let mut took = Vec::new();
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let started = Instant::now();
                    let session = format!("n-{}-{n}", std::process::id());
                    took.push(match tokio::time::timeout(GIVE_UP, turn(&url, &session)).await {
                        Ok(Ok(())) => Ok(started.elapsed()),
                        Ok(Err(e)) => Err(e),
                        Err(_) => Err(format!("turn {n} took more than {GIVE_UP:?}")),
                    });
                    n += 1;
                }
                took
            }
        });
        let probes = tokio::spawn({
            let (url, stop) = (url.to_owned(), stop.clone());
            async move {
                let mut took = Vec::new();
                let mut every = tokio::time::interval(Duration::from_millis(200));
                while !stop.load(Ordering::SeqCst) {
                    every.tick().await;
                    let started = Instant::now();
                    // A client of its own: a new connection every time,
                    // as a load balancer's health check makes.
                    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("a client");
                    let probe = client.get(format!("{url}/healthz")).send();
                    took.push(match tokio::time::timeout(GIVE_UP, probe).await {
                        Ok(Ok(r)) if r.status() == 200 => Ok(started.elapsed()),
                        Ok(Ok(r)) => Err(format!("/healthz answered {}", r.status())),
                        Ok(Err(e)) => Err(format!("/healthz: {e}")),
                        Err(_) => Err(format!("/healthz took more than {GIVE_UP:?}")),
                    });
                }
                took
            }
        });
        Self { stop, turns, probes }
    }

    /// Stops the loops (after the turn under way) and says how they went.
    pub async fn stop(self) -> Watched {
        self.stop.store(true, Ordering::SeqCst);
        Watched { turns: self.turns.await.expect("the turns"), probes: self.probes.await.expect("the probes") }
    }
}

/// One streamed tool turn of the neighbour's `tools` agent on a new
/// session; an error unless it ends in `turn.done`.
async fn turn(url: &str, session: &str) -> Result<(), String> {
    let body = json!({"type": "client.message", "agent_id": "tools", "stream": true,
        "message": {"role": "user", "content": ADD}});
    let response = http()
        .post(format!("{url}/v1/sessions/{session}/input"))
        .bearer_auth(NEIGHBOUR.1)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("the turn's request: {e}"))?;
    let status = response.status();
    let text = response.text().await.map_err(|e| format!("the turn's stream: {e}"))?;
    let last = text.lines().rev().find_map(|l| l.strip_prefix("event: ")).unwrap_or_default();
    if status == 200 && last == "turn.done" {
        Ok(())
    } else {
        Err(format!("the turn ended {status} {last:?}: {text:.300}"))
    }
}

/// What the neighbour saw.
#[derive(Debug)]
pub struct Watched {
    /// Each turn's time, or why it failed.
    pub turns: Vec<Result<Duration, String>>,
    /// Each probe's time, or why it failed.
    pub probes: Vec<Result<Duration, String>>,
}

impl Watched {
    /// Panics unless at least one turn and one probe were made, none
    /// failed, every turn took less than `turn` and every probe less
    /// than `healthz`.
    pub fn assert_within(&self, turn: Duration, healthz: Duration) {
        for (what, results, limit) in [("turn", &self.turns, turn), ("/healthz", &self.probes, healthz)] {
            assert!(!results.is_empty(), "no neighbour {what} was made");
            let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
            assert!(failed.is_empty(), "{} of {} neighbour {what}s failed: {failed:?}", failed.len(), results.len());
            let slowest = results.iter().filter_map(|r| r.as_ref().ok()).max().copied().unwrap_or_default();
            assert!(slowest < limit, "a neighbour {what} took {slowest:?}, more than {limit:?}");
        }
    }

    /// The turns' median time.
    pub fn turn_p50(&self) -> Duration {
        let mut ok: Vec<Duration> = self.turns.iter().filter_map(|r| r.as_ref().ok()).copied().collect();
        ok.sort();
        ok.get(ok.len() / 2).copied().unwrap_or_default()
    }
}
