//! The approver agent written with the JavaScript SDK (`tests/js/approver_agent.js`,
//! a componentize-js component) over the real API: `refund` needs a
//! person's approval and counts refunds in the session state, `summarizer`
//! (a passthrough HTTP worker from this process) is a sub-agent the agent
//! delegates to and the model may call as a tool. The built-in offline
//! model, a server on `127.0.0.1:0`.

use reqwest::Method;
use serde_json::json;
use subs_tests::server::TestServer;

use crate::approval::{Passthrough, delegates_both_ways, done, interrupts, resume, say, snapshot, texts};

/// A server with the JavaScript approver uploaded as `approver` and a
/// passthrough worker as `summarizer`.
async fn server() -> TestServer {
    let s = TestServer::start(&[]).await;
    let (status, body) = s.upload("approver", subs_tests::guests::TEST_JS_APPROVER, None).await;
    assert!(status.is_success(), "{status}: {body}");
    let summarizer = subs_tests::serve_loopback(subs_http_worker::router(Passthrough)).await;
    let body = json!({ "url": format!("http://{summarizer}/") });
    let (status, body) = s.call(Method::PUT, "/v1/agents/summarizer", None, Some(body)).await;
    assert!(status.is_success(), "{status}: {body}");
    s
}

#[tokio::test]
async fn the_js_approver_runs_an_approved_refund_and_keeps_count_across_turns() {
    let s = server().await;
    let turn = say(&s, "yes", r#"use tool refund with {"order_id": "A1", "amount": 5}"#).await;
    let open = interrupts(&s, "yes", 1).await;
    let payload = &open[0]["payload"];
    assert_eq!((&payload["tool"], &payload["arguments"]), (&json!("refund"), &json!({"order_id": "A1", "amount": 5})));
    assert_eq!(open[0]["interrupt_id"], payload["call_id"], "{payload}");
    assert_eq!(open[0]["resume_schema"]["required"], json!(["approved"]), "{}", open[0]);
    assert!(snapshot(&s, "yes").await["state"].is_null(), "nothing runs before the answer");

    resume(&s, "yes", &open[0]["interrupt_id"], json!({"approved": true})).await;
    done(&s, "yes", &turn).await;
    let view = snapshot(&s, "yes").await;
    assert_eq!(texts(&view, "tool"), [r#"{"refunded":5,"refunds":1}"#], "{view}");
    assert_eq!(view["state"], json!({"refunds": 1}));

    // An ungated tool asks nobody; the count carries to the next refund.
    let turn = say(&s, "yes", r#"use tool lookup_order with {"order_id": "A1"}"#).await;
    done(&s, "yes", &turn).await;
    let turn = say(&s, "yes", r#"use tool refund with {"order_id": "A2", "amount": 2}"#).await;
    let open = interrupts(&s, "yes", 1).await;
    resume(&s, "yes", &open[0]["interrupt_id"], json!({"approved": true})).await;
    done(&s, "yes", &turn).await;
    let view = snapshot(&s, "yes").await;
    assert_eq!(texts(&view, "tool")[1..], [r#"{"order_id":"A1","status":"shipped"}"#, r#"{"refunded":2,"refunds":2}"#]);
    assert_eq!(view["state"], json!({"refunds": 2}), "{view}");
}

#[tokio::test]
async fn the_js_approver_never_runs_a_denied_refund_and_the_model_reads_why() {
    let s = server().await;
    let turn = say(&s, "no", r#"use tool refund with {"order_id": "A1", "amount": 500}"#).await;
    let open = interrupts(&s, "no", 1).await;
    resume(&s, "no", &open[0]["interrupt_id"], json!({"approved": false, "reason": "too large"})).await;
    done(&s, "no", &turn).await;
    let view = snapshot(&s, "no").await;
    assert_eq!(texts(&view, "tool"), ["denied by the approver: too large"], "{view}");
    let answer = texts(&view, "assistant").pop().unwrap();
    assert!(answer.contains("denied by the approver: too large"), "the model saw the reason: {answer}");
    assert!(view["state"].is_null(), "the refund's body never ran (it counts in the state): {view}");

    // Two in one reply, each answered on its own: only the approved one runs.
    let turn = say(
        &s,
        "no",
        r#"use tool refund with {"order_id": "A1", "amount": 5} and use tool refund with {"order_id": "B2", "amount": 7}"#,
    )
    .await;
    let open = interrupts(&s, "no", 2).await;
    assert_ne!(open[0]["interrupt_id"], open[1]["interrupt_id"]);
    for interrupt in &open {
        let approved = interrupt["payload"]["arguments"]["order_id"] == "A1";
        resume(&s, "no", &interrupt["interrupt_id"], json!({"approved": approved})).await;
    }
    done(&s, "no", &turn).await;
    let view = snapshot(&s, "no").await;
    assert_eq!(view["state"], json!({"refunds": 1}), "only the approved refund ran: {view}");
    let mut tool = texts(&view, "tool")[1..].to_vec();
    tool.sort();
    assert_eq!(tool, ["denied by the approver", r#"{"refunded":5,"refunds":1}"#], "{view}");
}

#[tokio::test]
async fn the_js_approver_delegates_and_exposes_the_summarizer_as_a_tool() {
    delegates_both_ways(&server().await).await;
}
