//! The chaos harness: three `subs serve` nodes on one throwaway PostgreSQL
//! cluster, clients running turns on all of them at once, and the faults
//! an operator meets: a node killed (`kill -9`) and restarted, a node
//! paused (SIGSTOP) past its lease, every database connection of every
//! node terminated, PostgreSQL restarted (fast and immediate), and
//! PostgreSQL down for longer than a lease. Then what must hold:
//!
//! - every turn accepted (202) ends with `turn.done`, within the lease
//!   plus 5 s (and a little slack for a loaded CI machine) after the last
//!   fault it met is over (the store back, the node dead or paused);
//! - every session's event stream, followed by its client across nodes
//!   with `after` (as `Last-Event-ID`), sees every stored event once, in
//!   order, and stays live: a stream that falls silent on a node no fault
//!   touched is a violation;
//! - no input and no tool result is lost or doubled: each turn's user
//!   message once, each tool call with one result, the history the
//!   replay shows;
//! - every answer the clients get is a success, a 503 with
//!   `Retry-After`, or a connection error (the node died or was paused);
//!   never another status, never a request hanging past its timeout.
//!
//! The LLM is the fake provider (two `add` calls per user message, then a
//! sentence), the agent the `tools` example as an HTTP worker served from
//! this process. The CI form runs each fault once with 4 s leases (about a
//! minute); `CHAOS_ROUNDS`, `CHAOS_SESSIONS` and `CHAOS_SEED` make longer
//! runs.
//!
//! Besides the harness: the two faults that left work stuck, as
//! regression tests (a commit cut in flight on a node that stays up; a
//! node whose notice listener was cut while it streamed a session), and,
//! ignored in CI, the measurement of failover times behind
//! docs/benchmarks.md (`cargo test -p subs-cli --test all
//! chaos::failover_times -- --ignored --nocapture`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use subs_fake_provider::{FakeProvider, Format, Reply, ScriptedCall};
use subs_protocol::sse::SseParser;
use subs_sdk::prelude::{Agent, Context, DecideError, DecisionRequest, DecisionResponse, Trigger};
use subs_store_postgres::testing::{StopMode, TestCluster, sql};
use subs_tests::wait::pace;

use crate::Server;
use crate::crash::{Rng, fnv, lock};

/// The agent id the worker is registered under.
const AGENT: &str = "chaos";

/// The longest any request may take before the harness calls it a hang:
/// well above what a client waits for by design (a forwarded request
/// waits the lease plus 5 s; a read of a store that is down waits for
/// the connect timeout, 10 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Slack on every deadline, for a loaded two-core CI machine running
/// three nodes, PostgreSQL and the clients.
const SLACK: Duration = Duration::from_secs(4);

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}

// ---------------------------------------------------------------------
// The model and the agent.

/// The text of a message's `content` (a string, or text parts).
fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// The fake model: after a user message, two `add` calls on the numbers
/// it names (ids derived from its text); after tool results, a sentence
/// quoting them.
fn respond(body: &Value, _format: Format) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let Some(last) = messages.last() else { return Reply::text("nothing to answer") };
    if last["role"] == "user" {
        let text = text_of(last);
        let numbers: Vec<&str> = text
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .collect();
        let id = format!("call_{:08x}", fnv(&text) & 0xffff_ffff);
        let calls = numbers
            .chunks(2)
            .zip(["a", "b"])
            .map(|(pair, suffix)| {
                let arguments = format!("{{\"a\":{},\"b\":{}}}", pair[0], pair.get(1).unwrap_or(&"0"));
                ScriptedCall::split_every(&format!("{id}_{suffix}"), "add", &arguments, 7)
            })
            .collect();
        return Reply::tool_calls(calls).with_latency(Duration::from_millis(5));
    }
    let results: Vec<String> = messages.iter().rev().take_while(|m| m["role"] == "tool").map(text_of).collect();
    Reply::text(&format!("The sums are {}.", results.join(" and "))).with_latency(Duration::from_millis(5))
}

/// The prompt of a turn: four numbers the model adds in pairs.
fn prompt(session: &str, turn: usize) -> String {
    let mut rng = Rng(fnv(session) ^ turn as u64);
    let mut n = || rng.below(1000);
    format!("{session} turn {turn}: add {} and {}, then {} and {}", n(), n(), n(), n())
}

/// Holds tool executions while set, until cleared: the failover
/// measurement pauses a turn mid-call on the node it then kills.
#[derive(Default)]
struct Gate {
    held: Mutex<bool>,
    changed: std::sync::Condvar,
    /// Executions waiting at the gate.
    waiting: AtomicU64,
}

impl Gate {
    fn hold(&self, held: bool) {
        *lock(&self.held) = held;
        self.changed.notify_all();
    }

    fn pass(&self) {
        let held = lock(&self.held);
        if *held {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let _ = self.changed.wait_timeout_while(held, Duration::from_secs(120), |held| *held);
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// The `tools` example, counting its tool executions by call id.
struct Counting {
    tools: tools::Tools,
    executions: Arc<Mutex<HashMap<String, u32>>>,
    gate: Arc<Gate>,
}

impl Agent for Counting {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        if let Trigger::ToolExecute(call) = &request.trigger {
            self.gate.pass();
            *lock(&self.executions).entry(call.id.clone()).or_default() += 1;
        }
        self.tools.decide(request, cx)
    }
}

/// The worker's URL, once it serves on a free loopback port.
async fn worker(executions: Arc<Mutex<HashMap<String, u32>>>, gate: Arc<Gate>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let addr = listener.local_addr().expect("a bound address");
    let app = subs_http_worker::router(Counting { tools: tools::Tools::new(), executions, gate });
    tokio::spawn(subs_http_worker::serve_router(listener, app, std::future::pending()));
    format!("http://{addr}/")
}

// ---------------------------------------------------------------------
// The rig: PostgreSQL, the nodes, and the faults.

/// One `subs serve` of the rig.
struct Node {
    /// The running process; `None` while killed.
    server: Option<Server>,
    /// `127.0.0.1:<port>`, kept across restarts.
    addr: String,
    config: std::path::PathBuf,
    data: std::path::PathBuf,
    /// Its name in the store (`[store] node`).
    name: String,
}

/// A PostgreSQL cluster of its own (the harness restarts it), a database,
/// the fake provider and the worker, and `subs serve` nodes on them.
struct Rig {
    pg: TestCluster,
    /// The database's URL, as the superuser.
    db: String,
    nodes: Vec<Node>,
    _fake: FakeProvider,
    /// Holds the config files and data directories.
    _dir: tempfile::TempDir,
    executions: Arc<Mutex<HashMap<String, u32>>>,
    gate: Arc<Gate>,
}

/// How a node connects: as the superuser, or as a role of its own.
#[derive(Clone)]
struct NodeSpec {
    user: Option<String>,
}

impl Rig {
    /// `nodes` nodes with leases of `lease` (renewed every `renew`), each
    /// connecting as `specs[i]` says (the superuser by default); `None`
    /// where PostgreSQL is not installed. `before` runs on the fresh
    /// database before the first node starts.
    async fn start(nodes: usize, lease: Duration, renew: Duration, specs: &[NodeSpec], before: &str) -> Option<Rig> {
        let pg = tokio::task::spawn_blocking(TestCluster::start).await.expect("the cluster starts")?;
        let db = pg.fresh_database();
        if !before.is_empty() {
            sql(&db, before).await.expect("the database is prepared");
        }
        let fake = FakeProvider::start().await;
        fake.respond_with(respond);
        let executions = Arc::default();
        let gate = Arc::new(Gate::default());
        let worker_url = worker(Arc::clone(&executions), Arc::clone(&gate)).await;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let database = db.rsplit('/').next().expect("a database name").to_owned();
        let mut rig_nodes = Vec::with_capacity(nodes);
        for i in 0..nodes {
            let name = format!("chaos-{i}");
            let user = specs.get(i).and_then(|s| s.user.clone()).unwrap_or_else(|| "postgres".to_owned());
            let url = format!("postgres://{user}@127.0.0.1:{}/{database}", pg.port());
            let toml = format!(
                "[[providers]]\nname = \"fake\"\nformat = \"openai\"\nbase_url = \"{}\"\n\n[store]\nurl = \"{url}\"\n\
                 lease_secs = {}\nrenew_secs = {}\nnode = \"{name}\"\npool = 4\n",
                fake.openai_base_url(),
                lease.as_secs_f64(),
                renew.as_secs_f64()
            );
            let config = dir.path().join(format!("subs-{i}.toml"));
            std::fs::write(&config, toml).expect("the config file is written");
            let data = dir.path().join(format!("data-{i}"));
            rig_nodes.push(Node { server: None, addr: "127.0.0.1:0".to_owned(), config, data, name });
        }
        let mut rig = Rig { pg, db, nodes: rig_nodes, _fake: fake, _dir: dir, executions, gate };
        for i in 0..nodes {
            rig.boot(i).await;
        }
        let put = reqwest::Client::new()
            .put(format!("{}/v1/agents/{AGENT}", rig.url(0)))
            .header("content-type", "application/json")
            .body(json!({"url": worker_url}).to_string())
            .send()
            .await
            .expect("the node answers");
        assert!(put.status().is_success(), "registering the worker: {}", put.status());
        Some(rig)
    }

    /// Starts node `i` on its address (a free port the first time).
    async fn boot(&mut self, i: usize) {
        let node = &self.nodes[i];
        let (config, data, addr) = (node.config.clone(), node.data.clone(), node.addr.clone());
        let server = tokio::task::spawn_blocking(move || {
            let args = [
                "--data",
                data.to_str().expect("a UTF-8 path"),
                "--config",
                config.to_str().expect("a UTF-8 path"),
                "--default-model",
                "fake/chaos-model",
            ];
            Server::start_with(&args, &addr)
        })
        .await
        .expect("the node starts");
        self.nodes[i].addr = server.addr.clone();
        self.nodes[i].server = Some(server);
    }

    fn url(&self, i: usize) -> String {
        format!("http://{}", self.nodes[i].addr)
    }

    fn urls(&self) -> Vec<String> {
        (0..self.nodes.len()).map(|i| self.url(i)).collect()
    }

    fn signal(&self, i: usize, signal: &str) {
        let server = self.nodes[i].server.as_ref().expect("the node runs");
        let pid = server.process.child.id().to_string();
        let status = std::process::Command::new("kill").args([signal, &pid]).status().expect("kill runs");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// `kill -9`, and the process reaped.
    fn kill(&mut self, i: usize) {
        if let Some(mut server) = self.nodes[i].server.take() {
            server.process.child.kill().expect("SIGKILL is sent");
            server.process.child.wait().expect("the killed node is reaped");
        }
    }

    /// The index of the node named `name`.
    fn node_named(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Runs `query` in the rig's database as the superuser.
    async fn sql(&self, query: &str) -> Vec<Vec<Option<String>>> {
        sql(&self.db, query).await.unwrap_or_else(|e| panic!("{query}: {e}"))
    }

    /// Terminates the backends of the nodes' connections that `filter`
    /// (a condition on `pg_stat_activity`) picks; how many.
    async fn terminate(&self, filter: &str) -> usize {
        let rows = self
            .sql(&format!(
                "SELECT pg_terminate_backend(pid)::text FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid() AND ({filter})"
            ))
            .await;
        rows.len()
    }

    /// The stderr of every node so far, for failure messages.
    fn logs(&mut self) -> String {
        let mut out = String::new();
        for node in &mut self.nodes {
            if let Some(server) = &mut node.server {
                let text = server.process.stderr_text();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                out.push_str(&format!("--- {} (last lines)\n", node.name));
                for line in tail.into_iter().rev() {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        out
    }
}

// ---------------------------------------------------------------------
// What happened, for the checks.

/// A fault, on the harness's clock: from when it began to when it was
/// over (the store back, the node dead or paused: from then the others
/// have the lease to take its work over).
#[derive(Debug, Clone)]
struct Fault {
    what: String,
    /// The node it touched, if one.
    node: Option<usize>,
    start: Instant,
    end: Instant,
}

/// A turn a client saw accepted, and when it saw it end.
#[derive(Debug, Clone)]
struct Turn {
    session: String,
    turn_id: String,
    accepted: Instant,
    ended: Instant,
}

/// A stream that went silent while a turn was open, and the node it was
/// on.
#[derive(Debug, Clone)]
struct Stall {
    session: String,
    node: usize,
    since: Instant,
    until: Instant,
}

/// What every client adds to.
#[derive(Default)]
struct Ledger {
    faults: Mutex<Vec<Fault>>,
    turns: Mutex<Vec<Turn>>,
    stalls: Mutex<Vec<Stall>>,
    violations: Mutex<Vec<String>>,
    /// Answers by kind (`202`, `503 store`, `connection error`, …).
    answers: Mutex<BTreeMap<String, u64>>,
    /// Every stored event each session's stream passed on, `(seq, name)`.
    seen: Mutex<HashMap<String, Vec<(u64, String)>>>,
}

impl Ledger {
    fn violation(&self, what: String) {
        eprintln!("chaos violation: {what}");
        lock(&self.violations).push(what);
    }

    fn answer(&self, kind: impl Into<String>) {
        *lock(&self.answers).entry(kind.into()).or_default() += 1;
    }

    /// The latest moment turn-work touched by a fault may end: `from`
    /// plus `bound`, pushed past the end of each fault that began before
    /// that moment and ended after `from`.
    fn deadline(&self, from: Instant, bound: Duration) -> Instant {
        let mut faults = lock(&self.faults).clone();
        faults.sort_by_key(|f| f.start);
        let mut deadline = from + bound;
        for fault in faults {
            if fault.start <= deadline && fault.end + bound > deadline {
                deadline = fault.end + bound;
            }
        }
        deadline
    }

    /// Whether a fault touched `node` (or every node) between `from` and
    /// `to`, or ended less than `bound` before `from`.
    fn faulted(&self, node: usize, from: Instant, to: Instant, bound: Duration) -> bool {
        lock(&self.faults).iter().any(|f| f.node.is_none_or(|n| n == node) && f.start <= to && f.end + bound >= from)
    }
}

/// What the clients share.
struct Clients {
    urls: Vec<String>,
    http: reqwest::Client,
    ledger: Arc<Ledger>,
    /// Set when the faults are over: each client ends its turn and stops.
    stop: AtomicBool,
    /// Each turn's bound: the lease plus 5 s plus [`SLACK`].
    bound: Duration,
    seed: u64,
}

/// A client that makes a new connection per request: after a kill, a
/// pooled one would be dead, and a pooled one to a paused node would
/// hang every request sent on it.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .expect("an HTTP client")
}

/// `Retry-After` of a 503, if it has one.
fn retry_after(response: &reqwest::Response) -> Option<u64> {
    response.headers().get("retry-after")?.to_str().ok()?.parse().ok()
}

/// A session's event stream, followed across nodes.
struct Stream {
    session: String,
    /// The last stored event passed on.
    last: Option<u64>,
    /// The open response and the node it is on.
    open: Option<(reqwest::Response, usize, SseParser)>,
    rng: Rng,
}

impl Stream {
    /// Reads the session's events until `turn_id` ends; reconnects
    /// elsewhere (from `last`) when the stream breaks or stays silent for
    /// the bound. `Err` for a violation.
    async fn until_end(&mut self, clients: &Clients, turn_id: &str) -> Result<(), String> {
        let patience = Instant::now() + clients.bound * 6;
        loop {
            if Instant::now() > patience {
                return Err(format!(
                    "{} {turn_id}: its stream saw no end within {:?}",
                    self.session,
                    clients.bound * 6
                ));
            }
            if self.open.is_none() {
                self.connect(clients).await?;
                continue;
            }
            let (response, node, _) = self.open.as_mut().expect("checked");
            let node = *node;
            let since = Instant::now();
            match tokio::time::timeout(clients.bound, response.chunk()).await {
                Ok(Ok(Some(bytes))) => {
                    let (_, _, parser) = self.open.as_mut().expect("checked");
                    let events =
                        parser.push(&bytes).map_err(|e| format!("{}: unreadable stream: {e}", self.session))?;
                    for event in events {
                        let Some(seq) = event.id.as_deref().and_then(|id| id.parse::<u64>().ok()) else { continue };
                        let expected = self.last.map_or(0, |last| last + 1);
                        if seq != expected {
                            return Err(format!(
                                "{}: the stream on node {node} passed event {seq} after {:?}",
                                self.session, self.last
                            ));
                        }
                        self.last = Some(seq);
                        lock(&clients.ledger.seen)
                            .entry(self.session.clone())
                            .or_default()
                            .push((seq, event.event.clone()));
                        let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                        match event.event.as_str() {
                            "turn.done" if data["turn_id"] == turn_id => return Ok(()),
                            "turn.failed" => return Err(format!("{} {turn_id}: turn.failed {data}", self.session)),
                            _ => {}
                        }
                    }
                }
                // Ended or broken: the node died, or the server ended it.
                Ok(Ok(None) | Err(_)) => {
                    clients.ledger.answer("stream broken");
                    self.open = None;
                }
                Err(_) => {
                    lock(&clients.ledger.stalls).push(Stall {
                        session: self.session.clone(),
                        node,
                        since,
                        until: Instant::now(),
                    });
                    self.open = None;
                }
            }
        }
    }

    async fn connect(&mut self, clients: &Clients) -> Result<(), String> {
        let node = usize::try_from(self.rng.below(clients.urls.len() as u64)).unwrap_or(0);
        let mut url = format!("{}/v1/sessions/{}/events", clients.urls[node], self.session);
        if let Some(last) = self.last {
            url.push_str(&format!("?after={last}"));
        }
        match tokio::time::timeout(REQUEST_TIMEOUT, clients.http.get(url).send()).await {
            Err(_) => Err(format!("{}: opening its stream on node {node} hung", self.session)),
            Ok(Err(_)) => {
                clients.ledger.answer("connection error");
                // A client backs off before it tries again.
                pace(Duration::from_millis(100)).await;
                Ok(())
            }
            Ok(Ok(response)) if response.status() == 200 => {
                self.open = Some((response, node, SseParser::new()));
                Ok(())
            }
            Ok(Ok(response)) => refused(clients, &self.session, response).await,
        }
    }
}

/// A refusal: a 503 with `Retry-After` is waited out; anything else is a
/// violation.
async fn refused(clients: &Clients, session: &str, response: reqwest::Response) -> Result<(), String> {
    let status = response.status();
    let after = retry_after(&response);
    let body = response.text().await.unwrap_or_default();
    if status != 503 {
        return Err(format!("{session}: answered {status}: {body}"));
    }
    let Some(after) = after else {
        return Err(format!("{session}: a 503 without Retry-After: {body}"));
    };
    let kind = if body.contains("nothing of it was kept") || body.contains("nothing was changed") {
        "503 not stored"
    } else if body.contains("unknown") {
        "503 in doubt"
    } else if body.contains("is stored") {
        "503 stored, not answered"
    } else {
        "503 other"
    };
    clients.ledger.answer(kind);
    // A client waits out `Retry-After` (a second at most, to press on).
    pace(Duration::from_secs(after.min(1))).await;
    Ok(())
}

/// Sends a turn's input until a node accepts it (the same `turn_id` each
/// time, so a retry of an input that was stored is answered with its
/// turn); when it was accepted.
async fn send(clients: &Clients, rng: &mut Rng, session: &str, turn: usize) -> Result<Instant, String> {
    let turn_id = format!("t{turn}");
    let body = json!({
        "type": "client.message",
        "agent_id": AGENT,
        "turn_id": turn_id,
        "message": {"role": "user", "content": prompt(session, turn)},
    })
    .to_string();
    let started = Instant::now();
    loop {
        if started.elapsed() > clients.bound * 6 {
            return Err(format!("{session} {turn_id}: no node took the input within {:?}", clients.bound * 6));
        }
        let node = usize::try_from(rng.below(clients.urls.len() as u64)).unwrap_or(0);
        let request = clients
            .http
            .post(format!("{}/v1/sessions/{session}/input", clients.urls[node]))
            .header("content-type", "application/json")
            .body(body.clone())
            .send();
        match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
            Err(_) => return Err(format!("{session} {turn_id}: the input to node {node} hung")),
            Ok(Err(_)) => {
                clients.ledger.answer("connection error");
                // A client backs off before it tries again.
                pace(Duration::from_millis(100)).await;
            }
            Ok(Ok(response)) if response.status() == 202 => {
                clients.ledger.answer("202");
                return Ok(Instant::now());
            }
            Ok(Ok(response)) => refused(clients, session, response).await?,
        }
    }
}

/// One client: turns, one after the other, until told to stop.
async fn run_client(clients: Arc<Clients>, session: String) {
    let mut rng = Rng(clients.seed ^ fnv(&session));
    let mut stream = Stream { session: session.clone(), last: None, open: None, rng: Rng(rng.next()) };
    let mut turn = 0;
    while turn == 0 || !clients.stop.load(Ordering::SeqCst) {
        turn += 1;
        let accepted = match send(&clients, &mut rng, &session, turn).await {
            Ok(accepted) => accepted,
            Err(violation) => return clients.ledger.violation(violation),
        };
        let turn_id = format!("t{turn}");
        if let Err(violation) = stream.until_end(&clients, &turn_id).await {
            return clients.ledger.violation(violation);
        }
        lock(&clients.ledger.turns).push(Turn { session: session.clone(), turn_id, accepted, ended: Instant::now() });
    }
}

/// A session's history: per turn its user message, the two tool calls,
/// their two results and the answer; none lost, none twice.
async fn check_history(http: &reqwest::Client, url: &str, session: &str, turns: usize) -> Vec<String> {
    let mut problems = Vec::new();
    let snapshot = match http.get(format!("{url}/v1/sessions/{session}")).send().await {
        Ok(response) if response.status() == 200 => {
            serde_json::from_slice(&response.bytes().await.unwrap_or_default()).unwrap_or(Value::Null)
        }
        other => return vec![format!("{session}: no snapshot: {other:?}")],
    };
    if snapshot["status"] != "idle" {
        problems.push(format!("{session}: left {} after its turns", snapshot["status"]));
    }
    let messages = snapshot["messages"].as_array().cloned().unwrap_or_default();
    let users: Vec<String> = messages.iter().filter(|m| m["role"] == "user").map(text_of).collect();
    let expected: Vec<String> = (1..=turns).map(|turn| prompt(session, turn)).collect();
    if users != expected {
        problems.push(format!("{session}: user messages {users:?}, sent {expected:?}"));
    }
    let mut results: HashMap<String, usize> = HashMap::new();
    let mut calls = BTreeSet::new();
    for message in &messages {
        if let Some(id) = message["tool_call_id"].as_str() {
            *results.entry(id.to_owned()).or_default() += 1;
        }
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            if let Some(id) = call["id"].as_str()
                && !calls.insert(id.to_owned())
            {
                problems.push(format!("{session}: tool call {id} made twice"));
            }
        }
    }
    for call in &calls {
        match results.get(call) {
            Some(1) => {}
            Some(n) => problems.push(format!("{session}: tool call {call} has {n} results")),
            None => problems.push(format!("{session}: tool call {call} has no result")),
        }
    }
    if calls.len() != 2 * turns || messages.len() != 5 * turns {
        problems.push(format!(
            "{session}: {} messages and {} tool calls for {turns} turns (5 and 2 each)",
            messages.len(),
            calls.len()
        ));
    }
    problems
}

/// Every stored event of a session, from a node: `(seq, name)`.
async fn replay(
    http: &reqwest::Client,
    url: &str,
    session: &str,
    last_turn: &str,
) -> Result<Vec<(u64, String)>, String> {
    let mut response = http
        .get(format!("{url}/v1/sessions/{session}/events"))
        .send()
        .await
        .map_err(|e| format!("{session}: the replay: {e}"))?;
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let read = async {
        while let Ok(Some(bytes)) = response.chunk().await {
            for event in parser.push(&bytes).expect("events within the bound") {
                let Some(seq) = event.id.as_deref().and_then(|id| id.parse().ok()) else { continue };
                let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                let end = event.event == "turn.done" && data["turn_id"] == last_turn;
                events.push((seq, event.event));
                if end {
                    return true;
                }
            }
        }
        false
    };
    match tokio::time::timeout(Duration::from_secs(20), read).await {
        Ok(true) => Ok(events),
        _ => Err(format!("{session}: the replay did not reach the end of {last_turn}")),
    }
}

/// One run: what `CHAOS_ROUNDS` rounds of every fault do to `sessions`
/// clients on three nodes.
async fn chaos(rounds: u64, sessions: usize, seed: u64) {
    let lease = Duration::from_secs(4);
    let Some(mut rig) = Rig::start(3, lease, Duration::from_secs(1), &[], "").await else { return };
    let ledger = Arc::new(Ledger::default());
    let clients = Arc::new(Clients {
        urls: rig.urls(),
        http: client(),
        ledger: Arc::clone(&ledger),
        stop: AtomicBool::new(false),
        bound: lease + Duration::from_secs(5) + SLACK,
        seed,
    });
    let names: Vec<String> = (0..sessions).map(|i| format!("c{i:02}")).collect();
    let tasks: Vec<_> = names.iter().map(|name| tokio::spawn(run_client(Arc::clone(&clients), name.clone()))).collect();

    let started = Instant::now();
    let mut rng = Rng(seed);
    let pause = Duration::from_secs(3);
    let fault = |ledger: &Ledger, what: &str, node: Option<usize>, start: Instant| {
        eprintln!("chaos: {what}");
        lock(&ledger.faults).push(Fault { what: what.to_owned(), node, start, end: Instant::now() });
    };
    // The schedule's pauses (here, before each fault is undone, and after
    // it) are the chaos itself: the clients run through each state.
    pace(Duration::from_secs(2)).await;
    for round in 0..rounds {
        let pick = |rng: &mut Rng| usize::try_from(rng.below(3)).unwrap_or(0);

        let node = pick(&mut rng);
        let start = Instant::now();
        rig.kill(node);
        fault(&ledger, &format!("round {round}: kill -9 node {node}"), Some(node), start);
        pace(Duration::from_secs(1)).await;
        rig.boot(node).await;
        pace(pause).await;

        let node = pick(&mut rng);
        let start = Instant::now();
        rig.signal(node, "-STOP");
        fault(&ledger, &format!("round {round}: SIGSTOP node {node}"), Some(node), start);
        pace(lease + Duration::from_secs(1)).await;
        rig.signal(node, "-CONT");
        // Its requests in flight were held meanwhile: the node's fault
        // lasts until it runs again.
        lock(&ledger.faults).last_mut().expect("just pushed").end = Instant::now();
        pace(pause).await;

        let start = Instant::now();
        let cut = rig.terminate("application_name = 'subs'").await;
        fault(&ledger, &format!("round {round}: {cut} backends of the nodes terminated"), None, start);
        pace(pause).await;

        for mode in [StopMode::Fast, StopMode::Immediate] {
            let start = Instant::now();
            let pg = &rig.pg;
            tokio::task::block_in_place(|| pg.restart(mode));
            fault(&ledger, &format!("round {round}: PostgreSQL restarted ({mode:?})"), None, start);
            pace(pause).await;
        }

        let start = Instant::now();
        let pg = &rig.pg;
        tokio::task::block_in_place(|| pg.stop(StopMode::Fast));
        pace(lease + Duration::from_secs(2)).await;
        tokio::task::block_in_place(|| pg.start_again());
        fault(
            &ledger,
            &format!("round {round}: PostgreSQL down for {:?}", lease + Duration::from_secs(2)),
            None,
            start,
        );
        pace(pause).await;
    }
    clients.stop.store(true, Ordering::SeqCst);
    for task in tasks {
        if let Err(panic) = task.await {
            ledger.violation(format!("a client panicked: {panic}"));
        }
    }

    // Each accepted turn ended within its bound after the faults it met.
    let turns = lock(&ledger.turns).clone();
    for turn in &turns {
        let deadline = ledger.deadline(turn.accepted, clients.bound);
        if turn.ended > deadline {
            ledger.violation(format!(
                "{} {}: ended {:?} after it was accepted, {:?} past its bound",
                turn.session,
                turn.turn_id,
                turn.ended - turn.accepted,
                turn.ended - deadline
            ));
        }
    }
    // A stream silent on a node no fault touched is one that missed events.
    for stall in lock(&ledger.stalls).clone() {
        if !ledger.faulted(stall.node, stall.since, stall.until, clients.bound) {
            ledger.violation(format!(
                "{}: its stream on node {} was silent for {:?} ({:?} into the run) while no fault touched it",
                stall.session,
                stall.node,
                stall.until.duration_since(stall.since),
                stall.since.duration_since(started)
            ));
        }
    }
    // Histories and replays, read from a node other than the first.
    let mut per_session: BTreeMap<&str, usize> = BTreeMap::new();
    for turn in &turns {
        *per_session.entry(turn.session.as_str()).or_default() += 1;
    }
    let http = client();
    for (i, (session, count)) in per_session.iter().enumerate() {
        let url = &clients.urls[(i + 1) % clients.urls.len()];
        for problem in check_history(&http, url, session, *count).await {
            ledger.violation(problem);
        }
        match replay(&http, url, session, &format!("t{count}")).await {
            Ok(stored) => {
                let seen = lock(&ledger.seen).get(*session).cloned().unwrap_or_default();
                if seen != stored {
                    ledger.violation(format!(
                        "{session}: its stream passed {} events, the store holds {}",
                        seen.len(),
                        stored.len()
                    ));
                }
                let done = stored.iter().filter(|(_, name)| name == "turn.done").count();
                let started = stored.iter().filter(|(_, name)| name == "turn.started").count();
                if (started, done) != (*count, *count) {
                    ledger.violation(format!("{session}: {started} turn.started, {done} turn.done for {count} turns"));
                }
            }
            Err(problem) => ledger.violation(problem),
        }
    }
    let executions: u32 = lock(&rig.executions).values().sum();
    let answers = lock(&ledger.answers).clone();
    let violations = lock(&ledger.violations).clone();
    eprintln!(
        "chaos: seed {seed} · {rounds} round(s) · {sessions} clients · {} turns · {} tool executions for {} results · \
         answers {answers:?} · {} stalls · {} violations",
        turns.len(),
        executions,
        4 * turns.len() / 2,
        lock(&ledger.stalls).len(),
        violations.len()
    );
    if !violations.is_empty() {
        let logs = rig.logs();
        let shown = violations.iter().take(20).cloned().collect::<Vec<_>>().join("\n");
        let faults: Vec<String> =
            lock(&ledger.faults).iter().map(|f| format!("{} ({:?})", f.what, f.end - f.start)).collect();
        panic!("seed {seed}: {} violations (the first 20):\n{shown}\nfaults: {faults:#?}\n{logs}", violations.len());
    }
    assert!(!turns.is_empty(), "turns ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_through_kills_pauses_restarts_and_cut_connections_lose_and_stall_nothing() {
    let clock = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let seed = env_number("CHAOS_SEED", u64::try_from(clock.as_nanos() % u128::from(u64::MAX)).unwrap_or(1));
    let rounds = env_number("CHAOS_ROUNDS", 1);
    let sessions = usize::try_from(env_number("CHAOS_SESSIONS", 12)).unwrap_or(12);
    eprintln!("chaos harness: CHAOS_SEED={seed} CHAOS_ROUNDS={rounds} CHAOS_SESSIONS={sessions}");
    chaos(rounds, sessions, seed).await;
}

// ---------------------------------------------------------------------
// The two faults that left work stuck, one by one.

/// The snapshot of a session, from a node.
async fn snapshot(url: &str, session: &str) -> Value {
    let response = client().get(format!("{url}/v1/sessions/{session}")).send().await.expect("the node answers");
    assert_eq!(response.status(), 200, "the snapshot of {session}");
    serde_json::from_slice(&response.bytes().await.expect("a body")).expect("JSON")
}

/// Sends a turn and returns once it is accepted.
async fn accepted(url: &str, session: &str, turn: usize) {
    let body = json!({
        "type": "client.message",
        "agent_id": AGENT,
        "turn_id": format!("t{turn}"),
        "message": {"role": "user", "content": prompt(session, turn)},
    });
    let response = client()
        .post(format!("{url}/v1/sessions/{session}/input"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the node answers");
    assert_eq!(response.status(), 202, "{}", response.text().await.unwrap_or_default());
}

/// Waits (at most `patience`) for the session to be idle after `turns`
/// turns; how long it took.
async fn idle_after(url: &str, session: &str, turns: usize, patience: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    subs_tests::wait::until(patience, || async {
        let snap = snapshot(url, session).await;
        let done = snap["messages"].as_array().map_or(0, Vec::len) == 5 * turns;
        if snap["status"] == "idle" && done { Ok(()) } else { Err(snap) }
    })
    .await
    .map(|()| started.elapsed())
}

/// A commit cut in flight on a node that stays up (PostgreSQL restarting,
/// a backend terminated): the session is reloaded from the store and its
/// accepted turn ends on that node, with nothing but time passing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_commit_was_cut_ends_on_its_live_node() {
    let lease = Duration::from_secs(4);
    // A trigger that stalls the first call written, once: the commit
    // in flight the test cuts.
    let before = "CREATE SEQUENCE chaos_once; \
        CREATE FUNCTION chaos_stall() RETURNS trigger AS $$ BEGIN \
          IF nextval('chaos_once') = 1 THEN PERFORM pg_sleep(4); END IF; RETURN NEW; END $$ LANGUAGE plpgsql;";
    let Some(mut rig) = Rig::start(2, lease, Duration::from_secs(1), &[], before).await else { return };
    rig.sql("CREATE TRIGGER chaos_stall BEFORE INSERT ON calls FOR EACH ROW EXECUTE FUNCTION chaos_stall()").await;
    let url = rig.url(0);
    accepted(&url, "s", 1).await;
    let pid = subs_tests::wait::eventually(Duration::from_secs(20), "the node's commit stalls", || async {
        let rows = rig
            .sql("SELECT pid::text FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()")
            .await;
        rows.first().and_then(|row| row[0].clone())
    })
    .await;
    rig.sql(&format!("SELECT pg_terminate_backend({pid})")).await;
    let took = idle_after(&url, "s", 1, lease + Duration::from_secs(5) + SLACK).await;
    let logs = rig.logs();
    let took = took.unwrap_or_else(|snap| panic!("the turn did not end: {snap}\n{logs}"));
    eprintln!("the turn ended {took:?} after its commit was cut");
    let holder = rig.sql("SELECT node FROM leases WHERE session = 's'").await;
    assert!(rig.nodes[0].server.is_some() && rig.nodes[1].server.is_some(), "no node died");
    assert!(
        holder.first().is_some_and(|row| row[0].as_deref() != Some("chaos-1")),
        "node 0 kept the session: {holder:?}"
    );
    let problems = check_history(&client(), &rig.url(1), "s", 1).await;
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A node whose `LISTEN` connection was cut (and could not reconnect for
/// a while) missed the notices of the turn another node ran meanwhile:
/// once it listens again, its open stream of that session reads the
/// store and passes the turn on, without waiting for the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_on_a_node_whose_listener_was_cut_sees_the_turn_it_missed() {
    let lease = Duration::from_secs(4);
    // Node 1 connects as a role of its own, so that it alone can be kept
    // out; both roles own what the first node creates.
    let before = "CREATE ROLE chaos LOGIN; CREATE ROLE chaos_b LOGIN IN ROLE chaos; \
        DO $$ BEGIN EXECUTE format('ALTER DATABASE %I OWNER TO chaos', current_database()); END $$; \
        ALTER SCHEMA public OWNER TO chaos;";
    let specs = [NodeSpec { user: Some("chaos".to_owned()) }, NodeSpec { user: Some("chaos_b".to_owned()) }];
    let Some(mut rig) = Rig::start(2, lease, Duration::from_secs(1), &specs, before).await else { return };
    let (a, b) = (rig.url(0), rig.url(1));
    accepted(&a, "s", 1).await;
    idle_after(&a, "s", 1, Duration::from_secs(20)).await.expect("the first turn ends");

    // Node 1 follows the session, and has read its first turn.
    let mut stream = Stream { session: "s".to_owned(), last: None, open: None, rng: Rng(0) };
    let ledger = Arc::new(Ledger::default());
    let clients = Clients {
        urls: vec![b.clone()],
        http: client(),
        ledger: Arc::clone(&ledger),
        stop: AtomicBool::new(false),
        bound: Duration::from_secs(30),
        seed: 0,
    };
    stream.until_end(&clients, "t1").await.expect("node 1 streams the first turn");

    // Its listener is cut and cannot come back; node 0 runs a turn.
    rig.sql("ALTER ROLE chaos_b CONNECTION LIMIT 0").await;
    let cut = rig.terminate("usename = 'chaos_b' AND query LIKE 'LISTEN%'").await;
    assert_eq!(cut, 1, "node 1's listener");
    accepted(&a, "s", 2).await;
    idle_after(&a, "s", 2, Duration::from_secs(20)).await.expect("the second turn ends on node 0");
    // Node 1 stays cut off a while after the turn's notices went out.
    pace(Duration::from_millis(500)).await;
    rig.sql("ALTER ROLE chaos_b CONNECTION LIMIT -1").await;

    // Node 1's stream passes the second turn on, all of it, in order.
    let clients = Clients { bound: Duration::from_secs(15), ..clients };
    let streamed = tokio::time::timeout(Duration::from_secs(20), stream.until_end(&clients, "t2")).await;
    let logs = rig.logs();
    match streamed {
        Ok(Ok(())) => {}
        Ok(Err(problem)) => panic!("{problem}\n{logs}"),
        Err(_) => panic!("the stream on node 1 stayed silent\n{logs}"),
    }
    let stalls = lock(&ledger.stalls).clone();
    assert!(stalls.is_empty(), "the stream went silent: {stalls:?}\n{logs}");
    let stored = replay(&client(), &a, "s", "t2").await.expect("the replay");
    assert_eq!(lock(&ledger.seen).get("s").cloned().unwrap_or_default(), stored, "every event once, in order");
}

// ---------------------------------------------------------------------
// Failover times (a measurement, not run in CI).

/// How long a dead or paused node's session waits for another node: from
/// the fault to the moment a node that was not touched streams the next
/// stored event of a turn that was in flight on the faulted node. The
/// default settings (10 s leases, renewed every 2 s, a scan every 2 s).
/// `CHAOS_FAILOVER_TRIALS` (default 10) trials per fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement for docs/benchmarks.md; run it with --ignored --nocapture"]
async fn failover_times() {
    let trials = usize::try_from(env_number("CHAOS_FAILOVER_TRIALS", 10)).unwrap_or(10);
    let Some(mut rig) = Rig::start(3, Duration::from_secs(10), Duration::from_secs(2), &[], "").await else {
        return;
    };
    let mut table = Vec::new();
    for fault in ["kill -9", "SIGSTOP"] {
        let mut times = Vec::new();
        for trial in 0..trials {
            let session = format!("{}-{trial}", if fault == "kill -9" { "k" } else { "p" });
            // The turn's first tool execution waits at the gate.
            rig.gate.hold(true);
            let entry = trial % 3;
            accepted(&rig.url(entry), &session, 1).await;
            subs_tests::wait::eventually(Duration::from_secs(30), "a tool execution waits", || async {
                rig.gate.waiting.load(Ordering::SeqCst) > 0
            })
            .await;
            let holder = rig.sql(&format!("SELECT node FROM leases WHERE session = '{session}'")).await;
            let holder = holder.first().and_then(|row| row[0].clone()).and_then(|name| rig.node_named(&name));
            let holder = holder.expect("a node holds the session");
            let watcher = (holder + 1) % 3;
            // A stream on a node that is not faulted, from the last event.
            let mut response = client()
                .get(format!("{}/v1/sessions/{session}/events", rig.url(watcher)))
                .send()
                .await
                .expect("the watcher answers");
            let mut parser = SseParser::new();
            let mut before = 0;
            // The events so far: up to the tool calls' message.
            let read_until = |parser: &mut SseParser, bytes: &[u8], want_tool: bool| {
                parser.push(bytes).expect("events").into_iter().any(|e| {
                    let data: Value = serde_json::from_str(&e.data).unwrap_or(Value::Null);
                    e.event == "message"
                        && (data["message"]["role"] == "tool") == want_tool
                        && (want_tool || data["message"]["tool_calls"].is_array())
                })
            };
            loop {
                let bytes = tokio::time::timeout(Duration::from_secs(30), response.chunk())
                    .await
                    .expect("events")
                    .expect("a stream")
                    .expect("not ended");
                before += 1;
                if read_until(&mut parser, &bytes, false) {
                    break;
                }
            }
            let at = Instant::now();
            if fault == "kill -9" {
                rig.kill(holder);
            } else {
                rig.signal(holder, "-STOP");
            }
            rig.gate.hold(false);
            loop {
                let bytes = tokio::time::timeout(Duration::from_secs(60), response.chunk())
                    .await
                    .expect("the session fails over")
                    .expect("a stream")
                    .expect("not ended");
                if read_until(&mut parser, &bytes, true) {
                    break;
                }
            }
            let took = at.elapsed();
            times.push(took);
            eprintln!("failover: {fault} trial {trial}: {took:?} (node {holder}, watched from {watcher}, {before})");
            if fault == "kill -9" {
                rig.boot(holder).await;
            } else {
                rig.signal(holder, "-CONT");
            }
            idle_after(&rig.url(watcher), &session, 1, Duration::from_secs(60)).await.expect("the turn ends");
        }
        times.sort();
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        table.push((fault, times.len(), at(0.5), at(0.9), times[times.len() - 1]));
    }
    eprintln!("| fault | trials | p50 | p90 | max |");
    eprintln!("| --- | --- | --- | --- | --- |");
    for (fault, n, p50, p90, max) in table {
        eprintln!(
            "| {fault} | {n} | {:.2} s | {:.2} s | {:.2} s |",
            p50.as_secs_f64(),
            p90.as_secs_f64(),
            max.as_secs_f64()
        );
    }
}
