//! Interrupts a client can trust, over the real API: a resume is checked
//! against the interrupt's `resume_schema` (a refused payload leaves the
//! interrupt open), an input with a field it does not know is refused by
//! name, a resume of an interrupt that is not open is a conflict, and
//! every resume is stored as an `interrupt.resumed` event saying with what
//! and by whom. See docs/protocol.md ("interrupt") and docs/api.md.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use subs_tests::guests;
use subs_tests::server::{SseEvent, TestServer};

const ACME: (&str, &str) = ("acme", "subs_acme_key_interrupts_000000000000");
const KEY: Option<&str> = Some(ACME.1);

/// The resume an approval takes: `{"approved": bool, "reason"?: string}`.
fn approval_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
        "required": ["approved"],
        "additionalProperties": false
    })
}

/// An HTTP worker that opens the interrupt `approve` (with
/// [`approval_schema`]) on the user's message and ends the turn with the
/// resume's payload; it keeps the trigger types it was sent.
async fn approver() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let handler = move |body: Bytes| {
        let log = log.clone();
        async move {
            let request: Value = serde_json::from_slice(&body).expect("a JSON decision request");
            let kind = request["trigger"]["type"].as_str().unwrap_or_default().to_owned();
            log.lock().unwrap().push(kind.clone());
            axum::Json(match kind.as_str() {
                "session.start" => json!({"agent": {
                    "model": "subs/offline",
                    "retry": {"timeout_secs": 20, "max_retries": 0, "backoff_base_secs": 0.01, "backoff_max_secs": 0.01}
                }}),
                "client.messages" => json!({"actions": [{
                    "type": "interrupt",
                    "interrupt_id": "approve",
                    "reason": "refund 5?",
                    "payload": {"tool": "refund", "arguments": {"amount": 5}},
                    "resume_schema": approval_schema()
                }]}),
                "interrupt.resumed" => json!({"actions": [{"type": "done", "data": request["trigger"]["payload"]}]}),
                _ => json!({}),
            })
        }
    };
    let app = Router::new().route("/", axum::routing::post(handler));
    (format!("http://{}/", subs_tests::serve_loopback(app).await), seen)
}

async fn server_with_approver() -> (TestServer, Arc<Mutex<Vec<String>>>) {
    let s = TestServer::start(&[ACME]).await;
    let (url, seen) = approver().await;
    let (status, body) = s.call(Method::PUT, "/v1/agents/w", KEY, Some(json!({"url": url}))).await;
    assert!(status.is_success(), "{status}: {body}");
    (s, seen)
}

async fn input(s: &TestServer, session: &str, body: Value) -> (StatusCode, Value) {
    s.call(Method::POST, &format!("/v1/sessions/{session}/input"), KEY, Some(body)).await
}

async fn resume(s: &TestServer, session: &str, body: Value) -> (StatusCode, Value) {
    let mut resume = json!({"type": "interrupt.resume", "interrupt_id": "approve"});
    resume.as_object_mut().unwrap().extend(body.as_object().unwrap().clone());
    input(s, session, resume).await
}

/// Starts a turn in `session` and reads its events up to the interrupt;
/// the turn's id.
async fn open_interrupt(s: &TestServer, session: &str) -> String {
    let (status, body) = s.say(session, "w", "refund please", KEY).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let events = s.events(session, KEY, None, |e| e.event == "interrupt").await;
    let raised = &events.last().expect("the interrupt").data;
    assert_eq!(raised["resume_schema"], approval_schema(), "clients see the schema with the interrupt");
    body["turn_id"].as_str().unwrap().to_owned()
}

async fn open_interrupts(s: &TestServer, session: &str) -> Value {
    let (status, view) = s.call(Method::GET, &format!("/v1/sessions/{session}"), KEY, None).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    view["interrupts"].clone()
}

fn named<'a>(events: &'a [SseEvent], name: &str) -> Vec<&'a SseEvent> {
    events.iter().filter(|e| e.event == name).collect()
}

#[tokio::test]
async fn a_payload_failing_the_resume_schema_is_refused_by_field_and_the_interrupt_stays_open() {
    let (s, seen) = server_with_approver().await;
    let turn = open_interrupt(&s, "schema").await;

    for (payload, field) in [
        (json!({"approved": "yes"}), "payload.approved"),
        (json!({"reason": "fine"}), "payload"),
        (json!({"approved": true, "amount": 9}), "payload"),
        (Value::Null, "payload"),
    ] {
        let (status, body) = resume(&s, "schema", json!({"payload": payload})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{payload}: {body}");
        assert_eq!(body["field"], field, "{payload}: {body}");
        assert!(body["error"].as_str().unwrap().contains("resume_schema"), "{body}");
        let open = open_interrupts(&s, "schema").await;
        assert_eq!(open[0]["interrupt_id"], "approve", "still open after {payload}: {open}");
        assert_eq!(open[0]["resume_schema"], approval_schema());
    }

    let approved = json!({"approved": false, "reason": "too much"});
    let (status, body) = resume(&s, "schema", json!({"payload": approved})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let events = s.wait_turn("schema", &turn, KEY).await;
    let end = events.last().unwrap();
    assert_eq!((end.event.as_str(), &end.data["data"]), ("turn.done", &approved));
    // The refused resumes left nothing: one resume stored, one delivered.
    let resumed = named(&events, "interrupt.resumed");
    assert_eq!(resumed.len(), 1, "{events:?}");
    assert_eq!(
        resumed[0].data,
        json!({"interrupt_id": "approve", "payload": approved, "resumed_by": {"kind": "tenant", "key": &ACME.1[..8]}})
    );
    assert_eq!(
        *seen.lock().unwrap(),
        ["session.start", "client.messages", "interrupt.resumed"],
        "the agent saw one resume"
    );
    assert_eq!(open_interrupts(&s, "schema").await, json!([]));
}

#[tokio::test]
async fn an_input_with_an_unknown_field_is_refused_by_name_and_nothing_is_stored() {
    let (s, seen) = server_with_approver().await;
    // A typo in a new session's first message creates nothing.
    let typo = json!({"type": "client.message", "agent_id": "w", "mesage": {"role": "user", "content": "hi"}});
    let (status, body) = input(&s, "fresh", typo).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["field"], "mesage", "{body}");
    let (status, _) = s.call(Method::GET, "/v1/sessions/fresh", KEY, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no session was created");

    let turn = open_interrupt(&s, "typo").await;
    // `paylod` must not resume with no payload.
    let (status, body) = resume(&s, "typo", json!({"paylod": {"approved": true}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["field"], "paylod", "{body}");
    assert!(body["error"].as_str().unwrap().contains("unknown field `paylod`"), "{body}");
    for bad in [
        json!({"type": "tool.result", "id": "c1", "reslt": 1}),
        json!({"type": "tool.error", "id": "c1", "error": "e", "retryable": false, "atempt": 1}),
        json!({"type": "client.action", "agent_id": "w", "name": "go", "arg": {}}),
        json!({"type": "client.messages", "agent_id": "w", "messages": [], "strem": true}),
    ] {
        let (status, body) = input(&s, "typo", bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(body["field"].is_string(), "{bad}: {body}");
    }
    assert_eq!(open_interrupts(&s, "typo").await[0]["interrupt_id"], "approve");

    let (status, body) = resume(&s, "typo", json!({"payload": {"approved": true}})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let events = s.wait_turn("typo", &turn, KEY).await;
    assert_eq!(events.last().unwrap().data["data"], json!({"approved": true}));
    assert_eq!(named(&events, "interrupt.resumed").len(), 1);
    assert_eq!(*seen.lock().unwrap(), ["session.start", "client.messages", "interrupt.resumed"]);
}

#[tokio::test]
async fn a_resume_of_an_interrupt_that_is_not_open_is_a_conflict_and_stores_nothing() {
    let (s, seen) = server_with_approver().await;
    let turn = open_interrupt(&s, "closed").await;
    let (status, body) =
        input(&s, "closed", json!({"type": "interrupt.resume", "interrupt_id": "nope", "payload": {"approved": true}}))
            .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["error"].as_str().unwrap().contains("no interrupt `nope` is waiting"), "{body}");

    let (status, _) = resume(&s, "closed", json!({"payload": {"approved": true}})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let events = s.wait_turn("closed", &turn, KEY).await;
    // Answered already: a second resume is refused, and stores nothing.
    let (status, body) = resume(&s, "closed", json!({"payload": {"approved": false}})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["error"].as_str().unwrap().contains("resumed already"), "{body}");
    let after = s.events("closed", KEY, events.last().unwrap().id, |_| true);
    let after = tokio::time::timeout(std::time::Duration::from_millis(300), after).await;
    assert!(after.is_err(), "no event after the turn's end: {after:?}");
    assert_eq!(*seen.lock().unwrap(), ["session.start", "client.messages", "interrupt.resumed"]);
}

#[tokio::test]
async fn an_end_users_resume_is_recorded_as_theirs() {
    let (s, _) = server_with_approver().await;
    let (status, token) =
        s.call(Method::POST, "/v1/tokens", KEY, Some(json!({"identity": {"id": "alice"}, "session_id": "mine"}))).await;
    assert_eq!(status, StatusCode::OK, "{token}");
    let token = token["token"].as_str().unwrap().to_owned();
    let say = json!({"type": "client.message", "agent_id": "w", "message": {"role": "user", "content": "refund"}});
    let (status, body) = s.call(Method::POST, "/v1/sessions/mine/input", Some(&token), Some(say)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let turn = body["turn_id"].as_str().unwrap().to_owned();
    s.events("mine", KEY, None, |e| e.event == "interrupt").await;

    let resume = json!({"type": "interrupt.resume", "interrupt_id": "approve", "payload": {"approved": true}});
    let (status, body) = s.call(Method::POST, "/v1/sessions/mine/input", Some(&token), Some(resume)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let events = s.wait_turn("mine", &turn, KEY).await;
    let resumed = named(&events, "interrupt.resumed");
    assert_eq!(resumed[0].data["resumed_by"], json!({"kind": "end_user", "identity": {"id": "alice"}}));
}

#[tokio::test]
async fn a_components_interrupt_carries_its_resume_schema_through_the_wit_boundary() {
    let s = TestServer::start(&[]).await;
    assert_eq!(s.upload("scenario", guests::TEST_SCENARIO, None).await.0, StatusCode::CREATED);
    let (status, body) = s.say("c", "scenario", "interrupt with schema", None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let turn = body["turn_id"].as_str().unwrap().to_owned();
    let events = s.events("c", None, None, |e| e.event == "interrupt").await;
    assert_eq!(events.last().unwrap().data["resume_schema"], approval_schema());

    let post = |payload: Value| {
        let body = json!({"type": "interrupt.resume", "interrupt_id": "approval", "payload": payload});
        s.call(Method::POST, "/v1/sessions/c/input", None, Some(body))
    };
    let (status, body) = post(json!({"approved": 1})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["field"], "payload.approved");
    let (status, body) = post(json!({"approved": true})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let events = s.wait_turn("c", &turn, None).await;
    assert_eq!(events.last().unwrap().event, "turn.done");
    assert_eq!(named(&events, "interrupt.resumed")[0].data["payload"], json!({"approved": true}));
}

/// Two approvals in one reply, each answered on its own: the call denied
/// while the other interrupt is still open is settled with a `tool.error`
/// before it ever starts, and never runs; the approved one runs once its
/// resume leaves no interrupt open.
#[tokio::test]
async fn a_call_denied_while_another_approval_is_open_is_settled_and_never_runs() {
    let executed = Arc::new(Mutex::new(Vec::<String>::new()));
    let ran = executed.clone();
    let handler = move |body: Bytes| {
        let ran = ran.clone();
        async move {
            let request: Value = serde_json::from_slice(&body).expect("a JSON decision request");
            let trigger = &request["trigger"];
            axum::Json(match trigger["type"].as_str().unwrap_or_default() {
                "session.start" => json!({"agent": {
                    "model": "subs/offline",
                    "retry": {"timeout_secs": 20, "max_retries": 0, "backoff_base_secs": 0.01, "backoff_max_secs": 0.01},
                    "tools": [{"name": "refund", "input": {"type": "object"}}]
                }}),
                "client.messages" => {
                    let call = |id: &str, amount: i64| json!({"type": "tool.call", "id": id, "name": "refund", "arguments": {"amount": amount}});
                    let ask = |id: &str| {
                        json!({"type": "interrupt", "interrupt_id": format!("approve-{id}"), "reason": "refund?",
                               "payload": {"tool": "refund", "call_id": id}, "resume_schema": approval_schema()})
                    };
                    json!({"actions": [call("c1", 5), call("c2", 7), ask("c1"), ask("c2")]})
                }
                "interrupt.resumed" if trigger["payload"]["approved"] == false => {
                    let call = trigger["interrupt_id"].as_str().unwrap().trim_start_matches("approve-").to_owned();
                    let reason = trigger["payload"]["reason"].clone();
                    json!({"actions": [{"type": "tool.error", "id": call, "error": reason, "retryable": false}]})
                }
                "interrupt.resumed" => json!({}),
                "tool.execute" => {
                    ran.lock().unwrap().push(trigger["id"].as_str().unwrap().to_owned());
                    json!({"actions": [{"type": "tool.result", "result": {"refunded": true}}]})
                }
                // The proposal records the `tool` message; the last one ends
                // the turn instead of calling the model.
                "tool.finished" => {
                    let mut decision = request["proposed"].clone();
                    if request["pending_calls"] == 0 {
                        decision["actions"] = json!([{"type": "done"}]);
                    }
                    decision
                }
                _ => json!({}),
            })
        }
    };
    let app = Router::new().route("/", axum::routing::post(handler));
    let url = format!("http://{}/", subs_tests::serve_loopback(app).await);
    let s = TestServer::start(&[ACME]).await;
    let (status, body) = s.call(Method::PUT, "/v1/agents/w", KEY, Some(json!({"url": url}))).await;
    assert!(status.is_success(), "{status}: {body}");
    let (status, body) = s.say("two", "w", "refund both", KEY).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let turn = body["turn_id"].as_str().unwrap().to_owned();
    s.events("two", KEY, None, |e| e.event == "interrupt" && e.data["interrupt_id"] == "approve-c2").await;

    let answer = |id: &str, payload: Value| json!({"type": "interrupt.resume", "interrupt_id": id, "payload": payload});
    let (status, body) = input(&s, "two", answer("approve-c2", json!({"approved": false, "reason": "not c2"}))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // The denial's decision is applied while `approve-c1` is still open.
    let view = subs_tests::wait::eventually(std::time::Duration::from_secs(20), "c2 settles", || async {
        let (_, view) = s.call(Method::GET, "/v1/sessions/two", KEY, None).await;
        let calls = view["calls"].as_array().unwrap();
        let settled = calls.iter().find(|c| c["id"] == "c2").unwrap()["status"] == "failed";
        if settled { Ok(view) } else { Err(view) }
    })
    .await;
    let calls = view["calls"].as_array().unwrap();
    assert_eq!(calls.iter().find(|c| c["id"] == "c1").unwrap()["status"], "queued", "{view}");
    assert_eq!(view["status"], "waiting");

    let (status, body) = input(&s, "two", answer("approve-c1", json!({"approved": true}))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let events = s.wait_turn("two", &turn, KEY).await;
    assert_eq!(events.last().unwrap().event, "turn.done", "{events:?}");
    assert_eq!(*executed.lock().unwrap(), ["c1"], "the denied call never ran");
    let (_, view) = s.call(Method::GET, "/v1/sessions/two", KEY, None).await;
    let tools: Vec<&Value> = view["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").collect();
    assert!(
        tools.iter().any(|m| m["tool_call_id"] == "c2" && m["content"].as_str().unwrap().contains("not c2")),
        "{tools:?}"
    );
    assert!(tools.iter().any(|m| m["tool_call_id"] == "c1"), "{tools:?}");
}
