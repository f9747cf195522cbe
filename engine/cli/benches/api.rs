//! Turns through the HTTP API, as a client sees them: `subs serve` runs as
//! a child process, and a keep-alive client with a connection pool streams
//! tool turns (`"stream": true`, read to the end of the turn's events).
//! Optionally the same workload runs, interleaved, against LangGraph's
//! standard ReAct agent served by `scripts/langgraph/server.py`, and the
//! two are reported side by side as ratios.
//!
//! ```text
//! cargo bench -p subs-cli --bench api
//! BENCH_LEVELS=1,16,64 BENCH_SECONDS=5 cargo bench -p subs-cli --bench api
//! ./scripts/bench-api.sh        # with LangGraph beside it
//! BENCH_LEVELS= BENCH_TURNS_PER_SESSION=200 ./scripts/bench-api.sh   # one long session only
//! ```
//!
//! A turn is the `tools` component's: the user asks for `add`, the offline
//! model calls it, the component runs it, the model answers (`add returned
//! {"sum":3}.`); six decisions (five after a session's first turn) and two
//! model calls, each step durable before anything acts on it. Each case
//! runs `BENCH_SECONDS` (default 5) on each server with N concurrent
//! clients, each sending one turn after another, either on a new session
//! every turn or in conversations of 10 turns. At concurrency 1 the same
//! turns also run on a new connection each, which Nagle's algorithm cannot
//! hold up: a keep-alive turn should cost no more.
//!
//! The servers take turns: a case's time on each is cut into
//! `BENCH_ROUNDS` (default 5) stretches, run server after server, round
//! after round, and each server's figures are over all of its stretches.
//! A slow spell of the host (a shared VM has them, for seconds at a time)
//! then falls on every server alike instead of on whichever ran through
//! it, and the ratios between them hold still. With more than one client
//! a stretch lasts at least [`WIDE_STRETCH`], so fewer rounds when the
//! case is short (one when it is shorter than two of them): a stretch must
//! be long beside a turn's latency (about a second on LangGraph at 64
//! clients), or its start, when every client sends at once, and its end,
//! when the last turns drain, would weigh on the figures.
//!
//! Reported per case: turns/s, p50 and p99 turn latency (from sending the
//! request to the end of its response), the server's CPU time per turn
//! (user + system, from `/proc`), the load generator's (this process's)
//! CPU time per turn, which on a small machine is taken from the same
//! cores as the server's (for `subs+otel` it includes the OTLP receiver,
//! which runs in this process), and durable commits per turn (subs'
//! `subs_store_commits_total`). Output: a table on stdout and the same as
//! JSON in `target/bench-api.json`.
//!
//! Then `turns_per_session`: one session on each server, `BENCH_TURNS_PER_SESSION`
//! (default 1,000; 0 skips it) streamed tool turns back to back, one
//! client, the servers taking turns in blocks of 10. Each turn adds four
//! messages (the question, the tool call, its result, the answer), so the
//! last turns decide over a branch of thousands. Reported: turn p50 by
//! turn-index window (turns 1–10, 91–100, 491–500 and 991–1,000 of 1,000;
//! the same fractions of a shorter session, in windows of a tenth of it
//! up to 10 turns) and the last window's p50 over the first's: how a
//! turn's cost grows with the conversation.
//!
//! `BENCH_LANGGRAPH_PYTHON`: the Python of an environment made by
//! `scripts/langgraph/setup.sh`; when set, every case runs on LangGraph
//! too, in turns with subs.
//!
//! Telemetry, side by side: `BENCH_OTEL=1` runs every case also on a
//! second `subs serve` that sends its OpenTelemetry spans over OTLP to a
//! receiver in this process (`subs+otel`); `BENCH_SUBS_BASELINE=<path>`
//! also on another `subs` binary (`subs@base`: say, one built from the
//! commit before telemetry), so what telemetry costs when off and when on
//! is measured in the same run, case by case. `BENCH_SUBS_BASELINE_AGENT`
//! is the `tools` component that binary gets (default: this tree's),
//! for one built before the engine ran this tree's WIT world.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use subs_tests::bench::{percentile, write_json};

/// Turns per conversation in the conversation cases.
const CONVERSATION: usize = 10;

/// Turns of the long session a server runs before the next takes over.
const BLOCK: usize = 10;

/// The shortest stretch of a case with more than one client.
const WIDE_STRETCH: Duration = Duration::from_secs(3);

/// What a user asks in every turn: one call of the `tools` agent's `add`.
const ASK: &str = r#"use tool add with {"a": 1, "b": 2}"#;

/// How every turn must end, on both servers.
const ANSWER: &str = r#"add returned {\"sum\":3}."#;

fn main() {
    let levels: Vec<usize> = std::env::var("BENCH_LEVELS")
        .ok()
        .map(|l| l.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 16, 64]);
    let seconds: f64 = std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5).max(1);
    let long: usize = std::env::var("BENCH_TURNS_PER_SESSION").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let langgraph = std::env::var_os("BENCH_LANGGRAPH_PYTHON").map(PathBuf::from);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(run(&levels, Duration::from_secs_f64(seconds), rounds, long, langgraph.as_deref()));
}

/// A server under test: a child process and how to ask it for a turn.
struct Target {
    name: &'static str,
    /// Whether it is a `subs` (any build, any setting).
    is_subs: bool,
    child: Child,
    base: String,
    pid: u32,
    _dir: tempfile::TempDir,
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Target {
    /// `subs serve` on a fresh data directory and a free port, with the
    /// `tools` component (`agent`) uploaded as `tools`: the binary
    /// `program`, with spans sent to `otlp` when given.
    async fn subs(name: &'static str, program: &Path, agent: &Path, otlp: Option<&str>) -> Target {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut command = Command::new(program);
        command.args(["serve", "--listen", "127.0.0.1:0", "--data"]).arg(dir.path());
        for var in ["SUBS_CONFIG", "SUBS_DEFAULT_MODEL", "RUST_LOG", "OTEL_EXPORTER_OTLP_ENDPOINT"] {
            command.env_remove(var);
        }
        if let Some(endpoint) = otlp {
            command.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
        }
        let mut target = Target::spawn(name, command, "subs listening on ", dir);
        target.is_subs = true;
        let wasm = std::fs::read(agent).expect("the tools component is built");
        let response = reqwest::Client::new()
            .put(format!("{}/v1/agents/tools", target.base))
            .header("content-type", "application/wasm")
            .body(wasm)
            .send()
            .await
            .expect("the upload is answered");
        assert!(response.status().is_success(), "upload: {}", response.text().await.unwrap_or_default());
        target
    }

    /// LangGraph's server on a fresh SQLite file and a free port.
    fn langgraph(python: &Path) -> Target {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/langgraph/server.py");
        let mut command = Command::new(python);
        command.arg(script).args(["--port", "0", "--db"]).arg(dir.path().join("checkpoints.sqlite"));
        Target::spawn("langgraph", command, "langgraph listening on ", dir)
    }

    /// Starts `command` and waits for the line that says where it listens.
    fn spawn(name: &'static str, mut command: Command, ready: &str, dir: tempfile::TempDir) -> Target {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let base = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(url) = line.strip_prefix(ready) {
                        break url.trim().to_owned();
                    }
                }
                _ => panic!("{name} stopped before it listened"),
            }
        };
        // Whatever else it prints is not read; keep the pipe drained.
        std::thread::spawn(move || lines.for_each(drop));
        let pid = child.id();
        Target { name, is_subs: false, child, base, pid, _dir: dir }
    }

    /// One streamed turn of `session`, read to its end.
    async fn turn(&self, client: &reqwest::Client, session: &str) {
        let (url, body) = if self.is_subs {
            let body = json!({"type": "client.message", "agent_id": "tools", "stream": true,
                "message": {"role": "user", "content": ASK}});
            (format!("{}/v1/sessions/{session}/input", self.base), body)
        } else {
            (format!("{}/threads/{session}/stream", self.base), json!({"message": ASK}))
        };
        let response = client
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("the turn is answered");
        assert!(response.status().is_success(), "{}: {}", self.name, response.status());
        let body = response.bytes().await.expect("the stream ends");
        let text = String::from_utf8_lossy(&body);
        let end = if self.is_subs { "event: turn.done" } else { "event: end" };
        assert!(
            text.contains(end) && text.contains(ANSWER),
            "{}: the turn did not end as expected:\n{text}",
            self.name
        );
    }

    /// The CPU time the server has used so far (user + system).
    fn cpu(&self) -> Duration {
        process_cpu(self.pid)
    }

    /// Durable commits so far, from `/metrics`; `None` for LangGraph.
    async fn commits(&self, client: &reqwest::Client) -> Option<u64> {
        if !self.is_subs {
            return None;
        }
        let text = client.get(format!("{}/metrics", self.base)).send().await.ok()?.text().await.ok()?;
        text.lines().find_map(|l| l.strip_prefix("subs_store_commits_total ")).and_then(|n| n.trim().parse().ok())
    }
}

/// The CPU time process `pid` has used so far (user + system).
fn process_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process runs");
    // Fields after the command name (which is in parentheses and may hold
    // spaces): utime and stime are the 12th and 13th.
    let after = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64)
}

/// The kernel's clock ticks per second, which `/proc/<pid>/stat` counts in.
fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100)
    })
}

/// How clients use connections and sessions in a case.
#[derive(Clone, Copy)]
struct Case {
    clients: usize,
    /// Turns per session: 1 is a new session every turn.
    turns_per_session: usize,
    /// A new connection for every turn instead of a kept-alive one.
    new_connections: bool,
}

impl Case {
    fn label(&self) -> String {
        let sessions = if self.turns_per_session == 1 {
            "new session per turn".to_owned()
        } else {
            format!("{} turns per session", self.turns_per_session)
        };
        let connection = if self.new_connections { "new connection per turn" } else { "keep-alive" };
        format!("{sessions}, {connection}")
    }
}

/// What one case measured on one server.
struct Measured {
    turns: usize,
    per_sec: f64,
    p50: Duration,
    p99: Duration,
    cpu_per_turn: Duration,
    /// What the load generator (this process, with its OTLP receiver)
    /// spent on each turn: on a small machine it shares the cores with the
    /// server.
    client_cpu_per_turn: Duration,
    commits_per_turn: Option<f64>,
}

impl Measured {
    fn json(&self, target: &str, case: &Case) -> Value {
        json!({
            "server": target,
            "case": case.label(),
            "clients": case.clients,
            "turns_per_session": case.turns_per_session,
            "new_connections": case.new_connections,
            "turns": self.turns,
            "per_sec": self.per_sec,
            "p50_ms": ms(self.p50),
            "p99_ms": ms(self.p99),
            "cpu_ms_per_turn": ms(self.cpu_per_turn),
            "client_cpu_ms_per_turn": ms(self.client_cpu_per_turn),
            "commits_per_turn": self.commits_per_turn,
        })
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// What stretches of a case gathered on one server.
struct Gathered {
    latencies: Vec<Duration>,
    elapsed: Duration,
    cpu: Duration,
    client_cpu: Duration,
    commits: Option<u64>,
    /// Turns each client has sent, so that its conversation goes on in
    /// its next stretch.
    sent: Vec<usize>,
}

impl Gathered {
    /// Adds a later stretch.
    fn add(&mut self, later: Gathered) {
        self.latencies.extend(later.latencies);
        self.elapsed += later.elapsed;
        self.cpu += later.cpu;
        self.client_cpu += later.client_cpu;
        self.commits = self.commits.zip(later.commits).map(|(a, b)| a + b);
        self.sent = later.sent;
    }

    /// The figures over every stretch.
    fn measured(mut self) -> Measured {
        self.latencies.sort();
        let turns = self.latencies.len();
        let per_turn = |x: f64| x / turns.max(1) as f64;
        Measured {
            turns,
            per_sec: turns as f64 / self.elapsed.as_secs_f64(),
            p50: percentile(&self.latencies, 0.50),
            p99: percentile(&self.latencies, 0.99),
            cpu_per_turn: Duration::from_secs_f64(per_turn(self.cpu.as_secs_f64())),
            client_cpu_per_turn: Duration::from_secs_f64(per_turn(self.client_cpu.as_secs_f64())),
            commits_per_turn: self.commits.map(|c| per_turn(c as f64)),
        }
    }
}

/// The rounds and the stretch of a case with more than one client that
/// runs `duration` on each server: as many of `rounds` as leave each
/// stretch at least [`WIDE_STRETCH`], and at least one.
fn wide(duration: Duration, rounds: usize) -> (usize, Duration) {
    let fit = (duration.as_secs_f64() / WIDE_STRETCH.as_secs_f64()) as usize;
    let rounds = fit.clamp(1, rounds);
    (rounds, duration / u32::try_from(rounds).unwrap_or(u32::MAX))
}

/// Runs `case` on `target` for `duration`, one stretch of it: `run` tells
/// the case's sessions from every other case's, and `sent` is how many
/// turns each client sent in the case's earlier stretches.
async fn measure(target: &Arc<Target>, case: Case, duration: Duration, run: usize, sent: &[usize]) -> Gathered {
    let builder = || reqwest::Client::builder().pool_max_idle_per_host(if case.new_connections { 0 } else { 64 });
    let client = builder().build().expect("an HTTP client");
    // Warm up: connections open, the component instantiated once.
    for i in 0..case.clients.min(4) {
        target.turn(&client, &format!("warm-{run}-{i}")).await;
    }
    let commits_before = target.commits(&client).await;
    let cpu_before = target.cpu();
    let client_cpu_before = process_cpu(std::process::id());
    let started = Instant::now();
    let tasks: Vec<_> = (0..case.clients)
        .map(|c| {
            let (target, client) = (target.clone(), client.clone());
            let mut turn = sent.get(c).copied().unwrap_or(0);
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while started.elapsed() < duration {
                    let id = format!("r{run}-c{c}-s{}", turn / case.turns_per_session);
                    let t = Instant::now();
                    target.turn(&client, &id).await;
                    latencies.push(t.elapsed());
                    turn += 1;
                }
                (latencies, turn)
            })
        })
        .collect();
    let (mut latencies, mut sent) = (Vec::new(), Vec::new());
    for task in tasks {
        let (mine, turns) = task.await.expect("a client finishes");
        latencies.extend(mine);
        sent.push(turns);
    }
    let elapsed = started.elapsed();
    let cpu = target.cpu().saturating_sub(cpu_before);
    let client_cpu = process_cpu(std::process::id()).saturating_sub(client_cpu_before);
    let commits_after = target.commits(&client).await;
    Gathered {
        latencies,
        elapsed,
        cpu,
        client_cpu,
        commits: commits_before.zip(commits_after).map(|(a, b)| b - a),
        sent,
    }
}

/// An OTLP/HTTP receiver that takes every export and keeps nothing but
/// the count of bytes, as a collector that is never the bottleneck.
async fn otlp_sink() -> (String, Arc<std::sync::atomic::AtomicU64>) {
    let received = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            counted.fetch_add(body.len() as u64, std::sync::atomic::Ordering::Relaxed);
            async { ([("content-type", "application/x-protobuf")], Vec::<u8>::new()) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

/// The turn-index windows of a session of `turns` turns, 1-based and
/// inclusive: its first turns, and those ending a tenth, half and all of
/// the way through, each a tenth of the session wide, at most 10 turns.
fn windows(turns: usize) -> Vec<(usize, usize)> {
    let width = (turns / 10).clamp(1, 10);
    let mut windows: Vec<(usize, usize)> = Vec::new();
    for end in [width, turns / 10, turns / 2, turns] {
        let end = end.max(width);
        if windows.last().is_none_or(|&(_, last)| last < end) {
            windows.push((end + 1 - width, end));
        }
    }
    windows
}

/// One session of `turns` turns on each of `targets`, the targets taking
/// turns in blocks of [`BLOCK`]: each turn's latency, per target, in order.
async fn long_session(targets: &[&Arc<Target>], turns: usize) -> Vec<Vec<Duration>> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(4).build().expect("an HTTP client");
    for target in targets {
        target.turn(&client, "long-warm").await;
    }
    let mut latencies = vec![Vec::with_capacity(turns); targets.len()];
    let mut done = 0;
    while done < turns {
        let block = BLOCK.min(turns - done);
        for (target, mine) in targets.iter().zip(&mut latencies) {
            for _ in 0..block {
                let t = Instant::now();
                target.turn(&client, "long").await;
                mine.push(t.elapsed());
            }
        }
        done += block;
    }
    latencies
}

/// Runs the `turns_per_session` dimension on `targets`, prints its table
/// and gives its JSON.
async fn turns_per_session(targets: &[&Arc<Target>], turns: usize) -> Value {
    let windows = windows(turns);
    let latencies = long_session(targets, turns).await;
    println!("\none session, {turns} turns, 1 client, servers in turns by blocks of {BLOCK}: turn p50 (ms) by turn");
    let heads: Vec<String> = windows.iter().map(|(a, b)| format!("{a}–{b}")).collect();
    println!("{:<10} {} {:>10}", "server", heads.iter().map(|h| format!("{h:>10}")).collect::<String>(), "last/first");
    let mut servers = Vec::new();
    for (target, latencies) in targets.iter().zip(latencies) {
        let p50s: Vec<Duration> = windows
            .iter()
            .map(|&(first, last)| {
                let mut window = latencies[first - 1..last].to_vec();
                window.sort();
                percentile(&window, 0.50)
            })
            .collect();
        let growth = p50s.last().zip(p50s.first()).map_or(f64::NAN, |(l, f)| l.as_secs_f64() / f.as_secs_f64());
        println!(
            "{:<10} {} {:>9.2}×",
            target.name,
            p50s.iter().map(|p| format!("{:>10.2}", ms(*p))).collect::<String>(),
            growth
        );
        let mut all = latencies.clone();
        all.sort();
        servers.push(json!({
            "server": target.name,
            "p50_ms": p50s.iter().map(|p| ms(*p)).collect::<Vec<_>>(),
            "last_over_first_p50": growth,
            "session_p50_ms": ms(percentile(&all, 0.50)),
            "session_seconds": latencies.iter().sum::<Duration>().as_secs_f64(),
        }));
    }
    println!("(target for subs: last/first ≤ 2)");
    json!({ "turns": turns, "block": BLOCK, "windows": windows, "servers": servers })
}

async fn run(levels: &[usize], duration: Duration, rounds: usize, long: usize, langgraph: Option<&Path>) {
    let program = Path::new(env!("CARGO_BIN_EXE_subs"));
    let tools = Path::new(subs_tests::guests::TOOLS);
    let subs = Arc::new(Target::subs("subs", program, tools, None).await);
    let otel = std::env::var("BENCH_OTEL").is_ok_and(|v| v == "1");
    let (otlp, exported) = otlp_sink().await;
    let otel = if otel { Some(Arc::new(Target::subs("subs+otel", program, tools, Some(&otlp)).await)) } else { None };
    let baseline = match std::env::var_os("BENCH_SUBS_BASELINE") {
        Some(path) => {
            let agent = std::env::var_os("BENCH_SUBS_BASELINE_AGENT").map_or(tools.to_path_buf(), PathBuf::from);
            Some(Arc::new(Target::subs("subs@base", Path::new(&path), &agent, None).await))
        }
        None => None,
    };
    let load_before = load_average();
    let langgraph = langgraph.map(|python| Arc::new(Target::langgraph(python)));
    let mut cases = Vec::new();
    for &clients in levels {
        for turns_per_session in [1, CONVERSATION] {
            cases.push(Case { clients, turns_per_session, new_connections: false });
        }
        if clients == 1 {
            cases.push(Case { clients, turns_per_session: CONVERSATION, new_connections: true });
        }
    }

    println!(
        "{:<10} {:>7} {:<48} {:>9} {:>9} {:>9} {:>10} {:>11} {:>9}",
        "server", "clients", "case", "turns/s", "p50 ms", "p99 ms", "CPU ms/t", "client ms/t", "commits/t"
    );
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    let stretch = duration / u32::try_from(rounds).unwrap_or(u32::MAX);
    for (n, case) in cases.iter().enumerate() {
        let targets: Vec<_> =
            [Some(&subs), baseline.as_ref(), otel.as_ref(), langgraph.as_ref()].into_iter().flatten().collect();
        let (rounds, stretch) = if case.clients == 1 { (rounds, stretch) } else { wide(duration, rounds) };
        let mut gathered = Vec::new();
        for target in &targets {
            gathered.push(measure(target, *case, stretch, n, &[]).await);
        }
        for _ in 1..rounds {
            for (target, gathered) in targets.iter().zip(&mut gathered) {
                let later = measure(target, *case, stretch, n, &gathered.sent).await;
                gathered.add(later);
            }
        }
        let mut measured = Vec::new();
        for (target, gathered) in targets.iter().zip(gathered) {
            let m = gathered.measured();
            println!(
                "{:<10} {:>7} {:<48} {:>9.0} {:>9.2} {:>9.2} {:>10.2} {:>11.2} {:>9}",
                target.name,
                case.clients,
                case.label(),
                m.per_sec,
                ms(m.p50),
                ms(m.p99),
                ms(m.cpu_per_turn),
                ms(m.client_cpu_per_turn),
                m.commits_per_turn.map_or("-".to_owned(), |c| format!("{c:.2}")),
            );
            rows.push(m.json(target.name, case));
            measured.push(m);
        }
        if let (Some(s), Some(l)) = (measured.first(), langgraph.as_ref().and(measured.last())) {
            ratios.push(json!({
                "case": case.label(),
                "clients": case.clients,
                "p50_subs_over_langgraph": s.p50.as_secs_f64() / l.p50.as_secs_f64(),
                "per_sec_subs_over_langgraph": s.per_sec / l.per_sec,
                "cpu_subs_over_langgraph": s.cpu_per_turn.as_secs_f64() / l.cpu_per_turn.as_secs_f64(),
            }));
        }
    }

    // subs on its own: what keeping the connection alive costs a turn.
    let p50 = |clients: usize, new_connections: bool| {
        rows.iter()
            .find(|r| {
                r["server"] == "subs"
                    && r["clients"] == clients
                    && r["turns_per_session"] == CONVERSATION
                    && r["new_connections"] == new_connections
            })
            .and_then(|r| r["p50_ms"].as_f64())
    };
    let keep_alive_over_new = p50(1, false).zip(p50(1, true)).map(|(k, n)| k / n);
    if let Some(r) = keep_alive_over_new {
        println!("\nsubs, 1 client: keep-alive p50 / new-connection p50 = {r:.2} (target ≤ 1.5)");
    }
    for r in &ratios {
        println!(
            "subs / langgraph, {} clients, {}: p50 {:.3}×, turns/s {:.1}×, CPU per turn {:.3}×",
            r["clients"],
            r["case"].as_str().unwrap_or_default(),
            r["p50_subs_over_langgraph"].as_f64().unwrap_or(f64::NAN),
            r["per_sec_subs_over_langgraph"].as_f64().unwrap_or(f64::NAN),
            r["cpu_subs_over_langgraph"].as_f64().unwrap_or(f64::NAN),
        );
    }
    // Telemetry: each other subs beside the plain one, case by case.
    let mut telemetry = Vec::new();
    for other in ["subs@base", "subs+otel"] {
        for case in &cases {
            let row = |server: &str| {
                rows.iter().find(|r| {
                    r["server"] == server
                        && r["clients"] == case.clients
                        && r["turns_per_session"] == case.turns_per_session
                        && r["new_connections"] == case.new_connections
                })
            };
            let (Some(plain), Some(other_row)) = (row("subs"), row(other)) else { continue };
            let ratio =
                |field: &str| other_row[field].as_f64().unwrap_or(f64::NAN) / plain[field].as_f64().unwrap_or(f64::NAN);
            let r = json!({
                "server": other,
                "case": case.label(),
                "clients": case.clients,
                "per_sec_over_subs": ratio("per_sec"),
                "p50_over_subs": ratio("p50_ms"),
                "cpu_over_subs": ratio("cpu_ms_per_turn"),
            });
            println!(
                "{other} / subs, {} clients, {}: turns/s {:.3}×, p50 {:.3}×, CPU per turn {:.3}×",
                case.clients,
                case.label(),
                r["per_sec_over_subs"].as_f64().unwrap_or(f64::NAN),
                r["p50_over_subs"].as_f64().unwrap_or(f64::NAN),
                r["cpu_over_subs"].as_f64().unwrap_or(f64::NAN),
            );
            telemetry.push(r);
        }
    }
    let long = if long == 0 {
        Value::Null
    } else {
        let targets: Vec<_> =
            [Some(&subs), baseline.as_ref(), otel.as_ref(), langgraph.as_ref()].into_iter().flatten().collect();
        turns_per_session(&targets, long).await
    };
    let exported = exported.load(std::sync::atomic::Ordering::Relaxed);
    if otel.is_some() {
        println!("subs+otel exported {:.1} MB of spans", exported as f64 / 1e6);
    }
    println!("load average (1, 5, 15 min): {load_before} at the start, {} at the end", load_average());
    write_json(
        "api",
        &json!({
            "seconds": duration.as_secs_f64(),
            "rounds": rounds,
            "rows": rows,
            "keep_alive_over_new_connection_p50": keep_alive_over_new,
            "subs_over_langgraph": ratios,
            "telemetry": telemetry,
            "otlp_bytes_exported": exported,
            "turns_per_session": long,
            "load_average": {"start": load_before, "end": load_average()},
        }),
    );
}

/// The host's load averages over 1, 5 and 15 minutes, as
/// `/proc/loadavg` has them: on a shared machine, how busy it was.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
