//! The AI SDK endpoint (`/v1/agents/{agent_id}/ai-sdk`) read by the AI
//! SDK itself: the `ai` package from npm (`tests/clients/ai-sdk/`), its
//! `DefaultChatTransport` and `readUIMessageStream`, run by node against a
//! real server with real components; and the endpoint's refusals.

use reqwest::StatusCode;
use serde_json::{Value, json};
use subs_sdk::prelude::{AgentConfig, Context, DecideError};
use subs_sdk::{Agent, AgentTool, DecisionRequest, DecisionResponse, ToolHandler, Trigger};
use subs_tests::guests;
use subs_tests::server::TestServer;

const KEY: &str = "aisdk-test-key-0123456789";
const POST: reqwest::Method = reqwest::Method::POST;
const GET: reqwest::Method = reqwest::Method::GET;

/// An HTTP worker whose model calls stream (the offline model then
/// streams its text a word at a time and its tool calls in pieces), with
/// a client tool `confirm` in its config.
struct Live;

impl Agent for Live {
    fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        if let Trigger::SessionStart = &request.trigger {
            let mut config = request.proposed.agent.clone().unwrap_or_else(|| AgentConfig::new("subs/offline"));
            config.stream = Some(true);
            config.tools = Some(vec![
                AgentTool::new("confirm")
                    .description("Asks the user to confirm.")
                    .input(json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}))
                    .handler(ToolHandler::Client),
            ]);
            return Ok(request.proposed.with_agent(config));
        }
        Ok(request.proposed)
    }
}

/// An HTTP worker that makes its own model calls and streams the reply
/// slowly: 40 words, 50 ms apart, so a client surely reconnects mid-reply
/// (even on a busy machine).
struct Slow;

/// How many words [`Slow`]'s model says.
const WORDS: usize = 40;

/// What [`Slow`]'s model says.
fn slow_reply() -> String {
    (0..WORDS).map(|i| format!("w{i} ")).collect()
}

impl Agent for Slow {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        match &request.trigger {
            Trigger::SessionStart => {
                let mut config = request.proposed.agent.clone().unwrap_or_else(|| AgentConfig::new("subs/offline"));
                config.handler = Some(subs_sdk::LlmHandler::Worker);
                config.stream = Some(true);
                Ok(request.proposed.with_agent(config))
            }
            Trigger::LlmExecute(_) => {
                for i in 0..WORDS {
                    cx.emit_text(format!("w{i} ")).map_err(|e| DecideError::terminal(e.to_string()))?;
                    // A slow model: the stream must outlast the client.
                    subs_tests::wait::pace_blocking(std::time::Duration::from_millis(50));
                }
                let response = json!({"model": "test/slow", "content": slow_reply(), "finish_reason": "stop"});
                Ok(DecisionResponse::new().with_action(subs_sdk::Action::llm_result(response)))
            }
            _ => Ok(request.proposed),
        }
    }
}

async fn server() -> TestServer {
    let s = TestServer::start(&[("acme", KEY)]).await;
    let url = format!("http://{}/", subs_tests::serve_loopback(subs_http_worker::router(Live)).await);
    let (status, agent) = s.call(reqwest::Method::PUT, "/v1/agents/live", Some(KEY), Some(json!({"url": url}))).await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    let url = format!("http://{}/", subs_tests::serve_loopback(subs_http_worker::router(Slow)).await);
    let (status, agent) = s.call(reqwest::Method::PUT, "/v1/agents/slow", Some(KEY), Some(json!({"url": url}))).await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    for (agent, wasm) in [
        ("streamer", guests::TEST_STREAM),
        ("tools", guests::TOOLS),
        ("helper", guests::PASSTHROUGH),
        ("scenario", guests::TEST_SCENARIO),
    ] {
        let (status, body) = s.upload(agent, wasm, Some(KEY)).await;
        assert!(status.is_success(), "{agent}: {status} {body}");
    }
    s
}

/// The parts of `message` of `kind`.
fn parts<'a>(message: &'a Value, kind: &str) -> Vec<&'a Value> {
    message["parts"].as_array().unwrap().iter().filter(|p| p["type"] == kind).collect()
}

fn text(message: &Value) -> String {
    parts(message, "text").iter().map(|p| p["text"].as_str().unwrap()).collect()
}

fn chunks(read: &Value) -> Vec<&str> {
    read["chunks"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect()
}

/// A session's message tree and active path, by id.
async fn tree(s: &TestServer, session: &str) -> (Vec<String>, Vec<String>) {
    let (status, snapshot) = s.call(GET, &format!("/v1/sessions/{session}"), Some(KEY), None).await;
    assert_eq!(status, StatusCode::OK, "{snapshot}");
    let ids = |list: &Value| list.as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_owned()).collect();
    let nodes: Vec<Value> =
        snapshot["message_tree"]["nodes"].as_array().unwrap().iter().map(|n| n["message"].clone()).collect();
    (ids(&Value::Array(nodes)), ids(&snapshot["messages"]))
}

#[tokio::test]
async fn the_ai_sdk_reads_turns_tools_client_tools_and_reconnects() {
    let s = server().await;
    let client = subs_tests::node::client("ai-sdk");
    let output = subs_tests::node::run(&client, "chat.mjs", &[&s.url(""), KEY]).await;
    let summary: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));

    // Shown when an assertion fails.
    eprintln!("what the AI SDK read: {summary}");
    // A streamed text turn: the deltas build one text part.
    let text_turn = &summary["text"];
    assert_eq!(text(&text_turn["message"]), "hello", "{text_turn}");
    assert_eq!(text_turn["message"]["role"], "assistant");
    let types = chunks(text_turn);
    assert_eq!(types.first(), Some(&"start"));
    assert_eq!(types.last(), Some(&"finish"));
    assert_eq!(types.iter().filter(|t| **t == "text-delta").count(), 2, "streamed as `hel`, `lo`: {types:?}");
    let metadata = &text_turn["message"]["metadata"]["subs"];
    assert_eq!(metadata["session_id"], "aisdk-text");
    assert_eq!(text_turn["message"]["id"], metadata["turn_id"], "the UI message is the turn");

    // A tool turn: a `tool-add` part with its input and output, then the
    // answer, in one assistant message of two steps.
    let first = &summary["tools"]["first"]["message"];
    let add = parts(first, "tool-add");
    assert_eq!(add.len(), 1, "{first}");
    assert_eq!(add[0]["state"], "output-available");
    assert_eq!(add[0]["input"], json!({"a": 1, "b": 2}));
    assert_eq!(add[0]["output"], json!({"sum": 3}));
    assert_eq!(parts(first, "step-start").len(), 2, "{first}");
    assert!(text(first).contains(r#"{"sum":3}"#), "{first}");
    let types = chunks(&summary["tools"]["first"]);
    for kind in ["tool-input-start", "tool-input-available", "tool-output-available", "finish-step"] {
        assert!(types.contains(&kind), "{kind}: {types:?}");
    }
    let second = &summary["tools"]["second"]["message"];
    assert_eq!(parts(second, "tool-add")[0]["output"], json!({"sum": 7}), "{second}");

    // The second request appended: the tree is one path, user message ids
    // as the client gave them. The regenerate then forked at `k-u2`.
    let (nodes, path) = tree(&s, "aisdk-tools").await;
    let regenerated = &summary["tools"]["regenerated"]["message"];
    assert_eq!(parts(regenerated, "tool-add")[0]["output"], json!({"sum": 7}), "{regenerated}");
    assert_ne!(regenerated["id"], second["id"]);
    // user, assistant, tool, assistant for each request; the regenerate's
    // three messages sit beside the second answer's.
    assert_eq!(path.len(), 8, "{path:?}");
    assert_eq!(nodes.len(), 11, "{nodes:?}");
    assert_eq!(path[0], "k-u1");
    assert_eq!(path[4], "k-u2");
    assert!(path.iter().all(|id| nodes.contains(id)));
    let second_answer = second["metadata"]["subs"]["message_id"].as_str().unwrap();
    assert!(nodes.iter().any(|id| id == second_answer) && !path.iter().any(|id| id == second_answer));

    // A client tool: the first stream stops at its input; the output sent
    // back continues the same assistant message.
    let asked = &summary["client"]["asked"];
    let confirm = parts(&asked["message"], "tool-confirm");
    assert_eq!(confirm.len(), 1, "{asked}");
    assert_eq!(confirm[0]["state"], "input-available");
    assert_eq!(confirm[0]["input"], json!({"ok": true}));
    assert_eq!(chunks(asked).last(), Some(&"finish"));
    let resumed = &summary["client"]["resumed"]["message"];
    assert_eq!(resumed["id"], asked["message"]["id"]);
    assert_eq!(parts(resumed, "tool-confirm")[0]["output"], json!({"confirmed": true}), "{resumed}");
    assert_eq!(text(resumed), r#"confirm returned {"confirmed":true}."#);
    let (nodes, path) = tree(&s, "aisdk-client").await;
    assert_eq!(nodes, path, "one path: user, assistant, tool, assistant");
    assert_eq!(path.len(), 4);

    // Streamed tool calls: the input arrives in pieces; the agent's own
    // client tool stops the stream; the answer then streams word by word.
    let asked = &summary["live"]["asked"];
    let types = chunks(asked);
    assert!(types.iter().filter(|t| **t == "tool-input-delta").count() >= 1, "{types:?}");
    let start = types.iter().position(|t| *t == "tool-input-start").unwrap();
    assert!(types[start..].starts_with(&["tool-input-start", "tool-input-delta"]), "{types:?}");
    let confirm = parts(&asked["message"], "tool-confirm");
    assert_eq!((confirm[0]["state"].as_str(), &confirm[0]["input"]), (Some("input-available"), &json!({"ok": true})));
    let resumed = &summary["live"]["resumed"];
    assert!(chunks(resumed).iter().filter(|t| **t == "text-delta").count() > 1, "{resumed}");
    assert_eq!(text(&resumed["message"]), r#"confirm returned {"confirmed":true}."#);

    // An interrupt ends the stream with a `data-interrupt` part; a
    // reconnect replays the waiting turn; the resume finishes it; a
    // reconnect after that finds nothing running.
    let wait = &summary["wait"];
    let interrupt = parts(&wait["waiting"]["message"], "data-interrupt");
    assert_eq!(interrupt.len(), 1, "{wait}");
    assert_eq!(interrupt[0]["data"]["interrupt_id"], "approval");
    assert_eq!(interrupt[0]["data"]["reason"], "needs approval");
    let reconnected = &wait["reconnected"]["message"];
    assert_eq!(reconnected["id"], wait["waiting"]["message"]["id"], "{wait}");
    assert_eq!(parts(reconnected, "data-interrupt").len(), 1, "{reconnected}");
    assert_eq!(text(&wait["resumed"]["message"]), r#"resumed with "go""#, "{wait}");
    assert_eq!(wait["reconnect_after_end"], Value::Null);
    s.stop().await;
}

#[tokio::test]
async fn the_ai_sdk_endpoint_refuses_what_it_cannot_take() {
    let s = server().await;
    let post = |agent: &str, body: Value| {
        let s = &s;
        let path = format!("/v1/agents/{agent}/ai-sdk");
        async move { s.call(POST, &path, Some(KEY), Some(body)).await }
    };
    let user = |id: &str, text: &str| json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]});
    let refusals = [
        (json!({"messages": [user("u", "hi")]}), "id"),
        (json!({"id": "c", "messages": []}), "messages"),
        (json!({"id": "c", "messages": [{"id": "u", "role": "robot", "parts": []}]}), "messages[0].role"),
        (json!({"id": "c", "messages": [{"id": "", "role": "user", "parts": []}]}), "messages[0].id"),
        (json!({"id": "c", "messages": [{"id": "u", "role": "user", "parts": []}]}), "messages[0].parts"),
        (
            json!({"id": "c", "messages": [{"id": "u", "role": "user", "parts": [{"type": "text"}]}]}),
            "messages[0].parts[0].text",
        ),
        (
            json!({"id": "c", "messages": [{"id": "u", "role": "user", "parts": [{"type": "tool-x"}]}]}),
            "messages[0].parts[0].type",
        ),
        (json!({"id": "c", "messages": [user("u", "hi")], "trigger": "rewind"}), "trigger"),
        (json!({"id": "c\u{1}", "messages": [user("u", "hi")]}), "id"),
        (json!({"id": "c", "messages": [user("u", "hi")], "messageId": ""}), "messageId"),
        (json!({"id": "c", "messages": [user("u", "hi")], "tools": [{"description": "no name"}]}), "tools[0]"),
        (
            json!({"id": "c", "messages": [user("u", "hi")], "resume": {"interrupt_id": "x", "extra": 1}}),
            "resume.extra",
        ),
    ];
    for (body, field) in refusals {
        let (status, answer) = post("tools", body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(answer["field"], field, "{body}: {answer}");
    }
    let (status, answer) = post("nobody", json!({"id": "c", "messages": [user("u", "hi")]})).await;
    assert_eq!((status, answer["code"].as_str()), (StatusCode::NOT_FOUND, Some("unknown_agent")), "{answer}");
    let (status, _) = s.call(POST, "/v1/agents/tools/ai-sdk", None, Some(json!({}))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // History the session has not got, and tool outputs nothing waits for.
    let assistant = json!({"id": "a", "role": "assistant", "parts": [{"type": "text", "text": "hello"}]});
    let (status, answer) =
        post("tools", json!({"id": "c", "messages": [user("u0", "hi"), assistant, user("u1", "more")]})).await;
    assert_eq!((status, answer["field"].as_str()), (StatusCode::CONFLICT, Some("messages[1]")), "{answer}");
    let output = json!({"id": "a", "role": "assistant", "parts": [
        {"type": "tool-add", "toolCallId": "call_9", "state": "output-available", "input": {}, "output": 1}]});
    let (status, answer) = post("tools", json!({"id": "c", "messages": [user("u0", "hi"), output]})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let (status, answer) =
        post("tools", json!({"id": "c", "messages": [], "resume": {"interrupt_id": "approval"}})).await;
    assert_eq!((status, answer["field"].as_str()), (StatusCode::CONFLICT, Some("resume")), "{answer}");

    // A chat of another agent is refused; a reconnect to a chat without a
    // session, or without a running turn, is 204.
    let response = post_chat(&s, "tools", KEY, &json!({"id": "done", "messages": [user("u", "hello")]})).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["x-vercel-ai-ui-message-stream"], "v1");
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let body = response.text().await.unwrap();
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    let (status, answer) = post("helper", json!({"id": "done", "messages": [user("u2", "again")]})).await;
    assert_eq!((status, answer["field"].as_str()), (StatusCode::CONFLICT, Some("id")), "{answer}");
    for path in ["/v1/agents/tools/ai-sdk/nothing/stream", "/v1/agents/tools/ai-sdk/done/stream"] {
        let response = s.request(GET, path, Some(KEY)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NO_CONTENT, "{path}");
    }
    let response = s.request(GET, "/v1/agents/tools/ai-sdk/%FF/stream", Some(KEY)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    s.stop().await;
}

/// Posts a chat request to `agent`'s AI SDK endpoint with `key`.
async fn post_chat(s: &TestServer, agent: &str, key: &str, body: &Value) -> reqwest::Response {
    s.request(POST, &format!("/v1/agents/{agent}/ai-sdk"), Some(key))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// Posts a chat request and reads the whole stream: its chunks, without
/// the closing `[DONE]` (checked to be there).
async fn chunks_of(s: &TestServer, agent: &str, body: Value) -> Vec<Value> {
    let response = post_chat(s, agent, KEY, &body).await;
    let status = response.status();
    let text = response.text().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{text}");
    let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
    data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect()
}

#[tokio::test]
async fn histories_map_onto_the_stored_tree() {
    let s = server().await;
    let user = |id: &str, text: &str| json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]});

    // An assistant message without the metadata this endpoint gives it
    // (a client that dropped it) is matched by position: still no fork.
    chunks_of(&s, "helper", json!({"id": "plain", "messages": [user("p1", "hello")]})).await;
    let bare = json!({"id": "made-up", "role": "assistant", "parts": [{"type": "text", "text": "You said: hello"}]});
    let chunks =
        chunks_of(&s, "helper", json!({"id": "plain", "messages": [user("p1", "hello"), bare, user("p2", "more")]}))
            .await;
    let text: String =
        chunks.iter().filter(|c| c["type"] == "text-delta").filter_map(|c| c["delta"].as_str()).collect();
    assert_eq!(text, "You said: more", "{chunks:?}");
    let (nodes, path) = tree(&s, "plain").await;
    assert_eq!(nodes, path, "appended, not forked");
    assert_eq!(path.len(), 4);

    // A message edited in place (the SDK keeps its id) is recorded anew
    // beside the old one, under an id the engine mints.
    let chunks = chunks_of(&s, "helper", json!({"id": "plain", "messages": [user("p1", "hello again")]})).await;
    let text: String =
        chunks.iter().filter(|c| c["type"] == "text-delta").filter_map(|c| c["delta"].as_str()).collect();
    assert_eq!(text, "You said: hello again", "{chunks:?}");
    let (nodes, path) = tree(&s, "plain").await;
    assert_eq!((nodes.len(), path.len()), (6, 2), "{nodes:?} {path:?}");
    assert_ne!(path[0], "p1");
    // An earlier message edited is refused: only the last one may be.
    let (status, answer) = s
        .call(
            POST,
            "/v1/agents/helper/ai-sdk",
            Some(KEY),
            Some(json!({"id": "plain", "messages": [user("p1", "changed"), user("p9", "next")]})),
        )
        .await;
    assert_eq!((status, answer["field"].as_str()), (StatusCode::CONFLICT, Some("messages[0]")), "{answer}");

    // Text and file parts become the message's content parts; parts with
    // nothing for the model are left out.
    let parts = json!([
        {"type": "step-start"},
        {"type": "text", "text": "what is this?"},
        {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,iVBORw0KGgo="},
        {"type": "file", "mediaType": "text/plain", "filename": "a.txt", "url": "data:text/plain;base64,aGk="},
        {"type": "data-note", "data": {"x": 1}},
    ]);
    chunks_of(&s, "helper", json!({"id": "files", "messages": [{"id": "f0", "role": "user", "parts": parts}]})).await;
    let (_, snapshot) = s.call(GET, "/v1/sessions/files", Some(KEY), None).await;
    assert_eq!(
        snapshot["messages"][0]["content"],
        json!([
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "file", "file": {"filename": "a.txt", "file_data": "data:text/plain;base64,aGk="}},
        ]),
        "{snapshot}"
    );

    // A tool that fails: its part ends in `tool-output-error`.
    let chunks =
        chunks_of(&s, "scenario", json!({"id": "failing", "messages": [user("f1", "use tool bad_output with {}")]}))
            .await;
    let error = chunks.iter().find(|c| c["type"] == "tool-output-error").unwrap_or_else(|| panic!("{chunks:?}"));
    assert!(error["errorText"].as_str().is_some_and(|e| !e.is_empty()), "{error}");
    assert_eq!(chunks.last().unwrap()["type"], "finish");
    s.stop().await;
}

#[tokio::test]
async fn an_end_user_token_chats_in_its_own_sessions_only() {
    let s = server().await;
    let mint = |id: &str| {
        let s = &s;
        let body = json!({"identity": {"id": id}});
        async move {
            let (status, token) = s.call(POST, "/v1/tokens", Some(KEY), Some(body)).await;
            assert_eq!(status, StatusCode::OK, "{token}");
            token["token"].as_str().unwrap().to_owned()
        }
    };
    let (alice, bob) = (mint("alice").await, mint("bob").await);
    let chat =
        json!({"id": "alices", "messages": [{"id": "a1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]});
    let response = post_chat(&s, "helper", &alice, &chat).await;
    assert_eq!(response.status(), StatusCode::OK);
    // The reply streams (`stream_by_default`): its pieces read in order.
    let reply = response.text().await.unwrap();
    assert!(["You ", "said: ", "hi"].iter().all(|piece| reply.contains(&format!("\"delta\":\"{piece}\""))), "{reply}");
    let (_, snapshot) = s.call(GET, "/v1/sessions/alices", Some(KEY), None).await;
    assert_eq!(snapshot["identity"]["id"], "alice", "the session is the token's identity's");
    // Another end user sees no such chat.
    let (status, answer) = s.call(POST, "/v1/agents/helper/ai-sdk", Some(&bob), Some(chat)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    let response = s.request(GET, "/v1/agents/helper/ai-sdk/alices/stream", Some(&bob)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    s.stop().await;
}

/// The chunks of a UI message stream's text, `[DONE]` left out.
fn parse_chunks(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test]
async fn a_reconnect_mid_reply_gets_the_whole_reply() {
    let s = server().await;
    let body = json!({"id": "slow-chat", "messages": [{"id": "s1", "role": "user", "parts": [{"type": "text", "text": "go"}]}]});
    let mut response = post_chat(&s, "slow", KEY, &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    // Read a few words, then leave, as a closed tab does.
    let mut seen = String::new();
    while seen.matches("text-delta").count() < 3 {
        let chunk = response.chunk().await.unwrap().expect("the stream goes on");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(response);

    // The reconnect replays the turn; the reply it joined mid-way comes
    // whole, not as the tail of its deltas.
    let response = s.request(GET, "/v1/agents/slow/ai-sdk/slow-chat/stream", Some(KEY)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["x-vercel-ai-ui-message-stream"], "v1");
    let text = response.text().await.unwrap();
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let chunks = parse_chunks(&text);
    let first = parse_chunks(&seen);
    assert_eq!(chunks[0]["messageId"], first[0]["messageId"], "the same UI message");
    let streamed: String =
        chunks.iter().filter(|c| c["type"] == "text-delta").map(|c| c["delta"].as_str().unwrap()).collect();
    assert_eq!(streamed, slow_reply(), "{chunks:?}");
    assert_eq!(chunks.iter().filter(|c| c["type"] == "text-start").count(), 1, "{chunks:?}");
    assert_eq!(chunks.last().unwrap()["type"], "finish", "{chunks:?}");
    // Once the turn is over there is nothing to reconnect to.
    let response = s.request(GET, "/v1/agents/slow/ai-sdk/slow-chat/stream", Some(KEY)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    s.stop().await;
}

#[tokio::test]
async fn a_cancelled_turn_ends_the_stream_with_an_error() {
    let s = server().await;
    let body =
        json!({"id": "cut", "messages": [{"id": "c1", "role": "user", "parts": [{"type": "text", "text": "go"}]}]});
    let mut response = post_chat(&s, "slow", KEY, &body).await;
    let mut text = String::new();
    while !text.contains("text-delta") {
        text.push_str(&String::from_utf8_lossy(&response.chunk().await.unwrap().expect("the stream goes on")));
    }
    let (status, answer) = s.call(POST, "/v1/sessions/cut/cancel", Some(KEY), None).await;
    assert_eq!((status, &answer), (StatusCode::OK, &json!({"cancelled": true})));
    while let Some(chunk) = response.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let chunks = parse_chunks(&text);
    let error = chunks.iter().find(|c| c["type"] == "error").unwrap_or_else(|| panic!("{chunks:?}"));
    assert!(error["errorText"].as_str().unwrap().contains("cancelled"), "{error}");
    let last = chunks.last().unwrap();
    assert_eq!((last["type"].as_str(), last["finishReason"].as_str()), (Some("finish"), Some("error")), "{chunks:?}");
    // The text part the deltas opened is closed before the stream ends.
    assert!(chunks.iter().any(|c| c["type"] == "text-end"), "{chunks:?}");
    s.stop().await;
}

/// A client that reads nothing while a turn floods deltas is dropped: its
/// stream ends with an `error` naming the reconnect route, then `[DONE]`,
/// and the turn goes on without it.
#[tokio::test]
async fn a_client_that_falls_behind_gets_an_error_naming_the_reconnect() {
    let streams =
        subs_engine::StreamLimits { subscriber_buffer_bytes: 64 << 10, ..subs_engine::StreamLimits::default() };
    let config = subs_engine::EngineConfig { streams, ..subs_engine::EngineConfig::default() };
    // The host's work on tens of MiB of deltas counts against the
    // decision's CPU limit; the bound under test is the stream's.
    let mut roomy = subs_engine::worker::component::AgentPolicy::default();
    roomy.limits.cpu = Some(std::time::Duration::from_secs(120));
    roomy.limits.wall_clock = Some(std::time::Duration::from_secs(120));
    let policies = [(("acme".to_owned(), "flood".to_owned()), roomy)].into_iter().collect();
    let s = TestServer::builder().keys(&[("acme", KEY)]).policies(policies).engine_config(config).start().await;
    assert!(s.upload("flood", guests::TEST_FLOOD, Some(KEY)).await.0.is_success());

    // 600 deltas of 60 kB: far more than the subscription's 64 KiB and
    // what the connection's buffers hold.
    let user = json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "60000 600"}]});
    let response = post_chat(&s, "flood", KEY, &json!({"id": "c-flood", "messages": [user]})).await;
    assert_eq!(response.status(), StatusCode::OK);
    // The turn ends while the client reads nothing.
    let deadline = std::time::Duration::from_secs(120);
    let ended = subs_tests::wait::eventually(deadline, "the flood turn ends", || async {
        let snapshot = s.engine.reads().snapshot("acme", "c-flood").await.unwrap();
        snapshot.filter(|s| s.record.turn.is_none() && s.record.next.turn > 0)
    })
    .await;
    assert_eq!(ended.messages.len(), 2, "the turn goes on without its client: {:?}", ended.messages);
    let text = tokio::time::timeout(deadline, response.text()).await.unwrap().unwrap();
    assert!(text.trim_end().ends_with("data: [DONE]"), "{}", &text[text.len().saturating_sub(500)..]);
    let chunks = parse_chunks(&text);
    let last = chunks.last().unwrap();
    assert_eq!(last["type"], "error", "{last}");
    let message = last["errorText"].as_str().unwrap();
    assert!(message.contains("fell behind") && message.contains("/stream"), "{message}");
}
