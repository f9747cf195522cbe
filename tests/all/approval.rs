//! Approval-gated tools and delegation as the Rust SDK writes them, over
//! the real API: an "approver" agent built from `subs_sdk::ToolRouter`
//! (a `lookup_order` tool, a `refund` tool that needs a person's approval
//! and counts refunds in the session state, a `summarizer` sub-agent)
//! served as an HTTP worker, the built-in offline model, a server on
//! `127.0.0.1:0`. See docs/loop.md ("Approval by denial").

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use subs_sdk::prelude::*;
use subs_tests::server::TestServer;

/// The session state: refunds made so far.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Refunds {
    refunds: u32,
}

#[derive(Deserialize)]
struct Order {
    order_id: String,
}

#[derive(Deserialize)]
struct Refund {
    order_id: String,
    amount: u32,
}

/// The approver agent: `refund` runs only once a person approves it, and
/// `runs` counts how often its body ran, to prove a denied one never did.
struct Approver {
    router: ToolRouter,
}

impl Approver {
    fn new(runs: Arc<AtomicUsize>) -> Self {
        let router = ToolRouter::new()
            .tool(AgentTool::new("lookup_order").input(order_schema(false)), |o: Order| {
                Ok::<_, String>(json!({ "order_id": o.order_id, "status": "shipped" }))
            })
            .tool_with_context(
                AgentTool::new("refund").input(order_schema(true)),
                move |r: Refund, cx: &mut ToolContext<Refunds>| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    cx.state.refunds += 1;
                    cx.info(format!("refunded {} on {}", r.amount, r.order_id));
                    Ok::<_, String>(json!({ "refunded": r.amount, "refunds": cx.state.refunds }))
                },
            )
            .needs_approval()
            .sub_agent("summarizer", "Summarizes a text");
        Self { router }
    }
}

impl Agent for Approver {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        match &request.trigger {
            Trigger::SessionStart => {
                let model = request.proposed.agent.as_ref().map_or("subs/offline", |a| a.model.as_str());
                let config = self.router.configure(AgentConfig::new(model));
                Ok(request.proposed.clone().with_agent(config))
            }
            Trigger::ClientMessages(m) => {
                let text = m.messages.last().and_then(|m| m.content.as_ref()).map(|c| c.text()).unwrap_or_default();
                match text.strip_prefix("summarize: ") {
                    Some(input) => {
                        Ok(request.proposed.clone().replace_actions([]).delegate(&request, "summarizer", input))
                    }
                    None => Ok(self.router.handle(&request, cx)),
                }
            }
            _ => Ok(self.router.handle(&request, cx)),
        }
    }
}

fn order_schema(amount: bool) -> Value {
    let mut schema = json!({
        "type": "object",
        "properties": { "order_id": { "type": "string" } },
        "required": ["order_id"],
    });
    if amount {
        schema["properties"]["amount"] = json!({ "type": "integer", "minimum": 1 });
        schema["required"] = json!(["order_id", "amount"]);
    }
    schema
}

/// A chat agent that takes every proposal: the summarizer.
pub(crate) struct Passthrough;
impl Agent for Passthrough {}

/// A server with the approver as `approver` and a passthrough agent as
/// `summarizer`, both HTTP workers from this process; the counter of
/// refund bodies run.
async fn server() -> (TestServer, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let approver = subs_tests::serve_loopback(subs_http_worker::router(Approver::new(runs.clone()))).await;
    let summarizer = subs_tests::serve_loopback(subs_http_worker::router(Passthrough)).await;
    let s = TestServer::start(&[]).await;
    for (agent, addr) in [("approver", approver), ("summarizer", summarizer)] {
        let body = json!({ "url": format!("http://{addr}/") });
        let (status, body) = s.call(Method::PUT, &format!("/v1/agents/{agent}"), None, Some(body)).await;
        assert!(status.is_success(), "{status}: {body}");
    }
    (s, runs)
}

pub(crate) async fn say(s: &TestServer, session: &str, text: &str) -> String {
    let (status, body) = s.say(session, "approver", text, None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["turn_id"].as_str().unwrap().to_owned()
}

pub(crate) async fn snapshot(s: &TestServer, session: &str) -> Value {
    let (status, body) = s.call(Method::GET, &format!("/v1/sessions/{session}"), None, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// The open interrupts once `n` are open (at most 20 s).
pub(crate) async fn interrupts(s: &TestServer, session: &str, n: usize) -> Vec<Value> {
    subs_tests::wait::eventually(Duration::from_secs(20), format!("{n} interrupts open"), || async {
        let view = snapshot(s, session).await;
        let open = view["interrupts"].as_array().cloned().unwrap_or_default();
        if open.len() == n { Ok(open) } else { Err(view) }
    })
    .await
}

pub(crate) async fn resume(s: &TestServer, session: &str, interrupt_id: &Value, payload: Value) {
    let body = json!({ "type": "interrupt.resume", "interrupt_id": interrupt_id, "payload": payload });
    let (status, body) = s.call(Method::POST, &format!("/v1/sessions/{session}/input"), None, Some(body)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

/// Waits for the turn's end; asserts it is `turn.done`.
pub(crate) async fn done(s: &TestServer, session: &str, turn: &str) {
    let events = s.wait_turn(session, turn, None).await;
    let end = events.last().expect("the turn's end");
    assert_eq!(end.event, "turn.done", "{}", end.data);
}

pub(crate) fn texts(view: &Value, role: &str) -> Vec<String> {
    view["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == role)
        .map(|m| m["content"].as_str().map_or_else(|| m["content"].to_string(), str::to_owned))
        .collect()
}

#[tokio::test]
async fn an_approved_refund_runs_and_counts_in_state() {
    let (s, runs) = server().await;
    let turn = say(&s, "yes", r#"use tool refund with {"order_id": "A1", "amount": 5}"#).await;
    let open = interrupts(&s, "yes", 1).await;
    let payload = &open[0]["payload"];
    assert_eq!((&payload["tool"], &payload["arguments"]), (&json!("refund"), &json!({"order_id": "A1", "amount": 5})));
    assert_eq!(open[0]["interrupt_id"], payload["call_id"], "{payload}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing runs before the answer");

    resume(&s, "yes", &open[0]["interrupt_id"], json!({"approved": true})).await;
    done(&s, "yes", &turn).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let view = snapshot(&s, "yes").await;
    assert_eq!(texts(&view, "tool"), [r#"{"refunded":5,"refunds":1}"#], "{view}");
    assert_eq!(view["state"], json!({"refunds": 1}));

    // State carries across turns; an ungated tool asks nobody.
    let turn = say(&s, "yes", r#"use tool lookup_order with {"order_id": "A1"}"#).await;
    done(&s, "yes", &turn).await;
    let turn = say(&s, "yes", r#"use tool refund with {"order_id": "A2", "amount": 2}"#).await;
    let open = interrupts(&s, "yes", 1).await;
    resume(&s, "yes", &open[0]["interrupt_id"], json!({"approved": true})).await;
    done(&s, "yes", &turn).await;
    let view = snapshot(&s, "yes").await;
    assert_eq!(view["state"], json!({"refunds": 2}), "{view}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_denied_refund_never_runs_and_the_model_reads_why() {
    let (s, runs) = server().await;
    let turn = say(&s, "no", r#"use tool refund with {"order_id": "A1", "amount": 500}"#).await;
    let open = interrupts(&s, "no", 1).await;
    resume(&s, "no", &open[0]["interrupt_id"], json!({"approved": false, "reason": "too large"})).await;
    done(&s, "no", &turn).await;
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the refund's body never ran");
    let view = snapshot(&s, "no").await;
    assert_eq!(texts(&view, "tool"), ["denied by the approver: too large"], "{view}");
    let answer = texts(&view, "assistant").pop().unwrap();
    assert!(answer.contains("denied by the approver: too large"), "the model saw the reason: {answer}");
    assert!(view["state"].is_null(), "{view}");

    // An answer that is not an approval is refused by the approval's
    // resume schema, and the approval stays open for a proper one.
    let turn = say(&s, "no", r#"use tool refund with {"order_id": "A2", "amount": 5}"#).await;
    let open = interrupts(&s, "no", 1).await;
    assert_eq!(open[0]["resume_schema"]["required"], json!(["approved"]), "{}", open[0]);
    for wrong in [json!("sure"), json!({"aproved": true})] {
        let body = json!({ "type": "interrupt.resume", "interrupt_id": open[0]["interrupt_id"], "payload": wrong });
        let (status, body) = s.call(Method::POST, "/v1/sessions/no/input", None, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    }
    assert_eq!(interrupts(&s, "no", 1).await, open);
    resume(&s, "no", &open[0]["interrupt_id"], json!({"approved": false})).await;
    done(&s, "no", &turn).await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let view = snapshot(&s, "no").await;
    assert_eq!(texts(&view, "tool").last().unwrap(), "denied by the approver");
}

#[tokio::test]
async fn two_gated_calls_in_one_reply_are_answered_one_by_one() {
    let (s, runs) = server().await;
    let turn = say(
        &s,
        "two",
        r#"use tool refund with {"order_id": "A1", "amount": 5} and use tool refund with {"order_id": "B2", "amount": 7}"#,
    )
    .await;
    let open = interrupts(&s, "two", 2).await;
    let order = |i: &Value| i["payload"]["arguments"]["order_id"].as_str().unwrap().to_owned();
    let (a1, b2) = if order(&open[0]) == "A1" { (&open[0], &open[1]) } else { (&open[1], &open[0]) };
    assert_ne!(a1["interrupt_id"], b2["interrupt_id"]);

    // B2 is denied while A1's approval holds both calls: its denial waits
    // in the state until B2's execution, which it settles unrun.
    resume(&s, "two", &b2["interrupt_id"], json!({"approved": false, "reason": "not B2"})).await;
    let left = interrupts(&s, "two", 1).await;
    assert_eq!(left[0]["interrupt_id"], a1["interrupt_id"], "the other stays open");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing runs while an approval is open");
    resume(&s, "two", &a1["interrupt_id"], json!({"approved": true})).await;
    done(&s, "two", &turn).await;

    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the approved refund ran");
    let view = snapshot(&s, "two").await;
    let mut tool = texts(&view, "tool");
    tool.sort();
    assert_eq!(tool, ["denied by the approver: not B2", r#"{"refunded":5,"refunds":1}"#], "{view}");
    assert_eq!(view["state"], json!({"refunds": 1}));
}

#[tokio::test]
async fn delegation_gives_the_child_the_input_and_returns_its_reply() {
    let (s, _) = server().await;
    delegates_both_ways(&s).await;
}

/// The `approver` of `s` hands `summarize: <text>` to `summarizer` (the
/// child's first message is the text, its reply the call's result) and the
/// model may call `summarizer` as a tool: the same checks for the agent in
/// each language.
pub(crate) async fn delegates_both_ways(s: &TestServer) {
    // Delegated by the agent's code: the child's first message is the input.
    let turn = say(s, "d", "summarize: the order shipped on Monday").await;
    done(s, "d", &turn).await;
    let view = snapshot(s, "d").await;
    let call = view["messages"].as_array().unwrap().iter().find(|m| m["tool_calls"].is_array()).expect("the call");
    assert_eq!(call["tool_calls"][0]["function"]["name"], "summarizer", "{view}");
    assert_eq!(call["tool_calls"][0]["function"]["arguments"], "the order shipped on Monday");
    let tool = texts(&view, "tool");
    assert_eq!(tool.len(), 1, "{view}");
    assert!(tool[0].contains("You said: the order shipped on Monday"), "the child's reply: {}", tool[0]);

    // Called by the model, as a tool.
    let turn = say(s, "m", r#"use tool summarizer with {"prompt": "two boxes"}"#).await;
    done(s, "m", &turn).await;
    let view = snapshot(s, "m").await;
    let tool = texts(&view, "tool");
    assert!(tool.len() == 1 && tool[0].contains("two boxes"), "{view}");
}

/// The approver as a component (`tests/components/approver`): a denied
/// refund settles unrun (its body would count it in the state), an
/// approved one runs, two in one reply are answered one by one.
#[tokio::test]
async fn the_component_approver_runs_only_approved_refunds() {
    let s = TestServer::start(&[]).await;
    let (status, body) = s.upload("approver", subs_tests::guests::TEST_APPROVER, None).await;
    assert!(status.is_success(), "{status}: {body}");

    let turn = say(&s, "c", r#"use tool refund with {"order_id": "A1", "amount": 500}"#).await;
    let open = interrupts(&s, "c", 1).await;
    resume(&s, "c", &open[0]["interrupt_id"], json!({"approved": false, "reason": "too large"})).await;
    done(&s, "c", &turn).await;
    let view = snapshot(&s, "c").await;
    assert_eq!(texts(&view, "tool"), ["denied by the approver: too large"], "{view}");
    assert!(view["state"].is_null(), "the refund's body never ran: {view}");

    let turn = say(
        &s,
        "c",
        r#"use tool refund with {"order_id": "A1", "amount": 5} and use tool refund with {"order_id": "B2", "amount": 7}"#,
    )
    .await;
    let open = interrupts(&s, "c", 2).await;
    for interrupt in &open {
        let approved = interrupt["payload"]["arguments"]["order_id"] == "A1";
        resume(&s, "c", &interrupt["interrupt_id"], json!({"approved": approved})).await;
    }
    done(&s, "c", &turn).await;
    let view = snapshot(&s, "c").await;
    assert_eq!(view["state"], json!({"refunds": 1}), "only the approved refund ran: {view}");
    let tool = texts(&view, "tool");
    assert_eq!(tool[1..], ["denied by the approver", r#"{"refunded":5,"refunds":1}"#], "{view}");
}
