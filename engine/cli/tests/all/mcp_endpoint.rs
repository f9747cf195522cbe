//! Every agent an MCP server, over a real `subs serve`: the official MCP
//! TypeScript SDK (`@modelcontextprotocol/sdk`, pinned in
//! `tests/clients/mcp`) calls the `passthrough` example and the Rust
//! approver through `/v1/agents/{agent_id}/mcp` (`tests/clients/mcp/run.mjs`
//! drives the scenarios), and the session API shows what each did: a
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
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let url = server.url.clone();
    for (agent, component) in [("echo", guests::PASSTHROUGH), ("approver", guests::APPROVER_RS)] {
        let put = output(&["agents", "put", agent, component, "--server", &url]);
        assert_eq!(put.code, Some(0), "{agent}: {}", put.stderr);
    }

    let client = subs_tests::node::client("mcp");
    let args = [url.as_str(), "echo", "approver", REFUND];
    let run = subs_tests::node::run(&client, "run.mjs", &args);
    let output = tokio::time::timeout(Duration::from_secs(120), run).await.expect("the MCP client finishes");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: the client printed {stdout}"));

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
