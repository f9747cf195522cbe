//! Every agent an MCP server, over a real `subs serve`: the official MCP
//! TypeScript SDK (`@modelcontextprotocol/sdk` for the handshake
//! revisions, `@modelcontextprotocol/client` for the stateless one, both
//! pinned in `tests/clients/mcp`) and the Python SDK call the
//! `passthrough` example and the Rust approver through
//! `/v1/agents/{agent_id}/mcp` (`tests/clients/mcp/run.mjs` drives the
//! handshake scenarios), and the session API shows what each did: a
//! turn's reply with its progress; an approval asked by elicitation and
//! answered, after which the refund ran; the same without the capability,
//! answered by a second call naming the session; a cancelled call whose
//! turn is cancelled; a session ended by `DELETE` refused with 404.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use subs_tests::guests;

use crate::{Server, http, output};

const REFUND: &str = r#"use tool refund with {"order_id": "A1", "amount": 5}"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_calls_agents_through_their_mcp_endpoints() {
    let (_dir, server, summary) = run_client("run.mjs").await;
    let url = server.url.clone();

    // A turn's reply: one tool named after the agent, the reply as text,
    // the session in `_meta`, and a progress notification per step.
    let reply = &summary["reply"];
    assert_eq!(reply["protocol"], "2025-11-25", "{reply}");
    assert_eq!(reply["server"]["name"], "subs", "{reply}");
    let [tool] = reply["tools"].as_array().unwrap().as_slice() else { panic!("one tool: {reply}") };
    assert_eq!(tool["name"], "echo");
    assert_eq!(tool["inputSchema"]["required"], json!(["message"]));
    assert_eq!(reply["text"], json!(["You said: hello"]), "{reply}");
    assert_eq!(reply["isError"], false);
    let session = reply["meta"]["subs/session_id"].as_str().expect("the session in _meta");
    let view = snapshot(&url, session).await;
    assert_eq!(view["agent_id"], "echo");
    assert_eq!(view["messages"].as_array().unwrap().last().unwrap()["content"], "You said: hello");
    let progress: Vec<&str> =
        reply["progress"].as_array().unwrap().iter().map(|p| p["message"].as_str().unwrap()).collect();
    assert_eq!(progress.first(), Some(&"the turn started"), "{reply}");
    assert!(progress.contains(&"the agent replied"), "{reply}");
    let counts: Vec<f64> =
        reply["progress"].as_array().unwrap().iter().map(|p| p["progress"].as_f64().unwrap()).collect();
    assert!(counts.windows(2).all(|w| w[0] < w[1]), "progress grows: {counts:?}");

    // An approval asked by elicitation, with the interrupt's schema; the
    // answer resumed the turn and the refund ran once.
    let elicit = &summary["elicit"];
    let [asked] = elicit["asked"].as_array().unwrap().as_slice() else { panic!("one elicitation: {elicit}") };
    assert!(asked["message"].as_str().unwrap().starts_with("approve refund"), "{asked}");
    assert_eq!(asked["requestedSchema"]["properties"]["approved"]["type"], "boolean", "{asked}");
    assert_eq!(asked["requestedSchema"]["required"], json!(["approved"]), "{asked}");
    assert_eq!(elicit["isError"], false, "{elicit}");
    let session = elicit["meta"]["subs/session_id"].as_str().expect("the session in _meta");
    let view = snapshot(&url, session).await;
    assert_eq!(view["state"]["refunds"], 1, "the approved refund ran: {view}");
    assert_eq!(view["status"], "idle");
    assert_eq!(tool_results(&view), [r#"{"refunded":5,"refunds":1}"#], "{view}");

    // Without elicitation: the open approval and the session, then a call
    // naming the session answers it.
    let resume = &summary["resume"];
    let first = &resume["first"]["structured"];
    let session = first["session_id"].as_str().expect("a session to resume");
    let [interrupt] = first["interrupts"].as_array().unwrap().as_slice() else { panic!("one interrupt: {resume}") };
    assert_eq!(interrupt["reason"], "approve refund", "{interrupt}");
    assert_eq!(interrupt["payload"]["tool"], "refund", "{interrupt}");
    assert!(resume["first"]["text"][0].as_str().unwrap().contains(session), "{resume}");
    assert_eq!(resume["second"]["isError"], false, "{resume}");
    assert_eq!(resume["second"]["meta"]["subs/session_id"], session);
    let view = snapshot(&url, session).await;
    assert_eq!(view["state"]["refunds"], 1, "the second call's answer approved it: {view}");
    assert_eq!(view["status"], "idle");

    // A cancelled call: its turn ends cancelled, the refund never ran.
    let cancel = &summary["cancel"];
    assert_eq!(cancel["asked"], true, "{cancel}");
    assert!(cancel["error"].as_str().is_some_and(|e| e.contains("gave up")), "{cancel}");
    let session = cancel["session_id"].as_str().unwrap();
    let view = settled(&url, session).await;
    assert_eq!(view["state"]["refunds"], Value::Null, "the cancelled refund never ran: {view}");
    assert!(view["interrupts"].as_array().unwrap().is_empty(), "{view}");
    let events = events(&url, session).await;
    assert!(events.contains(r#""code":"cancelled""#), "the turn failed cancelled: {events}");

    // A session ended by DELETE is answered 404 with a JSON-RPC error.
    assert_eq!(summary["ended"]["status"], 404, "{summary}");
    assert!(summary["ended"]["body"]["error"]["message"].as_str().unwrap().contains("no such MCP session"));
}

/// The tool messages' contents of a session view.
fn tool_results(view: &Value) -> Vec<&str> {
    view["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect()
}

/// Starts `subs serve` with the `echo` (passthrough) and `approver`
/// agents and runs the Node MCP client `script` against them; its summary
/// is the last line it prints.
async fn run_client(script: &str) -> (tempfile::TempDir, Server, Value) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    for (agent, component) in [("echo", guests::PASSTHROUGH), ("approver", guests::APPROVER_RS)] {
        let put = output(&["agents", "put", agent, component, "--server", &server.url]);
        assert_eq!(put.code, Some(0), "{agent}: {}", put.stderr);
    }
    let client = subs_tests::node::client("mcp");
    let args = [server.url.as_str(), "echo", "approver", REFUND];
    let run = subs_tests::node::run(&client, script, &args);
    let output = tokio::time::timeout(Duration::from_secs(120), run).await.expect("the MCP client finishes");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: the client printed {stdout}"));
    (dir, server, summary)
}

async fn snapshot(url: &str, session: &str) -> Value {
    let response = http().get(format!("{url}/v1/sessions/{session}")).send().await.unwrap();
    assert_eq!(response.status(), 200, "session {session}");
    serde_json::from_slice(&response.bytes().await.unwrap()).expect("a snapshot")
}

/// The session once no turn is open (at most 20 s).
async fn settled(url: &str, session: &str) -> Value {
    subs_tests::wait::eventually(Duration::from_secs(20), format!("the turn of {session} ends"), || async {
        let view = snapshot(url, session).await;
        if view["turn_id"].is_null() { Ok(view) } else { Err(view) }
    })
    .await
}

/// The session's stored events, as the event stream's text (read up to
/// its last stored event).
async fn events(url: &str, session: &str) -> String {
    let view = snapshot(url, session).await;
    let last = view["last_event_id"].as_u64().expect("events were stored");
    let mut response = http().get(format!("{url}/v1/sessions/{session}/events")).send().await.unwrap();
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !text.contains(&format!("id: {last}\n")) && !text.contains(&format!("id:{last}\n")) {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, response.chunk()).await.expect("the events come").unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk.expect("the stream goes on")));
    }
    text
}

/// The stateless revision, with the TypeScript SDK's 2.x `Client`
/// (`@modelcontextprotocol/client`, pinned in `tests/clients/mcp`;
/// `run-modern.mjs` drives it): its `auto` negotiation picks 2026-07-28,
/// and pinned to that revision a turn's reply comes with progress, an
/// interrupt is asked as an `input_required` elicitation that the SDK
/// answers and retries, after which the refund ran once, and without the
/// capability a second call naming the session answers it.
#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_calls_agents_statelessly() {
    let (_dir, server, summary) = run_client("run-modern.mjs").await;
    let url = server.url.clone();

    let discover = &summary["discover"];
    assert_eq!((discover["era"].as_str(), discover["protocol"].as_str()), (Some("modern"), Some("2026-07-28")));
    assert_eq!(discover["server"]["name"], "subs", "{discover}");

    let reply = &summary["reply"];
    assert_eq!((reply["era"].as_str(), reply["protocol"].as_str()), (Some("modern"), Some("2026-07-28")));
    let [tool] = reply["tools"].as_array().unwrap().as_slice() else { panic!("one tool: {reply}") };
    assert_eq!(tool["name"], "echo");
    assert_eq!(tool["inputSchema"]["required"], json!(["message"]));
    assert_eq!(reply["text"], json!(["You said: hello"]), "{reply}");
    assert_eq!(reply["isError"], false);
    assert_eq!(reply["meta"]["io.modelcontextprotocol/serverInfo"]["name"], "subs", "{reply}");
    let session = reply["meta"]["subs/session_id"].as_str().expect("the session in _meta");
    let view = snapshot(&url, session).await;
    assert_eq!(view["agent_id"], "echo");
    assert_eq!(view["messages"].as_array().unwrap().last().unwrap()["content"], "You said: hello");
    let progress: Vec<&str> =
        reply["progress"].as_array().unwrap().iter().filter_map(|p| p["message"].as_str()).collect();
    assert_eq!(progress.first(), Some(&"the turn started"), "{reply}");
    assert!(progress.contains(&"the agent replied"), "{reply}");

    let elicit = &summary["elicit"];
    let [asked] = elicit["asked"].as_array().unwrap().as_slice() else { panic!("one elicitation: {elicit}") };
    assert!(asked["message"].as_str().unwrap().starts_with("approve refund"), "{asked}");
    assert_eq!(asked["requestedSchema"]["properties"]["approved"]["type"], "boolean", "{asked}");
    assert_eq!(asked["requestedSchema"]["required"], json!(["approved"]), "{asked}");
    assert_eq!(elicit["isError"], false, "{elicit}");
    assert_eq!(elicit["text"], json!([r#"refund returned {"refunded":5,"refunds":1}."#]), "{elicit}");
    let session = elicit["meta"]["subs/session_id"].as_str().expect("the session in _meta");
    let view = settled(&url, session).await;
    assert_eq!(view["state"]["refunds"], 1, "the approved refund ran once: {view}");
    assert_eq!(tool_results(&view), [r#"{"refunded":5,"refunds":1}"#], "{view}");

    let resume = &summary["resume"];
    let first = &resume["first"]["structured"];
    let session = first["session_id"].as_str().expect("a session to resume");
    let [interrupt] = first["interrupts"].as_array().unwrap().as_slice() else { panic!("one interrupt: {resume}") };
    assert_eq!(interrupt["reason"], "approve refund", "{interrupt}");
    assert_eq!(resume["second"]["isError"], false, "{resume}");
    assert_eq!(resume["second"]["meta"]["subs/session_id"], session);
    let view = settled(&url, session).await;
    assert_eq!(view["state"]["refunds"], 1, "the second call's answer approved it: {view}");
}

/// The stateless revision, with the Python SDK's `Client` (`mcp`, pinned
/// in `tests/mcp/requirements.txt`; `tests/mcp/client.py` drives it): its
/// probe picks 2026-07-28, a turn's reply comes with progress, an
/// interrupt is asked as an `input_required` elicitation and the retry's
/// answer resumes the turn, and without the capability a second call
/// naming the session answers it.
#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_calls_agents_statelessly() {
    let python = match subs_tests::mcp::python() {
        Ok(python) => python,
        Err(why) if std::env::var("SUBS_REQUIRE_MCP").as_deref() == Ok("1") => {
            panic!("SUBS_REQUIRE_MCP=1 but the Python MCP SDK could not be installed: {why}")
        }
        Err(why) => return eprintln!("skipped: the Python MCP SDK could not be installed ({why})"),
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let url = server.url.clone();
    for (agent, component) in [("echo", guests::PASSTHROUGH), ("approver", guests::APPROVER_RS)] {
        let put = output(&["agents", "put", agent, component, "--server", &url]);
        assert_eq!(put.code, Some(0), "{agent}: {}", put.stderr);
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp/client.py");
    let run = tokio::process::Command::new(python)
        .arg(script)
        .args([url.as_str(), "echo", "approver", REFUND])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), run).await.expect("the MCP client finishes").unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: the client printed {stdout}\n{}", String::from_utf8_lossy(&output.stderr)));

    assert_eq!(summary["discover"]["protocol"], "2026-07-28", "{summary}");
    let reply = &summary["reply"];
    assert_eq!(reply["protocol"], "2026-07-28", "{reply}");
    assert_eq!(summary["discover"]["server"]["name"], "subs", "{summary}");
    let [tool] = reply["tools"].as_array().unwrap().as_slice() else { panic!("one tool: {reply}") };
    assert_eq!(tool["name"], "echo");
    assert_eq!(reply["text"], json!(["You said: hello"]), "{reply}");
    assert_eq!(reply["meta"]["io.modelcontextprotocol/serverInfo"]["name"], "subs", "{reply}");
    assert_eq!(reply["isError"], false);
    let session = reply["meta"]["subs/session_id"].as_str().expect("the session in _meta");
    assert_eq!(
        snapshot(&url, session).await["messages"].as_array().unwrap().last().unwrap()["content"],
        "You said: hello"
    );
    let progress: Vec<&str> =
        reply["progress"].as_array().unwrap().iter().filter_map(|p| p["message"].as_str()).collect();
    assert!(progress.contains(&"the agent replied"), "{reply}");

    let elicit = &summary["elicit"];
    let [asked] = elicit["asked"].as_array().unwrap().as_slice() else { panic!("one elicitation: {elicit}") };
    assert!(asked["message"].as_str().unwrap().starts_with("approve refund"), "{asked}");
    assert_eq!(asked["requestedSchema"]["properties"]["approved"]["type"], "boolean", "{asked}");
    assert_eq!(elicit["isError"], false, "{elicit}");
    let session = elicit["meta"]["subs/session_id"].as_str().expect("the session in _meta");
    let view = settled(&url, session).await;
    assert_eq!(view["state"]["refunds"], 1, "the approved refund ran once: {view}");
    assert_eq!(tool_results(&view), [r#"{"refunded":5,"refunds":1}"#], "{view}");

    let resume = &summary["resume"];
    let session = resume["first"]["structured"]["session_id"].as_str().expect("a session to resume");
    assert_eq!(resume["second"]["isError"], false, "{resume}");
    let view = settled(&url, session).await;
    assert_eq!(view["state"]["refunds"], 1, "the second call's answer approved it: {view}");
}

/// What the stateless revision refuses, over raw HTTP: headers that do
/// not match the body, a revision not served (naming those that are), an
/// unknown method (404); `server/discover` names the revision, and a
/// legacy `initialize` on the same endpoint still opens a session.
#[tokio::test(flavor = "multi_thread")]
async fn stateless_requests_are_checked_against_their_headers() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let url = server.url.clone();
    let put = output(&["agents", "put", "echo", guests::PASSTHROUGH, "--server", &url]);
    assert_eq!(put.code, Some(0), "{}", put.stderr);
    let endpoint = format!("{url}/v1/agents/echo/mcp");
    let send = |version: &'static str, method: &'static str, name: Option<&'static str>, body: Value| {
        let mut request = http()
            .post(&endpoint)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", version)
            .header("mcp-method", method);
        if let Some(name) = name {
            request = request.header("mcp-name", name);
        }
        async move {
            let response = request.body(body.to_string()).send().await.unwrap();
            let status = response.status().as_u16();
            (status, serde_json::from_slice::<Value>(&response.bytes().await.unwrap()).unwrap_or(Value::Null))
        }
    };
    let meta = |version: &str| {
        json!({"io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}})
    };
    let rpc = |method: &str, params: Value| json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});

    let (status, body) =
        send("2026-07-28", "server/discover", None, rpc("server/discover", json!({"_meta": meta("2026-07-28")}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["supportedVersions"], json!(["2026-07-28"]), "{body}");
    assert_eq!(body["result"]["resultType"], "complete", "{body}");
    assert_eq!(body["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "subs", "{body}");

    let (status, body) =
        send("2027-01-01", "tools/list", None, rpc("tools/list", json!({"_meta": meta("2027-01-01")}))).await;
    assert_eq!((status, body["error"]["code"].as_i64()), (400, Some(-32022)), "{body}");
    assert_eq!(body["error"]["data"]["supported"][0], "2026-07-28", "{body}");

    let (status, body) =
        send("2026-07-28", "tools/list", None, rpc("tools/list", json!({"_meta": meta("2025-11-25")}))).await;
    assert_eq!((status, body["error"]["code"].as_i64()), (400, Some(-32020)), "{body}");
    let (status, body) =
        send("2026-07-28", "tools/call", None, rpc("tools/list", json!({"_meta": meta("2026-07-28")}))).await;
    assert_eq!((status, body["error"]["code"].as_i64()), (400, Some(-32020)), "{body}");
    let call = rpc("tools/call", json!({"name": "echo", "arguments": {"message": "hi"}, "_meta": meta("2026-07-28")}));
    let (status, body) = send("2026-07-28", "tools/call", Some("other"), call.clone()).await;
    assert_eq!((status, body["error"]["code"].as_i64()), (400, Some(-32020)), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("Mcp-Name"), "{body}");
    let (status, body) = send("2026-07-28", "ping", None, rpc("ping", json!({"_meta": meta("2026-07-28")}))).await;
    assert_eq!((status, body["error"]["code"].as_i64()), (404, Some(-32601)), "{body}");

    // A call answered as JSON (no event stream asked for): no session id.
    let response = http()
        .post(&endpoint)
        .header("accept", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "echo")
        .header("content-type", "application/json")
        .body(call.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("mcp-session-id").is_none());
    let body: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(body["result"]["content"][0]["text"], "You said: hi", "{body}");
    assert_eq!(body["result"]["resultType"], "complete", "{body}");

    // The legacy handshake still opens a session on the same endpoint.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
        "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let response = http()
        .post(&endpoint)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("mcp-session-id").is_some());
}
