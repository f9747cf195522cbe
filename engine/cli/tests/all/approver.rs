//! The approver example in each language (`examples/approver-{rs,py,ts}`,
//! made from `subs new`) on a real `subs serve`, with the `passthrough`
//! example registered as their `summarizer`: the same script of turns for
//! each, through the HTTP API and the offline model. Each records its
//! transcript (the messages, tool calls and results, the approvals asked,
//! the state after each turn), normalised of ids; the three are equal, and
//! each shows the five behaviours: a lookup; a refund approved, which runs
//! and is counted in the state; a refund denied with a reason, which never
//! runs (the count stays, its log line never appears) and whose error,
//! with the reason, is in the model's next request (the offline model's
//! reply is made from it); the state carried across turns; a delegation to
//! the summarizer, whose reply is the tool call's result.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use subs_tests::guests;
use subs_tests::server::{SseEvent, read_sse};

use crate::{PATIENCE, Server, http, output};

/// The approvers: the agent id each is registered under, its component.
const APPROVERS: [(&str, &str); 3] =
    [("approver-rs", guests::APPROVER_RS), ("approver-py", guests::APPROVER_PY), ("approver-ts", guests::APPROVER_TS)];

const LOOKUP: &str = r#"use tool lookup_order with {"order_id": "A1"}"#;
const REFUND: &str = r#"use tool refund with {"order_id": "A1", "amount": 5}"#;
const TOO_LARGE: &str = r#"use tool refund with {"order_id": "A2", "amount": 500}"#;
const AGAIN: &str = r#"use tool refund with {"order_id": "B7", "amount": 2}"#;
const SUMMARIZE: &str = r#"use tool summarizer with {"prompt": "the order shipped on Monday"}"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_approver_in_each_language_records_the_same_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let url = server.url.clone();
    for (agent, component) in [("summarizer", guests::PASSTHROUGH)].into_iter().chain(APPROVERS) {
        let put = output(&["agents", "put", agent, component, "--server", &url]);
        assert_eq!(put.code, Some(0), "{agent}: {}", put.stderr);
    }

    let [rs, py, ts] = APPROVERS.map(|(agent, _)| agent);
    let (rs_said, py_said, ts_said) = tokio::join!(script(&url, rs), script(&url, py), script(&url, ts));
    for (agent, transcript) in [(rs, &rs_said), (py, &py_said), (ts, &ts_said)] {
        shows_the_five_behaviours(agent, transcript);
    }
    let pretty = |t: &Value| serde_json::to_string_pretty(t).unwrap();
    assert_eq!(pretty(&py_said), pretty(&rs_said), "{py} and {rs} differ");
    assert_eq!(pretty(&ts_said), pretty(&rs_said), "{ts} and {rs} differ");

    // Each refund body logs a line: the approved ones did, the denied one
    // never ran.
    let logs = server.process.stderr_text();
    for (agent, _) in APPROVERS {
        for ran in ["refunded 5 on A1", "refunded 2 on B7"] {
            assert!(logs.lines().any(|l| l.contains(ran) && l.contains(agent)), "{agent} logged `{ran}`:\n{logs}");
        }
    }
    assert!(!logs.contains("refunded 500"), "a denied refund ran:\n{logs}");
    // The log went into a pipe: plain text, no colours.
    assert!(!logs.contains('\x1b'), "no colours into a pipe:\n{logs}");
}

/// The Python and TypeScript examples pass their own tests (the Rust one's
/// are the workspace's: `cargo test -p approver-rs`).
#[test]
fn the_python_and_typescript_approvers_pass_their_own_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let status = Command::new("python3")
        .args(["-m", "unittest", "--quiet"])
        .current_dir(root.join("examples/approver-py"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .status()
        .expect("python3 runs");
    assert!(status.success(), "python3 -m unittest in examples/approver-py");

    // In the copy of the project the component was built from
    // (`tests/build.rs`), whose `node_modules` holds the pinned toolchain:
    // the source tree has none until someone installs one there.
    let built = Path::new(guests::APPROVER_TS).parent().expect("target/guests/js").join("tree/examples/approver-ts");
    let status = Command::new("npm").args(["test", "--silent"]).current_dir(&built).status().expect("npm runs");
    assert!(status.success(), "npm test in {}", built.display());
}

/// Asserts that `transcript` (of `agent`) shows each behaviour.
fn shows_the_five_behaviours(agent: &str, transcript: &Value) {
    let turns = transcript["turns"].as_array().unwrap();
    let at = |say: &str| turns.iter().find(|t| t["say"] == say).unwrap_or_else(|| panic!("{agent}: no turn {say}"));
    let messages = transcript["messages"].as_array().unwrap();
    let tool_results: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").map(|m| &m["content"]).collect();

    // A lookup, asking nobody.
    assert_eq!(at(LOOKUP)["approval"], Value::Null, "{agent}");
    assert_eq!(tool_results[0], &json!({"order_id": "A1", "status": "shipped"}), "{agent}");

    // An approved refund runs and is counted in the state.
    let approved = at(REFUND);
    assert_eq!(approved["approval"], json!({"tool": "refund", "arguments": {"order_id": "A1", "amount": 5}}));
    assert_eq!(approved["state_while_asking"]["refunds"], Value::Null, "{agent}: it waits for the answer");
    assert_eq!(approved["state"]["refunds"], 1, "{agent}");
    assert_eq!(tool_results[1], &json!({"refunded": 5, "refunds": 1}), "{agent}");

    // A denied refund never runs: the count stays; the model's next
    // request carries the call's error with the reason.
    let denied = at(TOO_LARGE);
    assert_eq!(denied["resume"], json!({"approved": false, "reason": "too large"}), "{agent}");
    assert_eq!(denied["state"]["refunds"], 1, "{agent}: the count stays");
    assert_eq!(tool_results[2], &json!("denied by the approver: too large"), "{agent}");
    let reply = messages
        .iter()
        .skip_while(|m| m["content"] != "denied by the approver: too large")
        .find(|m| m["role"] == "assistant")
        .unwrap_or_else(|| panic!("{agent}: no reply after the denial"));
    assert!(reply["content"].as_str().unwrap().contains("denied by the approver: too large"), "{agent}: {reply}");

    // The count carries across turns.
    assert_eq!(at(AGAIN)["state"]["refunds"], 2, "{agent}");
    assert_eq!(tool_results[3], &json!({"refunded": 2, "refunds": 2}), "{agent}");

    // Delegated to the summarizer: the child's reply is the call's result.
    let call = messages.iter().rev().find(|m| m["tool_calls"].is_array()).unwrap();
    assert_eq!(call["tool_calls"][0]["name"], "summarizer", "{agent}");
    assert_eq!(tool_results[4], &json!(r#"You said: {"prompt":"the order shipped on Monday"}"#), "{agent}");
    assert_eq!(at(SUMMARIZE)["end"], "turn.done", "{agent}");
}

/// Runs the script of turns on a new session of `agent`; its transcript.
async fn script(url: &str, agent: &str) -> Value {
    let session = format!("s-{agent}");
    let mut turns = Vec::new();
    for (say, answer) in [
        (LOOKUP, None),
        (REFUND, Some(json!({"approved": true}))),
        (TOO_LARGE, Some(json!({"approved": false, "reason": "too large"}))),
        (AGAIN, Some(json!({"approved": true}))),
        (SUMMARIZE, None),
    ] {
        let body = json!({"type": "client.message", "agent_id": agent, "message": {"role": "user", "content": say}});
        let (status, accepted) = post(url, &session, body).await;
        assert_eq!(status, 202, "{agent}: {accepted}");
        let turn = accepted["turn_id"].as_str().expect("a turn id").to_owned();
        let mut record = json!({"say": say, "approval": null});
        if let Some(answer) = answer {
            let view = waiting(url, &session).await;
            let [open] = view["interrupts"].as_array().unwrap().as_slice() else {
                panic!("{agent}: one approval open: {view}")
            };
            let (payload, id) = (&open["payload"], &open["interrupt_id"]);
            assert_eq!(&payload["call_id"], id, "{agent}: the approval names the call");
            record["approval"] = json!({"tool": payload["tool"], "arguments": payload["arguments"]});
            record["state_while_asking"] = view["state"].clone();
            let resume = json!({"type": "interrupt.resume", "interrupt_id": id, "payload": answer});
            let (status, body) = post(url, &session, resume).await;
            assert_eq!(status, 202, "{agent}: {body}");
            record["resume"] = answer;
        }
        record["end"] = json!(turn_end(url, &session, &turn).await);
        record["state"] = snapshot(url, &session).await["state"].clone();
        turns.push(record);
    }
    let view = snapshot(url, &session).await;
    json!({"turns": turns, "messages": view["messages"].as_array().unwrap().iter().map(normalise).collect::<Vec<_>>()})
}

/// A message without ids or times: its role, its content (a tool's result
/// as JSON when it is JSON) and its tool calls' names and arguments.
fn normalise(message: &Value) -> Value {
    let content = match (&message["role"], message["content"].as_str()) {
        (role, Some(text)) if role == "tool" => serde_json::from_str(text).unwrap_or_else(|_| json!(text)),
        _ => message["content"].clone(),
    };
    let mut out = json!({"role": message["role"], "content": content});
    if let Some(calls) = message["tool_calls"].as_array() {
        out["tool_calls"] = calls
            .iter()
            .map(|c| {
                let arguments = c["function"]["arguments"].as_str().unwrap_or_default();
                json!({"name": c["function"]["name"], "arguments": serde_json::from_str::<Value>(arguments).ok()})
            })
            .collect();
    }
    out
}

async fn post(url: &str, session: &str, body: Value) -> (u16, Value) {
    let response = http()
        .post(format!("{url}/v1/sessions/{session}/input"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    (status, serde_json::from_slice(&response.bytes().await.unwrap()).unwrap_or(Value::Null))
}

async fn snapshot(url: &str, session: &str) -> Value {
    let body = http().get(format!("{url}/v1/sessions/{session}")).send().await.unwrap().bytes().await.unwrap();
    serde_json::from_slice(&body).expect("a snapshot")
}

/// The session's snapshot once an interrupt is open.
async fn waiting(url: &str, session: &str) -> Value {
    subs_tests::wait::eventually(PATIENCE, "an interrupt opens", || async {
        let view = snapshot(url, session).await;
        let open = view["status"] == "waiting" && view["interrupts"].as_array().is_some_and(|i| !i.is_empty());
        if open { Ok(view) } else { Err(view) }
    })
    .await
}

/// How `turn` ended: `turn.done` or `turn.failed`, from the session's
/// event stream.
async fn turn_end(url: &str, session: &str, turn: &str) -> String {
    let response = http().get(format!("{url}/v1/sessions/{session}/events")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut ended = |e: &SseEvent| matches!(e.event.as_str(), "turn.done" | "turn.failed") && e.data["turn_id"] == turn;
    let events = tokio::time::timeout(PATIENCE, read_sse(response, &mut ended)).await.expect("the turn ends");
    let end = events.last().expect("the turn's end");
    assert_eq!(end.event, "turn.done", "{session}: {}", end.data);
    end.event.clone()
}
