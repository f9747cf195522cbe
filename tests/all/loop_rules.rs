//! The loop's rules about calls and decisions, over the real API: a server
//! on `127.0.0.1:0`, HTTP workers scripted per trigger (in-test servers),
//! the fake provider where a rule is about what reaches a provider, a
//! redb file underneath. See docs/loop.md ("Rules a decision must keep",
//! "Failed deliveries", "Calls", "Interrupts").

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use subs_engine::EngineConfig;
use subs_engine::model::{Models, ProviderConfig, ProvidersConfig, models_from_config};
use subs_fake_provider::{FakeProvider, Fault, Reply};
use subs_protocol::LlmFormat;
use subs_tests::server::TestServer;

use crate::scripted::{Scripted, kind};

const GET: Method = Method::GET;
const POST: Method = Method::POST;
const PUT: Method = Method::PUT;

/// `decision` recording the trigger's proposed messages (the new
/// messages of a `client.messages`) before its own.
fn with_proposed(request: &Value, mut decision: Value) -> Value {
    let mut messages = request["proposed"]["messages"].as_array().cloned().unwrap_or_default();
    messages.extend(decision["messages"].as_array().cloned().unwrap_or_default());
    decision["messages"] = Value::Array(messages);
    decision
}

/// The text of the last message of a `client.messages` trigger.
fn said(request: &Value) -> String {
    let last = request["trigger"]["messages"].as_array().and_then(|m| m.last()).map(|m| m["content"].clone());
    last.and_then(|c| c.as_str().map(str::to_owned)).unwrap_or_default()
}

/// The agent's config: deliveries not retried unless `max_retries` says,
/// no `timeout_secs` of its own (the engine's `[timeouts]` apply), the
/// tools `add` (worker) and `ask` (client), the sub-agent `kid`.
fn config(max_retries: u32) -> Value {
    json!({"agent": {
        "model": "subs/offline",
        "retry": {"timeout_secs": null, "max_retries": max_retries, "backoff_base_secs": 0.01, "backoff_max_secs": 0.01},
        "tools": [
            {"name": "add", "input": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}},
            {"name": "ask", "handler": "client", "input": {"type": "object"}}
        ],
        "sub_agents": [{"id": "kid"}]
    }})
}

fn add(id: &str, a: i64, b: i64) -> Value {
    json!({"type": "tool.call", "id": id, "name": "add", "arguments": {"a": a, "b": b}})
}

/// Answers a `tool.execute` of `add` with the sum.
fn execute_add(request: &Value) -> Value {
    let args: Value = serde_json::from_str(request["trigger"]["arguments"].as_str().unwrap()).unwrap();
    let sum = args["a"].as_i64().unwrap() + args["b"].as_i64().unwrap();
    json!({"actions": [{"type": "tool.result", "result": {"sum": sum}}]})
}

/// A server with `config` (the tests' defaults when `None`) and `models`
/// (the offline model alone when `None`), `worker` registered as the
/// agents `w` and `kid`.
async fn server(worker: &Scripted, config: Option<EngineConfig>, models: Option<Models>) -> TestServer {
    let mut builder = TestServer::builder();
    if let Some(config) = config {
        builder = builder.engine_config(config);
    }
    if let Some(models) = models {
        builder = builder.models(models);
    }
    let s = builder.start().await;
    for agent in ["w", "kid"] {
        let (status, body) = s.call(PUT, &format!("/v1/agents/{agent}"), None, Some(json!({"url": worker.url}))).await;
        assert!(status.is_success(), "{status}: {body}");
    }
    s
}

/// The engine's timeouts: a delivery of a decision `decision_ms`, a try
/// of a call `call_ms`.
fn timeouts(decision_ms: u64, call_ms: u64) -> EngineConfig {
    EngineConfig {
        decision_timeout: Duration::from_millis(decision_ms),
        call_timeout: Duration::from_millis(call_ms),
        ..EngineConfig::default()
    }
}

/// Models with the fake provider as `fake/…` (OpenAI's format) beside the
/// offline model.
fn fake_models(fake: &FakeProvider) -> Models {
    let config = ProvidersConfig {
        providers: vec![ProviderConfig {
            name: "fake".into(),
            format: Some(LlmFormat::Openai),
            base_url: Some(fake.openai_base_url()),
            api_key_env: Some("FAKE_API_KEY".into()),
            base_url_env: None,
            max_tokens: Some(512),
        }],
        ..ProvidersConfig::default()
    };
    models_from_config(&config, &|key| (key == "FAKE_API_KEY").then(|| "sk-fake".to_owned())).expect("a valid config")
}

async fn say(s: &TestServer, session: &str, agent: &str, text: &str) -> String {
    let (status, body) = s.say(session, agent, text, None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["turn_id"].as_str().unwrap().to_owned()
}

async fn input(s: &TestServer, session: &str, body: Value) -> (StatusCode, Value) {
    s.call(POST, &format!("/v1/sessions/{session}/input"), None, Some(body)).await
}

async fn snapshot(s: &TestServer, session: &str) -> Value {
    let (status, body) = s.call(GET, &format!("/v1/sessions/{session}"), None, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// The snapshot once `ready` holds (at most 20 s).
async fn until(s: &TestServer, session: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    subs_tests::wait::eventually(Duration::from_secs(20), what, || async {
        let (status, view) = s.call(GET, &format!("/v1/sessions/{session}"), None, None).await;
        if status == StatusCode::OK && ready(&view) { Ok(view) } else { Err(format!("{status} {view}")) }
    })
    .await
}

/// The turn's end event: its name and data.
async fn turn_end(s: &TestServer, session: &str, turn: &str) -> (String, Value) {
    let events = s.wait_turn(session, turn, None).await;
    let end = events.last().expect("the turn's end");
    (end.event.clone(), end.data.clone())
}

/// The texts of a snapshot's messages with `role`.
fn texts(view: &Value, role: &str) -> Vec<String> {
    view["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == role)
        .map(|m| m["content"].as_str().map_or_else(|| m["content"].to_string(), str::to_owned))
        .collect()
}

// ---- one bound per worker-run call ------------------------------------------

/// A worker-run tool and a worker-run LLM call that each take longer than
/// the decision timeout but less than their deadline: delivered once
/// each, waited for, settled. (Cut at the decision timeout, each would be
/// delivered again and the turn fail as `decision_failed`.)
#[tokio::test]
async fn a_worker_run_call_slower_than_the_decision_timeout_runs_once_to_its_result() {
    let worker = Scripted::start(|r| {
        Some(match kind(r) {
            "session.start" => config(2),
            "client.messages" => json!({"actions": [add("c1", 2, 3)]}),
            "tool.execute" => {
                let mut decision = execute_add(r);
                decision["_delay_ms"] = json!(900);
                decision
            }
            "tool.finished" => json!({"actions": [{"type": "llm.call", "id": "l1", "handler": "worker"}]}),
            "llm.execute" => json!({"_delay_ms": 900, "actions": [
                {"type": "llm.result", "response": {"model": "m", "content": "slow answer"}}
            ]}),
            "llm.finished" => {
                json!({"actions": [{"type": "done", "data": {"text": r["trigger"]["message"]["content"]}}]})
            }
            _ => json!({}),
        })
    })
    .await;
    let s = server(&worker, Some(timeouts(300, 5_000)), None).await;
    let turn = say(&s, "slow", "w", "go").await;
    let (end, data) = turn_end(&s, "slow", &turn).await;
    assert_eq!((end.as_str(), &data["data"]["text"]), ("turn.done", &json!("slow answer")), "{data}");
    for execute in ["tool.execute", "llm.execute"] {
        let requests = worker.of_kind("slow", execute);
        assert_eq!(requests.len(), 1, "{execute} is delivered once: {:?}", worker.triggers("slow"));
        // The delivery's deadline is the call's.
        let request = &requests[0];
        assert!(request["deadline"].is_string(), "{request}");
        assert_eq!(request["deadline"], request["trigger"]["deadline"], "{execute}");
    }
    let finished = &worker.of_kind("slow", "tool.finished")[0];
    assert_eq!(finished["trigger"]["result"], r#"{"sum":5}"#);
}

/// A worker-run tool still running at its deadline fails that try as the
/// call's failure (`deadline_exceeded`), retried per the call's policy,
/// each try delivered once and waited for until its deadline; the turn
/// goes on. (Cut at the decision timeout, the deliveries would fail the
/// turn as `decision_failed` before the deadline came.)
#[tokio::test]
async fn a_worker_run_call_still_running_at_its_deadline_fails_as_deadline_exceeded() {
    let worker = Scripted::start(|r| match kind(r) {
        "session.start" => Some(config(1)),
        "client.messages" => Some(json!({"actions": [{
            "type": "tool.call", "id": "stuck", "name": "add", "arguments": {"a": 1, "b": 1},
            "retry": {"timeout_secs": null, "max_retries": 1, "backoff_base_secs": 0.05, "backoff_max_secs": 0.05}
        }]})),
        "tool.execute" => None,
        "tool.finished" => Some(json!({"actions": [{"type": "done", "data": {
            "ok": r["trigger"]["ok"], "seen": r["trigger"]["error"]
        }}]})),
        _ => Some(json!({})),
    })
    .await;
    let s = server(&worker, Some(timeouts(200, 700)), None).await;
    let turn = say(&s, "stuck", "w", "go").await;
    let (end, data) = turn_end(&s, "stuck", &turn).await;
    assert_eq!(end, "turn.done", "{data}");
    assert_eq!(data["data"]["ok"], false);
    let error = data["data"]["seen"].as_str().unwrap();
    assert!(error.contains("`stuck` was not settled by its deadline"), "{error}");
    // One delivery per try, the second a retry of the call, not of the
    // delivery.
    let attempts: Vec<Value> =
        worker.of_kind("stuck", "tool.execute").iter().map(|r| r["trigger"]["attempt"].clone()).collect();
    assert_eq!(attempts, [json!(1), json!(2)], "{:?}", worker.triggers("stuck"));
    let attempts: Vec<Value> = worker.of_kind("stuck", "tool.execute").iter().map(|r| r["attempts"].clone()).collect();
    assert_eq!(attempts, [json!(1), json!(1)], "no delivery was repeated");
}

/// Takes 240 s to run its tool; decides everything else at once.
struct FourMinuteTool {
    executes: Arc<Mutex<Vec<u32>>>,
}

impl subs_engine::worker::Worker for FourMinuteTool {
    fn decide(
        &self,
        delivery: subs_engine::worker::Delivery,
    ) -> subs_engine::worker::BoxFuture<'_, Result<subs_protocol::DecisionResponse, subs_engine::worker::WorkerError>>
    {
        Box::pin(async move {
            let request = serde_json::to_value(&delivery.request).unwrap();
            let decision = match kind(&request) {
                "client.messages" => json!({"actions": [add("c1", 40, 2)]}),
                "tool.execute" => {
                    self.executes.lock().unwrap().push(delivery.request.attempts);
                    // The tool's four minutes, on the test's paused time.
                    tokio::time::sleep(Duration::from_secs(240)).await;
                    execute_add(&request)
                }
                "tool.finished" => {
                    json!({"actions": [{"type": "done", "data": {"sum": request["trigger"]["result"]}}]})
                }
                _ => serde_json::to_value(&delivery.request.proposed).unwrap(),
            };
            Ok(serde_json::from_value(decision).unwrap())
        })
    }
}

/// With the engine's defaults (a decision may take 60 s, a call's try
/// 300 s), a worker's tool that takes four minutes is delivered once and
/// settles the call. On paused time: the minutes pass without waiting.
#[tokio::test(start_paused = true)]
async fn with_the_default_timeouts_a_four_minute_tool_runs_once() {
    let config = EngineConfig { clock: Arc::new(subs_engine::clock::TokioClock::new()), ..EngineConfig::default() };
    assert_eq!((config.decision_timeout, config.call_timeout), (Duration::from_secs(60), Duration::from_secs(300)));
    let store = Arc::new(subs_engine::store::MemStore::new());
    let engine = subs_engine::Engine::open(store, Models::with_offline(), config);
    let executes = Arc::new(Mutex::new(Vec::new()));
    engine.register_agent(subs_tests::TENANT, "w", Arc::new(FourMinuteTool { executes: executes.clone() }));
    let (started, real) = (tokio::time::Instant::now(), std::time::Instant::now());
    let input = subs_tests::user_input("w", Some("t1"), "add");
    engine.sessions().input(subs_tests::TENANT, "s", input, Default::default()).await.expect("accepted");
    let ended = engine.reads().wait_turn(subs_tests::TENANT, "s", "t1").await.expect("the store answers");
    assert_eq!(ended.status, subs_engine::store::TurnStatus::Done, "{ended:?}");
    assert_eq!(ended.data, Some(json!({"sum": r#"{"sum":42}"#})));
    assert_eq!(*executes.lock().unwrap(), [1], "one delivery");
    assert!(started.elapsed() >= Duration::from_secs(240), "{:?}", started.elapsed());
    assert!(real.elapsed() < Duration::from_secs(10), "not waited in real time: {:?}", real.elapsed());
}

// ---- settling ends a try ------------------------------------------------------

/// Approval by denial: the agent proposes a tool call and asks first; on
/// the resume it settles the call with `tool.error` instead of running
/// it. The call's `tool.execute` is never delivered and the turn goes on:
/// the model sees the denial.
#[tokio::test]
async fn a_call_denied_on_resume_is_never_run_and_the_turn_goes_on() {
    let worker = Scripted::start(|r| {
        Some(match kind(r) {
            "session.start" => config(0),
            "client.messages" => json!({
                "messages": [{"role": "assistant", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1,\"b\":2}"}}
                ]}],
                "actions": [add("c1", 1, 2), {"type": "interrupt", "interrupt_id": "approve", "reason": "may I add?"}]
            }),
            "interrupt.resumed" => json!({"actions": [
                {"type": "tool.error", "id": "c1", "error": "denied by the user", "retryable": false}
            ]}),
            "tool.execute" => execute_add(r),
            // The engine's proposals from here: the tool message, the
            // model's answer, the turn's end.
            _ => r["proposed"].clone(),
        })
    })
    .await;
    let s = server(&worker, None, None).await;
    let turn = say(&s, "deny", "w", "add 1 and 2").await;
    until(&s, "deny", "the interrupt opens", |v| !v["interrupts"].as_array().unwrap().is_empty()).await;
    let (status, body) =
        input(&s, "deny", json!({"type": "interrupt.resume", "interrupt_id": "approve", "payload": "no"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (end, data) = turn_end(&s, "deny", &turn).await;
    assert_eq!(end, "turn.done", "{data}");
    assert_eq!(
        worker.triggers("deny"),
        ["session.start", "client.messages", "interrupt.resumed", "tool.finished", "llm.finished"]
    );
    let view = snapshot(&s, "deny").await;
    assert_eq!(texts(&view, "tool"), ["denied by the user"], "{view}");
    assert_eq!(view["status"], "idle");
}

// ---- rules a decision must keep ---------------------------------------------

/// Runs one turn whose `client.messages` decision is `decision`, under an
/// agent whose retry policy allows three more deliveries; the error of the
/// turn's `turn.failed` (`decision_failed`). A refused decision would be
/// refused again, so it is delivered once: the turn fails at once.
async fn refused(decision: Value) -> String {
    let worker = Scripted::start(move |r| {
        Some(match kind(r) {
            "session.start" => config(3),
            "client.messages" => decision.clone(),
            _ => json!({"actions": [{"type": "done"}]}),
        })
    })
    .await;
    let s = server(&worker, None, None).await;
    let turn = say(&s, "rules", "w", "go").await;
    let (end, data) = turn_end(&s, "rules", &turn).await;
    assert_eq!((end.as_str(), &data["code"]), ("turn.failed", &json!("decision_failed")), "{data}");
    assert_eq!(worker.of_kind("rules", "client.messages").len(), 1, "not delivered again");
    assert!(data["error"].as_str().unwrap().starts_with("no decision after 1 deliveries"), "{data}");
    // Nothing of the refused decision was applied.
    let view = snapshot(&s, "rules").await;
    assert_eq!(view["messages"], json!([]), "{view}");
    assert!(view["interrupts"].as_array().unwrap().is_empty(), "{view}");
    data["error"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_same_interrupt_id_twice_in_one_decision_is_refused() {
    let error = refused(json!({"actions": [
        {"type": "interrupt", "interrupt_id": "i1", "reason": "first"},
        {"type": "interrupt", "interrupt_id": "i1", "reason": "again"}
    ]}))
    .await;
    assert!(error.contains("actions[1] (interrupt): interrupt `i1` is already open"), "{error}");
}

#[tokio::test]
async fn no_action_may_follow_done() {
    let error = refused(json!({"actions": [{"type": "done"}, {"type": "done"}]})).await;
    assert!(error.contains("actions[1] (done): no action may follow `done` (actions[0])"), "{error}");
}

#[tokio::test]
async fn ids_used_twice_in_one_decision_are_refused() {
    let error = refused(json!({"actions": [add("dup", 1, 1), add("dup", 2, 2)]})).await;
    assert!(error.contains("actions[1] (tool.call): a call with id `dup` is already in flight"), "{error}");
    let error = refused(json!({"messages": [
        {"id": "m1", "role": "assistant", "content": "one"},
        {"id": "m1", "role": "assistant", "content": "two"}
    ]}))
    .await;
    assert!(error.contains("messages[1].id `m1` is already recorded"), "{error}");
}

#[tokio::test]
async fn invalid_ids_are_refused() {
    let error = refused(json!({"actions": [add("bad\nid", 1, 1)]})).await;
    assert!(error.contains("actions[0] (tool.call): call id `bad\nid` is not a valid id"), "{error}");
    let error = refused(json!({"messages": [{"id": "", "role": "assistant", "content": "x"}]})).await;
    assert!(error.contains("messages[0].id `` is not a valid id"), "{error}");
    let error = refused(json!({"actions": [{"type": "interrupt", "interrupt_id": "a\u{7}b", "reason": "r"}]})).await;
    assert!(error.contains("actions[0] (interrupt): interrupt_id `a\u{7}b` is not a valid id"), "{error}");
}

#[tokio::test]
async fn a_decision_settling_a_call_not_in_flight_is_refused() {
    let error = refused(json!({"actions": [{"type": "tool.result", "id": "nope", "result": 1}]})).await;
    assert!(error.contains("actions[0] (tool.result): call `nope` is not in flight"), "{error}");
}

#[tokio::test]
async fn an_unrunnable_config_is_refused() {
    let config = |agent: Value| json!({"agent": agent});
    let error = refused(config(json!({"model": ""}))).await;
    assert!(error.contains("agent: model is empty"), "{error}");
    let error = refused(config(json!({"model": "m", "format": "openai"}))).await;
    assert!(error.contains("agent: format requires handler `worker`"), "{error}");
    let error = refused(config(json!({"model": "m", "tools": [{"name": "t"}, {"name": "t"}]}))).await;
    assert!(error.contains("agent: tools[1].name `t` is declared twice"), "{error}");
    let error = refused(config(json!({"model": "m", "tools": [{"name": "t", "input": {"type": 7}}]}))).await;
    assert!(error.contains("agent: tools[0].input is not a usable JSON Schema"), "{error}");
}

/// A `tool.execute` decision that does not settle its call is refused:
/// nothing else would ever settle it.
#[tokio::test]
async fn an_execute_decision_must_settle_its_call() {
    let worker = Scripted::start(|r| {
        Some(match kind(r) {
            "session.start" => config(0),
            "client.messages" => json!({"actions": [add("c1", 1, 1)]}),
            "tool.execute" => json!({}),
            _ => json!({"actions": [{"type": "done"}]}),
        })
    })
    .await;
    let s = server(&worker, None, None).await;
    let turn = say(&s, "exec", "w", "go").await;
    let (end, data) = turn_end(&s, "exec", &turn).await;
    assert_eq!((end.as_str(), &data["code"]), ("turn.failed", &json!("decision_failed")), "{data}");
    let error = data["error"].as_str().unwrap();
    assert!(error.contains("a tool.execute decision must settle its call `c1`"), "{error}");
}

/// An engine-run LLM call is the engine's to settle: a decision's
/// `llm.result` for it, while it runs, is refused.
#[tokio::test]
async fn llm_result_on_an_engine_run_call_is_refused() {
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("late").with_latency(Duration::from_secs(3)));
    let worker = Scripted::start(|r| {
        Some(match kind(r) {
            "session.start" => config(0),
            "client.messages" => json!({"actions": [
                {"type": "llm.call", "id": "engine-run", "model": "fake/model"},
                add("c1", 1, 1)
            ]}),
            "tool.execute" => json!({"actions": [
                {"type": "tool.result", "result": 2},
                {"type": "llm.result", "id": "engine-run", "response": {"model": "m", "content": "forged"}}
            ]}),
            _ => json!({"actions": [{"type": "done"}]}),
        })
    })
    .await;
    let s = server(&worker, None, Some(fake_models(&fake))).await;
    let turn = say(&s, "forge", "w", "go").await;
    let (end, data) = turn_end(&s, "forge", &turn).await;
    assert_eq!((end.as_str(), &data["code"]), ("turn.failed", &json!("decision_failed")), "{data}");
    let error = data["error"].as_str().unwrap();
    assert!(
        error.contains("actions[1] (llm.result): call `engine-run` is run by the engine; only worker-handled"),
        "{error}"
    );
    assert!(texts(&snapshot(&s, "forge").await, "assistant").is_empty(), "nothing forged was recorded");
}

// ---- LLM calls -----------------------------------------------------------------

/// A worker's retryable `llm.error` schedules another try of the call:
/// a new `llm.execute`, attempt 2, which settles it.
#[tokio::test]
async fn a_retryable_llm_error_from_a_worker_starts_a_new_llm_execute() {
    let worker = Scripted::start(|r| {
        Some(match kind(r) {
            "session.start" => config(0),
            "client.messages" => json!({"actions": [{
                "type": "llm.call", "id": "l1", "handler": "worker",
                "retry": {"timeout_secs": 10, "max_retries": 1, "backoff_base_secs": 0.05, "backoff_max_secs": 0.05}
            }]}),
            "llm.execute" if r["trigger"]["attempt"] == 1 => json!({"actions": [
                {"type": "llm.error", "error": "overloaded", "retryable": true, "code": "rate_limited"}
            ]}),
            "llm.execute" => {
                json!({"actions": [{"type": "llm.result", "response": {"model": "m", "content": "second try"}}]})
            }
            "llm.finished" => json!({"actions": [{"type": "done", "data": {
                "ok": r["trigger"]["ok"], "text": r["trigger"]["message"]["content"]
            }}]}),
            _ => json!({}),
        })
    })
    .await;
    let s = server(&worker, None, None).await;
    let turn = say(&s, "retry", "w", "go").await;
    let (end, data) = turn_end(&s, "retry", &turn).await;
    assert_eq!(end, "turn.done", "{data}");
    assert_eq!(data["data"], json!({"ok": true, "text": "second try"}));
    let attempts: Vec<Value> =
        worker.of_kind("retry", "llm.execute").iter().map(|r| r["trigger"]["attempt"].clone()).collect();
    assert_eq!(attempts, [json!(1), json!(2)]);
    assert_eq!(worker.of_kind("retry", "llm.finished").len(), 1, "the agent hears of the call once");
}

/// What an `llm.call` sets reaches the provider: its model, explicit
/// messages (and then no system prompt), tools, temperature,
/// `max_completion_tokens`, reasoning, stream, retry; what it leaves out
/// comes from the config (model, system prompt, the tools the model
/// sees); a per-call `handler: worker` sends it to the worker instead.
#[tokio::test]
async fn llm_call_fields_reach_the_provider() {
    let fake = FakeProvider::start().await;
    fake.push(Reply::fault(Fault::status(503, "busy")));
    fake.push(Reply::text("explicit answer"));
    fake.push(Reply::text("default answer"));
    let worker = Scripted::start(|r| {
        let id = r["trigger"]["id"].as_str().unwrap_or_default().to_owned();
        Some(match kind(r) {
            "session.start" => json!({"agent": {
                "model": "fake/model",
                "system": "THE SYSTEM PROMPT",
                "retry": {"timeout_secs": null, "max_retries": 0, "backoff_base_secs": 0.01, "backoff_max_secs": 0.01},
                "tools": [{"name": "add", "description": "Adds.", "input": {"type": "object"}}]
            }}),
            "client.messages" => with_proposed(
                r,
                json!({"actions": [{
                    "type": "llm.call", "id": "explicit", "model": "fake/other",
                    "messages": [{"role": "user", "content": "only this"}],
                    "tools": [{"name": "search", "description": "Searches.", "input": {"type": "object"}}],
                    "temperature": 0.25, "max_completion_tokens": 77, "reasoning": {"effort": "high"},
                    "stream": true,
                    "retry": {"timeout_secs": 10, "max_retries": 1, "backoff_base_secs": 0.05, "backoff_max_secs": 0.05}
                }]}),
            ),
            "llm.finished" if id == "explicit" => json!({"actions": [{"type": "llm.call", "id": "defaults"}]}),
            "llm.finished" if id == "defaults" => {
                json!({"actions": [{"type": "llm.call", "id": "by-worker", "handler": "worker"}]})
            }
            "llm.execute" => {
                json!({"actions": [{"type": "llm.result", "response": {"model": "w", "content": "worker answer"}}]})
            }
            "llm.finished" => json!({"actions": [{"type": "done"}]}),
            _ => json!({}),
        })
    })
    .await;
    let s = server(&worker, None, Some(fake_models(&fake))).await;
    let turn = say(&s, "fields", "w", "hello model").await;
    let (end, data) = turn_end(&s, "fields", &turn).await;
    assert_eq!(end, "turn.done", "{data}");

    let sent = fake.requests();
    assert_eq!(sent.len(), 3, "the explicit call twice (a retry), the defaults once: {sent:?}");
    let explicit = &sent[1].body;
    assert_eq!(sent[0].body, sent[1].body, "the retry sends the same request");
    assert_eq!(explicit["model"], "other");
    assert_eq!(explicit["messages"], json!([{"role": "user", "content": "only this"}]), "no system prompt");
    let tools: Vec<&Value> = explicit["tools"].as_array().unwrap().iter().map(|t| &t["function"]["name"]).collect();
    assert_eq!(tools, [&json!("search")]);
    assert_eq!(explicit["temperature"], 0.25);
    assert_eq!(explicit["max_completion_tokens"], 77);
    assert_eq!(explicit["reasoning_effort"], "high");
    assert!(sent[1].stream(), "stream: true is a streamed request");

    let defaults = &sent[2].body;
    assert_eq!(defaults["model"], "model", "the config's model");
    assert_eq!(defaults["messages"][0], json!({"role": "system", "content": "THE SYSTEM PROMPT"}));
    assert_eq!(defaults["messages"][1]["content"], "hello model");
    let tools: Vec<&Value> = defaults["tools"].as_array().unwrap().iter().map(|t| &t["function"]["name"]).collect();
    assert_eq!(tools, [&json!("add")], "the config's tools");
    // Streamed because the engine streams calls whose agent does not say
    // (`stream_by_default`); no temperature unless one is set.
    assert!(sent[2].stream() && defaults.get("temperature").is_none(), "{defaults}");

    // The per-call handler: the worker got it, with the config's model.
    let executes = worker.of_kind("fields", "llm.execute");
    assert_eq!(executes.len(), 1);
    assert_eq!(executes[0]["trigger"]["id"], "by-worker");
    assert_eq!(executes[0]["trigger"]["request"]["model"], "fake/model");
    let view = snapshot(&s, "fields").await;
    assert_eq!(texts(&view, "assistant"), Vec::<String>::new(), "the worker recorded nothing itself: {view}");
}

/// A reply the provider cut at its token limit reaches the agent as an
/// `llm.finished` with `truncated: true`; a complete one with `false`.
#[tokio::test]
async fn a_reply_cut_at_the_token_limit_is_reported_truncated() {
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("cut sho").with_finish_reason("length"));
    fake.push(Reply::text("complete."));
    let worker = Scripted::start(|r| {
        Some(match kind(r) {
            "session.start" => json!({"agent": {"model": "fake/model"}}),
            "client.messages" => json!({"actions": [{"type": "llm.call", "id": "first"}]}),
            "llm.finished" if r["trigger"]["id"] == "first" => {
                json!({"actions": [{"type": "llm.call", "id": "second"}]})
            }
            _ => json!({"actions": [{"type": "done"}]}),
        })
    })
    .await;
    let s = server(&worker, None, Some(fake_models(&fake))).await;
    let turn = say(&s, "cut", "w", "go").await;
    assert_eq!(turn_end(&s, "cut", &turn).await.0, "turn.done");
    let finished: Vec<(Value, Value)> = worker
        .of_kind("cut", "llm.finished")
        .iter()
        .map(|r| (r["trigger"]["truncated"].clone(), r["trigger"]["message"]["content"].clone()))
        .collect();
    assert_eq!(finished, [(json!(true), json!("cut sho")), (json!(false), json!("complete."))]);
}

// ---- message.send ----------------------------------------------------------------

/// `message.send` reaches a session of the sender's family (here the
/// child's parent), recorded there; a session outside it (another root)
/// is refused, and nothing reaches it.
#[tokio::test]
async fn message_send_reaches_the_family_and_no_other_session() {
    let worker = Scripted::start(|r| {
        let child = r["agent_id"] == "kid";
        Some(match (child, kind(r)) {
            (_, "session.start") => config(0),
            (false, "client.messages") if said(r) == "delegate" => with_proposed(
                r,
                json!({
                    "messages": [{"role": "assistant", "tool_calls": [
                        {"id": "tc1", "type": "function", "function": {"name": "kid", "arguments": "{}"}}
                    ]}],
                    "actions": [{"type": "sub_agent.spawn", "session_id": "fam.kid", "agent_id": "kid", "tool_call_id": "tc1"}]
                }),
            ),
            (false, "client.messages") if said(r) == "stranger" => json!({"actions": [
                {"type": "message.send", "session_id": "other", "message": {"role": "user", "content": "psst"}}
            ]}),
            (false, "client.messages") => with_proposed(r, json!({"actions": [{"type": "done"}]})),
            (true, "client.messages") => json!({"actions": [
                {"type": "message.send", "session_id": "fam", "message": {"role": "user", "content": "from the kid"}},
                {"type": "done", "data": "sent"}
            ]}),
            _ => json!({"actions": [{"type": "done"}]}),
        })
    })
    .await;
    let s = server(&worker, None, None).await;
    let turn = say(&s, "other", "w", "hello").await;
    assert_eq!(turn_end(&s, "other", &turn).await.0, "turn.done");

    let turn = say(&s, "fam", "w", "delegate").await;
    assert_eq!(turn_end(&s, "fam", &turn).await.0, "turn.done");
    let view = until(&s, "fam", "the child's message arrives", |v| texts(v, "user").len() == 2).await;
    assert_eq!(texts(&view, "user"), ["delegate", "from the kid"]);

    let turn = say(&s, "fam", "w", "stranger").await;
    let (end, data) = turn_end(&s, "fam", &turn).await;
    assert_eq!((end.as_str(), &data["code"]), ("turn.failed", &json!("decision_failed")), "{data}");
    let error = data["error"].as_str().unwrap();
    assert!(error.contains("session `other` does not exist or is not in this session's family"), "{error}");
    subs_tests::wait::steadily(Duration::from_millis(200), "nothing reached `other`", || async {
        let view = snapshot(&s, "other").await;
        if texts(&view, "user") == ["hello"] { Ok(()) } else { Err(view) }
    })
    .await;
}

// ---- sub-agents and client calls: cancels and deadlines -----------------------

/// A spawn of an agent nobody registered fails at once: the child's first
/// delivery finds no agent, which a retry would not change, so its turn
/// fails and the parent hears of it without a backoff.
#[tokio::test]
async fn a_sub_agent_of_an_unknown_agent_fails_at_once() {
    let worker = Scripted::start(|r| {
        Some(match kind(r) {
            "session.start" => {
                let mut config = config(0);
                config["agent"]["sub_agents"] = json!([{"id": "ghost"}]);
                config
            }
            "client.messages" => json!({
                "messages": [{"role": "assistant", "tool_calls": [
                    {"id": "tc1", "type": "function", "function": {"name": "ghost", "arguments": "{}"}}
                ]}],
                "actions": [{
                    "type": "sub_agent.spawn", "session_id": "haunt.ghost", "agent_id": "ghost", "tool_call_id": "tc1",
                    "retry": {"timeout_secs": 60, "max_retries": 0, "backoff_base_secs": 0.01, "backoff_max_secs": 0.01}
                }]
            }),
            "sub_agent.finished" => json!({"actions": [{"type": "done", "data": {
                "ok": r["trigger"]["ok"], "seen": r["trigger"]["error"]
            }}]}),
            _ => json!({}),
        })
    })
    .await;
    // The child has no config, so the engine's default policy (two more
    // deliveries) would apply to a failure worth retrying.
    let s = server(&worker, None, None).await;
    let turn = say(&s, "haunt", "w", "delegate").await;
    let (end, data) = turn_end(&s, "haunt", &turn).await;
    assert_eq!(end, "turn.done", "{data}");
    assert_eq!(data["data"]["ok"], false, "{data}");
    let error = data["data"]["seen"].as_str().unwrap();
    assert!(error.contains("no agent `ghost` is registered"), "{error}");
    let (end, data) = first_end(&s, "haunt.ghost").await;
    assert_eq!(end, "turn.failed", "{data}");
    assert!(data["error"].as_str().unwrap().starts_with("no decision after 1 deliveries"), "{data}");
}

/// A worker whose root agent spawns the child `<session>.kid` with
/// `retry` and ends its turn with what `sub_agent.finished` said; the
/// child never decides its turn.
async fn spawning(retry: Value) -> Scripted {
    Scripted::start(move |r| {
        let child = r["agent_id"] == "kid";
        match (child, kind(r)) {
            (_, "session.start") => Some(config(0)),
            (false, "client.messages") => {
                let session = r["session_id"].as_str().unwrap();
                Some(json!({
                    "messages": [{"role": "assistant", "tool_calls": [
                        {"id": "tc1", "type": "function", "function": {"name": "kid", "arguments": "{}"}}
                    ]}],
                    "actions": [{
                        "type": "sub_agent.spawn", "session_id": format!("{session}.kid"), "agent_id": "kid",
                        "tool_call_id": "tc1", "retry": retry
                    }]
                }))
            }
            (false, "sub_agent.finished") => Some(json!({"actions": [{"type": "done", "data": {
                "ok": r["trigger"]["ok"], "seen": r["trigger"]["error"]
            }}]})),
            (true, "client.messages") => None,
            _ => Some(json!({})),
        }
    })
    .await
}

/// How `session`'s first turn ended: its end event's name and data.
async fn first_end(s: &TestServer, session: &str) -> (String, Value) {
    let ended = |e: &subs_tests::server::SseEvent| matches!(e.event.as_str(), "turn.done" | "turn.failed");
    let events = tokio::time::timeout(Duration::from_secs(20), s.events(session, None, None, ended))
        .await
        .expect("the turn ends");
    let end = events.last().expect("the turn's end");
    (end.event.clone(), end.data.clone())
}

#[tokio::test]
async fn cancelling_a_parents_turn_cancels_its_childs() {
    let worker = spawning(Value::Null).await;
    let s = server(&worker, None, None).await;
    let turn = say(&s, "boss", "w", "delegate").await;
    until(&s, "boss.kid", "the child's turn runs", |v| v["status"] == "running").await;
    let (status, body) = s.call(POST, "/v1/sessions/boss/cancel", None, None).await;
    assert_eq!((status, &body["cancelled"]), (StatusCode::OK, &json!(true)), "{body}");
    assert_eq!(turn_end(&s, "boss", &turn).await.1["code"], "cancelled");
    let (end, data) = first_end(&s, "boss.kid").await;
    assert_eq!((end.as_str(), &data["code"]), ("turn.failed", &json!("cancelled")), "{data}");
    until(&s, "boss.kid", "the child is idle", |v| v["status"] == "idle").await;
}

#[tokio::test]
async fn a_sub_agent_past_its_deadline_fails_and_its_childs_turn_is_cancelled() {
    let worker =
        spawning(json!({"timeout_secs": 0.5, "max_retries": 0, "backoff_base_secs": 0.01, "backoff_max_secs": 0.01}))
            .await;
    let s = server(&worker, None, None).await;
    let turn = say(&s, "late", "w", "delegate").await;
    let (end, data) = turn_end(&s, "late", &turn).await;
    assert_eq!(end, "turn.done", "{data}");
    assert_eq!(data["data"]["ok"], false);
    let error = data["data"]["seen"].as_str().unwrap();
    assert!(error.contains("sub-agent call `tc1` was not settled by its deadline"), "{error}");
    let (end, data) = first_end(&s, "late.kid").await;
    assert_eq!((end.as_str(), &data["code"]), ("turn.failed", &json!("cancelled")), "{data}");
}

/// A client tool call with a deadline fails at it when no client settles
/// it; a client's result after that is a conflict, and changes nothing.
#[tokio::test]
async fn a_client_tool_call_past_its_deadline_fails_and_a_late_result_conflicts() {
    let worker = Scripted::start(|r| {
        Some(match kind(r) {
            "session.start" => config(0),
            "client.messages" => json!({"actions": [{
                "type": "tool.call", "id": "q", "name": "ask", "arguments": {},
                "retry": {"timeout_secs": 0.4, "max_retries": 0, "backoff_base_secs": 0.01, "backoff_max_secs": 0.01}
            }]}),
            "tool.finished" => json!({"actions": [{"type": "done", "data": {
                "ok": r["trigger"]["ok"], "seen": r["trigger"]["error"]
            }}]}),
            _ => json!({}),
        })
    })
    .await;
    let s = server(&worker, None, None).await;
    let turn = say(&s, "client", "w", "ask me").await;
    let view = until(&s, "client", "the call waits for the client", |v| v["status"] == "waiting").await;
    assert!(view["calls"][0]["deadline"].is_string(), "{view}");
    let (end, data) = turn_end(&s, "client", &turn).await;
    assert_eq!((end.as_str(), &data["data"]["ok"]), ("turn.done", &json!(false)), "{data}");
    let error = data["data"]["seen"].as_str().unwrap();
    assert!(error.contains("tool call `q` was not settled by its deadline"), "{error}");
    let (status, body) = input(&s, "client", json!({"type": "tool.result", "id": "q", "result": "too late"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(worker.of_kind("client", "tool.finished").len(), 1);
}
