//! HTTP workers, end to end: the engine's `HttpWorker` driving real HTTP
//! servers on `127.0.0.1:0` (agents served by `subs-http-worker`, a Python
//! worker written from the protocol reference, and misbehaving servers)
//! through the real loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use subs_engine::Snapshot;
use subs_engine::store::{SessionKey, TurnStatus};
use subs_engine::worker::http::{HttpWorker, HttpWorkerOptions, ReplyProblem};
use subs_engine::worker::{Delivery, Worker, WorkerError};
use subs_http_worker::WorkerOptions;
use subs_protocol::{DecisionRequest, DecisionResponse, StreamDelta, Trigger};
use subs_sdk::prelude::{Action, AgentConfig, Context, DecideError};
use subs_tests::{TENANT, TestEngine};

/// Serves `app` on a free loopback port; returns its URL.
async fn serve(app: Router) -> String {
    format!("http://{}/", subs_tests::serve_loopback(app).await)
}

fn http_worker(url: &str, options: HttpWorkerOptions) -> Arc<HttpWorker> {
    Arc::new(HttpWorker::new(url, options).expect("a valid worker URL"))
}

pub(crate) fn unix_ms() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

// ---- equivalence -----------------------------------------------------------

const TWO_ADDS: &str = r#"use tool add with {"a": 1, "b": 2} and use tool add with {"a": 3, "b": 4}"#;

/// Session start, a plain chat turn, a turn with two parallel tool calls,
/// and a `get_time` call.
pub(crate) async fn scenario(t: &TestEngine, session: &str, agent: &str) {
    for text in ["hello there", TWO_ADDS, "use tool get_time"] {
        let turn = t.chat(session, agent, text).await;
        assert_eq!(turn.status, TurnStatus::Done, "{agent}: {text}: {turn:?}");
    }
}

/// What a session recorded, as JSON: the snapshot (messages, tree, state,
/// config, calls), every step (trigger, decision, attempts) and every
/// stored event, with ids replaced by their order of appearance, the
/// times `get_time` returned replaced by a placeholder (after checking
/// they lie in `window`), and calls' deadlines by another.
pub(crate) async fn recorded(t: &TestEngine, session: &str, window: (u64, u64)) -> Value {
    let Snapshot { record, messages, message_tree, calls } = t.snapshot(session).await;
    let key = SessionKey::new(TENANT, session);
    let steps: Vec<Value> = t
        .store
        .steps(&key, 0, usize::MAX)
        .await
        .unwrap()
        .into_iter()
        .map(|(seq, step)| {
            json!({
                "seq": seq,
                "turn_id": step.turn_id,
                "trigger": step.trigger,
                "status": step.status,
                "attempts": step.attempts,
                "error": step.error,
                "decision": step.decision,
                "recorded": step.recorded,
            })
        })
        .collect();
    let events: Vec<Value> = t
        .engine
        .reads()
        .events(TENANT, session, None, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| json!([e.name, e.data]))
        .collect();
    let mut value = json!({
        "status": record.status,
        "state": record.state,
        "agent": record.agent,
        "messages": messages,
        "message_tree": message_tree,
        "calls": calls,
        "steps": steps,
        "events": events,
    });
    let mut ids = HashMap::new();
    normalize(&mut value, &mut ids, window);
    value
}

/// Whether `s` is an id the engine or the offline model mints.
fn is_id(s: &str) -> bool {
    ["msg_", "call_", "llm_", "turn_", "int_"]
        .iter()
        .any(|p| s.strip_prefix(p).is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_hexdigit())))
}

fn normalize(value: &mut Value, ids: &mut HashMap<String, String>, window: (u64, u64)) {
    match value {
        Value::String(s) if is_id(s) => {
            let next = format!("<id{}>", ids.len());
            *s = ids.entry(s.clone()).or_insert(next).clone();
        }
        Value::String(s) => *s = mask_times(s, window),
        Value::Array(items) => items.iter_mut().for_each(|v| normalize(v, ids, window)),
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if key == "unix_ms"
                    && let Some(ms) = v.as_u64()
                {
                    assert!((window.0..=window.1).contains(&ms), "get_time returned {ms}, outside {window:?}");
                    *v = json!("<ms>");
                } else if key == "deadline" && v.is_string() {
                    // A call's deadline is its start plus its timeout:
                    // an instant of this run.
                    *v = json!("<deadline>");
                } else {
                    normalize(v, ids, window);
                }
            }
        }
        _ => {}
    }
}

/// `…"unix_ms":1732…` → `…"unix_ms":<ms>` in texts (tool messages, the
/// model's summary of them).
fn mask_times(text: &str, window: (u64, u64)) -> String {
    const KEY: &str = "\"unix_ms\":";
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(KEY) {
        let (head, tail) = rest.split_at(at + KEY.len());
        out.push_str(head);
        let digits = tail.len() - tail.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let ms: u64 = tail[..digits].parse().expect("unix_ms is a number");
        assert!((window.0..=window.1).contains(&ms), "get_time returned {ms}, outside {window:?}");
        out.push_str("<ms>");
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

#[tokio::test]
async fn the_tools_agent_records_the_same_session_as_a_component_and_over_http() {
    let t = TestEngine::start().await;
    let app = subs_http_worker::router_with(tools::Tools::new(), WorkerOptions::new().require_signature("s3cret"));
    let url = serve(app).await;
    t.engine.register_agent(TENANT, "tools-http", http_worker(&url, HttpWorkerOptions::new().secret("s3cret")));

    let start = unix_ms();
    scenario(&t, "as-component", "tools").await;
    scenario(&t, "over-http", "tools-http").await;
    let window = (start, unix_ms());

    let component = recorded(&t, "as-component", window).await;
    let http = recorded(&t, "over-http", window).await;
    assert_eq!(
        subs_tests::canonical(&component),
        subs_tests::canonical(&http),
        "component:\n{component:#}\nhttp:\n{http:#}"
    );

    // The scenario did what it says: three turns, two parallel adds whose
    // results were both recorded, a get_time call.
    let transcript = t.transcript("over-http").await;
    assert_eq!(transcript.len(), 2 + 5 + 4, "{transcript:#?}");
    assert_eq!(transcript[1], "assistant: You said: hello there");
    assert!(transcript[3].contains("[add {\"a\":1,\"b\":2}] [add {\"a\":3,\"b\":4}]"), "{}", transcript[3]);
    assert!(transcript[4].starts_with("tool: {\"sum\":3}"), "{}", transcript[4]);
    assert!(transcript[5].starts_with("tool: {\"sum\":7}"), "{}", transcript[5]);
    assert!(transcript[8].contains("[get_time {}]"), "{}", transcript[8]);
    assert!(transcript[9].starts_with("tool: {\"unix_ms\":"), "{}", transcript[9]);
    assert_eq!(component["steps"].as_array().unwrap().len(), http["steps"].as_array().unwrap().len());
    let config = t.snapshot("over-http").await.record.agent.unwrap();
    assert_eq!(config.system.as_deref(), Some(tools::SYSTEM_PROMPT));
}

/// The Python and JavaScript twins of the `tools` agent, each as its
/// toolchain builds it by default (the JavaScript one against both worlds,
/// JSON text and typed records), record the same session as the Rust
/// agent for the same inputs: the same decisions, config (prompt, tool
/// schemas), tool results and errors, messages, tree, calls and events.
#[tokio::test]
async fn the_python_and_js_tools_agents_record_the_same_session_as_the_rust_one() {
    use subs_tests::guests::{TOOLS_JS, TOOLS_JS_TYPED, TOOLS_PY};
    let t = TestEngine::start().await;
    let twins = [
        ("python", "tools-py", TOOLS_PY),
        ("js", "tools-js", TOOLS_JS),
        ("js-typed", "tools-js-typed", TOOLS_JS_TYPED),
    ];
    for (_, id, path) in twins {
        t.engine.register_agent(TENANT, id, Arc::new(subs_tests::agent(path)));
    }
    let start = unix_ms();
    scenario(&t, "rust", "tools").await;
    for (session, agent, _) in twins {
        scenario(&t, session, agent).await;
    }
    // A sum too large for JSON: the tool's error, in the same words.
    let huge = r#"use tool add with {"a": 1e308, "b": 1e308}"#;
    for (session, agent) in std::iter::once(("rust", "tools")).chain(twins.map(|(s, a, _)| (s, a))) {
        assert_eq!(t.chat(session, agent, huge).await.status, TurnStatus::Done, "{agent}");
    }
    let window = (start, unix_ms());

    let rust = recorded(&t, "rust", window).await;
    assert!(rust.to_string().contains("is too large for a JSON number"), "the last turn's tool failed: {rust:#}");
    for (session, _, _) in twins {
        let other = recorded(&t, session, window).await;
        assert_eq!(
            subs_tests::canonical(&other),
            subs_tests::canonical(&rust),
            "{session}:\n{other:#}\nrust:\n{rust:#}"
        );
    }
}

// ---- streaming over SSE ----------------------------------------------------

/// Runs its own LLM calls and streams them, like the `test-stream`
/// component, but served over HTTP.
struct Streamer;

impl subs_sdk::Agent for Streamer {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        match &request.trigger {
            Trigger::SessionStart => {
                let mut config = request.proposed.agent.clone().unwrap_or_else(|| AgentConfig::new("subs/offline"));
                config.handler = Some(subs_protocol::LlmHandler::Worker);
                config.stream = Some(true);
                Ok(request.proposed.with_agent(config))
            }
            Trigger::LlmExecute(_) => {
                for piece in ["hel", "lo"] {
                    cx.emit_text(piece)?;
                }
                let response = json!({"model": "test/stream", "content": "hello", "finish_reason": "stop"});
                Ok(DecisionResponse::new().with_action(Action::llm_result(response)))
            }
            _ => Ok(request.proposed),
        }
    }
}

#[tokio::test]
async fn deltas_streamed_over_sse_reach_clients_before_the_reply_is_recorded() {
    let t = TestEngine::start().await;
    let url = serve(subs_http_worker::router(Streamer)).await;
    t.engine.register_agent(TENANT, "streamer-http", http_worker(&url, HttpWorkerOptions::new()));
    let mut events = t.engine.reads().subscribe(TENANT, "sse").unwrap();
    let turn = t.send("sse", "streamer-http", "hi").await;
    let mut seen = Vec::new();
    while seen.last().is_none_or(|e: &subs_engine::events::Event| e.name != "turn.done") {
        seen.push(events.recv().await.unwrap());
    }
    assert_eq!(t.wait("sse", &turn).await.status, TurnStatus::Done);
    let deltas: Vec<_> = seen.iter().filter(|e| e.name == "llm.token.delta").collect();
    assert_eq!(deltas.iter().map(|d| d.data["text"].as_str().unwrap()).collect::<Vec<_>>(), ["hel", "lo"]);
    let first_delta = seen.iter().position(|e| e.name == "llm.token.delta").unwrap();
    let reply = seen.iter().rposition(|e| e.name == "message").unwrap();
    assert!(first_delta < reply, "{seen:?}");
    assert_eq!(t.transcript("sse").await, ["user: hi", "assistant: hello"]);
}

// ---- a worker in another language ------------------------------------------

#[tokio::test]
async fn a_python_worker_written_from_the_protocol_reference_runs_a_tool_loop() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("workers/python_worker.py");
    let spawned = tokio::process::Command::new("python3")
        .arg(&script)
        .env("SUBS_WORKER_SECRET", "py-secret")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipped: python3 is not installed");
            return;
        }
        Err(e) => panic!("starting {}: {e}", script.display()),
    };
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let port = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("the worker prints its port")
        .unwrap()
        .expect("a line");
    let url = format!("http://127.0.0.1:{}/", port.trim());

    let t = TestEngine::start().await;
    t.engine.register_agent(TENANT, "python", http_worker(&url, HttpWorkerOptions::new().secret("py-secret")));
    let turn = t.chat("py", "python", r#"use tool multiply with {"a": 6, "b": 7}"#).await;
    assert_eq!(turn.status, TurnStatus::Done, "{turn:?}");
    assert_eq!(
        t.transcript("py").await,
        [
            r#"user: use tool multiply with {"a": 6, "b": 7}"#.to_owned(),
            r#"assistant:  [multiply {"a":6,"b":7}]"#.to_owned(),
            format!(
                "tool: {{\"product\":42}} (answers {})",
                t.snapshot("py").await.messages[1].tool_calls.as_ref().unwrap()[0].id
            ),
            r#"assistant: multiply returned {"product":42}."#.to_owned(),
        ]
    );
    let config = t.snapshot("py").await.record.agent.unwrap();
    assert_eq!(config.tool("multiply").unwrap().description.as_deref(), Some("Multiplies two numbers."));
    assert_eq!(config.system.as_deref(), Some("You multiply numbers with the multiply tool."));

    // The worker checks signatures: unsigned or wrongly signed requests
    // are refused, and the engine does not retry a 401.
    for options in [HttpWorkerOptions::new(), HttpWorkerOptions::new().secret("not-it")] {
        let err = HttpWorker::new(&url, options)
            .unwrap()
            .decide(Delivery::new(DecisionRequest::for_trigger(Trigger::SessionStart)))
            .await
            .unwrap_err();
        assert!(matches!(err, WorkerError::Http { status: 401, .. }), "{err}");
        assert!(!err.is_retryable());
    }
    child.kill().await.unwrap();
}

// ---- faults ----------------------------------------------------------------

/// How a misbehaving worker answers the turn's `client.messages` trigger,
/// given the delivery's `attempts` and the request; `None` never answers.
type Misbehaviour = Arc<dyn Fn(u32, &Value) -> Option<Response> + Send + Sync>;

/// A worker that answers `session.start` with a config whose retry policy
/// is short (`timeout_secs` 0.3, one retry, 10 ms backoff), passes every
/// other trigger through, and answers `client.messages` as `turn` says.
/// Returns its URL and the `attempts` of each `client.messages` delivery.
async fn misbehaving(turn: Misbehaviour) -> (String, Arc<Mutex<Vec<u32>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let handler = move |body: Bytes| {
        let (turn, log) = (turn.clone(), log.clone());
        async move {
            let request: Value = serde_json::from_slice(&body).unwrap();
            match request["trigger"]["type"].as_str().unwrap() {
                "session.start" => axum::Json(json!({"agent": {
                    "model": "subs/offline",
                    "retry": {"timeout_secs": 0.3, "max_retries": 1, "backoff_base_secs": 0.01, "backoff_max_secs": 0.01}
                }}))
                .into_response(),
                "client.messages" => {
                    let attempts = u32::try_from(request["attempts"].as_u64().unwrap()).unwrap();
                    log.lock().unwrap().push(attempts);
                    match turn(attempts, &request) {
                        Some(response) => response,
                        None => std::future::pending().await,
                    }
                }
                _ => axum::Json(request["proposed"].clone()).into_response(),
            }
        }
    };
    (serve(Router::new().route("/", axum::routing::post(handler))).await, seen)
}

/// A misbehaviour that always answers.
fn answer(f: impl Fn(u32, &Value) -> Response + Send + Sync + 'static) -> Misbehaviour {
    Arc::new(move |attempts, request| Some(f(attempts, request)))
}

fn sse(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

/// Runs one turn against `url` and returns the turn's failure text, or
/// `None` when it succeeded.
async fn turn_error(t: &TestEngine, session: &str, url: &str) -> Option<String> {
    t.engine.register_agent(TENANT, session, http_worker(url, HttpWorkerOptions::new()));
    let turn = t.chat(session, session, "hi").await;
    match turn.status {
        TurnStatus::Done => None,
        _ => Some(turn.data.unwrap()["error"].as_str().unwrap().to_owned()),
    }
}

#[tokio::test]
async fn a_slow_worker_times_out_is_retried_and_fails_the_turn_naming_the_timeout() {
    let t = TestEngine::start().await;
    let (url, seen) = misbehaving(Arc::new(|_, _| None)).await;
    let error = turn_error(&t, "slow", &url).await.expect("the turn fails");
    assert_eq!(error, "no decision after 2 deliveries: the agent did not decide within 300ms");
    assert_eq!(*seen.lock().unwrap(), [1, 2]);
    let snapshot = t.snapshot("slow").await;
    assert_eq!(snapshot.record.status, subs_engine::store::SessionStatus::Idle, "the session stays usable");
    assert!(snapshot.messages.is_empty(), "nothing of the failed turn was recorded");
}

#[tokio::test]
async fn a_500_is_retried_and_the_retry_succeeds() {
    let t = TestEngine::start().await;
    let (url, seen) = misbehaving(answer(|attempts, request| {
        if attempts == 1 {
            (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(json!({"error": "overloaded"}))).into_response()
        } else {
            axum::Json(request["proposed"].clone()).into_response()
        }
    }))
    .await;
    assert_eq!(turn_error(&t, "flaky", &url).await, None);
    assert_eq!(*seen.lock().unwrap(), [1, 2], "delivered again, with attempts counting up");
    assert_eq!(t.transcript("flaky").await, ["user: hi", "assistant: You said: hi"]);
}

#[tokio::test]
async fn garbage_replies_fail_the_turn_saying_what_is_wrong() {
    let t = TestEngine::start().await;
    let (url, seen) =
        misbehaving(answer(|_, _| axum::Json(json!({"actions": [{"type": "tool.call", "name": 5}]})).into_response()))
            .await;
    let error = turn_error(&t, "not-a-decision", &url).await.expect("the turn fails");
    assert!(
        error.starts_with(
            "no decision after 1 deliveries: the worker's reply (HTTP 200) is not a decision: actions[0].name: invalid type"
        ),
        "{error}"
    );
    assert_eq!(*seen.lock().unwrap(), [1], "a reply that breaks the protocol is not asked for again");

    let (url, _) =
        misbehaving(answer(|_, _| ([(header::CONTENT_TYPE, "application/json")], "oops").into_response())).await;
    let error = turn_error(&t, "not-json", &url).await.expect("the turn fails");
    assert!(error.contains("the worker's reply (HTTP 200) is not JSON: expected value"), "{error}");

    let (url, _) =
        misbehaving(answer(|_, _| ([(header::CONTENT_TYPE, "text/html")], "<h1>hi</h1>").into_response())).await;
    let error = turn_error(&t, "html", &url).await.expect("the turn fails");
    assert!(error.contains("(HTTP 200) has content type `text/html`"), "{error}");

    let (url, _) = misbehaving(answer(|_, _| (StatusCode::NOT_FOUND, "no such agent").into_response())).await;
    let error = turn_error(&t, "missing", &url).await.expect("the turn fails");
    assert_eq!(error, "no decision after 1 deliveries: the worker answered HTTP 404: no such agent", "not retried");
}

#[tokio::test]
async fn a_stream_cut_before_the_decision_is_retried() {
    let t = TestEngine::start().await;
    let (url, seen) = misbehaving(answer(|attempts, request| {
        let delta = "event: llm.token.delta\ndata: {\"text\":\"hel\"}\n\n";
        if attempts == 1 {
            sse(delta.to_owned())
        } else {
            sse(format!("{delta}event: decision.result\ndata: {}\n\n", request["proposed"]))
        }
    }))
    .await;
    assert_eq!(turn_error(&t, "cut", &url).await, None);
    assert_eq!(*seen.lock().unwrap(), [1, 2]);
    assert_eq!(t.transcript("cut").await, ["user: hi", "assistant: You said: hi"]);

    // Cut every time: the error says so.
    let (url, _) =
        misbehaving(answer(|_, _| sse("event: llm.token.delta\ndata: {}\n\nevent: decision.re".to_owned()))).await;
    let error = turn_error(&t, "always-cut", &url).await.expect("the turn fails");
    assert_eq!(
        error,
        "no decision after 2 deliveries: the worker's reply (HTTP 200) broke off: the event stream ended before \
         `decision.result` (after 1 deltas); its last event was not ended by a blank line"
    );
}

#[tokio::test]
async fn a_bad_signature_is_refused_by_the_sdk_and_not_retried() {
    let t = TestEngine::start().await;
    let app = subs_http_worker::router_with(tools::Tools::new(), WorkerOptions::new().require_signature("right"));
    let url = serve(app).await;
    t.engine.register_agent(TENANT, "wrong-secret", http_worker(&url, HttpWorkerOptions::new().secret("wrong")));
    let turn = t.chat("signed", "wrong-secret", "hi").await;
    assert_eq!(turn.status, TurnStatus::Failed);
    let error = turn.data.unwrap()["error"].as_str().unwrap().to_owned();
    assert_eq!(
        error,
        "no decision after 1 deliveries: the worker answered HTTP 401: signature refused: the signature does not \
         match the request (is the secret the same on both sides?)"
    );

    let unsigned = HttpWorker::new(&url, HttpWorkerOptions::new()).unwrap();
    let err = unsigned.decide(Delivery::new(DecisionRequest::for_trigger(Trigger::SessionStart))).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "the worker answered HTTP 401: signature refused: the request has no Subs-Signature header"
    );
}

// ---- the worker alone ------------------------------------------------------

#[tokio::test]
async fn unreachable_workers_are_transport_errors_worth_retrying() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let worker = HttpWorker::new(&format!("http://{addr}/"), HttpWorkerOptions::new()).unwrap();
    let err = worker.decide(Delivery::new(DecisionRequest::for_trigger(Trigger::SessionStart))).await.unwrap_err();
    assert!(matches!(err, WorkerError::Transport(_)), "{err}");
    assert!(
        err.to_string().starts_with(&format!("the worker could not be reached: could not connect to {addr}")),
        "{err}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn the_request_timeout_of_the_options_is_a_timeout() {
    let (url, _) = misbehaving(Arc::new(|_, _| None)).await;
    let worker = HttpWorker::new(&url, HttpWorkerOptions::new().timeout(Duration::from_millis(100))).unwrap();
    let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
    request.trigger =
        subs_protocol::from_value(json!({"type": "client.messages", "messages": [], "new_from": 0, "client": {}}))
            .unwrap();
    let err = worker.decide(Delivery::new(request)).await.unwrap_err();
    assert!(matches!(err, WorkerError::Timeout(d) if d == Duration::from_millis(100)), "{err}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn stream_replies_hand_deltas_to_the_sink_and_honour_error_events() {
    let body = Arc::new(Mutex::new(String::new()));
    let reply = body.clone();
    let app = Router::new().route(
        "/",
        axum::routing::post(move || {
            let reply = reply.clone();
            async move { sse(reply.lock().unwrap().clone()) }
        }),
    );
    let worker = HttpWorker::new(&serve(app).await, HttpWorkerOptions::new()).unwrap();
    let decide = |text: &str| {
        *body.lock().unwrap() = text.to_owned();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = {
            let seen = seen.clone();
            Arc::new(move |delta: StreamDelta| {
                seen.lock().unwrap().push(delta);
                Ok(())
            })
        };
        let delivery = Delivery { request: DecisionRequest::for_trigger(Trigger::SessionStart), deltas: Some(sink) };
        let worker = worker.clone();
        async move { (worker.decide(delivery).await, seen.lock().unwrap().clone()) }
    };

    let (decision, deltas) = decide(
        ": hello\r\nevent: llm.token.delta\r\ndata: {\"text\":\"a\"}\r\n\r\nevent: custom\ndata: 1\n\n\
         event: llm.token.delta\ndata: {\"reasoning\":\"b\"}\n\nevent: decision.result\ndata: {\"actions\":\ndata: [{\"type\":\"done\"}]}\n\n",
    )
    .await;
    assert_eq!(decision.unwrap().actions(), [Action::done()]);
    assert_eq!(deltas, [StreamDelta::text("a"), StreamDelta { reasoning: Some("b".into()), ..StreamDelta::default() }]);

    let (decision, _) = decide("event: error\ndata: {\"error\":\"lost the model\",\"retryable\":true}\n\n").await;
    let err = decision.unwrap_err();
    assert!(
        matches!(err, WorkerError::Declined { ref message, retryable: true } if message == "lost the model"),
        "{err}"
    );

    let (decision, _) = decide("event: llm.token.delta\ndata: {\"text\":5}\n\n").await;
    let err = decision.unwrap_err();
    assert!(matches!(err, WorkerError::BadReply { status: 200, problem: ReplyProblem::BadEvent { .. } }), "{err}");
    assert!(err.to_string().contains("unreadable `llm.token.delta` event: text: invalid type"), "{err}");

    let (decision, _) = decide("event: decision.result\ndata: {\"actions\": 1}\n\n").await;
    let err = decision.unwrap_err();
    assert!(err.to_string().contains("is not a decision: decision.result.actions: invalid type"), "{err}");
}

// ---- LLM calls in a provider's own format ----------------------------------

/// What a [`NativeLlm`] answers an `llm.execute` in a format with.
type NativeReply = fn(subs_protocol::LlmFormat) -> Value;

/// Handles its own LLM calls in `format`: checks that `llm.execute` carries
/// the provider's request body, and answers with `reply(format)`.
struct NativeLlm {
    format: subs_protocol::LlmFormat,
    reply: NativeReply,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl subs_sdk::Agent for NativeLlm {
    fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        match &request.trigger {
            Trigger::SessionStart => {
                let mut config = AgentConfig::new("anthropic/claude-test");
                config.system = Some("be brief".to_owned());
                config.handler = Some(subs_protocol::LlmHandler::Worker);
                config.format = Some(self.format);
                Ok(request.proposed.with_agent(config))
            }
            Trigger::LlmExecute(execute) => {
                assert_eq!(execute.format, Some(self.format));
                self.seen.lock().unwrap().push(execute.request.clone());
                Ok(DecisionResponse::new().with_action(Action::llm_result((self.reply)(self.format))))
            }
            _ => Ok(request.proposed),
        }
    }
}

fn native_reply(format: subs_protocol::LlmFormat) -> Value {
    match format {
        subs_protocol::LlmFormat::Openai => json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "claude-test",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "native hello"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
        }),
        subs_protocol::LlmFormat::Anthropic => json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "text", "text": "native hello"}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 5, "output_tokens": 2}
        }),
    }
}

async fn native_turn(format: subs_protocol::LlmFormat, reply: NativeReply) -> (TestEngine, TurnStatus, Vec<Value>) {
    native_turn_on(TestEngine::start().await, format, reply).await
}

/// [`native_turn`] on the engine `t`.
async fn native_turn_on(
    t: TestEngine,
    format: subs_protocol::LlmFormat,
    reply: NativeReply,
) -> (TestEngine, TurnStatus, Vec<Value>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let url = serve(subs_http_worker::router(NativeLlm { format, reply, seen: seen.clone() })).await;
    t.engine.register_agent(TENANT, "native", http_worker(&url, HttpWorkerOptions::new()));
    let status = t.chat("n", "native", "hi").await.status;
    let seen = seen.lock().unwrap().clone();
    (t, status, seen)
}

#[tokio::test]
async fn llm_execute_carries_the_provider_request_and_takes_its_response() {
    use subs_protocol::LlmFormat::{Anthropic, Openai};
    for format in [Openai, Anthropic] {
        let (t, status, seen) = native_turn(format, native_reply).await;
        assert_eq!(status, TurnStatus::Done, "{format:?}");
        assert_eq!(t.transcript("n").await, ["user: hi", "assistant: native hello"], "{format:?}");
        let request = &seen[0];
        // The provider's own model name and message shapes.
        assert_eq!(request["model"], "claude-test", "{request}");
        match format {
            Openai => {
                assert_eq!(request["messages"][0], json!({"role": "system", "content": "be brief"}), "{request}");
                assert_eq!(request["messages"][1]["role"], "user", "{request}");
            }
            Anthropic => {
                assert_eq!(request["system"], "be brief", "{request}");
                assert_eq!(request["messages"][0]["role"], "user", "{request}");
                assert!(request["max_tokens"].is_u64(), "Anthropic requires max_tokens: {request}");
            }
        }
    }
    // An `LlmResponse` is accepted too.
    let (t, status, _) = native_turn(Anthropic, |_| json!({"model": "x", "content": "plain"})).await;
    assert_eq!(status, TurnStatus::Done);
    assert_eq!(t.transcript("n").await, ["user: hi", "assistant: plain"]);
}

#[tokio::test]
async fn an_unreadable_native_response_fails_the_turn_saying_why() {
    let (t, status, _) = native_turn(subs_protocol::LlmFormat::Openai, |_| json!({"choices": "many"})).await;
    assert_eq!(status, TurnStatus::Failed);
    let step = t
        .store
        .steps(&SessionKey::new(TENANT, "n"), 0, usize::MAX)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, s)| s)
        .find(|s| s.error.is_some());
    let error = step.and_then(|s| s.error).expect("the rejected decision is recorded");
    assert!(error.contains("is neither an OpenAI Chat Completions response"), "{error}");
    assert_eq!(t.transcript("n").await, ["user: hi"], "nothing recorded is lost");
}

#[tokio::test]
async fn images_of_worker_replies_reach_the_recorded_message() {
    use subs_protocol::LlmFormat::{Anthropic, Openai};
    let url = "https://img.example/cat.png";
    let parts = json!([{"type": "text", "text": "a cat"}, {"type": "image_url", "image_url": {"url": url}}]);
    // An `LlmResponse` with `images`, and each provider's own body.
    let replies: [(subs_protocol::LlmFormat, NativeReply); 3] = [
        (Anthropic, |_| json!({"model": "x", "content": "a cat", "images": [{"url": "https://img.example/cat.png"}]})),
        (Openai, |_| {
            json!({"model": "m", "choices": [{"message": {"role": "assistant", "content": "a cat",
                "images": [{"type": "image_url", "image_url": {"url": "https://img.example/cat.png"}}]},
                "finish_reason": "stop"}]})
        }),
        (Anthropic, |_| {
            json!({"model": "m", "stop_reason": "end_turn", "content": [{"type": "text", "text": "a cat"},
                {"type": "image", "source": {"type": "url", "url": "https://img.example/cat.png"}}]})
        }),
    ];
    for (format, reply) in replies {
        let (t, status, _) = native_turn(format, reply).await;
        assert_eq!(status, TurnStatus::Done, "{format:?}");
        let snapshot = t.snapshot("n").await;
        let assistant = snapshot.messages.last().unwrap();
        assert_eq!(serde_json::to_value(&assistant.content).unwrap(), parts, "{format:?}");
        // The `llm.finished` trigger carried the same message.
        let steps = t.store.steps(&SessionKey::new(TENANT, "n"), 0, usize::MAX).await.unwrap();
        let finished = steps.iter().find_map(|(_, s)| match &s.trigger {
            subs_engine::store::StoredTrigger::Plain { trigger: Trigger::LlmFinished(f) } => f.message.clone(),
            _ => None,
        });
        assert_eq!(serde_json::to_value(finished.unwrap().content).unwrap(), parts, "{format:?}");
    }
}

/// A worker's answer to an `llm.execute` is priced as the engine prices its
/// own calls when it states no cost: by the call's model (here
/// `anthropic/claude-test`, $1 in / $2 out per million tokens), from the
/// usage in the provider's body or the `LlmResponse`. The cost adds to the
/// session and to the tenant's spend; a stated cost is kept.
#[tokio::test]
async fn worker_answered_llm_calls_are_priced_and_counted() {
    use subs_engine::model::{Models, Price, PriceTable};
    use subs_protocol::LlmFormat::{Anthropic, Openai};
    let replies: [(subs_protocol::LlmFormat, NativeReply, &str); 4] = [
        // 5 prompt tokens at $1/M and 2 completion tokens at $2/M.
        (Openai, native_reply, "0.000009"),
        (Anthropic, native_reply, "0.000009"),
        (
            Anthropic,
            |_| json!({"model": "x", "content": "hi", "usage": {"prompt_tokens": 10, "completion_tokens": 0}}),
            "0.00001",
        ),
        (Openai, |_| json!({"model": "x", "content": "hi", "cost": "0.5", "usage": {"prompt_tokens": 10}}), "0.5"),
    ];
    for (format, reply, cost) in replies {
        let mut prices = PriceTable::builtin();
        prices.insert("anthropic/claude-test", Price::per_million("1", "2"));
        let t = TestEngine::start_with_models(Models::with_offline().with_prices(prices)).await;
        let (t, status, _) = native_turn_on(t, format, reply).await;
        assert_eq!(status, TurnStatus::Done, "{format:?}");
        let snapshot = t.snapshot("n").await;
        assert_eq!(snapshot.record.cost.as_deref(), Some(cost), "{format:?}");
        assert!(snapshot.record.usage.as_object().is_some_and(|u| !u.is_empty()), "{}", snapshot.record.usage);
        assert_eq!(t.engine.reads().tenant_spent(TENANT).await.unwrap().to_string(), cost, "{format:?}");
        // `llm.finished` reports the same cost to the agent.
        let steps = t.store.steps(&SessionKey::new(TENANT, "n"), 0, usize::MAX).await.unwrap();
        let reported = steps.iter().find_map(|(_, s)| match &s.trigger {
            subs_engine::store::StoredTrigger::Plain { trigger: Trigger::LlmFinished(f) } => f.cost.clone(),
            _ => None,
        });
        assert_eq!(reported.as_deref(), Some(cost), "{format:?}");
    }
}

// ---- proposals and tool arguments ------------------------------------------

/// Passes `proposed` through and records every request; at session start
/// it declares `own_tools` (each run by `router`, which answers its
/// `tool.execute`s).
struct Recorder {
    router: subs_sdk::prelude::ToolRouter,
    seen: Arc<Mutex<Vec<DecisionRequest>>>,
}

impl subs_sdk::Agent for Recorder {
    fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        self.seen.lock().unwrap().push(request.clone());
        match &request.trigger {
            Trigger::SessionStart if !self.router.tools().is_empty() => {
                let config = AgentConfig::new("subs/offline").with_tools(self.router.tools());
                Ok(request.proposed.with_agent(config))
            }
            Trigger::ToolExecute(call) => Ok(DecisionResponse::new().with_action(self.router.execute(call))),
            _ => Ok(request.proposed),
        }
    }
}

/// An engine with a [`Recorder`] served over HTTP as agent `recorder`.
async fn recorder(router: subs_sdk::prelude::ToolRouter) -> (TestEngine, Arc<Mutex<Vec<DecisionRequest>>>) {
    let t = TestEngine::start().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let url = serve(subs_http_worker::router(Recorder { router, seen: seen.clone() })).await;
    t.engine.register_agent(TENANT, "recorder", http_worker(&url, HttpWorkerOptions::new()));
    (t, seen)
}

/// A turn's client tools are layered onto every proposal: `proposed.agent`
/// lists them after the config's tools and the proposal's `llm.call`
/// offers them, so a worker that passes the proposal through keeps them;
/// the model's call of one goes to the client as `tool.call`; and the
/// stored config does not keep them after the turn.
#[tokio::test]
async fn client_tools_are_layered_onto_proposals_and_not_kept() {
    use subs_protocol::client::{ClientMessages, ToolResult};
    use subs_protocol::{Action as A, AgentTool, ClientContext, ClientInput, DraftMessage, ToolHandler};
    let add = AgentTool::new("add").input(json!({"type": "object", "properties": {"a": {"type": "number"}}}));
    let router = subs_sdk::prelude::ToolRouter::new().tool(add, |_: Value| Ok::<_, String>(json!(1)));
    let (t, seen) = recorder(router).await;
    let mut events = t.engine.reads().subscribe(TENANT, "ct").unwrap();
    let confirm = AgentTool::new("confirm")
        .description("Asks the user.")
        .input(json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}));
    let input = ClientInput::ClientMessages(ClientMessages {
        agent_id: "recorder".to_owned(),
        turn_id: Some("t1".to_owned()),
        messages: vec![DraftMessage::user(r#"use tool confirm with {"ok": true}"#)],
        stream: None,
        client: Some(ClientContext { tools: Some(vec![confirm]), ..ClientContext::default() }),
    });
    t.engine.sessions().input(TENANT, "ct", input, Default::default()).await.unwrap();
    let call = loop {
        let event = tokio::time::timeout(Duration::from_secs(30), events.recv()).await.unwrap().unwrap();
        if event.name == "tool.call" {
            break event.data;
        }
    };
    assert_eq!((call["name"].as_str(), call["arguments"].as_str()), (Some("confirm"), Some(r#"{"ok":true}"#)));
    let id = call["id"].as_str().unwrap().to_owned();
    let result = ClientInput::ToolResult(ToolResult { id, attempt: None, result: Some(json!("yes")) });
    t.engine.sessions().input(TENANT, "ct", result, Default::default()).await.unwrap();
    assert_eq!(t.wait("ct", "t1").await.status, TurnStatus::Done);
    assert_eq!(t.transcript("ct").await.last().unwrap(), "assistant: confirm returned yes.");

    let seen = seen.lock().unwrap().clone();
    assert!(seen.len() >= 4, "{seen:?}");
    for request in &seen {
        let what = request.trigger.kind();
        let agent = request.proposed.agent.as_ref().unwrap_or_else(|| panic!("{what}: no proposed agent"));
        let names: Vec<&str> = agent.tools.iter().flatten().map(|t| t.name.as_str()).collect();
        // The config's own tool (from session start on), then the client's.
        assert_eq!(names.last(), Some(&"confirm"), "{what}: {names:?}");
        let client = agent.tools.iter().flatten().find(|t| t.name == "confirm").unwrap();
        assert_eq!(client.handler, Some(ToolHandler::Client), "{what}");
        for action in request.proposed.actions.iter().flatten() {
            if let A::LlmCall(call) = action {
                let offered: Vec<&str> = call.tools.iter().flatten().map(|t| t.name.as_str()).collect();
                assert_eq!(offered, ["add", "confirm"], "{what}");
            }
        }
    }
    assert!(
        seen.iter().any(|r| r.proposed.actions.iter().flatten().any(|a| matches!(a, A::LlmCall(_)))),
        "a proposal made an llm.call"
    );
    // Passed through every time, yet the stored config has only its own tool.
    let stored = t.snapshot("ct").await.record.agent.unwrap();
    let names: Vec<&str> = stored.tools.iter().flatten().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["add"]);
    // The next turn, without client tools, proposes no config change.
    assert_eq!(t.chat("ct", "recorder", "hi").await.status, TurnStatus::Done);
    let last = t.snapshot("ct").await.record.agent.unwrap();
    assert_eq!(last, stored);
}

/// A declared tool without an input schema takes no arguments: called with
/// some, its `tool.execute` input is `invalid` saying so (and the SDK's
/// router answers with that error); called with none, it is `valid`.
#[tokio::test]
async fn a_tool_without_an_input_schema_takes_no_arguments() {
    use subs_protocol::{AgentTool, ToolInput};
    let router = subs_sdk::prelude::ToolRouter::new()
        .tool(AgentTool::new("ping").description("Pings."), |_: Value| Ok::<_, String>("pong"));
    let (t, seen) = recorder(router).await;
    assert_eq!(t.chat("p", "recorder", r#"use tool ping with {"x": 1}"#).await.status, TurnStatus::Done);
    assert_eq!(t.chat("p", "recorder", "use tool ping").await.status, TurnStatus::Done);
    let inputs: Vec<ToolInput> = seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|r| match &r.trigger {
            Trigger::ToolExecute(call) => Some(call.input.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(inputs.len(), 2, "{inputs:?}");
    let ToolInput::Invalid { value, error } = &inputs[0] else { panic!("{inputs:?}") };
    assert_eq!(value, &json!({"x": 1}));
    assert!(error.contains("tool `ping` takes no arguments (it declares no input schema)"), "{error}");
    assert_eq!(inputs[1], ToolInput::Valid { value: json!({}) });
    let transcript = t.transcript("p").await;
    assert!(transcript[2].contains("takes no arguments"), "{transcript:?}");
    assert_eq!(transcript.last().unwrap(), "assistant: ping returned pong.");
}

/// A turn whose input came with a `traceparent` passes the trace on to
/// its HTTP worker, each delivery with its decision's span as parent,
/// even when the engine sends no spans itself; a turn without one sends
/// no `traceparent` at all.
#[tokio::test]
async fn an_http_worker_is_sent_the_trace_its_turn_joined() {
    let t = TestEngine::start().await;
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let kept = seen.clone();
    let app = subs_http_worker::router(tools::Tools::new()).layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let traceparent = request.headers().get("traceparent").map(|v| v.to_str().unwrap().to_owned());
            kept.lock().unwrap().push(traceparent);
            next.run(request)
        },
    ));
    let url = serve(app).await;
    t.engine.register_agent(TENANT, "tools-http", http_worker(&url, HttpWorkerOptions::new()));

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let incoming = subs_engine::telemetry::parse_traceparent(&format!("00-{trace_id}-00f067aa0ba902b7-01"));
    let input = subs_tests::user_input("tools-http", None, r#"use tool add with {"a": 1, "b": 2}"#);
    let sender = subs_engine::Sender::Tenant { key: None, identity: None };
    let accepted = t.engine.sessions().input_traced(TENANT, "traced", input, sender, incoming).await.unwrap();
    assert_eq!(t.wait("traced", &accepted.turn_id.unwrap()).await.status, TurnStatus::Done);
    let traced = std::mem::take(&mut *seen.lock().unwrap());
    // session.start, client.messages, llm.finished, tool.execute,
    // tool.finished, llm.finished.
    assert_eq!(traced.len(), 6, "{traced:?}");
    let mut parents = Vec::new();
    for header in &traced {
        let header = header.as_deref().expect("every delivery carries the trace");
        let span = subs_engine::telemetry::parse_traceparent(header).expect("a valid traceparent");
        assert_eq!(span.trace_id, trace_id);
        assert_ne!(span.span_id, "00f067aa0ba902b7", "each delivery is a span of its own, under the turn");
        parents.push(span.span_id);
    }
    parents.sort();
    parents.dedup();
    assert_eq!(parents.len(), 6, "one span per decision");

    // Without a traceparent, and with no spans sent, nothing is traced.
    assert_eq!(t.chat("untraced", "tools-http", "hello").await.status, TurnStatus::Done);
    let untraced = std::mem::take(&mut *seen.lock().unwrap());
    assert!(!untraced.is_empty() && untraced.iter().all(Option::is_none), "{untraced:?}");
}
