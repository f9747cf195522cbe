//! Delegation, budgets over a session's tree, and messages re-sent under
//! their ids, over the real API: a server on `127.0.0.1:0`, HTTP workers
//! scripted per trigger (in-test servers), a redb file underneath. See
//! docs/loop.md ("Actions", "Ids the engine mints", "Client inputs").

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use subs_tests::server::TestServer;

use crate::scripted::{Scripted, kind};

const GET: Method = Method::GET;
const POST: Method = Method::POST;
const PUT: Method = Method::PUT;

/// Whether the request is for a child (agent `kid`).
fn child(request: &Value) -> bool {
    request["agent_id"] == "kid"
}

/// The text of the last message of a `client.messages` trigger.
fn asked(request: &Value) -> Value {
    request["trigger"]["messages"].as_array().and_then(|m| m.last()).map_or(Value::Null, |m| m["content"].clone())
}

/// A server whose agents `w` (the parent) and `kid` (its sub-agent) both
/// run on `worker`.
async fn server_with(worker: &Scripted) -> TestServer {
    let s = TestServer::start(&[]).await;
    for agent in ["w", "kid"] {
        let (status, body) = s.call(PUT, &format!("/v1/agents/{agent}"), None, Some(json!({"url": worker.url}))).await;
        assert!(status.is_success(), "{status}: {body}");
    }
    s
}

async fn say(s: &TestServer, session: &str, agent: &str, text: &str) -> String {
    let (status, body) = s.say(session, agent, text, None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["turn_id"].as_str().unwrap().to_owned()
}

async fn snapshot(s: &TestServer, session: &str) -> (StatusCode, Value) {
    s.call(GET, &format!("/v1/sessions/{session}"), None, None).await
}

/// The turn's end event: its name and data.
async fn turn_end(s: &TestServer, session: &str, turn: &str) -> (String, Value) {
    let events = s.wait_turn(session, turn, None).await;
    let end = events.last().expect("the turn's end");
    (end.event.clone(), end.data.clone())
}

/// A delivery policy that gives up at once: a refused decision fails the
/// turn on its first delivery.
fn no_retries() -> Value {
    json!({"timeout_secs": 20, "max_retries": 0, "backoff_base_secs": 0.01, "backoff_max_secs": 0.01})
}

/// An assistant message calling sub-agent `kid` as tool call `id`.
fn calls_kid(id: &str, arguments: &str) -> Value {
    json!({"role": "assistant", "tool_calls": [
        {"id": id, "type": "function", "function": {"name": "kid", "arguments": arguments}}
    ]})
}

// ---- sub-agents: ids ---------------------------------------------------------

/// A model that numbers its tool calls from 1 in every reply delegates
/// twice under the same id: each delegation gets a child of its own, and
/// the turn goes on through both.
#[tokio::test]
async fn a_tool_call_id_reused_in_a_later_reply_spawns_a_new_child() {
    let worker = Scripted::start(|r| {
        if child(r) {
            return Some(match kind(r) {
                "client.messages" => json!({"actions": [{"type": "done", "data": {"asked": asked(r)}}]}),
                _ => json!({}),
            });
        }
        Some(match kind(r) {
            "session.start" => json!({"agent": {
                "model": "subs/offline", "handler": "worker", "retry": no_retries(),
                "sub_agents": [{"id": "kid"}]
            }}),
            // The model's replies: two delegations, both as call `1`, then
            // an answer.
            "llm.execute" => {
                let delegated = r["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").count();
                let response = if delegated < 2 {
                    json!({"model": "m", "tool_calls": [{"id": "1", "type": "function",
                        "function": {"name": "kid", "arguments": format!("{{\"n\":{delegated}}}")}}],
                        "finish_reason": "tool_calls"})
                } else {
                    json!({"model": "m", "content": "both answered", "finish_reason": "stop"})
                };
                json!({"actions": [{"type": "llm.result", "response": response}]})
            }
            _ => r["proposed"].clone(),
        })
    })
    .await;
    let s = server_with(&worker).await;
    let turn = say(&s, "p", "w", "delegate twice").await;
    let (end, data) = turn_end(&s, "p", &turn).await;
    assert_eq!(end, "turn.done", "{data}");

    let children: Vec<String> = worker.sessions().into_iter().filter(|id| id != "p").collect();
    assert_eq!(children.len(), 2, "two children: {children:?}");
    assert_ne!(children[0], children[1]);
    for (n, id) in children.iter().enumerate() {
        assert!(id.starts_with("p.") && id.ends_with(".1"), "`<parent>.<step>.<tool call>`: {id}");
        let (status, view) = snapshot(&s, id).await;
        assert_eq!((status, &view["ancestry"]), (StatusCode::OK, &json!(["p"])), "{view}");
        let first = worker.requests(id).into_iter().find(|r| kind(r) == "client.messages").expect("the child's turn");
        assert_eq!(asked(&first), format!("{{\"n\":{n}}}"), "each child its own call's arguments");
    }
    let (_, parent) = snapshot(&s, "p").await;
    let answers: Vec<&Value> =
        parent["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").map(|m| &m["content"]).collect();
    assert_eq!(answers.len(), 2, "{parent}");
    assert!(
        answers[0].as_str().unwrap().contains("\\\"n\\\":0") && answers[1].as_str().unwrap().contains("\\\"n\\\":1")
    );
}

/// Two spawns of one session in one decision are refused whole: nothing
/// is created, and the turn fails naming the rule.
#[tokio::test]
async fn two_spawns_of_one_session_in_one_decision_are_refused() {
    let worker = Scripted::start(|r| {
        Some(match kind(r) {
            "session.start" if !child(r) => {
                json!({"agent": {"model": "subs/offline", "retry": no_retries(), "sub_agents": [{"id": "kid"}]}})
            }
            "client.messages" if !child(r) => json!({
                "messages": [{"role": "assistant", "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "kid", "arguments": "{}"}},
                    {"id": "b", "type": "function", "function": {"name": "kid", "arguments": "{}"}}
                ]}],
                "actions": [
                    {"type": "sub_agent.spawn", "session_id": "p.kid", "agent_id": "kid", "tool_call_id": "a"},
                    {"type": "sub_agent.spawn", "session_id": "p.kid", "agent_id": "kid", "tool_call_id": "b"}
                ]
            }),
            _ => json!({"actions": [{"type": "done"}]}),
        })
    })
    .await;
    let s = server_with(&worker).await;
    let turn = say(&s, "p", "w", "delegate").await;
    let (end, data) = turn_end(&s, "p", &turn).await;
    assert_eq!(end, "turn.failed", "{data}");
    assert_eq!(data["code"], "decision_failed", "{data}");
    let error = data["error"].as_str().unwrap();
    assert!(error.contains("actions[1] (sub_agent.spawn): session `p.kid` is spawned twice"), "{error}");
    assert_eq!(snapshot(&s, "p.kid").await.0, StatusCode::NOT_FOUND, "no child was created");
    let (_, parent) = snapshot(&s, "p").await;
    assert!(parent["calls"].as_array().unwrap().is_empty(), "no call was left open: {parent}");
}

/// A decision that adds a sub-agent to its config may spawn it at once:
/// the spawn is checked against the config the decision sets. The child's
/// first message is the arguments of the tool call the spawn names, or
/// `{}` when no assistant message on the path has that call.
#[tokio::test]
async fn a_decision_that_adds_a_sub_agent_may_spawn_it() {
    let worker = Scripted::start(|r| {
        if child(r) {
            return Some(match kind(r) {
                "client.messages" => json!({"actions": [{"type": "done", "data": asked(r)}]}),
                _ => json!({}),
            });
        }
        Some(match kind(r) {
            "session.start" => json!({"agent": {"model": "subs/offline", "retry": no_retries()}}),
            "client.messages" => json!({
                "agent": {"model": "subs/offline", "retry": no_retries(), "sub_agents": [{"id": "kid"}]},
                "messages": [calls_kid("tc1", "{\"n\": 7}")],
                "actions": [
                    {"type": "sub_agent.spawn", "session_id": "p.one", "agent_id": "kid", "tool_call_id": "tc1"},
                    {"type": "sub_agent.spawn", "session_id": "p.two", "agent_id": "kid", "tool_call_id": "free"}
                ]
            }),
            "sub_agent.finished" if r["pending_calls"] == 0 => json!({"actions": [{"type": "done"}]}),
            _ => json!({}),
        })
    })
    .await;
    let s = server_with(&worker).await;
    let turn = say(&s, "p", "w", "delegate").await;
    let (end, data) = turn_end(&s, "p", &turn).await;
    assert_eq!(end, "turn.done", "{data}");
    let first =
        |session: &str| worker.requests(session).into_iter().find(|r| kind(r) == "client.messages").map(|r| asked(&r));
    assert_eq!(first("p.one"), Some(json!("{\"n\": 7}")), "the named tool call's arguments");
    assert_eq!(first("p.two"), Some(json!("{}")), "no such tool call on the path");
}

// ---- sub-agents: reports -------------------------------------------------------

/// The parent's call waits for the try it started. A turn a client posts
/// to the child directly ends without reporting, and a retry that arrives
/// while that turn is open waits for it and then reports.
#[tokio::test]
async fn only_the_try_the_parent_waits_on_reports_to_it() {
    let worker = Scripted::start(|r| {
        if child(r) {
            let turn = r["turn_id"].as_str().unwrap_or_default();
            return Some(match (kind(r), turn) {
                ("client.messages", "spawn") => {
                    json!({"_delay_ms": 800, "actions": [{"type": "done", "data": {"error": "the first try fails"}}]})
                }
                // The client's own turn outlasts the parent's backoff: the
                // retry arrives while it is open.
                ("client.messages", "direct") => json!({"_delay_ms": 800, "actions": [{"type": "done", "data": "direct"}]}),
                ("client.messages", _) => json!({"actions": [{"type": "done", "data": format!("try {turn}")}]}),
                _ => json!({}),
            });
        }
        Some(match kind(r) {
            "session.start" => json!({"agent": {
                "model": "subs/offline", "retry": no_retries(), "sub_agents": [{"id": "kid"}]
            }}),
            "client.messages" => json!({
                "messages": [calls_kid("tc1", "{}")],
                "actions": [{
                    "type": "sub_agent.spawn", "session_id": "p.kid", "agent_id": "kid", "tool_call_id": "tc1",
                    "retry": {"timeout_secs": null, "max_retries": 1, "backoff_base_secs": 0.05, "backoff_max_secs": 0.05}
                }]
            }),
            "sub_agent.finished" => json!({"actions": [{"type": "done", "data": {"heard": {
                "ok": r["trigger"]["ok"], "result": r["trigger"]["result"], "error": r["trigger"]["error"]
            }}}]}),
            _ => json!({}),
        })
    })
    .await;
    let s = server_with(&worker).await;
    let turn = say(&s, "p", "w", "delegate").await;
    // While the first try runs, a client posts to the child: its turn
    // waits for the try.
    subs_tests::wait::eventually(Duration::from_secs(20), "the child's first try runs", || async {
        worker.triggers("p.kid").iter().any(|t| t == "client.messages")
    })
    .await;
    let body = json!({"type": "client.message", "agent_id": "kid", "turn_id": "direct",
        "message": {"role": "user", "content": "a question of my own"}});
    let (status, answer) = s.call(POST, "/v1/sessions/p.kid/input", None, Some(body)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");

    let (end, data) = turn_end(&s, "p", &turn).await;
    assert_eq!(end, "turn.done", "{data}");
    assert_eq!(
        data["data"]["heard"],
        json!({"ok": true, "result": "try spawn_2", "error": null}),
        "the retry's answer"
    );
    assert_eq!(worker.triggers("p").iter().filter(|t| *t == "sub_agent.finished").count(), 1);
    let (end, data) = turn_end(&s, "p.kid", "direct").await;
    assert_eq!((end.as_str(), &data["data"]), ("turn.done", &json!("direct")), "the client's turn ran");
    // A later client turn of the child is the client's alone.
    let later = say(&s, "p.kid", "kid", "and another").await;
    assert_eq!(turn_end(&s, "p.kid", &later).await.0, "turn.done");
    subs_tests::wait::steadily(Duration::from_millis(200), "the parent heard once", || async {
        worker.triggers("p").iter().filter(|t| *t == "sub_agent.finished").count() == 1
    })
    .await;
}

/// A try that misses its deadline is cancelled; its end (the cancel)
/// cannot settle the retry that replaced it.
#[tokio::test]
async fn the_end_of_an_expired_try_does_not_settle_its_retry() {
    let worker = Scripted::start(|r| {
        if child(r) {
            return Some(match (kind(r), r["turn_id"].as_str().unwrap_or_default()) {
                // The first try outlasts its deadline.
                ("client.messages", "spawn") => {
                    json!({"_delay_ms": 3000, "actions": [{"type": "done", "data": "late"}]})
                }
                ("client.messages", turn) => json!({"actions": [{"type": "done", "data": format!("try {turn}")}]}),
                _ => json!({}),
            });
        }
        Some(match kind(r) {
            "session.start" => json!({"agent": {
                "model": "subs/offline", "retry": no_retries(), "sub_agents": [{"id": "kid"}]
            }}),
            "client.messages" => json!({
                "messages": [calls_kid("tc1", "{}")],
                "actions": [{
                    "type": "sub_agent.spawn", "session_id": "p.kid", "agent_id": "kid", "tool_call_id": "tc1",
                    "retry": {"timeout_secs": 1, "max_retries": 1, "backoff_base_secs": 0, "backoff_max_secs": 0}
                }]
            }),
            "sub_agent.finished" => json!({"actions": [{"type": "done", "data": {"heard": {
                "ok": r["trigger"]["ok"], "result": r["trigger"]["result"], "error": r["trigger"]["error"]
            }}}]}),
            _ => json!({}),
        })
    })
    .await;
    let s = server_with(&worker).await;
    let turn = say(&s, "p", "w", "delegate").await;
    let (end, data) = turn_end(&s, "p", &turn).await;
    assert_eq!(end, "turn.done", "{data}");
    assert_eq!(
        data["data"]["heard"],
        json!({"ok": true, "result": "try spawn_2", "error": null}),
        "the retry's answer"
    );
}

// ---- messages re-sent under their ids ------------------------------------------

/// A worker that answers every request with its proposal: the offline
/// model echoes the user.
async fn echo_server() -> TestServer {
    let worker = Scripted::start(|r| Some(r["proposed"].clone())).await;
    let s = server_with(&worker).await;
    // The worker serves as long as the server runs.
    std::mem::forget(worker);
    s
}

async fn post_view(s: &TestServer, turn: &str, messages: Value) -> (StatusCode, Value) {
    let body = json!({"type": "client.messages", "agent_id": "w", "turn_id": turn, "messages": messages});
    s.call(POST, "/v1/sessions/chat/input", None, Some(body)).await
}

/// `client.messages`: a message re-sent under its id with other content
/// is refused with a conflict naming the id, and nothing is stored; the
/// same message re-sent unchanged (the assistant's as the client keeps
/// it) is shared, and new ones append.
#[tokio::test]
async fn client_messages_refuse_an_edited_message_under_its_old_id() {
    let s = echo_server().await;
    let (status, body) = post_view(&s, "t1", json!([{"id": "m1", "role": "user", "content": "hello"}])).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(turn_end(&s, "chat", "t1").await.0, "turn.done");
    let (_, view) = snapshot(&s, "chat").await;
    let reply = view["messages"][1].clone();
    assert_eq!(reply["role"], "assistant", "{view}");

    // Unchanged (the user's text as one text part is the same text), then
    // a new message: appended.
    let shared = json!([
        {"id": "m1", "role": "user", "content": [{"type": "text", "text": "hello"}]},
        {"id": reply["id"], "role": "assistant", "content": "as my client shows it"},
        {"id": "m3", "role": "user", "content": "and more"}
    ]);
    let (status, body) = post_view(&s, "t2", shared).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(turn_end(&s, "chat", "t2").await.0, "turn.done");
    let (_, before) = snapshot(&s, "chat").await;
    assert_eq!(before["message_tree"]["nodes"].as_array().unwrap().len(), 4, "appended, no fork: {before}");

    for (edited, id) in [
        (json!([{"id": "m1", "role": "user", "content": "hello, edited"}]), "m1"),
        (
            json!([
                {"id": "m1", "role": "user", "content": "hello"},
                {"id": reply["id"], "role": "assistant", "content": "x"},
                {"id": "m3", "role": "user", "content": "and less"},
                {"id": "m4", "role": "user", "content": "new"}
            ]),
            "m3",
        ),
        (json!([{"id": "m1", "role": "system", "content": "hello"}]), "m1"),
    ] {
        let (status, body) = post_view(&s, "t3", edited).await;
        assert_eq!((status, &body["code"]), (StatusCode::CONFLICT, &json!("conflict")), "{body}");
        let message = body["error"].as_str().unwrap();
        assert!(message.contains(&format!("message `{id}` is stored with other content")), "{message}");
        assert!(message.contains("new id"), "{message}");
    }
    let (_, after) = snapshot(&s, "chat").await;
    assert_eq!(after["message_tree"], before["message_tree"], "nothing stored");
    assert_eq!((&after["status"], &after["turn_id"]), (&json!("idle"), &Value::Null), "no turn started: {after}");
}

/// AG-UI: the same rule, with the same error, before the run starts.
#[tokio::test]
async fn ag_ui_refuses_an_edited_message_under_its_old_id() {
    let s = echo_server().await;
    let run = |run: &str, text: &str| json!({"threadId": "thread", "runId": run, "messages": [{"id": "u1", "role": "user", "content": text}]});
    let post = |body: Value| {
        s.request(POST, "/v1/agents/w/ag-ui", None)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let response = post(run("r1", "hi")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let events = tokio::time::timeout(Duration::from_secs(30), subs_tests::server::read_sse(response, &mut |_| false))
        .await
        .expect("the run ends");
    assert_eq!(events.last().map(|e| &e.data["type"]), Some(&json!("RUN_FINISHED")), "{events:?}");

    let response = post(run("r2", "hi, edited")).await.unwrap();
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(body["code"], "conflict", "{body}");
    assert!(body["error"].as_str().unwrap().contains("message `u1` is stored with other content"), "{body}");
    let (_, view) = snapshot(&s, "thread").await;
    assert_eq!(view["message_tree"]["nodes"].as_array().unwrap().len(), 2, "nothing stored: {view}");
}

// ---- budgets over the tree -------------------------------------------------------

/// A session's budget covers its sub-agents: the child gets what the
/// parent has left as its budget, and what the child spent counts against
/// the parent's. Here the child's worker states a cost past the parent's
/// budget: its next engine-run call is refused, and so is the parent's.
#[tokio::test]
async fn a_sessions_budget_covers_what_its_sub_agents_spend() {
    let worker = Scripted::start(|r| {
        let trigger = &r["trigger"];
        if child(r) {
            return Some(match kind(r) {
                // The child's model runs on its worker and costs $0.02.
                "client.messages" => json!({"actions": [{"type": "llm.call", "handler": "worker"}]}),
                "llm.execute" => json!({"actions": [{"type": "llm.result", "response":
                    {"model": "m", "content": "expensive", "finish_reason": "stop", "cost": "0.02"}}]}),
                // Then an engine-run call, which the budget refuses.
                "llm.finished" if trigger["message"]["content"] == "expensive" => {
                    json!({"actions": [{"type": "llm.call"}]})
                }
                "llm.finished" => json!({"actions": [{"type": "done", "data": {
                    "error": trigger["error"].as_str().unwrap_or("answered"), "code": trigger["code"]
                }}]}),
                _ => json!({}),
            });
        }
        Some(match kind(r) {
            "session.start" => json!({"agent": {
                "model": "subs/offline", "retry": no_retries(), "sub_agents": [{"id": "kid"}]
            }}),
            "client.messages" if asked(r) == "hello" => json!({"actions": [{"type": "done"}]}),
            "client.messages" => json!({
                "messages": [calls_kid("tc1", "{}")],
                "actions": [{"type": "sub_agent.spawn", "session_id": "p.kid", "agent_id": "kid", "tool_call_id": "tc1"}]
            }),
            // The parent's own engine-run call after the child.
            "sub_agent.finished" => json!({"actions": [{"type": "llm.call"}]}),
            "llm.finished" => json!({"actions": [{"type": "done", "data": {
                "ok": trigger["ok"], "code": trigger["code"], "message": trigger["error"]
            }}]}),
            _ => json!({}),
        })
    })
    .await;
    let s = server_with(&worker).await;
    let turn = say(&s, "p", "w", "hello").await;
    assert_eq!(turn_end(&s, "p", &turn).await.0, "turn.done");
    let (status, body) = s.call(PUT, "/v1/sessions/p/budget", None, Some(json!({"budget": "0.01"}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let turn = say(&s, "p", "w", "delegate").await;
    let (end, data) = turn_end(&s, "p", &turn).await;
    assert_eq!(end, "turn.done", "{data}");

    // The child was given what the parent had left, and held to it.
    let (_, kid) = snapshot(&s, "p.kid").await;
    assert_eq!(kid["budget"], "0.01", "{kid}");
    let finished = worker.requests("p.kid").into_iter().filter(|r| kind(r) == "llm.finished").nth(1).expect("refused");
    assert_eq!(finished["trigger"]["ok"], false, "{finished}");
    assert_eq!(finished["trigger"]["code"], "budget_exceeded", "{finished}");
    let error = finished["trigger"]["error"].as_str().unwrap();
    assert!(error.contains("budget of $0.01 is spent"), "{error}");

    // The parent heard of the failure, and its own call counts the child's
    // spend against its budget.
    let heard = worker.requests("p").into_iter().find(|r| kind(r) == "sub_agent.finished").expect("the report");
    assert_eq!(heard["trigger"]["ok"], false, "{heard}");
    assert_eq!((&data["data"]["ok"], &data["data"]["code"]), (&json!(false), &json!("budget_exceeded")), "{data}");
    let message = data["data"]["message"].as_str().unwrap();
    assert!(message.contains("the session's budget of $0.01 is spent ($0.02 used)"), "{message}");
}
