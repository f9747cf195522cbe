//! Tenants' MCP servers as tool sources, over the real `subs serve`
//! against a real MCP server: `tests/mcp/server.py`, made with the Python
//! SDK (`subs_tests::mcp`), on 127.0.0.1.
//!
//! The agent is an HTTP worker served from the test process that takes
//! the engine's proposals and, at `session.start`, names the server in its
//! config's `mcp`; the model is the offline one, which calls the tool a
//! user message names (`use tool demo__echo with …`).

use std::time::Duration;

use serde_json::{Value, json};
use subs_protocol::{Action, McpServerUse, RetryPolicy};
use subs_sdk::prelude::{Agent, Context, DecideError, DecisionRequest, DecisionResponse, Trigger};
use subs_tests::guests;
use subs_tests::mcp::FastMcp;

use crate::{Server, http, stream_turn};

/// Takes the engine's proposals; names the MCP servers at `session.start`,
/// and gives the tool calls it proposes the retry policy, when there is
/// one.
struct UsesMcp(Vec<McpServerUse>, Option<RetryPolicy>);

impl Agent for UsesMcp {
    fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        let mut decision = request.proposed.clone();
        if matches!(request.trigger, Trigger::SessionStart)
            && let Some(agent) = decision.agent.as_mut()
        {
            agent.mcp = Some(self.0.clone());
        }
        for action in decision.actions.iter_mut().flatten() {
            if let Action::ToolCall(call) = action {
                call.retry.clone_from(&self.1);
            }
        }
        Ok(decision)
    }
}

/// Serves the agent on a free loopback port; its URL.
async fn worker(servers: &[&str]) -> String {
    worker_with(servers, None).await
}

/// As [`worker`], the agent's tool calls retried per `retry`.
async fn worker_with(servers: &[&str], retry: Option<RetryPolicy>) -> String {
    let uses = servers.iter().map(|s| McpServerUse { server: (*s).to_owned(), tools: None }).collect();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let addr = listener.local_addr().expect("a bound address");
    tokio::spawn(subs_http_worker::serve(listener, UsesMcp(uses, retry)));
    format!("http://{addr}/")
}

/// Three quick retries: a call that fails retryably is sent four times.
fn three_retries() -> Option<RetryPolicy> {
    Some(RetryPolicy { timeout_secs: Some(10.0), max_retries: 3, backoff_base_secs: 0.05, backoff_max_secs: 0.1 })
}

/// A `subs serve` whose config lets MCP servers be on 127.0.0.1, with
/// `extra` TOML appended; its data directory is `dir`.
fn serve(dir: &std::path::Path, extra: &str) -> Server {
    serve_config(dir, &format!("private_hosts = [\"127.0.0.1\"]\n{extra}"))
}

/// A `subs serve` with the config `toml`; its data directory is in `dir`.
fn serve_config(dir: &std::path::Path, toml: &str) -> Server {
    let config = dir.join("subs.toml");
    std::fs::write(&config, toml).unwrap();
    let data = dir.join("data");
    Server::start_with(&["--config", config.to_str().unwrap(), "--data", data.to_str().unwrap()], "127.0.0.1:0")
}

async fn put_json(url: &str, body: Value) -> (u16, Value) {
    let response = http()
        .put(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the server answers");
    read(response).await
}

async fn get_json(url: &str) -> (u16, Value) {
    read(http().get(url).send().await.expect("the server answers")).await
}

async fn read(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let bytes = response.bytes().await.unwrap_or_default();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// Registers the MCP server and the agent using it.
async fn setup(server: &Server, mcp: &FastMcp, name: &str) {
    let (status, body) = put_json(&format!("{}/v1/mcp-servers/{name}", server.url), json!({"url": mcp.url()})).await;
    assert_eq!(status, 200, "{body}");
    let worker = worker(&[name]).await;
    let (status, body) = put_json(&format!("{}/v1/agents/mcp", server.url), json!({"url": worker})).await;
    assert!(status == 200 || status == 201, "{body}");
}

/// The events of a turn of `text`; the turn's last event.
async fn turn(server: &Server, session: &str, text: &str) -> (Vec<(Option<u64>, String, Value)>, (String, Value)) {
    let events = stream_turn(&server.url, session, "mcp", text).await;
    let (_, name, data) = events.last().cloned().expect("events");
    (events, (name, data))
}

/// The `tool` messages of a session, by its snapshot.
async fn tool_messages(server: &Server, session: &str) -> Vec<Value> {
    let (status, snapshot) = get_json(&format!("{}/v1/sessions/{session}", server.url)).await;
    assert_eq!(status, 200, "{snapshot}");
    snapshot["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "tool").cloned().collect()
}

/// The text of the turn's last assistant message.
fn reply(events: &[(Option<u64>, String, Value)]) -> String {
    events
        .iter()
        .rev()
        .filter(|(_, name, data)| name == "message" && data["message"]["role"] == "assistant")
        .find_map(|(_, _, data)| data["message"]["content"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_tool_answers_a_turn_and_is_recorded_once() {
    let Some(mcp) = FastMcp::start("normal") else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), "");
    setup(&server, &mcp, "demo").await;

    let (events, (last, data)) = turn(&server, "s1", r#"use tool demo__echo with {"text": "hi"}"#).await;
    assert_eq!(last, "turn.done", "{data}");
    assert_eq!(reply(&events), "demo__echo returned echo: hi.");
    let tools = tool_messages(&server, "s1").await;
    assert_eq!(tools.len(), 1, "the result is recorded once: {tools:?}");
    assert_eq!(tools[0]["content"], "echo: hi");

    // The registry lists it without its headers, with its tools.
    let (_, listed) = get_json(&format!("{}/v1/mcp-servers", server.url)).await;
    assert_eq!(listed[0]["name"], "demo");
    assert_eq!(listed[0]["status"], "ready", "{listed}");
    assert_eq!(listed[0]["tool_count"], 6, "{listed}");
    assert!(listed[0].get("headers").is_none());
    let (_, one) = get_json(&format!("{}/v1/mcp-servers/demo", server.url)).await;
    let names: Vec<&str> = one["tools"].as_array().unwrap().iter().filter_map(|t| t["offered_as"].as_str()).collect();
    assert!(names.contains(&"demo__add") && names.contains(&"demo__echo"), "{one}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_content_is_checked_and_is_error_fails_the_call() {
    let Some(mcp) = FastMcp::start("normal") else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), "");
    setup(&server, &mcp, "demo").await;

    // `add` has an output schema and answers structuredContent.
    let (events, (last, _)) = turn(&server, "s1", r#"use tool demo__add with {"a": 1, "b": 2}"#).await;
    assert_eq!(last, "turn.done");
    assert_eq!(reply(&events), r#"demo__add returned {"sum":3.0}."#);

    // `fail` answers isError: the call settles as an error naming the
    // server and the tool, not retried.
    let (events, (last, _)) = turn(&server, "s2", r#"use tool demo__fail with {"reason": "testing"}"#).await;
    assert_eq!(last, "turn.done");
    let tools = tool_messages(&server, "s2").await;
    assert_eq!(tools.len(), 1, "{tools:?}");
    let text = tools[0]["content"].as_str().unwrap();
    assert!(text.contains("MCP server `demo` tool `fail` failed") && text.contains("failing on purpose"), "{text}");
    assert!(reply(&events).contains("demo__fail returned"), "{}", reply(&events));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_ends_the_call_at_its_deadline() {
    let Some(mcp) = FastMcp::start("normal") else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), "[timeouts]\ncall_secs = 1\n[retry]\nmax_retries = 0\n");
    setup(&server, &mcp, "demo").await;
    let started = std::time::Instant::now();
    let (_, (last, _)) = turn(&server, "s1", "use tool demo__hang").await;
    assert_eq!(last, "turn.done");
    let tools = tool_messages(&server, "s1").await;
    let text = tools[0]["content"].as_str().unwrap();
    assert!(text.contains("deadline") || text.contains("did not finish within"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_gets_a_new_session_and_the_next_call_succeeds() {
    let Some(mut mcp) = FastMcp::start("normal") else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), "");
    setup(&server, &mcp, "demo").await;
    let (events, _) = turn(&server, "s1", r#"use tool demo__echo with {"text": "one"}"#).await;
    assert_eq!(reply(&events), "demo__echo returned echo: one.");
    // A new process: the engine's MCP session id is unknown to it (404).
    mcp.restart();
    let (events, _) = turn(&server, "s1", r#"use tool demo__echo with {"text": "two"}"#).await;
    assert_eq!(reply(&events), "demo__echo returned echo: two.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_by_kill_9_completes_after_the_restart() {
    let Some(mcp) = FastMcp::start("normal") else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(dir.path(), "[timeouts]\ncall_secs = 60\n");
    setup(&server, &mcp, "demo").await;
    let input = json!({
        "type": "client.message",
        "agent_id": "mcp",
        "turn_id": "t1",
        "message": {"role": "user", "content": r#"use tool demo__slow with {"steps": 40}"#},
        "stream": true,
    });
    // The call is stored before it is sent: once the server reports its
    // progress, the engine dies between storing the call and its result.
    let mut response = http()
        .post(format!("{}/v1/sessions/k/input", server.url))
        .header("content-type", "application/json")
        .body(input.to_string())
        .send()
        .await
        .unwrap();
    let mut seen = String::new();
    while !seen.contains("event: tool.progress") {
        let chunk = tokio::time::timeout(Duration::from_secs(30), response.chunk()).await.unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk.expect("progress before the stream ends")));
    }
    assert!(!seen.contains("\"role\":\"tool\""), "killed before the result: {seen}");
    server.process.child.kill().unwrap();
    server.process.child.wait().unwrap();
    drop(response);

    let server = serve(dir.path(), "[timeouts]\ncall_secs = 60\n");
    // The same input again streams the turn the restart resumed.
    let events = stream_turn_with(&server.url, "k", &input).await;
    let (_, last, _) = events.last().unwrap();
    assert_eq!(last, "turn.done", "{events:?}");
    assert_eq!(reply(&events), "demo__slow returned done after 40 steps.");
    let tools = tool_messages(&server, "k").await;
    assert_eq!(tools.len(), 1, "one result: {tools:?}");
}

/// As [`stream_turn`], with the whole input given.
async fn stream_turn_with(url: &str, session: &str, input: &Value) -> Vec<(Option<u64>, String, Value)> {
    let response = http()
        .post(format!("{url}/v1/sessions/{session}/input"))
        .header("content-type", "application/json")
        .body(input.to_string())
        .send()
        .await
        .expect("the server answers");
    assert_eq!(response.status(), 200);
    let bytes = tokio::time::timeout(crate::PATIENCE, response.bytes()).await.unwrap().unwrap();
    subs_protocol::sse::SseParser::new()
        .push(&bytes)
        .unwrap()
        .into_iter()
        .map(|e| (e.id.and_then(|i| i.parse().ok()), e.event, serde_json::from_str(&e.data).unwrap_or(Value::Null)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_at_a_forbidden_host_is_refused_before_any_connection() {
    let dir = tempfile::tempdir().unwrap();
    // No `private_hosts`: loopback and private addresses are refused.
    let server = serve_config(dir.path(), "");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    for (name, url) in [
        ("local", format!("http://127.0.0.1:{port}/mcp")),
        ("metadata", "http://169.254.169.254/mcp".to_owned()),
        ("private", "http://10.1.2.3/mcp".to_owned()),
        ("named", format!("http://localhost:{port}/mcp")),
    ] {
        let (status, body) = put_json(&format!("{}/v1/mcp-servers/{name}", server.url), json!({"url": url})).await;
        assert_eq!(status, 400, "{name}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains(&format!("MCP server `{name}`")) && error.contains("not a public address"), "{error}");
        assert_eq!(body["field"], "url");
    }
    // Nothing connected to the listener, and nothing was registered.
    let accepted = tokio::time::timeout(Duration::from_millis(300), listener.accept()).await;
    assert!(accepted.is_err(), "a refused server was connected to");
    let (_, listed) = get_json(&format!("{}/v1/mcp-servers", server.url)).await;
    assert_eq!(listed, json!([]));
    // Bad names, too many: refused with the rule.
    let (status, body) =
        put_json(&format!("{}/v1/mcp-servers/a_b", server.url), json!({"url": "https://example.com/"})).await;
    assert_eq!((status, body["field"].as_str()), (400, Some("name")), "{body}");
}

/// Serves `app` on a loopback port for as long as the test runs; the URL
/// of its `/mcp` route.
async fn serve_mcp(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/mcp")
}

/// An MCP server that answers `initialize` and `tools/list` properly and
/// `tools/call` with `call` (a body), as `content_type`.
async fn broken_server(call: &'static str, content_type: &'static str) -> String {
    use axum::response::IntoResponse;
    let handler = move |body: axum::body::Bytes| async move {
        let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let id = message["id"].clone();
        let result = match message["method"].as_str() {
            Some("initialize") => json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "broken", "version": "1"}
            }),
            Some("tools/list") => json!({"tools": [{"name": "x", "inputSchema": {"type": "object"}}]}),
            Some("tools/call") => {
                return ([("content-type", content_type)], call.replace("ID", &id.to_string())).into_response();
            }
            _ => return axum::http::StatusCode::ACCEPTED.into_response(),
        };
        axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
    };
    serve_mcp(axum::Router::new().route("/mcp", axum::routing::post(handler))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_json_rpc_an_oversized_result_and_a_colliding_name_are_errors_naming_server_and_tool() {
    let Some(mcp) = FastMcp::start("collide") else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), "[mcp_servers]\nmax_result_bytes = 65536\n");
    setup(&server, &mcp, "demo").await;
    let garbage = broken_server(r#"{"jsonrpc": "2.0", "id": ID, "nothing": true}"#, "application/json").await;
    let (status, body) = put_json(&format!("{}/v1/mcp-servers/bad", server.url), json!({"url": garbage})).await;
    assert_eq!(status, 200, "{body}");
    let html = broken_server("<html>oops</html>", "text/html").await;
    put_json(&format!("{}/v1/mcp-servers/html", server.url), json!({"url": html})).await;
    // The agent uses all three servers.
    let worker = worker(&["demo", "bad", "html"]).await;
    put_json(&format!("{}/v1/agents/mcp", server.url), json!({"url": worker})).await;

    let error_of = async |session: &str, text: &str| {
        let (_, (last, _)) = turn(&server, session, text).await;
        assert_eq!(last, "turn.done");
        let tools = tool_messages(&server, session).await;
        assert_eq!(tools.len(), 1, "{tools:?}");
        tools[0]["content"].as_str().unwrap().to_owned()
    };
    let invalid = error_of("s1", "use tool bad__x").await;
    assert!(invalid.contains("MCP server `bad` tool `x`") && invalid.contains("not valid JSON-RPC"), "{invalid}");
    let html = error_of("s2", "use tool html__x").await;
    assert!(html.contains("MCP server `html` tool `x`") && html.contains("text/html"), "{html}");
    let big = error_of("s3", r#"use tool demo__big with {"size": 200000}"#).await;
    assert!(big.contains("MCP server `demo` tool `big`") && big.contains("over the limit of 65536 bytes"), "{big}");

    // The colliding tool is not offered, and says why.
    let (_, one) = get_json(&format!("{}/v1/mcp-servers/demo", server.url)).await;
    let tools = one["tools"].as_array().unwrap();
    let skipped: Vec<&str> = tools.iter().filter_map(|t| t["skipped"].as_str()).collect();
    assert_eq!(skipped.len(), 1, "{one}");
    assert!(skipped[0].contains("MCP server `demo` tool `a_b`") && skipped[0].contains("collides"), "{}", skipped[0]);
    let (events, _) = turn(&server, "s4", "use tool demo__a_b").await;
    assert_eq!(reply(&events), "demo__a_b returned a.b.", "the first of the name keeps it");

    // Nothing else is affected: the same session and server go on.
    let (events, _) = turn(&server, "s3", r#"use tool demo__echo with {"text": "still"}"#).await;
    assert_eq!(reply(&events), "demo__echo returned echo: still.");
    let (_, listed) = get_json(&format!("{}/v1/mcp-servers", server.url)).await;
    let bad = listed.as_array().unwrap().iter().find(|s| s["name"] == "bad").unwrap();
    assert_eq!(bad["status"], "error", "{listed}");
    assert!(bad["last_error"].as_str().unwrap().contains("tool `x`"), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subs_run_takes_mcp_servers_on_the_command_line() {
    let Some(mcp) = FastMcp::start("normal") else { return };
    let worker = worker(&["demo"]).await;
    let demo = format!("demo={}", mcp.url());
    let output = tokio::task::spawn_blocking(move || {
        crate::output(&["run", &worker, r#"use tool demo__echo with {"text": "run"}"#, "--mcp", &demo])
    })
    .await
    .unwrap();
    assert!(output.stdout.contains("demo__echo returned echo: run."), "{}\n{}", output.stdout, output.stderr);

    // A server over standard input and output, started by the run.
    let worker = self::worker(&["local"]).await;
    let python = subs_tests::mcp::python().expect("installed above");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp/server.py");
    let local = format!("local=stdio:{} {} 0 --stdio", python.display(), script.display());
    let output = tokio::task::spawn_blocking(move || {
        crate::output(&["run", &worker, r#"use tool local__echo with {"text": "stdio"}"#, "--mcp", &local])
    })
    .await
    .unwrap();
    assert!(output.stdout.contains("local__echo returned echo: stdio."), "{}\n{}", output.stdout, output.stderr);

    let output = tokio::task::spawn_blocking(|| crate::output(&["run", "http://127.0.0.1:9/", "hi", "--mcp", "nope"]))
        .await
        .unwrap();
    assert!(output.stderr.contains("--mcp takes NAME=URL"), "{}", output.stderr);
}

/// Starts `program script` (an agent of `tests/mcp/agents`) and reads the
/// port it listens on; the child is killed when dropped.
struct ScriptWorker(std::process::Child, String);

impl ScriptWorker {
    fn start(program: &str, script: &str) -> Self {
        use std::io::BufRead as _;
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp/agents").join(script);
        let mut child = std::process::Command::new(program)
            .arg(path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{program} {script}: {e}"));
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port: u16 = line.trim().parse().unwrap_or_else(|_| panic!("{script} printed {line:?}, not its port"));
        Self(child, format!("http://127.0.0.1:{port}/"))
    }
}

impl Drop for ScriptWorker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One FastMCP server, three agents naming it in their config: a Rust
/// HTTP worker, a Python one (the Python SDK), and a TypeScript component
/// (`tests/mcp/agent-ts`, type-checked and built by `tests/build.rs` with
/// the toolchain `examples/approver-ts` pins).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mcp_server_serves_a_rust_a_python_and_a_typescript_agent() {
    let Some(mcp) = FastMcp::start("normal") else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), "");
    let (status, body) = put_json(&format!("{}/v1/mcp-servers/demo", server.url), json!({"url": mcp.url()})).await;
    assert_eq!(status, 200, "{body}");
    let python = tokio::task::spawn_blocking(|| ScriptWorker::start("python3", "agent.py")).await.unwrap();
    let agents = [("rust", worker(&["demo"]).await), ("python", python.1.clone())];
    for (language, url) in &agents {
        let (status, body) = put_json(&format!("{}/v1/agents/mcp-{language}", server.url), json!({"url": url})).await;
        assert!(status == 200 || status == 201, "{language}: {body}");
    }
    let url = server.url.clone();
    let put = tokio::task::spawn_blocking(move || {
        crate::output(&["agents", "put", "mcp-typescript", guests::TEST_TS_MCP, "--server", &url])
    })
    .await
    .unwrap();
    assert_eq!(put.code, Some(0), "{}", put.stderr);
    for language in ["rust", "python", "typescript"] {
        let text = format!(r#"use tool demo__echo with {{"text": "{language}"}}"#);
        let session = format!("s-{language}");
        let events = stream_turn(&server.url, &session, &format!("mcp-{language}"), &text).await;
        assert_eq!(reply(&events), format!("demo__echo returned echo: {language}."), "{language}: {events:?}");
        let tools = tool_messages(&server, &session).await;
        assert_eq!(tools.len(), 1, "{language}: one result recorded: {tools:?}");
        assert_eq!(tools[0]["content"], format!("echo: {language}"), "{language}");
    }
}

/// The client learns each server's era: the SDK's dual-era server is
/// spoken to in the stateless revision (2026-07-28: `server/discover`,
/// then `_meta` and headers on every request, `x-mcp-header` arguments
/// mirrored, which the SDK checks), and the same server behind a
/// handshake-only front through `initialize`, in the newest handshake
/// revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_server_is_spoken_statelessly_and_a_legacy_one_through_initialize() {
    let Some(modern) = FastMcp::start("eras") else { return };
    let Some(legacy) = FastMcp::start("legacy") else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), "");
    for (name, mcp) in [("new", &modern), ("old", &legacy)] {
        let url = format!("{}/v1/mcp-servers/{name}", server.url);
        let (status, body) = put_json(&url, json!({"url": mcp.url()})).await;
        assert_eq!(status, 200, "{body}");
    }
    let worker = worker(&["new", "old"]).await;
    let (status, body) = put_json(&format!("{}/v1/agents/mcp", server.url), json!({"url": worker})).await;
    assert!(status == 200 || status == 201, "{body}");

    let (events, (last, data)) = turn(&server, "s1", r#"use tool new__era with {}"#).await;
    assert_eq!(last, "turn.done", "{data}");
    assert_eq!(reply(&events), "new__era returned 2026-07-28.");
    let (events, (last, data)) = turn(&server, "s1", r#"use tool old__era with {}"#).await;
    assert_eq!(last, "turn.done", "{data}");
    assert_eq!(reply(&events), "old__era returned 2025-11-25.");

    // A mirrored argument that is not plain ASCII goes base64 in its
    // header; the server checks it against the body.
    for name in ["new", "old"] {
        let text = format!(r#"use tool {name}__region with {{"region": "Hello, 世界"}}"#);
        let (events, (last, data)) = turn(&server, "s2", &text).await;
        assert_eq!(last, "turn.done", "{data}");
        assert_eq!(reply(&events), format!("{name}__region returned region: Hello, 世界."));
    }
    let (_, listed) = get_json(&format!("{}/v1/mcp-servers", server.url)).await;
    for entry in listed.as_array().unwrap() {
        assert_eq!(entry["status"], "ready", "{listed}");
        assert_eq!(entry["tool_count"], 8, "{listed}");
    }
}

/// A stateless (2026-07-28) call to an agent's MCP endpoint whose stream
/// the client closes while the turn runs (here, waiting on an MCP tool
/// that never answers) cancels that turn: it ends long before the tool's
/// deadline, without the tool's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_stateless_call_stream_cancels_its_turn() {
    let Some(mcp) = FastMcp::start("normal") else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), "[timeouts]\ncall_secs = 60\n[retry]\nmax_retries = 0\n");
    setup(&server, &mcp, "demo").await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": "p"});
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "mcp",
        "arguments": {"message": "use tool demo__hang", "session_id": "closed"}, "_meta": meta}});
    let started = std::time::Instant::now();
    let mut response = http()
        .post(format!("{}/v1/agents/mcp/mcp", server.url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "mcp")
        .body(call.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // Read until the agent calls the tool, then go away.
    let mut seen = String::new();
    while !seen.contains("the agent calls demo__hang") {
        let chunk = tokio::time::timeout(Duration::from_secs(20), response.chunk()).await.expect("progress comes");
        seen.push_str(&String::from_utf8_lossy(&chunk.unwrap().expect("the stream goes on")));
    }
    drop(response);
    let view = subs_tests::wait::eventually(Duration::from_secs(20), "the turn ends", || async {
        let (_, view) = get_json(&format!("{}/v1/sessions/closed", server.url)).await;
        if view["turn_id"].is_null() { Ok(view) } else { Err(view) }
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(30), "ended by the cancel: {:?}", started.elapsed());
    assert!(
        tool_messages(&server, "closed").await.iter().all(|m| !m["content"].as_str().unwrap_or("").contains("never")),
        "{view}"
    );
}

/// What [`header_server`] saw: each request's method, with the tool and
/// its `Mcp-Param-Region` header for a `tools/call`.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// A modern (2026-07-28) MCP server that checks a call's mirrored
/// argument the way the revision asks: `region` goes in the header the
/// tool's `x-mcp-header` names. Until the first `tools/call`, `tools/list`
/// marks `lookup`'s `region` as `Old`, from then on as `Region` (the tool
/// changed after the engine listed it), and a call wants `Mcp-Param-Region`;
/// `stuck` refuses every call's headers. A mismatch is answered 400 with
/// JSON-RPC error -32020.
async fn header_server() -> (String, Seen) {
    use axum::response::IntoResponse;
    let seen = Seen::default();
    let called = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let log = seen.clone();
    let handler = move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
        let (seen, called) = (log.clone(), called.clone());
        async move {
            let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let id = message["id"].clone();
            let method = message["method"].as_str().unwrap_or_default().to_owned();
            let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let result = match method.as_str() {
                "server/discover" => {
                    seen.lock().unwrap().push(method);
                    json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}, "resultType": "complete",
                        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "headers", "version": "1"}}})
                }
                "tools/list" => {
                    seen.lock().unwrap().push(method);
                    let mark = if called.load(std::sync::atomic::Ordering::SeqCst) { "Region" } else { "Old" };
                    let schema = json!({"type": "object",
                        "properties": {"region": {"type": "string", "x-mcp-header": mark}}});
                    json!({"tools": [{"name": "lookup", "inputSchema": schema},
                        {"name": "stuck", "inputSchema": {"type": "object",
                            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}}],
                        "resultType": "complete"})
                }
                "tools/call" => {
                    let tool = message["params"]["name"].as_str().unwrap_or_default().to_owned();
                    let region = message["params"]["arguments"]["region"].as_str().map(str::to_owned);
                    let sent = header("mcp-param-region");
                    called.store(true, std::sync::atomic::Ordering::SeqCst);
                    seen.lock().unwrap().push(format!("tools/call {tool} {}", sent.as_deref().unwrap_or("-")));
                    if tool == "stuck" || sent.is_none() || sent != region {
                        let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32020,
                            "message": "Mcp-Param-Region does not match the body's `region`"}});
                        return (axum::http::StatusCode::BAD_REQUEST, axum::Json(error)).into_response();
                    }
                    json!({"content": [{"type": "text", "text": format!("region {}", region.unwrap_or_default())}],
                        "resultType": "complete"})
                }
                _ => return axum::http::StatusCode::ACCEPTED.into_response(),
            };
            axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
        }
    };
    (serve_mcp(axum::Router::new().route("/mcp", axum::routing::post(handler))).await, seen)
}

/// A modern server refusing a call's mirrored headers (-32020) gets the
/// call once more, after the tool is listed again, with the headers of
/// its new schema; a server that refuses that one too ends the call with
/// an error naming the server, the tool and the refusal, sent no more
/// than twice and not retried by the agent's policy (which retries three
/// times what may pass).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_mismatch_is_listed_again_and_sent_once_more() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), "");
    let (url, seen) = header_server().await;
    let (status, body) = put_json(&format!("{}/v1/mcp-servers/hdr", server.url), json!({"url": url})).await;
    assert_eq!(status, 200, "{body}");
    let worker = worker_with(&["hdr"], three_retries()).await;
    let (status, body) = put_json(&format!("{}/v1/agents/mcp", server.url), json!({"url": worker})).await;
    assert!(status == 200 || status == 201, "{body}");

    let (events, (last, data)) = turn(&server, "s1", r#"use tool hdr__lookup with {"region": "eu-west"}"#).await;
    assert_eq!(last, "turn.done", "{data}");
    assert_eq!(reply(&events), "hdr__lookup returned region eu-west.", "{events:?}");
    // The first send mirrored nothing the server asks for (the schema
    // listed before named `Old`); after one new listing, the second sent
    // `Mcp-Param-Region`.
    let seen_now = seen.lock().unwrap().clone();
    let first = seen_now.iter().position(|m| m.starts_with("tools/call")).expect("a call");
    assert_eq!(seen_now[first..], ["tools/call lookup -", "tools/list", "tools/call lookup eu-west"], "{seen_now:?}");
    assert_eq!(tool_messages(&server, "s1").await.len(), 1);

    seen.lock().unwrap().clear();
    let (_, (last, data)) = turn(&server, "s2", r#"use tool hdr__stuck with {"region": "eu-west"}"#).await;
    assert_eq!(last, "turn.done", "{data}");
    let tools = tool_messages(&server, "s2").await;
    assert_eq!(tools.len(), 1, "{tools:?}");
    let text = tools[0]["content"].as_str().unwrap();
    assert!(text.contains("MCP server `hdr` tool `stuck`") && text.contains("-32020"), "{text}");
    assert!(text.contains("Mcp-Param-Region does not match"), "{text}");
    let calls = seen.lock().unwrap().iter().filter(|m| m.starts_with("tools/call")).count();
    assert_eq!(calls, 2, "sent once more, then not retried: {:?}", seen.lock().unwrap());
}

/// An MCP server whose tool `ask` wants input from the client: legacy
/// (`modern` false), its call's event stream carries `elicitation/create`,
/// `sampling/createMessage`, `roots/list` and `ping` requests before the
/// result, and what the client answers each is kept; modern, the call's
/// result is `input_required` for an elicitation. `Seen` has each
/// `tools/call` and each answer the client posted.
async fn asking_server(modern: bool) -> (String, Seen) {
    use axum::response::IntoResponse;
    let seen = Seen::default();
    let log = seen.clone();
    let handler = move |body: axum::body::Bytes| {
        let seen = log.clone();
        async move {
            let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let id = message["id"].clone();
            let result = match message["method"].as_str() {
                Some("server/discover") if modern => {
                    json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                        "resultType": "complete"})
                }
                Some("initialize") if !modern => json!({"protocolVersion": "2025-06-18",
                    "capabilities": {"tools": {}}, "serverInfo": {"name": "asking", "version": "1"}}),
                Some("tools/list") => json!({"tools": [{"name": "ask", "inputSchema": {"type": "object"}}]}),
                Some("tools/call") if modern => {
                    seen.lock().unwrap().push("tools/call".to_owned());
                    json!({"resultType": "input_required", "requestState": "s",
                        "inputRequests": {"q": {"method": "elicitation/create",
                            "params": {"mode": "form", "message": "which?", "requestedSchema": {"type": "object"}}}}})
                }
                Some("tools/call") => {
                    seen.lock().unwrap().push("tools/call".to_owned());
                    let asks = [
                        json!({"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create",
                            "params": {"mode": "form", "message": "which?", "requestedSchema": {"type": "object"}}}),
                        json!({"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage",
                            "params": {"messages": [], "maxTokens": 10}}),
                        json!({"jsonrpc": "2.0", "id": "r1", "method": "roots/list"}),
                        json!({"jsonrpc": "2.0", "id": "p1", "method": "ping"}),
                        json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "asked"}]}}),
                    ];
                    let stream: String = asks.iter().map(|m| format!("event: message\ndata: {m}\n\n")).collect();
                    return ([("content-type", "text/event-stream")], stream).into_response();
                }
                // The client's answers to the server's requests.
                None if !id.is_null() => {
                    seen.lock().unwrap().push(message.to_string());
                    return axum::http::StatusCode::ACCEPTED.into_response();
                }
                _ => return axum::http::StatusCode::ACCEPTED.into_response(),
            };
            axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
        }
    };
    (serve_mcp(axum::Router::new().route("/mcp", axum::routing::post(handler))).await, seen)
}

/// The engine's client declares no client capability: a legacy server's
/// `elicitation/create`, `sampling/createMessage` and `roots/list` get a
/// JSON-RPC error naming the method and the capability (a `ping` its
/// answer), and the call goes on to its result; a modern server's
/// `input_required` result ends the call with an error naming what it
/// asked for, not retried by the agent's policy (which retries three
/// times what may pass).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_asking_for_client_input_is_told_no_capability_was_declared() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), "");
    let (legacy, legacy_seen) = asking_server(false).await;
    let (modern, modern_seen) = asking_server(true).await;
    for (name, url) in [("old", &legacy), ("new", &modern)] {
        let (status, body) = put_json(&format!("{}/v1/mcp-servers/{name}", server.url), json!({"url": url})).await;
        assert_eq!(status, 200, "{body}");
    }
    let worker = worker_with(&["old", "new"], three_retries()).await;
    let (status, body) = put_json(&format!("{}/v1/agents/mcp", server.url), json!({"url": worker})).await;
    assert!(status == 200 || status == 201, "{body}");

    let (events, (last, data)) = turn(&server, "s1", "use tool old__ask").await;
    assert_eq!(last, "turn.done", "{data}");
    assert_eq!(reply(&events), "old__ask returned asked.", "{events:?}");
    let answers: Vec<Value> = legacy_seen.lock().unwrap().iter().filter_map(|m| serde_json::from_str(m).ok()).collect();
    let answer =
        |id: &str| answers.iter().find(|a| a["id"] == id).cloned().unwrap_or_else(|| panic!("{id}: {answers:?}"));
    for (id, method, capability) in [
        ("e1", "elicitation/create", "elicitation"),
        ("s1", "sampling/createMessage", "sampling"),
        ("r1", "roots/list", "roots"),
    ] {
        let error = &answer(id)["error"];
        assert_eq!(error["code"], -32601, "{id}: {error}");
        let text = error["message"].as_str().unwrap();
        assert!(
            text.contains(&format!("`{method}`")) && text.contains(&format!("no `{capability}` capability")),
            "{text}"
        );
    }
    assert_eq!(answer("p1")["result"], json!({}), "{answers:?}");

    let (_, (last, data)) = turn(&server, "s2", "use tool new__ask").await;
    assert_eq!(last, "turn.done", "{data}");
    let tools = tool_messages(&server, "s2").await;
    assert_eq!(tools.len(), 1, "{tools:?}");
    let text = tools[0]["content"].as_str().unwrap();
    assert!(text.contains("MCP server `new` tool `ask`") && text.contains("input_required"), "{text}");
    assert!(text.contains("elicitation/create") && text.contains("declares no client capabilities"), "{text}");
    let calls = modern_seen.lock().unwrap().iter().filter(|m| *m == "tools/call").count();
    assert_eq!(calls, 1, "not retried: {:?}", modern_seen.lock().unwrap());
}
