//! Managed agent versions over real HTTP: a version stored without being
//! served, activated, rolled back; every decision's version visible in
//! the session's events, its snapshot and the agent's decision counts; a
//! turn waiting on a client tool carried across an activation.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use subs_tests::guests;
use subs_tests::server::{SseEvent, TestServer as Server};

const AGENT: &str = "versioned";

/// Uploads `wasm` as a version of `agent`, `?activate=false` unless
/// `activate`.
pub(crate) async fn upload(s: &Server, agent: &str, wasm: &str, activate: bool) -> (StatusCode, Value) {
    let path = if activate { format!("/v1/agents/{agent}") } else { format!("/v1/agents/{agent}?activate=false") };
    s.upload_to(&path, wasm, None).await
}

async fn activate(s: &Server, version: &str) -> (StatusCode, Value) {
    s.call(Method::PUT, &format!("/v1/agents/{AGENT}/current"), None, Some(json!({"version": version}))).await
}

/// The `agent_version` of each `message` event after the start of `turn`
/// (`None` for one without).
fn message_versions(events: &[SseEvent], turn: &str) -> Vec<Option<String>> {
    let start = events
        .iter()
        .position(|e| e.event == "turn.started" && e.data["turn_id"] == turn)
        .expect("the turn's start is among the events");
    events[start..]
        .iter()
        .filter(|e| e.event == "message")
        .map(|e| e.data.get("agent_version").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// Runs a turn of `session` saying `text`; the versions its messages
/// carry and the snapshot after it.
async fn turn(s: &Server, session: &str, text: &str) -> (Vec<Option<String>>, Value) {
    let (status, accepted) = s.say(session, AGENT, text, None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let turn = accepted["turn_id"].as_str().unwrap().to_owned();
    let events = s.wait_turn(session, &turn, None).await;
    assert_eq!(events.last().unwrap().event, "turn.done", "{events:?}");
    let (_, snapshot) = s.call(Method::GET, &format!("/v1/sessions/{session}"), None, None).await;
    (message_versions(&events, &turn), snapshot)
}

/// The agent's versions: digest → (active, decisions).
async fn versions(s: &Server) -> BTreeMap<String, (bool, u64)> {
    let (status, agent) = s.call(Method::GET, &format!("/v1/agents/{AGENT}"), None, None).await;
    assert_eq!(status, StatusCode::OK, "{agent}");
    agent["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let active = v["active"].as_bool().expect("`active` is a boolean");
            let decisions = v["decisions"].as_u64().expect("`decisions` is counted");
            (v["version"].as_str().unwrap().to_owned(), (active, decisions))
        })
        .collect()
}

/// How many applied decisions each version made in `sessions`, from
/// their decision lists (what the counts must add up to).
async fn decided(s: &Server, sessions: &[&str]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for session in sessions {
        let (status, page) =
            s.call(Method::GET, &format!("/v1/sessions/{session}/decisions?limit=1000"), None, None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        for decision in page.as_array().unwrap().iter().filter(|d| d["status"] == "applied") {
            let version = decision["agent_version"].as_str().expect("an applied decision names its version");
            *counts.entry(version.to_owned()).or_default() += 1;
        }
    }
    counts
}

fn all_are(versions: &[Option<String>], digest: &str) -> bool {
    !versions.is_empty() && versions.iter().all(|v| v.as_deref() == Some(digest))
}

#[tokio::test]
async fn versions_are_stored_activated_and_rolled_back_and_each_decision_names_its_own() {
    let s = Server::start(&[]).await;

    // The first version of an agent cannot be stored inactive.
    let (status, refused) = upload(&s, AGENT, guests::PASSTHROUGH, false).await;
    assert_eq!((status, refused["code"].as_str()), (StatusCode::CONFLICT, Some("no_active_version")), "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("must be activated"), "{refused}");
    assert_eq!(s.call(Method::GET, &format!("/v1/agents/{AGENT}"), None, None).await.0, StatusCode::NOT_FOUND);

    let (status, agent) = upload(&s, AGENT, guests::TOOLS, true).await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    let tools = agent["version"].as_str().unwrap().to_owned();
    let (status, agent) = upload(&s, AGENT, guests::PASSTHROUGH, false).await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    assert_eq!(agent["version"], tools.as_str(), "an inactive upload leaves the current version");
    let passthrough = agent["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["active"] == false)
        .and_then(|v| v["version"].as_str())
        .expect("the inactive version is listed")
        .to_owned();
    assert_ne!(passthrough, tools);
    assert!(agent["versions"][1]["bytes"].as_u64().unwrap() > 0, "{agent}");
    // Storing it again changes nothing; so does activating the current.
    assert_eq!(upload(&s, AGENT, guests::PASSTHROUGH, false).await.0, StatusCode::OK);
    assert_eq!(upload(&s, AGENT, guests::TOOLS, false).await.0, StatusCode::OK);
    let (status, same) = activate(&s, &tools).await;
    assert_eq!((status, same["version"].as_str()), (StatusCode::OK, Some(tools.as_str())));

    // The active version decides.
    let (messages, snapshot) = turn(&s, "a", r#"use tool add with {"a": 2, "b": 3}"#).await;
    assert!(all_are(&messages, &tools), "{messages:?}");
    assert_eq!(snapshot["agent_version"], tools.as_str(), "{snapshot}");
    let counts = versions(&s).await;
    assert_eq!(counts.len(), 2, "{counts:?}");
    assert!(counts[&tools].0 && counts[&tools].1 > 0, "{counts:?}");
    assert_eq!(counts[&passthrough], (false, 0), "{counts:?}");

    // Activated: the next turn's decisions are the new version's.
    let (status, agent) = activate(&s, &passthrough).await;
    assert_eq!((status, agent["version"].as_str()), (StatusCode::OK, Some(passthrough.as_str())), "{agent}");
    let (messages, snapshot) = turn(&s, "a", "hello").await;
    assert!(all_are(&messages, &passthrough), "{messages:?}");
    assert_eq!(snapshot["agent_version"], passthrough.as_str());
    let (messages, _) = turn(&s, "b", "hello too").await;
    assert!(all_are(&messages, &passthrough), "{messages:?}");
    let counts = versions(&s).await;
    assert!(counts[&passthrough].0 && counts[&passthrough].1 > 0, "{counts:?}");
    assert!(!counts[&tools].0, "{counts:?}");

    // Rolled back: the first version again.
    let (status, agent) = activate(&s, &tools).await;
    assert_eq!((status, agent["version"].as_str()), (StatusCode::OK, Some(tools.as_str())));
    let (messages, snapshot) = turn(&s, "a", r#"use tool add with {"a": 1, "b": 1}"#).await;
    assert!(all_are(&messages, &tools), "{messages:?}");
    assert_eq!(snapshot["agent_version"], tools.as_str());

    // The counts add up to the decisions the sessions recorded.
    let counts = versions(&s).await;
    let recorded = decided(&s, &["a", "b"]).await;
    let counted: BTreeMap<String, u64> = counts.iter().map(|(v, (_, n))| (v.clone(), *n)).collect();
    assert_eq!(counted, recorded);
    assert!(counts[&tools].0 && !counts[&passthrough].0);

    // A version the agent does not have, or an agent that does not exist.
    let unknown = format!("sha256:{}", "0".repeat(64));
    let (status, body) = activate(&s, &unknown).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(body["error"].as_str().unwrap().contains(&unknown), "{body}");
    let path = "/v1/agents/nobody/current";
    let (status, _) = s.call(Method::PUT, path, None, Some(json!({"version": tools}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = s.call(Method::PUT, &format!("/v1/agents/{AGENT}/current"), None, Some(json!({}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let response = s
        .request(Method::PUT, &format!("/v1/agents/{AGENT}?activate=maybe"), None)
        .header("content-type", "application/json")
        .body(r#"{"url": "http://127.0.0.1:9/"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(versions(&s).await.len(), 2, "nothing was stored by the refusals");

    // An HTTP worker is stored inactive the same way, and not called: the
    // active version goes on deciding.
    let worker = Some(json!({"url": "http://127.0.0.1:9/"}));
    let (status, agent) = s.call(Method::PUT, &format!("/v1/agents/{AGENT}?activate=false"), None, worker).await;
    assert_eq!((status, agent["version"].as_str()), (StatusCode::CREATED, Some(tools.as_str())), "{agent}");
    let http = agent["versions"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((http["kind"].as_str(), http["active"].as_bool()), (Some("http"), Some(false)), "{agent}");
    let (messages, _) = turn(&s, "b", "still here").await;
    assert!(all_are(&messages, &tools), "{messages:?}");
}

#[tokio::test]
async fn a_turn_waiting_on_a_client_tool_goes_on_across_an_activation() {
    let s = Server::start(&[]).await;
    let tools = upload(&s, AGENT, guests::TOOLS, true).await.1["version"].as_str().unwrap().to_owned();
    let (status, agent) = upload(&s, AGENT, guests::PASSTHROUGH, false).await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    let passthrough = agent["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|v| (v["active"] == false).then(|| v["version"].as_str().unwrap().to_owned()))
        .unwrap();

    let input = json!({
        "type": "client.messages",
        "agent_id": AGENT,
        "messages": [{"role": "user", "content": "use tool ask with {}"}],
        "client": {"tools": [{"name": "ask", "handler": "client", "input": {"type": "object"}}]},
    });
    let (status, accepted) = s.call(Method::POST, "/v1/sessions/waiting/input", None, Some(input)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let turn = accepted["turn_id"].as_str().unwrap().to_owned();
    let asked =
        tokio::time::timeout(Duration::from_secs(30), s.events("waiting", None, None, |e| e.event == "tool.call"))
            .await
            .expect("the client tool is called");
    let call_id = asked.last().unwrap().data["id"].as_str().unwrap().to_owned();
    let (_, snapshot) = s.call(Method::GET, "/v1/sessions/waiting", None, None).await;
    assert_eq!(
        (snapshot["status"].as_str(), snapshot["agent_version"].as_str()),
        (Some("waiting"), Some(tools.as_str()))
    );

    // Activated while the turn waits; the turn goes on, its next
    // decisions made by the new version.
    assert_eq!(activate(&s, &passthrough).await.0, StatusCode::OK);
    let settle = json!({"type": "tool.result", "id": call_id, "result": {"ok": true}});
    let (status, body) = s.call(Method::POST, "/v1/sessions/waiting/input", None, Some(settle)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let events = s.wait_turn("waiting", &turn, None).await;
    assert_eq!(events.last().unwrap().event, "turn.done", "{events:?}");
    let messages = message_versions(&events, &turn);
    assert_eq!(messages.first().cloned().flatten().as_deref(), Some(tools.as_str()), "{messages:?}");
    assert_eq!(messages.last().cloned().flatten().as_deref(), Some(passthrough.as_str()), "{messages:?}");
    let (_, snapshot) = s.call(Method::GET, "/v1/sessions/waiting", None, None).await;
    assert_eq!(
        (snapshot["status"].as_str(), snapshot["agent_version"].as_str()),
        (Some("idle"), Some(passthrough.as_str()))
    );
    let counts = versions(&s).await;
    assert!(counts[&tools].1 > 0 && counts[&passthrough].1 > 0, "{counts:?}");
}
