//! Every frame a session's event stream sends is a `StreamEvent` of the
//! protocol, written exactly as its Rust type writes it: over the real
//! `subs serve`, a turn whose MCP tool reports progress (`tests/mcp/server.py`'s
//! `slow`) streams `tool.progress` frames that read as
//! `LiveEvent::ToolProgress`, with no `id:`, beside the session's events.
//! The schema and the SDKs' and clients' types are generated from those
//! types, so a frame the engine writes differently fails here.

use serde_json::json;
use subs_protocol::event::ToolProgress;
use subs_protocol::{LiveEvent, McpServerUse, StreamEvent};
use subs_sdk::prelude::{Agent, Context, DecideError, DecisionRequest, DecisionResponse, Trigger};
use subs_tests::mcp::FastMcp;

use crate::{Server, http, stream_turn};

/// Takes the engine's proposals; names the MCP server `demo` at
/// `session.start`.
struct UsesDemo;

impl Agent for UsesDemo {
    fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        let mut decision = request.proposed.clone();
        if matches!(request.trigger, Trigger::SessionStart)
            && let Some(agent) = decision.agent.as_mut()
        {
            agent.mcp = Some(vec![McpServerUse { server: "demo".to_owned(), tools: None }]);
        }
        Ok(decision)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_frame_of_a_turn_with_tool_progress_is_a_stream_event() {
    let Some(mcp) = FastMcp::start("normal") else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("subs.toml");
    std::fs::write(&config, "private_hosts = [\"127.0.0.1\"]\n").unwrap();
    let data = dir.path().join("data");
    let server =
        Server::start_with(&["--config", config.to_str().unwrap(), "--data", data.to_str().unwrap()], "127.0.0.1:0");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let worker = format!("http://{}/", listener.local_addr().expect("a bound address"));
    tokio::spawn(subs_http_worker::serve(listener, UsesDemo));
    for (path, body) in [("mcp-servers/demo", json!({"url": mcp.url()})), ("agents/mcp", json!({"url": worker}))] {
        let response = http()
            .put(format!("{}/v1/{path}", server.url))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("the server answers");
        assert!(response.status().is_success(), "PUT {path}: {}", response.status());
    }

    let events = stream_turn(&server.url, "s1", "mcp", r#"use tool demo__slow with {"steps": 3}"#).await;
    let mut progress = Vec::new();
    let mut call = None;
    for (id, name, data) in &events {
        let event = StreamEvent::from_parts(name, data.clone()).unwrap_or_else(|e| panic!("{name} {data}: {e}"));
        assert_eq!(&event.data(), data, "`{name}` is written as its type writes it");
        assert_eq!(id.is_some(), event.is_stored(), "`{name}`: only stored events have an id");
        match event {
            StreamEvent::Live(LiveEvent::ToolProgress(p)) => progress.push(p),
            StreamEvent::Session(_) if call.is_none() => {
                call = data["message"]["tool_calls"][0]["id"].as_str().map(str::to_owned);
            }
            StreamEvent::Session(_) => {}
        }
    }
    let call = call.unwrap_or_else(|| panic!("the model called the tool: {events:?}"));
    let step =
        |n: f64| ToolProgress { id: call.clone(), progress: n, total: Some(3.0), message: Some(format!("step {n}")) };
    assert_eq!(progress, vec![step(1.0), step(2.0), step(3.0)], "{events:?}");
    assert_eq!(events.last().map(|(_, name, _)| name.as_str()), Some("turn.done"), "{events:?}");
}
