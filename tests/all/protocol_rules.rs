//! The protocol's rules about interrupts, calls and sub-agents, over the
//! real API: a server on `127.0.0.1:0`, HTTP workers scripted per trigger
//! (in-test servers) and the `scenario` component, a redb file
//! underneath. See docs/loop.md ("Interrupts", "Calls").

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use subs_tests::guests;
use subs_tests::server::TestServer;
use subs_tests::wait::{eventually, steadily};

use crate::scripted::{Scripted, kind};

const GET: Method = Method::GET;
const POST: Method = Method::POST;
const PUT: Method = Method::PUT;

/// A config with a fast retry policy for deliveries and the tools `add`
/// (worker) and `ask` (client).
fn config() -> Value {
    json!({"agent": {
        "model": "subs/offline",
        "retry": {"timeout_secs": 20, "max_retries": 0, "backoff_base_secs": 0.01, "backoff_max_secs": 0.01},
        "tools": [
            {"name": "add", "input": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}},
            {"name": "ask", "handler": "client", "input": {"type": "object"}}
        ]
    }})
}

fn add(id: &str, a: i64, b: i64) -> Value {
    json!({"type": "tool.call", "id": id, "name": "add", "arguments": {"a": a, "b": b}})
}

/// Answers a `tool.execute` of `add` with the sum.
fn execute_add(request: &Value) -> Value {
    let args: Value = serde_json::from_str(request["trigger"]["arguments"].as_str().unwrap()).unwrap();
    let sum = args["a"].as_i64().unwrap() + args["b"].as_i64().unwrap();
    json!({"actions": [{"type": "tool.result", "result": {"sum": sum}}]})
}

async fn server_with(worker: &Scripted) -> TestServer {
    let s = TestServer::start(&[]).await;
    let (status, body) = s.call(PUT, "/v1/agents/w", None, Some(json!({"url": worker.url}))).await;
    assert!(status.is_success(), "{status}: {body}");
    s
}

async fn say(s: &TestServer, session: &str, agent: &str, text: &str) -> String {
    let (status, body) = s.say(session, agent, text, None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["turn_id"].as_str().unwrap().to_owned()
}

async fn input(s: &TestServer, session: &str, body: Value) -> (StatusCode, Value) {
    s.call(POST, &format!("/v1/sessions/{session}/input"), None, Some(body)).await
}

async fn resume(s: &TestServer, session: &str, id: &str, payload: Value) -> StatusCode {
    input(s, session, json!({"type": "interrupt.resume", "interrupt_id": id, "payload": payload})).await.0
}

async fn snapshot(s: &TestServer, session: &str) -> Value {
    let (status, body) = s.call(GET, &format!("/v1/sessions/{session}"), None, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// The snapshot once `ready` holds (at most 20 s).
async fn until(s: &TestServer, session: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    eventually(Duration::from_secs(20), what, || async {
        let view = snapshot(s, session).await;
        if ready(&view) { Ok(view) } else { Err(view) }
    })
    .await
}

/// Checks for `window` that `session`'s calls stay `calls` and its agent
/// heard `triggers` only.
async fn held(
    s: &TestServer,
    worker: &Scripted,
    session: &str,
    window_ms: u64,
    triggers: &[&str],
    calls: &[(String, String)],
) {
    steadily(Duration::from_millis(window_ms), "nothing runs while held", || async {
        let (heard, view) = (worker.triggers(session), snapshot(s, session).await);
        if heard == triggers && statuses(&view) == calls { Ok(()) } else { Err(format!("{heard:?}: {view}")) }
    })
    .await;
}

/// The statuses of the snapshot's calls, by id.
fn statuses(view: &Value) -> Vec<(String, String)> {
    view["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["id"].as_str().unwrap().to_owned(), c["status"].as_str().unwrap().to_owned()))
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

/// The turn's end event: its name and data.
async fn turn_end(s: &TestServer, session: &str, turn: &str) -> (String, Value) {
    let events = s.wait_turn(session, turn, None).await;
    let end = events.last().expect("the turn's end");
    (end.event.clone(), end.data.clone())
}

// ---- interrupts ------------------------------------------------------------

#[tokio::test]
async fn a_call_made_with_an_interrupt_waits_queued_until_the_resume() {
    let worker = Scripted::start(|r| {
        Some(match kind(r) {
            "session.start" => config(),
            // The call comes before the interrupt in the decision: it is
            // held all the same.
            "client.messages" => json!({"actions": [
                add("c1", 1, 2),
                {"type": "interrupt", "interrupt_id": "approve", "reason": "may I add?"}
            ]}),
            "tool.execute" => execute_add(r),
            "tool.finished" => json!({"actions": [{"type": "done", "data": {"sum": r["trigger"]["result"]}}]}),
            _ => json!({}),
        })
    })
    .await;
    let s = server_with(&worker).await;
    let turn = say(&s, "hold", "w", "add please").await;
    let view = until(&s, "hold", "the interrupt opens", |v| !v["interrupts"].as_array().unwrap().is_empty()).await;
    assert_eq!(view["status"], "waiting");
    assert_eq!(statuses(&view), pairs(&[("c1", "queued")]));
    assert!(view["calls"][0].get("deadline").is_none(), "a queued call has not started: {view}");

    // Nothing runs while the interrupt is open.
    held(&s, &worker, "hold", 400, &["session.start", "client.messages"], &pairs(&[("c1", "queued")])).await;

    assert_eq!(resume(&s, "hold", "approve", json!("yes")).await, StatusCode::ACCEPTED);
    let (end, data) = turn_end(&s, "hold", &turn).await;
    assert_eq!((end.as_str(), &data["data"]), ("turn.done", &json!({"sum": r#"{"sum":3}"#})));
    assert_eq!(
        worker.triggers("hold"),
        ["session.start", "client.messages", "interrupt.resumed", "tool.execute", "tool.finished"]
    );
    // The resume released the call (its `tool.execute` follows the
    // resumed decision); once it ran it had a deadline, and the decision
    // after it saw it completed.
    let resumed = worker.first("hold", "interrupt.resumed");
    assert_eq!(resumed["calls"][0]["status"], "pending");
    assert_eq!(resumed["trigger"]["payload"], "yes");
    let execute = worker.first("hold", "tool.execute");
    assert!(execute["trigger"]["deadline"].is_string(), "{execute}");
    let finished = worker.first("hold", "tool.finished");
    assert_eq!(finished["calls"][0]["status"], "completed");
    assert_eq!(finished["pending_calls"], 0);
    // The turn is over: no call is listed any more.
    assert_eq!(statuses(&snapshot(&s, "hold").await), []);
}

#[tokio::test]
async fn a_component_that_holds_a_call_behind_an_interrupt() {
    let s = TestServer::start(&[]).await;
    assert_eq!(s.upload("scenario", guests::TEST_SCENARIO, None).await.0, StatusCode::CREATED);
    let turn = say(&s, "c", "scenario", "hold 2 and 3").await;
    let view = until(&s, "c", "the interrupt opens", |v| !v["interrupts"].as_array().unwrap().is_empty()).await;
    assert_eq!(view["status"], "waiting");
    let calls = statuses(&view);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].1, "queued");
    steadily(Duration::from_millis(300), "still queued, no tool ran", || async {
        let view = snapshot(&s, "c").await;
        if statuses(&view) == calls && view["messages"].as_array().unwrap().len() == 1 { Ok(()) } else { Err(view) }
    })
    .await;

    assert_eq!(resume(&s, "c", "hold", Value::Null).await, StatusCode::ACCEPTED);
    let (end, _) = turn_end(&s, "c", &turn).await;
    assert_eq!(end, "turn.done");
    let messages = snapshot(&s, "c").await["messages"].clone();
    let tool = messages.as_array().unwrap().iter().find(|m| m["role"] == "tool").expect("the tool ran");
    assert_eq!(tool["content"], r#"{"sum":5.0}"#);
}

#[tokio::test]
async fn a_call_in_flight_settles_while_paused_and_its_trigger_waits_for_the_resume() {
    let worker = Scripted::start(|r| {
        Some(match kind(r) {
            "session.start" => config(),
            // A client call and a worker call; running the worker call
            // opens an interrupt while the client call is in flight.
            "client.messages" => json!({"actions": [
                {"type": "tool.call", "id": "q", "name": "ask", "arguments": {}},
                add("w1", 2, 2)
            ]}),
            "tool.execute" => json!({"actions": [
                {"type": "tool.result", "result": {"sum": 4}},
                {"type": "interrupt", "interrupt_id": "pause", "reason": "wait"}
            ]}),
            "tool.finished" if r["trigger"]["id"] == "q" => json!({"actions": [{"type": "done"}]}),
            _ => json!({}),
        })
    })
    .await;
    let s = server_with(&worker).await;
    let turn = say(&s, "fly", "w", "go").await;
    let view = until(&s, "fly", "the interrupt opens", |v| !v["interrupts"].as_array().unwrap().is_empty()).await;
    assert_eq!(statuses(&view), pairs(&[("q", "pending"), ("w1", "completed")]));

    // The client's result is stored at once; the agent hears of neither
    // call until the resume.
    let (status, body) = input(&s, "fly", json!({"type": "tool.result", "id": "q", "result": "yes"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let view =
        until(&s, "fly", "the client call settles", |v| statuses(v).contains(&("q".into(), "completed".into()))).await;
    assert_eq!(view["status"], "waiting");
    let calls = statuses(&view);
    held(&s, &worker, "fly", 300, &["session.start", "client.messages", "tool.execute"], &calls).await;

    assert_eq!(resume(&s, "fly", "pause", json!(1)).await, StatusCode::ACCEPTED);
    let (end, _) = turn_end(&s, "fly", &turn).await;
    assert_eq!(end, "turn.done");
    // The resume first, then the held results in the order they settled.
    let triggers = worker.triggers("fly");
    assert_eq!(triggers[3..], ["interrupt.resumed", "tool.finished", "tool.finished"]);
    let finished: Vec<Value> = worker
        .requests("fly")
        .into_iter()
        .filter(|r| kind(r) == "tool.finished")
        .map(|r| r["trigger"]["id"].clone())
        .collect();
    assert_eq!(finished, [json!("w1"), json!("q")]);
}

#[tokio::test]
async fn two_open_interrupts_need_two_resumes() {
    let worker = Scripted::start(|r| {
        Some(match kind(r) {
            "session.start" => config(),
            "client.messages" => json!({"actions": [
                {"type": "interrupt", "interrupt_id": "a", "reason": "first"},
                {"type": "interrupt", "interrupt_id": "b", "reason": "second"},
                add("c1", 5, 5)
            ]}),
            "tool.execute" => execute_add(r),
            "tool.finished" => json!({"actions": [{"type": "done"}]}),
            _ => json!({}),
        })
    })
    .await;
    let s = server_with(&worker).await;
    let turn = say(&s, "two", "w", "go").await;
    until(&s, "two", "both interrupts open", |v| v["interrupts"].as_array().unwrap().len() == 2).await;

    // One resume: its trigger is delivered at once, the call stays held.
    assert_eq!(resume(&s, "two", "a", json!("A")).await, StatusCode::ACCEPTED);
    until(&s, "two", "the first resume is delivered", |_| worker.triggers("two").len() == 3).await;
    steadily(Duration::from_millis(300), "the call stays held", || async {
        let view = snapshot(&s, "two").await;
        let held = (view["status"].as_str(), statuses(&view)) == (Some("waiting"), pairs(&[("c1", "queued")]));
        let heard = worker.triggers("two");
        if held && heard.len() == 3 && heard[2] == "interrupt.resumed" {
            Ok(())
        } else {
            Err(format!("{heard:?}: {view}"))
        }
    })
    .await;
    assert_eq!(resume(&s, "two", "a", json!("again")).await, StatusCode::CONFLICT, "already resumed");

    // The second resume releases the call.
    assert_eq!(resume(&s, "two", "b", json!("B")).await, StatusCode::ACCEPTED);
    assert_eq!(turn_end(&s, "two", &turn).await.0, "turn.done");
    assert_eq!(
        worker.triggers("two"),
        ["session.start", "client.messages", "interrupt.resumed", "interrupt.resumed", "tool.execute", "tool.finished"]
    );
}

#[tokio::test]
async fn an_interrupt_with_done_is_refused_and_a_cancel_closes_open_interrupts() {
    let worker = Scripted::start(|r| {
        let text = r["trigger"]["messages"].as_array().and_then(|m| m.last()).map(|m| m["content"].clone());
        Some(match kind(r) {
            "session.start" => config(),
            "client.messages" if text == Some(json!("both")) => json!({"actions": [
                {"type": "interrupt", "reason": "ask"},
                {"type": "done"}
            ]}),
            "client.messages" => json!({"actions": [{"type": "interrupt", "interrupt_id": "i", "reason": "ask"}]}),
            _ => json!({}),
        })
    })
    .await;
    let s = server_with(&worker).await;
    let turn = say(&s, "r", "w", "both").await;
    let (end, data) = turn_end(&s, "r", &turn).await;
    assert_eq!(end, "turn.failed");
    assert_eq!(data["code"], "decision_failed");
    let error = data["error"].as_str().unwrap();
    assert!(error.contains("actions[1] (done)") && error.contains("opens an interrupt"), "{error}");
    assert!(snapshot(&s, "r").await["interrupts"].as_array().unwrap().is_empty());

    // An open interrupt is closed by a cancel; resuming it then conflicts.
    let turn = say(&s, "r", "w", "pause").await;
    until(&s, "r", "the interrupt opens", |v| !v["interrupts"].as_array().unwrap().is_empty()).await;
    let (status, body) = s.call(POST, "/v1/sessions/r/cancel", None, None).await;
    assert_eq!((status, &body["cancelled"]), (StatusCode::OK, &json!(true)));
    assert_eq!(turn_end(&s, "r", &turn).await.1["code"], "cancelled");
    let view = snapshot(&s, "r").await;
    assert_eq!((view["status"].as_str(), view["interrupts"].as_array().unwrap().len()), (Some("idle"), 0));
    assert_eq!(resume(&s, "r", "i", Value::Null).await, StatusCode::CONFLICT);
}

// ---- calls -------------------------------------------------------------------

/// A worker that calls its `add` tool (call `slow`, under `retry`) and
/// never answers the `tool.execute`; at `tool.finished` it ends the turn
/// with the try's `ok` and, as `seen`, its error.
async fn never_answering(retry: Value) -> Scripted {
    Scripted::start(move |r| match kind(r) {
        "session.start" => Some(config()),
        "client.messages" => Some(json!({"actions": [{
            "type": "tool.call", "id": "slow", "name": "add", "arguments": {"a": 1, "b": 1}, "retry": retry
        }]})),
        "tool.execute" => None,
        "tool.finished" => Some(json!({"actions": [{"type": "done", "data": {
            "ok": r["trigger"]["ok"], "seen": r["trigger"]["error"]
        }}]})),
        _ => Some(json!({})),
    })
    .await
}

#[tokio::test]
async fn a_worker_tool_that_never_answers_fails_at_its_deadline_and_is_retried() {
    let worker = never_answering(
        json!({"timeout_secs": 0.4, "max_retries": 1, "backoff_base_secs": 0.05, "backoff_max_secs": 0.05}),
    )
    .await;
    let s = server_with(&worker).await;
    let turn = say(&s, "late", "w", "go").await;
    let (end, data) = turn_end(&s, "late", &turn).await;
    assert_eq!(end, "turn.done", "{data}");
    assert_eq!(data["data"]["ok"], false);
    let seen = data["data"]["seen"].as_str().unwrap();
    assert!(seen.contains("`slow`") && seen.contains("deadline"), "{seen}");

    // Two tries, each told its deadline: about 0.4 s after it started.
    let executes: Vec<Value> = worker.requests("late").into_iter().filter(|r| kind(r) == "tool.execute").collect();
    let attempts: Vec<&Value> = executes.iter().map(|r| &r["trigger"]["attempt"]).collect();
    assert_eq!(attempts, [&json!(1), &json!(2)]);
    let deadlines: Vec<&str> = executes.iter().map(|r| r["trigger"]["deadline"].as_str().unwrap()).collect();
    assert_ne!(deadlines[0], deadlines[1]);
    let call = &executes[0]["calls"][0];
    assert_eq!((call["deadline"].as_str(), call["status"].as_str()), (Some(deadlines[0]), Some("pending")));
    // The stored step of the first try says how it ended.
    let finished = worker.first("late", "tool.finished");
    assert_eq!(finished["calls"][0]["status"], "failed");
}

/// A deadline that passes while its call is still being stored (a slow
/// disk, a busy host) fails the call all the same: the timer is armed for
/// a deadline already behind it, not only for those still ahead.
#[tokio::test]
async fn a_deadline_that_passes_while_its_call_is_stored_still_fails_the_call() {
    let worker = never_answering(
        json!({"timeout_secs": 0.05, "max_retries": 1, "backoff_base_secs": 0.01, "backoff_max_secs": 0.01}),
    )
    .await;
    let s = server_with(&worker).await;
    // Every commit outlasts the call's timeout, so each try's deadline has
    // passed by the time the try is stored.
    s.store.inject_fsync_delay(Duration::from_millis(200));
    let turn = say(&s, "stored-late", "w", "go").await;
    let (end, data) = turn_end(&s, "stored-late", &turn).await;
    assert_eq!((end.as_str(), &data["data"]["ok"]), ("turn.done", &json!(false)), "{data}");
    let executes = worker.requests("stored-late").into_iter().filter(|r| kind(r) == "tool.execute").count();
    assert!(executes <= 2, "one try and one retry at most: {executes}");
}

#[tokio::test]
async fn a_client_cannot_settle_a_call_the_worker_runs() {
    let worker = Scripted::start(|r| match kind(r) {
        "session.start" => Some(config()),
        "client.messages" => Some(json!({"actions": [add("w1", 1, 2)]})),
        // The worker takes its time: the call is in flight meanwhile.
        "tool.execute" => {
            let mut decision = execute_add(r);
            decision["_delay_ms"] = json!(600);
            Some(decision)
        }
        "tool.finished" => Some(json!({"actions": [{"type": "done", "data": {"result": r["trigger"]["result"]}}]})),
        _ => Some(json!({})),
    })
    .await;
    let s = server_with(&worker).await;
    let turn = say(&s, "own", "w", "go").await;
    until(&s, "own", "the call is in flight", |v| statuses(v) == pairs(&[("w1", "pending")])).await;
    let (status, body) = input(&s, "own", json!({"type": "tool.result", "id": "w1", "result": {"sum": 99}})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["error"].as_str().unwrap().contains("client tool calls"), "{body}");
    let (status, _) =
        input(&s, "own", json!({"type": "tool.error", "id": "w1", "error": "no", "retryable": false})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (end, data) = turn_end(&s, "own", &turn).await;
    assert_eq!((end.as_str(), &data["data"]["result"]), ("turn.done", &json!(r#"{"sum":3}"#)), "the worker's result");
}

#[tokio::test]
async fn a_call_waiting_for_its_retry_is_retry_scheduled() {
    let worker = Scripted::start(|r| {
        Some(match kind(r) {
            "session.start" => config(),
            "client.messages" => json!({"actions": [{
                "type": "tool.call", "id": "flaky", "name": "add", "arguments": {"a": 1, "b": 1},
                "retry": {"timeout_secs": 10, "max_retries": 1, "backoff_base_secs": 1.5, "backoff_max_secs": 1.5}
            }]}),
            "tool.execute" if r["trigger"]["attempt"] == 1 => {
                json!({"actions": [{"type": "tool.error", "error": "busy", "retryable": true}]})
            }
            "tool.execute" => execute_add(r),
            "tool.finished" => json!({"actions": [{"type": "done"}]}),
            _ => json!({}),
        })
    })
    .await;
    let s = server_with(&worker).await;
    let turn = say(&s, "flaky", "w", "go").await;
    let view =
        until(&s, "flaky", "the retry is scheduled", |v| statuses(v) == pairs(&[("flaky", "retry_scheduled")])).await;
    assert!(view["calls"][0].get("deadline").is_none(), "no try is running: {view}");
    assert_eq!(turn_end(&s, "flaky", &turn).await.0, "turn.done");
    let finished = worker.first("flaky", "tool.finished");
    assert_eq!((&finished["calls"][0]["status"], &finished["calls"][0]["attempt"]), (&json!("completed"), &json!(2)));
}

// ---- sub-agents --------------------------------------------------------------

#[tokio::test]
async fn a_failed_child_is_run_again_per_the_spawn_retry_policy() {
    let worker = Scripted::start(|r| {
        let child = r["agent_id"] == "kid";
        Some(match (child, kind(r)) {
            (false, "session.start") => json!({"agent": {
                "model": "subs/offline",
                "retry": {"timeout_secs": 20, "max_retries": 0, "backoff_base_secs": 0.01, "backoff_max_secs": 0.01},
                "sub_agents": [{"id": "kid"}]
            }}),
            (false, "client.messages") => json!({
                "messages": [{"role": "assistant", "tool_calls": [
                    {"id": "tc1", "type": "function", "function": {"name": "kid", "arguments": "{\"n\": 1}"}}
                ]}],
                "actions": [{
                    "type": "sub_agent.spawn", "session_id": "p.kid", "agent_id": "kid", "tool_call_id": "tc1",
                    "retry": {"timeout_secs": null, "max_retries": 2, "backoff_base_secs": 0.05, "backoff_max_secs": 0.05}
                }]
            }),
            (false, "sub_agent.finished") => {
                json!({"actions": [{"type": "done", "data": {"ok": r["trigger"]["ok"], "result": r["trigger"]["result"]}}]})
            }
            // The child fails its first turn and answers on its second.
            (true, "client.messages") if r["turn_id"] == "spawn" => json!({
                "messages": r["proposed"]["messages"],
                "actions": [{"type": "done", "data": {"error": "first try fails"}}]
            }),
            (true, "client.messages") => {
                let asked = r["trigger"]["messages"].as_array().unwrap().last().unwrap()["content"].clone();
                json!({
                    "messages": r["proposed"]["messages"],
                    "actions": [{"type": "done", "data": {"asked": asked, "turn": r["turn_id"]}}]
                })
            }
            _ => json!({}),
        })
    })
    .await;
    let s = server_with(&worker).await;
    assert!(s.call(PUT, "/v1/agents/kid", None, Some(json!({"url": worker.url}))).await.0.is_success());
    let turn = say(&s, "p", "w", "delegate").await;
    let (end, data) = turn_end(&s, "p", &turn).await;
    assert_eq!(end, "turn.done", "{data}");
    assert_eq!(data["data"]["ok"], true);
    let result: Value = serde_json::from_str(data["data"]["result"].as_str().unwrap()).unwrap();
    assert_eq!(result, json!({"asked": "{\"n\": 1}", "turn": "spawn_2"}));
    // The parent heard of the child once, after the retry; the child ran
    // two turns, each from the same first message.
    assert_eq!(worker.triggers("p").iter().filter(|t| *t == "sub_agent.finished").count(), 1);
    assert_eq!(worker.triggers("p.kid").iter().filter(|t| *t == "client.messages").count(), 2);
    let child = snapshot(&s, "p.kid").await;
    assert_eq!(child["messages"].as_array().unwrap().len(), 1, "the retry's branch: {child}");
    assert_eq!(child["message_tree"]["nodes"].as_array().map_or(0, Vec::len), 2, "both tries' messages: {child}");
}
