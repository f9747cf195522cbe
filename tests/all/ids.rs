//! Ids are the client's and the model's strings: session, message, turn
//! and call ids may hold `/`, spaces and unicode (percent-encoded in
//! paths), and each still names exactly its own session, message or call.
//! Over the real API: a server on `127.0.0.1:0` and a real redb file.

use std::sync::{Arc, Mutex};

use reqwest::StatusCode;
use serde_json::{Value, json};
use subs_protocol::{AgentTool, DecisionRequest, DecisionResponse, Trigger};
use subs_sdk::prelude::{Action, AgentConfig, Context, DecideError};
use subs_tests::guests;

use crate::api::Server;

const GET: reqwest::Method = reqwest::Method::GET;
const POST: reqwest::Method = reqwest::Method::POST;
const PUT: reqwest::Method = reqwest::Method::PUT;

/// `id` percent-encoded for a URL, as clients must send it.
fn enc(id: &str) -> String {
    subs_server::sessions::encode_id(id).to_string()
}

/// The ids of a page of `GET /v1/sessions` and the `next` link, if any.
async fn page(s: &Server, path: &str) -> (Vec<String>, Option<String>) {
    let response = s.request(GET, path, None).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    let link = response.headers().get("link").map(|l| l.to_str().expect("the link is ASCII").to_owned());
    let next = link.map(|link| {
        let (url, rel) = link.split_once(">; ").expect("a link");
        assert_eq!(rel, "rel=\"next\"");
        url.trim_start_matches('<').to_owned()
    });
    let sessions: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    let ids = sessions.as_array().unwrap().iter().map(|s| s["session_id"].as_str().unwrap().to_owned()).collect();
    (ids, next)
}

/// Every page of `GET /v1/sessions?limit=…`, following the links.
async fn every_page(s: &Server, limit: usize) -> Vec<String> {
    let mut all = Vec::new();
    let mut next = Some(format!("/v1/sessions?limit={limit}"));
    while let Some(path) = next {
        let (ids, link) = page(s, &path).await;
        assert!(ids.len() <= limit);
        all.extend(ids);
        next = link;
    }
    all
}

/// The texts of a session's snapshot messages, as `role: text`.
async fn transcript(s: &Server, session: &str) -> Vec<String> {
    let (status, snapshot) = s.call(GET, &format!("/v1/sessions/{}", enc(session)), None, None).await;
    assert_eq!(status, StatusCode::OK, "{session:?}: {snapshot}");
    assert_eq!(snapshot["session_id"], session, "the snapshot names its own session");
    snapshot["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| format!("{}: {}", m["role"].as_str().unwrap(), m["content"].as_str().unwrap_or_default()))
        .collect()
}

/// Runs one turn saying `text` in `session`, through its encoded path, to
/// its end; returns the events of the session's stream.
async fn turn(s: &Server, session: &str, agent: &str, text: &str) -> Vec<subs_tests::server::SseEvent> {
    let (status, accepted) = s.say(&enc(session), agent, text, None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{session:?}: {accepted}");
    assert_eq!(accepted["session_id"], session);
    let turn = accepted["turn_id"].as_str().unwrap().to_owned();
    let events = s.wait_turn(&enc(session), &turn, None).await;
    assert_eq!(events.last().unwrap().event, "turn.done", "{session:?}: {events:?}");
    events
}

#[tokio::test]
async fn sessions_with_any_id_run_read_stream_and_list_as_themselves() {
    let s = Server::start(&[]).await;
    assert_eq!(s.upload("helper", guests::PASSTHROUGH_LEAN, None).await.0, StatusCode::CREATED);

    // `a` is a prefix of `a/b`, `a.b` and `a b`, as ids and as store keys;
    // `chat/ü 1:x` holds a `/`, a space, unicode and a `:`.
    let ids = ["chat/ü 1:x", "a", "a/b", "a.b", "a b", "../x", "q?x=1&y#z", "%2F", "+"];
    for id in ids {
        let events = turn(&s, id, "helper", &format!("I am {id}")).await;
        // The stream read through the encoded path is this session's:
        // only its own message, nothing of a session it prefixes.
        let said: Vec<&str> = events
            .iter()
            .filter(|e| e.event == "message")
            .filter_map(|e| e.data["message"]["content"].as_str())
            .collect();
        assert_eq!(said, [format!("I am {id}"), format!("You said: I am {id}")], "{id:?}: {events:?}");
    }
    for id in ids {
        assert_eq!(
            transcript(&s, id).await,
            [format!("user: I am {id}"), format!("assistant: You said: I am {id}")],
            "{id:?}"
        );
    }
    // A second turn in `a` leaves `a/b` as it was.
    turn(&s, "a", "helper", "again").await;
    assert_eq!(transcript(&s, "a").await.len(), 4);
    assert_eq!(transcript(&s, "a/b").await.len(), 2);
    // `a%2Fb` is `a/b`, not the path `a` then `b`; the raw `/` is another
    // route altogether.
    assert_eq!(s.call(GET, "/v1/sessions/a/b", None, None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(s.call(GET, "/v1/sessions/%252F", None, None).await.1["session_id"], "%2F");

    // The list names every session under its own id, in id order, page by
    // page: each `Link` carries the last id percent-encoded.
    let mut sorted: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    sorted.sort();
    for limit in [1, 2, 100] {
        assert_eq!(every_page(&s, limit).await, sorted, "pages of {limit}");
    }
    let (_, next) = page(&s, "/v1/sessions?limit=1").await;
    let after = &sorted[0];
    assert_eq!(next.as_deref(), Some(format!("/v1/sessions?limit=1&after={}", enc(after)).as_str()));
    let at = sorted.iter().position(|id| id == "chat/ü 1:x").unwrap();
    let (listed, _) = page(&s, &format!("/v1/sessions?after={}", enc("chat/ü 1:x"))).await;
    assert_eq!(listed, sorted[at + 1..], "after an id with / and unicode");
    // In a query, `+` is a space (form encoding): `after=a+b` is `a b`.
    let at = sorted.iter().position(|id| id == "a b").unwrap();
    assert_eq!(page(&s, "/v1/sessions?after=a+b").await.0, sorted[at + 1..]);

    // A stream token authenticates any session's stream (it names the
    // tenant only).
    let (status, token) = s.call(POST, "/v1/tokens", None, None).await;
    assert_eq!(status, StatusCode::OK, "{token}");
    let path = format!("/v1/sessions/{}/events?token={}", enc("chat/ü 1:x"), token["token"].as_str().unwrap());
    let response = s.request(GET, &path, None).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let events = subs_tests::server::read_sse(response, &mut |e| e.event == "turn.done").await;
    assert!(events.iter().any(|e| e.data["message"]["content"] == "I am chat/ü 1:x"), "{events:?}");
}

#[tokio::test]
async fn client_ids_with_spaces_and_unicode_are_kept_as_sent() {
    let s = Server::start(&[]).await;
    assert_eq!(s.upload("helper", guests::PASSTHROUGH_LEAN, None).await.0, StatusCode::CREATED);
    let session = "ü/1";
    let (message_id, turn_id) = (" mein Satz/ü 1 ", "turn ü/1:x");
    let body = json!({
        "type": "client.message", "agent_id": "helper", "turn_id": turn_id,
        "message": {"id": message_id, "role": "user", "content": "hi"},
    });
    let path = format!("/v1/sessions/{}/input", enc(session));
    let (status, accepted) = s.call(POST, &path, None, Some(body.clone())).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    assert_eq!(accepted["turn_id"], turn_id);
    s.wait_turn(&enc(session), turn_id, None).await;
    // The same turn id again is the same turn.
    let (status, again) = s.call(POST, &path, None, Some(body)).await;
    assert_eq!((status, &again["existing"]), (StatusCode::ACCEPTED, &json!(true)), "{again}");
    let (_, snapshot) = s.call(GET, &format!("/v1/sessions/{}", enc(session)), None, None).await;
    assert_eq!(snapshot["messages"][0]["id"], message_id, "{snapshot}");
    assert_eq!(snapshot["messages"].as_array().unwrap().len(), 2, "{snapshot}");
}

#[tokio::test]
async fn ids_with_control_characters_or_too_long_are_refused_naming_the_field() {
    let s = Server::start(&[]).await;
    assert_eq!(s.upload("helper", guests::PASSTHROUGH_LEAN, None).await.0, StatusCode::CREATED);
    let message = |id: Option<&str>, turn: Option<&str>| {
        let mut body =
            json!({"type": "client.message", "agent_id": "helper", "message": {"role": "user", "content": "hi"}});
        if let Some(id) = id {
            body["message"]["id"] = json!(id);
        }
        if let Some(turn) = turn {
            body["turn_id"] = json!(turn);
        }
        body
    };
    let refused = async |path: &str, body: Option<Value>, field: &str| {
        let method = if body.is_some() { POST } else { GET };
        let (status, answer) = s.call(method, path, None, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer}");
        assert_eq!(answer["code"], "invalid_input", "{path}: {answer}");
        assert_eq!(answer["field"], field, "{path}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains("without control characters"), "{answer}");
    };
    let longest = "ü".repeat(128);
    let too_long = format!("{longest}x");
    // Session ids in the path.
    for bad in ["a%0Ab", "%00", "tab%09", "del%7F", "c1%C2%85", &enc(&too_long)] {
        refused(&format!("/v1/sessions/{bad}/input"), Some(message(None, None)), "session_id").await;
        refused(&format!("/v1/sessions/{bad}"), None, "session_id").await;
    }
    // `after` of the list.
    for bad in ["a%0Ab", &enc(&too_long)] {
        refused(&format!("/v1/sessions?after={bad}"), None, "after").await;
    }
    // Turn and message ids in the body.
    for bad in ["a\nb", "\u{0}", &too_long] {
        refused("/v1/sessions/s/input", Some(message(None, Some(bad))), "turn_id").await;
        refused("/v1/sessions/s/input", Some(message(Some(bad), None)), "messages[0].id").await;
    }
    // The longest id is fine, as session, turn and message id.
    let path = format!("/v1/sessions/{}/input", enc(&longest));
    let (status, answer) = s.call(POST, &path, None, Some(message(Some(&longest), Some(&longest)))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    s.wait_turn(&enc(&longest), &longest, None).await;
    // Bytes that are not UTF-8 are no id either.
    let (status, answer) = s.call(GET, "/v1/sessions/%FF", None, None).await;
    assert_eq!((status, &answer["field"]), (StatusCode::BAD_REQUEST, &json!("session_id")), "{answer}");
}

// ---- a model's own tool-call ids --------------------------------------------

/// The id the model gives its tool call: a `/`, a space, unicode.
const MODEL_CALL_ID: &str = "call/ü 1";

/// An HTTP worker that runs the LLM calls itself (`handler: worker`): the
/// first reply calls tool `lookup` under [`MODEL_CALL_ID`], the next
/// (seeing the tool's result) answers in text. Everything else is the
/// engine's proposal, so the tool call itself is the engine's own.
struct ModelWithOddIds {
    seen: Arc<Mutex<Vec<Value>>>,
    call_id: String,
}

impl subs_sdk::Agent for ModelWithOddIds {
    fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        match &request.trigger {
            Trigger::SessionStart => {
                let mut config = AgentConfig::new("test/model").with_tools([AgentTool::new("lookup")]);
                config.handler = Some(subs_protocol::LlmHandler::Worker);
                Ok(request.proposed.with_agent(config))
            }
            Trigger::LlmExecute(execute) => {
                let messages = execute.request["messages"].as_array().cloned().unwrap_or_default();
                let answered = messages.iter().any(|m| m["role"] == "tool");
                let response = if answered {
                    json!({"model": "test/model", "content": "found it", "finish_reason": "stop"})
                } else {
                    json!({"model": "test/model", "finish_reason": "tool_calls", "tool_calls": [{
                        "id": self.call_id, "type": "function",
                        "function": {"name": "lookup", "arguments": "{\"q\": \"x\"}"},
                    }]})
                };
                Ok(DecisionResponse::new().with_action(Action::llm_result(response)))
            }
            Trigger::ToolExecute(execute) => {
                self.seen.lock().unwrap().push(json!(execute.id));
                Ok(DecisionResponse::new().with_action(Action::tool_result(json!({"answer": 42}))))
            }
            _ => Ok(request.proposed),
        }
    }
}

#[tokio::test]
async fn a_model_tool_call_id_with_slash_and_unicode_runs_the_tool_loop() {
    let s = Server::start(&[]).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = ModelWithOddIds { seen: seen.clone(), call_id: MODEL_CALL_ID.to_owned() };
    let addr = subs_tests::serve_loopback(subs_http_worker::router(model)).await;
    let (status, agent) = s.call(PUT, "/v1/agents/odd", None, Some(json!({"url": format!("http://{addr}/")}))).await;
    assert!(status.is_success(), "{agent}");

    let session = "parent/ü";
    turn(&s, session, "odd", "look it up").await;
    assert_eq!(*seen.lock().unwrap(), [json!(MODEL_CALL_ID)], "tool.execute carries the model's id");
    let (_, snapshot) = s.call(GET, &format!("/v1/sessions/{}", enc(session)), None, None).await;
    let messages = snapshot["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "{snapshot}");
    assert_eq!(messages[1]["tool_calls"][0]["id"], MODEL_CALL_ID, "{snapshot}");
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["tool_call_id"], MODEL_CALL_ID, "{snapshot}");
    assert_eq!(messages[3]["content"], "found it");
    assert_eq!(snapshot["status"], "idle");
}

#[tokio::test]
async fn a_model_tool_call_id_the_rule_refuses_is_replaced_and_the_loop_runs() {
    let s = Server::start(&[]).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    for (session, id) in [("long", "x".repeat(300)), ("ctl", "call\u{7}1".to_owned())] {
        let model = ModelWithOddIds { seen: seen.clone(), call_id: id.clone() };
        let addr = subs_tests::serve_loopback(subs_http_worker::router(model)).await;
        let worker = json!({"url": format!("http://{addr}/")});
        assert!(s.call(PUT, &format!("/v1/agents/{session}"), None, Some(worker)).await.0.is_success());
        turn(&s, session, session, "look it up").await;
        let (_, snapshot) = s.call(GET, &format!("/v1/sessions/{session}"), None, None).await;
        let messages = snapshot["messages"].as_array().unwrap();
        assert_eq!((messages.len(), &snapshot["status"]), (4, &json!("idle")), "{snapshot}");
        let replaced = messages[1]["tool_calls"][0]["id"].as_str().unwrap();
        assert!(replaced.starts_with("call_") && replaced.len() == 21, "{session}: {replaced}");
        assert_eq!(messages[2]["tool_call_id"], replaced, "the tool message answers the replacement");
        assert_eq!(seen.lock().unwrap().last().unwrap(), replaced, "tool.execute carries it");
        assert_eq!(messages[3]["content"], "found it");
    }
}
