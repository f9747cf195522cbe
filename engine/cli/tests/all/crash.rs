//! The crash harness: the real `subs serve`, killed with SIGKILL at random
//! instants while many sessions run tool turns, restarted on the same data
//! directory and port each time; then the promises of docs/durability.md are
//! checked against a run that was never killed.
//!
//! - The LLM is the fake provider, answering by looking at each request:
//!   two parallel `add` calls after a user message, a sentence quoting the
//!   results after tool results. Its call ids come from the prompt, so two
//!   runs of one session record the same conversation.
//! - The agent is the `tools` example served over HTTP by
//!   `subs-http-worker`, counting every tool execution by call id.
//! - Each session is a client that sends its turns with `"stream": true`
//!   and its own `turn_id`; when the server dies under it, it waits for the
//!   restart and sends the same input again, which either starts the turn
//!   (the first try was never committed) or streams the existing one.
//!
//! One logical clock orders tool executions, kills, and the moments clients
//! see a tool result committed (its `message` event), so "executed again
//! after its result was committed" is a fact the harness observes, not a
//! guess about timing.
//!
//! The same harness runs several nodes on one PostgreSQL database: each
//! input (and each retry of it) goes to a node picked at random, one node
//! at a time is killed and restarted, and the checks read every session
//! from a node other than the one that ran it.
//!
//! `CRASH_SEED`, `CRASH_SESSIONS`, `CRASH_TURNS`, `CRASH_KILLS` change the
//! run (`CRASH_PG_SESSIONS`, `CRASH_PG_KILLS` the PostgreSQL one); the seed
//! is printed either way. docs/reliability.md has the longer form.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use subs_fake_provider::{FakeProvider, Format, Reply, ScriptedCall};
use subs_protocol::sse::SseParser;
use subs_sdk::prelude::{Agent, Context, DecideError, DecisionRequest, DecisionResponse, Trigger};
use tokio::sync::watch;

use crate::Server;

/// The agent id the worker is registered under.
const AGENT: &str = "crash";

/// How long all sessions may take to finish once the last kill is done.
const SETTLE: Duration = Duration::from_secs(60);

/// What one run does.
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// Seeds the kill instants and the prompts.
    seed: u64,
    /// Sessions running at once.
    sessions: usize,
    /// Turns each session runs, one after the other.
    turns: usize,
    /// Times a server is killed.
    kills: usize,
    /// Servers sharing the store (one at a time is killed).
    nodes: usize,
}

impl Plan {
    /// The CI form, or what the `CRASH_*` variables say.
    fn from_env() -> Plan {
        Self::read("CRASH_", 20, 5, 1)
    }

    /// The CI form on PostgreSQL: three nodes, 100 sessions, 10 kills.
    fn postgres_from_env() -> Plan {
        Self::read("CRASH_PG_", 100, 10, 3)
    }

    fn read(prefix: &str, sessions: u64, kills: u64, nodes: u64) -> Plan {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let number = |name: &str, default: u64| {
            var(name).map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{name}={v} is not a number")))
        };
        let clock = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let fresh = u64::try_from(clock.as_nanos() % u128::from(u64::MAX)).unwrap_or(1);
        let count = |name: &str, default: u64| {
            usize::try_from(number(&format!("{prefix}{name}"), default)).expect("a count that fits")
        };
        Plan {
            seed: number("CRASH_SEED", fresh),
            sessions: count("SESSIONS", sessions),
            turns: count("TURNS", 2),
            kills: count("KILLS", kills),
            nodes: count("NODES", nodes).max(1),
        }
    }
}

/// splitmix64: small, seeded, the same everywhere.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// FNV-1a: a stable hash for ids and latencies derived from text.
pub(crate) fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What happened, on one logical clock.
#[derive(Default)]
struct Ledger {
    clock: AtomicU64,
    /// Call id → the ticks at which an execution of it began.
    executions: Mutex<HashMap<String, Vec<u64>>>,
    /// Call id → the tick at which a client first saw its result recorded.
    committed: Mutex<HashMap<String, u64>>,
    /// Each kill: the tick just before SIGKILL, and the tick at which the
    /// restarted server was up again.
    kills: Mutex<Vec<Kill>>,
}

impl Ledger {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    fn saw_result(&self, call: &str) {
        let tick = self.tick();
        lock(&self.committed).entry(call.to_owned()).or_insert(tick);
    }
}

/// When a kill happened, on the ledger's clock.
#[derive(Clone, Copy)]
struct Kill {
    /// Just before SIGKILL was sent.
    at: u64,
    /// When the next server was up. An execution between `at` and `ready`
    /// was sent by the killed server (a request already on its way reaches
    /// the worker after the sender died), never by the next one.
    ready: u64,
}

impl Kill {
    /// Whether this kill ended a server life that could have run a call
    /// first executed at `first` and seen committed at `seen`: it came
    /// after the first execution, or that execution came from the server
    /// it killed; and before the result was committed.
    fn interrupts(&self, first: u64, seen: u64) -> bool {
        self.at < seen && (self.at > first || first < self.ready)
    }
}

/// The `tools` example, counting the tool executions it runs.
struct Counting {
    tools: tools::Tools,
    ledger: Arc<Ledger>,
}

impl Agent for Counting {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        if let Trigger::ToolExecute(call) = &request.trigger {
            let tick = self.ledger.tick();
            lock(&self.ledger.executions).entry(call.id.clone()).or_default().push(tick);
            // A tool takes a moment, so kills land while tools run too.
            subs_tests::wait::pace_blocking(Duration::from_millis(fnv(&call.id) % 15));
        }
        self.tools.decide(request, cx)
    }
}

/// Serves a counting worker on a free loopback port; its URL.
async fn worker(ledger: Arc<Ledger>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let addr = listener.local_addr().expect("a bound address");
    let app = subs_http_worker::router(Counting { tools: tools::Tools::new(), ledger });
    tokio::spawn(subs_http_worker::serve_router(listener, app, std::future::pending()));
    format!("http://{addr}/")
}

/// The text of a message's `content` (a string, or text parts).
fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// The fake model: after a user message, two `add` calls on the numbers
/// the message names, with ids derived from it; after tool results, a
/// sentence quoting them. Latency depends on the request, so runs repeat.
fn respond(body: &Value, _format: Format) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let latency = Duration::from_millis(5 + fnv(&body.to_string()) % 25);
    let Some(last) = messages.last() else {
        return Reply::text("nothing to answer").with_latency(latency);
    };
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
        return Reply::tool_calls(calls).with_latency(latency);
    }
    let results: Vec<String> = messages
        .iter()
        .rev()
        .take_while(|m| m["role"] == "tool")
        .map(text_of)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    Reply::text(&format!("The sums are {}.", results.join(" and "))).with_latency(latency)
}

/// The prompt of turn `turn` of session `session`.
fn prompt(seed: u64, session: &str, turn: usize) -> String {
    let mut rng = Rng(seed ^ fnv(session) ^ (turn as u64));
    let mut n = || rng.below(1000);
    format!("{session} turn {turn}: add {} and {}, then {} and {}", n(), n(), n(), n())
}

/// Where the server is: its generation (one more per restart), and
/// whether it is the last one (no kill will come).
#[derive(Debug, Clone, Copy)]
struct Up {
    generation: usize,
    last: bool,
}

/// What the sessions share.
struct Shared {
    /// Every node's URL.
    urls: Vec<String>,
    seed: u64,
    turns: usize,
    ledger: Arc<Ledger>,
    up: watch::Receiver<Up>,
    http: reqwest::Client,
    /// Turns finished so far, all sessions.
    finished: AtomicUsize,
}

/// A client that never reuses a connection: after a kill, a pooled one
/// would be dead.
fn client() -> reqwest::Client {
    reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("an HTTP client")
}

impl Shared {
    /// The node try `n` of a session's turn goes to: one at random, seeded.
    fn url_for(&self, session: &str, turn: usize, n: u64) -> &str {
        let pick = Rng(self.seed ^ fnv(session) ^ (turn as u64) << 32 ^ n).below(self.urls.len() as u64);
        &self.urls[usize::try_from(pick).unwrap_or(0)]
    }
}

/// How many times a turn's input is sent to another node after a stream
/// broke, when several nodes serve: each kill breaks the streams of the
/// node killed, and a forwarded input may wait out a dead holder's lease.
const NODE_TRIES: u64 = 200;

/// Runs a session's turns to their end, across restarts. `Err` says what
/// went wrong.
async fn run_session(shared: Arc<Shared>, session: String) -> Result<(), String> {
    for turn in 1..=shared.turns {
        let turn_id = format!("turn-{turn}");
        let body = json!({
            "type": "client.message",
            "agent_id": AGENT,
            "turn_id": turn_id,
            "message": {"role": "user", "content": prompt(shared.seed, &session, turn)},
            "stream": true,
        });
        let mut tries_on_the_last_server = 0;
        let mut tries = 0;
        loop {
            let up = *shared.up.borrow();
            let url = shared.url_for(&session, turn, tries);
            tries += 1;
            let outcome = stream_turn(&shared, url, &session, &turn_id, &body).await;
            match outcome {
                Ok(true) => break,
                Ok(false) => {}
                Err(violation) => return Err(violation),
            }
            if shared.urls.len() > 1 {
                // Another node serves: send the same input there.
                if tries > NODE_TRIES {
                    return Err(format!("{session} {turn_id}: {NODE_TRIES} streams broke"));
                }
                // A client backs off before it tries again.
                subs_tests::wait::pace(Duration::from_millis(50)).await;
                continue;
            }
            // The stream broke. A kill explains that: wait for the
            // restart. On the last server nothing does.
            let mut up_rx = shared.up.clone();
            let now = *up_rx
                .wait_for(|now| now.generation > up.generation || now.last)
                .await
                .map_err(|_| "the harness stopped".to_owned())?;
            if now.last && now.generation == up.generation {
                tries_on_the_last_server += 1;
                if tries_on_the_last_server > 3 {
                    return Err(format!("{session} {turn_id}: the stream of the last server broke 3 times"));
                }
            }
        }
        shared.finished.fetch_add(1, Ordering::SeqCst);
    }
    Ok(())
}

/// Sends the turn's input and reads its stream: `Ok(true)` when it ended
/// with `turn.done`, `Ok(false)` when the connection failed or broke first,
/// `Err` when the server answered something it must not.
async fn stream_turn(shared: &Shared, url: &str, session: &str, turn_id: &str, body: &Value) -> Result<bool, String> {
    let url = format!("{url}/v1/sessions/{session}/input");
    let Ok(mut response) =
        shared.http.post(url).header("content-type", "application/json").body(body.to_string()).send().await
    else {
        return Ok(false);
    };
    if response.status() != 200 {
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        return Err(format!("{session} {turn_id}: the input was answered {status}: {text}"));
    }
    let mut parser = SseParser::new();
    while let Ok(Some(bytes)) = response.chunk().await {
        for event in parser.push(&bytes).expect("events within the bound") {
            let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
            match event.event.as_str() {
                "message" if data["message"]["role"] == "tool" => {
                    if let Some(call) = data["message"]["tool_call_id"].as_str() {
                        shared.ledger.saw_result(call);
                    }
                }
                "turn.done" if data["turn_id"] == turn_id => return Ok(true),
                "turn.failed" => return Err(format!("{session} {turn_id}: turn.failed {data}")),
                _ => {}
            }
        }
    }
    Ok(false)
}

/// Servers with the fake provider as provider `fake` and the counting
/// worker registered as agent [`AGENT`]: one on redb, or several on one
/// PostgreSQL database (`store`), each with a data directory of its own.
struct Setup {
    /// Holds the config file and the data directories.
    dir: tempfile::TempDir,
    config: std::path::PathBuf,
    ledger: Arc<Ledger>,
}

impl Setup {
    async fn new(fake: &FakeProvider, store: Option<&str>) -> Setup {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("subs.toml");
        let mut toml =
            format!("[[providers]]\nname = \"fake\"\nformat = \"openai\"\nbase_url = \"{}\"\n", fake.openai_base_url());
        if let Some(url) = store {
            // Short leases: a killed node's sessions are taken over within
            // two seconds.
            toml.push_str(&format!("\n[store]\nurl = \"{url}\"\nlease_secs = 2\nrenew_secs = 1\n"));
        }
        std::fs::write(&config, toml).expect("the config file is written");
        Setup { dir, config, ledger: Arc::default() }
    }

    fn start(&self, node: usize, listen: &str) -> Server {
        let data = self.dir.path().join(format!("data-{node}"));
        let args = ["--data", path(&data), "--config", path(&self.config), "--default-model", "fake/crash-model"];
        Server::start_with(&args, listen)
    }

    /// Starts a node in the background (starting blocks on its output).
    async fn restart(self: &Arc<Self>, node: usize, listen: String) -> Server {
        let setup = Arc::clone(self);
        tokio::task::spawn_blocking(move || setup.start(node, &listen)).await.expect("the server starts")
    }
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// Registers the counting worker as agent [`AGENT`].
async fn register(url: &str, worker: &str) {
    let put = client()
        .put(format!("{url}/v1/agents/{AGENT}"))
        .header("content-type", "application/json")
        .body(json!({"url": worker}).to_string())
        .send()
        .await
        .expect("the server answers");
    assert!(put.status().is_success(), "registering the worker: {}", put.status());
}

fn names(sessions: usize) -> Vec<String> {
    (0..sessions).map(|i| format!("s{i:03}")).collect()
}

/// Runs every session to its end; the sessions still running after
/// `patience`, with why the others failed.
async fn run_all(shared: &Arc<Shared>, sessions: &[String], patience: Duration) -> Vec<String> {
    let tasks: Vec<_> =
        sessions.iter().map(|s| (s.clone(), tokio::spawn(run_session(Arc::clone(shared), s.clone())))).collect();
    let deadline = tokio::time::Instant::now() + patience;
    let mut problems = Vec::new();
    for (session, task) in tasks {
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(problem))) => problems.push(problem),
            Ok(Err(panic)) => problems.push(format!("{session}: the client panicked: {panic}")),
            Err(_) => problems.push(format!("{session}: did not finish its turns within {patience:?}")),
        }
    }
    problems
}

/// A session's snapshot.
async fn snapshot(url: &str, session: &str) -> Value {
    let response = client().get(format!("{url}/v1/sessions/{session}")).send().await.expect("the server answers");
    assert_eq!(response.status(), 200, "the snapshot of {session}");
    serde_json::from_slice(&response.bytes().await.expect("a body")).expect("JSON")
}

/// The active path without message ids.
fn without_ids(messages: &Value) -> Vec<Value> {
    messages
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let mut m = m.clone();
            m.as_object_mut().map(|o| o.remove("id"));
            m
        })
        .collect()
}

/// Every stored event of a session from the first (or after
/// `Last-Event-ID: after`), up to the `turn.done` of `last_turn`: `(id,
/// name, data)`.
async fn replay(
    url: &str,
    session: &str,
    last_turn: &str,
    after: Option<u64>,
) -> Result<Vec<(Option<u64>, String, Value)>, String> {
    let mut request = client().get(format!("{url}/v1/sessions/{session}/events"));
    if let Some(after) = after {
        request = request.header("last-event-id", after.to_string());
    }
    let mut response = request.send().await.map_err(|e| format!("{session}: the events: {e}"))?;
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let read = async {
        while let Ok(Some(bytes)) = response.chunk().await {
            for e in parser.push(&bytes).expect("events within the bound") {
                let data: Value = serde_json::from_str(&e.data).unwrap_or(Value::Null);
                let end = matches!(e.event.as_str(), "turn.done" | "turn.failed") && data["turn_id"] == last_turn;
                events.push((e.id.and_then(|i| i.parse().ok()), e.event, data));
                if end {
                    return true;
                }
            }
        }
        false
    };
    match tokio::time::timeout(Duration::from_secs(10), read).await {
        Ok(true) => Ok(events),
        _ => Err(format!("{session}: the replay did not reach the end of {last_turn}")),
    }
}

/// The checks of one session after the killed run: its problems.
async fn check_session(
    url: &str,
    replay_url: &str,
    session: &str,
    turns: usize,
    reference: &[Value],
    ledger: &Ledger,
) -> (Vec<String>, Vec<String>) {
    let mut problems = Vec::new();
    let snap = snapshot(url, session).await;
    if snap["status"] != "idle" {
        problems.push(format!("{session}: left {} after its last turn", snap["status"]));
    }
    if !snap["calls"].as_array().is_none_or(Vec::is_empty) {
        problems.push(format!("{session}: calls still in flight: {}", snap["calls"]));
    }

    // The history is the fault-free run's, ids aside.
    let history = without_ids(&snap["messages"]);
    if history != reference {
        problems.push(format!(
            "{session}: the history differs from the fault-free run's:\n  killed: {}\n  fault-free: {}",
            json!(history),
            json!(reference)
        ));
    }

    // Each tool call has exactly one recorded result.
    let messages = snap["messages"].as_array().cloned().unwrap_or_default();
    let mut calls: Vec<String> = Vec::new();
    let mut results: BTreeMap<String, usize> = BTreeMap::new();
    for m in &messages {
        for call in m["tool_calls"].as_array().into_iter().flatten() {
            calls.push(call["id"].as_str().unwrap_or_default().to_owned());
        }
        if let Some(id) = m["tool_call_id"].as_str() {
            *results.entry(id.to_owned()).or_default() += 1;
        }
    }
    for call in &calls {
        match results.get(call) {
            Some(1) => {}
            Some(n) => problems.push(format!("{session}: call {call} has {n} results")),
            None => problems.push(format!("{session}: call {call} has no result")),
        }
    }

    // The replay from the first event is the history, each event once.
    let last_turn = format!("turn-{turns}");
    match replay(replay_url, session, &last_turn, None).await {
        Err(problem) => problems.push(problem),
        Ok(events) => {
            let ids: Vec<u64> = events.iter().filter_map(|e| e.0).collect();
            if ids.windows(2).any(|w| w[1] != w[0] + 1) {
                problems.push(format!("{session}: event ids are not consecutive: {ids:?}"));
            }
            // A client reconnecting, to another node, from the middle.
            let middle = ids.get(ids.len() / 2).copied();
            match replay(url, session, &last_turn, middle).await {
                Err(problem) => problems.push(format!("{problem} (from event {middle:?})")),
                Ok(rest) => {
                    let expected: Vec<_> = events.iter().filter(|e| e.0 > middle).cloned().collect();
                    if rest != expected {
                        problems.push(format!("{session}: resumed after {middle:?}, the stream was not the rest"));
                    }
                }
            }
            let replayed: Vec<&Value> = events.iter().filter(|e| e.1 == "message").map(|e| &e.2["message"]).collect();
            if replayed != messages.iter().collect::<Vec<_>>() {
                problems.push(format!(
                    "{session}: the replayed messages are not the history:\n  replayed: {}\n  history: {}",
                    json!(replayed),
                    json!(messages)
                ));
            }
            for turn in 1..=turns {
                let id = format!("turn-{turn}");
                let count = |name: &str| events.iter().filter(|e| e.1 == name && e.2["turn_id"] == id).count();
                let (started, done, failed) = (count("turn.started"), count("turn.done"), count("turn.failed"));
                if (started, done, failed) != (1, 1, 0) {
                    problems.push(format!(
                        "{session} {id}: {started} turn.started, {done} turn.done, {failed} turn.failed in the replay"
                    ));
                }
            }
        }
    }

    // Each tool ran once per committed result: again only before its
    // result was committed, and only across a kill.
    let executions = lock(&ledger.executions).clone();
    let committed = lock(&ledger.committed).clone();
    let kills = lock(&ledger.kills).clone();
    let mut reruns = Vec::new();
    for call in &calls {
        let ran = executions.get(call).cloned().unwrap_or_default();
        let Some(&first) = ran.first() else {
            problems.push(format!("{session}: call {call} has a result but never ran"));
            continue;
        };
        let seen = committed.get(call).copied().unwrap_or(u64::MAX);
        if let Some(late) = ran.iter().find(|t| **t > seen) {
            problems.push(format!(
                "{session}: call {call} ran at tick {late}, after its result was seen committed at tick {seen}"
            ));
        }
        let kills_between = kills.iter().filter(|k| k.interrupts(first, seen)).count();
        if ran.len() > 1 + kills_between {
            problems.push(format!(
                "{session}: call {call} ran {} times with {kills_between} kills while it was open",
                ran.len()
            ));
        }
        if ran.len() > 1 {
            reruns.push(format!("{call} ×{}", ran.len()));
        }
    }
    (problems, reruns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_at_random_instants_the_engine_loses_and_repeats_nothing() {
    let plan = Plan::from_env();
    eprintln!(
        "crash harness: CRASH_SEED={} CRASH_SESSIONS={} CRASH_TURNS={} CRASH_KILLS={}",
        plan.seed, plan.sessions, plan.turns, plan.kills
    );
    run(plan, || None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_on_postgres_killed_one_at_a_time_lose_and_repeat_nothing() {
    let Some(cluster) = subs_store_postgres::testing::TestCluster::shared() else { return };
    let plan = Plan::postgres_from_env();
    eprintln!(
        "crash harness (PostgreSQL): CRASH_SEED={} CRASH_PG_SESSIONS={} CRASH_PG_TURNS={} CRASH_PG_KILLS={} \
         CRASH_PG_NODES={}",
        plan.seed, plan.sessions, plan.turns, plan.kills, plan.nodes
    );
    run(plan, || Some(cluster.fresh_database())).await;
}

/// Starts a setup's nodes on free ports.
async fn start_nodes(setup: &Arc<Setup>, nodes: usize) -> Vec<Server> {
    let mut servers = Vec::with_capacity(nodes);
    for node in 0..nodes {
        servers.push(setup.restart(node, "127.0.0.1:0".to_owned()).await);
    }
    servers
}

/// One fault-free run, then one killed run of the same sessions, on stores
/// made by `store` (a PostgreSQL database's URL; redb when `None`).
async fn run(plan: Plan, store: impl Fn() -> Option<String>) {
    let fake = FakeProvider::start().await;
    fake.respond_with(respond);
    let sessions = names(plan.sessions);

    // The fault-free run: the histories to match, and how long the work
    // takes when nothing stops it.
    let clean = Arc::new(Setup::new(&fake, store().as_deref()).await);
    let worker_url = worker(Arc::clone(&clean.ledger)).await;
    let servers = start_nodes(&clean, plan.nodes).await;
    register(&servers[0].url, &worker_url).await;
    let (_up, up) = watch::channel(Up { generation: 0, last: true });
    let shared = Arc::new(Shared {
        urls: servers.iter().map(|s| s.url.clone()).collect(),
        seed: plan.seed,
        turns: plan.turns,
        ledger: Arc::clone(&clean.ledger),
        up,
        http: client(),
        finished: AtomicUsize::new(0),
    });
    let started = Instant::now();
    let problems = run_all(&shared, &sessions, SETTLE).await;
    let fault_free = started.elapsed();
    assert!(problems.is_empty(), "the fault-free run failed: {problems:#?}");
    let mut reference = HashMap::new();
    for session in &sessions {
        let messages = without_ids(&snapshot(&servers[0].url, session).await["messages"]);
        assert_eq!(messages.len(), 5 * plan.turns, "{session}: user, tool calls, two results, answer per turn");
        reference.insert(session.clone(), messages);
    }
    assert!(lock(&clean.ledger.executions).values().all(|ran| ran.len() == 1), "without kills each tool runs once");
    drop(servers);

    // The killed run. Kill k comes at a random instant of the k-th
    // server's life, at most a (kills+1)-th of the fault-free run's
    // length, so every kill lands while work is left; with several nodes,
    // a node picked at random is killed and restarted on its port.
    let killed = Arc::new(Setup::new(&fake, store().as_deref()).await);
    let worker_url = worker(Arc::clone(&killed.ledger)).await;
    let mut servers = start_nodes(&killed, plan.nodes).await;
    register(&servers[0].url, &worker_url).await;
    let (up_tx, up) = watch::channel(Up { generation: 0, last: plan.kills == 0 });
    let shared = Arc::new(Shared {
        urls: servers.iter().map(|s| s.url.clone()).collect(),
        seed: plan.seed,
        turns: plan.turns,
        ledger: Arc::clone(&killed.ledger),
        up,
        http: client(),
        finished: AtomicUsize::new(0),
    });
    let total = plan.sessions * plan.turns;
    let clients = {
        let shared = Arc::clone(&shared);
        let sessions = sessions.clone();
        tokio::spawn(async move { run_all(&shared, &sessions, SETTLE * 2).await })
    };
    let mut rng = Rng(plan.seed);
    let window = u64::try_from(fault_free.as_millis()).unwrap_or(u64::MAX) / (plan.kills as u64 + 1);
    let mut mid_turn = 0;
    let run_started = Instant::now();
    for k in 1..=plan.kills {
        // The kills' schedule: each at a random moment of its window.
        subs_tests::wait::pace(Duration::from_millis(rng.below(window.max(2)))).await;
        if shared.finished.load(Ordering::SeqCst) < total {
            mid_turn += 1;
        }
        let node = usize::try_from(rng.below(plan.nodes as u64)).unwrap_or(0);
        let at = killed.ledger.tick();
        let server = &mut servers[node];
        server.process.child.kill().expect("SIGKILL is sent");
        server.process.child.wait().expect("the killed server is reaped");
        let addr = server.addr.clone();
        *server = killed.restart(node, addr).await;
        let ready = killed.ledger.tick();
        lock(&killed.ledger.kills).push(Kill { at, ready });
        up_tx.send_replace(Up { generation: k, last: k == plan.kills });
    }
    let mut problems = clients.await.expect("the clients finish");
    let elapsed = run_started.elapsed();

    let mut reruns = Vec::new();
    let mut checks = tokio::task::JoinSet::new();
    for session in &sessions {
        // Read from two nodes (the same one on redb): any node answers
        // for any session, its stream gap-free.
        let at = usize::try_from(fnv(session) % plan.nodes as u64).unwrap_or(0);
        let url = servers[at].url.clone();
        let replay_url = servers[(at + 1) % plan.nodes].url.clone();
        let (session, reference) = (session.clone(), reference[session].clone());
        let (ledger, turns) = (Arc::clone(&killed.ledger), plan.turns);
        checks.spawn(async move { check_session(&url, &replay_url, &session, turns, &reference, &ledger).await });
    }
    while let Some(checked) = checks.join_next().await {
        let (found, again) = checked.expect("a check finishes");
        problems.extend(found);
        reruns.extend(again);
    }
    problems.sort();
    reruns.sort();
    let executions: usize = lock(&killed.ledger.executions).values().map(Vec::len).sum();
    let executed_calls = lock(&killed.ledger.executions).len();
    let committed_calls = 2 * total;
    if executed_calls != committed_calls {
        problems.push(format!("{executed_calls} distinct calls ran; {committed_calls} were recorded"));
    }
    eprintln!(
        "crash harness: seed {} · {} node(s) · {} sessions × {} turns · {} kills ({mid_turn} with turns open) · \
         fault-free {fault_free:?}, killed {elapsed:?} · {executions} tool executions for {committed_calls} results \
         (run again: {reruns:?}) · {} violations",
        plan.seed,
        plan.nodes,
        plan.sessions,
        plan.turns,
        plan.kills,
        problems.len()
    );
    let shown = problems.iter().take(20).cloned().collect::<Vec<_>>().join("\n");
    assert!(problems.is_empty(), "seed {}: {} violations (the first 20):\n{shown}", plan.seed, problems.len());
}

/// The `tools` example, counting executions, whose first tool execution
/// waits until the test opens the gate: the node that sent it is then
/// paused with the call in flight.
struct Gated {
    counting: Counting,
    gate: Arc<Gate>,
}

#[derive(Default)]
struct Gate {
    /// Whether the first execution started, and whether it may finish.
    state: Mutex<(bool, bool)>,
    changed: std::sync::Condvar,
}

impl Gate {
    fn wait_started(&self) {
        let state = lock(&self.state);
        let (state, timeout) = self
            .changed
            .wait_timeout_while(state, Duration::from_secs(30), |(started, _)| !*started)
            .unwrap_or_else(PoisonError::into_inner);
        assert!(state.0 && !timeout.timed_out(), "the first tool execution started");
    }

    fn open(&self) {
        lock(&self.state).1 = true;
        self.changed.notify_all();
    }
}

impl Agent for Gated {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        if matches!(request.trigger, Trigger::ToolExecute(_)) {
            let mut state = lock(&self.gate.state);
            if !state.0 {
                state.0 = true;
                self.gate.changed.notify_all();
                let _ = self.gate.changed.wait_timeout_while(state, Duration::from_secs(60), |(_, open)| !*open);
            }
        }
        self.counting.decide(request, cx)
    }
}

/// Sends a signal to a process, as an operator (or the OS) would.
fn signal(server: &Server, signal: &str) {
    let pid = server.process.child.id().to_string();
    let status = std::process::Command::new("kill").args([signal, &pid]).status().expect("kill runs");
    assert!(status.success(), "kill {signal} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_paused_past_its_lease_is_fenced_and_gives_the_session_up() {
    let Some(cluster) = subs_store_postgres::testing::TestCluster::shared() else { return };
    let fake = FakeProvider::start().await;
    fake.respond_with(respond);
    let setup = Arc::new(Setup::new(&fake, Some(&cluster.fresh_database())).await);
    let gate = Arc::new(Gate::default());
    let worker_url = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let counting = Counting { tools: tools::Tools::new(), ledger: Arc::clone(&setup.ledger) };
        let app = subs_http_worker::router(Gated { counting, gate: Arc::clone(&gate) });
        tokio::spawn(subs_http_worker::serve_router(listener, app, std::future::pending()));
        format!("http://{addr}/")
    };
    let mut a = setup.restart(0, "127.0.0.1:0".to_owned()).await;
    let b = setup.restart(1, "127.0.0.1:0".to_owned()).await;
    register(&a.url, &worker_url).await;

    // Node A takes the session and sends the first tool execution, which
    // waits at the gate; then A is stopped.
    let body = json!({
        "type": "client.message",
        "agent_id": AGENT,
        "turn_id": "turn-1",
        "message": {"role": "user", "content": prompt(1, "s", 1)},
    });
    let sent = client()
        .post(format!("{}/v1/sessions/s/input", a.url))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("node A answers");
    assert_eq!(sent.status(), 202, "the input is accepted by node A");
    let waiting = Arc::clone(&gate);
    tokio::task::spawn_blocking(move || waiting.wait_started()).await.expect("the gate is watched");
    let at = setup.ledger.tick();
    signal(&a, "-STOP");

    // Node B takes the session over once A's lease lapses, runs the call
    // again (A's try never committed) and ends the turn.
    subs_tests::wait::eventually(Duration::from_secs(30), "node B finishes the turn", || async {
        let snap = snapshot(&b.url, "s").await;
        if snap["status"] == "idle" { Ok(()) } else { Err(snap) }
    })
    .await;
    let ready = setup.ledger.tick();
    lock(&setup.ledger.kills).push(Kill { at, ready });
    let history = without_ids(&snapshot(&b.url, "s").await["messages"]);

    // A goes on: its call's result comes back and its commit is refused;
    // it says so and writes nothing.
    signal(&a, "-CONT");
    gate.open();
    subs_tests::wait::eventually(Duration::from_secs(30), "node A gives the session up", || {
        let log = a.process.stderr_text();
        let gave_up = if log.contains("lease was lost to another node") { Ok(()) } else { Err(log) };
        async move { gave_up }
    })
    .await;
    // Whatever A still holds in flight is gone: the session is B's history,
    // read from either node, each call with one result, the turn ended once.
    subs_tests::wait::steadily(Duration::from_millis(500), "the session stays B's history", || async {
        let (problems, _) = check_session(&a.url, &b.url, "s", 1, &history, &setup.ledger).await;
        if problems.is_empty() { Ok(()) } else { Err(format!("{problems:#?}")) }
    })
    .await;
    let ran: usize = lock(&setup.ledger.executions).values().map(Vec::len).sum();
    assert_eq!(ran, 3, "two calls; the first ran on A (cut off) and again on B");
}
